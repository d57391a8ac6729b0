"""Replay parsers against every real capture in data/gpu/{topo,nvlink,xid}.

Each table has one row per capture file (the test id is the file name); the facts in a row
were read off that file by hand. ``test_every_capture_has_a_row`` keeps the tables in step
with the directories. Short texts written inline below are labelled as made up: they
exercise one rule each and are not captures.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
from gpu_data import FROM_THREADS, GPU_DATA, capture
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_ml.health.replay.errors import CaptureError
from slurm_ml.health.replay.nvlink import (
    NvLinkCounters,
    merge_links,
    parse_nvlink_capabilities,
    parse_nvlink_counters,
    parse_nvlink_status,
)
from slurm_ml.health.replay.topo import TopoMatrix, nvlink_count, parse_topo_matrix
from slurm_ml.health.replay.xid import (
    caused_by_xids,
    line_time,
    parse_fabricmanager_errors,
    parse_sxids,
    parse_xids,
)
from slurm_ml.health.snapshot import NOT_SUPPORTED, NvLink

TOPO, NVLINK, XID = GPU_DATA / "topo", GPU_DATA / "nvlink", GPU_DATA / "xid"


def _at(kind: str, name: str) -> Path:
    return capture(f"{kind}/{name}")


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _epoch(utc: str) -> float:
    """Epoch seconds of an ISO time written without zone, read as UTC."""
    return datetime.fromisoformat(utc).replace(tzinfo=UTC).timestamp()


# --------------------------------------------------------------------------- topo


@dataclasses.dataclass(frozen=True)
class TopoFacts:
    gpus: int
    kind: str
    #: One cell for every GPU pair, or (i, j) → cell for each pair.
    cells: str | dict[tuple[int, int], str]
    nics: tuple[str, ...] = ()


def _l40s_cells() -> dict[tuple[int, int], str]:
    node = {(0, 1), (1, 0), (2, 3), (3, 2)}
    return {(i, j): "NODE" if (i, j) in node else "SYS" for i in range(4) for j in range(4) if i != j}


NICS4 = ("NIC0", "NIC1", "NIC2", "NIC3")
TOPO_TABLE: dict[str, TopoFacts] = {
    "llmaction_a800x8_nv8_nic_topo.txt": TopoFacts(8, "connection", "NV8", NICS4),
    # Header lacks the NIC columns and affinities are cut; the NIC rows still name 4 NICs.
    "llmaction_h800x8_nv8_nic_topo_pastedamaged.txt": TopoFacts(8, "connection", "NV8", NICS4),
    "missalign106_l40s_x4_pcie_nic_topo.txt": TopoFacts(
        4, "connection", _l40s_cells(), ("NIC0", "NIC1")
    ),
    "mleng_a100x8_nv12_topo.txt": TopoFacts(8, "connection", "NV12"),
    "mleng_h100x8_nv18_topo.txt": TopoFacts(8, "connection", "NV18"),
    "mleng_h100x8_topo_p2p_r.txt": TopoFacts(8, "p2p", "OK"),
    "mleng_l4x2_topo_p2p_r_cns.txt": TopoFacts(2, "p2p", "CNS"),
    "nccl1617_h100_x4_nv6_nic_topo_matrix.txt": TopoFacts(4, "connection", "NV6", NICS4),
}


@pytest.mark.parametrize("name", sorted(TOPO_TABLE), ids=sorted(TOPO_TABLE))
def test_topo_capture(name: str) -> None:
    facts = TOPO_TABLE[name]
    matrix = parse_topo_matrix(_read(_at("topo", name)))
    assert matrix.gpus == tuple(f"GPU{i}" for i in range(facts.gpus))
    assert matrix.kind == facts.kind
    assert matrix.nics == facts.nics
    assert matrix.problems == ()
    pairs = {(i, j) for i in range(facts.gpus) for j in range(facts.gpus) if i != j}
    expected = (
        dict.fromkeys(pairs, facts.cells) if isinstance(facts.cells, str) else facts.cells
    )
    assert matrix.links == expected


def test_topo_nvlink_count_per_capture() -> None:
    counts = {
        name: {nvlink_count(c) for c in parse_topo_matrix(_read(_at("topo", name))).links.values()}
        for name in TOPO_TABLE
    }
    assert counts["mleng_a100x8_nv12_topo.txt"] == {12}
    assert counts["mleng_h100x8_nv18_topo.txt"] == {18}
    assert counts["llmaction_a800x8_nv8_nic_topo.txt"] == {8}
    assert counts["nccl1617_h100_x4_nv6_nic_topo_matrix.txt"] == {6}
    assert counts["missalign106_l40s_x4_pcie_nic_topo.txt"] == {None}
    assert counts["mleng_h100x8_topo_p2p_r.txt"] == {None}


def test_topo_damaged_paste_matches_the_clean_capture_of_the_same_node() -> None:
    clean = parse_topo_matrix(_read(_at("topo", "llmaction_a800x8_nv8_nic_topo.txt")))
    damaged = parse_topo_matrix(_read(_at("topo", "llmaction_h800x8_nv8_nic_topo_pastedamaged.txt")))
    assert damaged == clean


def test_nvlink_count() -> None:
    assert nvlink_count("NV12") == 12
    assert nvlink_count(" NV18 ") == 18
    for cell in ("SYS", "PIX", "X", "OK", "NV", "NVX", ""):
        assert nvlink_count(cell) is None


def _cut_lines(text: str, keep: int) -> str:
    return "\n".join(text.splitlines()[:keep])


def test_topo_missing_rows_are_reported_not_invented() -> None:
    text = _cut_lines(_read(_at("topo", "mleng_a100x8_nv12_topo.txt")), 1 + 5)  # header + GPU0..4
    matrix = parse_topo_matrix(text)
    assert matrix.gpus == tuple(f"GPU{i}" for i in range(8))
    assert "no row for GPU5" in matrix.problems
    assert (5, 0) not in matrix.links and (0, 5) in matrix.links
    assert len(matrix.links) == 5 * 7


def test_topo_short_row_and_junk_cells_are_dropped_with_a_note() -> None:
    lines = _read(_at("topo", "mleng_h100x8_nv18_topo.txt")).splitlines()
    lines[3] = lines[3][:30]  # GPU2 row cut mid-line: GPU0..GPU2 cells only
    lines[4] = lines[4].replace("NV18", "-31,64", 1)  # GPU3, column GPU0
    matrix = parse_topo_matrix("\n".join(lines))
    assert (2, 1) in matrix.links and (2, 3) not in matrix.links
    assert (3, 0) not in matrix.links and (3, 1) in matrix.links
    assert any("row GPU2 has no cell for GPU3" in p for p in matrix.problems)
    assert any("'-31,64'" in p for p in matrix.problems)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Legend:\n  X    = Self\n",
        _read(_at("topo", "mleng_a100x8_nv12_topo.txt")).splitlines()[0],  # header only
    ],
    ids=["empty", "legend-only", "header-only"],
)
def test_topo_unusable_raises(text: str) -> None:
    with pytest.raises(CaptureError):
        parse_topo_matrix(text)


def test_topo_mixed_kinds_raise() -> None:
    text = _read(_at("topo", "mleng_l4x2_topo_p2p_r_cns.txt")).replace("CNS", "NV4", 1)
    with pytest.raises(CaptureError, match="mixes"):
        parse_topo_matrix(text)


def test_topo_asymmetric_connection_noted() -> None:
    text = _read(_at("topo", "mleng_a100x8_nv12_topo.txt")).replace("NV12", "SYS", 1)  # GPU0→GPU1
    matrix = parse_topo_matrix(text)
    assert matrix.links[(0, 1)] == "SYS" and matrix.links[(1, 0)] == "NV12"
    assert any("GPU0-GPU1" in p for p in matrix.problems)


# --------------------------------------------------------------------------- nvlink


@dataclasses.dataclass(frozen=True)
class NvlinkFacts:
    #: GPU → (links listed, links active, speed of the active ones); None: CaptureError.
    status: dict[int, tuple[int, int, float | None]] | None
    #: GPU → links with capability flags; None: CaptureError.
    capabilities: dict[int, int] | None
    #: GPU → links with counters; None: CaptureError.
    counters: dict[int, int] | None
    #: Fabric Manager NVSwitch errors: SXid codes.
    fm_errors: tuple[int, ...] = ()


A100_12 = (12, 12, 25.0)
H800_8 = (8, 8, 26.562)
NVLINK_TABLE: dict[str, NvlinkFacts] = {
    "awsome_p4de_a100_gpu0_nvlink_status.txt": NvlinkFacts({0: A100_12}, {}, {}),
    # "NVML: Unable to retrieve NVLink information as all links are inactive" under GPU 6.
    "azhc_a100_gpu6_nvlink_status_all_inactive.txt": NvlinkFacts({6: (0, 0, None)}, {}, {}),
    "azhc_a100_gpu7_nvlink_status_good.txt": NvlinkFacts({7: A100_12}, {}, {}),
    "gpud_a100x8_nvlink_status.txt": NvlinkFacts(dict.fromkeys(range(8), A100_12), {}, {}),
    # Not an nvlink capture: no "GPU n:" header, so the nvlink parsers refuse it rather
    # than report "no NVLink here"; its one NVSwitch error is read by
    # parse_fabricmanager_errors.
    "gpud_fabricmanager_nvswitch_nonfatal_12028.log": NvlinkFacts(None, None, None, (12028,)),
    # GPUs 2-6 elided with "...".
    "llmaction_h800x8_nvlink_capabilities_elided.txt": NvlinkFacts(
        {}, dict.fromkeys((0, 1, 7), 8), {}
    ),
    # GPUs 3-5 elided with "...".
    "llmaction_h800x8_nvlink_gt_r_elided.txt": NvlinkFacts(
        {}, {}, dict.fromkeys((0, 1, 2, 6, 7), 8)
    ),
    # GPUs 2-6 elided with "...".
    "llmaction_h800x8_nvlink_status_elided.txt": NvlinkFacts(
        dict.fromkeys((0, 1, 7), H800_8), {}, {}
    ),
}


@pytest.mark.parametrize("name", sorted(NVLINK_TABLE), ids=sorted(NVLINK_TABLE))
def test_nvlink_capture(name: str) -> None:
    facts = NVLINK_TABLE[name]
    text = _read(_at("nvlink", name))

    if facts.status is None:
        with pytest.raises(CaptureError):
            parse_nvlink_status(text)
    else:
        status = parse_nvlink_status(text)
        seen: dict[int, tuple[int, int, object]] = {}
        for gpu, links in status.items():
            assert [link.link for link in links] == list(range(len(links)))
            active = [link for link in links if link.active is True]
            speeds = {link.speed_gbps for link in active}
            assert len(speeds) <= 1
            seen[gpu] = (len(links), len(active), speeds.pop() if speeds else None)
        assert seen == facts.status

    if facts.capabilities is None:
        with pytest.raises(CaptureError):
            parse_nvlink_capabilities(text)
    else:
        caps = parse_nvlink_capabilities(text)
        assert {gpu: len(links) for gpu, links in caps.items()} == facts.capabilities

    if facts.counters is None:
        with pytest.raises(CaptureError):
            parse_nvlink_counters(text)
    else:
        counters = parse_nvlink_counters(text)
        assert {gpu: len(links) for gpu, links in counters.items()} == facts.counters

    assert tuple(e.sxid for e in parse_fabricmanager_errors(text)) == facts.fm_errors
    assert parse_xids(text) == ()
    assert parse_sxids(text) == ()


def test_all_inactive_gpu_has_no_active_link_where_the_good_one_has_twelve() -> None:
    bad = parse_nvlink_status(_read(_at("nvlink", "azhc_a100_gpu6_nvlink_status_all_inactive.txt")))
    good = parse_nvlink_status(_read(_at("nvlink", "azhc_a100_gpu7_nvlink_status_good.txt")))
    assert bad == {6: ()}
    assert sum(link.active is True for link in bad[6]) == 0
    assert sum(link.active is True for link in good[7]) == 12
    assert good[7][11] == NvLink(link=11, active=True, speed_gbps=25.0)


def test_h800_capabilities_flags() -> None:
    caps = parse_nvlink_capabilities(
        _read(_at("nvlink", "llmaction_h800x8_nvlink_capabilities_elided.txt"))
    )
    expected = {
        "p2p": True,
        "sysmem_access": True,
        "p2p_atomics": True,
        "sysmem_atomics": True,
        "sli": True,
        "valid": False,  # "Link is supported: false" on every link of a working H800
    }
    assert all(flags == expected for links in caps.values() for flags in links.values())


def test_gt_r_counters_are_traffic_not_errors() -> None:
    text = _read(_at("nvlink", "llmaction_h800x8_nvlink_gt_r_elided.txt"))
    counters = parse_nvlink_counters(text)
    assert counters[0][0] == NvLinkCounters(link=0, raw_tx_kib=25305739, raw_rx_kib=25554089)
    assert counters[7][7].raw_rx_kib == 8731188
    status = parse_nvlink_status(_read(_at("nvlink", "llmaction_h800x8_nvlink_status_elided.txt")))
    merged = merge_links(status, counters)
    # No error counter was printed, so the merge leaves them not read.
    assert merged == status
    assert all(link.replay_errors is None for links in merged.values() for link in links)


# Made up, not a capture: the ``nvidia-smi nvlink -e`` layout (as quoted in
# stas00/ml-engineering compute/accelerator/nvidia/debug.md) with invented values.
MADE_UP_NVLINK_E = """\
GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-made-up)
         Link 0: Replay Errors: 0
         Link 0: Recovery Errors: 0
         Link 0: CRC Errors: 0

         Link 1: Replay Errors: 7
         Link 1: Recovery Errors: N/A
         Link 1: CRC Errors: 3

         [...]

         Link 2: Rx Errors: 5
"""


def test_error_counters_merge_into_links() -> None:
    counters = parse_nvlink_counters(MADE_UP_NVLINK_E)
    assert counters[0][1] == NvLinkCounters(
        link=1, replay_errors=7, recovery_errors=NOT_SUPPORTED, crc_errors=3
    )
    assert counters[0][2].other == {"Rx Errors": 5}
    status = {0: (NvLink(0, active=True), NvLink(1, active=True)), 1: (NvLink(0, active=False),)}
    merged = merge_links(status, counters)
    assert merged[0][0] == NvLink(0, active=True, replay_errors=0, recovery_errors=0, crc_errors=0)
    assert merged[0][1].replay_errors == 7
    assert merged[0][1].recovery_errors is NOT_SUPPORTED
    assert merged[1] == status[1]  # no counters for GPU 1: unchanged
    assert len(merged[0]) == 2  # link 2 has counters but no status: not added


def test_nvlink_status_inactive_and_unknown_values() -> None:
    # Made up, not a capture.
    text = "GPU 3: X (UUID: y)\n\tLink 0: 25 GB/s\n\tLink 1: <inactive>\n\tLink 2: N/A\n"
    assert parse_nvlink_status(text) == {
        3: (NvLink(0, active=True, speed_gbps=25.0), NvLink(1, active=False), NvLink(2))
    }


def test_nvlink_status_blank_is_no_nvlink_and_conflicts_raise() -> None:
    assert parse_nvlink_status("") == {}
    assert parse_nvlink_status("\n  \n") == {}
    with pytest.raises(CaptureError, match="twice"):
        parse_nvlink_status("GPU 0: x\n Link 0: 25 GB/s\n Link 0: <inactive>\n")


# --------------------------------------------------------------------------- xid


@dataclasses.dataclass(frozen=True)
class XidFacts:
    xids: dict[int, int]  # Xid code → events
    pcis: frozenset[str]
    first_timestamp: float | None
    pids: frozenset[int]  # known pids; events with pid='<unknown>' have None
    unknown_pids: int = 0
    sxids: dict[int, int] = dataclasses.field(default_factory=dict)
    caused_by: dict[int, int] = dataclasses.field(default_factory=dict)


XID_TABLE: dict[str, XidFacts] = {
    # dmesg --decode + ISO time with a comma before the microseconds.
    "gpud_dmesg_decode_xid13_43.log": XidFacts(
        {13: 629, 43: 7},
        frozenset({"PCI:0000:38:00"}),
        _epoch("2025-01-21T02:21:33.498559"),
        frozenset({2815167, 2823801, 2839444, 2877200, 2886782, 2897677, 2924364}),
        unknown_pids=629,
    ),
    # dmesg -T (ctime); RPC history lines and a stack trace between the events.
    "gpud_dmesg_h100_xid119_gsp_timeout.log": XidFacts(
        {119: 5},
        frozenset({"PCI:0000:9b:00"}),
        _epoch("2025-02-23T16:24:18"),
        frozenset({2024380, 1263500, 1240590}),
    ),
    "gpud_dmesg_xid48_63_94_dbe_rowremap.log": XidFacts(
        {48: 1, 63: 1, 94: 9},
        frozenset({"PCI:0000:19:00"}),
        _epoch("2024-11-15T12:02:03.470068"),
        frozenset({1248209}),
        unknown_pids=3,
    ),
    "gpudpr46_dmesg_ctime_xid13_xid109.log": XidFacts(
        {13: 3, 109: 1},
        frozenset({"PCI:0000:cb:00"}),
        _epoch("2024-08-30T11:43:09"),
        frozenset({1797828}),
        unknown_pids=3,
    ),
    # A bare line: no time, "pid=" but no "name=".
    "mleng_xid63_row_remapper_line.log": XidFacts(
        {63: 1}, frozenset({"PCI:0000:10:1c"}), None, frozenset({1896})
    ),
    # Boot-relative dmesg; NVSwitch SXid lines only (3 lines per switch event).
    "nvtrust124_dmesg_nvswitch_sxid22013.log": XidFacts(
        {}, frozenset(), None, frozenset(), sxids={22013: 8}
    ),
    # "kernel:" prefix, no time; the Xid 145/149 lines themselves are not in the quote.
    "ogkm1150_kernel_xid45_after_xid145_149_nvlink.log": XidFacts(
        {45: 7},
        frozenset({"PCI:0000:dc:00", "PCI:0000:ed:00", "PCI:0000:ba:00", "PCI:0000:97:00"}),
        None,
        frozenset({1818987, 1818989, 1818990, 1818992}),
        caused_by={145: 5, 149: 2},
    ),
}


@pytest.mark.parametrize("name", sorted(XID_TABLE), ids=sorted(XID_TABLE))
def test_xid_capture(name: str) -> None:
    facts = XID_TABLE[name]
    text = _read(_at("xid", name))
    events = parse_xids(text)
    assert Counter(e.xid for e in events) == Counter(facts.xids)
    assert {e.pci_bus_id for e in events} == facts.pcis
    assert {e.pid for e in events if e.pid is not None} == facts.pids
    assert sum(e.pid is None for e in events) == facts.unknown_pids
    if events:
        assert events[0].timestamp == pytest.approx(facts.first_timestamp)
        if facts.first_timestamp is None:
            assert all(e.timestamp is None for e in events)
        else:
            times = [e.timestamp for e in events]
            assert None not in times
            assert times == sorted(times)  # type: ignore[type-var]
    assert all(e.message and "pid=" not in e.message and "name=" not in e.message for e in events)
    assert Counter(c for e in events for c in caused_by_xids(e)) == Counter(facts.caused_by)
    assert Counter(e.sxid for e in parse_sxids(text)) == Counter(facts.sxids)
    assert parse_fabricmanager_errors(text) == ()


def test_xid_messages_and_fields() -> None:
    events = parse_xids(_read(_at("xid", "gpud_dmesg_xid48_63_94_dbe_rowremap.log")))
    assert events[0].message.startswith("An uncorrectable double bit error (DBE)")
    assert events[0].pid is None  # pid='<unknown>'
    assert events[1].message == (
        "Row Remapper: New row (0x00000012bac1c3e0) marked for remapping, reset gpu to activate."
    )
    assert events[-1].message == "Ch 0000000f" and events[-1].pid == 1248209
    (line,) = parse_xids(_read(_at("xid", "mleng_xid63_row_remapper_line.log")))
    assert line.message == "Row Remapper: New row marked for remapping, reset gpu to activate."


def test_sxid_events() -> None:
    events = parse_sxids(_read(_at("xid", "nvtrust124_dmesg_nvswitch_sxid22013.log")))
    assert events[1].message == "Non-fatal, Link 44 Minion Link DLREQ interrupt"
    assert events[1].switch_pci == "PCI:0000:04:00.0"
    assert events[1].device == "nvidia-nvswitch3"
    assert events[0].timestamp == pytest.approx(38.175561)
    assert line_time("[   38.175561] ").kind == "boot"


def test_fabricmanager_error() -> None:
    (event,) = parse_fabricmanager_errors(
        _read(_at("nvlink", "gpud_fabricmanager_nvswitch_nonfatal_12028.log"))
    )
    assert event.sxid == 12028
    assert event.switch_pci == "00000000:86:00.0"
    assert event.message.startswith("non-fatal error 12028") and event.message.endswith("port 61")
    assert event.timestamp == _epoch("2025-02-27T15:10:02")


@pytest.mark.parametrize(
    ("prefix", "seconds", "kind"),
    [
        ("[  123.456789] ", 123.456789, "boot"),
        ("[Mon Jan  1 00:00:00 2024] ", _epoch("2024-01-01T00:00:00"), "epoch"),
        ("2024-01-01T01:00:00+01:00 host kernel: ", _epoch("2024-01-01T00:00:00"), "epoch"),
        ("2024-01-01T00:00:00.5+0000 host kernel: ", _epoch("2024-01-01T00:00:00.5"), "epoch"),
        ("kern  :warn  : 2024-01-01T00:00:00,250000+00:00 ", _epoch("2024-01-01T00:00:00.25"), "epoch"),
        ("Jan  1 00:00:00 host kernel: ", None, "none"),
        ("Jan  1 00:00:00 host kernel: [  12.5] ", 12.5, "boot"),
        ("kernel: ", None, "none"),
        ("[Mon Feb 30 00:00:00 2024] ", None, "none"),  # not a date
    ],
    ids=["dmesg", "ctime", "iso-offset", "journald-short-iso", "decode-iso", "syslog",
         "syslog-with-boot", "none", "bad-date"],
)  # fmt: skip
def test_line_time(prefix: str, seconds: float | None, kind: str) -> None:
    got = line_time(prefix)
    assert got.kind == kind
    assert got.seconds == pytest.approx(seconds)


def test_syslog_xid_has_no_timestamp() -> None:
    # Made up, not a capture: one syslog line in the usual layout.
    text = "Feb 23 16:24:18 gpu07 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=12, name=python, GPU has fallen off the bus.\n"
    (event,) = parse_xids(text)
    assert (event.xid, event.pid, event.timestamp) == (79, 12, None)
    assert event.message == "GPU has fallen off the bus."


# --------------------------------------------------------------------------- coverage


@pytest.mark.parametrize(
    ("directory", "table"),
    [(TOPO, TOPO_TABLE), (NVLINK, NVLINK_TABLE), (XID, XID_TABLE)],
    ids=["topo", "nvlink", "xid"],
)
def test_every_capture_has_a_row(directory: Path, table: dict[str, object]) -> None:
    files = {p.name for p in directory.iterdir() if p.is_file()}
    assert files, f"no captures under {directory}"
    kit = {Path(rel).name for rel in FROM_THREADS if Path(rel).parent.name == directory.name}
    assert set(table) == files | kit


# --------------------------------------------------------------------------- fuzz

_ALL_CAPTURE_LINES = sorted(
    {
        line
        for directory in (TOPO, NVLINK, XID)
        for path in sorted(directory.iterdir())
        for line in _read(path).splitlines()[:200]
    }
)
_PARSERS = (
    parse_topo_matrix,
    parse_nvlink_status,
    parse_nvlink_capabilities,
    parse_nvlink_counters,
    parse_xids,
    parse_sxids,
    parse_fabricmanager_errors,
)


def _only_capture_errors(text: str) -> None:
    for parse in _PARSERS:
        with contextlib.suppress(CaptureError):
            parse(text)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_fuzz_arbitrary_text(text: str) -> None:
    _only_capture_errors(text)


_line = st.one_of(
    st.sampled_from(_ALL_CAPTURE_LINES),
    st.sampled_from(_ALL_CAPTURE_LINES).map(lambda s: s[: len(s) // 2]),
    st.text(alphabet="GPU NVLinkX0123456789:.,[]<>()-=/\t'", max_size=40),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_line, max_size=40))
def test_fuzz_shuffled_capture_lines(lines: list[str]) -> None:
    _only_capture_errors("\n".join(lines))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(TOPO_TABLE)), st.integers(min_value=0, max_value=3000))
def test_fuzz_truncated_topo(name: str, cut: int) -> None:
    text = _read(_at("topo", name))[:cut]
    try:
        matrix = parse_topo_matrix(text)
    except CaptureError:
        return
    assert isinstance(matrix, TopoMatrix)
    assert all(cell != "X" for cell in matrix.links.values())
