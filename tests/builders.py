"""Builders for the records tests make: one place for the fields a test is not about.

Each builder fills every field with a plain, valid value, so that a test names only what it
checks: ``health_event("h1", node="gpu02", minutes=5)``. Store records are timed in minutes
(or hours) after ``T0`` unless the time field itself is given. Importable from every test
directory (pytest puts ``tests/``, the home of the root conftest.py, on ``sys.path``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from slurm_ml.health.snapshot import NOT_SUPPORTED, EccCounts, Gpu, NvLink, RemappedRows
from slurm_ml.model import ALLOC_QOS, Node
from slurm_ml.policy.cluster_jobs import RunningJob, WaitingJob
from slurm_ml.store import (
    AuditEntry,
    BudgetSnapshot,
    FakeStore,
    HealthEvent,
    JobGpuStats,
    ReconcilerDecision,
    Record,
    UtilSample,
    write_record,
)

# --------------------------------------------------------------- store records

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def at(minutes: float = 0, *, hours: float = 0, seconds: float = 0, micros: int = 0,
       base: datetime = T0) -> datetime:
    """``base`` (``T0``) plus the given offset."""
    return base + timedelta(hours=hours, minutes=minutes, seconds=seconds, microseconds=micros)


def health_event(key: str = "h1", *, minutes: float = 0, **fields: Any) -> HealthEvent:
    base: dict[str, Any] = {"idempotency_key": key, "node": "gpu01", "check_id": "xid",
                            "severity": "drain", "message": "", "observed_at": at(minutes)}
    return HealthEvent(**(base | fields))


def job_gpu_stats(key: str = "s1", *, job_id: int = 1, hours: float = 0, minutes: float = 0,
                  **fields: Any) -> JobGpuStats:
    base: dict[str, Any] = {"idempotency_key": key, "job_id": job_id, "job_name": "train",
                            "user": "alice", "account": "nlp", "node": "gpu01", "gpu_index": 0,
                            "peak_mem_mb": 1, "mean_util_pct": 50.0,
                            "ended_at": at(minutes, hours=hours)}
    return JobGpuStats(**(base | fields))


def util_sample(key: str = "u1", *, job_id: int = 1, minutes: float = 0,
                **fields: Any) -> UtilSample:
    base: dict[str, Any] = {"idempotency_key": key, "job_id": job_id, "node": "gpu01",
                            "gpu_index": 0, "sampled_at": at(minutes), "util_pct": 0.0,
                            "mem_used_mb": 1}
    return UtilSample(**(base | fields))


def budget_snapshot(key: str = "b1", *, account: str = "nlp", minutes: float = 0,
                    **fields: Any) -> BudgetSnapshot:
    base: dict[str, Any] = {"idempotency_key": key, "taken_at": at(minutes), "account": account,
                            "parent": "ml", "budget_share": 0.25, "usage_gpu_hours": 0.0,
                            "owed_gpu_hours": 1.0}
    return BudgetSnapshot(**(base | fields))


def decision(key: str = "d1", *, minutes: float = 0, **fields: Any) -> ReconcilerDecision:
    base: dict[str, Any] = {"idempotency_key": key, "cycle": 1, "job_id": 7, "kind": "requeue",
                            "reason": "", "decided_at": at(minutes), "dry_run": False}
    return ReconcilerDecision(**(base | fields))


def audit_entry(key: str = "a1", *, minutes: float = 0, **fields: Any) -> AuditEntry:
    base: dict[str, Any] = {"idempotency_key": key, "actor": "slurm-ml daemon",
                            "action": "requeue", "target": "job 7", "at": at(minutes)}
    return AuditEntry(**(base | fields))


def store_with(records: Iterable[Record] = (), store: Any = None) -> Any:
    """A FakeStore, or ``store`` (any Store), holding ``records``, written in order."""
    target = FakeStore() if store is None else store
    for r in records:
        write_record(target, r)
    return target


def one_of_each(tag: str = "", t0: datetime = T0) -> list[Record]:
    """Records of every table with their optional fields both set and unset: two health
    events, GPU stats, a sample, two snapshots, a job decision and a node one, an audit
    entry. Times are ``t0`` (the first event's in another zone); ``tag`` ends each key."""
    cet = timezone(timedelta(hours=1))
    return [
        health_event(f"h{tag}", check_id="row_remap", observed_at=t0.astimezone(cet),
                     message="row remapping failure on GPU 3 — pending", gpu_index=3,
                     details={"pending": True, "correctable": 0, "ids": [1, 2], "ratio": 0.1}),
        health_event(f"h2{tag}", node="gpu02", check_id="gpu_count", observed_at=t0),
        job_gpu_stats(f"s{tag}", job_id=2**40, job_name="llama-ft", gpu_index=7,
                      peak_mem_mb=79_000, mean_util_pct=93.25, ended_at=t0,
                      started_at=t0 - timedelta(hours=5), gpu_type="a100_80g"),
        util_sample(f"u{tag}", job_id=42, sampled_at=t0, mem_used_mb=30_000),
        budget_snapshot(f"b{tag}", taken_at=t0, parent="research", budget_share=0.125,
                        usage_gpu_hours=1234.5, owed_gpu_hours=1300.0, site_factor=-5, lane_gpus=3),
        budget_snapshot(f"b2{tag}", account="org", taken_at=t0, parent=None, budget_share=1.0,
                        owed_gpu_hours=0.0),
        decision(f"d{tag}", cycle=17, job_id=42, reason="over-served after min runtime",
                 decided_at=t0, dry_run=True, details={"victim_share": 1.4, "preemptor": 43}),
        decision(f"d2{tag}", cycle=17, job_id=None, kind="drain",
                 reason="slurm-ml: nvlink gpu3", decided_at=t0),
        audit_entry(f"a{tag}", actor="root", action="resume", target="gpu02", at=t0,
                    details={"why": "manual"}),
    ]


# --------------------------------------------------------------- Slurm's view


def slurm_node(name: str, *, state: str = "IDLE", flags: Iterable[str] = (),
               drained: bool = False, reason: str = "", features: tuple[str, ...] = ("a100",),
               gres: str = "gpu:a100:8", gpus: int = 8, gpu_type: str | None = "a100",
               cpus: int = 64, memory_mb: int = 512_000) -> Node:
    """A node as slurmctld reports it: by default an idle 8x A100 node, 64 CPUs, 500 GiB."""
    flag_set = frozenset(flags) | ({"DRAIN"} if drained else set())
    return Node(name, state, flag_set, reason, features, gres, gpus, gpu_type, cpus,
                memory_mb)


def running_job(job_id: int, *, start: int, **fields: Any) -> RunningJob:
    """A running job of the policy's view (``start``: epoch seconds of this run)."""
    gpus = fields.get("gpus", 8)
    base: dict[str, Any] = {"job_id": job_id, "name": f"job{job_id}", "account": "nlp",
                            "user": "u", "qos": ALLOC_QOS, "gpus": gpus, "gpu_type": "a100",
                            "billing_gpus": float(gpus), "nodes": (f"n{job_id}",),
                            "start": start, "time_min_s": 3600, "requeue": True,
                            "batch": True}
    return RunningJob(**(base | fields))


def waiting_job(job_id: int, *, submit: int, **fields: Any) -> WaitingJob:
    """A pending job of the policy's view (``submit``: epoch seconds)."""
    gpus = fields.get("gpus", 8)
    base: dict[str, Any] = {"job_id": job_id, "account": "vision", "user": "v",
                            "qos": ALLOC_QOS, "gpus": gpus, "gpu_types": frozenset(),
                            "billing_gpus": float(gpus), "submit": submit,
                            "reason": "Resources", "order": 0}
    return WaitingJob(**(base | fields))


# --------------------------------------------------------------- GPU snapshots


def bus(i: int) -> str:
    """GPU ``i``'s PCI bus id, normalised as NVML gives it (GPU 0 on bus 0x07)."""
    return f"00000000:{0x07 + 0x10 * i:02X}:00.0"


def nvlinks(n: int = 12, *, active: Any = True, **counters: Any) -> tuple[NvLink, ...]:
    """``n`` NVLinks, all ``active``, with error counters 0 unless given."""
    base = {"replay_errors": 0, "recovery_errors": 0, "crc_errors": 0} | counters
    return tuple(NvLink(link=k, active=active, **base) for k in range(n))


def a100(i: int = 0, **changes: Any) -> Gpu:
    """A healthy A100 SXM as NVML reports it: remapping, no page retirement, 12 links,
    no fabric state (pre-Hopper); memory and utilisation not read unless given."""
    g = Gpu(index=i, uuid=f"GPU-a100-{i}", name="NVIDIA A100-SXM4-80GB", pci_bus_id=bus(i),
            ecc_enabled=True, ecc=EccCounts(0, 0, 0, 0),
            remapped_rows=RemappedRows(0, 0, False, False), retired_pages=NOT_SUPPORTED,
            nvlinks=nvlinks(12), fabric_state=NOT_SUPPORTED, fabric_status=NOT_SUPPORTED,
            pcie_width_current=16, pcie_width_max=16, mig_enabled=False, processes=())
    return replace(g, **changes)
