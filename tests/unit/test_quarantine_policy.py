"""The quarantine rules: owned drains only, resume after N passes, the circuit breaker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurm_ml.config import QuarantineConfig
from slurm_ml.policy.quarantine import (
    Alarm,
    DrainEvent,
    drain_budget,
    may_drain,
    may_resume,
    owned,
    pass_streak,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
CFG = QuarantineConfig()  # 3 passes, 20% per 30 min


def ago(minutes: float) -> datetime:
    return NOW - timedelta(minutes=minutes)


@pytest.mark.parametrize(("reason", "mine"), [
    ("slurm-ml: nvlink.active_links gpu6 (0/12 active)", True),
    ("  slurm-ml: probe.error", True),
    ("Prolog error", False),
    ("NHC: check_gpu failed", False),
    ("admin: replacing DIMM", False),
    ("slurm-ml", False),
    ("", False),
], ids=["ours", "ours-leading-space", "slurm-prolog", "nhc", "admin", "no-colon", "empty"])
def test_only_reasons_starting_with_the_prefix_are_owned(reason: str, mine: bool) -> None:
    assert owned(reason) is mine


@pytest.mark.parametrize(("size", "budget"), [(1, 1), (2, 1), (4, 1), (5, 1), (10, 2),
                                              (64, 12)])
def test_drain_budget_is_a_share_of_the_class_but_at_least_one(size: int, budget: int) -> None:
    assert drain_budget(size, CFG) == budget


CASES = [
    ("first-drain-of-a-class", [], [], True),
    ("second-node-of-a-2-node-class-trips", [DrainEvent("gpu03", "a100-40g", ago(5))], [],
     False),
    ("old-drain-outside-the-window", [DrainEvent("gpu03", "a100-40g", ago(31))], [], True),
    ("drain-in-another-class-does-not-count", [DrainEvent("gpu01", "a100-80g", ago(1))], [],
     True),
    ("re-draining-the-same-node-is-not-a-new-one", [DrainEvent("gpu04", "a100-40g", ago(1))],
     [], True),
    ("open-alarm-blocks-everything", [],
     [Alarm("a100-40g", ago(90), ("gpu03",), "gpu04")], False),
    ("alarm-of-another-class-does-not", [],
     [Alarm("v100-pcie", ago(1), ("gpu05",), "gpu06")], True),
]


@pytest.mark.parametrize(("history", "alarms", "allowed"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_may_drain(history: list[DrainEvent], alarms: list[Alarm], allowed: bool) -> None:
    verdict = may_drain("gpu04", "a100-40g", 2, history=history, alarms=alarms, now=NOW,
                        cfg=CFG)

    assert verdict.allowed is allowed
    assert verdict.reason


def test_tripping_records_one_alarm_with_its_evidence() -> None:
    verdict = may_drain("gpu04", "a100-40g", 2,
                        history=[DrainEvent("gpu03", "a100-40g", ago(2))], alarms=[],
                        now=NOW, cfg=CFG)

    assert verdict.alarm == Alarm("a100-40g", NOW, ("gpu03",), "gpu04")
    assert "quarantine reset" in verdict.reason
    again = may_drain("gpu04", "a100-40g", 2, history=[], alarms=[verdict.alarm], now=NOW,
                      cfg=CFG)
    assert not again.allowed and again.alarm is None  # no second alarm


@given(sizes=st.integers(1, 200), faulty=st.integers(0, 200))
def test_breaker_never_lets_more_than_the_budget_drain_in_a_window(sizes: int,
                                                                   faulty: int) -> None:
    history: list[DrainEvent] = []
    alarms: list[Alarm] = []
    for i in range(min(faulty, sizes)):
        v = may_drain(f"n{i}", "c", sizes, history=history, alarms=alarms, now=NOW, cfg=CFG)
        if v.allowed:
            history.append(DrainEvent(f"n{i}", "c", NOW))
        elif v.alarm:
            alarms.append(v.alarm)
    assert len(history) <= drain_budget(sizes, CFG)


@pytest.mark.parametrize(("results", "streak"), [
    ([], 0), ([True], 1), ([False, True, True], 2), ([True, True, False], 0),
    ([True] * 5, 5),
], ids=["none", "one", "two-after-fail", "ends-failing", "five"])
def test_pass_streak(results: list[bool], streak: int) -> None:
    assert pass_streak(results) == streak


@pytest.mark.parametrize(("reason", "results", "resume"), [
    ("slurm-ml: remap.pending gpu2", [True, True, True], True),
    ("slurm-ml: remap.pending gpu2", [True, True], False),
    ("slurm-ml: remap.pending gpu2", [True, True, True, False], False),
    ("admin: bad fan", [True] * 10, False),
    ("Prolog error", [True] * 10, False),
], ids=["three-passes", "two-passes", "failed-again", "admin-drain", "slurm-prolog-drain"])
def test_may_resume_only_owned_drains_after_n_passes(reason: str, results: list[bool],
                                                     resume: bool) -> None:
    assert may_resume(reason, results, CFG) is resume
