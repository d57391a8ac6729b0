"""Owed GPU-hours: demand per bucket, water-filled down the budget tree.

Ai2's metric: an allocation is owed its budget share of the cluster hour by hour, but
never more than it asked for in that hour; what it cannot use flows to its siblings
(Volcano ``proportion``, HTCondor surplus). Everything here is in billing GPU-hours per
bucket: water-filling is homogeneous, so filling hours with capacity x bucket hours is
the same as filling GPUs and multiplying afterwards.

Speed matters (a 5,000-user tree, 60,000 live jobs, 168 buckets, every minute): demand is
built with a difference array per active leaf (O(1) per job), and only leaves and
subtrees that asked for something take part in the filling.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from operator import truediv

from slurm_ml.policy.fairshare.tree import FlatTree

_SECONDS_PER_HOUR = 3600.0


class DemandGrid:
    """Per-leaf demand over the buckets of a window, built from job intervals.

    Mutable on purpose and private to one computation: a job adds O(1) work whatever
    its length, and the per-bucket sums are taken once per leaf at the end.
    """

    __slots__ = ("_corr", "_diff", "count", "last_s", "size_s", "start")

    def __init__(self, start: int, end: int, size_s: float) -> None:
        self.start = start
        self.size_s = size_s
        self.count = max(1, math.ceil((end - start) / size_s))
        self.last_s = (end - start) - (self.count - 1) * size_s  # the last bucket may be partial
        self._diff: dict[int, list[float]] = {}  # GPUs covering whole buckets, as differences
        self._corr: dict[int, list[float]] = {}  # GPU-hours to add for partly covered buckets

    def bucket_hours(self) -> list[float]:
        hours = self.size_s / _SECONDS_PER_HOUR
        return [hours] * (self.count - 1) + [self.last_s / _SECONDS_PER_HOUR]

    def extend(self, intervals: Iterable[tuple[int, int, int, float]]) -> None:
        """Add (leaf, begin, end, GPUs) intervals, clipped to the window, begin < end."""
        diffs, corrs = self._diff, self._corr
        size, origin, count = self.size_s, self.start, self.count
        for leaf, begin, end, gpus in intervals:
            diff = diffs.get(leaf)
            if diff is None:
                diff = diffs[leaf] = [0.0] * (count + 1)
                corr = corrs[leaf] = [0.0] * count
            else:
                corr = corrs[leaf]
            a = begin - origin
            e = end - origin
            first = min(int(a // size), count - 1)
            last = min(int(e // size), count)  # == count only when e is the window's end
            diff[first] += gpus
            diff[last] -= gpus
            corr[first] -= gpus * (a - first * size) / _SECONDS_PER_HOUR
            if last < count:
                corr[last] += gpus * (e - last * size) / _SECONDS_PER_HOUR

    def demand(self) -> dict[int, list[float]]:
        """GPU-hours asked for in each bucket, per leaf that asked for anything."""
        hours = self.size_s / _SECONDS_PER_HOUR
        last_h = self.last_s / _SECONDS_PER_HOUR
        out: dict[int, list[float]] = {}
        for leaf, diff in self._diff.items():
            covered = list(accumulate(diff[:-1]))
            corr = self._corr[leaf]
            row = [c * hours + r for c, r in zip(covered, corr, strict=True)]
            row[-1] = covered[-1] * last_h + corr[-1]
            # Rounding can leave -1e-15 where nothing was asked for.
            out[leaf] = [x if x > 0.0 else 0.0 for x in row]
        return out


def water_levels(caps: Sequence[float], demands: Sequence[Sequence[float]],
                 weights: Sequence[float]) -> list[float]:
    """Per bucket, the level L at which sum(min(d_i, L * w_i)) == cap; inf if all fit."""
    n = len(weights)
    equal = min(weights) == max(weights)
    w0 = weights[0]
    w_total = sum(weights)
    levels: list[float] = []
    for cap, col in zip(caps, zip(*demands, strict=True), strict=True):
        if sum(col) <= cap:
            levels.append(math.inf)
            continue
        even = cap / w_total
        rem = cap
        if equal:  # users of a project: no ratios to sort by
            if min(col) >= even * w0:  # nobody is capped: the plain proportional split
                levels.append(even)
                continue
            left = n
            for d in sorted(col):
                if d * left > rem:
                    break
                rem -= d
                left -= 1
            levels.append(rem / (left * w0) if left else math.inf)
        else:
            ratios = list(map(truediv, col, weights))
            if min(ratios) >= even:
                levels.append(even)
                continue
            left_w = w_total
            for ratio, d, w in sorted(zip(ratios, col, weights, strict=True)):
                if ratio * left_w > rem:
                    break
                rem -= d
                left_w -= w
            levels.append(rem / left_w if left_w > 1e-12 * w_total else math.inf)
    return levels


def water_fill(caps: Sequence[float], demands: Sequence[Sequence[float]],
               weights: Sequence[float]) -> list[list[float]]:
    """Each sibling's entitlement per bucket: capacity in proportion to weight, each
    capped at its demand, the surplus re-flowing to the uncapped ones."""
    levels = water_levels(caps, demands, weights)
    out: list[list[float]] = []
    for row, w in zip(demands, weights, strict=True):
        out.append([d if d <= lv * w else lv * w for d, lv in zip(row, levels, strict=True)])
    return out


def owed(tree: FlatTree, leaf_demand: dict[int, list[float]], caps: Sequence[float],
         ) -> tuple[list[float], list[float]]:
    """(owed, demand) GPU-hours per node over the window.

    ``caps``: the cluster's GPU-hours per bucket. A node's owed is the sum of its
    children's, so capacity a whole level cannot use is simply owed to no one.
    :class:`OwedColumns` gives the same sums, reusing an earlier window's buckets.
    """
    dem, ent = _rows(tree, leaf_demand, caps)
    owed_h = [0.0] * len(tree.kinds)
    for leaf, row in ent.items():
        owed_h[leaf] = sum(row)
    return _sum_owed(tree, owed_h), [0.0 if row is None else sum(row) for row in dem]


def _sum_owed(tree: FlatTree, owed_h: list[float]) -> list[float]:
    """A parent is owed what its children are (children follow their parent)."""
    for node in range(len(owed_h) - 1, -1, -1):
        if tree.children[node]:
            owed_h[node] = sum(owed_h[c] for c in tree.children[node])
    return owed_h


def _rows(tree: FlatTree, leaf_demand: dict[int, list[float]], caps: Sequence[float],
          ) -> tuple[list[list[float] | None], dict[int, list[float]]]:
    """Per node its demand per bucket (None: asked for nothing), and per leaf that asked
    its entitlement per bucket. Every bucket is filled on its own."""
    n = len(tree.kinds)
    dem: list[list[float] | None] = [None] * n
    for leaf, row in leaf_demand.items():
        dem[leaf] = row
    # Children come after their parent in tree order: walk backwards to sum upwards.
    for node in range(n - 1, -1, -1):
        rows = [got for c in tree.children[node] if (got := dem[c]) is not None]
        if len(rows) == 1:
            dem[node] = rows[0]
        elif rows:
            dem[node] = [sum(col) for col in zip(*rows, strict=True)]
    out: dict[int, list[float]] = {}
    root = dem[0]
    if root is None:
        return dem, out
    ent: list[list[float] | None] = [None] * n
    ent[0] = [d if d <= c else c for d, c in zip(root, caps, strict=True)]
    for node in range(n):
        share = ent[node]
        if share is None:
            continue
        ent[node] = None  # the children's rows replace it; keeps peak memory down
        asking = [(c, asked) for c in tree.children[node] if (asked := dem[c]) is not None]
        if not asking:
            out[node] = share
            continue
        if len(asking) == 1:  # an only child asking is owed all its parent is (<= its demand)
            shares = [share]
        else:
            shares = water_fill(share, [asked for _, asked in asking],
                                [tree.weights[c] for c, _ in asking])
        for (c, _), row in zip(asking, shares, strict=True):
            if tree.children[c]:
                ent[c] = row
            else:
                out[c] = row
    return dem, out


#: Bucket phases :class:`OwedColumns` keeps. The daemon's 60 s cycle has 60 an hour; a
#: woken cycle adds one that does not come back, and evicting the oldest phase (the next
#: regular one due) would then miss on every phase after it, so there is room for both.
_KEEP_PHASES = 128
#: ... and at most this many kept values in all (a tree of thousands of users keeps fewer)
_KEEP_CELLS = 4_000_000


class OwedColumns:
    """Each bucket's demand and entitlements per node, kept from one window to the next.

    Buckets are filled one by one, so a bucket whose demand column (and cap) is the same
    as in an earlier window has the same result. A window that slides by a cycle brings
    its buckets back shifted (``FootprintLedger`` reuses their demand): per bucket phase
    (the window start modulo the bucket length) the last window is kept, and only the
    buckets after the first that differs from it are filled again. The sums are taken
    in bucket order, exactly as :func:`owed` takes them, so the result is the same to
    the bit. At most ``_KEEP_PHASES`` phases are kept, the most recently used.
    """

    __slots__ = ("_cells", "_kept", "_tree")

    def __init__(self) -> None:
        self._tree: FlatTree | None = None
        #: (phase, bucket length) -> the last window of that phase
        self._kept: dict[tuple[float, float], _Kept] = {}
        self._cells = 0  # the values kept, over every phase

    def owed(self, tree: FlatTree, leaf_demand: dict[int, list[float]],
             caps: Sequence[float], start: int,
             size_s: float) -> tuple[list[float], list[float]]:
        """:func:`owed` of the same arguments, for the window of buckets ``size_s`` long
        from ``start``, filling only the buckets that differ from the last such window."""
        if not leaf_demand:  # nobody asked: nothing to keep
            return owed(tree, leaf_demand, caps)
        if tree is not self._tree:
            self._tree = tree
            self._kept.clear()
            self._cells = 0
        leaves = tuple(leaf_demand)
        cols = list(zip(*leaf_demand.values(), strict=True))
        caps = list(caps)
        phase = (start % size_s, size_s)
        nodes = _asking_nodes(tree, leaves)
        old = self._kept.get(phase)
        same, shift = 0, 0
        if old is not None and old.leaves == leaves and old.start <= start:
            shift = round((start - old.start) / size_s)
            old_cols, old_caps = old.cols[shift:], old.caps[shift:]
            same = min(len(cols), len(old_cols))
            # the common case, compared whole: every kept bucket but the newest is unchanged
            if cols[:same] != old_cols[:same] or caps[:same] != old_caps[:same]:
                same = 0
                for new_col, old_col, new_cap, old_cap in zip(cols, old_cols, caps, old_caps,
                                                              strict=False):
                    if new_col != old_col or new_cap != old_cap:
                        break
                    same += 1
        if same < len(cols):
            dem, ent = _rows(tree, {leaf: row[same:] for leaf, row in leaf_demand.items()},
                             caps[same:])
            fresh = [*(dem[n] or [] for n in nodes), *(ent[leaf] for leaf in leaves)]
        else:
            fresh = [[] for _ in range(len(nodes) + len(leaves))]
        if same and old is not None:
            rows = [kept[shift:shift + same] + new for kept, new in zip(old.rows, fresh,
                                                                         strict=True)]
        else:
            rows = fresh
        gone = self._kept.pop(phase, None)  # the most recent phase last: the oldest first
        if gone is not None:
            self._cells -= gone.cells
        kept = self._kept[phase] = _Kept(start, leaves, cols, caps, rows,
                                         (len(rows) + len(leaves)) * len(cols))
        self._cells += kept.cells
        while len(self._kept) > 1 and (len(self._kept) > _KEEP_PHASES
                                       or self._cells > _KEEP_CELLS):
            self._cells -= self._kept.pop(next(iter(self._kept))).cells
        owed_h = [0.0] * len(tree.kinds)
        demand_h = [0.0] * len(tree.kinds)
        for node, row in zip(nodes, rows, strict=False):
            demand_h[node] = sum(row)
        for leaf, row in zip(leaves, rows[len(nodes):], strict=True):
            owed_h[leaf] = sum(row)
        return _sum_owed(tree, owed_h), demand_h

    def __len__(self) -> int:
        """The windows kept (one per bucket phase seen)."""
        return len(self._kept)


@dataclass(frozen=True, slots=True)
class _Kept:
    """One window as :class:`OwedColumns` keeps it."""

    start: int
    leaves: tuple[int, ...]  # the asking leaves, in the order their demand came
    cols: list[tuple[float, ...]]  # per bucket, each leaf's demand
    caps: list[float]
    rows: list[list[float]]  # per asking node its demand, then per leaf its entitlement
    cells: int  # the values kept (for the bound on all phases)


def _asking_nodes(tree: FlatTree, leaves: Sequence[int]) -> list[int]:
    """The nodes with demand when ``leaves`` ask: those leaves and their ancestors."""
    got: set[int] = set()
    for leaf in leaves:
        node = leaf
        while node >= 0 and node not in got:
            got.add(node)
            node = tree.parents[node]
    return sorted(got)
