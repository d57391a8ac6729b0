"""Fair share: the window, owed (water-filling, capped at demand), Fair Tree ranks, bands."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import Config, FairshareConfig, load_config
from slurm_ml.model import BudgetProgram, BudgetProject, BudgetTree
from slurm_ml.policy.fairshare import (
    SITE_FACTOR_LIMIT,
    FairShare,
    Footprint,
    PendingJob,
    band,
    capacity_billing_gpus,
    fair_share,
    job_site_factor,
    site_factors,
)
from slurm_ml.policy.fairshare.owed import water_fill
from slurm_ml.policy.fairshare.standing import entitlement_first

REPO = Path(__file__).resolve().parents[2]
BASE = load_config(DEFAULT_CONFIG)
NOW = 1_800_000_000
H = 3600
FS = FairshareConfig()  # max 100000, step 1000, nice_range 500

# --------------------------------------------------------------------------- helpers

Spec = dict[str, tuple[float, dict[str, tuple[float, tuple[str, ...]]]]]


def tree(spec: Spec, org: str = "ml") -> BudgetTree:
    """{program: (weight, {project: (weight, users)})} -> BudgetTree."""
    return BudgetTree(org, tuple(
        BudgetProgram(prog, w, tuple(BudgetProject(proj, pw, users)
                                     for proj, (pw, users) in projects.items()))
        for prog, (w, projects) in spec.items()))


def config(spec: Spec, window_h: float = 10.0, bucket_s: float = 3600.0) -> Config:
    fs = FairshareConfig(window_hours=window_h, owed_bucket_s=bucket_s)
    return dataclasses.replace(BASE, budgets=tree(spec),
                               policy=dataclasses.replace(BASE.policy, fairshare=fs))


ONE = config({"p": (1, {"a": (1, ("u",))})})
TWO = config({"p": (1, {"a": (1, ("u",)), "b": (1, ("v",))})}, window_h=4)
# The shipped example's shape: 60/40 programs, projects weighted inside them.
SIXTY_FORTY: Spec = {
    "nlp": (60, {"pre": (40, ("alice", "bob")), "eval": (20, ("carol",))}),
    "vision": (40, {"det": (40, ("dave", "alice")), "seg": (10, ("erin",))}),
}

_ids = iter(range(1, 1_000_000))


def fp(account: str, user: str, gpus: float, *, pend: float | None = None,
       run: float | None = None, until: float | None = None, alloc: bool = True) -> Footprint:
    """A footprint with times in hours relative to NOW (negative = in the past)."""
    def at(hours: float | None) -> int | None:
        return None if hours is None else NOW + round(hours * H)
    return Footprint(next(_ids), account, user, gpus, alloc, at(pend), at(run), at(until))


def ran(account: str, user: str, gpu_hours: float, alloc: bool = True) -> Footprint:
    """gpu_hours of usage: one GPU from gpu_hours ago until now (window >= that)."""
    return fp(account, user, 1, pend=-gpu_hours, run=-gpu_hours, alloc=alloc)


def pending_job(account: str, user: str, nice: int = 0, qos: str = "alloc") -> PendingJob:
    return PendingJob(next(_ids), account, user, qos, nice)


def users_in_rank_order(fs: FairShare) -> list[list[str]]:
    return [[f"{a}/{u}" for a, u in group] for group in fs.fair_tree_order]


# --------------------------------------------------------------------------- the window

WINDOW = [
    # (id, footprint, delivered, unallocated, demand, pending_gpus) in a 10 h window
    ("inside", fp("a", "u", 4, pend=-3, run=-2, until=-1), 4, 0, 8, 0),
    ("straddles-window-start", fp("a", "u", 2, pend=-14, run=-12, until=-8), 4, 0, 4, 0),
    ("still-running", fp("a", "u", 3, pend=-3, run=-3), 9, 0, 9, 0),
    ("running-since-before-window", fp("a", "u", 1, pend=-30, run=-20), 10, 0, 10, 0),
    ("ended-before-window", fp("a", "u", 8, pend=-20, run=-20, until=-15), 0, 0, 0, 0),
    ("end-in-the-future-counts-to-now", fp("a", "u", 1, pend=-1, run=-1, until=2), 1, 0, 1, 0),
    ("pending-now", fp("a", "u", 2, pend=-5), 0, 0, 10, 2),
    ("pending-unknown-since", fp("a", "u", 2), 0, 0, 0, 2),
    ("pended-then-cancelled", fp("a", "u", 2, pend=-5, until=-4), 0, 0, 2, 0),
    ("started-unknown-pend", fp("a", "u", 2, run=-2), 4, 0, 4, 0),
    ("free-work-is-not-charged", fp("a", "u", 4, pend=-3, run=-2, until=-1, alloc=False),
     0, 4, 0, 0),
    ("free-pending-counts-as-pending-gpus", fp("a", "u", 4, pend=-3, alloc=False), 0, 0, 0, 4),
    ("zero-gpus-ignored", fp("a", "u", 0, pend=-3, run=-2), 0, 0, 0, 0),
]


@pytest.mark.parametrize(("footprint", "delivered", "free", "demand", "pending"),
                         [c[1:] for c in WINDOW], ids=[c[0] for c in WINDOW])
def test_usage_counts_only_the_part_inside_the_window(
        footprint: Footprint, delivered: float, free: float, demand: float,
        pending: float) -> None:
    fs = fair_share(ONE, [footprint], NOW, capacity=100)
    assert fs.window_start == NOW - 10 * H and fs.window_end == NOW
    for path in [("ml",), ("ml", "p"), ("ml", "p", "a"), ("ml", "p", "a", "u")]:
        s = fs.node(path)
        assert s is not None
        assert (s.delivered, s.unallocated, s.demand, s.pending_gpus) == pytest.approx(
            (delivered, free, demand, pending)), path


def test_free_work_neither_charges_nor_ranks_nor_is_owed() -> None:
    cfg = config({"p": (1, {"a": (1, ("u", "v"))})})
    fs = fair_share(cfg, [ran("a", "u", 5, alloc=False), ran("a", "v", 1)], NOW,
                    {("a", "u"), ("a", "v")}, capacity=10)
    u, v = fs.association("a", "u"), fs.association("a", "v")
    assert u is not None and v is not None
    assert (u.delivered, u.unallocated, u.owed, u.level_fs) == (0, 5, 0, math.inf)
    assert u.rank == 1 and v.rank == 2  # free usage does not push u down


def test_unknown_association_is_reported_not_charged() -> None:
    fs = fair_share(ONE, [ran("a", "stranger", 3), ran("nope", "u", 2),
                          ran("nope", "u", 9, alloc=False)], NOW, capacity=100)
    assert fs.unmatched == pytest.approx(5)
    assert fs.standings[0].delivered == 0 and fs.standings[0].owed == 0


# --------------------------------------------------------------------------- owed

OWED = [
    # (id, footprints, capacity, {project: owed}) in TWO: projects a, b (equal), 4 h window
    ("uncontended-owed-is-demand",
     [fp("a", "u", 3, pend=-4), fp("b", "v", 2, pend=-2)], 10, {"a": 12, "b": 4}),
    ("half-a-bucket-is-half-the-demand",
     [fp("a", "u", 4, pend=-0.5)], 10, {"a": 2, "b": 0}),
    # hour 1: b asks 2 -> a 8 | hour 2: b asks 8 -> 5/5 | hours 3, 4: b asks 0 -> a 10
    ("capped-bucket-by-bucket",
     [fp("a", "u", 20, pend=-4), fp("b", "v", 2, pend=-4, until=-3),
      fp("b", "v", 8, pend=-3, until=-2)], 10, {"a": 33, "b": 7}),
    ("both-over-demand-split-evenly",
     [fp("a", "u", 50, pend=-4), fp("b", "v", 50, pend=-4)], 10, {"a": 20, "b": 20}),
    ("running-counts-as-demand",
     [fp("a", "u", 6, pend=-4, run=-4), fp("b", "v", 6, pend=-4)], 10, {"a": 20, "b": 20}),
    ("free-jobs-are-not-demand",
     [fp("a", "u", 50, pend=-4, alloc=False), fp("b", "v", 4, pend=-4)], 10,
     {"a": 0, "b": 16}),
    ("unused-capacity-is-owed-to-no-one", [fp("a", "u", 1, pend=-1)], 10, {"a": 1, "b": 0}),
]


@pytest.mark.parametrize(("footprints", "capacity", "want"), [c[1:] for c in OWED],
                         ids=[c[0] for c in OWED])
def test_owed_is_entitlement_capped_at_demand_bucket_by_bucket(
        footprints: list[Footprint], capacity: float, want: dict[str, float]) -> None:
    fs = fair_share(TWO, footprints, NOW, capacity=capacity)
    for account, owed in want.items():
        s = fs.account(account)
        assert s is not None and s.owed == pytest.approx(owed), account
    assert fs.standings[0].owed == pytest.approx(sum(want.values()))
    assert all(s.owed <= s.demand + 1e-9 for s in fs.standings)


def test_a_partial_last_bucket_is_owed_for_its_length() -> None:
    cfg = config({"p": (1, {"a": (1, ("u",))})}, window_h=2.5)
    fs = fair_share(cfg, [fp("a", "u", 20, pend=-3)], NOW, capacity=10)
    assert fs.standings[0].owed == pytest.approx(25)
    assert fs.standings[0].demand == pytest.approx(50)


def test_bucket_size_decides_the_cap() -> None:
    # b asks 10 GPUs for 30 min of a 10-GPU cluster next to a's steady 20. Half-hour buckets:
    # b is capped at its share (5 GPUs) for that half hour, 2.5 GPU-h. One-hour buckets: its
    # demand averages 5 GPUs over the hour, within its share, so it is owed all 5 GPU-h.
    jobs = [fp("a", "u", 20, pend=-1), fp("b", "v", 10, pend=-1, until=-0.5)]
    half = fair_share(config({"p": (1, {"a": (1, ("u",)), "b": (1, ("v",))})}, 1, 1800),
                      jobs, NOW, capacity=10)
    hour = fair_share(config({"p": (1, {"a": (1, ("u",)), "b": (1, ("v",))})}, 1, 3600),
                      jobs, NOW, capacity=10)
    assert [s.owed for s in (half.account("b"), hour.account("b")) if s] == pytest.approx(
        [2.5, 5.0])


FILL = [
    # (id, cap, demands, weights, entitlements): one bucket
    ("all-fit", 10, [3, 4], [1, 1], [3, 4]),
    ("sibling-without-demand-gives-its-share", 10, [0, 20], [1, 1], [0, 10]),
    ("three-siblings-one-capped", 12, [2, 20, 20], [1, 1, 1], [2, 5, 5]),
    ("weighted-one-capped-rest-in-proportion", 10, [20, 20, 0.5], [6, 3, 1],
     [9.5 * 6 / 9, 9.5 * 3 / 9, 0.5]),
    ("weighted-none-capped", 9, [100, 100], [2, 1], [6, 3]),
    ("capped-in-turn", 10, [1, 2, 100], [1, 1, 1], [1, 2, 7]),
    ("zero-capacity", 0, [5, 5], [1, 2], [0, 0]),
]


@pytest.mark.parametrize(("cap", "demands", "weights", "want"), [c[1:] for c in FILL],
                         ids=[c[0] for c in FILL])
def test_water_filling_reflows_surplus_to_uncapped_siblings(
        cap: float, demands: list[float], weights: list[float], want: list[float]) -> None:
    got = water_fill([cap], [[d] for d in demands], weights)
    assert [row[0] for row in got] == pytest.approx(want)


def _reference_fill(cap: float, demands: list[float], weights: list[float]) -> list[float]:
    """The textbook iteration: share by weight, cap, re-share what is left over."""
    got = [0.0] * len(demands)
    open_ = set(range(len(demands)))
    left = cap
    while open_ and left > 1e-12:
        total = sum(weights[i] for i in open_)
        give = {i: left * weights[i] / total for i in open_}
        left = 0.0
        for i, g in give.items():
            take = min(g, demands[i] - got[i])
            got[i] += take
            left += g - take
        open_ = {i for i in open_ if got[i] < demands[i] - 1e-12}
    return got


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0.1, 10)), min_size=1, max_size=8),
       st.floats(0, 300))
def test_water_filling_matches_the_textbook_iteration(
        kids: list[tuple[float, float]], cap: float) -> None:
    demands, weights = [d for d, _ in kids], [w for _, w in kids]
    got = [row[0] for row in water_fill([cap], [[d] for d in demands], weights)]
    assert got == pytest.approx(_reference_fill(cap, demands, weights), abs=1e-6)
    assert sum(got) == pytest.approx(min(cap, sum(demands)), abs=1e-6)
    assert all(g <= d + 1e-9 for g, d in zip(got, demands, strict=True))


# --------------------------------------------------------------------------- the tree

SHARES = [
    (("ml",), 1.0, 1.0),
    (("ml", "nlp"), 0.6, 0.6),
    (("ml", "nlp", "pre"), 0.4, 40 / 60),
    (("ml", "nlp", "pre", "alice"), 0.2, 0.5),
    (("ml", "nlp", "eval"), 0.2, 20 / 60),
    (("ml", "nlp", "eval", "carol"), 0.2, 1.0),
    (("ml", "vision"), 0.4, 0.4),
    (("ml", "vision", "det"), 0.32, 0.8),
    (("ml", "vision", "det", "alice"), 0.16, 0.5),
    (("ml", "vision", "seg"), 0.08, 0.2),
]


@pytest.mark.parametrize(("path", "budget", "level"), SHARES, ids=["/".join(c[0]) for c in SHARES])
def test_budget_share_is_the_product_of_sibling_shares(
        path: tuple[str, ...], budget: float, level: float) -> None:
    fs = fair_share(config(SIXTY_FORTY), [], NOW, capacity=100)
    s = fs.node(path)
    assert s is not None and (s.budget_share, s.level_share) == pytest.approx((budget, level))


def test_standings_are_depth_first_in_config_order() -> None:
    fs = fair_share(config(SIXTY_FORTY), [], NOW, capacity=100)
    assert ["/".join(s.path[1:]) or "ml" for s in fs.standings] == [
        "ml", "nlp", "nlp/pre", "nlp/pre/alice", "nlp/pre/bob", "nlp/eval", "nlp/eval/carol",
        "vision", "vision/det", "vision/det/dave", "vision/det/alice", "vision/seg",
        "vision/seg/erin"]
    assert [s.kind for s in fs.standings[:4]] == ["org", "program", "project", "user"]
    assert fs.account("det") == fs.node(("ml", "vision", "det"))
    assert fs.association("det", "alice") == fs.node(("ml", "vision", "det", "alice"))
    assert fs.association("pre", "erin") is None and fs.account("alice") is None


HIER = [
    # (id, projects demanding 1000 GPUs for the whole 1 h window, {project: owed})
    ("all-demand-owed-is-budget-share", ("pre", "eval", "det", "seg"),
     {"pre": 40, "eval": 20, "det": 32, "seg": 8}),
    ("idle-program-reflows-to-the-other", ("pre", "eval"),
     {"pre": 200 / 3, "eval": 100 / 3, "det": 0, "seg": 0}),
    ("idle-project-reflows-inside-its-program", ("pre", "eval", "det"),
     {"pre": 40, "eval": 20, "det": 40, "seg": 0}),
    ("one-project-takes-all", ("seg",), {"pre": 0, "eval": 0, "det": 0, "seg": 100}),
]


@pytest.mark.parametrize(("busy", "want"), [c[1:] for c in HIER], ids=[c[0] for c in HIER])
def test_hierarchical_owed_follows_budgets_and_reflows(
        busy: tuple[str, ...], want: dict[str, float]) -> None:
    cfg = config(SIXTY_FORTY, window_h=1)
    first_user = {"pre": "alice", "eval": "carol", "det": "dave", "seg": "erin"}
    fs = fair_share(cfg, [fp(p, first_user[p], 1000, pend=-1) for p in busy], NOW,
                    capacity=100)
    for project, owed in want.items():
        s = fs.account(project)
        assert s is not None and s.owed == pytest.approx(owed), project
    # A project's owed goes to its users that asked; the idle user (bob) is owed nothing.
    bob = fs.association("pre", "bob")
    assert bob is not None and bob.owed == 0


def test_users_of_a_project_share_it_equally() -> None:
    cfg = config({"p": (1, {"a": (1, ("u", "v", "w"))})}, window_h=1)
    fs = fair_share(cfg, [fp("a", "u", 1, pend=-1), fp("a", "v", 50, pend=-1),
                          fp("a", "w", 50, pend=-1)], NOW, capacity=9)
    assert [s.owed for s in fs.standings[3:]] == pytest.approx([1, 4, 4])


def test_capacity_is_billing_weighted() -> None:
    # gpu[01-02] 8 x 1.0, gpu[03-04] 8 x 0.8, gpu[05-06] 4 x 0.4
    assert capacity_billing_gpus(BASE) == pytest.approx(16 + 12.8 + 3.2)
    assert fair_share(BASE, [], NOW).capacity == pytest.approx(32)


# --------------------------------------------------------------------------- ranking


def test_level_fs_is_share_over_usage_share() -> None:
    fs = fair_share(config(SIXTY_FORTY, window_h=100),
                    [ran("pre", "alice", 30), ran("eval", "carol", 10), ran("det", "dave", 60)],
                    NOW, capacity=1000)
    lfs = {"/".join(s.path[1:]): s.level_fs for s in fs.standings}
    assert lfs["nlp"] == pytest.approx(0.6 / 0.4)
    assert lfs["vision"] == pytest.approx(0.4 / 0.6)
    assert lfs["nlp/pre"] == pytest.approx((40 / 60) / 0.75)
    assert lfs["nlp/pre/alice"] == pytest.approx(0.5)
    assert lfs["nlp/pre/bob"] == math.inf and lfs["vision/seg"] == math.inf
    assert lfs[""] == 1.0


RANKING = [
    # (id, spec, usage {(account, user): GPU-hours}, expected tie groups best first)
    ("under-served-program-first",
     {"A": (70, {"a": (1, ("u",))}), "B": (30, {"b": (1, ("v",))})},
     {("a", "u"): 90, ("b", "v"): 10},
     [["b/v"], ["a/u"]]),
    ("every-user-under-A-outranks-every-user-under-B",
     # A is under-served overall, though its heavy user's own LF is tiny and B has an idle
     # user whose LF is infinite: the tree still puts all of A first.
     {"A": (50, {"a": (1, ("heavy", "light"))}), "B": (50, {"b": (1, ("idle", "busy"))})},
     {("a", "heavy"): 39, ("a", "light"): 1, ("b", "busy"): 60},
     [["a/light"], ["a/heavy"], ["b/idle"], ["b/busy"]]),
    ("unused-siblings-tie-and-share-a-rank",
     {"A": (1, {"a": (1, ("u", "v", "w"))})},
     {("a", "w"): 5},
     [["a/u", "a/v"], ["a/w"]]),
    ("equal-usage-equal-shares-tie",
     {"A": (1, {"a": (1, ("u", "v"))})},
     {("a", "u"): 5, ("a", "v"): 5},
     [["a/u", "a/v"]]),
    ("equal-ratio-from-different-numbers-tie",
     {"A": (2, {"a": (1, ("u",))}), "B": (1, {"b": (1, ("v",))})},
     {("a", "u"): 2, ("b", "v"): 1},
     [["a/u", "b/v"]]),
    ("tied-accounts-merge-their-children",
     # P and Q tie (equal weight, equal usage). Merged, their projects sort together by
     # their own LF: p1 (2.0), q1 = q2 (1.0, tied: merged again), p2 (0.67).
     {"P": (1, {"p1": (1, ("a",)), "p2": (1, ("b",))}),
      "Q": (1, {"q1": (1, ("c",)), "q2": (1, ("d",))})},
     {("p1", "a"): 10, ("p2", "b"): 30, ("q1", "c"): 20, ("q2", "d"): 20},
     [["p1/a"], ["q1/c", "q2/d"], ["p2/b"]]),
    ("no-usage-anywhere-everyone-ties",
     {"A": (3, {"a": (1, ("u",))}), "B": (1, {"b": (1, ("v", "w"))})}, {},
     [["a/u", "b/v", "b/w"]]),
]


@pytest.mark.parametrize(("spec", "usage", "want"), [c[1:] for c in RANKING],
                         ids=[c[0] for c in RANKING])
def test_fair_tree_order(spec: Spec, usage: dict[tuple[str, str], float],
                         want: list[list[str]]) -> None:
    fs = fair_share(config(spec, window_h=100),
                    [ran(a, u, h) for (a, u), h in usage.items()], NOW, capacity=1000)
    assert users_in_rank_order(fs) == want


COMPRESS = [
    # (id, pending associations, expected ranks) on the every-user-under-A tree above
    ("all-pending", ["a/heavy", "a/light", "b/idle", "b/busy"],
     {"a/light": 1, "a/heavy": 2, "b/idle": 3, "b/busy": 4}),
    ("gaps-close-up", ["a/heavy", "b/busy"], {"a/heavy": 1, "b/busy": 2}),
    ("one", ["b/idle"], {"b/idle": 1}),
    ("unknown-associations-are-not-ranked", ["a/light", "zz/top", "a/busy"], {"a/light": 1}),
    ("none", [], {}),
]


@pytest.mark.parametrize(("pending", "want"), [c[1:] for c in COMPRESS],
                         ids=[c[0] for c in COMPRESS])
def test_ranks_are_compressed_to_associations_with_pending_jobs(
        pending: list[str], want: dict[str, int]) -> None:
    spec, usage = RANKING[1][1], RANKING[1][2]
    assocs = [(a, u) for a, u in (p.split("/") for p in pending)]
    fs = fair_share(config(spec, window_h=100), [ran(a, u, h) for (a, u), h in usage.items()],
                    NOW, assocs, capacity=1000)
    got = {f"{s.account}/{s.user}": s.rank for s in fs.standings if s.rank is not None}
    assert got == want
    assert fs.ranks == len(want)
    # The same ranks come out of site_factors for the same pending set.
    jobs = [pending_job(a, u) for a, u in assocs]
    values = site_factors(fs, jobs, FS)
    for job in jobs:
        rank = want.get(f"{job.account}/{job.user}")
        assert values[job.job_id] == (0 if rank is None else band(rank, len(want), FS))


def test_parents_carry_their_best_users_band() -> None:
    spec, usage = RANKING[1][1], RANKING[1][2]
    fs = fair_share(config(spec, window_h=100), [ran(a, u, h) for (a, u), h in usage.items()],
                    NOW, [("a", "heavy"), ("b", "busy")], capacity=1000)
    sf = {"/".join(s.path[1:]): s.site_factor for s in fs.standings}
    assert sf == {"": 100_000, "A": 100_000, "A/a": 100_000, "A/a/heavy": 100_000,
                  "A/a/light": None, "B": 99_000, "B/b": 99_000, "B/b/idle": None,
                  "B/b/busy": 99_000}


# --------------------------------------------------------------------------- SiteFactor

BANDS = [
    # (id, rank, ranks, cfg, band)
    ("first", 1, 3, FS, 100_000),
    ("third", 3, 3, FS, 98_000),
    ("many-ranks-raise-the-top", 1, 250, FS, 250_000),
    ("last-of-many-keeps-one-step", 250, 250, FS, 1_000),
    ("small-step", 2, 2, FairshareConfig(site_factor_max=10, site_factor_step=3), 7),
]


@pytest.mark.parametrize(("rank", "ranks", "cfg", "want"), [c[1:] for c in BANDS],
                         ids=[c[0] for c in BANDS])
def test_band(rank: int, ranks: int, cfg: FairshareConfig, want: int) -> None:
    assert band(rank, ranks, cfg) == want


NICE = [
    # (id, band, nice, cfg, site factor): Slurm then subtracts nice itself
    ("no-nice", 50_000, 0, FS, 50_000),
    ("nice-inside-range-nets-band-minus-nice", 50_000, 100, FS, 50_000),
    ("nice-beyond-range-stops-at-the-range", 50_000, 2_000, FS, 51_500),
    ("admin-negative-nice-is-a-boost", 50_000, -300, FS, 50_000),
    ("range-never-reaches-the-next-band",
     5_000, 5_000, FairshareConfig(nice_range=5_000), 5_000 - 999 + 5_000),
    ("step-one-nice-cannot-reorder", 7, 40, FairshareConfig(site_factor_step=1), 47),
    ("clamped-to-scontrol-limit", 100_000, SITE_FACTOR_LIMIT, FS, SITE_FACTOR_LIMIT),
]


@pytest.mark.parametrize(("band_value", "nice", "cfg", "want"), [c[1:] for c in NICE],
                         ids=[c[0] for c in NICE])
def test_job_site_factor_keeps_nice_inside_the_band(
        band_value: int, nice: int, cfg: FairshareConfig, want: int) -> None:
    assert job_site_factor(band_value, nice, cfg) == want


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.tuples(st.integers(1, 50), st.integers(0, 10**6)),
       st.tuples(st.integers(1, 50), st.integers(0, 10**6)),
       st.integers(1, 5_000), st.integers(0, 10_000), st.integers(0, 100))
def test_nice_reorders_inside_a_band_and_never_across(
        job1: tuple[int, int], job2: tuple[int, int], step: int, nice_range: int,
        more_ranks: int) -> None:
    (r1, nice1), (r2, nice2) = job1, job2
    cfg = FairshareConfig(site_factor_step=step, nice_range=nice_range)
    ranks = max(r1, r2) + more_ranks

    def net(rank: int, nice: int) -> int:  # what the SiteFactor contributes after -nice
        return job_site_factor(band(rank, ranks, cfg), nice, cfg) - nice

    if r1 < r2:
        assert net(r1, nice1) > net(r2, nice2)
    elif r1 == r2 and nice1 <= nice2:
        assert net(r1, nice1) >= net(r2, nice2)
    assert net(r1, nice1) >= 1  # the last band stays positive


def test_site_factors_for_pending_jobs() -> None:
    cfg = config({"A": (70, {"a": (1, ("u",))}), "B": (30, {"b": (1, ("v", "w"))})},
                 window_h=100)
    fs = fair_share(cfg, [ran("a", "u", 90), ran("b", "v", 10)], NOW, capacity=1000)
    jobs = {
        "b/w": pending_job("b", "w"),  # B under-served; w unused: first
        "b/v": pending_job("b", "v"),
        "b/v-nice": pending_job("b", "v", nice=300),
        "b/v-free": pending_job("b", "v", qos="free"),
        "a/u": pending_job("a", "u"),
        "a/u-admin-boost": pending_job("a", "u", nice=-10_000),
        "unknown-account": pending_job("zz", "u"),
        "unknown-user": pending_job("a", "v"),
    }
    values = site_factors(fs, jobs.values(), FS)
    assert {k: values[j.job_id] for k, j in jobs.items()} == {
        "b/w": 100_000, "b/v": 99_000, "b/v-nice": 99_000, "b/v-free": 99_000,
        "a/u": 98_000, "a/u-admin-boost": 98_000, "unknown-account": 0, "unknown-user": 0}


def test_ratio_is_delivered_over_owed() -> None:
    fs = fair_share(TWO, [fp("a", "u", 4, pend=-4, run=-2)], NOW, capacity=10)
    a, b = fs.account("a"), fs.account("b")
    assert a is not None and a.ratio == pytest.approx(8 / 16)
    assert b is not None and b.ratio is None


# --------------------------------------------------------------------------- entitlement


def test_running_gpus_are_the_alloc_work_running_now() -> None:
    fs = fair_share(TWO, [fp("a", "u", 4, pend=-3, run=-2),  # running
                          fp("a", "u", 2, pend=-3, run=-2, until=-1),  # ended
                          fp("a", "u", 8, pend=-1, run=-1, alloc=False),  # free work
                          fp("b", "v", 3, pend=-1),  # pending
                          fp("b", "v", 1, pend=0, run=0)], NOW)  # started this second
    a, b = fs.account("a"), fs.account("b")
    assert a is not None and b is not None
    assert (a.running_gpus, b.running_gpus) == (4, 1)
    cap = capacity_billing_gpus(TWO)
    assert (a.entitled_gpus, b.entitled_gpus) == (cap / 2, cap / 2)


def test_projects_below_their_entitlement_rank_first() -> None:
    """a ran less over the window (Fair Tree puts it first) but runs its whole share now;
    b ran more but runs nothing now: with reclaim_entitlement b goes first, without it a."""
    cap = capacity_billing_gpus(TWO)
    fps = [fp("a", "u", cap / 2, pend=-1, run=-1),  # a: its share, for the last hour
           fp("b", "v", cap, pend=-4, run=-4, until=-1),  # b: the whole cluster before
           fp("a", "u", 1, pend=-1), fp("b", "v", 1, pend=-1)]  # both wait
    pending = {("a", "u"), ("b", "v")}
    window = dataclasses.replace(TWO, policy=dataclasses.replace(
        TWO.policy, contracts=dataclasses.replace(TWO.policy.contracts,
                                                  reclaim_entitlement=False)))

    assert users_in_rank_order(fair_share(window, fps, NOW, pending)) == [["a/u"], ["b/v"]]
    fs = fair_share(TWO, fps, NOW, pending)
    assert fs.entitlement_first == {"b"}
    assert users_in_rank_order(fs) == [["b/v"], ["a/u"]]
    ja, jb = pending_job("a", "u"), pending_job("b", "v")
    factors = site_factors(fs, [ja, jb], FS)
    assert factors[jb.job_id] > factors[ja.job_id]


def test_entitlement_first_keeps_fair_tree_order_and_ties_inside_each_part() -> None:
    order = ((("a", "1"), ("b", "1")), (("c", "1"),), (("b", "2"), ("d", "1")))
    assert entitlement_first(order, {"b", "d"}) == (
        (("b", "1"),), (("b", "2"), ("d", "1")), (("a", "1"),), (("c", "1"),))
    assert entitlement_first(order, set()) == order
