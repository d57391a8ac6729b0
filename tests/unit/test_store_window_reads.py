"""The reconciler daemon's window reads on FakeStore, SpoolingStore and OfflineStore.

``tests/integration/test_store_window_reads_pg.py`` checks that PostgresStore gives
the same answers on the same records.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_ml.store import (
    AuditEntry,
    FakeStore,
    HealthEvent,
    JobGpuStats,
    OfflineStore,
    PostgresStore,
    ReconcilerDecision,
    Record,
    SpoolingStore,
    Store,
    StoreUnavailable,
    UtilSample,
    write_record,
)

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
PLUS5 = timezone(timedelta(hours=5))


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def sample(key: str, job_id: int, minutes: int) -> UtilSample:
    return UtilSample(
        idempotency_key=key,
        job_id=job_id,
        node="gpu01",
        gpu_index=0,
        sampled_at=at(minutes),
        util_pct=0.5,
        mem_used_mb=2048,
    )


def decision(key: str, kind: str, minutes: int, *, dry_run: bool = False) -> ReconcilerDecision:
    return ReconcilerDecision(
        idempotency_key=key,
        cycle=minutes + 100,
        job_id=7,
        kind=kind,
        reason="why",
        decided_at=at(minutes),
        dry_run=dry_run,
    )


def stats(key: str, minutes: int) -> JobGpuStats:
    return JobGpuStats(
        idempotency_key=key,
        job_id=1,
        job_name="train",
        user="alice",
        account="nlp",
        node="gpu01",
        gpu_index=0,
        peak_mem_mb=1,
        mean_util_pct=50.0,
        ended_at=at(minutes),
    )


def audit(key: str, minutes: int) -> AuditEntry:
    return AuditEntry(
        idempotency_key=key,
        actor="slurm-ml daemon",
        action="requeue",
        target="job 7",
        at=at(minutes),
        details={"phase": "intent"},
    )


def event(key: str, check_id: str, minutes: int, node: str = "gpu01") -> HealthEvent:
    return HealthEvent(
        idempotency_key=key,
        node=node,
        check_id=check_id,
        severity="drain",
        message="",
        observed_at=at(minutes),
    )


# Written in this order: ties on the time column go to the earlier insert, and the
# records before T0 (minute -5) are never in a window that starts at T0.
RECORDS: list[Record] = [
    sample("u1", 7, 0),
    sample("u2", 8, 5),
    sample("u3", 7, 5),
    sample("u4", 9, 10),
    sample("u0", 7, -5),
    sample("u5", 8, 3),
    decision("d1", "requeue", 0),
    decision("d2", "zombie_warn", 5),
    decision("d3", "requeue", 5, dry_run=True),
    decision("d4", "site_factor", 1),
    decision("d0", "requeue", -5),
    stats("s1", 10),
    stats("s2", 0),
    stats("s3", 10),
    stats("s0", -5),
    audit("a1", 0),
    audit("a2", 5),
    audit("a0", -5),
    event("h1", "process.orphan", 0, node="gpu02"),
    event("h2", "xid", 5),
    event("h3", "process.orphan", 5),
    event("h4", "process.orphan", 10, node="gpu03"),
    event("h0", "process.orphan", -5),
    event("h5", "nvlink", 2),
]


def store_with(records: list[Record] = RECORDS) -> FakeStore:
    fake = FakeStore()
    for r in records:
        write_record(fake, r)
    return fake


def keys(result: list[Any] | dict[str, Any]) -> list[str]:
    if isinstance(result, dict):
        return sorted(result)
    return [r.idempotency_key for r in result]


Read = Callable[[Store], list[Any] | dict[str, Any]]

# (read, expected idempotency keys in the order returned; audit_by_keys: sorted keys)
READS: list[Any] = [
    pytest.param(lambda s: s.util_samples_since(T0), ["u1", "u5", "u2", "u3", "u4"], id="util-all"),
    pytest.param(lambda s: s.util_samples_since(at(5)), ["u2", "u3", "u4"], id="util-since-inclusive"),
    pytest.param(lambda s: s.util_samples_since(at(5).astimezone(PLUS5)), ["u2", "u3", "u4"], id="util-since-other-zone"),
    pytest.param(lambda s: s.util_samples_since(at(11)), [], id="util-since-after-all"),
    pytest.param(lambda s: s.util_samples_since(at(-60)), ["u0", "u1", "u5", "u2", "u3", "u4"], id="util-since-before-all"),
    pytest.param(lambda s: s.util_samples_since(T0, [7]), ["u1", "u3"], id="util-one-job"),
    pytest.param(lambda s: s.util_samples_since(T0, {7, 9}), ["u1", "u3", "u4"], id="util-set-of-jobs"),
    pytest.param(lambda s: s.util_samples_since(T0, (7, 7, 404)), ["u1", "u3"], id="util-repeats-and-unknown"),
    pytest.param(lambda s: s.util_samples_since(T0, range(8, 10)), ["u5", "u2", "u4"], id="util-range"),
    pytest.param(lambda s: s.util_samples_since(T0, []), [], id="util-no-jobs"),
    pytest.param(lambda s: s.decisions_since(T0), ["d1", "d4", "d2", "d3"], id="decisions-all"),
    pytest.param(lambda s: s.decisions_since(T0, ["requeue"]), ["d1", "d3"], id="decisions-kind"),
    pytest.param(lambda s: s.decisions_since(T0, ("requeue", "zombie_warn")), ["d1", "d2", "d3"], id="decisions-kinds"),
    pytest.param(lambda s: s.decisions_since(at(-5), ["requeue"]), ["d0", "d1", "d3"], id="decisions-since-inclusive"),
    pytest.param(lambda s: s.decisions_since(T0, ["Requeue"]), [], id="decisions-kind-is-case-sensitive"),
    pytest.param(lambda s: s.decisions_since(T0, set()), [], id="decisions-no-kinds"),
    pytest.param(lambda s: s.job_gpu_stats_since(T0), ["s2", "s1", "s3"], id="stats-all"),
    pytest.param(lambda s: s.job_gpu_stats_since(at(10)), ["s1", "s3"], id="stats-since-inclusive"),
    pytest.param(lambda s: s.job_gpu_stats_since(at(10) + timedelta(microseconds=1)), [], id="stats-since-just-after"),
    pytest.param(lambda s: s.audit_by_keys(["a1", "a0", "missing"]), ["a0", "a1"], id="audit-some-keys"),
    pytest.param(lambda s: s.audit_by_keys({"a2": 1}.keys()), ["a2"], id="audit-dict-keys"),
    pytest.param(lambda s: s.audit_by_keys(frozenset({"nope"})), [], id="audit-no-match"),
    pytest.param(lambda s: s.audit_by_keys([]), [], id="audit-no-keys"),
    pytest.param(lambda s: s.audit_by_keys(["u1", "d1"]), [], id="audit-keys-of-other-tables"),
    pytest.param(lambda s: s.health_events_since(T0), ["h1", "h5", "h2", "h3", "h4"], id="health-all"),
    pytest.param(lambda s: s.health_events_since(T0, ["process.orphan"]), ["h1", "h3", "h4"], id="health-check"),
    pytest.param(lambda s: s.health_events_since(at(-5), ["process.orphan", "xid"]), ["h0", "h1", "h2", "h3", "h4"], id="health-checks"),
    pytest.param(lambda s: s.health_events_since(T0, limit=2), ["h3", "h4"], id="health-limit-keeps-newest"),
    pytest.param(lambda s: s.health_events_since(T0, ["process.orphan", "xid"], limit=3), ["h2", "h3", "h4"], id="health-limit-with-checks"),
    pytest.param(lambda s: s.health_events_since(T0, limit=0), [], id="health-limit-zero"),
    pytest.param(lambda s: s.health_events_since(T0, []), [], id="health-no-checks"),
]


@pytest.mark.parametrize(("read", "expected"), READS)
def test_fake_window_reads(read: Read, expected: list[str]) -> None:
    assert keys(read(store_with())) == expected


@pytest.mark.parametrize(("read", "expected"), READS)
def test_spooling_store_reads_through(read: Read, expected: list[str], tmp_path: Path) -> None:
    fake = FakeStore()
    spooling = SpoolingStore(fake, tmp_path)
    for r in RECORDS:
        write_record(spooling, r)
    assert read(spooling) == read(fake)
    assert keys(read(spooling)) == expected


def test_reads_return_the_records_written() -> None:
    fake = store_with()
    assert fake.util_samples_since(T0, [9]) == [sample("u4", 9, 10)]
    assert fake.decisions_since(at(5), ["zombie_warn"]) == [decision("d2", "zombie_warn", 5)]
    assert fake.job_gpu_stats_since(at(10)) == [stats("s1", 10), stats("s3", 10)]
    assert fake.audit_by_keys(["a2"]) == {"a2": audit("a2", 5)}
    assert fake.health_events_since(at(10)) == [event("h4", "process.orphan", 10, node="gpu03")]


def test_spooled_records_are_not_read_until_drained(tmp_path: Path) -> None:
    fake = FakeStore()
    spooling = SpoolingStore(fake, tmp_path)
    fake.set_available(False)
    spooling.audit(audit("a1", 0))
    fake.set_available(True)
    assert spooling.has_pending()
    assert spooling.audit_by_keys(["a1"]) == {}
    spooling.drain()
    assert spooling.audit_by_keys(["a1"]) == {"a1": audit("a1", 0)}


# --- refused arguments: the same in every store, before any query ---

BAD_ARGS: list[Any] = [
    pytest.param(lambda s: s.util_samples_since(datetime(2025, 3, 1)), ValueError, "timezone-aware", id="naive-since"),
    pytest.param(lambda s: s.util_samples_since(None), TypeError, "since must be a datetime", id="no-since"),
    pytest.param(lambda s: s.job_gpu_stats_since("2025-03-01T00:00Z"), TypeError, "since must be", id="text-since"),
    pytest.param(lambda s: s.util_samples_since(T0, 7), TypeError, "collection of ints", id="one-job-id"),
    pytest.param(lambda s: s.util_samples_since(T0, [True]), TypeError, "must hold ints", id="bool-job-id"),
    pytest.param(lambda s: s.util_samples_since(T0, ["7"]), TypeError, "must hold ints", id="text-job-id"),
    pytest.param(lambda s: s.util_samples_since(T0, [2**63]), ValueError, "64-bit", id="huge-job-id"),
    pytest.param(lambda s: s.decisions_since(T0, "requeue"), TypeError, "collection of str", id="one-kind-string"),
    pytest.param(lambda s: s.decisions_since(T0, [1]), TypeError, "must hold str", id="int-kind"),
    pytest.param(lambda s: s.audit_by_keys("a1"), TypeError, "collection of str", id="one-key-string"),
    pytest.param(lambda s: s.audit_by_keys(["a\x00b"]), ValueError, "NUL", id="nul-key"),
    pytest.param(lambda s: s.audit_by_keys(["\ud800"]), ValueError, "valid Unicode", id="surrogate-key"),
    pytest.param(lambda s: s.audit_by_keys(None), TypeError, "collection of str", id="none-keys"),
    pytest.param(lambda s: s.health_events_since(T0, b"xid"), TypeError, "collection of str", id="bytes-checks"),
    pytest.param(lambda s: s.health_events_since(T0, limit=-1), ValueError, "limit", id="negative-limit"),
    pytest.param(lambda s: s.health_events_since(T0, limit=True), ValueError, "limit", id="bool-limit"),
]

STORES: list[Any] = [
    pytest.param(lambda _: store_with(), id="fake"),
    pytest.param(lambda d: SpoolingStore(store_with(), d), id="spooling"),
    pytest.param(lambda _: OfflineStore(), id="offline"),
    # never connects: the arguments are refused first
    pytest.param(lambda _: PostgresStore("postgresql://u:pw@127.0.0.1:1/x"), id="postgres"),
]


@pytest.mark.parametrize("make", STORES)
@pytest.mark.parametrize(("read", "error", "match"), BAD_ARGS)
def test_bad_arguments_are_refused(
    make: Callable[[Path], Store],
    read: Read,
    error: type[Exception],
    match: str,
    tmp_path: Path,
) -> None:
    with pytest.raises(error, match=match):
        read(make(tmp_path))


# --- unavailable stores ---

WINDOW_READS: list[Any] = [
    pytest.param(lambda s: s.util_samples_since(T0), id="util"),
    pytest.param(lambda s: s.util_samples_since(T0, [7]), id="util-jobs"),
    pytest.param(lambda s: s.decisions_since(T0), id="decisions"),
    pytest.param(lambda s: s.decisions_since(T0, ["requeue"]), id="decisions-kinds"),
    pytest.param(lambda s: s.job_gpu_stats_since(T0), id="stats"),
    pytest.param(lambda s: s.audit_by_keys(["a1"]), id="audit"),
    pytest.param(lambda s: s.health_events_since(T0), id="health"),
    pytest.param(lambda s: s.health_events_since(T0, ["xid"], limit=1), id="health-checks"),
]

EMPTY_FILTERS: list[Any] = [
    pytest.param(lambda s: s.util_samples_since(T0, []), [], id="util"),
    pytest.param(lambda s: s.decisions_since(T0, ()), [], id="decisions"),
    pytest.param(lambda s: s.audit_by_keys(set()), {}, id="audit"),
    pytest.param(lambda s: s.health_events_since(T0, frozenset()), [], id="health"),
]


def down_fake(_: Path) -> Store:
    fake = store_with()
    fake.set_available(False)
    return fake


def down_spooling(d: Path) -> Store:
    return SpoolingStore(down_fake(d), d)


DOWN: list[Any] = [
    pytest.param(down_fake, id="fake-down"),
    pytest.param(down_spooling, id="spooling-over-down"),
    pytest.param(lambda _: OfflineStore(), id="offline"),
]


@pytest.mark.parametrize("make", DOWN)
@pytest.mark.parametrize("read", WINDOW_READS)
def test_unavailable_store_raises(make: Callable[[Path], Store], read: Read, tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable):
        read(make(tmp_path))


@pytest.mark.parametrize("make", [*DOWN, STORES[-1]])
@pytest.mark.parametrize(("read", "expected"), EMPTY_FILTERS)
def test_empty_filter_needs_no_database(
    make: Callable[[Path], Store], read: Read, expected: object, tmp_path: Path
) -> None:
    assert read(make(tmp_path)) == expected


def test_every_store_satisfies_the_protocol(tmp_path: Path) -> None:
    for store in (FakeStore(), OfflineStore(), SpoolingStore(FakeStore(), tmp_path)):
        assert isinstance(store, Store)
    assert isinstance(PostgresStore("postgresql://u:pw@127.0.0.1:1/x"), Store)


# --- properties: the window reads agree with the older readers ---

MINUTES = st.integers(min_value=-3, max_value=3)
JOBS = st.integers(min_value=1, max_value=4)
CHECKS = st.sampled_from(["xid", "nvlink", "process.orphan"])


@st.composite
def histories(draw: st.DrawFn) -> list[Record]:
    out: list[Record] = []
    for i, (job, minute) in enumerate(draw(st.lists(st.tuples(JOBS, MINUTES), max_size=25))):
        out.append(sample(f"u{i}", job, minute))
    for i, (check, minute) in enumerate(draw(st.lists(st.tuples(CHECKS, MINUTES), max_size=25))):
        out.append(event(f"h{i}", check, minute, node=f"gpu0{i % 3}"))
    for i, minute in enumerate(draw(st.lists(MINUTES, max_size=10))):
        out.append(audit(f"a{i}", minute))
    return out


@settings(max_examples=200, deadline=None)
@given(
    records=histories(),
    since=MINUTES,
    jobs=st.frozensets(JOBS),
    checks=st.frozensets(CHECKS, min_size=1),
    limit=st.integers(min_value=0, max_value=30),
)
def test_window_reads_agree_with_the_older_readers(
    records: list[Record],
    since: int,
    jobs: frozenset[int],
    checks: frozenset[str],
    limit: int,
) -> None:
    fake = store_with(records)
    bound = at(since)
    rows = fake.rows(UtilSample)  # insertion order
    # sorted() is stable: ties on sampled_at keep insertion order, as the stores do
    assert fake.util_samples_since(bound) == sorted(
        (s for s in rows if s.sampled_at >= bound), key=lambda s: s.sampled_at
    )
    assert fake.util_samples_since(bound, jobs) == sorted(
        (s for job in jobs for s in fake.util_samples_for(job, bound)),
        key=lambda s: (s.sampled_at, rows.index(s)),
    )
    # without a filter: the newest ``limit`` of recent_health_events, oldest first
    assert fake.health_events_since(bound, limit=limit) == list(
        reversed(fake.recent_health_events(since=bound, limit=limit))
    )
    picked = fake.health_events_since(bound, checks, limit=limit)
    everything = [e for e in fake.health_events_since(bound, limit=1000) if e.check_id in checks]
    assert picked == everything[max(0, len(everything) - limit) :]
    wanted = [r.idempotency_key for r in records if isinstance(r, AuditEntry)][::2]
    assert fake.audit_by_keys(wanted) == {
        a.idempotency_key: a for a in fake.audit_entries() if a.idempotency_key in wanted
    }
