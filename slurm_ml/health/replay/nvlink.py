"""``nvidia-smi nvlink`` outputs read back as values: status, capabilities, counters.

All three share one layout: a ``GPU <n>: <name> (UUID: …)`` header, then indented
``Link <k>…`` lines for that GPU. Rules common to the three parsers:

* A line that is only ``...``, ``[...]`` or ``…`` (an author's elision) is skipped, so are
  blank lines and lines that fit no pattern; a link line before any GPU header cannot be
  attributed and is skipped too.
* Text without a single GPU header, but with other non-blank lines, raises
  :class:`CaptureError`: it is not an ``nvidia-smi nvlink`` capture (a Fabric Manager log,
  say), and reading it as "no NVLink here" would be wrong. Blank text is legal and yields
  ``{}``: it is what ``nvidia-smi nvlink -s`` prints on GPUs without NVLink (A10, L4, …).
* One link given twice with different values raises :class:`CaptureError`.

Status (``nvlink -s``): ``Link 3: 25 GB/s`` is an active link with ``speed_gbps=25.0``;
``Link 3: <inactive>`` is ``active=False``; any other value is kept as ``active=None``
(not read). The driver's ``NVML: Unable to retrieve NVLink information as all links are
inactive`` under a GPU header gives that GPU an empty tuple: no link is active, and the
capture does not say how many links there are. A GPU header with neither link lines nor
that message (a truncated paste) is left out: nothing was read for that GPU.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from slurm_ml.health.replay.errors import CaptureError
from slurm_ml.health.snapshot import NOT_SUPPORTED, NvLink, Reading

__all__ = [
    "CAPABILITY_KEYS",
    "NvLinkCounters",
    "merge_links",
    "parse_nvlink_capabilities",
    "parse_nvlink_counters",
    "parse_nvlink_status",
]

_GPU_HEADER = re.compile(r"GPU (\d{1,4}):(?:\s.*)?")
#: What posters put where they cut output short; under a GPU header it means that GPU's
#: link list is incomplete (parse_nvlink_status then leaves the GPU unread).
_ELISION = frozenset({"...", "....", "[...]", "…", "[…]"})
#: Spelled "inActive" by some drivers (B200, in the held-out fault captures) and
#: "inactive" by others (Azure NHC had to match both): compared without case.
_ALL_INACTIVE = "all links are inactive"
_STATUS = re.compile(r"Link (\d{1,3}):\s*([^:]*)")
_SPEED = re.compile(r"(\d{1,6}(?:\.\d{1,6})?)\s*(GB/s|MB/s)")
_CAPABILITY = re.compile(r"Link (\d{1,3}),\s*([^:]+?)\s*:\s*(true|false)", re.IGNORECASE)
_COUNTER = re.compile(r"Link (\d{1,3}):\s*([^:]+?)\s*:\s*(\S+)(?:\s+(KiB|MiB|GiB))?")
_INT = re.compile(r"\d{1,20}")

#: ``nvlink --capabilities`` labels → stable keys (NVML ``NVML_NVLINK_CAP_*``).
CAPABILITY_KEYS: Mapping[str, str] = {
    "p2p is supported": "p2p",
    "access to system memory supported": "sysmem_access",
    "p2p atomics supported": "p2p_atomics",
    "system memory atomics supported": "sysmem_atomics",
    "sli is supported": "sli",
    "link is supported": "valid",
}

_ERROR_COUNTERS: Mapping[str, str] = {
    "replay errors": "replay_errors",
    "recovery errors": "recovery_errors",
    "crc errors": "crc_errors",
    "crc flit errors": "crc_errors",
    "flit crc errors": "crc_errors",
}
_THROUGHPUT_COUNTERS: Mapping[str, str] = {
    "raw tx": "raw_tx_kib",
    "raw rx": "raw_rx_kib",
    "data tx": "data_tx_kib",
    "data rx": "data_rx_kib",
}
_KIB_PER_UNIT: Mapping[str, int] = {"KiB": 1, "MiB": 1024, "GiB": 1024 * 1024}


@dataclass(frozen=True, slots=True)
class NvLinkCounters:
    """Counters of one link, from ``nvlink -e`` (errors) or ``nvlink -gt r|d`` (traffic).

    Error counters are cumulative: a check compares them with a stored baseline.
    """

    link: int
    replay_errors: Reading[int] = None
    recovery_errors: Reading[int] = None
    crc_errors: Reading[int] = None
    raw_tx_kib: int | None = None
    raw_rx_kib: int | None = None
    data_tx_kib: int | None = None
    data_rx_kib: int | None = None
    #: Any other ``Link k: <label>: <int>`` counter, label as printed.
    other: Mapping[str, Reading[int]] = field(default_factory=dict)


def _label(text: str) -> str:
    return " ".join(text.split()).lower()


def _gpu_blocks(text: str) -> Iterator[tuple[int, int, str]]:
    """Yield (line number, GPU index, stripped line) for lines under a GPU header.

    Header lines themselves are yielded with an empty line so that callers see every GPU.
    """
    gpu: int | None = None
    seen_header = False
    other_content = False
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line in _ELISION:
            if gpu is not None:
                yield number, gpu, line
            continue
        header = _GPU_HEADER.fullmatch(line)
        if header:
            gpu = int(header.group(1))
            seen_header = True
            yield number, gpu, ""
            continue
        other_content = True
        if gpu is not None:
            yield number, gpu, line
    if other_content and not seen_header:
        raise CaptureError("no 'GPU <n>:' header: not an nvidia-smi nvlink capture")


def parse_nvlink_status(text: str) -> dict[int, tuple[NvLink, ...]]:
    """``nvidia-smi nvlink -s`` → GPU index → links, in link order."""
    links: dict[int, dict[int, NvLink]] = {}
    all_inactive: set[int] = set()
    elided: set[int] = set()
    for number, gpu, line in _gpu_blocks(text):
        if not line:
            continue
        if line in _ELISION:
            elided.add(gpu)
            continue
        if _ALL_INACTIVE in line.lower():
            all_inactive.add(gpu)
            continue
        match = _STATUS.fullmatch(line)
        if not match:
            continue
        k, value = int(match.group(1)), match.group(2).strip()
        speed = _SPEED.fullmatch(value)
        if value == "<inactive>":
            link = NvLink(link=k, active=False)
        elif speed:
            gbps = float(speed.group(1)) / (1000.0 if speed.group(2) == "MB/s" else 1.0)
            link = NvLink(link=k, active=True, speed_gbps=gbps)
        else:
            link = NvLink(link=k)
        per_gpu = links.setdefault(gpu, {})
        if per_gpu.get(k, link) != link:
            raise CaptureError(f"line {number}: GPU {gpu} link {k} given twice, differently")
        per_gpu[k] = link
    out: dict[int, tuple[NvLink, ...]] = {}
    most = max((len(v) for v in links.values()), default=0)
    for gpu in elided:
        if len(links.get(gpu, {})) < most:
            links.pop(gpu, None)  # the poster cut this GPU's links short: not read
    for gpu in sorted(links.keys() | all_inactive):
        per_gpu = links.get(gpu, {})
        if gpu in all_inactive and any(link.active is True for link in per_gpu.values()):
            raise CaptureError(f"GPU {gpu}: 'all links are inactive' beside an active link")
        out[gpu] = tuple(per_gpu[k] for k in sorted(per_gpu))
    return out


def parse_nvlink_capabilities(text: str) -> dict[int, dict[int, dict[str, bool]]]:
    """``nvidia-smi nvlink --capabilities`` → GPU → link → flag → value.

    Flags are the keys of :data:`CAPABILITY_KEYS` ("p2p", "sysmem_access", "p2p_atomics",
    "sysmem_atomics", "sli", "valid"); an unknown label is kept lower-cased. Only flags
    printed are present.
    """
    out: dict[int, dict[int, dict[str, bool]]] = {}
    for number, gpu, line in _gpu_blocks(text):
        match = _CAPABILITY.fullmatch(line) if line else None
        if not match:
            continue
        k, label = int(match.group(1)), _label(match.group(2))
        key = CAPABILITY_KEYS.get(label, label)
        value = match.group(3).lower() == "true"
        flags = out.setdefault(gpu, {}).setdefault(k, {})
        if flags.get(key, value) != value:
            raise CaptureError(f"line {number}: GPU {gpu} link {k} {key!r} given twice")
        flags[key] = value
    return out


def _counter_value(raw: str, unit: str | None) -> Reading[int] | None:
    """An integer reading, NOT_SUPPORTED for N/A, None when unreadable."""
    if raw in ("N/A", "[N/A]"):
        return NOT_SUPPORTED
    if not _INT.fullmatch(raw):
        return None
    return int(raw) * _KIB_PER_UNIT.get(unit or "KiB", 1)


def parse_nvlink_counters(text: str) -> dict[int, dict[int, NvLinkCounters]]:
    """``nvidia-smi nvlink -e`` / ``-gt r`` / ``-gt d`` → GPU → link → counters.

    Only counters printed are set; the rest stay None (not read). ``-gt`` traffic is in KiB.
    """
    fields: dict[int, dict[int, dict[str, Reading[int]]]] = {}
    others: dict[int, dict[int, dict[str, Reading[int]]]] = {}
    for number, gpu, line in _gpu_blocks(text):
        match = _COUNTER.fullmatch(line) if line else None
        if not match:
            continue
        k, printed, raw, unit = match.groups()
        link = int(k)
        label = _label(printed)
        value = _counter_value(raw, unit)
        if value is None:
            continue
        name = _ERROR_COUNTERS.get(label) or _THROUGHPUT_COUNTERS.get(label)
        if name is None:
            target, key = others.setdefault(gpu, {}).setdefault(link, {}), printed.strip()
        elif name in _THROUGHPUT_COUNTERS.values() and value is NOT_SUPPORTED:
            continue
        else:
            target, key = fields.setdefault(gpu, {}).setdefault(link, {}), name
        if target.get(key, value) != value:
            raise CaptureError(f"line {number}: GPU {gpu} link {link} {printed!r} given twice")
        target[key] = value
        fields.setdefault(gpu, {}).setdefault(link, {})
    return {
        gpu: {
            link: _counters(link, values, others.get(gpu, {}).get(link, {}))
            for link, values in sorted(fields[gpu].items())
        }
        for gpu in sorted(fields)
    }


def _counters(
    link: int, values: Mapping[str, Reading[int]], other: Mapping[str, Reading[int]]
) -> NvLinkCounters:
    def kib(name: str) -> int | None:
        value = values.get(name)
        return value if isinstance(value, int) else None

    return NvLinkCounters(
        link=link,
        replay_errors=values.get("replay_errors"),
        recovery_errors=values.get("recovery_errors"),
        crc_errors=values.get("crc_errors"),
        raw_tx_kib=kib("raw_tx_kib"),
        raw_rx_kib=kib("raw_rx_kib"),
        data_tx_kib=kib("data_tx_kib"),
        data_rx_kib=kib("data_rx_kib"),
        other=dict(other),
    )


def merge_links(
    status: Mapping[int, tuple[NvLink, ...]],
    counters: Mapping[int, Mapping[int, NvLinkCounters]],
) -> dict[int, tuple[NvLink, ...]]:
    """Status links with their error counters filled in from ``counters``.

    The status decides which GPUs and links exist: counters of a GPU or link the status
    does not list are dropped, and a counter the capture did not print leaves the link's
    value as it was.
    """
    merged: dict[int, tuple[NvLink, ...]] = {}
    for gpu, links in status.items():
        per_link = counters.get(gpu, {})
        out: list[NvLink] = []
        for link in links:
            c = per_link.get(link.link)
            if c is None:
                out.append(link)
                continue
            out.append(
                dataclasses.replace(
                    link,
                    replay_errors=_newer(link.replay_errors, c.replay_errors),
                    recovery_errors=_newer(link.recovery_errors, c.recovery_errors),
                    crc_errors=_newer(link.crc_errors, c.crc_errors),
                )
            )
        merged[gpu] = tuple(out)
    return merged


def _newer(old: Reading[int], new: Reading[int]) -> Reading[int]:
    return old if new is None else new
