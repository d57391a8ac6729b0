"""The ``Store`` Protocol: the only way the rest of slurm-ml persists or reads data.

Three implementations satisfy it: ``PostgresStore`` (real), ``FakeStore``
(stateful, in memory, for tests) and ``SpoolingStore`` (wraps either and
survives outages). Code takes a ``Store`` and never knows which one it has.
"""

from __future__ import annotations

import enum
from collections.abc import Collection
from datetime import datetime
from typing import Protocol, runtime_checkable

from slurm_ml.store.records import (
    AuditEntry,
    BudgetSnapshot,
    GpuMemProfile,
    HealthEvent,
    JobGpuStats,
    ReconcilerDecision,
    Record,
    UtilSample,
)


class WriteOutcome(enum.StrEnum):
    """What became of one write, so callers and the spool can count exactly-once delivery."""

    LANDED = "landed"  # inserted now
    DUPLICATE = "duplicate"  # a row with this idempotency key already existed; nothing changed
    SPOOLED = "spooled"  # the store was unavailable; the record waits in the local spool


@runtime_checkable
class Store(Protocol):
    """Writes are idempotent per record type: the same ``idempotency_key`` lands once.

    Writes raise ``StoreUnavailable`` when the database cannot be reached,
    ``StoreIntegrityError`` when it refuses the data, ``StoreError`` otherwise.
    Readers return records equal to the ones written; ``since`` bounds are
    inclusive and must be timezone-aware. A reader given an empty filter
    collection answers at once without a query, so even while the database is
    unreachable; a malformed filter (one ``str`` for a collection, NUL, ints
    beyond 64 bits) raises TypeError/ValueError before any query.
    """

    def record_health_event(self, event: HealthEvent) -> WriteOutcome: ...

    def record_job_gpu_stats(self, stats: JobGpuStats) -> WriteOutcome: ...

    def record_util_sample(self, sample: UtilSample) -> WriteOutcome: ...

    def record_budget_snapshot(self, snapshot: BudgetSnapshot) -> WriteOutcome: ...

    def record_decision(self, decision: ReconcilerDecision) -> WriteOutcome: ...

    def audit(self, entry: AuditEntry) -> WriteOutcome: ...

    def recent_health_events(
        self, node: str | None = None, since: datetime | None = None, limit: int = 1000
    ) -> list[HealthEvent]:
        """Newest first (observed_at, then insertion order), at most ``limit``."""
        ...

    def job_gpu_stats_for(self, user: str, job_name: str, limit: int = 20) -> list[JobGpuStats]:
        """Per-GPU rows of that user's jobs with that name, newest ``ended_at`` first."""
        ...

    def job_gpu_stats_of(self, job_id: int) -> list[JobGpuStats]:
        """The epilog's per-GPU rows of one job (every run), by (node, GPU), oldest first."""
        ...

    def decisions_for_job(self, job_id: int) -> list[ReconcilerDecision]:
        """Oldest first (decided_at, then insertion order)."""
        ...

    def requeues_for(self, job_id: int) -> list[ReconcilerDecision]:
        """The decisions made so that ``job_id`` could start (``details.for_job``: the
        contracts' and the fast lane's requeues of other jobs), oldest first."""
        ...

    def audit_entries(self, since: datetime | None = None) -> list[AuditEntry]:
        """Oldest first (at, then insertion order)."""
        ...

    def util_samples_for(self, job_id: int, since: datetime | None = None) -> list[UtilSample]:
        """Oldest first (sampled_at, then insertion order)."""
        ...

    def budget_snapshots(
        self, account: str | None = None, since: datetime | None = None
    ) -> list[BudgetSnapshot]:
        """Oldest first (taken_at, then insertion order)."""
        ...

    def latest_budget_snapshots(self) -> list[BudgetSnapshot]:
        """Each account's newest snapshot (taken_at, then insertion order), sorted by account."""
        ...

    def gpu_mem_profiles(self, runs: int = 20) -> list[GpuMemProfile]:
        """One profile per (user, job_name) in the job GPU stats, sorted by (user, job_name).

        A job's peak is the max ``peak_mem_mb`` over its per-GPU rows; of each
        (user, job_name) the ``runs`` newest jobs (latest ``ended_at``, then
        insertion order) are kept and ``p95_mem_mb`` is the 95th percentile of
        their peaks, linearly interpolated (PostgreSQL's ``percentile_cont``).
        ValueError if ``runs`` < 1.
        """
        ...

    # --- the reconciler daemon's window reads (``since`` is mandatory and aware) ---

    def util_samples_since(
        self, since: datetime, job_ids: Collection[int] | None = None
    ) -> list[UtilSample]:
        """Samples with ``sampled_at >= since`` of ``job_ids`` (None: of every job).

        Oldest first (sampled_at, then insertion order); an empty ``job_ids`` gives [].
        """
        ...

    def decisions_since(
        self, since: datetime, kinds: Collection[str] | None = None
    ) -> list[ReconcilerDecision]:
        """Decisions with ``decided_at >= since`` of ``kinds`` (None: of every kind).

        Oldest first (decided_at, then insertion order); an empty ``kinds`` gives [].
        """
        ...

    def job_gpu_stats_since(self, since: datetime) -> list[JobGpuStats]:
        """Per-GPU rows with ``ended_at >= since``, oldest first (ended_at, insertion order)."""
        ...

    def audit_by_keys(self, keys: Collection[str]) -> dict[str, AuditEntry]:
        """The audit entries whose idempotency key is in ``keys``, by key.

        Keys with no entry are absent; an empty ``keys`` gives {}.
        """
        ...

    def health_events_since(
        self,
        since: datetime,
        check_ids: Collection[str] | None = None,
        limit: int = 10000,
    ) -> list[HealthEvent]:
        """Events of any node with ``observed_at >= since`` of ``check_ids`` (None: all).

        Of more than ``limit`` the newest ``limit`` are kept (as ``recent_health_events``
        does), returned oldest first (observed_at, then insertion order). An empty
        ``check_ids`` gives [].
        """
        ...

    def close(self) -> None: ...


class OneWritePath:
    """Store's six typed writes for implementations that treat every record alike.

    FakeStore and SpoolingStore handle all records in one ``_write``; this
    mixin keeps the typed methods the Protocol asks for in one place.
    """

    def _write(self, record: Record) -> WriteOutcome:
        raise NotImplementedError

    def record_health_event(self, event: HealthEvent) -> WriteOutcome:
        return self._write(event)

    def record_job_gpu_stats(self, stats: JobGpuStats) -> WriteOutcome:
        return self._write(stats)

    def record_util_sample(self, sample: UtilSample) -> WriteOutcome:
        return self._write(sample)

    def record_budget_snapshot(self, snapshot: BudgetSnapshot) -> WriteOutcome:
        return self._write(snapshot)

    def record_decision(self, decision: ReconcilerDecision) -> WriteOutcome:
        return self._write(decision)

    def audit(self, entry: AuditEntry) -> WriteOutcome:
        return self._write(entry)


def write_record(store: Store, record: Record) -> WriteOutcome:
    """Send any record to the matching write method (used by the spool's replay)."""
    if isinstance(record, HealthEvent):
        return store.record_health_event(record)
    if isinstance(record, JobGpuStats):
        return store.record_job_gpu_stats(record)
    if isinstance(record, UtilSample):
        return store.record_util_sample(record)
    if isinstance(record, BudgetSnapshot):
        return store.record_budget_snapshot(record)
    if isinstance(record, ReconcilerDecision):
        return store.record_decision(record)
    return store.audit(record)
