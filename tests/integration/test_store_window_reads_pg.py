"""The reconciler daemon's window reads on a real PostgreSQL give exactly what FakeStore
gives, on a large shuffled history with many ties; the reads' indexes and their cost.

The reads' hand-checked cases are the contract suite (tests/store_contract.py), which
test_store_contract_pg.py runs over PostgresStore. ``pg_dsn`` (tests/conftest.py) gives
each test a fresh, empty database; the read-only comparisons share one (``both``), loaded
once.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from slurm_ml.store import (
    AuditEntry,
    FakeStore,
    HealthEvent,
    JobGpuStats,
    PostgresStore,
    ReconcilerDecision,
    Record,
    Store,
    UtilSample,
    migrate,
    write_record,
)

pytestmark = pytest.mark.integration

T0 = datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
PLUS5 = timezone(timedelta(hours=5))
KINDS = ("requeue", "zombie_warn", "zombie_requeue", "zombie_cancel", "site_factor", "drain")
CHECKS = ("process.orphan", "xid", "nvlink", "row_remap", "gpu_count")
JOBS = (1, 2, 3, 5, 8, 13, 2**40, 2**63 - 1)


def at(minutes: int, micros: int = 0) -> datetime:
    return T0 + timedelta(minutes=minutes, microseconds=micros)


def history(seed: int = 5) -> list[Record]:
    """Every record type, minute-grained times (many ties) spread around T0, shuffled."""
    rng = random.Random(seed)
    out: list[Record] = []
    for i in range(400):
        out.append(
            UtilSample(
                idempotency_key=f"u{i}",
                job_id=rng.choice(JOBS),
                node=f"gpu0{rng.randint(1, 6)}",
                gpu_index=rng.randint(0, 7),
                sampled_at=at(rng.randint(-30, 30)),
                util_pct=rng.choice([0.0, 0.5, 37.25, 100.0]),
                mem_used_mb=rng.randint(0, 81_920),
            )
        )
    for i in range(250):
        out.append(
            ReconcilerDecision(
                idempotency_key=f"d{i}",
                cycle=rng.randint(0, 50),
                job_id=rng.choice([None, *JOBS]),
                kind=rng.choice(KINDS),
                reason=rng.choice(["over-served", "zombie: 0% for 900 s", ""]),
                decided_at=at(rng.randint(-30, 30), rng.choice([0, 1])),
                dry_run=rng.random() < 0.3,
                details={"victim_share": rng.random(), "nested": {"ok": [1, "x", None]}},
            )
        )
    for i in range(200):
        ended = at(rng.randint(-30, 30))
        out.append(
            JobGpuStats(
                idempotency_key=f"s{i}",
                job_id=rng.choice(JOBS),
                job_name=rng.choice(["train", "eval", ""]),
                user=rng.choice(["alice", "bob", "Carol"]),
                account=rng.choice(["nlp", "vision"]),
                node=f"gpu0{rng.randint(1, 6)}",
                gpu_index=rng.randint(0, 7),
                peak_mem_mb=rng.randint(0, 81_920),
                mean_util_pct=round(rng.uniform(0, 100), 3),
                ended_at=ended,
                started_at=rng.choice([None, ended - timedelta(hours=rng.randint(1, 9))]),
                gpu_type=rng.choice([None, "a100_80g", "h100"]),
            )
        )
    for i in range(150):
        out.append(
            AuditEntry(
                idempotency_key=f"intent:{i}" if i % 2 else f"done:{i}",
                actor="slurm-ml daemon",
                action=rng.choice(["requeue", "cancel", "drain"]),
                target=f"job {rng.choice(JOBS)}",
                at=at(rng.randint(-30, 30)),
                details={"cycle": i},
            )
        )
    for i in range(400):
        out.append(
            HealthEvent(
                idempotency_key=f"h{i}",
                node=f"gpu0{rng.randint(1, 6)}",
                check_id=rng.choice(CHECKS),
                severity=rng.choice(["flag", "drain"]),
                message=rng.choice(["", "orphan pid 4242 on GPU 3 — 30 GiB"]),
                observed_at=at(rng.randint(-30, 30)),
                gpu_index=rng.choice([None, 0, 3]),
                details={"pids": [rng.randint(1, 99999)]},
            )
        )
    rng.shuffle(out)
    return out


@pytest.fixture
def store(pg_dsn: str) -> Iterator[PostgresStore]:
    migrate(pg_dsn)
    with PostgresStore(pg_dsn) as s:
        yield s


@pytest.fixture(scope="module")
def both(pg_module_dsn: str) -> Iterator[tuple[PostgresStore, FakeStore]]:
    """One database holding ``history()`` for the read-only tests of this module."""
    migrate(pg_module_dsn)
    fake = FakeStore()
    with PostgresStore(pg_module_dsn) as pg:
        for r in history():
            write_record(pg, r)
            write_record(fake, r)
        yield pg, fake


Read = Callable[[Store], Any]
ALL_AUDIT_KEYS = [f"intent:{i}" if i % 2 else f"done:{i}" for i in range(150)]

# (read, the least it must find: so that equal answers are never two empty ones)
READS: list[Any] = [
    pytest.param(lambda s: s.util_samples_since(T0), 150, id="util-all"),
    pytest.param(lambda s: s.util_samples_since(at(-60)), 400, id="util-everything"),
    pytest.param(lambda s: s.util_samples_since(at(31)), 0, id="util-after-all"),
    pytest.param(lambda s: s.util_samples_since(at(7).astimezone(PLUS5)), 50, id="util-other-zone"),
    pytest.param(lambda s: s.util_samples_since(at(7, 1)), 50, id="util-microsecond-after-tie"),
    pytest.param(lambda s: s.util_samples_since(T0, [2, 13]), 20, id="util-jobs"),
    pytest.param(lambda s: s.util_samples_since(T0, {2**40, 2**63 - 1}), 20, id="util-big-job-ids"),
    pytest.param(lambda s: s.util_samples_since(T0, range(10_000)), 100, id="util-10k-job-ids"),
    pytest.param(lambda s: s.util_samples_since(T0, [404, -1]), 0, id="util-unknown-jobs"),
    pytest.param(lambda s: s.util_samples_since(T0, []), 0, id="util-no-jobs"),
    pytest.param(lambda s: s.decisions_since(at(-10)), 100, id="decisions-all"),
    pytest.param(lambda s: s.decisions_since(at(-10), ["requeue"]), 10, id="decisions-kind"),
    pytest.param(lambda s: s.decisions_since(T0, KINDS[:4]), 40, id="decisions-history-kinds"),
    pytest.param(lambda s: s.decisions_since(at(3, 1)), 40, id="decisions-microsecond-bound"),
    pytest.param(lambda s: s.decisions_since(T0, ["REQUEUE", "nope"]), 0, id="decisions-no-match"),
    pytest.param(lambda s: s.decisions_since(T0, ()), 0, id="decisions-no-kinds"),
    pytest.param(lambda s: s.job_gpu_stats_since(at(-5)), 80, id="stats"),
    pytest.param(lambda s: s.job_gpu_stats_since(at(-60)), 200, id="stats-everything"),
    pytest.param(lambda s: s.job_gpu_stats_since(at(30, 1)), 0, id="stats-after-all"),
    pytest.param(lambda s: s.audit_by_keys([*ALL_AUDIT_KEYS[::3], "nope"]), 50, id="audit-some"),
    pytest.param(lambda s: s.audit_by_keys([*ALL_AUDIT_KEYS, *(f"x{i}" for i in range(5000))]), 150, id="audit-5k-keys"),
    pytest.param(lambda s: s.audit_by_keys(["u1", "h1"]), 0, id="audit-other-tables-keys"),
    pytest.param(lambda s: s.audit_by_keys([]), 0, id="audit-no-keys"),
    pytest.param(lambda s: s.health_events_since(T0), 150, id="health-all"),
    pytest.param(lambda s: s.health_events_since(T0, ["process.orphan"]), 20, id="health-orphans"),
    pytest.param(lambda s: s.health_events_since(at(-60), ["xid", "nvlink"]), 100, id="health-checks"),
    pytest.param(lambda s: s.health_events_since(T0, limit=17), 17, id="health-limit-newest"),
    pytest.param(lambda s: s.health_events_since(at(-60), CHECKS[1:], limit=33), 33, id="health-checks-limit"),
    pytest.param(lambda s: s.health_events_since(T0, limit=0), 0, id="health-limit-zero"),
    pytest.param(lambda s: s.health_events_since(T0, set()), 0, id="health-no-checks"),
]


@pytest.mark.parametrize(("read", "at_least"), READS)
def test_window_reads_match_the_fake(
    both: tuple[PostgresStore, FakeStore], read: Read, at_least: int
) -> None:
    pg, fake = both
    got, want = read(pg), read(fake)
    assert got == want
    assert len(got) >= at_least


def test_results_are_oldest_first_and_health_keeps_the_newest(
    both: tuple[PostgresStore, FakeStore],
) -> None:
    pg, _ = both
    samples = pg.util_samples_since(T0)
    assert [s.sampled_at for s in samples] == sorted(s.sampled_at for s in samples)
    assert all(s.sampled_at >= T0 for s in samples)
    newest = pg.health_events_since(at(-60), limit=10)
    everything = pg.health_events_since(at(-60))
    assert len(everything) == 400 and newest == everything[-10:]
    assert newest == list(reversed(pg.recent_health_events(since=at(-60), limit=10)))


def test_job_gpu_stats_since_has_its_index(store: PostgresStore, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as conn:
        conn.execute("SET enable_seqscan = off")
        plan = conn.execute(
            "EXPLAIN SELECT * FROM job_gpu_stats WHERE ended_at >= now() ORDER BY ended_at, id"
        ).fetchall()
    assert "job_gpu_stats_ended_idx" in " ".join(str(row[0]) for row in plan)


def test_one_query_reads_ten_thousand_jobs_samples(store: PostgresStore, pg_dsn: str) -> None:
    rows = [(f"n{i}", i, "gpu01", 0, at(i % 20), 1.0, 1) for i in range(2000)]
    with psycopg.connect(pg_dsn) as conn, conn.cursor() as cur:  # bulk, for speed
        cur.executemany(
            "INSERT INTO util_samples (idempotency_key, job_id, node, gpu_index, sampled_at,"
            " util_pct, mem_used_mb) VALUES (%s, %s, %s, %s, %s, %s, %s)",
            rows,
        )
    started = time.monotonic()
    got = store.util_samples_since(T0, range(0, 10_000, 2))
    assert len(got) == 1000 and {s.job_id % 2 for s in got} == {0}
    assert time.monotonic() - started < 2.0


