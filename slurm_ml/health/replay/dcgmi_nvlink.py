"""``dcgmi nvlink --link-status`` (``dcgmi nvlink -s``) read back as NVLink states per GPU.

DCGM prints one line of link-state letters per GPU, in link order, under a
``gpuId <n>:`` header in the ``GPUs:`` section; the ``NvSwitches:`` section that
follows has the same shape under ``physicalId <n>:`` headers and is skipped (switch
ports are not GPU links). The letters, from the ``Key:`` line DCGM prints:

====  ==============  =========================================
U     Up              ``NvLink(k, active=True)``
D     Down            ``NvLink(k, active=False)``
X     Disabled        ``NvLink(k, active=False)``: not carrying traffic either
_     Not Supported   ``NvLink(k, active=NOT_SUPPORTED)``: no such link on this GPU
====  ==============  =========================================

The link number is the letter's position (blanks between letters are optional). The
``gpuId`` is DCGM's entity id, which on a node without MIG is the NVML index.

:class:`CaptureError` is raised for a ``gpuId`` header without a state line, a letter
other than these four, one GPU given twice differently, and text with neither a
``GPUs:`` section nor a ``gpuId`` header (a ``dcgmi`` ``Error: ...`` line, another
command's output, empty text): reading that as "no NVLink here" would be wrong.
``No GPUs found.`` under ``GPUs:`` yields ``{}``.
"""

from __future__ import annotations

import re

from slurm_ml.health.replay.errors import CaptureError
from slurm_ml.health.snapshot import NOT_SUPPORTED, NvLink, Reading

__all__ = ["looks_like_dcgmi_link_status", "parse_dcgmi_link_status"]

_TITLE = re.compile(r"NvLink Link Status", re.IGNORECASE)
_GPU = re.compile(r"gpuId\s+(\d{1,6})\s*:")
_GPU_LINE = re.compile(r"^[ \t]*gpuId[ \t]+\d{1,6}[ \t]*:[ \t]*\r?$", re.MULTILINE)
_STATES: dict[str, Reading[bool]] = {"U": True, "D": False, "X": False, "_": NOT_SUPPORTED}
_ELISION = frozenset({"...", "[...]", "…", "[…]"})


def looks_like_dcgmi_link_status(text: str) -> bool:
    """True for the ``NvLink Link Status`` title or a ``gpuId <n>:`` line: cheap."""
    return _TITLE.search(text) is not None or _GPU_LINE.search(text) is not None


def _links(line: str, number: int, gpu: int) -> tuple[NvLink, ...]:
    letters = [c for c in line if not c.isspace()]
    links: list[NvLink] = []
    for k, letter in enumerate(letters):
        if letter not in _STATES:
            raise CaptureError(
                f"line {number}: gpuId {gpu} link {k}: unknown link state {letter!r} "
                f"(dcgmi prints U, D, X or _)"
            )
        links.append(NvLink(link=k, active=_STATES[letter]))
    return tuple(links)


def parse_dcgmi_link_status(text: str) -> dict[int, tuple[NvLink, ...]]:
    """``dcgmi nvlink --link-status`` → gpuId → links, in link order."""
    out: dict[int, tuple[NvLink, ...]] = {}
    pending: tuple[int, int] | None = None  # (gpuId, line of its header) awaiting states
    in_switches = False
    seen_gpus = False
    first: tuple[int, str] | None = None  # first non-blank line, for the error message

    def expect_none() -> None:
        if pending is not None:
            gpu, line = pending
            raise CaptureError(f"line {line}: gpuId {gpu}: no link-state line follows")

    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line in _ELISION:
            continue
        if first is None:
            first = (number, line)
        if line == "GPUs:":
            expect_none()
            in_switches, seen_gpus = False, True
            continue
        if line == "NvSwitches:" or line.startswith("Key:"):
            expect_none()
            in_switches = line == "NvSwitches:"
            continue
        if in_switches:
            continue
        header = _GPU.fullmatch(line)
        if header is not None:
            expect_none()
            pending, seen_gpus = (int(header[1]), number), True
            continue
        if pending is not None:
            gpu = pending[0]
            links = _links(line, number, gpu)
            if out.get(gpu, links) != links:
                raise CaptureError(f"line {number}: gpuId {gpu} given twice, differently")
            out[gpu] = links
            pending = None
        # Anything else (the title box, "No GPUs found.") says nothing about a link.
    expect_none()
    if not seen_gpus:
        where = f"line {first[0]}: {first[1][:60]!r}: " if first else "empty text: "
        raise CaptureError(
            f"{where}no 'GPUs:' section or 'gpuId <n>:' line: not dcgmi nvlink --link-status"
        )
    return dict(sorted(out.items()))
