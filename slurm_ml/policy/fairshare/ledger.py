"""Footprints kept as running sums, so that a window is tallied without visiting every job.

``fair_share`` over a plain list of footprints walks each one every cycle: fine for the
daemon once a minute, too slow for the simulator, which asks every few simulated minutes
over weeks of jobs. A :class:`FootprintLedger` holds the same footprints, but also keeps,
per association, the GPUs running (alloc and free) and the GPUs asked for (alloc
demand) as step functions of time with their running integrals. A window's usage is then
two look-ups per association, whatever the number of jobs; its demand per bucket is
reused from the last window of the same bucket phase (the window slides by whole cycles,
so closed buckets come back) and only the buckets after the last change are integrated.
``fair_share`` takes a ledger wherever it takes footprints and gives the same standings
up to float rounding (sums are taken in another order; ``test_fairshare_ledger``
compares them on random jobs).

Changes are cheap when they happen "now" (appended step points): a job arriving,
starting, ending or being requeued. A change in the past is also exact, it only costs a
recomputation of the integrals from that point on.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Protocol

from slurm_ml.policy.fairshare.owed import OwedColumns
from slurm_ml.policy.fairshare.tree import Association, FlatTree

__all__ = ["FootprintLedger", "LedgerFootprint", "Tally", "sum_up"]

_HOUR = 3600.0
#: Levels closer to zero than this are rounding residue of + and - the same billing GPUs.
_ZERO = 1e-9


class LedgerFootprint(Hashable, Protocol):
    """What the ledger needs of a footprint (``fairshare.Footprint`` has all of it)."""

    @property
    def account(self) -> str: ...
    @property
    def user(self) -> str: ...
    @property
    def billing_gpus(self) -> float: ...
    @property
    def allocated(self) -> bool: ...
    @property
    def pending_from(self) -> int | None: ...
    @property
    def run_from(self) -> int | None: ...
    @property
    def until(self) -> int | None: ...


@dataclass(slots=True)
class Tally:
    """Footprints summed per tree node (after :func:`sum_up`, parents include children)."""

    delivered: list[float]
    free: list[float]
    pending: list[float]
    asked: list[tuple[int, int, int, float]] = field(default_factory=list)  # (leaf, b, e, GPUs)
    unmatched: float = 0.0
    #: billing GPUs of alloc work running at the window's end (empty: not tallied)
    running: list[float] = field(default_factory=list)


def sum_up(tree: FlatTree, tally: Tally) -> None:
    """Children follow their parent in tree order: walk backwards, adding upwards."""
    delivered, free, pending, running = tally.delivered, tally.free, tally.pending, tally.running
    for node in range(len(tree.kinds) - 1, 0, -1):
        parent = tree.parents[node]
        delivered[parent] += delivered[node]
        free[parent] += free[node]
        pending[parent] += pending[node]
        if running:
            running[parent] += running[node]


class _Steps:
    """GPUs as a step function of time, with its integral from the first change point.

    ``deltas`` is the truth; ``levels`` (the value after each point) and ``areas`` (the
    integral up to each point) are valid below index ``clean`` and rebuilt lazily.
    ``rows`` keeps the last bucket row computed per bucket phase (``start`` modulo the
    bucket length): as the window slides by whole buckets the old buckets come back, and
    a change at ``t`` only alters buckets that end after ``t``.
    """

    __slots__ = ("areas", "clean", "deltas", "levels", "rows", "rows_top", "times")

    def __init__(self) -> None:
        self.times: list[int] = []
        self.deltas: list[float] = []
        self.levels: list[float] = []
        self.areas: list[float] = []
        self.clean = 0
        self.rows: dict[tuple[float, float], _Row] = {}  # (phase, bucket_s) -> last row
        self.rows_top = -math.inf  # the latest ``now`` of a kept row

    def add(self, at: int, delta: float) -> None:
        if at < self.rows_top:  # a change before a kept row's end: drop the rows it alters
            self.rows = {k: r for k, r in self.rows.items() if r.now <= at}
            self.rows_top = max((r.now for r in self.rows.values()), default=-math.inf)
        times = self.times
        n = len(times)
        if n and at == times[-1]:  # another change now: the last point absorbs it
            self.deltas[-1] += delta
            if self.clean == n:
                level = self.levels[-1] + delta
                self.levels[-1] = 0.0 if -_ZERO < level < _ZERO else level
            return
        if not n or at > times[-1]:  # the common case: time only moves forward
            times.append(at)
            self.deltas.append(delta)
            if self.clean == n:
                if n:
                    last = self.levels[-1]
                    level = last + delta
                    self.areas.append(self.areas[-1] + last * (at - times[-2]))
                else:
                    level = delta
                    self.areas.append(0.0)
                self.levels.append(0.0 if -_ZERO < level < _ZERO else level)
                self.clean = n + 1
            else:
                self.levels.append(0.0)
                self.areas.append(0.0)
            return
        i = bisect_left(times, at)
        if times[i] == at:
            self.deltas[i] += delta
        else:
            times.insert(i, at)
            self.deltas.insert(i, delta)
            self.levels.insert(i, 0.0)
            self.areas.insert(i, 0.0)
        self.clean = min(self.clean, i)

    def _refresh(self) -> None:
        n = len(self.times)
        if self.clean == n:
            return
        times, deltas, levels, areas = self.times, self.deltas, self.levels, self.areas
        i = self.clean
        if i == 0:
            level = deltas[0]
            levels[0] = 0.0 if -_ZERO < level < _ZERO else level
            areas[0] = 0.0
            i = 1
        for j in range(i, n):
            prev = levels[j - 1]
            areas[j] = areas[j - 1] + prev * (times[j] - times[j - 1])
            level = prev + deltas[j]
            levels[j] = 0.0 if -_ZERO < level < _ZERO else level
        self.clean = n

    def level(self, at: float) -> float:
        """GPUs at ``at`` (the step function's value there)."""
        self._refresh()
        i = bisect_right(self.times, at) - 1
        return self.levels[i] if i >= 0 else 0.0

    def integrals(self, xs: Sequence[float]) -> list[float]:
        """The integral up to each of ``xs`` (ascending), in GPU-seconds."""
        self._refresh()
        times, levels, areas = self.times, self.levels, self.areas
        out: list[float] = []
        lo = 0
        for x in xs:
            i = bisect_right(times, x, lo) - 1
            if i < 0:
                out.append(0.0)
                continue
            lo = i
            out.append(areas[i] + levels[i] * (x - times[i]))
        return out

    def buckets(self, start: int, now: int, size: float) -> list[float]:
        """GPU-hours in each bucket of [start, now) (``size`` long, the last one ending at
        ``now``), rounding residue below zero cut to 0."""
        count = max(1, math.ceil((now - start) / size))  # as DemandGrid counts them
        key = (start % size, size)
        old = self.rows.get(key)
        first = 0  # buckets before this one are reused
        head: list[float] = []
        if old is not None and old.start <= start and old.now <= now:
            shift = round((start - old.start) / size)
            # the old row's buckets that ended by its now, from the new start on
            done = len(old.values) if old.start + len(old.values) * size <= old.now \
                else len(old.values) - 1
            if shift < done:
                head = old.values[shift:done]
                first = len(head)
        if first < count:
            edges = [start + k * size for k in range(first, count)]
            edges.append(now)
            cum = self.integrals(edges)
            tail = [(b - a) / _HOUR for a, b in pairwise(cum)]
            row = head + [x if x > 0.0 else 0.0 for x in tail]
        else:
            row = head[:count]
        self.rows[key] = _Row(start, now, row)
        self.rows_top = max(self.rows_top, now)
        return row

    def fold(self, before: int) -> None:
        """Forget the points before ``before``: the last of them becomes the base level."""
        self._refresh()
        i = bisect_right(self.times, before) - 1
        if i <= 0:
            return
        level = self.levels[i]
        del self.times[:i], self.deltas[:i], self.levels[:i], self.areas[:i]
        self.deltas[0] = level
        self.clean = 0

    def empty(self) -> bool:
        return not self.times or (len(self.times) == 1 and self.deltas[0] == 0.0)


@dataclass(frozen=True, slots=True)
class _Row:
    start: int
    now: int
    values: list[float]  # GPU-hours per bucket


_RunKey = tuple[Association, bool]  # ((account, user), allocated)


class FootprintLedger:
    """A multiset of footprints with per-association running sums (see the module doc).

    Iterating yields the footprints themselves, so a ledger can also be tallied the
    plain way (the tests compare both). :meth:`prune` forgets footprints that ended
    before a time; windows must then start at or after it.
    """

    __slots__ = ("_ask", "_count", "_floor", "_fps", "_pending", "_run", "owed_columns")

    def __init__(self) -> None:
        self._fps: dict[LedgerFootprint, int] = {}
        self._count = 0
        self._run: dict[tuple[Association, bool], _Steps] = {}  # ((acct, user), alloc)
        self._ask: dict[Association, _Steps] = {}  # alloc demand
        self._pending: dict[Association, float] = {}  # GPUs pending now (alloc and free)
        self._floor: int | None = None  # prune()d before this
        #: the owed buckets of earlier windows, for ``fair_share`` to reuse
        self.owed_columns = OwedColumns()

    def __iter__(self) -> Iterator[LedgerFootprint]:
        for fp, n in self._fps.items():
            for _ in range(n):
                yield fp

    def __len__(self) -> int:
        return self._count

    @property
    def floor(self) -> int | None:
        """Windows must start at or after this (None: never pruned)."""
        return self._floor

    def add(self, fp: LedgerFootprint) -> None:
        self._fps[fp] = self._fps.get(fp, 0) + 1
        self._count += 1
        self._apply(*self._changes(fp, 1.0, {}, {}))

    def remove(self, fp: LedgerFootprint) -> None:
        """Take out one copy of ``fp``; KeyError if it is not held."""
        left = self._fps[fp] - 1
        if left:
            self._fps[fp] = left
        else:
            del self._fps[fp]
        self._count -= 1
        self._apply(*self._changes(fp, -1.0, {}, {}))

    def replace(self, old: LedgerFootprint, new: LedgerFootprint) -> None:
        """``remove(old)`` then ``add(new)``, applying only the net change (a job that
        starts keeps its demand: nothing in the past is touched)."""
        left = self._fps[old] - 1
        if left:
            self._fps[old] = left
        else:
            del self._fps[old]
        self._fps[new] = self._fps.get(new, 0) + 1
        run, ask = self._changes(old, -1.0, {}, {})
        self._apply(*self._changes(new, 1.0, run, ask))

    def _changes(self, fp: LedgerFootprint, sign: float, run_out: dict[tuple[_RunKey, int], float],
                 ask_out: dict[tuple[Association, int], float],
                 ) -> tuple[dict[tuple[_RunKey, int], float], dict[tuple[Association, int], float]]:
        """The step changes ``fp`` makes (x sign), added to the two dicts given."""
        gpus = fp.billing_gpus
        if gpus <= 0:
            return run_out, ask_out
        g = sign * gpus
        assoc = (fp.account, fp.user)
        run, until = fp.run_from, fp.until
        if run is not None and (until is None or until > run):
            key = (assoc, fp.allocated)
            run_out[key, run] = run_out.get((key, run), 0.0) + g
            if until is not None:
                run_out[key, until] = run_out.get((key, until), 0.0) - g
        if run is None and until is None:
            self._pending[assoc] = self._pending.get(assoc, 0.0) + g
        if fp.allocated:
            since = fp.pending_from
            if since is None or (run is not None and run < since):
                since = run
            if since is not None and (until is None or until > since):
                ask_out[assoc, since] = ask_out.get((assoc, since), 0.0) + g
                if until is not None:
                    ask_out[assoc, until] = ask_out.get((assoc, until), 0.0) - g
        return run_out, ask_out

    def _apply(self, run: dict[tuple[_RunKey, int], float],
               ask: dict[tuple[Association, int], float]) -> None:
        for (rkey, at), delta in run.items():
            if delta != 0.0:
                steps = self._run.get(rkey)
                if steps is None:
                    steps = self._run[rkey] = _Steps()
                steps.add(at, delta)
        for (akey, at), delta in ask.items():
            if delta != 0.0:
                got = self._ask.get(akey)
                if got is None:
                    got = self._ask[akey] = _Steps()
                got.add(at, delta)

    def prune(self, before: int) -> None:
        """Forget footprints that ended at or before ``before`` and fold older step points.

        Costs one pass over the footprints: call it now and then (the simulator: once a
        simulated day), not every cycle.
        """
        if self._floor is not None and before <= self._floor:
            return
        self._floor = before
        gone = [fp for fp in self._fps if fp.until is not None and fp.until <= before]
        for fp in gone:
            self._count -= self._fps.pop(fp)
        for rkey, steps in list(self._run.items()):
            steps.fold(before)
            if steps.empty():
                del self._run[rkey]
        for akey, steps in list(self._ask.items()):
            steps.fold(before)
            if steps.empty():
                del self._ask[akey]
        self._pending = {a: g for a, g in self._pending.items() if g > _ZERO}

    def window(self, tree: FlatTree, start: int, now: int,
               bucket_s: float) -> tuple[Tally, dict[int, list[float]]]:
        """Usage per node and alloc demand per leaf and bucket over [start, now).

        Buckets are those of ``owed.DemandGrid``: ``bucket_s`` long from
        ``start``, the last one ending at ``now``.
        """
        if self._floor is not None and start < self._floor:
            raise ValueError(f"window starts at {start}, before the ledger was pruned "
                             f"({self._floor})")
        size = len(tree.kinds)
        out = Tally([0.0] * size, [0.0] * size, [0.0] * size, running=[0.0] * size)
        leaf_of = tree.leaf_of
        for (assoc, allocated), steps in self._run.items():
            lo, hi = steps.integrals((start, now))
            hours = (hi - lo) / _HOUR
            leaf = leaf_of.get(assoc)
            if leaf is None:
                out.unmatched += hours if allocated else 0.0
            elif allocated:
                out.delivered[leaf] += hours
                out.running[leaf] += steps.level(now)
            else:
                out.free[leaf] += hours
        for assoc, gpus in self._pending.items():
            leaf = leaf_of.get(assoc)
            if leaf is not None and gpus > _ZERO:
                out.pending[leaf] += gpus
        sum_up(tree, out)
        demand: dict[int, list[float]] = {}
        for assoc, steps in self._ask.items():
            leaf = leaf_of.get(assoc)
            if leaf is not None:
                row = steps.buckets(start, now, bucket_s)
                if any(row):  # every bucket is >= 0
                    demand[leaf] = row
        return out, demand

