"""Store access for a hook run that never lets a database problem fail the hook.

In production the CLI hands the hooks a ``SpoolingStore`` (writes survive an outage);
this wrapper additionally swallows ``StoreError`` on every read and write, keeps the
error text for the outcome, and stops calling a store that said it is unavailable
(reads and writes separately: a spooling store still takes writes while its reads fail).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, TypeVar

from slurm_ml.health.checks import Finding
from slurm_ml.store.errors import StoreError, StoreUnavailable
from slurm_ml.store.protocol import Store, WriteOutcome, write_record
from slurm_ml.store.records import HealthEvent, Record, derive_key

__all__ = ["Recorder", "finding_dict", "finding_events", "jsonable", "run_key"]

log = logging.getLogger(__name__)
T = TypeVar("T")


class Recorder:
    """A ``Store`` seen through a hook: StoreError becomes None plus an entry in ``errors``."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.errors: list[str] = []
        self._reads = True
        self._writes = True

    def _failed(self, what: str, exc: StoreError) -> None:
        text = f"{what}: {type(exc).__name__}: {exc}"
        self.errors.append(text)
        log.warning("store %s", text)

    def read(self, what: str, fn: Callable[[Store], T]) -> T | None:
        """``fn(store)``, or None when the store fails (or already failed as unavailable)."""
        if not self._reads:
            return None
        try:
            return fn(self.store)
        except StoreError as exc:
            self._reads = not isinstance(exc, StoreUnavailable)
            self._failed(f"read {what}", exc)
            return None

    def write(self, record: Record) -> WriteOutcome | None:
        if not self._writes:
            self.errors.append(f"write {record.KIND} skipped: store unavailable")
            return None
        try:
            return write_record(self.store, record)
        except StoreError as exc:
            self._writes = not isinstance(exc, StoreUnavailable)
            self._failed(f"write {record.KIND}", exc)
            return None

    def write_all(self, records: Iterable[Record]) -> int:
        """Write each record; how many the store took (landed, duplicate or spooled)."""
        return sum(1 for r in records if self.write(r) is not None)


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_clean(v) for v in value]
    return value


def jsonable(value: dict[str, Any]) -> dict[str, Any]:
    """A JSON-normal copy that a record accepts: unknown objects as text, NaN as null."""
    out: dict[str, Any] = json.loads(json.dumps(_clean(value), default=str))
    return out


def finding_dict(f: Finding) -> dict[str, Any]:
    """A finding as audit/event details."""
    return jsonable({"check_id": f.check_id, "severity": f.severity.value, "gpu": f.gpu,
                     "message": f.message, "detail": f.detail, "evidence": f.evidence})


def run_key(hook: str, node: str, job_id: int | None, now: datetime) -> str:
    """Names one run of a hook: per job for prolog/epilog (a retried hook is the same run),
    per time otherwise."""
    return derive_key(f"run.{hook}", node, job_id if job_id is not None else now)


def finding_events(findings: Iterable[Finding], *, hook: str, node: str, run: str,
                   job_id: int | None, now: datetime,
                   severity: Callable[[Finding], str] | None = None) -> list[HealthEvent]:
    """One HealthEvent per finding. The key is (run, check, GPU, n-th such finding), so a
    retried hook of the same job records nothing twice. ``severity`` overrides the
    recorded severity (periodic defers drains on a busy node)."""
    seen: dict[tuple[str, int | None], int] = {}
    out = []
    for f in findings:
        n = seen[(f.check_id, f.gpu)] = seen.get((f.check_id, f.gpu), -1) + 1
        sev = severity(f) if severity is not None else f.severity.value
        details = {"hook": hook, "run": run, "job_id": job_id, "detail": f.detail,
                   "evidence": f.evidence}
        if sev != f.severity.value:
            details["check_severity"] = f.severity.value
        out.append(HealthEvent(
            idempotency_key=derive_key("health_event", run, node, f.check_id, f.gpu, n),
            node=node, check_id=f.check_id, severity=sev, message=f.message,
            observed_at=now, gpu_index=f.gpu, details=jsonable(details)))
    return out
