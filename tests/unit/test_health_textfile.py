"""The periodic check's textfile (``health.textfile.render``) on real captures, read back
with prometheus_client's own parser: what each family holds, and what it leaves out.

Snapshots come from the replayed captures the health tests judge (``ReplayProbe``), their
findings from ``check_node``, as the periodic check makes them.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from builders import slurm_node
from gpu_data import capture
from hooks_helpers import snapshot
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from slurm_ml.health.checks import Expectations, Finding, Severity, Thresholds, check_node
from slurm_ml.health.probe_replay import ReplayProbe
from slurm_ml.health.snapshot import NodeSnapshot, XidEvent
from slurm_ml.health.textfile import METRICS, NodeHealth, render

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
IDLE_PCT = 1.0  # policy.reclaim.zombie_util_pct's default
Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def replayed(*rels: str, node: str = "gpu01") -> NodeSnapshot:
    return ReplayProbe.from_files([capture(r) for r in rels]).snapshot(node)


def checked(snap: NodeSnapshot, exp: Expectations, **fields: object) -> NodeHealth:
    """What a periodic run of ``snap`` hands the textfile (its findings, its verdict)."""
    findings = tuple(check_node(snap, exp, Thresholds()))
    base = NodeHealth(snap.node, NOW, "recorded", not any(f.severity.drains for f in findings),
                      IDLE_PCT, findings, snap)
    return replace(base, **fields)  # type: ignore[arg-type]


def text(health: NodeHealth) -> str:
    return generate_latest(render(health)).decode()


def series(health: NodeHealth) -> Series:
    """Every sample, keyed by family and its labels but ``node`` (checked to be the
    node's), read by prometheus_client's parser."""
    out: Series = {}
    for family in text_string_to_metric_families(text(health)):
        for s in family.samples:
            labels = dict(s.labels)
            assert labels.pop("node") == health.node
            key = (s.name, tuple(sorted(labels.items())))
            assert key not in out, f"duplicate series {key}"
            out[key] = s.value
    return out


def of(got: Series, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: v for (n, labels), v in got.items() if n == name}


def one(got: Series, name: str, **labels: str) -> float:
    return got[name, tuple(sorted(labels.items()))]


# ------------------------------------------------------------- verdict and node state


def test_a_pass_and_when_it_ran() -> None:
    health = checked(replayed("smi-q/gpud_h100x8_535.161.08_q.txt"), Expectations(gpu_count=8),
                     action="pass")
    got = series(health)
    assert one(got, "slurm_ml_node_health_pass") == 1
    assert one(got, "slurm_ml_node_health_last_check_timestamp_seconds") == NOW.timestamp()
    assert one(got, "slurm_ml_node_health_action", action="pass") == 1
    # A -q capture holds no kernel log and no topology: probe.missing flags, no drain.
    flags = sum(1 for f in health.findings if f.severity is Severity.FLAG)
    assert flags > 0
    assert of(got, "slurm_ml_node_health_findings") == {
        (("severity", "drain"),): 0, (("severity", "drain_after_job"),): 0,
        (("severity", "flag"),): flags}


def test_a_drain_finding_fails_the_check_and_each_severity_is_counted() -> None:
    health = checked(replayed("smi-q/gpud_a10_535.129.03_q_remap_pending.txt"),
                     Expectations(gpu_count=1))
    got = series(health)
    assert one(got, "slurm_ml_node_health_pass") == 0
    assert one(got, "slurm_ml_node_health_findings", severity="drain_after_job") == 1
    flags = sum(1 for f in health.findings if f.severity is Severity.FLAG)
    assert one(got, "slurm_ml_node_health_findings", severity="flag") == flags


def test_drain_state_as_slurm_shows_it() -> None:
    snap = replayed("smi-q/gpud_h100x8_535.161.08_q.txt")

    def drained(**node: object) -> tuple[float, float]:
        got = series(checked(snap, Expectations(gpu_count=8),
                             slurm_node=slurm_node("gpu01", **node)))  # type: ignore[arg-type]
        return (one(got, "slurm_ml_node_drained"),
                one(got, "slurm_ml_node_drained_by_slurm_ml"))

    assert drained() == (0, 0)
    assert drained(drained=True, reason="slurm-ml: remap.pending gpu0 (pending)") == (1, 1)
    assert drained(drained=True, reason="admin: DIMM") == (1, 0)
    assert drained(state="DRAINING", reason="slurm-ml: xid.79 gpu3") == (1, 1)
    # An owned reason on a node that is no longer drained is no owned drain.
    assert drained(reason="slurm-ml: xid.79 gpu3") == (0, 0)


def test_what_slurm_did_not_say_has_no_series() -> None:
    got = series(checked(replayed("smi-q/gpud_h100x8_535.161.08_q.txt"),
                         Expectations(gpu_count=8)))
    for name in ("slurm_ml_node_drained", "slurm_ml_node_drained_by_slurm_ml",
                 "slurm_ml_node_gpus_allocated", "slurm_ml_node_gpus_allocated_idle",
                 "slurm_ml_node_spool_records"):
        assert not of(got, name), name


def test_no_snapshot_publishes_the_verdict_0_and_the_drain_state() -> None:
    """The probe timed out: what is known is the failed verdict, the finding that says
    why, and what Slurm says; no GPU series at all."""
    timeout = Finding("probe.timeout", Severity.FLAG, None, "no answer in 30 s")
    got = series(NodeHealth("gpu02", NOW, "held", False, IDLE_PCT, (timeout,),
                            slurm_node=slurm_node("gpu02", drained=True,
                                                  reason="slurm-ml: xid.79 gpu3")))
    assert one(got, "slurm_ml_node_health_pass") == 0
    assert one(got, "slurm_ml_node_health_findings", severity="flag") == 1
    assert (one(got, "slurm_ml_node_drained"), one(got, "slurm_ml_node_drained_by_slurm_ml")) \
        == (1, 1)
    assert not [k for k in got if k[0].startswith("slurm_ml_gpu_")]


def test_a_node_no_class_covers_gets_no_verdict() -> None:
    """HealthCheckProgram runs on every node: a GPU-less one must not read as failing."""
    got = series(NodeHealth("login1", NOW, "skipped", None, IDLE_PCT))
    assert set(got) == {
        ("slurm_ml_node_health_last_check_timestamp_seconds", ()),
        ("slurm_ml_node_health_action", (("action", "skipped"),))}


def test_the_spool_backlog() -> None:
    health = NodeHealth("gpu01", NOW, "pass", True, IDLE_PCT)
    assert one(series(replace(health, spool_records=0)), "slurm_ml_node_spool_records") == 0
    assert one(series(replace(health, spool_records=17)), "slurm_ml_node_spool_records") == 17


# ------------------------------------------------------------------- GPUs held by jobs


def test_allocated_gpus_and_the_idle_ones_among_them() -> None:
    utils = {0: 0.0, 1: 1.0, 2: 1.5, 3: 97.0, 4: None, 5: 0.0}
    snap = snapshot("gpu03")
    snap = replace(snap, gpus=tuple(replace(g, utilization_gpu_pct=utils.get(g.index, 0.0))
                                    for g in snap.gpus))
    # GPU 5 idles but no job runs on it; GPU 4's utilisation was not read: not idle.
    health = NodeHealth("gpu03", NOW, "pass", True, IDLE_PCT, snapshot=snap,
                        gpu_jobs={0: 7, 1: 7, 2: 8, 3: 8, 4: 8})
    got = series(health)
    assert one(got, "slurm_ml_node_gpus_allocated") == 5
    assert one(got, "slurm_ml_node_gpus_allocated_idle") == 2  # at or below 1 %
    got = series(replace(health, gpu_jobs={}))
    assert (one(got, "slurm_ml_node_gpus_allocated"),
            one(got, "slurm_ml_node_gpus_allocated_idle")) == (0, 0)


# --------------------------------------------------------------------- GPU readings


def test_row_remapping_of_a_real_a10() -> None:
    got = series(checked(replayed("smi-q/gpud_a10_535.129.03_q_remap_pending.txt"),
                         Expectations(gpu_count=1)))
    assert of(got, "slurm_ml_gpu_remapped_rows") == {
        (("gpu", "0"), ("kind", "correctable")): 0, (("gpu", "0"), ("kind", "uncorrectable")): 4}
    assert of(got, "slurm_ml_gpu_memory_repair_pending") == {
        (("gpu", "0"), ("kind", "row_remap")): 1}
    assert of(got, "slurm_ml_gpu_row_remap_failure") == {(("gpu", "0"),): 0}
    assert not of(got, "slurm_ml_gpu_retired_pages")  # an Ampere has none: NOT_SUPPORTED
    assert of(got, "slurm_ml_gpu_ecc_errors") == {
        (("gpu", "0"), ("kind", k)): 0 for k in ("volatile_corrected", "volatile_uncorrected",
                                                 "aggregate_corrected", "aggregate_uncorrected")}


def test_page_retirement_of_eight_real_gpus_and_no_ecc_it_did_not_read() -> None:
    snap = replayed("ecc/azhc_8gpu_q_page_retirement_bad.txt")
    got = series(checked(snap, Expectations(gpu_count=8)))
    pages = of(got, "slurm_ml_gpu_retired_pages")
    assert pages[("gpu", "1"), ("kind", "double_bit")] == 61
    assert pages[("gpu", "0"), ("kind", "single_bit")] == 60
    assert len(pages) == 16
    pending = of(got, "slurm_ml_gpu_memory_repair_pending")
    assert pending[("gpu", "1"), ("kind", "page_retirement")] == 1
    assert pending[("gpu", "0"), ("kind", "page_retirement")] == 0
    # The capture holds retired pages only: ECC counters and remapping were not read, so
    # they have no series, never a 0.
    assert all(g.ecc.volatile_uncorrected is None for g in snap.gpus)
    assert not of(got, "slurm_ml_gpu_ecc_errors") and not of(got, "slurm_ml_gpu_remapped_rows")


def test_lifetime_ecc_errors_and_xids_of_a_gpu_no_longer_listed() -> None:
    """A P100's -q capture (3 lifetime correctable errors) with a kernel log whose Xids
    name another PCI address: counted by that address, by class."""
    got = series(checked(replayed("ecc/netdata_tesla-p100_510.47.03_q_aggregate_sbe3.xml",
                                  "xid/gpud_dmesg_xid48_63_94_dbe_rowremap.log"),
                         Expectations(gpu_count=1)))
    assert one(got, "slurm_ml_gpu_ecc_errors", gpu="0", kind="aggregate_corrected") == 3
    xids = of(got, "slurm_ml_gpu_xid_errors")
    gone = "PCI:0000:19:00"
    assert {k: v for k, v in xids.items() if (("gpu", gone)) in k} == {
        (("class", "drain"), ("gpu", gone)): 1, (("class", "drain_after_job"), ("gpu", gone)): 9,
        (("class", "flag"), ("gpu", gone)): 1}
    # The listed GPU logged none: its zeros are there, one per class.
    assert {k: v for k, v in xids.items() if ("gpu", "0") in k} == {
        (("class", c), ("gpu", "0")): 0 for c in ("drain", "drain_after_job", "flag", "ignore")}


def test_xids_on_a_listed_gpu_are_counted_by_its_index() -> None:
    snap = snapshot("gpu03")  # builders' A100s: GPU 3 sits at bus 0x37
    line = "NVRM: Xid (PCI:0000:37:00): {}, pid=1, name=python"
    snap = replace(snap, xids=(XidEvent(79, "PCI:0000:37:00", line.format(79)),
                               XidEvent(13, "PCI:0000:37:00", line.format(13)),
                               XidEvent(13, "PCI:0000:37:00", line.format(13))))
    got = series(NodeHealth("gpu03", NOW, "drained", False, IDLE_PCT, snapshot=snap))
    assert one(got, "slurm_ml_gpu_xid_errors", gpu="3", **{"class": "drain"}) == 1
    assert one(got, "slurm_ml_gpu_xid_errors", gpu="3", **{"class": "ignore"}) == 2
    assert one(got, "slurm_ml_gpu_xid_errors", gpu="0", **{"class": "drain"}) == 0
    assert len(of(got, "slurm_ml_gpu_xid_errors")) == 8 * 4


def test_no_kernel_log_read_no_xid_series() -> None:
    snap = replace(snapshot("gpu03"), xids=None)
    assert not of(series(NodeHealth("gpu03", NOW, "pass", True, IDLE_PCT, snapshot=snap)),
                  "slurm_ml_gpu_xid_errors")


@pytest.mark.parametrize(("rel", "want"), [
    ("nvlink/gpud_a100x8_nvlink_status.txt", {str(i): 12 for i in range(8)}),
    ("nvlink/azhc_a100_gpu6_nvlink_status_all_inactive.txt", {"6": 0}),
    ("nvlink/azhc_a100_gpu7_nvlink_status_good.txt", {"7": 12}),
])
def test_active_nvlinks_of_real_captures(rel: str, want: dict[str, int]) -> None:
    got = series(NodeHealth("gpu01", NOW, "pass", True, IDLE_PCT, snapshot=replayed(rel)))
    assert of(got, "slurm_ml_gpu_nvlink_links_active") == {
        (("gpu", gpu),): n for gpu, n in want.items()}


def test_a_pcie_card_without_nvlink_has_no_link_series() -> None:
    snap = replayed("smi-q/gpud_a10_535.129.03_q_remap_pending.txt")
    got = series(NodeHealth("gpu01", NOW, "pass", True, IDLE_PCT, snapshot=snap))
    assert not of(got, "slurm_ml_gpu_nvlink_links_active")


# ------------------------------------------------------------- the families themselves


def test_every_family_is_declared_with_the_labels_it_carries() -> None:
    snap = replayed("smi-q/gpud_a10_535.129.03_q_remap_pending.txt",
                    "xid/gpud_dmesg_xid48_63_94_dbe_rowremap.log")
    health = checked(snap, Expectations(gpu_count=1), slurm_node=slurm_node("gpu01"),
                     gpu_jobs={0: 5}, spool_records=3)
    specs = {m.name: m for m in METRICS}
    seen = set()
    for family in text_string_to_metric_families(text(health)):
        spec = specs[family.name]
        assert family.type == "gauge"
        assert all(set(s.labels) == set(spec.labels) for s in family.samples), family.name
        seen.add(family.name)
    assert seen == set(specs) - {"slurm_ml_gpu_retired_pages", "slurm_ml_gpu_nvlink_links_active"}


def test_the_help_texts_do_not_depend_on_the_node() -> None:
    """node_exporter merges one host's files family by family: a help text that differs
    from file to file would clash."""
    def helps(node: str) -> list[str]:
        return re.findall(r"^# HELP .*$", text(NodeHealth(node, NOW, "pass", True, IDLE_PCT)),
                          re.MULTILINE)

    assert helps("gpu01") == [h.replace("gpu01", "gpu02") for h in helps("gpu01")]
    assert helps("gpu01") == helps("gpu02")


def test_docs_list_every_metric() -> None:
    doc = (REPO / "docs" / "health.md").read_text()
    missing = [m.name for m in METRICS if f"`{m.name}" not in doc]
    assert not missing, f"docs/health.md does not list {missing}"
