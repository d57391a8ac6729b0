"""Spool and SpoolingStore: no record lost to an outage, none landed twice, order kept."""

from __future__ import annotations

import logging
import os
import stat
import tempfile
import threading
from pathlib import Path

import pytest
from builders import at, audit_entry, decision, health_event, util_sample
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_ml.store import (
    DrainResult,
    FakeStore,
    HealthEvent,
    ReconcilerDecision,
    Record,
    Spool,
    SpoolError,
    SpoolingStore,
    Store,
    StoreError,
    StoreIntegrityError,
    UtilSample,
    WriteOutcome,
    write_record,
)
from slurm_ml.store.spool import SPOOL_FILE, encode_line


def ev(i: int) -> HealthEvent:
    return health_event(f"h{i}", node=f"gpu{i % 4:02d}", message=f"XID 79 on GPU {i % 8}",
                        observed_at=at(seconds=i), gpu_index=i % 8)


def mixed(i: int) -> Record:
    """A record of one of three types, so replay dispatch is exercised too."""
    if i % 3 == 0:
        return ev(i)
    if i % 3 == 1:
        return decision(f"d{i}", cycle=i, job_id=i, reason="contract",
                        decided_at=at(seconds=i), dry_run=True)
    return util_sample(f"u{i}", job_id=i, sampled_at=at(seconds=i), util_pct=1.0,
                       mem_used_mb=5)


def landed(fake: FakeStore) -> list[Record]:
    return [*fake.rows(HealthEvent), *fake.rows(ReconcilerDecision), *fake.rows(UtilSample)]


def spool_file(d: Path) -> Path:
    return d / SPOOL_FILE


def test_spooling_store_satisfies_the_protocol(tmp_path: Path) -> None:
    assert isinstance(SpoolingStore(FakeStore(), tmp_path), Store)


def test_writes_pass_through_while_the_store_is_up(tmp_path: Path) -> None:
    fake = FakeStore()
    store = SpoolingStore(fake, tmp_path / "spool")
    assert store.record_health_event(ev(1)) is WriteOutcome.LANDED
    assert store.record_health_event(ev(1)) is WriteOutcome.DUPLICATE
    assert not spool_file(tmp_path / "spool").exists()
    assert store.recent_health_events() == [ev(1)]
    assert store.drain() == DrainResult(0, 0, 0)


def test_outage_spools_logs_and_drain_lands_in_order(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeStore()
    store = SpoolingStore(fake, tmp_path)
    fake.set_available(False)
    with caplog.at_level(logging.DEBUG, logger="slurm_ml.store.spool"):
        assert store.record_health_event(ev(1)) is WriteOutcome.SPOOLED
        assert store.record_health_event(ev(2)) is WriteOutcome.SPOOLED
    warning = next(r for r in caplog.records if r.levelno == logging.WARNING)
    msg = warning.getMessage()
    assert "event=store_write_spooled" in msg
    assert "reason=store_unavailable" in msg
    assert "kind=health_event key=h1" in msg
    assert store.has_pending()
    assert store.spool.records() == [ev(1), ev(2)]

    fake.set_available(True)
    # the store is back, but the spool is not empty: keep order by spooling this one too
    assert store.record_health_event(ev(3)) is WriteOutcome.SPOOLED
    assert fake.rows(HealthEvent) == []

    assert store.drain() == DrainResult(landed=3, duplicates=0, remaining=0)
    assert fake.rows(HealthEvent) == [ev(1), ev(2), ev(3)]
    assert not spool_file(tmp_path).exists()
    assert store.record_health_event(ev(4)) is WriteOutcome.LANDED
    assert store.drain() == DrainResult(0, 0, 0)


def test_spool_files_are_private(tmp_path: Path) -> None:
    fake = FakeStore()
    fake.set_available(False)
    SpoolingStore(fake, tmp_path / "new").audit(audit_entry("a"))
    mode = stat.S_IMODE(os.stat(spool_file(tmp_path / "new")).st_mode)
    assert mode == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "new").st_mode) == 0o700


def test_interrupted_drain_keeps_the_rest_and_reruns_cleanly(tmp_path: Path) -> None:
    fake = FakeStore()
    store = SpoolingStore(fake, tmp_path)
    fake.set_available(False)
    for i in range(6):
        store.record_health_event(ev(i))
    fake.set_available(True)
    fake.lose_next_ack(1)  # the first replayed record lands, but the drain does not know
    result = store.drain()
    assert result == DrainResult(landed=0, duplicates=0, remaining=6)
    assert [e.idempotency_key for e in fake.rows(HealthEvent)] == ["h0"]

    # the store fails after two more writes: the drain stops there and keeps the rest
    class FailsAfter:
        def __init__(self, n: int) -> None:
            self.n = n

        def __call__(self, record: Record) -> WriteOutcome:
            if self.n == 0:
                fake.set_available(False)
            self.n -= 1
            return write_record(fake, record)

    spool = Spool(tmp_path)
    result = spool.drain(FailsAfter(2))
    assert result == DrainResult(landed=1, duplicates=1, remaining=4)
    assert spool.pending_count() == 4

    fake.set_available(True)
    assert store.drain() == DrainResult(landed=4, duplicates=0, remaining=0)
    assert fake.rows(HealthEvent) == [ev(i) for i in range(6)]


def test_crash_before_rewrite_only_causes_duplicates(tmp_path: Path) -> None:
    """kill -9 after some records landed but before the spool was rewritten."""
    fake = FakeStore()
    store = SpoolingStore(fake, tmp_path)
    fake.set_available(False)
    for i in range(5):
        store.record_health_event(ev(i))
    before = spool_file(tmp_path).read_bytes()
    fake.set_available(True)

    class Crash(BaseException):
        pass

    calls = 0

    def crash_after_three(record: Record) -> WriteOutcome:
        nonlocal calls
        calls += 1
        if calls > 3:
            raise Crash
        return write_record(fake, record)

    with pytest.raises(Crash):
        Spool(tmp_path).drain(crash_after_three)
    spool_file(tmp_path).write_bytes(before)  # as if the process died before compacting

    assert store.drain() == DrainResult(landed=2, duplicates=3, remaining=0)
    assert fake.rows(HealthEvent) == [ev(i) for i in range(5)]


def test_a_record_spooled_twice_lands_once(tmp_path: Path) -> None:
    fake = FakeStore()
    store = SpoolingStore(fake, tmp_path)
    fake.set_available(False)
    store.record_health_event(ev(1))
    store.record_health_event(ev(1))
    fake.set_available(True)
    assert store.drain() == DrainResult(landed=1, duplicates=1, remaining=0)
    assert fake.rows(HealthEvent) == [ev(1)]


def test_torn_trailing_line_is_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeStore()
    store = SpoolingStore(fake, tmp_path)
    fake.set_available(False)
    store.record_health_event(ev(1))
    with spool_file(tmp_path).open("ab") as fh:  # a crash in the middle of a write
        fh.write(encode_line(ev(2))[:25])
    store.record_health_event(ev(3))  # must not be glued onto the torn fragment
    fake.set_available(True)
    with caplog.at_level(logging.WARNING, logger="slurm_ml.store.spool"):
        result = store.drain()
    assert result == DrainResult(landed=2, duplicates=0, remaining=0, corrupt=1)
    assert fake.rows(HealthEvent) == [ev(1), ev(3)]
    assert any("event=spool_line_corrupt" in r.getMessage() for r in caplog.records)
    assert (tmp_path / "rejected.jsonl").read_bytes() == encode_line(ev(2))[:25] + b"\n"


def test_torn_last_line_without_newline_at_drain_time(tmp_path: Path) -> None:
    fake = FakeStore()
    fake.set_available(False)
    store = SpoolingStore(fake, tmp_path)
    store.record_health_event(ev(1))
    with spool_file(tmp_path).open("ab") as fh:
        fh.write(b'{"v":1,"kind":"heal')
    fake.set_available(True)
    assert store.drain() == DrainResult(landed=1, duplicates=0, remaining=0, corrupt=1)
    assert not spool_file(tmp_path).exists()


def test_refused_records_are_set_aside_not_retried_forever(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeStore()
    store = SpoolingStore(fake, tmp_path)
    fake.set_available(False)
    for i in range(3):
        store.record_health_event(ev(i))
    fake.set_available(True)
    fake.fail_next_writes(StoreIntegrityError("check constraint"), n=1)
    with caplog.at_level(logging.WARNING, logger="slurm_ml.store.spool"):
        assert store.drain() == DrainResult(landed=2, duplicates=0, remaining=0, rejected=1)
    assert any("event=spool_record_rejected" in r.getMessage() for r in caplog.records)
    assert (tmp_path / "rejected.jsonl").read_bytes() == encode_line(ev(0))


def test_other_store_errors_propagate_after_saving_progress(tmp_path: Path) -> None:
    fake = FakeStore()
    store = SpoolingStore(fake, tmp_path)
    fake.set_available(False)
    for i in range(3):
        store.record_health_event(ev(i))
    fake.set_available(True)
    calls = 0

    def second_fails(record: Record) -> WriteOutcome:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise StoreError("schema missing")
        return write_record(fake, record)

    with pytest.raises(StoreError, match="schema missing"):
        Spool(tmp_path).drain(second_fails)
    assert Spool(tmp_path).records() == [ev(1), ev(2)]


def test_a_new_process_sees_the_old_spool(tmp_path: Path) -> None:
    fake = FakeStore()
    fake.set_available(False)
    SpoolingStore(fake, tmp_path).record_health_event(ev(1))
    fake.set_available(True)
    restarted = SpoolingStore(fake, tmp_path)
    assert restarted.has_pending()
    assert restarted.drain().landed == 1


def test_only_one_drainer_at_a_time(tmp_path: Path) -> None:
    fake = FakeStore()
    store = SpoolingStore(fake, tmp_path)
    fake.set_available(False)
    for i in range(3):
        store.record_health_event(ev(i))
    fake.set_available(True)
    nested: list[DrainResult] = []

    def deliver(record: Record) -> WriteOutcome:
        if not nested:  # another drainer shows up while this one runs
            nested.append(Spool(tmp_path).drain(lambda r: write_record(fake, r)))
        return write_record(fake, record)

    assert Spool(tmp_path).drain(deliver) == DrainResult(3, 0, 0)
    assert nested == [DrainResult(0, 0, 3)]


def test_records_appended_during_a_drain_are_not_lost(tmp_path: Path) -> None:
    fake = FakeStore()
    store = SpoolingStore(fake, tmp_path)
    fake.set_available(False)
    store.record_health_event(ev(0))
    fake.set_available(True)

    def deliver(record: Record) -> WriteOutcome:
        if record == ev(0):
            # a concurrent writer sees a non-empty spool and appends behind us
            assert store.record_health_event(ev(1)) is WriteOutcome.SPOOLED
        return write_record(fake, record)

    assert Spool(tmp_path).drain(deliver) == DrainResult(2, 0, 0)
    assert fake.rows(HealthEvent) == [ev(0), ev(1)]


def test_unwritable_spool_raises_spool_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    fake = FakeStore()
    fake.set_available(False)
    with pytest.raises(SpoolError, match="cannot read spool"):
        SpoolingStore(fake, blocker / "spool").record_health_event(ev(1))


def test_spooling_store_cannot_wrap_itself(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        SpoolingStore(SpoolingStore(FakeStore(), tmp_path), tmp_path)


def test_concurrent_writers_and_drainer(tmp_path: Path) -> None:
    """Threads write through an outage while another thread drains; all land once."""
    fake = FakeStore()
    fake.set_available(False)
    store = SpoolingStore(fake, tmp_path)
    n_threads, per_thread = 4, 40
    stop = threading.Event()

    def writer(t: int) -> None:
        for j in range(per_thread):
            store.record_health_event(ev(t * 1000 + j))
            if t == 0 and j == per_thread // 2:
                fake.set_available(True)

    def drainer() -> None:
        while not stop.is_set():
            store.drain()

    d = threading.Thread(target=drainer)
    d.start()
    writers = [threading.Thread(target=writer, args=(t,)) for t in range(n_threads)]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    stop.set()
    d.join()
    fake.set_available(True)
    store.drain()
    keys = [e.idempotency_key for e in fake.rows(HealthEvent)]
    expected = [f"h{t * 1000 + j}" for t in range(n_threads) for j in range(per_thread)]
    assert sorted(keys) == sorted(expected)
    assert not store.has_pending()


# --- property: any interleaving of outages, lost acks, crashes and writes ---

POOL = [mixed(i) for i in range(12)]

ops = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(0, len(POOL) - 1)),
        st.tuples(st.just("down"), st.just(0)),
        st.tuples(st.just("up"), st.just(0)),
        st.tuples(st.just("lose_ack"), st.just(0)),
        st.tuples(st.just("drain"), st.just(0)),
        st.tuples(st.just("crash_drain"), st.integers(0, 4)),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_any_interleaving_lands_each_record_exactly_once_in_order(
    steps: list[tuple[str, int]],
) -> None:
    class Crash(BaseException):
        pass

    with tempfile.TemporaryDirectory() as d:
        spool_dir = Path(d)
        fake = FakeStore()
        store = SpoolingStore(fake, spool_dir)
        first_written: list[str] = []
        for op, arg in steps:
            if op == "write":
                record = POOL[arg]
                if record.idempotency_key not in first_written:
                    first_written.append(record.idempotency_key)
                outcome = write_record(store, record)
                assert outcome in set(WriteOutcome)
            elif op == "down":
                fake.set_available(False)
            elif op == "up":
                fake.set_available(True)
            elif op == "lose_ack":
                fake.lose_next_ack()
            elif op == "drain":
                store.drain()
            else:  # the draining process is killed after `arg` deliveries, before compacting
                path = spool_dir / SPOOL_FILE
                before = path.read_bytes() if path.exists() else None
                budget = arg

                def deliver(record: Record, _fake: FakeStore = fake) -> WriteOutcome:
                    nonlocal budget
                    if budget == 0:
                        raise Crash
                    budget -= 1
                    return write_record(_fake, record)

                try:
                    Spool(spool_dir).drain(deliver)
                except Crash:
                    if before is not None:
                        path.write_bytes(before)

        fake.set_available(True)
        fake.lose_next_ack(0)
        result = store.drain()
        while result.remaining:  # a lost ack left pending at the end pauses one drain
            result = store.drain()
        assert not store.has_pending()

        rows = landed(fake)
        assert sorted(r.idempotency_key for r in rows) == sorted(first_written)  # once each
        for kind in ("health_event", "decision", "util_sample"):
            got = [r.idempotency_key for r in rows if kind == r.KIND]
            want = [k for k in first_written if k in set(got)]
            assert got == want  # landed in the order first written
        assert all(r in POOL for r in rows)  # and unchanged
