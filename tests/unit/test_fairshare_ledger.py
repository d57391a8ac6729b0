"""The footprint ledger (running sums) gives the same fair share as the plain footprint walk."""

from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path

import pytest

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import Config, FairshareConfig, load_config
from slurm_ml.model import BudgetProgram, BudgetProject, BudgetTree
from slurm_ml.policy.fairshare import FairShare, Footprint, FootprintLedger, fair_share

REPO = Path(__file__).resolve().parents[2]
BASE = load_config(DEFAULT_CONFIG)
NOW = 1_800_000_000
H = 3600

TREE = BudgetTree("ml", (
    BudgetProgram("nlp", 60, (BudgetProject("pre", 40, ("alice", "bob")),
                              BudgetProject("eval", 20, ("carol",)))),
    BudgetProgram("vision", 40, (BudgetProject("det", 40, ("dave", "alice")),
                                 BudgetProject("seg", 10, ("erin",)))),
))
ASSOCS = [("pre", "alice"), ("pre", "bob"), ("eval", "carol"), ("det", "dave"),
          ("det", "alice"), ("seg", "erin"), ("ghost", "zed")]  # the last is outside the tree


def config(window_h: float, bucket_s: float) -> Config:
    fs = FairshareConfig(window_hours=window_h, owed_bucket_s=bucket_s)
    return dataclasses.replace(BASE, budgets=TREE,
                               policy=dataclasses.replace(BASE.policy, fairshare=fs))


def random_footprint(rnd: random.Random, job_id: int, now: int, span: int) -> Footprint:
    account, user = rnd.choice(ASSOCS)
    pend = now - rnd.randrange(span) if rnd.random() > 0.05 else None
    base = pend if pend is not None else now - rnd.randrange(span)
    run = base + rnd.randrange(3 * H) if rnd.random() > 0.3 else None
    if run is not None and run > now + H:
        run = None
    until: int | None = None
    if run is not None and rnd.random() > 0.4:
        until = run + rnd.randrange(-H, 6 * H)  # sometimes before the start: no usage
    elif run is None and rnd.random() > 0.8:
        until = base + rnd.randrange(2 * H)  # cancelled while pending
    gpus = rnd.choice([0.0, 0.4, 0.8, 1.0, 3.2, 8.0, 16.0])
    return Footprint(job_id, account, user, gpus, rnd.random() > 0.2, pend, run, until)


def assert_same(got: FairShare, want: FairShare) -> None:
    assert got.window_start == want.window_start and got.window_end == want.window_end
    assert got.fair_tree_order == want.fair_tree_order
    assert got.ranks == want.ranks
    assert got.entitlement_first == want.entitlement_first
    assert got.unmatched == pytest.approx(want.unmatched, rel=1e-9, abs=1e-9)
    for g, w in zip(got.standings, want.standings, strict=True):
        assert g.path == w.path
        assert (g.rank, g.site_factor) == (w.rank, w.site_factor)
        for name in ("delivered", "unallocated", "owed", "demand", "pending_gpus",
                     "running_gpus", "entitled_gpus"):
            a, b = getattr(g, name), getattr(w, name)
            assert a == pytest.approx(b, rel=1e-9, abs=1e-7), (g.path, name)
        assert (g.ratio is None) == (w.ratio is None), g.path
        assert g.level_fs == w.level_fs or math.isclose(g.level_fs, w.level_fs, rel_tol=1e-9)


@pytest.mark.parametrize("seed", range(12))
def test_ledger_equals_the_footprint_walk_on_random_footprints(seed: int) -> None:
    rnd = random.Random(seed)
    cfg = config(window_h=rnd.choice([4.0, 10.0, 168.0]), bucket_s=rnd.choice([600.0, 3600.0,
                                                                                 1000.0]))
    span = int(cfg.policy.fairshare.window_hours * H * 1.5)
    fps = [random_footprint(rnd, i, NOW, span) for i in range(rnd.randrange(1, 300))]
    ledger = FootprintLedger()
    for fp in fps:
        ledger.add(fp)
    assert sorted(ledger, key=id) == sorted(fps, key=id)
    pending = {(f.account, f.user) for f in fps if f.run_from is None and f.until is None}
    for now in (NOW, NOW + 1234, NOW + 7 * H):
        assert_same(fair_share(cfg, ledger, now, pending), fair_share(cfg, fps, now, pending))


@pytest.mark.parametrize("seed", range(8))
def test_ledger_follows_jobs_through_their_lives(seed: int) -> None:
    """Jobs arrive, start, end, are requeued, are corrected in the past; the window slides
    and old footprints are pruned: every cycle the ledger agrees with the plain walk."""
    rnd = random.Random(100 + seed)
    cfg = config(window_h=10.0, bucket_s=3600.0 if seed < 4 else 1700.0)  # 1700: a part bucket
    window = 10 * H
    ledger = FootprintLedger()
    live: dict[int, Footprint] = {}
    closed: list[Footprint] = []
    now = NOW
    next_id = 0
    for cycle in range(80):
        now += rnd.choice([300, 600, 3600, 301] if seed % 2 else [300, 300, 600, 3600])
        for _ in range(rnd.randrange(4)):  # arrivals
            account, user = rnd.choice(ASSOCS)
            fp = Footprint(next_id, account, user, rnd.choice([1.0, 0.4, 8.0]),
                           rnd.random() > 0.2, now, None, None)
            live[next_id] = fp
            next_id += 1
            ledger.add(fp)
        for job_id, fp in list(live.items()):
            roll = rnd.random()
            if fp.run_from is None and roll < 0.3:  # starts
                new = dataclasses.replace(fp, run_from=now)
            elif fp.run_from is not None and roll < 0.2:  # ends
                new = dataclasses.replace(fp, until=now)
            elif fp.run_from is not None and roll < 0.25:  # requeued: a new pending segment
                done = dataclasses.replace(fp, until=now)
                ledger.replace(fp, done)
                closed.append(done)
                new = Footprint(job_id, fp.account, fp.user, fp.billing_gpus, fp.allocated,
                                now, None, None)
                live[job_id] = new
                ledger.add(new)
                continue
            else:
                continue
            ledger.replace(fp, new)
            if new.until is None:
                live[job_id] = new
            else:
                del live[job_id]
                closed.append(new)
        if closed and rnd.random() < 0.2:  # slurmdbd corrects an old record
            i = rnd.randrange(len(closed))
            old = closed[i]
            assert old.until is not None
            fixed = dataclasses.replace(old, until=old.until + rnd.randrange(-300, 300))
            ledger.replace(old, fixed)
            closed[i] = fixed
        if cycle % 10 == 9:
            floor = now - window - 2 * H
            ledger.prune(floor)
            closed = [f for f in closed if f.until is None or f.until > floor]
        every = [*closed, *live.values()]
        assert len(ledger) == len(every)
        pending = {(f.account, f.user) for f in live.values() if f.run_from is None}
        assert_same(fair_share(cfg, ledger, now, pending), fair_share(cfg, every, now, pending))


def test_a_window_before_the_pruned_floor_is_refused() -> None:
    ledger = FootprintLedger()
    ledger.add(Footprint(1, "pre", "alice", 1.0, True, NOW - 5 * H, NOW - 4 * H, NOW - H))
    ledger.prune(NOW - 2 * H)
    assert len(ledger) == 1  # ended after the floor: kept
    cfg = config(window_h=10.0, bucket_s=3600.0)
    with pytest.raises(ValueError, match="before the ledger was pruned"):
        fair_share(cfg, ledger, NOW)
    fs = fair_share(cfg, ledger, NOW + 8 * H)
    pre = fs.account("pre")
    assert pre is not None and pre.delivered == pytest.approx(1.0)  # [NOW-2h, NOW-1h)
