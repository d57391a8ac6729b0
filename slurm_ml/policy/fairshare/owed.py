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


def owed(tree: FlatTree, leaf_demand: dict[int, list[float]],
         caps: Sequence[float]) -> tuple[list[float], list[float]]:
    """(owed, demand) GPU-hours per node over the window.

    ``caps``: the cluster's GPU-hours per bucket. A node's owed is the sum of its
    children's, so capacity a whole level cannot use is simply owed to no one.
    """
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
    owed_h = [0.0] * n
    demand_h = [0.0 if row is None else sum(row) for row in dem]
    root = dem[0]
    if root is None:
        return owed_h, demand_h
    ent: list[list[float] | None] = [None] * n
    ent[0] = [d if d <= c else c for d, c in zip(root, caps, strict=True)]
    for node in range(n):
        share = ent[node]
        if share is None:
            continue
        ent[node] = None  # the children's rows replace it; keeps peak memory down
        asking = [(c, asked) for c in tree.children[node] if (asked := dem[c]) is not None]
        if not asking:
            owed_h[node] = sum(share)
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
                owed_h[c] = sum(row)
    for node in range(n - 1, -1, -1):
        if tree.children[node]:
            owed_h[node] = sum(owed_h[c] for c in tree.children[node])
    return owed_h, demand_h
