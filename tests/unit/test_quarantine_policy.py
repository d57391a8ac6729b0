"""The quarantine rules: owned drains only, resume after N passes, the circuit breakers
(per node class, per check across the fleet), and a reset that starts a fresh window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurm_ml.config import QuarantineConfig
from slurm_ml.policy.quarantine import (
    Alarm,
    BreakerState,
    DrainDecision,
    DrainEvent,
    Scope,
    breaker_states,
    check_budget,
    decide_drain,
    drain_budget,
    is_check_id,
    may_drain,
    may_drain_for_check,
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


# ------------------------------------------------------------ the check breaker

NVL = "nvlink.active_links"
#: A fleet of 3 classes x 10 nodes: the check budget is max(2, floor(30 * 0.2)) = 6, the
#: class budget max(1, floor(10 * 0.2)) = 2.
FLEET = 30
CLASS_OF = {f"n{i:02d}": "abc"[i // 10] for i in range(FLEET)}


def drained(node: str, minutes: float, *checks: str, held: bool = False) -> DrainEvent:
    return DrainEvent(node, CLASS_OF[node], ago(minutes), frozenset(checks), held)


def decide(node: str, checks: list[str], history: list[DrainEvent],
           alarms: list[Alarm] | None = None,
           resets: dict[Scope, datetime] | None = None) -> DrainDecision:
    return decide_drain(node, CLASS_OF[node], 10, FLEET, checks, history=history,
                        alarms=alarms or [], now=NOW, cfg=CFG, resets=resets)


#: Six nodes drained for NVL in the window, in classes b and c: the budget of NVL is
#: spent, and class a (where n02 is) has drained nothing.
SPREAD = [drained(n, 5, NVL) for n in ("n10", "n11", "n12", "n20", "n21", "n22")]


@pytest.mark.parametrize(("fleet", "budget"), [(1, 2), (6, 2), (14, 2), (15, 3), (30, 6),
                                               (512, 102)])
def test_check_budget_is_a_share_of_the_fleet_but_at_least_two(fleet: int,
                                                               budget: int) -> None:
    assert check_budget(fleet, CFG) == budget


def test_check_breaker_trips_across_classes_and_the_alarm_names_the_check() -> None:
    d = decide("n02", [NVL], SPREAD)

    assert not d.allowed and d.acted == ()
    [alarm] = d.alarms
    assert alarm == Alarm(None, NOW, ("n10", "n11", "n12", "n20", "n21", "n22"), "n02",
                          check=NVL)
    assert alarm.scope == Scope.of_check(NVL)
    assert [c for c, _ in d.set_aside] == [NVL]
    assert f"circuit breaker tripped for check {NVL}" in d.reason
    assert f"slurm-ml quarantine reset --check {NVL}" in d.reason


def test_under_the_check_budget_it_drains() -> None:
    d = decide("n02", [NVL], SPREAD[:5])

    assert d.allowed and d.acted == (NVL,) and d.alarms == ()


def test_other_checks_still_drain_while_one_check_is_tripped() -> None:
    d = decide("n02", [NVL, "xid.79"], SPREAD)

    assert d.allowed and d.acted == ("xid.79",)
    assert [c for c, _ in d.set_aside] == [NVL]
    assert [a.check for a in d.alarms] == [NVL]
    assert "set aside" in d.reason


def test_an_open_check_alarm_sets_that_check_aside_without_a_new_alarm() -> None:
    alarm = Alarm(None, ago(60), ("n00",), "n10", check=NVL)

    alone = decide("n02", [NVL], [], [alarm])
    mixed = decide("n02", [NVL, "ecc.volatile_uncorrected"], [], [alarm])
    other = decide("n02", ["xid.79"], [], [alarm])

    assert not alone.allowed and alone.alarms == ()
    assert f"circuit breaker open for check {NVL}" in alone.reason
    assert mixed.allowed and mixed.acted == ("ecc.volatile_uncorrected",)
    assert other.allowed and other.set_aside == ()


def test_a_class_alarm_is_not_a_check_alarm_and_back() -> None:
    check_alarm = Alarm(None, ago(1), (), "n10", check=NVL)
    class_alarm = Alarm("a", ago(1), ("n00",), "n01")

    assert may_drain("n02", "a", 10, history=[], alarms=[check_alarm], now=NOW,
                     cfg=CFG).allowed
    assert may_drain_for_check("n02", "a", NVL, FLEET, history=[], alarms=[class_alarm],
                               now=NOW, cfg=CFG).allowed


def test_a_burst_in_one_class_does_not_trip_the_check_breaker() -> None:
    one_class = [drained(f"n{i:02d}", 5, NVL) for i in range(3, 10)]  # 7 > budget 6, all "a"

    verdict = may_drain_for_check("n02", "a", NVL, FLEET, history=one_class, alarms=[],
                                  now=NOW, cfg=CFG)

    assert verdict.allowed and verdict.alarm is None
    # the class breaker is what protects class a (and it is far past its budget of 2)
    d = decide("n02", [NVL], one_class)
    assert not d.allowed and [a.node_class for a in d.alarms] == ["a"]
    assert d.alarms[0].check is None
    # the same burst and one node of another class: two classes, the check trips
    assert not may_drain_for_check("n12", "b", NVL, FLEET, history=one_class, alarms=[],
                                   now=NOW, cfg=CFG).allowed


def test_check_drains_outside_the_window_or_of_other_checks_do_not_count() -> None:
    old = [drained(e.node, 31, NVL) for e in SPREAD]
    other = [drained(e.node, 5, "xid.79") for e in SPREAD]
    unknown = [drained(e.node, 5) for e in SPREAD]  # Slurm's view: no checks known

    for history in (old, other, unknown):
        assert may_drain_for_check("n02", "a", NVL, FLEET, history=history, alarms=[],
                                   now=NOW, cfg=CFG).allowed


def test_a_held_drain_counts_for_its_class_but_not_for_a_check_after_the_window() -> None:
    held = [drained("n00", 120, NVL, held=True), drained("n01", 120, NVL, held=True)]

    assert not may_drain("n02", "a", 10, history=held, alarms=[], now=NOW, cfg=CFG).allowed
    assert may_drain_for_check("n12", "b", NVL, 4, history=held, alarms=[], now=NOW,
                               cfg=CFG).allowed


@given(classes=st.lists(st.integers(0, 2), min_size=1, max_size=30))
def test_once_a_checks_drains_span_two_classes_they_stay_within_its_budget(
        classes: list[int]) -> None:
    history: list[DrainEvent] = []
    alarms: list[Alarm] = []
    for i, c in enumerate(classes):  # node i of class c fails NVL, one after another
        node = f"n{c * 10 + i % 10:02d}"
        v = may_drain_for_check(node, CLASS_OF[node], NVL, FLEET, history=history,
                                alarms=alarms, now=NOW, cfg=CFG)
        if v.allowed:
            history.append(drained(node, 0, NVL))
        elif v.alarm is not None:
            alarms.append(v.alarm)
    nodes = {e.node for e in history}
    if len({CLASS_OF[n] for n in nodes}) >= 2:
        assert len(nodes) <= check_budget(FLEET, CFG)


# -------------------------------------------------------- a reset starts afresh


def test_a_class_reset_starts_a_fresh_window_for_that_class() -> None:
    history = [DrainEvent("gpu03", "a100-40g", ago(10))]  # drained, since resumed
    reset = {Scope.of_class("a100-40g"): ago(5)}

    before = may_drain("gpu04", "a100-40g", 2, history=history, alarms=[], now=NOW, cfg=CFG)
    after = may_drain("gpu04", "a100-40g", 2, history=history, alarms=[], now=NOW, cfg=CFG,
                      resets=reset)

    assert not before.allowed  # the bug seen on the dev cluster
    assert after.allowed
    # a drain after the reset counts again; a reset of another scope changes nothing
    assert not may_drain("gpu04", "a100-40g", 2,
                         history=[DrainEvent("gpu03", "a100-40g", ago(4))], alarms=[],
                         now=NOW, cfg=CFG, resets=reset).allowed
    assert not may_drain("gpu04", "a100-40g", 2, history=history, alarms=[], now=NOW,
                         cfg=CFG, resets={Scope.of_class("a100-80g"): ago(5),
                                          Scope.of_check(NVL): ago(5)}).allowed


def test_a_drain_at_the_moment_of_the_reset_does_not_count() -> None:
    history = [DrainEvent("gpu03", "a100-40g", ago(5))]

    assert may_drain("gpu04", "a100-40g", 2, history=history, alarms=[], now=NOW, cfg=CFG,
                     resets={Scope.of_class("a100-40g"): ago(5)}).allowed


def test_a_node_still_drained_since_before_the_reset_does_not_count() -> None:
    held_old = [DrainEvent("gpu03", "a100-40g", ago(90), held=True)]
    held_new = [DrainEvent("gpu03", "a100-40g", ago(1), held=True)]  # no audit: dated now
    reset = {Scope.of_class("a100-40g"): ago(5)}

    assert may_drain("gpu04", "a100-40g", 2, history=held_old, alarms=[], now=NOW, cfg=CFG,
                     resets=reset).allowed
    assert not may_drain("gpu04", "a100-40g", 2, history=held_new, alarms=[], now=NOW,
                         cfg=CFG, resets=reset).allowed


def test_a_check_reset_starts_a_fresh_window_for_that_check() -> None:
    reset = {Scope.of_check(NVL): ago(3)}  # after SPREAD (5 min ago)
    after = [drained(n, 2, NVL) for n in ("n03", "n13")]

    assert not decide("n02", [NVL], SPREAD).allowed
    assert decide("n02", [NVL], SPREAD, resets=reset).acted == (NVL,)
    assert decide("n02", [NVL], SPREAD + after, resets=reset).acted == (NVL,)  # 2 of 6
    # the classes' own breakers are not reset by a check's reset
    assert not may_drain("n13", "b", 10, history=SPREAD, alarms=[], now=NOW, cfg=CFG,
                         resets=reset).allowed


# ------------------------------------------------- the breakers as the metrics show them


def states(history: list[DrainEvent], alarms: list[Alarm] | None = None,
           resets: dict[Scope, datetime] | None = None) -> dict[Scope, BreakerState]:
    return breaker_states({"a": 10, "b": 10, "c": 10}, FLEET, history=history,
                          alarms=alarms or [], now=NOW, cfg=CFG, resets=resets)


def test_quiet_breakers_neither_refuse_nor_are_tripped() -> None:
    assert states([]) == {Scope.of_class(c): BreakerState(False, False) for c in "abc"}


def test_a_class_whose_budget_is_spent_refuses_the_next_drain_before_it_trips() -> None:
    two = [drained("n10", 5, NVL), drained("n11", 5)]  # class b's budget: 2

    got = states(two)

    assert got[Scope.of_class("b")] == BreakerState(refusing=True, tripped=False)
    assert got[Scope.of_class("a")] == BreakerState(False, False)
    # what the drain decision says of a node of b not drained yet, the same
    assert not decide("n12", [], two).allowed
    # a check below its fleet budget: shown, refusing nothing
    assert got[Scope.of_check(NVL)] == BreakerState(False, False)


def test_an_open_alarm_is_tripped_and_refusing_until_its_reset() -> None:
    class_alarm = Alarm("a", ago(60), ("n00", "n01"), "n02")
    check_alarm = Alarm(None, ago(60), ("n10",), "n20", check="xid.79")

    got = states([], [class_alarm, check_alarm])

    assert got[Scope.of_class("a")] == BreakerState(True, True)
    assert got[Scope.of_check("xid.79")] == BreakerState(True, True)
    assert got[Scope.of_class("b")] == BreakerState(False, False)


def test_a_check_at_its_budget_refuses_since_a_node_of_another_class_would_trip_it() -> None:
    got = states(SPREAD)

    assert got[Scope.of_check(NVL)] == BreakerState(True, False)
    # after the check's reset its window is fresh
    fresh = states(SPREAD, resets={Scope.of_check(NVL): ago(3)})
    assert fresh[Scope.of_check(NVL)] == BreakerState(False, False)


def test_a_check_breaker_in_a_one_class_fleet_never_refuses() -> None:
    one_class = [drained(f"n{i:02d}", 5, NVL) for i in range(3, 10)]

    got = breaker_states({"a": 10}, 10, history=one_class, alarms=[], now=NOW, cfg=CFG)

    assert got[Scope.of_check(NVL)] == BreakerState(False, False)
    assert got[Scope.of_class("a")].refusing


@pytest.mark.parametrize(("text", "ok"), [
    ("nvlink.active_links", True), ("xid.79", True), ("gpu.read_error", True),
    ("remapped_rows.pending", True), ("nvlink", False), ("a100-40g", False), ("", False),
    ("xid.79;rm -rf", False), (".xid", False), ("check:xid.79", False),
])
def test_what_a_check_id_looks_like(text: str, ok: bool) -> None:
    assert is_check_id(text) is ok
