"""Xids from the live kernel log on real nodes, judged once (since the node's last hook)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from hooks_helpers import CFG, snapshot

from slurm_ml.health.checks import check_node
from slurm_ml.health.probe_kernel_log import KernelLogXids
from slurm_ml.health.probe_replay import ReplayProbe
from slurm_ml.hooks.xidmark import read_mark, write_mark

REAL_LOG = (Path(__file__).resolve().parents[2] / "data" / "gpu" / "xid"
            / "gpud_dmesg_h100_xid119_gsp_timeout.log")
# An Xid line as `dmesg --time-format iso` prints it, on GPU 3 of hooks_helpers' node
# (bus 0x37) and one on GPU 5 (bus 0x57): ISO times give epoch seconds.
ISO_LOG = (
    "2026-11-30T11:00:00,000000+00:00 NVRM: Xid (PCI:0000:37:00): 79, pid=1, "
    "name=python, GPU has fallen off the bus.\n"
    "2026-11-30T12:30:00,000000+00:00 NVRM: Xid (PCI:0000:57:00): 48, pid=2, "
    "name=python, An uncorrectable double bit error (DBE) has been detected.\n"
)


def probe(text: str | None) -> KernelLogXids:
    """An NVML-like probe (no Xid history) under the kernel-log reader."""
    no_xids = ReplayProbe(dataclasses.replace(snapshot(), xids=None))
    return KernelLogXids(no_xids, read=lambda: text)


def test_xids_come_from_the_kernel_log_when_the_probe_has_none() -> None:
    snap = probe(ISO_LOG).snapshot("gpu03")

    assert snap.xids is not None
    assert [e.xid for e in snap.xids] == [79, 48]
    assert snap.xids[0].timestamp is not None


def test_a_job_sees_only_its_own_gpus_xids() -> None:
    snap = probe(ISO_LOG).snapshot("gpu03", gpus=[3])

    assert [e.xid for e in snap.xids or ()] == [79]


def test_unreadable_kernel_log_leaves_xids_unread_never_an_error() -> None:
    snap = probe(None).snapshot("gpu03")

    assert snap.xids is None
    assert not snap.errors


def test_only_xids_after_the_mark_are_judged(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from slurm_ml.health.checks import Thresholds, expectations_for

    cls = CFG.node_class_of("gpu03")
    assert cls is not None
    exp = expectations_for(cls, CFG.gpu_types[cls.gpu_type])
    snap = probe(ISO_LOG).snapshot("gpu03")
    noon = datetime(2026, 11, 30, 12, 0, tzinfo=UTC).timestamp()

    write_mark(tmp_path, "gpu03", noon)
    since = read_mark(tmp_path, "gpu03")
    ids = {f.check_id for f in check_node(snap, exp, Thresholds(), xid_since=since)}

    assert since == noon
    assert "xid.48" in ids and "xid.79" not in ids  # 79 was logged before the last run


def test_missing_or_corrupt_mark_means_judge_everything(tmp_path: Path) -> None:
    assert read_mark(tmp_path, "gpu03") is None
    (tmp_path / "xid-mark-gpu03").write_text("yesterday")
    assert read_mark(tmp_path, "gpu03") is None
    assert read_mark(None, "gpu03") is None


def test_real_dmesg_capture_parses_through_the_kernel_log_probe() -> None:
    snap = probe(REAL_LOG.read_text()).snapshot("gpu03")

    assert snap.xids is not None and {e.xid for e in snap.xids} == {119}
