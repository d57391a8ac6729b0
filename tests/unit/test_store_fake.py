"""FakeStore's own failure knobs: outages, lost acknowledgements, injected errors.

What every Store must do (idempotency, filters, ordering, reads) is the contract suite
in tests/store_contract.py, which tests/unit/test_store_contract_fake.py runs over
FakeStore.
"""

from __future__ import annotations

import pytest
from builders import audit_entry, health_event

from slurm_ml.store import (
    FakeStore,
    HealthEvent,
    StoreIntegrityError,
    StoreUnavailable,
    WriteOutcome,
)


def test_outage_makes_writes_and_reads_unavailable() -> None:
    fake = FakeStore()
    fake.set_available(False)
    with pytest.raises(StoreUnavailable, match="simulated outage"):
        fake.record_health_event(health_event("k"))
    with pytest.raises(StoreUnavailable):
        fake.recent_health_events()
    assert fake.rows(HealthEvent) == []
    fake.set_available(True)
    assert fake.record_health_event(health_event("k")) is WriteOutcome.LANDED


def test_lost_ack_commits_then_raises() -> None:
    fake = FakeStore()
    fake.lose_next_ack()
    with pytest.raises(StoreUnavailable):
        fake.record_health_event(health_event("k"))
    assert fake.rows(HealthEvent) == [health_event("k")]
    assert fake.record_health_event(health_event("k")) is WriteOutcome.DUPLICATE


def test_injected_failures_do_not_land() -> None:
    fake = FakeStore()
    fake.fail_next_writes(StoreIntegrityError("refused"), n=2)
    for _ in range(2):
        with pytest.raises(StoreIntegrityError):
            fake.audit(audit_entry("a"))
    assert fake.audit(audit_entry("a")) is WriteOutcome.LANDED
    assert fake.write_attempts == 3
