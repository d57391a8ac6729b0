"""``PostgresStore``: the real ``Store`` over one lazily opened psycopg connection.

All SQL is constant text with bound parameters. Each write is one
``INSERT ... ON CONFLICT (idempotency_key) DO NOTHING`` in autocommit mode, so
it is atomic and replays are harmless. That same idempotency makes it safe to
retry once on a fresh connection when a long-lived one turns out to be dead
(e.g. after a server restart), instead of spooling needlessly.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Collection, Mapping
from datetime import datetime
from typing import Any, LiteralString, TypeVar

import psycopg
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from slurm_ml.store import _pg
from slurm_ml.store.errors import StoreError
from slurm_ml.store.filters import check_limit, int_filter, require_since, text_filter
from slurm_ml.store.profiles import check_runs
from slurm_ml.store.protocol import WriteOutcome
from slurm_ml.store.records import (
    AuditEntry,
    BudgetSnapshot,
    GpuMemProfile,
    HealthEvent,
    JobGpuStats,
    ReconcilerDecision,
    UtilSample,
    check_since,
)

T = TypeVar("T")
R = TypeVar(
    "R",
    HealthEvent,
    JobGpuStats,
    UtilSample,
    BudgetSnapshot,
    ReconcilerDecision,
    AuditEntry,
    GpuMemProfile,
)

# --- writes ---

_INSERT_HEALTH_EVENT: LiteralString = """
INSERT INTO health_events
    (idempotency_key, node, gpu_index, check_id, severity, message, details, observed_at)
VALUES
    (%(idempotency_key)s, %(node)s, %(gpu_index)s, %(check_id)s, %(severity)s, %(message)s,
     %(details)s, %(observed_at)s)
ON CONFLICT (idempotency_key) DO NOTHING
"""

_INSERT_JOB_GPU_STATS: LiteralString = """
INSERT INTO job_gpu_stats
    (idempotency_key, job_id, job_name, user_name, account, node, gpu_index, gpu_type,
     peak_mem_mb, mean_util_pct, started_at, ended_at)
VALUES
    (%(idempotency_key)s, %(job_id)s, %(job_name)s, %(user)s, %(account)s, %(node)s,
     %(gpu_index)s, %(gpu_type)s, %(peak_mem_mb)s, %(mean_util_pct)s, %(started_at)s,
     %(ended_at)s)
ON CONFLICT (idempotency_key) DO NOTHING
"""

_INSERT_UTIL_SAMPLE: LiteralString = """
INSERT INTO util_samples
    (idempotency_key, job_id, node, gpu_index, sampled_at, util_pct, mem_used_mb)
VALUES
    (%(idempotency_key)s, %(job_id)s, %(node)s, %(gpu_index)s, %(sampled_at)s, %(util_pct)s,
     %(mem_used_mb)s)
ON CONFLICT (idempotency_key) DO NOTHING
"""

_INSERT_BUDGET_SNAPSHOT: LiteralString = """
INSERT INTO budget_snapshots
    (idempotency_key, taken_at, account, parent, budget_share, usage_gpu_hours,
     owed_gpu_hours, site_factor, lane_gpus)
VALUES
    (%(idempotency_key)s, %(taken_at)s, %(account)s, %(parent)s, %(budget_share)s,
     %(usage_gpu_hours)s, %(owed_gpu_hours)s, %(site_factor)s, %(lane_gpus)s)
ON CONFLICT (idempotency_key) DO NOTHING
"""

_INSERT_DECISION: LiteralString = """
INSERT INTO decisions
    (idempotency_key, cycle, job_id, kind, reason, details, decided_at, dry_run)
VALUES
    (%(idempotency_key)s, %(cycle)s, %(job_id)s, %(kind)s, %(reason)s, %(details)s,
     %(decided_at)s, %(dry_run)s)
ON CONFLICT (idempotency_key) DO NOTHING
"""

_INSERT_AUDIT: LiteralString = """
INSERT INTO audit_log (idempotency_key, actor, action, target, details, at)
VALUES (%(idempotency_key)s, %(actor)s, %(action)s, %(target)s, %(details)s, %(at)s)
ON CONFLICT (idempotency_key) DO NOTHING
"""

# --- reads: one constant statement per filter combination (index-friendly plans) ---

_SELECT_HEALTH: LiteralString = """
SELECT idempotency_key, node, check_id, severity, message, observed_at, gpu_index, details
FROM health_events
ORDER BY observed_at DESC, id DESC
LIMIT %(limit)s
"""

_SELECT_HEALTH_NODE: LiteralString = """
SELECT idempotency_key, node, check_id, severity, message, observed_at, gpu_index, details
FROM health_events
WHERE node = %(node)s
ORDER BY observed_at DESC, id DESC
LIMIT %(limit)s
"""

_SELECT_HEALTH_SINCE: LiteralString = """
SELECT idempotency_key, node, check_id, severity, message, observed_at, gpu_index, details
FROM health_events
WHERE observed_at >= %(since)s
ORDER BY observed_at DESC, id DESC
LIMIT %(limit)s
"""

_SELECT_HEALTH_NODE_SINCE: LiteralString = """
SELECT idempotency_key, node, check_id, severity, message, observed_at, gpu_index, details
FROM health_events
WHERE node = %(node)s AND observed_at >= %(since)s
ORDER BY observed_at DESC, id DESC
LIMIT %(limit)s
"""

_SELECT_JOB_GPU_STATS: LiteralString = """
SELECT idempotency_key, job_id, job_name, user_name AS "user", account, node, gpu_index,
       peak_mem_mb, mean_util_pct, ended_at, started_at, gpu_type
FROM job_gpu_stats
WHERE user_name = %(user)s AND job_name = %(job_name)s
ORDER BY ended_at DESC, id DESC
LIMIT %(limit)s
"""

_SELECT_JOB_GPU_STATS_OF: LiteralString = """
SELECT idempotency_key, job_id, job_name, user_name AS "user", account, node, gpu_index,
       peak_mem_mb, mean_util_pct, ended_at, started_at, gpu_type
FROM job_gpu_stats
WHERE job_id = %(job_id)s
ORDER BY node, gpu_index, ended_at, id
"""

_SELECT_DECISIONS_FOR_JOB: LiteralString = """
SELECT idempotency_key, cycle, job_id, kind, reason, decided_at, dry_run, details
FROM decisions
WHERE job_id = %(job_id)s
ORDER BY decided_at, id
"""

_SELECT_REQUEUES_FOR: LiteralString = """
SELECT idempotency_key, cycle, job_id, kind, reason, decided_at, dry_run, details
FROM decisions
WHERE details ? 'for_job' AND details->>'for_job' = %(for_job)s
ORDER BY decided_at, id
"""

_SELECT_AUDIT: LiteralString = """
SELECT idempotency_key, actor, action, target, at, details
FROM audit_log
ORDER BY at, id
"""

_SELECT_AUDIT_SINCE: LiteralString = """
SELECT idempotency_key, actor, action, target, at, details
FROM audit_log
WHERE at >= %(since)s
ORDER BY at, id
"""

_SELECT_UTIL: LiteralString = """
SELECT idempotency_key, job_id, node, gpu_index, sampled_at, util_pct, mem_used_mb
FROM util_samples
WHERE job_id = %(job_id)s
ORDER BY sampled_at, id
"""

_SELECT_UTIL_SINCE: LiteralString = """
SELECT idempotency_key, job_id, node, gpu_index, sampled_at, util_pct, mem_used_mb
FROM util_samples
WHERE job_id = %(job_id)s AND sampled_at >= %(since)s
ORDER BY sampled_at, id
"""

_SELECT_BUDGET: LiteralString = """
SELECT idempotency_key, taken_at, account, parent, budget_share, usage_gpu_hours,
       owed_gpu_hours, site_factor, lane_gpus
FROM budget_snapshots
ORDER BY taken_at, id
"""

_SELECT_BUDGET_ACCOUNT: LiteralString = """
SELECT idempotency_key, taken_at, account, parent, budget_share, usage_gpu_hours,
       owed_gpu_hours, site_factor, lane_gpus
FROM budget_snapshots
WHERE account = %(account)s
ORDER BY taken_at, id
"""

_SELECT_BUDGET_SINCE: LiteralString = """
SELECT idempotency_key, taken_at, account, parent, budget_share, usage_gpu_hours,
       owed_gpu_hours, site_factor, lane_gpus
FROM budget_snapshots
WHERE taken_at >= %(since)s
ORDER BY taken_at, id
"""

_SELECT_BUDGET_ACCOUNT_SINCE: LiteralString = """
SELECT idempotency_key, taken_at, account, parent, budget_share, usage_gpu_hours,
       owed_gpu_hours, site_factor, lane_gpus
FROM budget_snapshots
WHERE account = %(account)s AND taken_at >= %(since)s
ORDER BY taken_at, id
"""


_SELECT_LATEST_BUDGET: LiteralString = """
SELECT DISTINCT ON (account)
       idempotency_key, taken_at, account, parent, budget_share, usage_gpu_hours,
       owed_gpu_hours, site_factor, lane_gpus
FROM budget_snapshots
ORDER BY account, taken_at DESC, id DESC
"""

# The daemon's window reads. Filters are bound as one array parameter each, so a whole
# cycle's running jobs cost one query.

_SELECT_UTIL_SINCE_ALL: LiteralString = """
SELECT idempotency_key, job_id, node, gpu_index, sampled_at, util_pct, mem_used_mb
FROM util_samples
WHERE sampled_at >= %(since)s
ORDER BY sampled_at, id
"""

_SELECT_UTIL_SINCE_JOBS: LiteralString = """
SELECT idempotency_key, job_id, node, gpu_index, sampled_at, util_pct, mem_used_mb
FROM util_samples
WHERE sampled_at >= %(since)s AND job_id = ANY(%(job_ids)s::bigint[])
ORDER BY sampled_at, id
"""

_SELECT_DECISIONS_SINCE: LiteralString = """
SELECT idempotency_key, cycle, job_id, kind, reason, decided_at, dry_run, details
FROM decisions
WHERE decided_at >= %(since)s
ORDER BY decided_at, id
"""

_SELECT_DECISIONS_SINCE_KINDS: LiteralString = """
SELECT idempotency_key, cycle, job_id, kind, reason, decided_at, dry_run, details
FROM decisions
WHERE decided_at >= %(since)s AND kind = ANY(%(kinds)s::text[])
ORDER BY decided_at, id
"""

_SELECT_JOB_GPU_STATS_SINCE: LiteralString = """
SELECT idempotency_key, job_id, job_name, user_name AS "user", account, node, gpu_index,
       peak_mem_mb, mean_util_pct, ended_at, started_at, gpu_type
FROM job_gpu_stats
WHERE ended_at >= %(since)s
ORDER BY ended_at, id
"""

_SELECT_AUDIT_BY_KEYS: LiteralString = """
SELECT idempotency_key, actor, action, target, at, details
FROM audit_log
WHERE idempotency_key = ANY(%(keys)s::text[])
"""

# Newest first so that LIMIT keeps the newest; the caller reverses to oldest first.
_SELECT_HEALTH_SINCE_ALL: LiteralString = """
SELECT idempotency_key, node, check_id, severity, message, observed_at, gpu_index, details
FROM health_events
WHERE observed_at >= %(since)s
ORDER BY observed_at DESC, id DESC
LIMIT %(limit)s
"""

_SELECT_HEALTH_SINCE_CHECKS: LiteralString = """
SELECT idempotency_key, node, check_id, severity, message, observed_at, gpu_index, details
FROM health_events
WHERE observed_at >= %(since)s AND check_id = ANY(%(check_ids)s::text[])
ORDER BY observed_at DESC, id DESC
LIMIT %(limit)s
"""

# A job's peak is its largest per-GPU peak; of each (user, job_name) keep the newest
# ``runs`` jobs (last ended_at, then last insert) and take the interpolated p95.
_SELECT_GPU_MEM_PROFILES: LiteralString = """
WITH jobs AS (
    SELECT user_name, job_name, job_id, max(peak_mem_mb) AS peak,
           max(ended_at) AS ended_at, max(id) AS last_id
    FROM job_gpu_stats
    GROUP BY user_name, job_name, job_id
), recent AS (
    SELECT user_name, job_name, peak,
           row_number() OVER (
               PARTITION BY user_name, job_name ORDER BY ended_at DESC, last_id DESC
           ) AS rank
    FROM jobs
)
SELECT user_name AS "user", job_name,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY peak) AS p95_mem_mb,
       count(*)::integer AS runs
FROM recent
WHERE rank <= %(runs)s
GROUP BY user_name, job_name
ORDER BY user_name, job_name
"""


class PostgresStore:
    """The real ``Store``. Thread-safe (one connection, used under a lock).

    The connection opens on first use, not in the constructor, so a daemon can
    start while the database is down (writes then raise StoreUnavailable and a
    wrapping ``SpoolingStore`` spools them). The schema must already be
    migrated (see ``migrate``).
    """

    def __init__(self, dsn: str, connect_timeout_s: float = 5) -> None:
        if connect_timeout_s <= 0:
            raise ValueError("connect_timeout_s must be positive")
        self._target = _pg.describe_target(dsn)  # also validates the DSN
        self._dsn = dsn
        self._connect_timeout_s = connect_timeout_s
        self._conn: _pg.Connection | None = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def target(self) -> str:
        """``host:port/dbname`` this store talks to (safe to log)."""
        return self._target

    def __repr__(self) -> str:
        return f"PostgresStore({self._target})"

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._drop_connection()

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):  # already broken: nothing to release
                conn.close()

    def _run(self, op: Callable[[_pg.Connection], T]) -> T:
        """Run ``op`` on the connection, reconnecting once if a reused one had died."""
        with self._lock:
            if self._closed:
                raise StoreError(f"store for {self._target} is closed")
            for attempt in range(2):
                fresh = self._conn is None
                if self._conn is None:
                    self._conn = _pg.connect(self._dsn, self._connect_timeout_s)
                conn = self._conn
                try:
                    return op(conn)
                except psycopg.Error as exc:
                    broken = conn.broken or conn.closed
                    if broken:
                        self._drop_connection()
                    if broken and not fresh and attempt == 0:
                        continue  # stale connection: the write is idempotent, try once more
                    raise _pg.translate(exc, self._target, self._dsn) from exc
            raise AssertionError("unreachable")  # pragma: no cover

    # --- writes ---

    def _insert(self, sql: LiteralString, params: Mapping[str, Any]) -> WriteOutcome:
        def op(conn: _pg.Connection) -> WriteOutcome:
            cur = conn.execute(sql, params)
            return WriteOutcome.LANDED if cur.rowcount == 1 else WriteOutcome.DUPLICATE

        return self._run(op)

    def record_health_event(self, event: HealthEvent) -> WriteOutcome:
        return self._insert(
            _INSERT_HEALTH_EVENT,
            {
                "idempotency_key": event.idempotency_key,
                "node": event.node,
                "gpu_index": event.gpu_index,
                "check_id": event.check_id,
                "severity": event.severity,
                "message": event.message,
                "details": Jsonb(event.details),
                "observed_at": event.observed_at,
            },
        )

    def record_job_gpu_stats(self, stats: JobGpuStats) -> WriteOutcome:
        return self._insert(
            _INSERT_JOB_GPU_STATS,
            {
                "idempotency_key": stats.idempotency_key,
                "job_id": stats.job_id,
                "job_name": stats.job_name,
                "user": stats.user,
                "account": stats.account,
                "node": stats.node,
                "gpu_index": stats.gpu_index,
                "gpu_type": stats.gpu_type,
                "peak_mem_mb": stats.peak_mem_mb,
                "mean_util_pct": stats.mean_util_pct,
                "started_at": stats.started_at,
                "ended_at": stats.ended_at,
            },
        )

    def record_util_sample(self, sample: UtilSample) -> WriteOutcome:
        return self._insert(
            _INSERT_UTIL_SAMPLE,
            {
                "idempotency_key": sample.idempotency_key,
                "job_id": sample.job_id,
                "node": sample.node,
                "gpu_index": sample.gpu_index,
                "sampled_at": sample.sampled_at,
                "util_pct": sample.util_pct,
                "mem_used_mb": sample.mem_used_mb,
            },
        )

    def record_budget_snapshot(self, snapshot: BudgetSnapshot) -> WriteOutcome:
        return self._insert(
            _INSERT_BUDGET_SNAPSHOT,
            {
                "idempotency_key": snapshot.idempotency_key,
                "taken_at": snapshot.taken_at,
                "account": snapshot.account,
                "parent": snapshot.parent,
                "budget_share": snapshot.budget_share,
                "usage_gpu_hours": snapshot.usage_gpu_hours,
                "owed_gpu_hours": snapshot.owed_gpu_hours,
                "site_factor": snapshot.site_factor,
                "lane_gpus": snapshot.lane_gpus,
            },
        )

    def record_decision(self, decision: ReconcilerDecision) -> WriteOutcome:
        return self._insert(
            _INSERT_DECISION,
            {
                "idempotency_key": decision.idempotency_key,
                "cycle": decision.cycle,
                "job_id": decision.job_id,
                "kind": decision.kind,
                "reason": decision.reason,
                "details": Jsonb(decision.details),
                "decided_at": decision.decided_at,
                "dry_run": decision.dry_run,
            },
        )

    def audit(self, entry: AuditEntry) -> WriteOutcome:
        return self._insert(
            _INSERT_AUDIT,
            {
                "idempotency_key": entry.idempotency_key,
                "actor": entry.actor,
                "action": entry.action,
                "target": entry.target,
                "details": Jsonb(entry.details),
                "at": entry.at,
            },
        )

    # --- reads ---

    def _select(
        self, record_type: type[R], sql: LiteralString, params: Mapping[str, Any]
    ) -> list[R]:
        def op(conn: _pg.Connection) -> list[R]:
            with conn.cursor(row_factory=class_row(record_type)) as cur:
                cur.execute(sql, params)
                return cur.fetchall()

        return self._run(op)

    def recent_health_events(
        self, node: str | None = None, since: datetime | None = None, limit: int = 1000
    ) -> list[HealthEvent]:
        check_limit(limit)
        bound = check_since(since)
        params = {"node": node, "since": bound, "limit": limit}
        if node is None and bound is None:
            return self._select(HealthEvent, _SELECT_HEALTH, params)
        if bound is None:
            return self._select(HealthEvent, _SELECT_HEALTH_NODE, params)
        if node is None:
            return self._select(HealthEvent, _SELECT_HEALTH_SINCE, params)
        return self._select(HealthEvent, _SELECT_HEALTH_NODE_SINCE, params)

    def job_gpu_stats_for(self, user: str, job_name: str, limit: int = 20) -> list[JobGpuStats]:
        check_limit(limit)
        return self._select(
            JobGpuStats,
            _SELECT_JOB_GPU_STATS,
            {"user": user, "job_name": job_name, "limit": limit},
        )

    def job_gpu_stats_of(self, job_id: int) -> list[JobGpuStats]:
        return self._select(JobGpuStats, _SELECT_JOB_GPU_STATS_OF, {"job_id": job_id})

    def decisions_for_job(self, job_id: int) -> list[ReconcilerDecision]:
        return self._select(ReconcilerDecision, _SELECT_DECISIONS_FOR_JOB, {"job_id": job_id})

    def requeues_for(self, job_id: int) -> list[ReconcilerDecision]:
        return self._select(ReconcilerDecision, _SELECT_REQUEUES_FOR,
                            {"for_job": str(job_id)})

    def audit_entries(self, since: datetime | None = None) -> list[AuditEntry]:
        bound = check_since(since)
        if bound is None:
            return self._select(AuditEntry, _SELECT_AUDIT, {})
        return self._select(AuditEntry, _SELECT_AUDIT_SINCE, {"since": bound})

    def util_samples_for(self, job_id: int, since: datetime | None = None) -> list[UtilSample]:
        bound = check_since(since)
        params = {"job_id": job_id, "since": bound}
        if bound is None:
            return self._select(UtilSample, _SELECT_UTIL, params)
        return self._select(UtilSample, _SELECT_UTIL_SINCE, params)

    def budget_snapshots(
        self, account: str | None = None, since: datetime | None = None
    ) -> list[BudgetSnapshot]:
        bound = check_since(since)
        params = {"account": account, "since": bound}
        if account is None and bound is None:
            return self._select(BudgetSnapshot, _SELECT_BUDGET, params)
        if bound is None:
            return self._select(BudgetSnapshot, _SELECT_BUDGET_ACCOUNT, params)
        if account is None:
            return self._select(BudgetSnapshot, _SELECT_BUDGET_SINCE, params)
        return self._select(BudgetSnapshot, _SELECT_BUDGET_ACCOUNT_SINCE, params)

    # The database's collation need not be code-point order: sort text keys as Python
    # does, so that these results equal FakeStore's on any server.

    def latest_budget_snapshots(self) -> list[BudgetSnapshot]:
        rows = self._select(BudgetSnapshot, _SELECT_LATEST_BUDGET, {})
        return sorted(rows, key=lambda b: b.account)

    def gpu_mem_profiles(self, runs: int = 20) -> list[GpuMemProfile]:
        check_runs(runs)
        rows = self._select(GpuMemProfile, _SELECT_GPU_MEM_PROFILES, {"runs": runs})
        return sorted(rows, key=lambda p: (p.user, p.job_name))

    # --- the daemon's window reads ---

    def util_samples_since(
        self, since: datetime, job_ids: Collection[int] | None = None
    ) -> list[UtilSample]:
        bound = require_since(since)
        ids = int_filter("job_ids", job_ids)
        if ids is None:
            return self._select(UtilSample, _SELECT_UTIL_SINCE_ALL, {"since": bound})
        if not ids:
            return []
        return self._select(
            UtilSample, _SELECT_UTIL_SINCE_JOBS, {"since": bound, "job_ids": ids}
        )

    def decisions_since(
        self, since: datetime, kinds: Collection[str] | None = None
    ) -> list[ReconcilerDecision]:
        bound = require_since(since)
        wanted = text_filter("kinds", kinds)
        if wanted is None:
            return self._select(ReconcilerDecision, _SELECT_DECISIONS_SINCE, {"since": bound})
        if not wanted:
            return []
        return self._select(
            ReconcilerDecision, _SELECT_DECISIONS_SINCE_KINDS, {"since": bound, "kinds": wanted}
        )

    def job_gpu_stats_since(self, since: datetime) -> list[JobGpuStats]:
        bound = require_since(since)
        return self._select(JobGpuStats, _SELECT_JOB_GPU_STATS_SINCE, {"since": bound})

    def audit_by_keys(self, keys: Collection[str]) -> dict[str, AuditEntry]:
        wanted = text_filter("keys", keys, optional=False)
        if not wanted:
            return {}
        rows = self._select(AuditEntry, _SELECT_AUDIT_BY_KEYS, {"keys": wanted})
        return {entry.idempotency_key: entry for entry in rows}

    def health_events_since(
        self,
        since: datetime,
        check_ids: Collection[str] | None = None,
        limit: int = 10000,
    ) -> list[HealthEvent]:
        check_limit(limit)
        bound = require_since(since)
        wanted = text_filter("check_ids", check_ids)
        params = {"since": bound, "check_ids": wanted, "limit": limit}
        if wanted is None:
            rows = self._select(HealthEvent, _SELECT_HEALTH_SINCE_ALL, params)
        elif not wanted:
            return []
        else:
            rows = self._select(HealthEvent, _SELECT_HEALTH_SINCE_CHECKS, params)
        rows.reverse()
        return rows
