"""Pure GPU health checks, as tables: for each check a healthy case, each failing case,
NOT_SUPPORTED tolerated, None reported as probe.missing (a FLAG, never a drain), deltas
against a previous snapshot, Xid filtering, job GPU scope, leftover processes, and the
Slurm drain reason. Snapshots come from the small factories below, not from captures.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

import pytest
from builders import a100, bus, nvlinks
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config
from slurm_ml.health.checks import (
    PREFIX,
    XID_DRAIN,
    XID_IGNORE,
    Expectations,
    Finding,
    Severity,
    Thresholds,
    check_node,
    drain_reason,
    expectations_for,
    sort_findings,
    topology_cell,
    worst,
)
from slurm_ml.health.snapshot import (
    NOT_SUPPORTED,
    EccCounts,
    Gpu,
    GpuProcess,
    NodeSnapshot,
    NvLink,
    RemappedRows,
    RetiredPages,
    XidEvent,
)

DRAIN, AFTER, FLAG = Severity.DRAIN_NOW, Severity.DRAIN_AFTER_JOB, Severity.FLAG
MISSING = "probe.missing"
TH = Thresholds()

# ---------------------------------------------------------------- factories


def h100(i: int = 0, **changes: Any) -> Gpu:
    g = a100(i, uuid=f"GPU-h100-{i}", name="NVIDIA H100 80GB HBM3", nvlinks=nvlinks(18),
             fabric_state="Completed", fabric_status="Success")
    return replace(g, **changes)


def v100(i: int = 0, **changes: Any) -> Gpu:
    """A healthy V100 PCIe: page retirement, no remapping, no NVLink."""
    g = a100(i, uuid=f"GPU-v100-{i}", name="Tesla V100-PCIE-32GB", remapped_rows=NOT_SUPPORTED,
             retired_pages=RetiredPages(0, 0, False), nvlinks=NOT_SUPPORTED)
    return replace(g, **changes)


def full_topology(n: int, cell: str) -> dict[tuple[int, int], str]:
    return {(i, j): ("X" if i == j else cell) for i in range(n) for j in range(n)}


def node(make: Callable[..., Gpu] = a100, n: int = 8, *, cell: str | None = "NV12",
         **changes: Any) -> NodeSnapshot:
    snap = NodeSnapshot(node="gpu01", gpus=tuple(make(i) for i in range(n)),
                        driver_version="535.104.12",
                        topology=full_topology(n, cell) if cell else None, xids=(),
                        source="test")
    return replace(snap, **changes)


def with_gpu(snap: NodeSnapshot, i: int, **changes: Any) -> NodeSnapshot:
    gpus = tuple(replace(g, **changes) if g.index == i else g for g in snap.gpus)
    return replace(snap, gpus=gpus)


def with_links(snap: NodeSnapshot, i: int, **per_link: dict[str, Any]) -> NodeSnapshot:
    """Change some links of GPU i: with_links(s, 3, l2={"active": False})."""
    g = next(g for g in snap.gpus if g.index == i)
    assert isinstance(g.nvlinks, tuple)
    new = tuple(replace(link, **per_link.get(f"l{link.link}", {})) for link in g.nvlinks)
    return with_gpu(snap, i, nvlinks=new)


A100 = Expectations(gpu_count=8, nvlink_links_per_gpu=12, expected_topology_cell="NV12")
H100 = Expectations(gpu_count=8, nvlink_links_per_gpu=18, expected_topology_cell="NV18")
V100 = Expectations(gpu_count=4, nvlink_links_per_gpu=0)

Row = tuple[str, Severity, int | None]
Cases = dict[str, tuple[NodeSnapshot, dict[str, Any], list[Row]]]


def rows(findings: Iterable[Finding]) -> list[Row]:
    return [(f.check_id, f.severity, f.gpu) for f in findings]


def run(snap: NodeSnapshot, exp: Expectations = A100, th: Thresholds = TH,
        **kw: Any) -> list[Finding]:
    found = check_node(snap, exp, th, **kw)
    assert found == sort_findings(found)
    for f in found:
        json.dumps(f.evidence, allow_nan=True)
        assert f.message and "\n" not in f.message
        if f.gpu is not None:
            assert f"GPU {f.gpu}" in f.message or f.check_id == MISSING
    return found


def table(cases: Cases) -> pytest.MarkDecorator:
    return pytest.mark.parametrize(("snap", "kw", "want"),
                                   [pytest.param(*v, id=k) for k, v in cases.items()])


# ---------------------------------------------------------------- healthy nodes


@pytest.mark.parametrize(("snap", "exp"), [
    pytest.param(node(a100), A100, id="8xA100-SXM"),
    pytest.param(node(h100, cell="NV18"), H100, id="8xH100-SXM"),
    pytest.param(node(v100, 4, cell="PIX"), V100, id="4xV100-PCIe"),
])
def test_healthy_node_has_no_findings(snap: NodeSnapshot, exp: Expectations) -> None:
    assert run(snap, exp) == []
    assert run(snap, exp, previous=snap, xid_since=0.0, job_pids=()) == []


# ---------------------------------------------------------------- GPU count, lost, probe


COUNT: Cases = {
    "seven-of-eight": (node(n=7, topology=full_topology(7, "NV12")), {},
                       [("gpu.count", DRAIN, None)]),
    "nine-of-eight": (node(n=9, topology=full_topology(9, "NV12")), {},
                      [("gpu.count", DRAIN, None)]),
    "none-and-nvml-dead": (node(n=0, topology=None, errors=("NVML init: driver not loaded",)),
                           {}, [("gpu.count", DRAIN, None), ("probe.error", DRAIN, None)]),
    "count-right-job-gpu-unknown": (node(), {"gpus": [0, 9]}, [(MISSING, FLAG, None)]),
    "probe-watchdog": (node(errors=("watchdog: probe killed after 8 s",), elapsed_s=8.0), {},
                       [("probe.error", DRAIN, None)]),
}


@table(COUNT)
def test_gpu_count_and_probe_errors(snap: NodeSnapshot, kw: dict[str, Any],
                                    want: list[Row]) -> None:
    assert rows(run(snap, **kw)) == want


def test_gpu_count_evidence_names_the_missing_job_gpu() -> None:
    snap = node(n=7, topology=full_topology(7, "NV12"))
    (f,) = run(snap, gpus=[6, 7])
    assert f.evidence["missing_job_gpus"] == [7]
    assert f.evidence["expected"] == 8 and f.evidence["found"] == 7
    assert f.detail == "7/8 GPUs"


LOST: Cases = {
    "gpu-is-lost": (with_gpu(node(), 3, errors=("GPU is lost",)), {},
                    [("gpu.lost", DRAIN, 3)]),
    "requires-reset": (with_gpu(node(), 3, errors=("GPU requires reset",)), {},
                       [("gpu.lost", DRAIN, 3)]),
    "fallen-off-bus": (with_gpu(node(), 2, errors=("Unable to determine the device handle: "
                                                   "GPU has fallen off the bus",)), {},
                       [("gpu.lost", DRAIN, 2)]),
    # A lost GPU's other readings are noise: only gpu.lost, no probe.missing.
    "lost-with-nothing-read": (with_gpu(node(), 3, errors=("GPU is lost",), ecc=EccCounts(),
                                        remapped_rows=None, nvlinks=None,
                                        pcie_width_current=None), {},
                               [("gpu.lost", DRAIN, 3)]),
    # A corrupted InfoROM: the GPU computes, its ECC records cannot be trusted.
    "inforom": (with_gpu(node(), 1, errors=("Corrupted infoROM",)), {},
                [("gpu.inforom", AFTER, 1)]),
    # NVML UNKNOWN / TIMEOUT and nvidia-smi's ERR! are faults of the GPU (issue 15).
    "timeout-is-an-error-state": (with_gpu(node(), 1,
                                           errors=("nvmlDeviceGetPowerUsage: Timeout",)),
                                  {}, [("gpu.error_state", DRAIN, 1)]),
    "unknown-error-is-an-error-state": (
        with_gpu(node(), 1, errors=("nvmlDeviceGetTotalEccErrors: Unknown Error",)), {},
        [("gpu.error_state", DRAIN, 1)]),
    "err-in-fan-only": (with_gpu(node(), 2, errors=("ERR! (line 9, Fan)",)), {},
                        [("gpu.error_state", AFTER, 2)]),
    "handle-unknown-error": (with_gpu(node(), 4, errors=(
        "Unknown Error (line 8, device handle unavailable)",)), {}, [("gpu.lost", DRAIN, 4)]),
    "permissions-flag": (with_gpu(node(), 1, errors=(
        "nvmlDeviceGetComputeRunningProcesses: Insufficient Permissions",)),
                         {}, [("probe.gpu_error", FLAG, 1)]),
    "lost-gpu-outside-job": (with_gpu(node(), 7, errors=("GPU is lost",)), {"gpus": [0, 1]}, []),
}


@table(LOST)
def test_lost_gpus(snap: NodeSnapshot, kw: dict[str, Any], want: list[Row]) -> None:
    assert rows(run(snap, **kw)) == want


@pytest.mark.parametrize(("changes", "want"), [
    pytest.param({"reset_required": True}, [("gpu.reset_required", DRAIN, 3)], id="reset"),
    pytest.param({"drain_and_reset_recommended": True}, [("gpu.reset_required", DRAIN, 3)],
                 id="drain-and-reset"),
    pytest.param({"reset_required": False, "drain_and_reset_recommended": NOT_SUPPORTED}, [],
                 id="no-reset"),
    pytest.param({"recovery_action": "None"}, [], id="action-none"),
    pytest.param({"recovery_action": "N/A"}, [], id="action-na"),
    pytest.param({"recovery_action": "Reboot"}, [("gpu.recovery_action", DRAIN, 3)],
                 id="action-reboot"),
    pytest.param({"recovery_action": "Drain and Reset"}, [("gpu.recovery_action", DRAIN, 3)],
                 id="action-drain-and-reset"),
    pytest.param({"recovery_action": "Drain P2P"}, [("gpu.recovery_action", FLAG, 3)],
                 id="action-drain-p2p"),
    pytest.param({"recovery_action": None, "reset_required": None}, [], id="not-read"),
])
def test_driver_recovery_verdict(changes: dict[str, Any], want: list[Row]) -> None:
    assert rows(run(with_gpu(node(), 3, **changes))) == want
    assert run(with_gpu(node(), 3, **changes), gpus=[0]) == []


@pytest.mark.parametrize(("attached", "n", "want"), [
    pytest.param(8, 1, [], id="excerpt-of-8"),
    pytest.param(7, 8, [("gpu.count", DRAIN, None)], id="driver-says-7"),
    pytest.param(None, 8, [], id="unread-uses-list"),
    pytest.param(NOT_SUPPORTED, 7, [("gpu.count", DRAIN, None)], id="na-uses-list"),
])
def test_gpu_count_prefers_attached_gpus(attached: Any, n: int, want: list[Row]) -> None:
    snap = node(n=n, topology=full_topology(n, "NV12"), attached_gpus=attached)
    assert rows(run(snap)) == want


# ---------------------------------------------------------------- ECC


ECC: Cases = {
    "volatile-dbe": (with_gpu(node(), 5, ecc=EccCounts(0, 2, 0, 2)), {},
                     [("ecc.volatile_uncorrected", DRAIN, 5)]),
    "correctable-only": (with_gpu(node(), 5, ecc=EccCounts(177, 0, 177, 0)), {}, []),
    "not-supported": (with_gpu(node(), 5, ecc=EccCounts(*[NOT_SUPPORTED] * 4)), {}, []),
    "none": (with_gpu(node(), 5, ecc=EccCounts()), {}, [(MISSING, FLAG, 5)]),
    "none-but-ecc-disabled": (with_gpu(node(), 5, ecc=EccCounts(), ecc_enabled=False), {}, []),
    "mig-na": (with_gpu(node(), 0, mig_enabled=True, ecc=EccCounts(*[NOT_SUPPORTED] * 4),
                        remapped_rows=NOT_SUPPORTED), {}, []),
    "dbe-outside-job": (with_gpu(node(), 5, ecc=EccCounts(0, 2, 0, 2)), {"gpus": [0]}, []),
}


@table(ECC)
def test_ecc(snap: NodeSnapshot, kw: dict[str, Any], want: list[Row]) -> None:
    assert rows(run(snap, **kw)) == want


def test_probe_missing_is_one_finding_per_check() -> None:
    snap = node()
    for i in (1, 2, 3):
        snap = with_gpu(snap, i, ecc=EccCounts())
    (f,) = run(snap)
    assert (f.check_id, f.severity, f.gpu) == (MISSING, FLAG, None)
    assert f.evidence == {"check": "ecc.volatile_uncorrected", "gpus": [1, 2, 3],
                          "fields": ["ecc.volatile_uncorrected"]}


# ---------------------------------------------------------------- row remapping


REMAP: Cases = {
    "failure": (with_gpu(node(), 4, remapped_rows=RemappedRows(0, 3, False, True)), {},
                [("remap.failure", DRAIN, 4)]),
    "pending": (with_gpu(node(), 4, remapped_rows=RemappedRows(1, 0, True, False)), {},
                [("remap.pending", AFTER, 4)]),
    "pending-drains-now-if-configured": (
        with_gpu(node(), 4, remapped_rows=RemappedRows(1, 0, True, False)),
        {"th": Thresholds(remap_pending=DRAIN)}, [("remap.pending", DRAIN, 4)]),
    "failure-and-pending": (with_gpu(node(), 4, remapped_rows=RemappedRows(0, 9, True, True)),
                            {}, [("remap.failure", DRAIN, 4), ("remap.pending", AFTER, 4)]),
    "uncorrectable-512": (with_gpu(node(), 4, remapped_rows=RemappedRows(0, 512, False, False)),
                          {}, [("remap.uncorrectable", FLAG, 4)]),
    "uncorrectable-511": (with_gpu(node(), 4, remapped_rows=RemappedRows(0, 511, False, False)),
                          {}, []),
    "pre-ampere-not-supported": (with_gpu(node(), 4, remapped_rows=NOT_SUPPORTED), {}, []),
    "none": (with_gpu(node(), 4, remapped_rows=None), {}, [(MISSING, FLAG, 4)]),
    "pending-not-read": (with_gpu(node(), 4, remapped_rows=RemappedRows(0, 0, None, False)), {},
                         [(MISSING, FLAG, 4)]),
    "field-not-supported": (with_gpu(node(), 4, remapped_rows=RemappedRows(
        NOT_SUPPORTED, NOT_SUPPORTED, NOT_SUPPORTED, NOT_SUPPORTED)), {}, []),
}


@table(REMAP)
def test_row_remapping(snap: NodeSnapshot, kw: dict[str, Any], want: list[Row]) -> None:
    assert rows(run(snap, **kw)) == want


# ---------------------------------------------------------------- retired pages (V100)


def v(i: int, **changes: Any) -> NodeSnapshot:
    return with_gpu(node(v100, 4, cell=None), i, **changes)


RETIRED: Cases = {
    "at-limit-63": (v(2, retired_pages=RetiredPages(60, 3, False)), {},
                    [("retired_pages.count", DRAIN, 2)]),
    "below-limit-62": (v(2, retired_pages=RetiredPages(60, 2, False)), {}, []),
    "pending": (v(2, retired_pages=RetiredPages(1, 0, True)), {},
                [("retired_pages.pending", AFTER, 2)]),
    "over-limit-and-pending": (v(2, retired_pages=RetiredPages(40, 25, True)), {},
                               [("retired_pages.count", DRAIN, 2),
                                ("retired_pages.pending", AFTER, 2)]),
    "custom-limit": (v(2, retired_pages=RetiredPages(5, 6, False)),
                     {"th": Thresholds(retired_pages_max=10)},
                     [("retired_pages.count", DRAIN, 2)]),
    "ampere-not-supported": (v(2, retired_pages=NOT_SUPPORTED), {}, []),
    "none": (v(2, retired_pages=None), {}, [(MISSING, FLAG, 2)]),
    # One counter alone is enough evidence to drain; an unread one is not.
    "sbe-unread-dbe-over": (v(2, retired_pages=RetiredPages(None, 70, False)), {},
                            [("retired_pages.count", DRAIN, 2)]),
    "sbe-unread-dbe-low": (v(2, retired_pages=RetiredPages(None, 0, False)), {},
                           [(MISSING, FLAG, 2)]),
    "pending-unread": (v(2, retired_pages=RetiredPages(0, 0, None)), {}, [(MISSING, FLAG, 2)]),
}


@table(RETIRED)
def test_retired_pages(snap: NodeSnapshot, kw: dict[str, Any], want: list[Row]) -> None:
    assert rows(run(snap, V100, **kw)) == want


# ---------------------------------------------------------------- NVLink active links


def unknown_links(n_unknown: int, n_up: int, n_down: int = 0) -> tuple[NvLink, ...]:
    states = [None] * n_unknown + [True] * n_up + [False] * n_down
    return tuple(NvLink(link=k, active=s) for k, s in enumerate(states))


NVLINK: Cases = {
    "one-link-down": (with_links(node(), 6, l3={"active": False}), {},
                      [("nvlink.active_links", DRAIN, 6)]),
    "all-down": (with_gpu(node(), 6, nvlinks=nvlinks(12, active=False)), {},
                 [("nvlink.active_links", DRAIN, 6)]),
    "none-enumerated": (with_gpu(node(), 6, nvlinks=()), {}, [("nvlink.active_links", DRAIN, 6)]),
    "not-supported-where-expected": (with_gpu(node(), 6, nvlinks=NOT_SUPPORTED), {},
                                     [("nvlink.active_links", DRAIN, 6)]),
    "not-supported-under-mig": (with_gpu(node(), 6, nvlinks=NOT_SUPPORTED, mig_enabled=True),
                                {}, []),
    "more-than-expected": (with_gpu(node(), 6, nvlinks=nvlinks(18)), {}, []),
    "unsupported-link-slots-ignored": (
        with_gpu(node(), 6, nvlinks=nvlinks(12) + tuple(NvLink(k, NOT_SUPPORTED)
                                                      for k in range(12, 18))), {}, []),
    "none": (with_gpu(node(), 6, nvlinks=None), {}, [(MISSING, FLAG, 6)]),
    "states-unread": (with_gpu(node(), 6, nvlinks=unknown_links(12, 0)), {}, [(MISSING, FLAG, 6)]),
    "eleven-up-one-unread": (with_gpu(node(), 6, nvlinks=unknown_links(1, 11)), {},
                             [(MISSING, FLAG, 6)]),
    "one-down-one-unread": (with_gpu(node(), 6, nvlinks=unknown_links(1, 10, 1)), {},
                            [("nvlink.active_links", DRAIN, 6)]),
    "down-outside-job": (with_links(node(), 6, l3={"active": False}), {"gpus": [0, 1]}, []),
}


@table(NVLINK)
def test_nvlink_active_links(snap: NodeSnapshot, kw: dict[str, Any], want: list[Row]) -> None:
    assert rows(run(snap, **kw)) == want


@pytest.mark.parametrize(("nvlinks", "exp"), [
    pytest.param(NOT_SUPPORTED, V100, id="pcie-card-not-supported"),
    pytest.param(None, V100, id="pcie-card-not-read"),
    pytest.param(nvlinks(4, active=False), V100, id="pcie-card-bridge-down-not-expected"),
])
def test_nvlink_not_expected_is_not_checked(nvlinks: Any, exp: Expectations) -> None:
    snap = with_gpu(node(v100, 4, cell=None), 0, nvlinks=nvlinks)
    assert run(snap, exp) == []


def test_nvlink_detail_and_evidence() -> None:
    (f,) = run(with_gpu(node(), 6, nvlinks=nvlinks(12, active=False)))
    assert f.detail == "0/12 active"
    assert f.evidence["inactive"] == list(range(12))
    assert f.evidence["uuid"] == "GPU-a100-6" and f.evidence["pci_bus_id"] == bus(6)
    assert "GPU 6" in f.message and "0 of 12" in f.message


# ---------------------------------------------------------------- NVLink topology


def topo_with(n: int, cell: str, bad: dict[tuple[int, int], str]) -> dict[tuple[int, int], str]:
    t = full_topology(n, cell)
    for (i, j), c in bad.items():
        t[i, j] = t[j, i] = c
    return t


TOPOLOGY: Cases = {
    # One GPU without NVLink: it is blamed, not each of its seven peers.
    "gpu6-sys-to-all": (node(topology=topo_with(8, "NV12", {(6, j): "SYS" for j in range(8)
                                                            if j != 6})), {},
                        [("nvlink.topology", DRAIN, 6)]),
    # One degraded pair: both ends are named.
    "pair-0-1-nv8": (node(topology=topo_with(8, "NV12", {(0, 1): "NV8"})), {},
                     [("nvlink.topology", DRAIN, 0), ("nvlink.topology", DRAIN, 1)]),
    "upper-triangle-only": (node(topology={(i, j): "NV12" for i in range(8)
                                           for j in range(i + 1, 8)}), {}, []),
    "lower-case-and-spaces": (node(topology=full_topology(8, " nv12 ")), {}, []),
    "not-checked-without-expectation": (node(topology=full_topology(8, "SYS")),
                                        {"exp": replace(A100, expected_topology_cell=None)}, []),
    "none": (node(topology=None), {}, [(MISSING, FLAG, None)]),
    "pair-missing": (node(topology={k: c for k, c in full_topology(8, "NV12").items()
                                    if k not in ((2, 5), (5, 2))}), {}, [(MISSING, FLAG, 2)]),
    "broken-gpu-outside-job": (node(topology=topo_with(8, "NV12", {(6, j): "SYS" for j in
                                                                  range(8) if j != 6})),
                               {"gpus": [0, 1]}, []),
    "broken-gpu-in-job": (node(topology=topo_with(8, "NV12", {(6, j): "SYS" for j in
                                                             range(8) if j != 6})),
                          {"gpus": [0, 6]}, [("nvlink.topology", DRAIN, 6)]),
    "single-gpu-node": (node(n=1, topology=None), {"exp": replace(A100, gpu_count=1)}, []),
}


@table(TOPOLOGY)
def test_nvlink_topology(snap: NodeSnapshot, kw: dict[str, Any], want: list[Row]) -> None:
    assert rows(run(snap, **kw)) == want


def test_topology_evidence_lists_peers() -> None:
    bad = {(6, j): "SYS" for j in range(8) if j != 6}
    (f,) = run(node(topology=topo_with(8, "NV12", bad)))
    assert f.evidence["peers"] == {str(j): "SYS" for j in range(8) if j != 6}
    assert f.detail == "7 peers not NV12"
    (a, b) = run(node(topology=topo_with(8, "NV12", {(0, 1): "NV8"})))
    assert a.detail == "gpu1 NV8 not NV12" and b.detail == "gpu0 NV8 not NV12"


# ---------------------------------------------------------------- NVLink error deltas


BASE = node()


def counters(i: int = 3, **per_link: dict[str, Any]) -> NodeSnapshot:
    return with_links(BASE, i, **per_link)


NVLINK_ERRORS: Cases = {
    "no-previous-no-delta": (counters(l0={"replay_errors": 999}), {}, []),
    "unchanged": (counters(l0={"replay_errors": 5}),
                  {"previous": counters(l0={"replay_errors": 5})}, []),
    "replay-plus-one": (counters(l0={"replay_errors": 6}),
                        {"previous": counters(l0={"replay_errors": 5})},
                        [("nvlink.errors", FLAG, 3)]),
    "recovery-plus-one": (counters(l7={"recovery_errors": 1}), {"previous": BASE},
                          [("nvlink.errors", FLAG, 3)]),
    "crc-99": (counters(l1={"crc_errors": 99}), {"previous": BASE}, []),
    "crc-100-over-two-links": (counters(l1={"crc_errors": 50}, l2={"crc_errors": 50}),
                               {"previous": BASE}, [("nvlink.errors", FLAG, 3)]),
    "counter-reset": (BASE, {"previous": counters(l0={"replay_errors": 40})}, []),
    "gpu-replaced": (with_gpu(counters(l0={"replay_errors": 6}), 3, uuid="GPU-new"),
                     {"previous": BASE}, []),
    "severity-configurable": (counters(l0={"replay_errors": 1}),
                              {"previous": BASE, "th": Thresholds(nvlink_errors=AFTER)},
                              [("nvlink.errors", AFTER, 3)]),
    "counters-unread": (with_gpu(BASE, 3, nvlinks=nvlinks(12, replay_errors=None,
                                                        recovery_errors=None, crc_errors=None)),
                        {"previous": BASE}, [(MISSING, FLAG, 3)]),
    "counters-not-supported": (with_gpu(BASE, 3, nvlinks=nvlinks(12, crc_errors=NOT_SUPPORTED)),
                               {"previous": BASE}, []),
    "previous-not-read": (BASE, {"previous": with_gpu(BASE, 3, nvlinks=None)},
                          [(MISSING, FLAG, 3)]),
    "outside-job": (counters(l0={"replay_errors": 6}),
                    {"previous": BASE, "gpus": [0]}, []),
}


@table(NVLINK_ERRORS)
def test_nvlink_error_deltas(snap: NodeSnapshot, kw: dict[str, Any], want: list[Row]) -> None:
    assert rows(run(snap, **kw)) == want


def test_nvlink_error_evidence_per_link() -> None:
    (f,) = run(counters(l1={"crc_errors": 60, "replay_errors": 2}, l2={"crc_errors": 40}),
               previous=BASE)
    assert f.evidence["per_link"] == {"1": {"replay": 2, "crc": 60}, "2": {"crc": 40}}
    assert (f.evidence["replay_recovery"], f.evidence["crc"]) == (2, 100)


def test_previous_matched_by_uuid_not_index() -> None:
    # NVML renumbered the GPUs (swap 2 and 3): deltas follow the UUID.
    prev = with_gpu(with_gpu(BASE, 2, uuid="GPU-a100-3"), 3, uuid="GPU-a100-2")
    prev = with_links(prev, 2, l0={"replay_errors": 7})  # the GPU now at index 3
    now = with_links(BASE, 3, l0={"replay_errors": 7})
    assert run(now, previous=prev) == []


# ---------------------------------------------------------------- ECC aggregate deltas


def agg(unc: Any = 0, cor: Any = 0) -> NodeSnapshot:
    return with_gpu(BASE, 1, ecc=EccCounts(0, 0, cor, unc))


ECC_DELTA: Cases = {
    "uncorrected-plus-one": (agg(unc=1), {"previous": agg()},
                             [("ecc.aggregate_uncorrected", FLAG, 1)]),
    "corrected-9999": (agg(cor=10_000), {"previous": agg(cor=1)}, []),
    "corrected-10000": (agg(cor=10_001), {"previous": agg(cor=1)},
                        [("ecc.aggregate_corrected", FLAG, 1)]),
    "aggregate-cleared": (agg(), {"previous": agg(unc=4, cor=10**6)}, []),
    "no-previous": (agg(unc=10, cor=10**7), {}, []),
    "previous-unread": (agg(), {"previous": with_gpu(BASE, 1, ecc=EccCounts(0, 0))},
                        [(MISSING, FLAG, 1)]),
    "not-supported": (with_gpu(BASE, 1, ecc=EccCounts(*[NOT_SUPPORTED] * 4)),
                      {"previous": agg()}, []),
}


@table(ECC_DELTA)
def test_ecc_aggregate_deltas(snap: NodeSnapshot, kw: dict[str, Any], want: list[Row]) -> None:
    assert rows(run(snap, **kw)) == want


# ---------------------------------------------------------------- fabric (H100 HGX)


def h(i: int, **changes: Any) -> NodeSnapshot:
    return with_gpu(node(h100, cell="NV18"), i, **changes)


FABRIC: Cases = {
    "in-progress": (h(2, fabric_state="In Progress", fabric_status=NOT_SUPPORTED), {},
                    [("fabric.state", DRAIN, 2)]),
    "not-started": (h(2, fabric_state="Not Started", fabric_status=None), {},
                    [("fabric.state", DRAIN, 2)]),
    "insufficient-resources": (h(2, fabric_status="Insufficient Resources"), {},
                               [("fabric.state", DRAIN, 2)]),
    "lower-case-ok": (h(2, fabric_state="completed", fabric_status="success"), {}, []),
    "not-supported": (h(2, fabric_state=NOT_SUPPORTED, fabric_status=NOT_SUPPORTED), {}, []),
    "na-text": (h(2, fabric_state="N/A", fabric_status="N/A"), {}, []),
    "state-none": (h(2, fabric_state=None), {}, [(MISSING, FLAG, 2)]),
    "status-none": (h(2, fabric_status=None), {}, [(MISSING, FLAG, 2)]),
}


@table(FABRIC)
def test_fabric(snap: NodeSnapshot, kw: dict[str, Any], want: list[Row]) -> None:
    assert rows(run(snap, H100, **kw)) == want


def test_fabric_not_read_on_pcie_node_is_fine() -> None:
    snap = with_gpu(node(v100, 4, cell=None), 0, fabric_state=None, fabric_status=None)
    assert run(snap, V100) == []


# ---------------------------------------------------------------- PCIe width


def all_widths(snap: NodeSnapshot, width: int, top: int = 16) -> NodeSnapshot:
    gpus = tuple(replace(g, pcie_width_current=width, pcie_width_max=top) for g in snap.gpus)
    return replace(snap, gpus=gpus)


# Without a class width the reference is the widest same-model peer on the node, capped at
# the GPU's own maximum; the GPU's maximum alone is no reference (x16 cards in x8 slots:
# the healthy AWS A10G/T4 captures in test_health_captures.py).
PCIE: Cases = {
    "x8-of-x16": (with_gpu(node(), 3, pcie_width_current=8), {}, [("pcie.width", FLAG, 3)]),
    "expected-width-met": (with_gpu(node(), 3, pcie_width_current=16, pcie_width_max=32),
                           {"exp": replace(A100, pcie_width=16)}, []),
    "expected-width-missed": (with_gpu(node(), 3, pcie_width_current=8, pcie_width_max=8),
                              {"exp": replace(A100, pcie_width=16)}, [("pcie.width", FLAG, 3)]),
    "max-unread-but-expected-known": (
        with_gpu(node(), 3, pcie_width_max=None), {"exp": replace(A100, pcie_width=16)}, []),
    "not-supported": (with_gpu(node(), 3, pcie_width_current=NOT_SUPPORTED), {}, []),
    "narrower-than-peers-max-not-supported": (
        with_gpu(node(), 3, pcie_width_current=4, pcie_width_max=NOT_SUPPORTED), {},
        [("pcie.width", FLAG, 3)]),
    "current-none": (with_gpu(node(), 3, pcie_width_current=None), {}, [(MISSING, FLAG, 3)]),
    "max-none-peers-decide": (with_gpu(node(), 3, pcie_width_max=None), {}, []),
    "all-x8-of-x16-by-design": (all_widths(node(), 8), {}, []),
    "single-gpu-x8-of-x16": (all_widths(node(n=1, cell=None), 8),
                             {"exp": Expectations(gpu_count=1)}, []),
    "single-gpu-x8-class-says-16": (all_widths(node(n=1, cell=None), 8),
                                    {"exp": Expectations(gpu_count=1, pcie_width=16)},
                                    [("pcie.width", FLAG, 0)]),
    "peer-wider-than-own-max": (with_gpu(node(), 3, pcie_width_current=8, pcie_width_max=8),
                                {}, []),
    "other-model-peer-not-a-reference": (
        with_gpu(all_widths(node(), 8), 3, name="NVIDIA H100 80GB HBM3",
                 pcie_width_current=16), {}, []),
}


@table(PCIE)
def test_pcie_width(snap: NodeSnapshot, kw: dict[str, Any], want: list[Row]) -> None:
    assert rows(run(snap, **kw)) == want


# ---------------------------------------------------------------- Xid events


def xid(code: int, gpu: int | None = 3, ts: float | None = 1000.0, msg: str = "",
        bus_id: str | None = None) -> XidEvent:
    if bus_id is None and gpu is not None:
        bus_id = f"PCI:0000:{0x07 + 0x10 * gpu:02x}:00"
    return XidEvent(xid=code, pci_bus_id=bus_id, message=msg or f"Xid {code} test", timestamp=ts)


def xids(*events: XidEvent) -> NodeSnapshot:
    return node(xids=events)


XIDS: Cases = {
    "79-drains": (xids(xid(79)), {}, [("xid.79", DRAIN, 3)]),
    "13-ignored": (xids(xid(13), xid(31), xid(43), xid(45), xid(68)), {}, []),
    "63-flagged": (xids(xid(63)), {}, [("xid.63", FLAG, 3)]),
    "94-drains-after-the-job": (xids(xid(94)), {}, [("xid.94", AFTER, 3)]),
    "94-flags-if-configured": (xids(xid(94)), {"th": Thresholds(
        xid_drain_after_job=frozenset())}, [("xid.94", FLAG, 3)]),
    "unknown-code-flagged": (xids(xid(999)), {}, [("xid.999", FLAG, 3)]),
    "94-drains-if-configured": (xids(xid(94)),
                                {"th": Thresholds(xid_drain=XID_DRAIN | {94})},
                                [("xid.94", DRAIN, 3)]),
    "13-flags-if-not-ignored": (xids(xid(13)), {"th": Thresholds(xid_ignore=frozenset())},
                                [("xid.13", FLAG, 3)]),
    "before-since": (xids(xid(79, ts=999.0)), {"xid_since": 1000.0}, []),
    "at-since": (xids(xid(79, ts=1000.0)), {"xid_since": 1000.0}, [("xid.79", DRAIN, 3)]),
    "untimed-counted": (xids(xid(79, ts=None)), {"xid_since": 1000.0}, [("xid.79", DRAIN, 3)]),
    "no-since-counts-all": (xids(xid(48, ts=1.0)), {}, [("xid.48", DRAIN, 3)]),
    "outside-job": (xids(xid(79, gpu=7)), {"gpus": [0, 1, 2, 3]}, []),
    # A GPU that fell off the bus is no longer enumerated: node-level, whatever the job.
    "unknown-bus": (xids(xid(79, gpu=None, bus_id="PCI:0000:ff:00")), {"gpus": [0]},
                    [("xid.79", DRAIN, None)]),
    "no-bus": (xids(xid(119, gpu=None)), {}, [("xid.119", DRAIN, None)]),
    "two-gpus-two-codes": (xids(xid(74, gpu=1), xid(94, gpu=1), xid(74, gpu=5)), {},
                           [("xid.74", DRAIN, 1), ("xid.74", DRAIN, 5), ("xid.94", AFTER, 1)]),
    "154-drain-and-reset": (xids(xid(154, msg="GPU recovery action changed from 0x0 (None) "
                                          "to 0x4 (Drain and Reset)")), {},
                            [("xid.154", DRAIN, 3)]),
    "154-back-to-none": (xids(xid(154, msg="GPU recovery action changed from 0x4 (Drain and "
                                       "Reset) to 0x0 (None)")), {}, []),
    "154-drain-p2p": (xids(xid(154, msg="GPU recovery action changed from 0x0 (None) to 0x3 "
                                    "(Drain P2P)")), {}, [("xid.154", FLAG, 3)]),
    "154-unparsed": (xids(xid(154, msg="recovery action changed")), {}, [("xid.154", FLAG, 3)]),
    "none": (node(xids=None), {}, [(MISSING, FLAG, None)]),
    # An ignored follow-up event is judged by the cause it names (research §4: Xid 45
    # "follow the primary Xid"); 144-150 are NVLink errors, drained like 74.
    "45-caused-by-149-drains": (xids(xid(45, msg="Ch 00000001 caused by previous Xid 149"),
                                     xid(149)), {}, [("xid.149", DRAIN, 3)]),
    "45-caused-by-13-ignored": (xids(xid(45, msg="Ch 00000002 caused by previous Xid 13")),
                                {}, []),
    "45-caused-by-unknown-flags": (xids(xid(45, msg="caused by previous Xid 999")), {},
                                   [("xid.999", FLAG, 3)]),
    "45-caused-by-itself-ignored": (xids(xid(45, msg="caused by previous Xid 45")), {}, []),
    "79-not-re-judged-by-cause": (xids(xid(79, msg="caused by previous Xid 13")), {},
                                  [("xid.79", DRAIN, 3)]),
    "145-drains": (xids(xid(145)), {}, [("xid.145", DRAIN, 3)]),
}


@table(XIDS)
def test_xids(snap: NodeSnapshot, kw: dict[str, Any], want: list[Row]) -> None:
    assert rows(run(snap, **kw)) == want


def test_xid_events_grouped_with_untimed_in_evidence() -> None:
    snap = xids(xid(79, ts=1500.0), xid(79, ts=None), xid(79, ts=1200.0), xid(79, ts=10.0))
    (f,) = run(snap, xid_since=1000.0)
    assert f.evidence["count"] == 3 and f.evidence["untimed"] == 1
    assert (f.evidence["first_ts"], f.evidence["last_ts"]) == (1200.0, 1500.0)
    assert "without a timestamp" in f.message and "GPU 3" in f.message
    assert f.detail == "Xid 79 x3"


@pytest.mark.parametrize("gpu_bus", ["00000000:B3:00.0", "0000:b3:00.0", "b3:00.0"])
def test_xid_bus_id_forms_match(gpu_bus: str) -> None:
    snap = with_gpu(node(xids=(xid(79, gpu=None, bus_id="PCI:0000:b3:00"),)), 4,
                    pci_bus_id=gpu_bus)
    assert rows(run(snap)) == [("xid.79", DRAIN, 4)]


def test_xid_follow_up_evidence_names_the_reported_code() -> None:
    (f,) = run(xids(xid(45, msg="Ch 00000001 caused by previous Xid 149")))
    assert f.check_id == "xid.149" and f.evidence["reported_as"] == [45]
    assert "reported as Xid 45" in f.message and f.detail == "Xid 149 x1"


def test_xid_lists_follow_design() -> None:
    assert {48, 62, 64, 74, 79, 95, 119, 120} <= XID_DRAIN  # docs/design.md
    assert {13, 31, 43, 45} <= XID_IGNORE
    assert not XID_DRAIN & XID_IGNORE
    with pytest.raises(ValueError, match="both"):
        Thresholds(xid_drain=frozenset({13}))


# ---------------------------------------------------------------- leftover processes


def procs(i: int, *pids: int) -> NodeSnapshot:
    return with_gpu(node(), i, processes=tuple(GpuProcess(p, 2048, "python") for p in pids))


LEFTOVER: Cases = {
    "not-asked": (procs(2, 4242), {}, []),
    "clean": (node(), {"job_pids": ()}, []),
    "stray-process": (procs(2, 4242), {"job_pids": ()}, [("process.leftover", DRAIN, 2)]),
    "the-jobs-own": (procs(2, 4242), {"job_pids": {4242}}, []),
    "one-of-two-allowed": (procs(2, 4242, 4243), {"job_pids": [4242]},
                           [("process.leftover", DRAIN, 2)]),
    "outside-job-gpus": (procs(7, 4242), {"job_pids": (), "gpus": [0, 1]}, []),
    "not-read": (with_gpu(node(), 2, processes=None), {"job_pids": ()}, [(MISSING, FLAG, 2)]),
}


@table(LEFTOVER)
def test_leftover_processes(snap: NodeSnapshot, kw: dict[str, Any], want: list[Row]) -> None:
    assert rows(run(snap, **kw)) == want


def test_leftover_evidence() -> None:
    (f,) = run(procs(2, 4242, 4243), job_pids=[4242])
    assert f.evidence["pids"] == [4243] and f.evidence["used_memory_mb"] == 2048
    assert "4243" in f.message and "GPU 2" in f.message


# ---------------------------------------------------------------- job scope, sorting, worst


def test_job_scope_keeps_node_level_checks() -> None:
    snap = node(n=7, topology=full_topology(7, "NV12"), errors=("watchdog",),
                xids=(xid(79, gpu=None, bus_id="PCI:0000:ff:00"),))
    snap = with_gpu(snap, 5, ecc=EccCounts(0, 1, 0, 1))
    assert rows(run(snap, gpus=[0])) == [("gpu.count", DRAIN, None), ("probe.error", DRAIN, None),
                                         ("xid.79", DRAIN, None)]


def test_findings_sorted_by_severity_gpu_check() -> None:
    snap = with_gpu(node(), 5, ecc=EccCounts(0, 1, 0, 1), pcie_width_current=8,
                    remapped_rows=RemappedRows(0, 1, True, False))
    snap = with_links(snap, 2, l0={"active": False})
    snap = with_gpu(snap, 0, processes=None)
    snap = replace(snap, xids=(xid(79, gpu=5), xid(94, gpu=0)))
    assert rows(run(snap, job_pids=())) == [
        ("nvlink.active_links", DRAIN, 2),
        ("ecc.volatile_uncorrected", DRAIN, 5),
        ("xid.79", DRAIN, 5),
        ("xid.94", AFTER, 0),
        ("remap.pending", AFTER, 5),
        (MISSING, FLAG, 0),
        ("pcie.width", FLAG, 5),
    ]


def f(check: str, sev: Severity, gpu: int | None = None, detail: str = "") -> Finding:
    return Finding(check, sev, gpu, f"{check} message", {}, detail)


@pytest.mark.parametrize(("findings", "want"), [
    pytest.param([], None, id="none"),
    pytest.param([f("pcie.width", FLAG, 1)], FLAG, id="flag"),
    pytest.param([f("pcie.width", FLAG, 1), f("remap.pending", AFTER, 1)], AFTER, id="after"),
    pytest.param([f("remap.pending", AFTER), f("gpu.count", DRAIN), f("x", FLAG)], DRAIN,
                 id="drain"),
])
def test_worst(findings: list[Finding], want: Severity | None) -> None:
    assert worst(findings) == want


def test_severity_values_and_finding_hashable() -> None:
    assert [s.value for s in Severity] == ["drain", "drain_after_job", "flag"]
    assert DRAIN.drains and AFTER.drains and not FLAG.drains
    assert len({f("a", FLAG), f("a", FLAG)}) == 1


# ---------------------------------------------------------------- drain reason

SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ._:/()+,#%<>=-")

REASONS = {
    "nvlink-example": ([f("nvlink.active_links", DRAIN, 6, "0/12 active")],
                       "slurm-ml: nvlink.active_links gpu6 (0/12 active)"),
    "node-level": ([f("gpu.count", DRAIN, None, "7/8 GPUs")], "slurm-ml: gpu.count (7/8 GPUs)"),
    "no-detail": ([f("remap.failure", DRAIN, 0)], "slurm-ml: remap.failure gpu0"),
    "worst-first-and-more": ([f("pcie.width", FLAG, 1, "x8/x16"),
                              f("remap.pending", AFTER, 0, "row remap pending"),
                              f("xid.79", DRAIN, 4, "Xid 79 x1"),
                              f("gpu.lost", DRAIN, 4, "GPU is lost")],
                             "slurm-ml: gpu.lost gpu4 (GPU is lost) +2 more"),
    "flag-only": ([f("pcie.width", FLAG, 1, "x8/x16"), f(MISSING, FLAG, None, "xid not read")],
                  "slurm-ml: probe.missing (xid not read)"),
    "unsafe-characters": ([f("probe.error", DRAIN, None, "probe: 'nvml'\n\"hung\"; x|y\\z")],
                          "slurm-ml: probe.error (probe: nvml hung x y z)"),
}


@pytest.mark.parametrize(("findings", "want"),
                         [pytest.param(*v, id=k) for k, v in REASONS.items()])
def test_drain_reason(findings: list[Finding], want: str) -> None:
    assert drain_reason(findings) == want


def test_drain_reason_long_detail_is_cut_not_the_check() -> None:
    many = [f("ecc.volatile_uncorrected", DRAIN, 7, "x" * 300)] + [
        f("xid.79", DRAIN, 8 + i) for i in range(12)]
    r = drain_reason(many)
    assert len(r) <= 99 and r.startswith("slurm-ml: ecc.volatile_uncorrected gpu7 (xxx")
    assert r.endswith("...) +12 more")
    short = drain_reason(many, limit=45)
    assert len(short) <= 45 and short.startswith("slurm-ml: ecc.volatile_uncorrected gpu7")


def test_drain_reason_errors() -> None:
    with pytest.raises(ValueError, match="no findings"):
        drain_reason([])
    with pytest.raises(ValueError, match="too short"):
        drain_reason([f("gpu.count", DRAIN)], limit=12)


def test_drain_reason_from_real_findings() -> None:
    r = drain_reason(run(with_gpu(node(), 6, nvlinks=nvlinks(12, active=False))))
    assert r == "slurm-ml: nvlink.active_links gpu6 (0/12 active)"
    r = drain_reason(run(xids(xid(79, gpu=None, bus_id="PCI:0000:ff:00"))))
    assert r == "slurm-ml: xid.79 (Xid 79 x1)"


# ---------------------------------------------------------------- expectations


CONF = load_config(DEFAULT_CONFIG)


@pytest.mark.parametrize(("cls", "want"), [
    pytest.param("a100-80g", Expectations(8, 12, "NV12", None), id="a100-80g"),
    pytest.param("a100-40g", Expectations(8, 12, "NV12", None), id="a100-40g"),
    pytest.param("v100-pcie", Expectations(4, 0, None, None), id="v100-pcie"),
])
def test_expectations_for_configured_classes(cls: str, want: Expectations) -> None:
    nc = next(c for c in CONF.node_classes if c.name == cls)
    assert expectations_for(nc, CONF.gpu_types[nc.gpu_type]) == want


def test_expectations_for_wrong_type() -> None:
    nc = next(c for c in CONF.node_classes if c.name == "v100-pcie")
    with pytest.raises(ValueError, match="GPU type"):
        expectations_for(nc, CONF.gpu_types["a100_80g"])


@pytest.mark.parametrize(("gpus", "links_", "want"), [
    (8, 12, "NV12"), (8, 18, "NV18"), (8, 8, "NV8"), (2, 12, "NV12"), (4, 12, "NV4"),
    (4, 18, "NV6"), (8, 0, None), (1, 18, None), (4, 8, None), (6, 12, None),
])
def test_topology_cell(gpus: int, links_: int, want: str | None) -> None:
    assert topology_cell(gpus, links_) == want


def test_bad_expectations_and_thresholds() -> None:
    with pytest.raises(ValueError):
        Expectations(gpu_count=-1)
    with pytest.raises(ValueError):
        Expectations(gpu_count=8, pcie_width=0)
    with pytest.raises(ValueError):
        Thresholds(nvlink_crc_delta=0)


# ---------------------------------------------------------------- properties

PROP = settings(max_examples=300, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])
NS = st.just(NOT_SUPPORTED)
ints = st.one_of(st.none(), NS, st.integers(-5, 2**40))
bools = st.one_of(st.none(), NS, st.booleans())
strs = st.one_of(st.none(), NS, st.text(max_size=30),
                 st.sampled_from(["Completed", "Success", "In Progress", "N/A", "NV12", "SYS"]))
bus_ids = st.one_of(st.none(), NS, st.sampled_from([bus(i) for i in range(10)]),
                    st.text(max_size=20))
nvlink = st.builds(NvLink, link=st.integers(0, 20), active=bools, version=ints,
                   replay_errors=ints, recovery_errors=ints, crc_errors=ints)
gpu_strategy = st.builds(
    Gpu, index=st.integers(0, 9), uuid=st.one_of(strs, st.sampled_from(["GPU-a", "GPU-b"])),
    pci_bus_id=bus_ids, ecc_enabled=bools,
    ecc=st.builds(EccCounts, ints, ints, ints, ints),
    remapped_rows=st.one_of(st.none(), NS, st.builds(RemappedRows, ints, ints, bools, bools)),
    retired_pages=st.one_of(st.none(), NS, st.builds(RetiredPages, ints, ints, bools)),
    nvlinks=st.one_of(st.none(), NS, st.lists(nvlink, max_size=20).map(tuple)),
    fabric_state=strs, fabric_status=strs, pcie_width_current=ints, pcie_width_max=ints,
    mig_enabled=bools,
    processes=st.one_of(st.none(), st.lists(st.builds(GpuProcess, st.integers(0, 50), ints,
                                                      st.text(max_size=10)),
                                            max_size=3).map(tuple)),
    errors=st.lists(st.sampled_from(["GPU is lost", "Corrupted infoROM", "Timeout", "x\ny"]),
                    max_size=2).map(tuple),
    reset_required=bools, drain_and_reset_recommended=bools,
    recovery_action=st.one_of(strs, st.sampled_from(["None", "Reboot", "Drain P2P"])),
)
xid_strategy = st.builds(
    XidEvent, xid=st.integers(0, 200), pci_bus_id=st.one_of(st.none(), st.text(max_size=20),
                                                            st.sampled_from(["PCI:0000:07:00",
                                                                             "PCI:0000:17:00"])),
    message=st.one_of(st.text(max_size=40), st.just("changed from 0x0 (None) to 0x4 (x)")),
    timestamp=st.one_of(st.none(), st.floats(allow_nan=True)),
    pid=st.one_of(st.none(), st.integers()))
snapshot_strategy = st.builds(
    NodeSnapshot, node=st.just("gpu01"), gpus=st.lists(gpu_strategy, max_size=9).map(tuple),
    topology=st.one_of(st.none(), st.dictionaries(st.tuples(st.integers(0, 9), st.integers(0, 9)),
                                                  st.sampled_from(["X", "NV12", "SYS", "nv12 ",
                                                                   "PIX", ""]), max_size=40)),
    xids=st.one_of(st.none(), st.lists(xid_strategy, max_size=6).map(tuple)),
    errors=st.lists(st.text(max_size=20), max_size=2).map(tuple),
    attached_gpus=ints,
)
exp_strategy = st.builds(Expectations, gpu_count=st.integers(0, 9),
                         nvlink_links_per_gpu=st.integers(0, 18),
                         expected_topology_cell=st.one_of(st.none(), st.sampled_from(["NV12",
                                                                                      "NV18"])),
                         pcie_width=st.one_of(st.none(), st.sampled_from([8, 16])))
maybe_ids = st.one_of(st.none(), st.lists(st.integers(-1, 12), max_size=8))
since = st.one_of(st.none(), st.floats(allow_nan=False))


call_kw = st.fixed_dictionaries({"gpus": maybe_ids, "xid_since": since, "job_pids": maybe_ids})


@pytest.mark.timeout(120)  # hypothesis draws hundreds of whole nodes: ~10 s on a quiet VM
@PROP
@given(snap=snapshot_strategy, prev=st.one_of(st.none(), snapshot_strategy), exp=exp_strategy,
       kw=call_kw)
@pytest.mark.slow
def test_check_node_never_raises(snap: NodeSnapshot, prev: NodeSnapshot | None,
                                 exp: Expectations, kw: dict[str, Any]) -> None:
    found = check_node(snap, exp, TH, previous=prev, **kw)
    assert found == sort_findings(found)
    for x in found:
        json.dumps(x.evidence)
        assert x.message and x.check_id
    if found:
        r = drain_reason(found)
        assert r.startswith(PREFIX) and len(r) <= 99 and set(r) <= SAFE


def all_none_gpu(i: int) -> Gpu:
    return Gpu(index=i)


@PROP
@given(exp=exp_strategy, kw=call_kw, with_prev=st.booleans())
def test_nothing_read_never_drains(exp: Expectations, kw: dict[str, Any],
                                   with_prev: bool) -> None:
    snap = NodeSnapshot(node="gpu01", gpus=tuple(all_none_gpu(i) for i in range(exp.gpu_count)))
    found = check_node(snap, exp, TH, previous=snap if with_prev else None, **kw)
    assert all(x.severity is FLAG for x in found), rows(found)
    assert all(x.check_id == MISSING for x in found)
