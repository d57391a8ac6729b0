"""Simulator metrics on hand-made runs: every number here is worked out by hand."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from slurm_ml.sim.metrics import (
    ALL,
    Ai2Team,
    Summary,
    TeamSummary,
    WaitStats,
    baseline_of,
    compare,
    comparison_rows,
    flagged_teams,
    human_duration,
    intervals,
    percentile,
    summarize,
    targets,
)
from slurm_ml.sim.result import CycleSample, JobOutcome, SimResult
from slurm_ml.sim.workload import DEBUG, LARGE, SMALL


def tiny(policy: str = "fifo") -> SimResult:
    """8 GPUs, 1,000 s, teams a and b with equal weights (a share of 4 GPUs each)."""
    jobs = (
        JobOutcome(1, "a", DEBUG, 1, submit_s=0, start_s=10, end_s=110, run_s=100),
        JobOutcome(2, "a", DEBUG, 1, submit_s=100, start_s=130, end_s=230, run_s=100),
        JobOutcome(3, "b", DEBUG, 1, submit_s=200, start_s=None, end_s=None, run_s=0),
        JobOutcome(4, "b", SMALL, 4, submit_s=0, start_s=0, end_s=400, run_s=400),
        JobOutcome(5, "b", LARGE, 8, submit_s=50, start_s=950, end_s=None, run_s=50),
        JobOutcome(6, "a", SMALL, 2, submit_s=0, start_s=100, end_s=900, run_s=600,
                   requeues=1, lost_gpu_s=2 * 3600.0),
    )
    samples = (
        CycleSample(0, {"b": 4}, {"a": 3, "b": 8}, free_gpus=4, fragmented_gpus=2),
        CycleSample(100, {"a": 3, "b": 4}, {"b": 8}, free_gpus=1, fragmented_gpus=1,
                    owed_gpu_h={"a": 1, "b": 2}, delivered_gpu_h={"a": 0.5, "b": 2}),
        CycleSample(400, {"a": 2, "b": 6}, {"b": 8}, free_gpus=0, fragmented_gpus=0,
                    owed_gpu_h={"a": 2, "b": 4}, delivered_gpu_h={"a": 2, "b": 3}),
        CycleSample(800, {}, {}, free_gpus=8, fragmented_gpus=8,
                    owed_gpu_h={"a": 4, "b": 8}, delivered_gpu_h={"a": 3, "b": 8}),
    )
    return SimResult(policy=policy, cluster_gpus=8, start_s=0, end_s=1000, jobs=jobs,
                     samples=samples, team_weights={"a": 1.0, "b": 1.0}, wall_s=0.25,
                     preemptions=1)


def test_percentile_interpolates_between_closest_ranks() -> None:
    assert percentile([], 50) is None
    assert percentile([5.0], 90) == 5.0
    assert percentile([40, 0, 20, 10, 30], 50) == 20
    assert percentile([0, 10, 20, 30, 40], 90) == pytest.approx(36.0)
    assert percentile([0, 10, 20, 30, 40], 99) == pytest.approx(39.6)
    assert percentile([0, 10], 100) == 10


def test_waits_per_class_include_never_started_jobs_censored_at_the_end() -> None:
    s = summarize(tiny())
    debug = s.waits[DEBUG]  # waits 10, 30 and 800 (job 3 never started: 1000 - 200)
    assert (debug.jobs, debug.never_started) == (3, 1)
    assert debug.p50_s == 30
    assert debug.p90_s == pytest.approx(30 + 0.8 * 770)
    assert debug.p99_s == pytest.approx(30 + 0.98 * 770)
    assert debug.mean_s == pytest.approx(280)
    assert debug.max_s == 800
    assert s.waits[SMALL] == WaitStats(2, 0, 50, 90, 99, 50, 100)
    assert s.waits[LARGE] == WaitStats(1, 0, 900, 900, 900, 900, 900)
    everything = s.waits[ALL]  # 0, 10, 30, 100, 800, 900
    assert (everything.jobs, everything.never_started) == (6, 1)
    assert everything.p50_s == 65
    assert everything.mean_s == pytest.approx(1840 / 6)
    assert list(s.waits) == [DEBUG, SMALL, LARGE, ALL]


def test_starvation_is_the_longest_wait_started_or_not() -> None:
    s = summarize(tiny())
    assert s.max_wait_s == 900  # job 5 waited 900 s, then started
    assert s.max_wait_never_started_s == 800


def test_occupancy_is_time_weighted_between_samples() -> None:
    # busy 4 for 100 s, 7 for 300 s, 8 for 400 s, 0 for the last 200 s; 8 GPUs x 1,000 s
    s = summarize(tiny())
    assert s.sampled_s == 1000
    assert s.occupancy == pytest.approx((400 + 2100 + 3200) / 8000)
    assert s.utilisation == s.occupancy


def test_fragmentation_weights_by_time_and_skips_a_full_cluster() -> None:
    # 2/4 for 100 s, 1/1 for 300 s, (free = 0 for 400 s: left out), 8/8 for 200 s
    s = summarize(tiny())
    assert s.fragmentation == pytest.approx((50 + 300 + 200) / 600)


def test_fragmentation_is_none_when_nothing_was_ever_free() -> None:
    r = tiny()
    full = tuple(dataclasses.replace(x, free_gpus=0) for x in r.samples)
    assert summarize(dataclasses.replace(r, samples=full)).fragmentation is None


def test_requeues_and_lost_gpu_hours() -> None:
    s = summarize(tiny())
    assert (s.preemptions, s.requeues, s.lost_gpu_h) == (1, 1, 2.0)


def test_per_team_owed_delivered_ratio_and_mean_after_warm_up() -> None:
    s = summarize(tiny())
    a, b = s.team("a"), s.team("b")
    assert (a.owed_gpu_h, a.delivered_gpu_h, a.ratio) == (4, 3, 0.75)
    assert (b.owed_gpu_h, b.delivered_gpu_h, b.ratio) == (8, 8, 1.0)
    assert s.warmup_s == 100  # 10% of the window
    # from t = 100: 300 s at 0.5, 400 s at 1.0, 200 s at 0.75 for a
    assert a.ratio_mean == pytest.approx(700 / 900)
    assert b.ratio_mean == pytest.approx(800 / 900)
    late = summarize(tiny(), warmup_s=450).team("a")  # 350 s at 1.0, 200 s at 0.75
    assert late.ratio_mean == pytest.approx(500 / 550)


def test_enough_demand_is_busy_plus_pending_at_least_the_share_most_of_the_time() -> None:
    s = summarize(tiny())
    a, b = s.team("a"), s.team("b")
    assert a.share_gpus == b.share_gpus == 4
    assert (a.demand_frac, a.enough_demand) == (0.0, False)  # at most 3 GPUs asked for
    assert (b.demand_frac, b.enough_demand) == (0.8, True)  # 800 of 1,000 s


def test_team_without_weight_has_no_share_and_no_enough_demand() -> None:
    r = dataclasses.replace(tiny(), team_weights={"a": 1.0})
    b = summarize(r).team("b")
    assert (b.share_gpus, b.demand_frac, b.enough_demand) == (None, None, False)
    assert summarize(r).team("a").share_gpus == 8


def test_slowdown_jobs_and_gpu_hours_per_team() -> None:
    s = summarize(tiny())
    a, b = s.team("a"), s.team("b")
    assert (a.jobs, a.finished, b.jobs, b.finished) == (3, 3, 3, 1)
    assert a.slowdown_p50 == pytest.approx(1.3)  # 1.1, 1.3 and 900 / 600 = 1.5
    assert a.slowdown_p90 == pytest.approx(1.46)
    assert (b.slowdown_p50, b.slowdown_p90) == (1.0, 1.0)
    assert a.gpu_h_run == pytest.approx(1400 / 3600)
    assert b.gpu_h_run == pytest.approx(2000 / 3600)


def test_window_restricts_jobs_and_clips_samples() -> None:
    s = summarize(tiny(), window=(100, 1000))
    assert s.jobs == 2  # jobs 2 and 3 were submitted in the window
    assert s.waits[DEBUG].jobs == 2
    assert s.sampled_s == 900
    assert s.occupancy == pytest.approx((2100 + 3200) / (8 * 900))
    # a window starting between samples takes the earlier sample's value
    s = summarize(tiny(), window=(50, 1000))
    assert s.occupancy == pytest.approx((4 * 50 + 2100 + 3200) / (8 * 950))
    with pytest.raises(ValueError, match="ends before"):
        summarize(tiny(), window=(10, 5))


def test_intervals_hold_each_sample_until_the_next() -> None:
    r = tiny()
    assert [(x.t_s, d) for x, d in intervals(r.samples, 0, 1000)] == [
        (0, 100), (100, 300), (400, 400), (800, 200)]
    assert [(x.t_s, d) for x, d in intervals(reversed(r.samples), 450, 900)] == [
        (400, 350), (800, 100)]


def test_as_dict_is_json_ready_and_complete() -> None:
    s = summarize(tiny())
    d = s.as_dict()
    assert json.loads(json.dumps(d, allow_nan=False)) == d
    assert d["waits"]["debug"]["never_started"] == 1
    assert d["teams"][1]["team"] == "b"
    assert d["window"] == [0, 1000]
    assert "per-GPU utilisation" in d["utilisation_note"]


def test_targets_on_the_tiny_run_all_fail_with_reasons() -> None:
    checks = {c.name: c for c in targets(summarize(tiny("budget")))}
    assert list(checks) == ["min ratio (enough demand)", "median team ratio",
                            "debug p90 wait", "occupancy", "large-job p90 wait vs fifo",
                            "preemption loss"]
    assert checks["large-job p90 wait vs fifo"].explanation == (
        "cannot judge: fifo was not run beside it")
    assert checks["preemption loss"].explanation == "cannot judge: nothing ran"
    assert not any(c.passed for c in checks.values())
    worst = checks["min ratio (enough demand)"]
    assert worst.value == pytest.approx(800 / 900) and not worst.passed
    assert worst.explanation == ("worst of 1 team with enough demand is 'b': 88.9% "
                                 "(misses >= 95.0%)")
    median = checks["median team ratio"]
    assert median.value == pytest.approx((700 / 900 + 800 / 900) / 2) and not median.passed
    assert checks["debug p90 wait"].value == pytest.approx(646) and checks["debug p90 wait"].op == "<="
    assert not checks["occupancy"].passed
    assert all(c.explanation for c in checks.values())


def _with_ratios(s: Summary, ratios: dict[str, float]) -> Summary:
    teams = tuple(dataclasses.replace(t, ratio_mean=ratios.get(t.team, t.ratio_mean),
                                      enough_demand=True) for t in s.teams)
    return dataclasses.replace(s, teams=teams)


def _passed(s: Summary, name: str) -> bool:
    return next(c.passed for c in targets(s) if c.name == name)


@pytest.mark.parametrize(("ratio", "ok"), [(0.95, True), (0.9499, False), (1.2, True)])
def test_min_ratio_boundary(ratio: float, ok: bool) -> None:
    s = _with_ratios(summarize(tiny()), {"a": ratio, "b": 1.0})
    assert _passed(s, "min ratio (enough demand)") is ok


@pytest.mark.parametrize(("ratios", "ok"), [((0.97, 0.99), True), ((0.97, 0.9899), False)])
def test_median_ratio_boundary(ratios: tuple[float, float], ok: bool) -> None:
    s = _with_ratios(summarize(tiny()), dict(zip("ab", ratios, strict=True)))
    assert _passed(s, "median team ratio") is ok  # the median of two is their mean


@pytest.mark.parametrize(("p90", "ok"), [(60.0, True), (60.01, False), (0.0, True)])
def test_debug_p90_boundary(p90: float, ok: bool) -> None:
    s = summarize(tiny())
    waits = {**s.waits, DEBUG: dataclasses.replace(s.waits[DEBUG], p90_s=p90)}
    assert _passed(dataclasses.replace(s, waits=waits), "debug p90 wait") is ok


@pytest.mark.parametrize(("occ", "ok"), [(0.95, True), (0.9499, False)])
def test_occupancy_boundary(occ: float, ok: bool) -> None:
    assert _passed(dataclasses.replace(summarize(tiny()), occupancy=occ, steady_occupancy=occ), "occupancy") is ok


def test_a_target_with_nothing_to_measure_fails_and_says_so() -> None:
    r = tiny("budget")
    r = dataclasses.replace(r, jobs=tuple(j for j in r.jobs if j.kind != DEBUG), samples=())
    checks = {c.name: c for c in targets(summarize(r))}
    for check in checks.values():
        assert not check.passed
        assert check.value is None
        assert check.explanation.startswith("cannot judge")
    assert "no debug jobs" in checks["debug p90 wait"].explanation
    assert "no team had enough demand" in checks["min ratio (enough demand)"].explanation


def test_teams_without_enough_demand_are_not_held_to_the_minimum() -> None:
    s = summarize(tiny())
    low = dataclasses.replace(s.team("a"), ratio_mean=0.1, enough_demand=False)
    high = dataclasses.replace(s.team("b"), ratio_mean=0.99, enough_demand=True)
    s = dataclasses.replace(s, teams=(low, high))
    assert _passed(s, "min ratio (enough demand)")
    assert not _passed(s, "median team ratio")  # the median is over every owed team


def test_judged_ratio_falls_back_to_the_last_sample() -> None:
    t = summarize(tiny()).team("a")
    assert dataclasses.replace(t, ratio_mean=None).judged_ratio == 0.75
    assert isinstance(t, TeamSummary)


def test_compare_puts_policies_side_by_side() -> None:
    fifo, budget = summarize(tiny("fifo")), summarize(tiny("budget"))
    budget = dataclasses.replace(budget, occupancy=0.96, steady_occupancy=0.96)
    text = compare([fifo, budget])
    header, rule, *lines = text.splitlines()
    assert header.split() == ["metric", "fifo", "budget"]
    assert set(rule) <= {"-", " "}
    for label in ["target: min ratio (enough demand) >= 95.0%", "target: median team ratio",
                  "target: debug p90 wait <= 60 s", "target: occupancy >= 95.0% (or at most",
                  "target: large-job p90 wait vs fifo <= 1.00", "target: preemption loss <= 2.0%",
                  "occupancy after warm-up (judged)", "fragmentation index",
                  "GPUs idle while jobs waited (share of capacity)",
                  "teams not judged and below 95% (flagged)",
                  "preemptions", "requeues", "GPU-hours lost to requeues",
                  "debug wait p90", "small wait p99", "large wait mean", "all wait p50",
                  "debug never started", "teams with enough demand", "max wait (starvation)", "max wait, never started",
                  "a delivered/owed", "b slowdown p50"]:
        assert any(line.startswith(label) for line in lines), label
    # one occupancy row, the judged one (the whole window's 71.2% is in JSON only)
    assert sum(line.startswith("occupancy") for line in lines) == 1
    target = next(line for line in lines if line.startswith("target: occupancy"))
    # the target judges occupancy after the warm-up (the simulated cluster starts empty)
    assert fifo.steady_occupancy == pytest.approx(0.736, abs=5e-4)
    assert target.split()[-4:] == ["73.6%", "FAIL", "96.0%", "PASS"]
    steady = next(line for line in lines if line.startswith("occupancy after warm-up"))
    assert steady.split()[-2:] == ["73.6%", "96.0%"]
    p90 = next(line for line in lines if line.startswith("debug wait p90"))
    assert p90.split()[-4:] == ["11", "min", "11", "min"]  # 646 s
    assert len({len(line) for line in [header, rule]}) == 1


def test_comparison_rows_have_one_cell_per_policy_and_dash_for_missing() -> None:
    one = summarize(tiny("fifo"))
    other = dataclasses.replace(summarize(tiny("x")), teams=(), occupancy=None,
                                steady_occupancy=None)
    rows = dict(comparison_rows([one, other]))
    assert all(len(cells) == 2 for cells in rows.values())
    assert rows["a delivered/owed"] == ["77.8%", "-"]
    assert rows["occupancy after warm-up (judged)"][1] == "-"


def _large(s: Summary, p90: float | None, jobs: int = 3) -> Summary:
    return dataclasses.replace(s, large_p90_s=p90, large_jobs=jobs if p90 is not None else 0)


@pytest.mark.parametrize(("mine", "fifo", "ok"), [(100.0, 100.0, True), (100.01, 100.0, False),
                                                  (0.0, 0.0, True), (5.0, 0.0, False),
                                                  (0.0, 40.0, True)])
def test_large_job_waits_are_judged_against_fifos(mine: float, fifo: float, ok: bool) -> None:
    base = _large(summarize(tiny("fifo")), fifo)
    check = {c.name: c for c in targets(_large(summarize(tiny("budget")), mine), base)}[
        "large-job p90 wait vs fifo"]
    assert check.passed is ok
    assert "3 jobs of >= 16 GPUs" in check.explanation


def test_no_large_job_in_the_window_cannot_be_judged() -> None:
    base = _large(summarize(tiny("fifo")), 10.0)
    check = targets(_large(summarize(tiny("budget")), None), base)[4]
    assert not check.passed and check.explanation.startswith("cannot judge: no job of >= 16")


@pytest.mark.parametrize(("fifo", "mine", "ok"), [(0.90, 0.895, True), (0.90, 0.8949, False),
                                                  (0.97, 0.9499, False), (0.97, 0.95, True)])
def test_occupancy_may_trail_a_fifo_under_95_by_half_a_point(fifo: float, mine: float,
                                                             ok: bool) -> None:
    s = summarize(tiny("budget"))
    base = dataclasses.replace(summarize(tiny("fifo")), steady_occupancy=fifo)
    check = targets(dataclasses.replace(s, steady_occupancy=mine), base)[3]
    assert check.passed is ok
    if fifo < 0.95:
        assert "fifo's 90.0%, under 95% itself, less half a point" in check.explanation


@pytest.mark.parametrize(("loss", "ok"), [(0.02, True), (0.0201, False), (0.0, True)])
def test_preemption_loss_boundary(loss: float, ok: bool) -> None:
    assert _passed(dataclasses.replace(summarize(tiny()), loss_frac=loss), "preemption loss") is ok


def test_fifo_is_not_judged_against_itself() -> None:
    fifo = dataclasses.replace(summarize(tiny("fifo")), steady_occupancy=0.9)
    checks = targets(fifo, fifo)
    assert not checks[3].passed and "95.0%" in checks[3].explanation
    assert checks[4].passed and "baseline" in checks[4].explanation


def test_the_baseline_is_fifos_summary() -> None:
    s = summarize(tiny("budget"))
    fifo = summarize(tiny("fifo"))
    assert baseline_of([s, fifo]) is fifo
    assert baseline_of([s]) is None


@pytest.mark.parametrize(("seconds", "text"), [(31, "31 s"), (89.4, "89 s"), (150, "2.5 min"),
                                               (1800, "30 min"), (5400, "1.5 h"),
                                               (521675, "6.0 days"), (None, "-"),
                                               (math.inf, "never")])
def test_durations_read_in_human_units(seconds: float | None, text: str) -> None:
    assert human_duration(seconds) == text


def test_idle_gpus_while_jobs_wait_are_counted_after_the_warm_up() -> None:
    s = summarize(tiny())
    r = tiny()
    warm = intervals(r.samples, s.warmup_s, 1000)
    idle = sum(x.free_gpus * d for x, d in warm if any(x.pending_gpus.values()))
    assert idle > 0  # the tiny run has free GPUs while a job waits
    assert s.idle_waiting_gpu_h == pytest.approx(idle / 3600)
    assert s.idle_waiting_frac == pytest.approx(idle / (8 * sum(d for _, d in warm)))


def test_teams_left_out_of_the_judged_set_are_flagged_below_95_percent() -> None:
    s = summarize(tiny())
    ai2 = {"a": Ai2Team("a", 100.0, 50.0, 50.0, 40.0, 50.0, False, 40.0),
           "b": Ai2Team("b", 100.0, 200.0, 100.0, 99.0, 200.0, True, 99.0),
           "c": Ai2Team("c", 100.0, 10.0, 10.0, 10.0, 10.0, False, 10.0)}
    flagged = flagged_teams(dataclasses.replace(s, ai2=ai2, offered_load=2.0))
    assert [f.team for f in flagged] == ["a"]  # b is judged; c got all it was owed
    assert flagged[0].ratio == pytest.approx(0.8)
    assert flagged[0].why == ("not judged: its jobs asked for 50 GPU-hours in the judged "
                              "window, under the 100 its share entitles it to")
