"""``OwedColumns`` (an earlier window's buckets reused) gives the same (owed, demand) as
``owed`` filling every bucket, to the bit, as windows slide, change and change shape."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_ml.model import BudgetProgram, BudgetProject, BudgetTree
from slurm_ml.policy.fairshare import owed as owed_module
from slurm_ml.policy.fairshare.owed import _KEEP_PHASES, OwedColumns, owed
from slurm_ml.policy.fairshare.tree import flatten

TREE = flatten(BudgetTree("ml", (
    BudgetProgram("nlp", 60, (BudgetProject("pre", 40, ("alice", "bob")),
                              BudgetProject("eval", 20, ("carol",)))),
    BudgetProgram("vision", 40, (BudgetProject("det", 40, ("dave", "alice")),
                                 BudgetProject("seg", 10, ("erin",)))),
)))
LEAVES = sorted(TREE.assoc_at)
SIZE = 3600.0
COUNT = 24


def _row(rnd: random.Random) -> list[float]:
    return [rnd.choice([0.0, 0.0, 1.0, 2.5, 8.0, 16.0, rnd.uniform(0, 40)])
            for _ in range(COUNT)]


def test_a_sliding_window_reuses_its_buckets_and_sums_the_same() -> None:
    rnd = random.Random(7)
    columns = OwedColumns()
    demand = {leaf: _row(rnd) for leaf in LEAVES[:4]}
    caps = [30.0] * COUNT
    start = 1_800_000_000
    for step in range(60):
        start += 300  # a 5-minute cycle: 12 bucket phases
        if step % 12 == 0:  # a whole bucket later: shift the rows, a new last bucket
            demand = {leaf: [*row[1:], rnd.uniform(0, 20)] for leaf, row in demand.items()}
        else:
            for row in demand.values():  # only the newest (partial) bucket moves
                row[-1] += rnd.uniform(0, 2)
        want = owed(TREE, demand, caps)
        got = columns.owed(TREE, demand, caps, start, SIZE)
        assert got == want  # exactly: the same floats summed in the same order
    assert len(columns) == 12


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_any_sequence_of_windows_gives_what_owed_gives(seed: int) -> None:
    """Leaves that join and leave, a change in the past, another cap, a bucket longer:
    whatever changed, the kept buckets are used only where they are the same."""
    rnd = random.Random(seed)
    columns = OwedColumns()
    start = 1_800_000_000
    demand = {leaf: _row(rnd) for leaf in rnd.sample(LEAVES, rnd.randint(1, len(LEAVES)))}
    caps = [rnd.choice([10.0, 30.0, 100.0])] * COUNT
    for _ in range(25):
        start += rnd.choice([300, 300, 3600, 7200, 60])
        move = rnd.random()
        if move < 0.2:  # a change in the past: one old bucket differs
            row = rnd.choice(list(demand.values()))
            row[rnd.randrange(COUNT)] += 1.0
        elif move < 0.35:  # another set of asking leaves
            demand = {leaf: _row(rnd)
                      for leaf in rnd.sample(LEAVES, rnd.randint(1, len(LEAVES)))}
        elif move < 0.45:
            caps = [rnd.choice([10.0, 30.0, 100.0])] * COUNT
        else:
            for row in demand.values():
                row[-1] = rnd.uniform(0, 20)
        size = SIZE if rnd.random() < 0.9 else 2 * SIZE
        assert columns.owed(TREE, demand, caps, start, size) == owed(TREE, demand, caps)


def test_another_tree_starts_afresh() -> None:
    other = flatten(BudgetTree("ml", (
        BudgetProgram("nlp", 1, (BudgetProject("pre", 1, ("alice", "bob")),)),)))
    columns = OwedColumns()
    rnd = random.Random(3)
    demand = {leaf: _row(rnd) for leaf in LEAVES[:2]}
    caps = [20.0] * COUNT
    columns.owed(TREE, demand, caps, 0, SIZE)
    leaves = sorted(other.assoc_at)
    demand2 = {leaves[0]: demand[LEAVES[0]], leaves[1]: demand[LEAVES[1]]}
    assert columns.owed(other, demand2, caps, 0, SIZE) == owed(other, demand2, caps)


def test_a_bucket_that_changed_is_filled_again() -> None:
    """Same phase, one bucket later: an old bucket changed in the past, then the cap."""
    rnd = random.Random(11)
    columns = OwedColumns()
    demand = {leaf: [rnd.uniform(5, 40) for _ in range(COUNT)] for leaf in LEAVES}
    caps = [30.0] * COUNT
    columns.owed(TREE, demand, caps, 0, SIZE)
    demand = {leaf: [*row[1:], 9.0] for leaf, row in demand.items()}
    demand[LEAVES[0]][5] += 7.0
    assert columns.owed(TREE, demand, caps, 3600, SIZE) == owed(TREE, demand, caps)
    demand = {leaf: [*row[1:], 9.0] for leaf, row in demand.items()}
    caps = [12.0] * COUNT  # the same demand a bucket later, on a smaller cluster
    assert columns.owed(TREE, demand, caps, 7200, SIZE) == owed(TREE, demand, caps)


def test_it_keeps_a_bounded_number_of_phases() -> None:
    """Woken cycles come at any second: the phases kept stay bounded."""
    columns = OwedColumns()
    demand = {LEAVES[0]: [4.0] * COUNT}
    for k in range(200):
        columns.owed(TREE, demand, [3.0] * COUNT, 1_800_000_000 + 7 * k, SIZE)
    assert len(columns) == _KEEP_PHASES


def test_a_large_tree_keeps_fewer_phases(monkeypatch: pytest.MonkeyPatch) -> None:
    """The values kept over all phases are bounded too, and the newest window is always
    kept: a tree of thousands of users must not hold 128 copies of its window."""
    monkeypatch.setattr(owed_module, "_KEEP_CELLS", 3 * (2 * len(LEAVES) + 4) * COUNT)
    columns = OwedColumns()
    demand = {leaf: [4.0] * COUNT for leaf in LEAVES}
    for k in range(10):
        got = columns.owed(TREE, demand, [3.0] * COUNT, 1_800_000_000 + 7 * k, SIZE)
        assert got == owed(TREE, demand, [3.0] * COUNT)
    assert 1 <= len(columns) <= 3
