"""The Store and LeaderLock contracts: what every implementation must do, as one suite.

A backend's test module subclasses a contract and supplies its fixtures:

- ``StoreContract``: ``store`` (an empty, open store, closed after the test),
  ``row_count`` (how many rows of a record type the backend itself holds) and
  ``down_store`` (a store of the same kind whose database cannot be reached);
- ``LeaderLockContract``: ``locks`` (two sessions contending for one lock key).

``tests/unit/test_store_contract_fake.py`` runs them over FakeStore and FakeLeaderLock in
the unit run, ``tests/integration/test_store_contract_pg.py`` over PostgresStore and
PgLeaderLock in the integration run. What only one backend has (PostgreSQL's migrations,
reconnects and indexes; FakeStore's failure knobs) stays in that backend's own modules.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from builders import (
    T0,
    at,
    audit_entry,
    budget_snapshot,
    decision,
    health_event,
    job_gpu_stats,
    one_of_each,
    store_with,
    util_sample,
)

from slurm_ml.store import (
    RECORD_TYPES,
    AuditEntry,
    BudgetSnapshot,
    DrainResult,
    GpuMemProfile,
    HealthEvent,
    JobGpuStats,
    LeaderLock,
    ReconcilerDecision,
    Record,
    SpoolingStore,
    Store,
    StoreError,
    WriteOutcome,
    write_record,
)
from slurm_ml.store.profiles import percentile_cont

RECORD_CLASSES: tuple[type[Record], ...] = tuple(RECORD_TYPES.values())
PLUS5 = timezone(timedelta(hours=5))
RowCount = Callable[[type[Record]], int]
Read = Callable[[Store], Any]


def keys(result: list[Any] | dict[str, Any]) -> list[str]:
    """Idempotency keys in the order returned (of ``audit_by_keys``: sorted)."""
    if isinstance(result, dict):
        return sorted(result)
    return [r.idempotency_key for r in result]


def assert_same_profiles(got: list[GpuMemProfile], want: list[GpuMemProfile]) -> None:
    """Equal profiles; p95 within float noise (PostgreSQL computes it in SQL)."""
    assert [(p.user, p.job_name, p.runs) for p in got] == [
        (p.user, p.job_name, p.runs) for p in want
    ]
    assert [p.p95_mem_mb for p in got] == pytest.approx([p.p95_mem_mb for p in want])


# --- records for the GPU memory profiles and the window reads ---


def gpu(job_id: int, peak_mem_mb: int, hours: int, *, gpu_index: int = 0, user: str = "alice",
        name: str = "train", minutes: int = 0) -> JobGpuStats:
    """One GPU of a job: the profiles' unit of input."""
    return job_gpu_stats(f"s{job_id}-{gpu_index}", job_id=job_id, hours=hours, minutes=minutes,
                         gpu_index=gpu_index, user=user, job_name=name,
                         peak_mem_mb=peak_mem_mb, mean_util_pct=80.0)


def snap(key: str, account: str, minutes: int, usage: float = 0.0) -> BudgetSnapshot:
    return budget_snapshot(key, account=account, minutes=minutes, usage_gpu_hours=usage)


def window_decision(key: str, kind: str, minutes: int, *, dry_run: bool = False
                    ) -> ReconcilerDecision:
    return decision(key, kind=kind, minutes=minutes, cycle=minutes + 100, reason="why",
                    dry_run=dry_run)


def window_audit(key: str, minutes: int) -> AuditEntry:
    return audit_entry(key, minutes=minutes, details={"phase": "intent"})


# Written in this order: ties on the time column go to the earlier insert, and the
# records before T0 (minute -5) are never in a window that starts at T0.
WINDOW_RECORDS: list[Record] = [
    util_sample("u1", job_id=7, minutes=0),
    util_sample("u2", job_id=8, minutes=5),
    util_sample("u3", job_id=7, minutes=5),
    util_sample("u4", job_id=9, minutes=10),
    util_sample("u0", job_id=7, minutes=-5),
    util_sample("u5", job_id=8, minutes=3),
    window_decision("d1", "requeue", 0),
    window_decision("d2", "zombie_warn", 5),
    window_decision("d3", "requeue", 5, dry_run=True),
    window_decision("d4", "site_factor", 1),
    window_decision("d0", "requeue", -5),
    job_gpu_stats("s1", minutes=10),
    job_gpu_stats("s2", minutes=0),
    job_gpu_stats("s3", minutes=10),
    job_gpu_stats("s0", minutes=-5),
    window_audit("a1", 0),
    window_audit("a2", 5),
    window_audit("a0", -5),
    health_event("h1", check_id="process.orphan", minutes=0, node="gpu02"),
    health_event("h2", check_id="xid", minutes=5),
    health_event("h3", check_id="process.orphan", minutes=5),
    health_event("h4", check_id="process.orphan", minutes=10, node="gpu03"),
    health_event("h0", check_id="process.orphan", minutes=-5),
    health_event("h5", check_id="nvlink", minutes=2),
]

# (read, expected idempotency keys in the order returned; audit_by_keys: sorted keys)
WINDOW_READS: list[Any] = [
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
    pytest.param(lambda s: s.job_gpu_stats_since(at(10, micros=1)), [], id="stats-since-just-after"),
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


class StoreContract:
    """Every Store: idempotent writes, readers that return what was written, in order."""

    # --- writes and round trips ---

    def test_satisfies_the_protocol(self, store: Store) -> None:
        assert isinstance(store, Store)

    def test_every_record_round_trips(self, store: Store) -> None:
        records = one_of_each(t0=at(micros=123456))  # microseconds survive too
        for r in records:
            assert write_record(store, r) is WriteOutcome.LANDED
        h1, h2, s, u, b1, b2, d1, d2, a = records
        assert store.recent_health_events() == [h2, h1]  # same time: newest insert first
        assert store.job_gpu_stats_for("alice", "llama-ft") == [s]
        assert store.job_gpu_stats_of(s.job_id) == [s]
        assert store.job_gpu_stats_of(s.job_id + 1) == []
        assert store.util_samples_for(42) == [u]
        assert store.budget_snapshots() == [b1, b2]
        assert store.decisions_for_job(42) == [d1]
        assert store.decisions_since(T0) == [d1, d2]  # the job-less one too
        assert store.audit_entries() == [a]
        got = store.recent_health_events()[1]
        assert got.observed_at.tzinfo is not None and got.observed_at.utcoffset() == timedelta(0)
        assert got.details == {"pending": True, "correctable": 0, "ids": [1, 2], "ratio": 0.1}

    def test_same_key_lands_once_per_record_type(self, store: Store, row_count: RowCount
                                                 ) -> None:
        assert store.record_health_event(health_event("k")) is WriteOutcome.LANDED
        assert (store.record_health_event(health_event("k", node="other"))
                is WriteOutcome.DUPLICATE)
        # keys are unique per table, not across tables
        assert store.audit(audit_entry("k")) is WriteOutcome.LANDED
        assert store.recent_health_events() == [health_event("k")]
        assert row_count(HealthEvent) == 1 and row_count(AuditEntry) == 1

    def test_same_record_twice_is_one_row(self, store: Store, row_count: RowCount) -> None:
        for r in one_of_each():
            assert write_record(store, r) is WriteOutcome.LANDED
            assert write_record(store, r) is WriteOutcome.DUPLICATE
        for cls in RECORD_CLASSES:
            assert row_count(cls) == sum(1 for r in one_of_each() if isinstance(r, cls))

    def test_closed_store_refuses_use(self, store: Store) -> None:
        store.close()
        with pytest.raises(StoreError, match="closed"):
            store.audit(audit_entry("a"))
        with pytest.raises(StoreError, match="closed"):
            store.audit_entries()
        store.close()  # twice is harmless

    # --- the older readers: filters, bounds, limits and tie order ---

    def test_health_events_filter_and_order_newest_first(self, store: Store) -> None:
        for key, node, minutes in [("a", "n1", 0), ("b", "n2", 5), ("c", "n1", 10),
                                   ("d", "n1", 10)]:
            store.record_health_event(health_event(key, node=node, minutes=minutes))
        assert keys(store.recent_health_events()) == ["d", "c", "b", "a"]  # ties: newest insert
        assert keys(store.recent_health_events(node="n1")) == ["d", "c", "a"]
        since = at(5)
        assert keys(store.recent_health_events(since=since)) == ["d", "c", "b"]
        assert keys(store.recent_health_events("n2", since)) == ["b"]
        assert keys(store.recent_health_events(limit=1)) == ["d"]
        with pytest.raises(ValueError):
            store.recent_health_events(since=datetime(2025, 1, 1))
        with pytest.raises(ValueError):
            store.recent_health_events(limit=-1)

    def test_job_gpu_stats_newest_first_with_limit(self, store: Store) -> None:
        for key, job, hours, user, name in [("1", 1, 1, "alice", "train"),
                                            ("2", 2, 3, "alice", "train"),
                                            ("3", 3, 2, "alice", "train"),
                                            ("4", 4, 9, "bob", "train"),
                                            ("5", 5, 9, "alice", "eval")]:
            store.record_job_gpu_stats(job_gpu_stats(key, job_id=job, hours=hours, user=user,
                                                     job_name=name))
        assert [s.job_id for s in store.job_gpu_stats_for("alice", "train", limit=10)] == [
            2, 3, 1]
        assert [s.job_id for s in store.job_gpu_stats_for("alice", "train", limit=2)] == [2, 3]

    def test_decisions_audit_util_budget_oldest_first(self, store: Store) -> None:
        store.record_decision(decision("d2", job_id=7, minutes=5))
        store.record_decision(decision("d1", job_id=7, minutes=1))
        store.record_decision(decision("dx", job_id=8, minutes=0))
        store.record_decision(decision("node", job_id=None, minutes=0))
        assert keys(store.decisions_for_job(7)) == ["d1", "d2"]
        store.audit(audit_entry("a2", minutes=2))
        store.audit(audit_entry("a1", minutes=1))
        assert keys(store.audit_entries()) == ["a1", "a2"]
        assert keys(store.audit_entries(at(2))) == ["a2"]
        store.record_util_sample(util_sample("u2", job_id=7, minutes=2))
        store.record_util_sample(util_sample("u1", job_id=7, minutes=1))
        store.record_util_sample(util_sample("u9", job_id=9, minutes=1))
        assert keys(store.util_samples_for(7)) == ["u1", "u2"]
        assert keys(store.util_samples_for(7, at(2))) == ["u2"]
        store.record_budget_snapshot(snap("b2", "nlp", 2))
        store.record_budget_snapshot(snap("b1", "vision", 1))
        assert keys(store.budget_snapshots()) == ["b1", "b2"]
        assert keys(store.budget_snapshots("nlp")) == ["b2"]
        assert store.budget_snapshots("nlp", at(3)) == []

    def test_requeues_for_a_job_are_those_naming_it_oldest_first(self, store: Store) -> None:
        store.record_decision(decision("r2", job_id=3, minutes=5, kind="lane_requeue",
                                       details={"gpus": 4, "for_job": 70}))
        store.record_decision(decision("r1", job_id=2, minutes=1, details={"for_job": 70}))
        store.record_decision(decision("r0", job_id=4, minutes=0, details={"for_job": 700}))
        store.record_decision(decision("own", job_id=70, minutes=0))
        assert keys(store.requeues_for(70)) == ["r1", "r2"]
        assert keys(store.decisions_for_job(70)) == ["own"]
        assert store.requeues_for(7) == []

    # --- outages: a spool filled while the database was away drains into this store ---

    def test_outage_then_drain_lands_each_record_exactly_once(
        self, store: Store, down_store: Store, row_count: RowCount, tmp_path: Path
    ) -> None:
        spooling = SpoolingStore(down_store, tmp_path)
        records = one_of_each()
        already = records[0]
        assert write_record(store, already) is WriteOutcome.LANDED  # landed, then spooled again
        for r in records:
            assert write_record(spooling, r) is WriteOutcome.SPOOLED
        assert write_record(spooling, records[1]) is WriteOutcome.SPOOLED  # spooled twice

        recovered = SpoolingStore(store, tmp_path)  # e.g. the daemon once the database is back
        assert recovered.drain() == DrainResult(landed=len(records) - 1, duplicates=2,
                                                remaining=0)
        assert recovered.drain() == DrainResult(0, 0, 0)
        for cls in RECORD_CLASSES:
            assert row_count(cls) == sum(1 for r in records if isinstance(r, cls))
        assert store.recent_health_events() == [records[1], records[0]]  # newest insert first

    # --- admission's reads: GPU memory profiles and the latest budget snapshots ---

    def test_empty_store_has_no_profiles_or_snapshots(self, store: Store) -> None:
        assert store.gpu_mem_profiles() == []
        assert store.latest_budget_snapshots() == []

    def test_a_multi_gpu_job_counts_once_with_its_largest_gpu(self, store: Store) -> None:
        store_with([gpu(1, 30_000, 0, gpu_index=0), gpu(1, 70_000, 0, gpu_index=1, minutes=1),
                          gpu(1, 50_000, 0, gpu_index=2), gpu(2, 10_000, 1, gpu_index=0),
                          gpu(2, 20_000, 1, gpu_index=1)], store)
        # per-job peaks 70_000 and 20_000 -> 20_000 + 0.95 * 50_000
        (profile,) = store.gpu_mem_profiles()
        assert (profile.user, profile.job_name, profile.runs) == ("alice", "train", 2)
        assert profile.p95_mem_mb == pytest.approx(67_500.0)
        assert isinstance(profile.p95_mem_mb, float)

    def test_runs_keeps_only_the_most_recent_jobs(self, store: Store) -> None:
        # written out of time order: recency is by ended_at, not by insertion
        old_big = [gpu(j, 90_000, hours=j) for j in range(1, 4)]
        new_small = [gpu(j, 1_000 * j, hours=10 + j) for j in range(10, 15)]
        store_with([*new_small, *old_big], store)
        assert_same_profiles(store.gpu_mem_profiles(runs=5), [GpuMemProfile(
            "alice", "train", percentile_cont([10e3, 11e3, 12e3, 13e3, 14e3], 0.95), 5)])
        assert_same_profiles(store.gpu_mem_profiles(runs=1),
                             [GpuMemProfile("alice", "train", 14_000.0, 1)])
        everything = store.gpu_mem_profiles(runs=100)
        assert everything[0].runs == 8
        assert everything[0].p95_mem_mb == pytest.approx(90_000.0)

    def test_a_job_is_as_recent_as_its_last_gpu_and_ties_go_to_the_later_insert(
        self, store: Store
    ) -> None:
        store_with([gpu(1, 5_000, hours=0, gpu_index=0),
                          gpu(1, 5_000, hours=9, gpu_index=1),  # job 1 ended at hour 9
                          gpu(2, 7_000, hours=5),
                          gpu(3, 8_000, hours=9)], store)  # same end as job 1, written later
        assert_same_profiles(store.gpu_mem_profiles(runs=1),
                             [GpuMemProfile("alice", "train", 8_000.0, 1)])
        (two,) = store.gpu_mem_profiles(runs=2)
        assert two.runs == 2
        assert two.p95_mem_mb == pytest.approx(5_000 + 0.95 * 3_000)

    def test_one_profile_per_user_and_job_name_sorted(self, store: Store) -> None:
        store_with([gpu(1, 40_000, 0, user="bob", name="eval"),
                          gpu(2, 10_000, 0, user="alice", name="train"),
                          gpu(3, 30_000, 1, user="alice", name="train"),
                          gpu(4, 20_000, 0, user="alice", name="eval"),
                          gpu(5, 50_000, 0, user="alice", name=""),
                          gpu(6, 60_000, 0, user="Zoe", name="train")], store)
        got = store.gpu_mem_profiles()
        assert [(p.user, p.job_name, p.runs) for p in got] == [
            ("Zoe", "train", 1),  # code-point order, like Python's sorted(), on any collation
            ("alice", "", 1),
            ("alice", "eval", 1),
            ("alice", "train", 2),
            ("bob", "eval", 1),
        ]
        assert [p.p95_mem_mb for p in got] == pytest.approx([60e3, 50e3, 20e3, 29e3, 40e3])

    def test_same_job_id_under_another_name_is_another_job(self, store: Store) -> None:
        store_with([gpu(7, 10_000, 0, name="a"),
                          job_gpu_stats("other", job_id=7, job_name="b", node="gpu02",
                                        peak_mem_mb=99_000, mean_util_pct=1.0)], store)
        assert_same_profiles(store.gpu_mem_profiles(), [
            GpuMemProfile("alice", "a", 10_000.0, 1),
            GpuMemProfile("alice", "b", 99_000.0, 1),
        ])

    def test_profile_values_are_the_hand_computed_ones(self, store: Store) -> None:
        records: list[Record] = []
        for j in range(1, 21):  # peaks 1000..20000 MB, the first GPU of each job is smaller
            records += [gpu(j, 500, hours=j, gpu_index=0), gpu(j, 1000 * j, hours=j, gpu_index=1)]
        records.append(gpu(99, 10**6, hours=-24))  # a 21st job, the oldest
        store_with(records, store)
        (p20,) = store.gpu_mem_profiles(20)
        assert (p20.user, p20.job_name, p20.runs) == ("alice", "train", 20)
        assert p20.p95_mem_mb == pytest.approx(19_050.0)  # position 18.05: 19000 + 0.05 * 1000
        assert p20.p95_mem_mb == pytest.approx(
            percentile_cont([1000.0 * j for j in range(1, 21)], 0.95))
        (p21,) = store.gpu_mem_profiles(21)
        assert p21.runs == 21
        assert p21.p95_mem_mb == pytest.approx(
            percentile_cont([1000.0 * j for j in range(1, 21)] + [1e6], 0.95))

    @pytest.mark.parametrize("runs", [0, -1, True, 2.5])
    def test_runs_below_one_is_refused(self, store: Store, runs: int) -> None:
        with pytest.raises(ValueError, match="runs must be"):
            store.gpu_mem_profiles(runs)

    def test_latest_snapshot_per_account_sorted_by_account(self, store: Store) -> None:
        store_with([snap("v1", "vision", 0), snap("n2", "nlp", 10, usage=2.0),
                          snap("n1", "nlp", 5, usage=1.0),  # older, written later
                          snap("v2", "vision", 20), snap("d1", "detection", 1),
                          snap("D1", "Detection", 1)], store)
        # code-point order, like Python's sorted(), on any collation
        assert keys(store.latest_budget_snapshots()) == ["D1", "d1", "n2", "v2"]

    def test_latest_snapshot_ties_go_to_the_later_insert(self, store: Store) -> None:
        store_with([snap("first", "nlp", 5), snap("second", "nlp", 5), snap("old", "nlp", 1)], store)
        assert keys(store.latest_budget_snapshots()) == ["second"]

    def test_spooling_store_passes_profile_and_snapshot_reads_through(
        self, store: Store, tmp_path: Path
    ) -> None:
        spooling = SpoolingStore(store, tmp_path)
        store_with([gpu(1, 10_000, 0), gpu(2, 20_000, 1), snap("a", "nlp", 0),
                             snap("b", "nlp", 1)], spooling)
        assert not spooling.has_pending()
        assert spooling.gpu_mem_profiles() == store.gpu_mem_profiles()
        assert_same_profiles(spooling.gpu_mem_profiles(runs=1),
                             [GpuMemProfile("alice", "train", 20_000.0, 1)])
        assert spooling.latest_budget_snapshots() == store.latest_budget_snapshots() == [
            snap("b", "nlp", 1)]
        with pytest.raises(ValueError, match="runs must be"):
            spooling.gpu_mem_profiles(0)

    # --- the reconciler daemon's window reads ---

    @pytest.mark.parametrize(("read", "expected"), WINDOW_READS)
    def test_window_reads(self, store: Store, read: Read, expected: list[str]) -> None:
        assert keys(read(store_with(WINDOW_RECORDS, store))) == expected

    @pytest.mark.parametrize(("read", "expected"), WINDOW_READS)
    def test_spooling_store_window_reads_pass_through(
        self, store: Store, read: Read, expected: list[str], tmp_path: Path
    ) -> None:
        spooling = store_with(WINDOW_RECORDS, SpoolingStore(store, tmp_path))
        assert read(spooling) == read(store)
        assert keys(read(spooling)) == expected

    def test_window_reads_return_the_records_written(self, store: Store) -> None:
        store_with(WINDOW_RECORDS, store)
        assert store.util_samples_since(T0, [9]) == [util_sample("u4", job_id=9, minutes=10)]
        assert store.decisions_since(at(5), ["zombie_warn"]) == [
            window_decision("d2", "zombie_warn", 5)]
        assert store.job_gpu_stats_since(at(10)) == [job_gpu_stats("s1", minutes=10),
                                                     job_gpu_stats("s3", minutes=10)]
        assert store.audit_by_keys(["a2"]) == {"a2": window_audit("a2", 5)}
        assert store.health_events_since(at(10)) == [
            health_event("h4", check_id="process.orphan", minutes=10, node="gpu03")]

    def test_window_ties_go_to_the_earlier_insert(self, store: Store) -> None:
        records: list[Record] = [util_sample(f"tie{i}", job_id=7, gpu_index=i) for i in (3, 1, 2)]
        store_with(records, store)
        assert store.util_samples_since(T0, [7]) == records

    def test_empty_store_window_reads(self, store: Store) -> None:
        assert store.util_samples_since(T0) == []
        assert store.decisions_since(T0, ["requeue"]) == []
        assert store.job_gpu_stats_since(T0) == []
        assert store.audit_by_keys(["a"]) == {}
        assert store.health_events_since(T0) == []


class LeaderLockContract:
    """Every LeaderLock: one holder at a time, acquiring again keeps it, release frees it."""

    def test_satisfies_the_protocol(self, locks: tuple[LeaderLock, LeaderLock]) -> None:
        a, _ = locks
        assert isinstance(a, LeaderLock)

    def test_only_one_of_two_acquires(self, locks: tuple[LeaderLock, LeaderLock]) -> None:
        a, b = locks
        assert (a.held(), b.held()) == (False, False)
        assert a.holder_info() is None
        assert a.try_acquire() is True
        assert b.try_acquire() is False
        assert a.try_acquire() is True  # already held: verified, not taken twice
        assert (a.held(), b.held()) == (True, False)
        seen_by_b = b.holder_info()
        assert seen_by_b is not None
        assert f"application_name='{a.application_name}'" in seen_by_b
        assert "(this session)" not in seen_by_b
        assert "(this session)" in (a.holder_info() or "")

    def test_release_lets_the_other_acquire(self, locks: tuple[LeaderLock, LeaderLock]) -> None:
        a, b = locks
        assert a.try_acquire() and a.try_acquire()  # twice: must not need two releases
        b.release()  # not the holder: changes nothing
        assert a.held() and not b.try_acquire()
        a.release()
        assert a.held() is False and a.holder_info() is None
        assert b.try_acquire() is True  # at once: release() unlocks before it returns
        a.release()  # idempotent, and a's release cannot free b's lock
        assert b.held() and not a.try_acquire()
        b.release()
        assert a.try_acquire()
