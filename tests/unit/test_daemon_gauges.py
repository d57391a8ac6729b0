"""The daemon's state gauges, which the alert rules read: owned drains, the circuit
breakers, starved allocations. Each is the decision slurm-ml makes elsewhere, asked of
what the cycle observed; a daemon that does not lead shows none of them."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from daemon_helpers import CFG, HOUR, NOW, daemon, job, world
from prometheus_client import CollectorRegistry

from slurm_ml.daemon.loop import Daemon
from slurm_ml.daemon.plan import starved_waits
from slurm_ml.model import JobState
from slurm_ml.store.audit_log import DRAIN, RESET, TRIP
from slurm_ml.store.fake import FakeStore
from slurm_ml.store.leader import FakeLockTable
from slurm_ml.store.records import AuditEntry, derive_key

AT = datetime.fromtimestamp(NOW, UTC)


def value(d: Daemon, name: str, **labels: str) -> float | None:
    registry: CollectorRegistry = d.metrics.registry
    return registry.get_sample_value(name, labels)


def audit(store: FakeStore, action: str, target: str, minutes_ago: float,
          **details: object) -> None:
    at = AT - timedelta(minutes=minutes_ago)
    store.audit(AuditEntry(idempotency_key=derive_key("test", action, target, at),
                           actor="test", action=action, target=target, at=at,
                           details=dict(details)))


def test_owned_drains_per_node_by_the_reason_slurm_ml_owns() -> None:
    slurm, store = world(), FakeStore()
    slurm.drain_node("gpu05", "slurm-ml: nvlink.active_links gpu6 (0/12 active)")
    slurm.drain_node("gpu06", "bad fan, ticket 123")  # the admin's: not ours
    d = daemon(slurm, store)
    d.cycle()

    assert value(d, "slurm_ml_node_owned_drain", node="gpu05") == 1
    assert value(d, "slurm_ml_node_owned_drain", node="gpu06") == 0
    assert value(d, "slurm_ml_node_owned_drain", node="gpu01") == 0

    slurm.resume_node("gpu05")
    del slurm.nodes["gpu04"]  # gone from slurm.conf
    d.cycle()
    assert value(d, "slurm_ml_node_owned_drain", node="gpu05") == 0
    assert value(d, "slurm_ml_node_owned_drain", node="gpu04") is None


def test_breakers_open_and_tripped_per_class_and_per_check() -> None:
    slurm, store = world(), FakeStore()
    # a100-40g (gpu03, gpu04): its budget of 1 drain spent 10 min ago, no alarm yet
    audit(store, DRAIN, "gpu03", 10, node_class="a100-40g", checks=["xid.79"])
    # v100-pcie tripped an hour ago and was not reset; a check alarm too
    audit(store, TRIP, "v100-pcie", 60, scope="class", drained=["gpu05"], refused="gpu06")
    audit(store, TRIP, "check:gpu.lost", 60, scope="check", check="gpu.lost",
          drained=["gpu01", "gpu05"], refused="gpu03")
    # a100-80g tripped and was reset since
    audit(store, TRIP, "a100-80g", 90, scope="class", drained=["gpu01"], refused="gpu02")
    audit(store, RESET, "a100-80g", 80, scope="class")
    d = daemon(slurm, store)
    d.cycle()

    def cls(name: str, node_class: str) -> float | None:
        return value(d, name, node_class=node_class)

    assert (cls("slurm_ml_breaker_open", "a100-40g"),
            cls("slurm_ml_breaker_tripped", "a100-40g")) == (1, 0)
    assert (cls("slurm_ml_breaker_open", "v100-pcie"),
            cls("slurm_ml_breaker_tripped", "v100-pcie")) == (1, 1)
    assert (cls("slurm_ml_breaker_open", "a100-80g"),
            cls("slurm_ml_breaker_tripped", "a100-80g")) == (0, 0)
    assert value(d, "slurm_ml_check_breaker_tripped", check="gpu.lost") == 1
    assert value(d, "slurm_ml_check_breaker_open", check="gpu.lost") == 1
    # one drain for xid.79 of a fleet budget of 2: shown, refusing nothing
    assert value(d, "slurm_ml_check_breaker_open", check="xid.79") == 0


def test_a_starved_allocation_shows_its_longest_wait_every_other_project_zero() -> None:
    slurm, store = world(), FakeStore()
    d = daemon(slurm, store)
    d.cycle()

    # dave's job 20 (detection, under-served) waits 2 h for v100s alice's jobs hold
    assert value(d, "slurm_ml_allocation_starved_wait_seconds", account="detection") == 2 * HOUR
    # alice's own job 21 waits as long, but llm-pretrain is over-served: not starved
    assert value(d, "slurm_ml_allocation_starved_wait_seconds", account="llm-pretrain") == 0
    assert value(d, "slurm_ml_contracts_min_runtime_cap_seconds") == (
        CFG.policy.contracts.min_runtime_cap_min * 60)


@pytest.mark.parametrize(("gpu03_free", "wait"), [(False, 3 * HOUR), (True, 0)])
def test_a_job_that_fits_the_free_gpus_is_not_starved(gpu03_free: bool, wait: int) -> None:
    slurm, store = world(), FakeStore()
    slurm.jobs.pop(20)
    slurm.add_job(job(30, "dave", "detection", gpus=8, gtype="a100_40g",
                      submit=NOW - 3 * HOUR))
    if gpu03_free:  # bob's job there ended: 8 a100_40g GPUs are free
        slurm.jobs[12] = replace(slurm.jobs[12], state=JobState.COMPLETED)
    d = daemon(slurm, store)
    d.cycle()

    assert value(d, "slurm_ml_allocation_starved_wait_seconds", account="detection") == wait


def test_the_usual_cycle_reads_no_queue_for_the_starved() -> None:
    class NoQueue:
        def alloc_accounts(self) -> list[str]:
            return []

        def alloc_jobs(self, accounts: object) -> list[object]:
            raise AssertionError("read the queue with no account that can starve")

    def no_room(gone: object) -> object:
        raise AssertionError("built the room with nobody starved")

    assert starved_waits(NOW, NoQueue(), {}, no_room,  # type: ignore[arg-type]
                         CFG.policy.contracts) == {}


def test_a_daemon_that_does_not_lead_shows_no_state() -> None:
    slurm, store, table = world(), FakeStore(), FakeLockTable()
    slurm.drain_node("gpu05", "slurm-ml: gpu.lost gpu1")
    leader = daemon(slurm, store, table)
    leader.cycle()
    other = daemon(slurm, store, table)
    assert other.cycle().outcome == "passive"
    assert value(other, "slurm_ml_node_owned_drain", node="gpu05") is None

    leader.close()  # the leader's session ends: the other takes over, and the first,
    assert other.cycle().outcome == "acted"  # now passive, clears what it showed
    assert value(other, "slurm_ml_node_owned_drain", node="gpu05") == 1
    assert leader.cycle().outcome == "passive"
    assert value(leader, "slurm_ml_node_owned_drain", node="gpu05") is None
    assert value(leader, "slurm_ml_allocation_starved_wait_seconds",
                 account="detection") is None
