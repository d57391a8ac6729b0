"""Fair share's standings and SiteFactor bands: what each budget-tree node is owed and
was delivered over the window, the Fair Tree ranking of the associations, and the
per-job SiteFactor that ranking becomes (see :mod:`slurm_ml.policy.fairshare`).

No I/O and no clock: the caller passes ``now`` (epoch seconds) and the footprints.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from slurm_ml.config import Config, FairshareConfig
from slurm_ml.policy.fairshare.ledger import FootprintLedger, Tally, sum_up
from slurm_ml.policy.fairshare.owed import DemandGrid, owed
from slurm_ml.policy.fairshare.tree import (
    Association,
    FlatTree,
    compress,
    fair_tree_order,
    flatten,
    level_fs,
)

__all__ = [
    "SITE_FACTOR_LIMIT",
    "FairShare",
    "Footprint",
    "FootprintLedger",
    "PendingJob",
    "Standing",
    "band",
    "capacity_billing_gpus",
    "fair_share",
    "job_site_factor",
    "site_factors",
]

#: scontrol accepts SiteFactor in +-2147483645.
SITE_FACTOR_LIMIT = 2_147_483_645
_HOUR = 3600.0
#: Float slack for comparing billing GPUs (sums of products of shares and capacity).
_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class Footprint:
    """One job as the window sees it (runaway jobs are left out by the caller)."""

    job_id: int
    account: str  # Slurm account charged (a project account of the budget tree, or unknown)
    user: str
    billing_gpus: float  # GPU count x billing weight of its type
    allocated: bool  # QOS alloc (charged) vs free (never charged, never demand)
    pending_from: int | None  # when it began to pend (submit time); None = unknown
    run_from: int | None  # when it started running; None = has not started
    until: int | None  # when it ended; None = still pending/running (counts up to now)


@dataclass(frozen=True, slots=True)
class PendingJob:
    """A pending job to compute a SiteFactor for."""

    job_id: int
    account: str
    user: str
    qos: str
    nice: int
    short: bool = False  # short work (see :func:`is_short_job`): first inside its band


@dataclass(frozen=True, slots=True)
class Standing:
    """One budget-tree node over the window. GPU-hours are billing GPU-hours."""

    path: tuple[str, ...]  # ("ml",), ("ml","nlp"), ..., ("ml","nlp","llm-pretrain","alice")
    kind: str  # "org" | "program" | "project" | "user"
    account: str  # the Slurm account (a user leaf: its project account)
    user: str | None
    budget_share: float  # fraction of the whole cluster
    level_share: float  # S among its siblings (users of a project share it equally)
    delivered: float  # alloc GPU-hours run inside the window
    unallocated: float  # free-QOS GPU-hours run inside the window (never charged)
    owed: float  # per bucket: water-filled entitlement capped at demand, summed
    demand: float  # alloc GPU-hours pending or running inside the window
    pending_gpus: float  # billing GPUs pending now (alloc and free)
    level_fs: float  # Fair Tree Level FS = S/U; math.inf with no usage
    rank: int | None  # association rank among those with pending jobs (1 = first)
    site_factor: int | None  # a user: its band when ranked; above: its users' highest band
    running_gpus: float = 0.0  # billing GPUs of its alloc work running now
    entitled_gpus: float = 0.0  # budget share x capacity: its entitlement now, billing GPUs

    @property
    def ratio(self) -> float | None:
        """delivered/owed (Ai2's score: 1 = got what it was owed); None when owed nothing."""
        return self.delivered / self.owed if self.owed > 0 else None

    @property
    def below_entitlement(self) -> bool:
        """Running less than its entitlement now (what Ai2's owed counts hour by hour)."""
        return self.running_gpus < self.entitled_gpus - _EPS


@dataclass(frozen=True, slots=True)
class FairShare:
    """The whole tree's standing over one window, plus the Fair Tree order."""

    window_start: int
    window_end: int
    capacity: float  # billing GPUs
    standings: tuple[Standing, ...]  # depth-first, siblings in config order
    #: every association of the tree in Fair Tree order, as groups of tied ones, best first
    fair_tree_order: tuple[tuple[Association, ...], ...] = ()
    ranks: int = 0  # N: distinct ranks handed to associations with pending jobs
    #: alloc GPU-hours in the window charged to an (account, user) outside the tree
    unmatched: float = 0.0
    #: projects ranked ahead of the others as below their entitlement now
    #: (``contracts.reclaim_entitlement``; empty when off)
    entitlement_first: frozenset[str] = frozenset()
    _by_path: dict[tuple[str, ...], Standing] = field(init=False, repr=False, compare=False)
    _by_account: dict[str, Standing] = field(init=False, repr=False, compare=False)
    _by_assoc: dict[Association, Standing] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_path", {s.path: s for s in self.standings})
        object.__setattr__(self, "_by_account",
                           {s.account: s for s in self.standings if s.user is None})
        object.__setattr__(self, "_by_assoc", {
            (s.account, s.user): s for s in self.standings if s.user is not None})

    def node(self, path: tuple[str, ...]) -> Standing | None:
        return self._by_path.get(tuple(path))

    def account(self, name: str) -> Standing | None:
        """The org/program/project node charged as Slurm account ``name``."""
        return self._by_account.get(name)

    def association(self, account: str, user: str) -> Standing | None:
        """The user leaf of (project account, user); None outside the tree."""
        return self._by_assoc.get((account, user))


def capacity_billing_gpus(cfg: Config) -> float:
    """The cluster in billing GPUs: per node, GPUs x the billing weight of their type."""
    nodes = Counter(c.name for n in cfg.all_nodes() if (c := cfg.node_class_of(n)) is not None)
    return sum(count * c.gpus_per_node * cfg.gpu_types[c.gpu_type].billing_weight
               for c in cfg.node_classes if (count := nodes[c.name]))


def band(rank: int, ranks: int, cfg: FairshareConfig) -> int:
    """The SiteFactor band of ``rank`` among ``ranks``: top - (rank-1) x step, never < step."""
    return cfg.top_band(ranks) - (rank - 1) * cfg.site_factor_step


def is_short_work(min_runtime_min: float | None, time_limit_min: float | None,
                  cfg: FairshareConfig) -> bool:
    """Short work (a debug job): a known contract and time limit, both within the
    ``short_job_*`` bounds. Unknown values are never short."""
    if min_runtime_min is None or time_limit_min is None:
        return False
    return (min_runtime_min <= cfg.short_job_min_runtime_min
            and 0 < time_limit_min <= cfg.short_job_time_limit_min)


def is_short_job(min_runtime_min: float | None, time_limit_min: float | None,
                 cfg: FairshareConfig) -> bool:
    """Short work that gets ``short_job_boost`` (none when the boost is off); the fast
    lane takes short work whatever the boost (:func:`is_short_work`)."""
    return cfg.short_job_boost > 0 and is_short_work(min_runtime_min, time_limit_min, cfg)


def job_site_factor(band_value: int, nice: int, cfg: FairshareConfig,
                    short: bool = False) -> int:
    """A job's SiteFactor in its band, so that its ``--nice`` only reorders inside the band.

    Slurm subtracts nice from the priority itself. For nice >= 0 we add it back and take
    off at most R = min(nice_range, step - 1), so the job's net SiteFactor - nice is
    band - min(nice, R): ordered by nice within the band, never below the next band. A
    negative nice can only be set by an admin: it is a deliberate boost and is left alone.
    A short job gets ``short_job_boost`` on top (the config keeps boost + R below a step,
    so it still never overtakes the band above).
    """
    boost = cfg.short_job_boost if short else 0
    if nice < 0:
        return min(band_value + boost, SITE_FACTOR_LIMIT)
    reach = min(cfg.nice_range, cfg.site_factor_step - 1)
    return min(band_value + boost - min(nice, reach) + nice, SITE_FACTOR_LIMIT)


def fair_share(cfg: Config, footprints: Iterable[Footprint] | FootprintLedger, now: int,
               pending_assocs: Collection[tuple[str, str]] = (), *,
               capacity: float | None = None) -> FairShare:
    """Every tree node's standing over the window [now - window_hours, now).

    Only the part of a run inside the window counts. Demand of a job runs from when it
    began to pend (else from its start) to its end (else now); a pending job whose
    submit time is unknown is counted in ``pending_gpus`` only. ``pending_assocs``: the
    associations with pending jobs, the only ones given a rank. ``capacity`` overrides
    :func:`capacity_billing_gpus` (billing GPUs).

    ``footprints`` may be a :class:`FootprintLedger` (the simulator's): the same
    footprints with running sums, tallied without visiting each one.
    """
    fcfg = cfg.policy.fairshare
    tree = flatten(cfg.budgets)
    cap = capacity_billing_gpus(cfg) if capacity is None else capacity
    start = now - max(1, round(fcfg.window_hours * _HOUR))
    grid = DemandGrid(start, now, fcfg.owed_bucket_s)
    caps = _caps(cap, grid)
    if isinstance(footprints, FootprintLedger):
        tally, demand = footprints.window(tree, start, now, fcfg.owed_bucket_s)
        owed_h, demand_h = footprints.owed_columns.owed(tree, demand, caps, start,
                                                         fcfg.owed_bucket_s)
    else:
        tally = _tally(tree, footprints, start, now)
        grid.extend(tally.asked)
        owed_h, demand_h = owed(tree, grid.demand(), caps)
    lfs = level_fs(tree, tally.delivered)
    order = tuple(tuple(tree.assoc_at[leaf] for leaf in group)
                  for group in fair_tree_order(tree, lfs))
    first: frozenset[str] = frozenset()
    if cfg.policy.contracts.reclaim_entitlement:
        first = _below_entitlement(tree, tally.running, cap)
        order = entitlement_first(order, first)
    ranks = compress(order, frozenset(pending_assocs))
    count = max(ranks.values(), default=0)
    rank_of: list[int | None] = [None] * len(tree.kinds)
    bands: list[int | None] = [None] * len(tree.kinds)
    for assoc, rank in ranks.items():
        leaf = tree.leaf_of[assoc]
        rank_of[leaf] = rank
        bands[leaf] = band(rank, count, fcfg)
    for node in range(len(tree.kinds) - 1, 0, -1):  # a parent shows its best user's band
        mine, parent = bands[node], tree.parents[node]
        above = bands[parent]
        if mine is not None and (above is None or mine > above):
            bands[parent] = mine
    standings = tuple(
        Standing(
            path=tree.paths[n], kind=tree.kinds[n], account=tree.accounts[n],
            user=tree.users[n], budget_share=tree.budget_shares[n],
            level_share=tree.level_shares[n], delivered=tally.delivered[n],
            unallocated=tally.free[n], owed=owed_h[n], demand=demand_h[n],
            pending_gpus=tally.pending[n], level_fs=lfs[n], rank=rank_of[n],
            site_factor=bands[n], running_gpus=tally.running[n],
            entitled_gpus=tree.budget_shares[n] * cap,
        )
        for n in range(len(tree.kinds))
    )
    return FairShare(window_start=start, window_end=now, capacity=cap, standings=standings,
                     fair_tree_order=order, ranks=count, unmatched=tally.unmatched,
                     entitlement_first=first)


#: (capacity, buckets, last bucket's seconds) -> capacity per bucket, of the last window:
#: the window's length is fixed, so every cycle asks the same
_CAPS: dict[tuple[float, int, float], list[float]] = {}


def _caps(cap: float, grid: DemandGrid) -> list[float]:
    """The cluster's billing GPU-hours in each bucket of ``grid`` (a fresh list)."""
    key = (cap, grid.count, grid.last_s)
    got = _CAPS.get(key)
    if got is None:
        _CAPS.clear()
        got = _CAPS[key] = [cap * h for h in grid.bucket_hours()]
    return list(got)


def _below_entitlement(tree: FlatTree, running: list[float], cap: float) -> frozenset[str]:
    """The projects whose alloc work running now is below budget share x capacity."""
    return frozenset(tree.accounts[n] for n, kind in enumerate(tree.kinds)
                     if kind == "project" and tree.budget_shares[n] > 0
                     and running[n] < tree.budget_shares[n] * cap - _EPS)


def entitlement_first(order: tuple[tuple[Association, ...], ...],
                      first: Collection[str]) -> tuple[tuple[Association, ...], ...]:
    """``order`` with the associations of the ``first`` accounts ahead of every other,
    each part keeping its Fair Tree order and ties (Kueue's nominal quota before
    borrowing: a team below its entitlement now is served before any team above it)."""
    if not first:
        return order
    ahead = (tuple(a for a in group if a[0] in first) for group in order)
    behind = (tuple(a for a in group if a[0] not in first) for group in order)
    return tuple(g for g in (*ahead, *behind) if g)


def _tally(tree: FlatTree, footprints: Iterable[Footprint], start: int, now: int) -> Tally:
    """One pass over the footprints: usage per leaf, pending GPUs, demand intervals."""
    size = len(tree.kinds)
    out = Tally([0.0] * size, [0.0] * size, [0.0] * size, [], running=[0.0] * size)
    delivered, free, pending, asked = out.delivered, out.free, out.pending, out.asked
    running_now = out.running
    leaf_of = tree.leaf_of
    for fp in footprints:
        gpus, until = fp.billing_gpus, fp.until
        if gpus <= 0 or (until is not None and until <= start):
            continue  # nothing of it falls inside the window
        leaf = leaf_of.get((fp.account, fp.user))
        end = now if until is None or until > now else until
        run = fp.run_from
        if run is not None:
            begin = run if run > start else start
            if end > begin:
                hours = gpus * (end - begin) / _HOUR
                if leaf is None:
                    out.unmatched += hours if fp.allocated else 0.0
                elif fp.allocated:
                    delivered[leaf] += hours
                else:
                    free[leaf] += hours
            if (fp.allocated and leaf is not None and run <= now
                    and (until is None or until > now)):
                running_now[leaf] += gpus  # as the ledger's level at now
        elif until is None and leaf is not None:
            pending[leaf] += gpus
        if leaf is None or not fp.allocated:
            continue
        since = fp.pending_from
        if since is None or (run is not None and run < since):
            since = run
        if since is not None and end > since:
            asked.append((leaf, since if since > start else start, end, gpus))
    sum_up(tree, out)
    return out


def site_factors(fs: FairShare, pending: Iterable[PendingJob],
                 cfg: FairshareConfig) -> dict[int, int]:
    """SiteFactor per pending job id.

    Associations with jobs in ``pending`` are ranked 1..N in ``fs``'s Fair Tree order
    (pass the same set to :func:`fair_share` and its ``Standing.rank`` agrees). A job gets
    its association's band, moved inside it by its nice and raised if it is short work
    (:func:`job_site_factor`). Jobs
    of an (account, user) outside the tree get 0. Free-QOS and alloc jobs of a team get
    the same band: the QOS priority weight, not the SiteFactor, puts alloc before free.
    """
    jobs = list(pending)
    assocs = [(j.account, j.user) for j in jobs]
    ranks = compress(fs.fair_tree_order, set(assocs))
    count = max(ranks.values(), default=0)
    bands = {assoc: band(r, count, cfg) for assoc, r in ranks.items()}
    out: dict[int, int] = {}
    # the simulator asks for every queued job every cycle: few (band, nice, short) differ
    seen: dict[tuple[int, int, bool], int] = {}
    for job, assoc in zip(jobs, assocs, strict=True):
        value = bands.get(assoc)
        if value is None:
            out[job.job_id] = 0
            continue
        shape = (value, job.nice, job.short)
        got = seen.get(shape)
        if got is None:
            got = seen[shape] = job_site_factor(value, job.nice, cfg, job.short)
        out[job.job_id] = got
    return out
