"""Records validate and normalise on construction, and survive the spool's JSON codec."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from builders import T0, budget_snapshot, decision, health_event, util_sample
from hypothesis import given
from hypothesis import strategies as st

from slurm_ml.store import (
    RECORD_TYPES,
    AuditEntry,
    BudgetSnapshot,
    HealthEvent,
    JobGpuStats,
    ReconcilerDecision,
    UtilSample,
    derive_key,
)
from slurm_ml.store.records import check_since, record_from_json, record_to_json
from slurm_ml.store.spool import decode_line, encode_line


def test_naive_datetime_is_rejected() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        health_event(observed_at=datetime(2025, 1, 1))


def test_datetimes_are_normalised_to_utc() -> None:
    cet = timezone(timedelta(hours=1))
    ev = health_event(observed_at=datetime(2025, 3, 1, 13, 0, tzinfo=cet))
    assert ev.observed_at == T0
    assert ev.observed_at.tzinfo is UTC


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"idempotency_key": ""}, "must not be empty"),
        ({"node": "gpu\x0001"}, "NUL"),
        ({"gpu_index": -1}, r"must be in \[0"),
        ({"gpu_index": True}, "must be int"),
        ({"details": {"x": float("nan")}}, "JSON"),
        ({"details": {"x": object()}}, "JSON"),
        ({"details": {"x": "a\x00b"}}, "NUL"),
        ({"details": ["not", "a", "dict"]}, "must be a dict"),
        ({"message": "\ud800"}, "Unicode"),
    ],
)
def test_invalid_health_events(kw: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        health_event(**kw)


def test_numeric_ranges_and_normal_forms() -> None:
    s = util_sample(util_pct=50)  # int accepted, stored as float
    assert isinstance(s.util_pct, float)
    with pytest.raises(ValueError, match="util_pct"):
        util_sample(util_pct=100.5)
    with pytest.raises(ValueError, match="finite"):
        budget_snapshot(budget_share=math.inf)
    with pytest.raises(ValueError, match="dry_run"):
        decision(job_id=None, dry_run=1)


def test_details_are_json_normalised() -> None:
    ev = health_event(details={"links": (1, 2), "nested": {"ok": True}})
    assert ev.details == {"links": [1, 2], "nested": {"ok": True}}


def test_records_are_keyword_only_and_frozen() -> None:
    with pytest.raises(TypeError):
        HealthEvent("k", "n", "c", "s", "m", T0)  # type: ignore[call-arg]
    ev = health_event()
    with pytest.raises(AttributeError):
        ev.node = "other"  # type: ignore[misc]


def test_derive_key_is_stable_and_zone_independent() -> None:
    cet = timezone(timedelta(hours=1))
    a = derive_key("health", "gpu01", "ecc", T0)
    b = derive_key("health", "gpu01", "ecc", T0.astimezone(cet))
    assert a == b
    assert a.startswith("health:")
    assert derive_key("health", "gpu02", "ecc", T0) != a


def test_check_since() -> None:
    assert check_since(None) is None
    with pytest.raises(ValueError):
        check_since(datetime(2025, 1, 1))


def test_every_kind_has_a_record_type() -> None:
    assert set(RECORD_TYPES) == {
        "health_event",
        "job_gpu_stats",
        "util_sample",
        "budget_snapshot",
        "decision",
        "audit",
    }


def test_from_json_rejects_unknown_kind_and_fields() -> None:
    with pytest.raises(ValueError, match="unknown record kind"):
        record_from_json("nope", {})
    data = record_to_json(health_event())
    with pytest.raises(ValueError, match="unknown fields"):
        record_from_json("health_event", data | {"extra": 1})
    del data["node"]
    with pytest.raises(ValueError, match="bad health_event"):
        record_from_json("health_event", data)


# --- property: any valid record survives the spool line codec unchanged ---

chars = st.characters(exclude_characters="\x00", exclude_categories=("Cs",))
texts = st.text(chars, max_size=20)
names = st.text(chars, min_size=1, max_size=12)
times = st.datetimes(
    min_value=datetime(2000, 1, 1),
    max_value=datetime(2100, 1, 1),
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=-7)), timezone(timedelta(hours=5))]),
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
details = st.dictionaries(texts, json_values, max_size=4)
pct = st.floats(0, 100)
nonneg = st.floats(0, 1e9)
ids = st.integers(0, 2**63 - 1)


records = st.one_of(
    st.builds(
        HealthEvent,
        idempotency_key=names,
        node=names,
        check_id=names,
        severity=names,
        message=texts,
        observed_at=times,
        gpu_index=st.none() | st.integers(0, 2**31 - 1),
        details=details,
    ),
    st.builds(
        JobGpuStats,
        idempotency_key=names,
        job_id=ids,
        job_name=texts,
        user=names,
        account=texts,
        node=names,
        gpu_index=st.integers(0, 64),
        peak_mem_mb=st.integers(0, 2**40),
        mean_util_pct=pct,
        ended_at=times,
        started_at=st.none() | times,
        gpu_type=st.none() | texts,
    ),
    st.builds(
        UtilSample,
        idempotency_key=names,
        job_id=ids,
        node=names,
        gpu_index=st.integers(0, 64),
        sampled_at=times,
        util_pct=pct,
        mem_used_mb=st.integers(0, 2**40),
    ),
    st.builds(
        BudgetSnapshot,
        idempotency_key=names,
        taken_at=times,
        account=names,
        parent=st.none() | names,
        budget_share=nonneg,
        usage_gpu_hours=nonneg,
        owed_gpu_hours=nonneg,
        site_factor=st.none() | st.integers(-(2**63), 2**63 - 1),
    ),
    st.builds(
        ReconcilerDecision,
        idempotency_key=names,
        cycle=ids,
        job_id=st.none() | ids,
        kind=names,
        reason=texts,
        decided_at=times,
        dry_run=st.booleans(),
        details=details,
    ),
    st.builds(
        AuditEntry,
        idempotency_key=names,
        actor=names,
        action=names,
        target=texts,
        at=times,
        details=details,
    ),
)


@given(records)
def test_codec_round_trip(record: Any) -> None:
    line = encode_line(record)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode_line(line) == record
    assert record_from_json(record.KIND, record_to_json(record)) == record
