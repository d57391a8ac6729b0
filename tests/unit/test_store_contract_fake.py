"""The Store and LeaderLock contracts (tests/store_contract.py) over FakeStore and
FakeLeaderLock; tests/integration/test_store_contract_pg.py runs the same suite over
PostgresStore and PgLeaderLock."""

from __future__ import annotations

import pytest
from store_contract import LeaderLockContract, RowCount, StoreContract

from slurm_ml.store import FakeLeaderLock, FakeLockTable, FakeStore, Store


class TestFakeStore(StoreContract):
    @pytest.fixture
    def store(self) -> FakeStore:
        return FakeStore()

    @pytest.fixture
    def row_count(self, store: FakeStore) -> RowCount:
        return lambda cls: len(store.rows(cls))

    @pytest.fixture
    def down_store(self) -> Store:
        fake = FakeStore()
        fake.set_available(False)
        return fake


class TestFakeLeaderLock(LeaderLockContract):
    @pytest.fixture
    def locks(self) -> tuple[FakeLeaderLock, FakeLeaderLock]:
        table = FakeLockTable()
        return FakeLeaderLock(table, 7, holder="a"), FakeLeaderLock(table, 7, holder="b")
