"""The reconciler daemon's window reads: refused arguments and unavailable stores on every
kind of store, what only FakeStore's outage knob shows, and properties.

Which records each read returns, and in what order, is the contract suite
(tests/store_contract.py: ``WINDOW_READS``), run over FakeStore and PostgresStore.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from builders import T0, at, audit_entry, health_event, store_with, util_sample
from hypothesis import given, settings
from hypothesis import strategies as st
from store_contract import WINDOW_RECORDS

from slurm_ml.store import (
    AuditEntry,
    FakeStore,
    OfflineStore,
    PostgresStore,
    Record,
    SpoolingStore,
    Store,
    StoreUnavailable,
    UtilSample,
)


def window_store() -> FakeStore:
    return store_with(WINDOW_RECORDS)


Read = Callable[[Store], list[Any] | dict[str, Any]]


def test_spooled_records_are_not_read_until_drained(tmp_path: Path) -> None:
    fake = FakeStore()
    spooling = SpoolingStore(fake, tmp_path)
    fake.set_available(False)
    spooling.audit(audit_entry("a1"))
    fake.set_available(True)
    assert spooling.has_pending()
    assert spooling.audit_by_keys(["a1"]) == {}
    spooling.drain()
    assert spooling.audit_by_keys(["a1"]) == {"a1": audit_entry("a1")}


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
    pytest.param(lambda _: window_store(), id="fake"),
    pytest.param(lambda d: SpoolingStore(window_store(), d), id="spooling"),
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
    fake = window_store()
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
        out.append(util_sample(f"u{i}", job_id=job, minutes=minute))
    for i, (check, minute) in enumerate(draw(st.lists(st.tuples(CHECKS, MINUTES), max_size=25))):
        out.append(health_event(f"h{i}", check_id=check, minutes=minute, node=f"gpu0{i % 3}"))
    for i, minute in enumerate(draw(st.lists(MINUTES, max_size=10))):
        out.append(audit_entry(f"a{i}", minutes=minute))
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
