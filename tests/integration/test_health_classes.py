"""Issue 15's fault classes on the real dev cluster: each one, injected into a dev node's
replayed captures, drains the node through the real Prolog (slurmd runs slurm-ml-prolog)
with the owned reason it must have.

The captures are constructed in the driver's wording (tests/fixtures/gpu-constructed/,
README there): the real ones of the held-out corpus cannot be committed
(docs/research/gpu-fault-corpus/). The job is pinned to gpu03 with all 8 GPUs, so the
prolog checks the whole node; after the failed prolog Slurm requeues it, and it waits
until ``restore`` cancels it.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from node_restore import node_map, restored, slurm_ml_cli
from slurm_jobs import sbatch

from slurm_ml import proc
from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config
from slurm_ml.devcluster.cluster import DevCluster
from slurm_ml.devcluster.layout import Layout
from slurm_ml.store.postgres import PostgresStore
from slurm_ml.store.records import AuditEntry

pytestmark = pytest.mark.integration
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu-constructed"
NODE = "gpu03"

#: class → (capture, the drain reason Slurm must show, check ids the audit must carry)
CASES: dict[str, tuple[str, str, set[str]]] = {
    "kernel-message-not-an-xid": (
        "dmesg_fallen_off_bus_no_xid_two_lines.log",
        "slurm-ml: kernel.fallen_off_bus (fallen off bus 0000:b3:00.0) +1 more",
        {"kernel.fallen_off_bus", "kernel.probe_failed"}),
    "error-state-not-a-reading": (
        "smi_device_handle_unknown_error.txt",
        "slurm-ml: gpu.lost gpu0 (Unknown Error)", {"gpu.lost"}),
    "expectation-from-the-class-not-the-peers": (
        "a100x8_nvlink_status_all_6_of_12.txt",
        "slurm-ml: nvlink.active_links gpu0 (6/12 active) +7 more", {"nvlink.active_links"}),
    "driver-spelling-variant": (
        "a100x8_nvlink_status_gpu6_all_inactive_mixed_case.txt",
        "slurm-ml: nvlink.active_links gpu6 (0/12 active)", {"nvlink.active_links"}),
    "two-gpus-in-one-log": (
        "journal_xid48_and_rminitadapter_two_gpus.log",
        "slurm-ml: kernel.init_failed (init failed 0000:0a:00.0) +1 more",
        {"kernel.init_failed", "xid.48"}),
}


@pytest.fixture(scope="module")
def cluster(slurm_conf: str) -> DevCluster:
    root = Path(os.environ["SLURM_ML_DEVCLUSTER"])
    return DevCluster(load_config(DEFAULT_CONFIG), Layout(root), say=lambda _m: None,
                      config_path=DEFAULT_CONFIG)


@pytest.fixture
def restore(cluster: DevCluster) -> Iterator[list[int]]:
    """Job ids the test submitted; the cluster is restored before and after it."""
    yield from restored(cluster, DEFAULT_CONFIG)


def _wait_drained(cluster: DevCluster, node: str, timeout_s: float = 90) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        n = node_map(cluster)[node]
        if n.drained:
            return n.reason
        assert time.monotonic() < deadline, f"{node} not drained: {n}"
        time.sleep(1)


def _wait_drain_audit(admin_dsn: str, job: int, timeout_s: float = 30) -> list[AuditEntry]:
    """The prolog's drain entries for ``job``. The prolog drains first and audits after
    (the entry says whether the drain applied), so the node can show drained a moment
    before its entry is written: on a loaded machine, longer than one poll."""
    deadline = time.monotonic() + timeout_s
    while True:
        with PostgresStore(admin_dsn) as store:
            drains = [e for e in store.audit_entries() if e.action == "drain"
                      and e.target == NODE and e.details.get("job_id") == job]
        if drains or time.monotonic() >= deadline:
            return drains
        time.sleep(1)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", sorted(CASES))
def test_fault_class_drains_through_the_real_prolog(case: str, cluster: DevCluster,
                                                    restore: list[int],
                                                    admin_dsn: str) -> None:
    capture, reason, checks = CASES[case]
    res = slurm_ml_cli(cluster, DEFAULT_CONFIG, "devcluster", "fault", NODE,
                       str(FIXTURES / capture))
    assert res.returncode == 0, res.stdout + res.stderr
    job = sbatch("alice", f"--job-name=class-{uuid.uuid4().hex[:8]}", "-w", NODE,
                 "--gres=gpu:a100_40g:8", "-t", "2", "--wrap", "sleep 3", jobs=restore)

    assert _wait_drained(cluster, NODE) == reason
    drains = _wait_drain_audit(admin_dsn, job)
    assert [(e.details["hook"], e.details["applied"]) for e in drains] == [("prolog", True)]
    found = [f for f in drains[0].details["findings"] if f["check_id"] != "probe.missing"]
    assert {f["check_id"] for f in found} == checks
    if case == "two-gpus-in-one-log":  # both GPUs named, each by its PCI address
        from slurm_ml.health.snapshot import bus_key
        assert {bus_key(f["evidence"]["pci_bus_id"]) for f in found} == {
            (0, 0x07, 0), (0, 0x0A, 0)}
    sinfo = proc.run(["sinfo", "-R", "-h", "-n", NODE, "-o", "%E"]).stdout.strip()
    assert sinfo == reason
