"""OfflineStore: the ``Store`` of a host that has no database configured.

Every write and every read raises ``StoreUnavailable``. Wrapped in a ``SpoolingStore``
(what the node hooks get when neither ``--dsn``, ``$SLURM_ML_DSN`` nor ``store.dsn`` names
a database), every record lands in the local spool, where it waits until a database is
configured and something ``drain()``s the spool into it; reads find nothing, which the
hooks treat as "store unreadable" (no resume without history, the breaker decides on
Slurm's view alone).
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import NoReturn

from slurm_ml.store.errors import StoreUnavailable
from slurm_ml.store.filters import check_limit, int_filter, require_since, text_filter
from slurm_ml.store.protocol import OneWritePath, WriteOutcome
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

__all__ = ["OfflineStore"]


class OfflineStore(OneWritePath):
    """A store that is never available (see the module doc)."""

    def __init__(self, why: str = "no database configured (store.dsn / $SLURM_ML_DSN)") -> None:
        self.why = why

    def _down(self) -> NoReturn:
        raise StoreUnavailable(self.why, target="offline")

    def _write(self, record: Record) -> WriteOutcome:
        self._down()

    def recent_health_events(self, node: str | None = None, since: datetime | None = None,
                             limit: int = 1000) -> list[HealthEvent]:
        self._down()

    def job_gpu_stats_for(self, user: str, job_name: str, limit: int = 20) -> list[JobGpuStats]:
        self._down()

    def job_gpu_stats_of(self, job_id: int) -> list[JobGpuStats]:
        self._down()

    def decisions_for_job(self, job_id: int) -> list[ReconcilerDecision]:
        self._down()

    def requeues_for(self, job_id: int) -> list[ReconcilerDecision]:
        self._down()

    def audit_entries(self, since: datetime | None = None) -> list[AuditEntry]:
        self._down()

    def util_samples_for(self, job_id: int, since: datetime | None = None) -> list[UtilSample]:
        self._down()

    def budget_snapshots(self, account: str | None = None,
                         since: datetime | None = None) -> list[BudgetSnapshot]:
        self._down()

    def latest_budget_snapshots(self) -> list[BudgetSnapshot]:
        self._down()

    def gpu_mem_profiles(self, runs: int = 20) -> list[GpuMemProfile]:
        self._down()

    # An empty filter is answered without a database, as PostgresStore does.

    def util_samples_since(self, since: datetime,
                           job_ids: Collection[int] | None = None) -> list[UtilSample]:
        require_since(since)
        if int_filter("job_ids", job_ids) == []:
            return []
        self._down()

    def decisions_since(self, since: datetime,
                        kinds: Collection[str] | None = None) -> list[ReconcilerDecision]:
        require_since(since)
        if text_filter("kinds", kinds) == []:
            return []
        self._down()

    def job_gpu_stats_since(self, since: datetime) -> list[JobGpuStats]:
        require_since(since)
        self._down()

    def audit_by_keys(self, keys: Collection[str]) -> dict[str, AuditEntry]:
        if not text_filter("keys", keys, optional=False):
            return {}
        self._down()

    def health_events_since(self, since: datetime, check_ids: Collection[str] | None = None,
                            limit: int = 10000) -> list[HealthEvent]:
        check_limit(limit)
        require_since(since)
        if text_filter("check_ids", check_ids) == []:
            return []
        self._down()

    def close(self) -> None:
        return None
