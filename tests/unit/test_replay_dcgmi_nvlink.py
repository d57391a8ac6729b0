"""The ``dcgmi nvlink --link-status`` parser (replay.dcgmi_nvlink).

The repository holds no real dcgmi capture: every text below is constructed in the layout
DCGM 3.x's ``dcgmi nvlink -s`` prints (title box, ``GPUs:``, one ``gpuId <n>:`` header
and one line of link-state letters per GPU, ``NvSwitches:``, the ``Key:`` line). None
is a real capture; each exercises one rule.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_ml.health.replay.dcgmi_nvlink import (
    looks_like_dcgmi_link_status,
    parse_dcgmi_link_status,
)
from slurm_ml.health.replay.errors import CaptureError
from slurm_ml.health.snapshot import NOT_SUPPORTED, NvLink

TITLE = "+----------------------+\n|  NvLink Link Status  |\n+----------------------+\n"
KEY = "\nKey: Up=U, Down=D, Disabled=X, Not Supported=_\n"
NO_SWITCHES = "NvSwitches:\n    No NvSwitches found.\n"


def _status(gpus: dict[int, str], switches: str = NO_SWITCHES) -> str:
    """A whole ``dcgmi nvlink -s`` output, constructed in DCGM 3.x's layout."""
    body = "".join(f"    gpuId {g}:\n        {' '.join(states)}\n" for g, states in gpus.items())
    return TITLE + "GPUs:\n" + body + switches + KEY


def _links(states: str) -> tuple[NvLink, ...]:
    value = {"U": True, "D": False, "X": False, "_": NOT_SUPPORTED}
    return tuple(NvLink(link=k, active=value[s]) for k, s in enumerate(states))


# Constructed in DCGM 3.x's layout, an 8x H100 (18 links each) node; not a real capture.
H100_UP = _status({g: "U" * 18 for g in range(8)})


def test_all_up() -> None:
    out = parse_dcgmi_link_status(H100_UP)
    assert list(out) == list(range(8))
    for links in out.values():
        assert links == tuple(NvLink(link=k, active=True) for k in range(18))


def test_one_gpu_all_down() -> None:
    # Constructed: gpuId 1 with every link down, as after a lost fabric; not a capture.
    text = _status({0: "U" * 18, 1: "D" * 18})
    out = parse_dcgmi_link_status(text)
    assert out[0] == _links("U" * 18)
    assert out[1] == tuple(NvLink(link=k, active=False) for k in range(18))


def test_mixed_states_and_nvswitches_ignored() -> None:
    # Constructed in DCGM 3.x's layout with NvSwitch lines (A100 class: 12 links, the
    # other 6 slots not supported); not a real capture.
    switches = ("NvSwitches:\n    physicalId 8:\n        " + " ".join("U" * 36) + "\n"
                "    physicalId 9:\n        " + " ".join("D" * 36) + "\n")
    text = _status({0: "U" * 12 + "_" * 6, 1: "UUDUUUUUUUXU" + "_" * 6}, switches)
    out = parse_dcgmi_link_status(text)
    assert set(out) == {0, 1}
    assert out[0] == _links("U" * 12 + "_" * 6)
    assert out[0][12] == NvLink(link=12, active=NOT_SUPPORTED)
    assert [link.link for link in out[1] if link.active is False] == [2, 10]  # D and X
    assert sum(link.active is True for link in out[1]) == 10


def test_no_gpus_found_and_fragments() -> None:
    text = TITLE + "GPUs:\n    No GPUs found.\n" + NO_SWITCHES + KEY
    assert parse_dcgmi_link_status(text) == {}
    # A pasted fragment: no title, no GPUs: header, letters without blanks, CRLF.
    fragment = "    gpuId 3:\r\n        UUUD\r\n    gpuId 2:\r\n        U U U U\r\n"
    assert parse_dcgmi_link_status(fragment) == {2: _links("UUUU"), 3: _links("UUUD")}
    assert parse_dcgmi_link_status(H100_UP.replace("\n", "\r\n")) == parse_dcgmi_link_status(
        H100_UP)
    # The same GPU twice (two captures concatenated), identical: kept once.
    assert parse_dcgmi_link_status(H100_UP + H100_UP) == parse_dcgmi_link_status(H100_UP)


@pytest.mark.parametrize(("text", "match"), [
    (TITLE + "GPUs:\n    gpuId 0:\n    gpuId 1:\n        U U\n" + NO_SWITCHES + KEY,
     r"^line 5: gpuId 0: no link-state line"),
    (TITLE + "GPUs:\n    gpuId 0:\n" + NO_SWITCHES + KEY, r"^line 5: gpuId 0: no link-state line"),
    ("GPUs:\n    gpuId 4:\n", r"^line 2: gpuId 4: no link-state line"),
    (_status({0: "UUUQ"}), r"^line 6: gpuId 0 link 3: unknown link state 'Q'"),
    (_status({0: "U" * 4}) + "GPUs:\n    gpuId 0:\n        D D D D\n",
     r"gpuId 0 given twice, differently"),
    ("Error: Unable to retrieve NvLink link status from DCGM. Return: Host engine connection "
     "invalid/disconnected.\n", r"^line 1: 'Error: Unable to retrieve NvLink.*not dcgmi nvlink"),
    ("", r"^empty text: no 'GPUs:' section"),
    ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-x)\n\t Link 0: 26.562 GB/s\n",
     r"^line 1: .*no 'GPUs:' section or 'gpuId <n>:' line"),
])
def test_errors(text: str, match: str) -> None:
    with pytest.raises(CaptureError, match=match):
        parse_dcgmi_link_status(text)


def test_looks_like_dcgmi_link_status() -> None:
    assert looks_like_dcgmi_link_status(H100_UP)
    assert looks_like_dcgmi_link_status("    gpuId 0:\n        U U\n")
    assert looks_like_dcgmi_link_status("    gpuId 0:\r\n        U U\r\n")
    for text in ("", "GPU 0: NVIDIA A100 (UUID: GPU-x)\n\t Link 0: 25 GB/s\n",
                 "| NVIDIA-SMI 550.90.07   Driver Version: 550.90.07   CUDA Version: 12.4 |\n",
                 "Error: unable to establish a connection to the specified host: localhost\n"):
        assert not looks_like_dcgmi_link_status(text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(
    [*H100_UP.splitlines(), "    gpuId 7:", "        U D X _", "        U ? U", "NvSwitches:",
     "    physicalId 8:", "GPUs:", "Key: x", "", "junk"]), max_size=25))
def test_any_mix_of_lines_parses_or_raises_capture_error(lines: list[str]) -> None:
    try:
        out = parse_dcgmi_link_status("\n".join(lines))
    except CaptureError:
        return
    for links in out.values():
        assert [link.link for link in links] == list(range(len(links)))
