"""Leader lock: key mapping, PgLeaderLock without a server, and FakeLeaderLock's contention.

``tests/integration/test_store_leader_pg.py`` runs PgLeaderLock against PostgreSQL.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_ml.config import DaemonConfig
from slurm_ml.store import (
    FakeLeaderLock,
    FakeLockTable,
    LeaderLock,
    PgLeaderLock,
    StoreError,
    StoreUnavailable,
    signed_lock_key,
)
from slurm_ml.store.leader import application_name

DEFAULT_KEY = DaemonConfig().lock_key


@pytest.mark.parametrize(
    ("key", "signed"),
    [
        pytest.param(0, 0, id="zero"),
        pytest.param(1, 1, id="one"),
        pytest.param(DEFAULT_KEY, DEFAULT_KEY, id="config-default-fits"),
        pytest.param(2**63 - 1, 2**63 - 1, id="largest-signed"),
        pytest.param(2**63, -(2**63), id="smallest-wrapping-unsigned"),
        pytest.param(2**64 - 1, -1, id="largest-unsigned"),
        pytest.param(0xDEAD_BEEF_0000_0001, 0xDEAD_BEEF_0000_0001 - 2**64, id="unsigned-high-bit"),
        pytest.param(-1, -1, id="negative-kept"),
        pytest.param(-(2**63), -(2**63), id="smallest-signed"),
    ],
)
def test_signed_lock_key(key: int, signed: int) -> None:
    assert signed_lock_key(key) == signed
    assert signed_lock_key(signed) == signed  # idempotent
    assert signed % 2**64 == key % 2**64  # same 64 bits: same lock


@pytest.mark.parametrize(
    ("key", "error"),
    [
        pytest.param(2**64, ValueError, id="65-bits"),
        pytest.param(-(2**63) - 1, ValueError, id="below-int8"),
        pytest.param(True, TypeError, id="bool"),
        pytest.param(1.0, TypeError, id="float"),
        pytest.param("1", TypeError, id="text"),
    ],
)
def test_signed_lock_key_refuses(key: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="lock key"):
        signed_lock_key(key)


@pytest.mark.parametrize(
    ("holder", "expected"),
    [
        pytest.param("ctl1:42", "slurm-ml leader ctl1:42", id="given"),
        pytest.param("höst\n1", "slurm-ml leader h?st?1", id="printable-ascii-only"),
        pytest.param("x" * 100, ("slurm-ml leader " + "x" * 100)[:63], id="truncated-to-63"),
        pytest.param("", f"slurm-ml leader {socket.gethostname()}:{os.getpid()}"[:63], id="default"),
    ],
)
def test_application_name(holder: str, expected: str) -> None:
    assert application_name(holder) == expected


# --- PgLeaderLock without a server ---


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_pg_lock_constructs_without_connecting() -> None:
    lock = PgLeaderLock("postgresql://u:s3cret@127.0.0.1:1/ledger", 2**64 - 1, holder="a")
    assert isinstance(lock, LeaderLock)
    assert lock.key == -1
    assert lock.application_name == "slurm-ml leader a"
    assert "s3cret" not in repr(lock) and lock.target == "127.0.0.1:1/ledger"
    assert lock.held() is False  # never connected: not leader, no error
    lock.release()
    lock.release()


@pytest.mark.parametrize(
    ("dsn", "kw", "error", "match"),
    [
        pytest.param("host=x password=hunter22 nonsense", {}, StoreError, "invalid PostgreSQL DSN", id="bad-dsn"),
        pytest.param("host=x", {"connect_timeout_s": 0}, ValueError, "connect_timeout_s", id="zero-timeout"),
        pytest.param("host=x", {"key": 2**64}, ValueError, "lock key", id="key-too-big"),
    ],
)
def test_pg_lock_refuses_bad_settings(
    dsn: str, kw: dict[str, Any], error: type[Exception], match: str
) -> None:
    key = kw.pop("key", 1)
    with pytest.raises(error, match=match) as info:
        PgLeaderLock(dsn, key, **kw)
    assert "hunter22" not in str(info.value)


def test_unreachable_database_raises_from_try_acquire_only() -> None:
    port = closed_port()
    lock = PgLeaderLock(f"postgresql://u:s3cret@127.0.0.1:{port}/ledger", 1, connect_timeout_s=2)
    with pytest.raises(StoreUnavailable) as info:
        lock.try_acquire()
    assert info.value.target == f"127.0.0.1:{port}/ledger"
    assert "s3cret" not in str(info.value)
    with pytest.raises(StoreUnavailable):
        lock.holder_info()
    assert lock.held() is False
    lock.release()


# --- FakeLeaderLock ---


def pair(key: int = 7) -> tuple[FakeLockTable, FakeLeaderLock, FakeLeaderLock]:
    table = FakeLockTable()
    return table, FakeLeaderLock(table, key, holder="a"), FakeLeaderLock(table, key, holder="b")


# One holder at a time, acquiring again, releasing: the contract suite
# (tests/store_contract.py), run over FakeLeaderLock by test_store_contract_fake.py.


def test_fake_holder_is_named_in_the_table_and_in_holder_info() -> None:
    table, a, b = pair()
    assert a.try_acquire()
    assert table.holder(7) == "slurm-ml leader a"
    assert b.holder_info() == "fake session application_name='slurm-ml leader a'"
    assert a.holder_info() == "fake session (this session) application_name='slurm-ml leader a'"
    a.release()
    assert table.holder(7) is None


def test_keys_and_tables_are_separate_locks() -> None:
    table = FakeLockTable()
    a, b = FakeLeaderLock(table, 1), FakeLeaderLock(table, 2)
    other = FakeLeaderLock(FakeLockTable(), 1)
    assert a.try_acquire() and b.try_acquire() and other.try_acquire()


def test_unsigned_and_signed_spelling_of_one_key_contend() -> None:
    table = FakeLockTable()
    assert FakeLeaderLock(table, 2**64 - 1).try_acquire()
    assert not FakeLeaderLock(table, -1).try_acquire()
    assert table.holder(2**64 - 1) == table.holder(-1) is not None


def test_lost_session_frees_the_lock_for_the_other() -> None:
    _, a, b = pair()
    assert a.try_acquire()
    a.lose()
    assert a.held() is False
    assert b.try_acquire() and b.held()
    assert a.try_acquire() is False  # reconnected, but b holds it now
    b.release()
    assert a.try_acquire() and a.held()


def test_half_dead_session_blocks_everyone_until_reaped() -> None:
    table, a, b = pair()
    assert a.try_acquire()
    a.lose(freed=False)  # we know we lost it; the server has not noticed yet
    assert (a.held(), b.held()) == (False, False)
    assert b.try_acquire() is False  # nobody is leader: nobody acts
    assert a.try_acquire() is False  # a's new session is not the old one
    table.reap()
    assert b.try_acquire() and b.held()


def test_outage_ends_every_session() -> None:
    table, a, b = pair()
    assert a.try_acquire()
    table.set_available(False)
    assert (a.held(), b.held()) == (False, False)
    for lock in (a, b):
        with pytest.raises(StoreUnavailable, match="simulated outage"):
            lock.try_acquire()
        with pytest.raises(StoreUnavailable):
            lock.holder_info()
        lock.release()  # never raises
    table.set_available(True)
    assert a.held() is False  # the old session did not survive the restart
    assert b.try_acquire() and not a.try_acquire()


OPS = st.lists(
    st.tuples(
        st.sampled_from(["acquire", "release", "lose", "half_lose", "reap", "down", "up"]),
        st.integers(min_value=0, max_value=2),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(ops=OPS)
def test_never_two_leaders(ops: list[tuple[str, int]]) -> None:
    table = FakeLockTable()
    locks = [FakeLeaderLock(table, 9, holder=str(i)) for i in range(3)]
    for op, i in ops:
        lock = locks[i]
        if op == "acquire":
            try:
                got = lock.try_acquire()
            except StoreUnavailable:
                got = False
            assert got == lock.held()
        elif op == "release":
            lock.release()
            assert not lock.held()
        elif op in ("lose", "half_lose"):
            lock.lose(freed=op == "lose")
            assert not lock.held()
        elif op == "reap":
            table.reap()
        else:
            table.set_available(op == "up")
        leaders = [lk for lk in locks if lk.held()]
        assert len(leaders) <= 1
        if leaders:
            assert table.holder(9) == leaders[0].application_name
