"""Xids by class (``checks.xid.tally``): the classes the node's metrics count them in must
be the severities the Xid check gives the same events, on every real kernel-log capture."""

from __future__ import annotations

from collections import Counter

import pytest
from gpu_data import capture

from slurm_ml.health.checks import Expectations, Thresholds, check_node
from slurm_ml.health.checks.xid import IGNORE, XID_CLASSES, tally, xid_class
from slurm_ml.health.probe_replay import ReplayProbe
from slurm_ml.health.snapshot import NodeSnapshot, XidEvent

TH = Thresholds()
#: Every kernel log in data/gpu/xid and the kit's, by what the check makes of it.
LOGS = [
    "xid/gpud_dmesg_decode_xid13_43.log",  # application faults only
    "xid/gpud_dmesg_h100_xid119_gsp_timeout.log",
    "xid/gpud_dmesg_xid48_63_94_dbe_rowremap.log",  # drain, flag and drain after job
    "xid/mleng_xid63_row_remapper_line.log",
    "xid/gpudpr46_dmesg_ctime_xid13_xid109.log",
    "xid/ogkm1150_kernel_xid45_after_xid145_149_nvlink.log",  # 45 judged as its cause
    "xid/nvtrust124_dmesg_nvswitch_sxid22013.log",  # SXids only: no Xid
]


def _log(rel: str) -> NodeSnapshot:
    return ReplayProbe.from_files([capture(rel)]).snapshot("gpu01")


@pytest.mark.parametrize("rel", LOGS)
def test_the_tally_classes_events_as_the_check_judges_them(rel: str) -> None:
    snap = _log(rel)
    findings = check_node(snap, Expectations(gpu_count=0), TH)
    judged: Counter[tuple[int | str, str]] = Counter()
    for f in findings:
        if f.check_id.startswith("xid."):
            where = f.gpu if f.gpu is not None else str(f.evidence.get("pci_bus_id") or "")
            judged[where, f.severity.value] += int(str(f.evidence["count"]))
    counted = tally(snap, TH)
    assert {k: v for k, v in counted.items() if k[1] != IGNORE} == judged
    assert sum(counted.values()) == len(snap.xids or ())
    assert {cls for _, cls in counted} <= set(XID_CLASSES)


def test_an_application_fault_is_counted_as_ignored() -> None:
    counted = tally(_log("xid/gpud_dmesg_decode_xid13_43.log"), TH)
    assert set(counted) == {("PCI:0000:38:00", IGNORE)} and counted.total() > 0


def test_a_follow_up_event_takes_its_causes_class() -> None:
    ev = XidEvent(45, "PCI:0000:97:00", "NVRM: Xid (PCI:0000:97:00): 45, pid=1, "
                  "Ch 00000008, caused by previous Xid 149")
    assert xid_class(ev, TH) == "drain"
    assert xid_class(XidEvent(45, None, "NVRM: Xid 45, pid=1"), TH) == IGNORE


def test_xid_154_is_classed_by_the_action_the_driver_asks_for() -> None:
    def action(text: str) -> str:
        return xid_class(XidEvent(154, None, f"GPU recovery action changed from 0x0 (None) "
                                             f"to {text}"), TH)

    assert [action("0x1 (GPU Reset)"), action("0x3 (Drain P2P)"), action("0x0 (None)")] == [
        "drain", "flag", IGNORE]


def test_no_kernel_log_read_counts_nothing() -> None:
    assert tally(NodeSnapshot(node="gpu01", gpus=(), xids=None), TH) == Counter()
