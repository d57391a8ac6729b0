"""A stateful in-memory ``Store`` for tests, with the same semantics as PostgreSQL.

Same idempotency (one row per key per record type), same reader ordering and
filters, and knobs to simulate the failures the real one has: an outage
(``set_available``), a write that commits but whose acknowledgement is lost
(``lose_next_ack``) and arbitrary injected errors (``fail_next_writes``,
``fail_next_reads``).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Collection
from datetime import datetime
from typing import TypeVar

from slurm_ml.store.errors import StoreError, StoreUnavailable
from slurm_ml.store.filters import check_limit, int_filter, require_since, text_filter
from slurm_ml.store.profiles import check_runs, percentile_cont
from slurm_ml.store.protocol import OneWritePath, WriteOutcome
from slurm_ml.store.records import (
    RECORD_TYPES,
    AuditEntry,
    BudgetSnapshot,
    GpuMemProfile,
    HealthEvent,
    JobGpuStats,
    ReconcilerDecision,
    Record,
    UtilSample,
    check_since,
)

R = TypeVar("R", HealthEvent, JobGpuStats, UtilSample, BudgetSnapshot, ReconcilerDecision,
            AuditEntry)

_TARGET = "fake:0/fake"


class FakeStore(OneWritePath):
    """In-memory ``Store``; inspect what landed with ``rows(RecordType)``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[str, list[Record]] = {kind: [] for kind in RECORD_TYPES}
        self._keys: dict[str, set[str]] = {kind: set() for kind in RECORD_TYPES}
        self._available = True
        self._closed = False
        self._lost_acks = 0
        self._failures: deque[StoreError] = deque()
        self._read_failures: deque[StoreError] = deque()
        self.write_attempts = 0

    # --- test knobs ---

    def set_available(self, available: bool) -> None:
        """While False every write and read raises StoreUnavailable, like a dead server."""
        with self._lock:
            self._available = available

    @property
    def available(self) -> bool:
        return self._available

    def lose_next_ack(self, n: int = 1) -> None:
        """The next ``n`` writes commit, then raise StoreUnavailable (ack lost in transit)."""
        with self._lock:
            self._lost_acks += n

    def fail_next_writes(self, error: StoreError, n: int = 1) -> None:
        """The next ``n`` writes raise ``error`` without landing."""
        with self._lock:
            self._failures.extend([error] * n)

    def fail_next_reads(self, error: StoreError, n: int = 1) -> None:
        """The next ``n`` reads raise ``error`` (a schema that is missing or outdated, a
        query the server refused) while writes still land."""
        with self._lock:
            self._read_failures.extend([error] * n)

    def rows(self, record_type: type[R]) -> list[R]:
        """Everything of that type that landed, in insertion order (works while 'down')."""
        with self._lock:
            return [r for r in self._rows[record_type.KIND] if isinstance(r, record_type)]

    # --- writes ---

    def _write(self, record: Record) -> WriteOutcome:
        with self._lock:
            self.write_attempts += 1
            self._check_usable()
            if self._failures:
                raise self._failures.popleft()
            keys = self._keys[record.KIND]
            if record.idempotency_key in keys:
                outcome = WriteOutcome.DUPLICATE
            else:
                keys.add(record.idempotency_key)
                self._rows[record.KIND].append(record)
                outcome = WriteOutcome.LANDED
            if self._lost_acks:
                self._lost_acks -= 1
                raise StoreUnavailable(
                    f"lost connection to PostgreSQL at {_TARGET} after commit (simulated)",
                    target=_TARGET,
                )
            return outcome

    def _check_readable(self) -> None:
        self._check_usable()
        if self._read_failures:
            raise self._read_failures.popleft()

    def _check_usable(self) -> None:
        if self._closed:
            raise StoreError("store is closed")
        if not self._available:
            raise StoreUnavailable(
                f"cannot connect to PostgreSQL at {_TARGET}: simulated outage", target=_TARGET
            )

    # --- reads (ordering mirrors the SQL: time column, then insertion order) ---

    def _select(
        self,
        record_type: type[R],
        keep: Callable[[R], bool],
        sort_key: Callable[[R], datetime],
        *,
        newest_first: bool,
    ) -> list[R]:
        with self._lock:
            self._check_readable()
            indexed = [
                (i, r)
                for i, r in enumerate(self._rows[record_type.KIND])
                if isinstance(r, record_type) and keep(r)
            ]
        indexed.sort(key=lambda ir: (sort_key(ir[1]), ir[0]), reverse=newest_first)
        return [r for _, r in indexed]

    def recent_health_events(
        self, node: str | None = None, since: datetime | None = None, limit: int = 1000
    ) -> list[HealthEvent]:
        check_limit(limit)
        bound = check_since(since)
        out = self._select(
            HealthEvent,
            lambda e: (
                (node is None or e.node == node) and (bound is None or e.observed_at >= bound)
            ),
            lambda e: e.observed_at,
            newest_first=True,
        )
        return out[:limit]

    def job_gpu_stats_for(self, user: str, job_name: str, limit: int = 20) -> list[JobGpuStats]:
        check_limit(limit)
        out = self._select(
            JobGpuStats,
            lambda s: s.user == user and s.job_name == job_name,
            lambda s: s.ended_at,
            newest_first=True,
        )
        return out[:limit]

    def job_gpu_stats_of(self, job_id: int) -> list[JobGpuStats]:
        rows = self._select(JobGpuStats, lambda s: s.job_id == job_id, lambda s: s.ended_at,
                            newest_first=False)
        return sorted(rows, key=lambda s: (s.node, s.gpu_index))  # stable: oldest first within

    def decisions_for_job(self, job_id: int) -> list[ReconcilerDecision]:
        return self._select(
            ReconcilerDecision, lambda d: d.job_id == job_id, lambda d: d.decided_at,
            newest_first=False,
        )

    def requeues_for(self, job_id: int) -> list[ReconcilerDecision]:
        # the database compares details->>'for_job' as text, so an id stored as a
        # string matches too
        return self._select(
            ReconcilerDecision, lambda d: str(d.details.get("for_job")) == str(job_id),
            lambda d: d.decided_at, newest_first=False,
        )

    def audit_entries(self, since: datetime | None = None) -> list[AuditEntry]:
        bound = check_since(since)
        return self._select(
            AuditEntry,
            lambda a: bound is None or a.at >= bound,
            lambda a: a.at,
            newest_first=False,
        )

    def util_samples_for(self, job_id: int, since: datetime | None = None) -> list[UtilSample]:
        bound = check_since(since)
        return self._select(
            UtilSample,
            lambda s: s.job_id == job_id and (bound is None or s.sampled_at >= bound),
            lambda s: s.sampled_at,
            newest_first=False,
        )

    def budget_snapshots(
        self, account: str | None = None, since: datetime | None = None
    ) -> list[BudgetSnapshot]:
        bound = check_since(since)
        return self._select(
            BudgetSnapshot,
            lambda b: (
                (account is None or b.account == account) and (bound is None or b.taken_at >= bound)
            ),
            lambda b: b.taken_at,
            newest_first=False,
        )

    def latest_budget_snapshots(self) -> list[BudgetSnapshot]:
        latest: dict[str, BudgetSnapshot] = {}
        for snap in self.budget_snapshots():
            latest[snap.account] = snap  # oldest first, so the last one seen wins
        return [latest[account] for account in sorted(latest)]

    def gpu_mem_profiles(self, runs: int = 20) -> list[GpuMemProfile]:
        check_runs(runs)
        with self._lock:
            self._check_readable()
            rows = list(enumerate(self._rows[JobGpuStats.KIND]))
        # per job, like GROUP BY user_name, job_name, job_id: peak, last end, last insert
        jobs: dict[tuple[str, str, int], tuple[int, datetime, int]] = {}
        for i, row in rows:
            if not isinstance(row, JobGpuStats):
                continue
            job = (row.user, row.job_name, row.job_id)
            seen = jobs.get(job)
            if seen is None:
                jobs[job] = (row.peak_mem_mb, row.ended_at, i)
            else:
                jobs[job] = (max(seen[0], row.peak_mem_mb), max(seen[1], row.ended_at), i)
        by_name: dict[tuple[str, str], list[tuple[datetime, int, int]]] = {}
        for (user, job_name, _), (peak, ended_at, last) in jobs.items():
            by_name.setdefault((user, job_name), []).append((ended_at, last, peak))
        out: list[GpuMemProfile] = []
        for (user, job_name), recent in sorted(by_name.items()):
            recent.sort(reverse=True)  # newest ended_at first, then newest insert
            peaks = [float(peak) for _, _, peak in recent[:runs]]
            out.append(GpuMemProfile(user, job_name, percentile_cont(peaks, 0.95), len(peaks)))
        return out

    # --- the daemon's window reads ---

    def util_samples_since(
        self, since: datetime, job_ids: Collection[int] | None = None
    ) -> list[UtilSample]:
        bound = require_since(since)
        ids = int_filter("job_ids", job_ids)
        if ids is not None and not ids:
            return []
        wanted = None if ids is None else frozenset(ids)
        return self._select(
            UtilSample,
            lambda s: s.sampled_at >= bound and (wanted is None or s.job_id in wanted),
            lambda s: s.sampled_at,
            newest_first=False,
        )

    def decisions_since(
        self, since: datetime, kinds: Collection[str] | None = None
    ) -> list[ReconcilerDecision]:
        bound = require_since(since)
        names = text_filter("kinds", kinds)
        if names is not None and not names:
            return []
        wanted = None if names is None else frozenset(names)
        return self._select(
            ReconcilerDecision,
            lambda d: d.decided_at >= bound and (wanted is None or d.kind in wanted),
            lambda d: d.decided_at,
            newest_first=False,
        )

    def job_gpu_stats_since(self, since: datetime) -> list[JobGpuStats]:
        bound = require_since(since)
        return self._select(
            JobGpuStats, lambda s: s.ended_at >= bound, lambda s: s.ended_at, newest_first=False
        )

    def audit_by_keys(self, keys: Collection[str]) -> dict[str, AuditEntry]:
        names = text_filter("keys", keys, optional=False)
        if not names:
            return {}
        wanted = frozenset(names)
        found = self._select(
            AuditEntry, lambda a: a.idempotency_key in wanted, lambda a: a.at, newest_first=False
        )
        return {entry.idempotency_key: entry for entry in found}

    def health_events_since(
        self,
        since: datetime,
        check_ids: Collection[str] | None = None,
        limit: int = 10000,
    ) -> list[HealthEvent]:
        check_limit(limit)
        bound = require_since(since)
        names = text_filter("check_ids", check_ids)
        if names is not None and not names:
            return []
        wanted = None if names is None else frozenset(names)
        newest = self._select(
            HealthEvent,
            lambda e: e.observed_at >= bound and (wanted is None or e.check_id in wanted),
            lambda e: e.observed_at,
            newest_first=True,
        )[:limit]
        newest.reverse()
        return newest

    def close(self) -> None:
        """Further use raises StoreError, as with a closed PostgresStore."""
        with self._lock:
            self._closed = True
