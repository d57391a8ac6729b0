"""The records the store persists, as frozen, validated dataclasses.

Every record carries an ``idempotency_key``: the producer derives it from what
the record *is* (see ``derive_key``), so a write replayed after a crash, a lost
acknowledgement or a spool drain lands exactly once.

Records validate and normalise themselves on construction (UTC datetimes,
finite floats, JSON-normal ``details``, no NUL characters) so that the fake and
PostgreSQL accept exactly the same values and a record read back compares equal
to the one written.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, ClassVar

_INT4_MAX = 2**31 - 1
_INT8_MAX = 2**63 - 1
_INT8_MIN = -(2**63)


def derive_key(namespace: str, *parts: object) -> str:
    """A stable idempotency key from the facts that identify a record.

    Use the same parts for the same real-world event (e.g. node, check and
    observation time) and a replay produces the same key. Datetimes are
    normalised to UTC first so the key does not depend on the caller's zone.
    """
    norm = [
        p.astimezone(UTC).isoformat() if isinstance(p, datetime) and p.tzinfo else p for p in parts
    ]
    blob = json.dumps(norm, default=str, separators=(",", ":"), sort_keys=True)
    return f"{namespace}:{hashlib.sha256(blob.encode()).hexdigest()[:40]}"


# --- field validators: each checks getattr(obj, name) and stores the normal form ---


def _set(obj: object, name: str, value: object) -> None:
    object.__setattr__(obj, name, value)


def _fail(obj: object, name: str, why: str) -> ValueError:
    return ValueError(f"{type(obj).__name__}.{name} {why}")


def _text(obj: object, name: str, *, optional: bool = False, nonempty: bool = False) -> None:
    value = getattr(obj, name)
    if value is None and optional:
        return
    if not isinstance(value, str):
        raise _fail(obj, name, f"must be str, got {type(value).__name__}")
    if nonempty and not value:
        raise _fail(obj, name, "must not be empty")
    _check_str(obj, name, value)


def _check_str(obj: object, name: str, value: str) -> None:
    if "\x00" in value:
        raise _fail(obj, name, "must not contain NUL characters (PostgreSQL rejects them)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _fail(obj, name, "must be valid Unicode (no lone surrogates)") from exc


def _int(
    obj: object,
    name: str,
    *,
    lo: int = _INT8_MIN,
    hi: int = _INT8_MAX,
    optional: bool = False,
) -> None:
    value = getattr(obj, name)
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(obj, name, f"must be int, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise _fail(obj, name, f"must be in [{lo}, {hi}], got {value}")


def _float(obj: object, name: str, *, lo: float = -math.inf, hi: float = math.inf) -> None:
    value = getattr(obj, name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(obj, name, f"must be a number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise _fail(obj, name, "must be finite")
    if not lo <= value <= hi:
        raise _fail(obj, name, f"must be in [{lo}, {hi}], got {value}")
    _set(obj, name, value)


def _bool(obj: object, name: str) -> None:
    if not isinstance(getattr(obj, name), bool):
        raise _fail(obj, name, "must be bool")


def _ts(obj: object, name: str, *, optional: bool = False) -> None:
    value = getattr(obj, name)
    if value is None and optional:
        return
    if not isinstance(value, datetime):
        raise _fail(obj, name, f"must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise _fail(obj, name, "must be timezone-aware (naive times are ambiguous)")
    _set(obj, name, value.astimezone(UTC))


def _json(obj: object, name: str) -> None:
    value = getattr(obj, name)
    if not isinstance(value, dict):
        raise _fail(obj, name, f"must be a dict, got {type(value).__name__}")
    try:
        normal = json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise _fail(obj, name, f"must be JSON-serialisable: {exc}") from exc
    _walk_json(obj, name, normal)
    _set(obj, name, normal)


def _walk_json(obj: object, name: str, value: Any) -> None:
    if isinstance(value, str):
        _check_str(obj, name, value)
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_str(obj, name, k)
            _walk_json(obj, name, v)
    elif isinstance(value, list):
        for v in value:
            _walk_json(obj, name, v)


def check_since(since: datetime | None) -> datetime | None:
    """Validate a reader's ``since`` bound: aware datetimes only, normalised to UTC."""
    if since is None:
        return None
    if since.tzinfo is None or since.utcoffset() is None:
        raise ValueError("since must be timezone-aware")
    return since.astimezone(UTC)


# --- the records ---


@dataclass(frozen=True, slots=True, kw_only=True)
class HealthEvent:
    """One health check result on a node (and GPU, when the check is per GPU)."""

    KIND: ClassVar[str] = "health_event"

    idempotency_key: str
    node: str
    check_id: str
    severity: str
    message: str
    observed_at: datetime
    gpu_index: int | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _text(self, "idempotency_key", nonempty=True)
        _text(self, "node", nonempty=True)
        _text(self, "check_id", nonempty=True)
        _text(self, "severity", nonempty=True)
        _text(self, "message")
        _ts(self, "observed_at")
        _int(self, "gpu_index", lo=0, hi=_INT4_MAX, optional=True)
        _json(self, "details")


@dataclass(frozen=True, slots=True, kw_only=True)
class JobGpuStats:
    """Per-GPU usage summary of one finished job (written by the epilog)."""

    KIND: ClassVar[str] = "job_gpu_stats"

    idempotency_key: str
    job_id: int
    job_name: str
    user: str
    account: str
    node: str
    gpu_index: int
    peak_mem_mb: int
    mean_util_pct: float
    ended_at: datetime
    started_at: datetime | None = None
    gpu_type: str | None = None

    def __post_init__(self) -> None:
        _text(self, "idempotency_key", nonempty=True)
        _int(self, "job_id", lo=0)
        _text(self, "job_name")
        _text(self, "user", nonempty=True)
        _text(self, "account")
        _text(self, "node", nonempty=True)
        _int(self, "gpu_index", lo=0, hi=_INT4_MAX)
        _int(self, "peak_mem_mb", lo=0)
        _float(self, "mean_util_pct", lo=0.0, hi=100.0)
        _ts(self, "ended_at")
        _ts(self, "started_at", optional=True)
        _text(self, "gpu_type", optional=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class UtilSample:
    """One utilisation sample of one GPU of a running job (zombie detection)."""

    KIND: ClassVar[str] = "util_sample"

    idempotency_key: str
    job_id: int
    node: str
    gpu_index: int
    sampled_at: datetime
    util_pct: float
    mem_used_mb: int

    def __post_init__(self) -> None:
        _text(self, "idempotency_key", nonempty=True)
        _int(self, "job_id", lo=0)
        _text(self, "node", nonempty=True)
        _int(self, "gpu_index", lo=0, hi=_INT4_MAX)
        _ts(self, "sampled_at")
        _float(self, "util_pct", lo=0.0, hi=100.0)
        _int(self, "mem_used_mb", lo=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetSnapshot:
    """One account's fair-share state at one reconciler cycle (the budgets ledger)."""

    KIND: ClassVar[str] = "budget_snapshot"

    idempotency_key: str
    taken_at: datetime
    account: str
    parent: str | None
    budget_share: float
    usage_gpu_hours: float
    owed_gpu_hours: float
    site_factor: int | None = None
    #: GPUs the account's short jobs hold in the fast lane (None: not a project account)
    lane_gpus: int | None = None

    def __post_init__(self) -> None:
        _text(self, "idempotency_key", nonempty=True)
        _ts(self, "taken_at")
        _text(self, "account", nonempty=True)
        _text(self, "parent", optional=True)
        _float(self, "budget_share", lo=0.0)
        _float(self, "usage_gpu_hours", lo=0.0)
        _float(self, "owed_gpu_hours", lo=0.0)
        _int(self, "site_factor", optional=True)
        _int(self, "lane_gpus", lo=0, hi=2**31 - 1, optional=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReconcilerDecision:
    """One decision of a reconciler cycle (applied, or only logged when ``dry_run``).

    ``job_id`` is None for decisions about nodes (drain, resume); put the node in
    ``details``.
    """

    KIND: ClassVar[str] = "decision"

    idempotency_key: str
    cycle: int
    job_id: int | None
    kind: str
    reason: str
    decided_at: datetime
    dry_run: bool
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _text(self, "idempotency_key", nonempty=True)
        _int(self, "cycle", lo=0)
        _int(self, "job_id", lo=0, optional=True)
        _text(self, "kind", nonempty=True)
        _text(self, "reason")
        _ts(self, "decided_at")
        _bool(self, "dry_run")
        _json(self, "details")


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditEntry:
    """Who did what to what, for the audit log (admin actions, automatic repairs)."""

    KIND: ClassVar[str] = "audit"

    idempotency_key: str
    actor: str
    action: str
    target: str
    at: datetime
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _text(self, "idempotency_key", nonempty=True)
        _text(self, "actor", nonempty=True)
        _text(self, "action", nonempty=True)
        _text(self, "target")
        _ts(self, "at")
        _json(self, "details")


# --- read results (computed by the store, never written: not in ``Record``, not spooled) ---


@dataclass(frozen=True, slots=True)
class GpuMemProfile:
    """The 95th percentile of per-job peak GPU memory over one user's recent jobs of one name.

    A job's peak is the largest ``peak_mem_mb`` of its GPUs; ``runs`` is how many
    of that user's most recent jobs with that name the percentile was taken over.
    """

    user: str
    job_name: str
    p95_mem_mb: float
    runs: int


Record = HealthEvent | JobGpuStats | UtilSample | BudgetSnapshot | ReconcilerDecision | AuditEntry

RECORD_TYPES: dict[str, type[Record]] = {
    cls.KIND: cls
    for cls in (HealthEvent, JobGpuStats, UtilSample, BudgetSnapshot, ReconcilerDecision,
                AuditEntry)
}

_DATETIME_FIELDS: dict[str, frozenset[str]] = {
    "health_event": frozenset({"observed_at"}),
    "job_gpu_stats": frozenset({"ended_at", "started_at"}),
    "util_sample": frozenset({"sampled_at"}),
    "budget_snapshot": frozenset({"taken_at"}),
    "decision": frozenset({"decided_at"}),
    "audit": frozenset({"at"}),
}


def record_to_json(record: Record) -> dict[str, Any]:
    """A JSON-ready dict of the record's fields (datetimes as ISO 8601 UTC)."""
    out: dict[str, Any] = {}
    for f in fields(record):
        value = getattr(record, f.name)
        out[f.name] = value.isoformat() if isinstance(value, datetime) else value
    return out


def record_from_json(kind: str, data: dict[str, Any]) -> Record:
    """Rebuild a record from ``record_to_json`` output; ValueError if it does not fit."""
    cls = RECORD_TYPES.get(kind)
    if cls is None:
        raise ValueError(f"unknown record kind {kind!r}")
    if not isinstance(data, dict):
        raise ValueError("record data must be an object")
    known = {f.name for f in fields(cls)}
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"unknown fields for {kind}: {sorted(unknown)}")
    args = dict(data)
    for name in _DATETIME_FIELDS[kind]:
        raw = args.get(name)
        if isinstance(raw, str):
            args[name] = datetime.fromisoformat(raw)
    try:
        return cls(**args)
    except TypeError as exc:
        raise ValueError(f"bad {kind} record: {exc}") from exc
