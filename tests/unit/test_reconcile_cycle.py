"""The reconcile cycle's contract with its drivers (``policy.reconcile``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence

import pytest
from test_sim_engine import contract_cfg

from slurm_ml.policy import reconcile
from slurm_ml.policy.cluster_jobs import WaitingJob
from slurm_ml.policy.contracts import PreemptionLedger
from slurm_ml.policy.fairshare.tree import flatten
from slurm_ml.policy.placement import NodeMap

NOW = 1_700_000_000


class RecordingQueue:
    """A queue with nothing waiting that notes each read."""

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def alloc_accounts(self) -> list[str]:
        self.events.append("read")
        return []

    def alloc_jobs(self, accounts: Collection[str]) -> Sequence[WaitingJob]:
        self.events.append("read")
        return []

    def jobs(self, job_ids: Collection[int]) -> Sequence[WaitingJob]:
        self.events.append("read")
        return []


def _input(events: list[str]) -> reconcile.CycleInput:
    cfg = contract_cfg()

    def room(gone: Collection[int]) -> NodeMap:
        events.append("room")
        return {}

    return reconcile.CycleInput(
        now=NOW, footprints=[], pending_assocs=(), pending=[], lane_pending=[],
        lane_running=[], running=[], ledger=PreemptionLedger(last_requeue={}, recent=[]),
        queue=RecordingQueue(events), room=room, total_gpus=cfg.total_gpus())


def test_the_prices_reach_the_driver_before_the_queue_is_read() -> None:
    """The simulator re-keys its queue in ``priced``: were the queue read first, the
    starved jobs would be taken in the last cycle's order."""
    events: list[str] = []
    got: list[reconcile.CycleDecision] = []

    def priced(decision: reconcile.CycleDecision) -> None:
        events.append("priced")
        got.append(decision)

    out = reconcile.reconcile(contract_cfg(), _input(events), priced=priced)
    assert events[0] == "priced" and "read" in events
    assert got[0].fair is out.fair and got[0].site_factors == out.site_factors


def test_without_requeues_the_queue_and_the_room_are_never_read() -> None:
    events: list[str] = []
    out = reconcile.reconcile(contract_cfg(), _input(events), requeue=False)
    assert events == []
    assert out.all_requeues == ()


def test_with_nothing_waiting_a_driver_may_skip_fair_share() -> None:
    """Nothing waits: nothing is priced, starved or laned, so the simulator need not pay
    for standings it samples on its own cadence; the daemon (the default) gets them."""
    cfg = contract_cfg()
    lean = reconcile.reconcile(cfg, _input([]), fair_when_idle=False)
    full = reconcile.reconcile(cfg, _input([]))
    assert lean.fair is None and full.fair is not None and full.standings is full.fair
    assert (lean.site_factors, lean.positions, lean.all_requeues) == ({}, {}, ())
    assert lean.lane == full.lane and lean.lane_factors == full.lane_factors == {}
    with pytest.raises(ValueError, match="no fair share"):
        _ = lean.standings


def test_work_waiting_gets_fair_share_whatever_the_driver_asked() -> None:
    cfg = contract_cfg()
    assoc = next(iter(flatten(cfg.budgets).leaf_of))
    inp = dataclasses.replace(_input([]), pending_assocs=(assoc,))
    assert reconcile.reconcile(cfg, inp, fair_when_idle=False).fair is not None
