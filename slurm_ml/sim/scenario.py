"""Turn a loaded trace into a scenario: which part of it, how busy, who owns what.

A real trace is replayed as is only for calibration. To see a policy under pressure the
simulator needs more demand than capacity (2-3x), Ai2's interactive debug jobs on top,
per-team budgets and a cluster to run on; every knob here is a pure function of a
Trace (and the base Config), so a scenario is reproducible from its arguments alone.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Iterable, Mapping
from typing import Any

from slurm_ml.config import Config, revise
from slurm_ml.model import BudgetProgram, BudgetProject, BudgetTree, NodeClass
from slurm_ml.sim.traces import DEFAULT_GPUS_PER_NODE, Trace, kind_of, vc_user
from slurm_ml.sim.workload import DEBUG, SimJob

__all__ = [
    "arrival_scale_for",
    "arrival_scale_for_load",
    "classes_config",
    "classify",
    "cluster_config",
    "demand_ratio",
    "implied_cluster_gpus",
    "inject_debug_jobs",
    "map_accounts",
    "mark_unallocated",
    "reclassify",
    "scale_arrivals",
    "slice_trace",
    "team_weights",
    "trace_config",
    "weighted_tree",
]

_HOUR = 3600.0


def _with_jobs(trace: Trace, jobs: Iterable[SimJob], note: str, **changes: Any) -> Trace:
    return dataclasses.replace(
        trace, jobs=tuple(jobs), description=f"{trace.description}; {note}", **changes
    )


# --------------------------------------------------------------------------- time


def slice_trace(trace: Trace, start_s: float, end_s: float, *, rebase: bool = True) -> Trace:
    """The jobs submitted in ``[start_s, end_s)``; with ``rebase`` their times are moved
    so ``start_s`` becomes 0 (``epoch_s`` follows, so dates stay recoverable)."""
    if not (math.isfinite(start_s) and math.isfinite(end_s)) or not 0 <= start_s < end_s:
        raise ValueError(f"slice needs 0 <= start < end, got [{start_s}, {end_s})")
    shift = start_s if rebase else 0.0
    jobs = [
        dataclasses.replace(job, submit_s=job.submit_s - shift)
        for job in trace.jobs
        if start_s <= job.submit_s < end_s
    ]
    return _with_jobs(
        trace, jobs, f"slice [{start_s:g}, {end_s:g}) s: {len(jobs)} jobs",
        epoch_s=trace.epoch_s + shift,
    )


def scale_arrivals(trace: Trace, factor: float) -> Trace:
    """Every inter-arrival gap divided by ``factor`` (2 = twice the arrival rate, so
    about twice the demand per unit time); durations and GPU counts are kept. Times
    are scaled from the first submission, which stays where it is."""
    if not (math.isfinite(factor) and factor > 0):
        raise ValueError(f"arrival scale factor must be > 0, got {factor}")
    if not trace.jobs:
        return trace
    first = trace.jobs[0].submit_s
    jobs = [
        dataclasses.replace(job, submit_s=first + (job.submit_s - first) / factor)
        for job in trace.jobs
    ]
    return _with_jobs(trace, jobs, f"arrivals x{factor:g}")


# --------------------------------------------------------------------------- demand


def demand_ratio(trace: Trace, cluster_gpus: int) -> float:
    """GPU-seconds the jobs ask for, per second of the arrival span (first to last
    submission), over the cluster's GPUs: 1.0 = the span's arrivals exactly fill it.
    Scaling arrivals by f multiplies it by f."""
    if cluster_gpus < 1:
        raise ValueError(f"cluster_gpus must be >= 1, got {cluster_gpus}")
    if trace.span_s <= 0:
        raise ValueError("demand ratio needs jobs submitted at two different times")
    return sum(trace.gpu_seconds().values()) / (trace.span_s * cluster_gpus)


def arrival_scale_for(trace: Trace, cluster_gpus: int, target: float) -> float:
    """The ``scale_arrivals`` factor that brings ``demand_ratio`` to ``target``."""
    if not (math.isfinite(target) and target > 0):
        raise ValueError(f"target demand ratio must be > 0, got {target}")
    return target / demand_ratio(trace, cluster_gpus)


def arrival_scale_for_load(
    trace: Trace, cluster_gpus: int, target: float, *, tolerance: float = 0.01
) -> float:
    """The ``scale_arrivals`` factor whose result has ``metrics.offered_load`` over its
    judged window equal to ``target`` (within ``tolerance``, relative). Clipping to the
    window makes the load not quite linear in the factor, so it is found by iteration."""
    from slurm_ml.sim.metrics import judged_window, offered_load

    if not (math.isfinite(target) and target > 0):
        raise ValueError(f"target offered load must be > 0, got {target}")
    if trace.span_s <= 0:
        raise ValueError("offered load needs jobs submitted at two different times")
    factor = 1.0
    for _ in range(50):
        scaled = scale_arrivals(trace, factor)
        load = offered_load(scaled.jobs, cluster_gpus, judged_window(scaled.jobs))
        if load <= 0:
            raise ValueError("the trace offers no load inside its judged window")
        if abs(load / target - 1) <= tolerance:
            return factor
        factor *= target / load
    raise ValueError(f"could not reach offered load {target:g} (last {load:.3f})")


def implied_cluster_gpus(
    trace: Trace, vc_nodes: Mapping[str, int], gpus_per_node: int = DEFAULT_GPUS_PER_NODE
) -> int:
    """The cluster a Philly-derived trace implies: every VC's nodes in ``philly_vc.csv``
    (HeliosArtifact's per-VC sizes for its Philly simulation) x ``gpus_per_node`` (8,
    that simulator's default; the file has no GPU count). 352 nodes = 2,816 GPUs.
    All listed VCs count, with jobs in this trace or not: they are the cluster."""
    if not set(trace.teams) & set(vc_nodes):
        raise ValueError("none of the trace's teams has a node count: not a Philly VC trace")
    return sum(vc_nodes.values()) * gpus_per_node


# --------------------------------------------------------------------------- teams


def team_weights(
    trace: Trace,
    vc_nodes: Mapping[str, int] | None = None,
    *,
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
) -> dict[str, float]:
    """Budget weight per team of the trace, in nodes.

    A team with a node count in ``vc_nodes`` (Philly VCs: ``philly_vc.csv``) weighs its
    nodes. Any other team weighs the nodes its jobs kept busy on average over the
    arrival span (GPU-seconds / span / ``gpus_per_node``), the same unit, so without
    ``vc_nodes`` the weights are proportional to each team's GPU-hours. (Philly's four
    tiny VCs without a node count get a weight of a few hundredths of a node.)
    """
    span = trace.span_s or max((job.duration_s for job in trace.jobs), default=1.0)
    nodes = vc_nodes or {}
    return {
        team: float(nodes[team]) if team in nodes else gpu_s / span / gpus_per_node
        for team, gpu_s in sorted(trace.gpu_seconds().items())
    }


def mark_unallocated(trace: Trace, fraction: float, *, seed: int = 0) -> Trace:
    """Turn ``fraction`` of the non-debug jobs, drawn at random (seeded), into unallocated
    work: QOS free, no minimum runtime (admission routes ``--time-min=0`` and exhausted
    budgets there). Ai2 saw 18% of delivered GPU time unallocated; Philly has no such
    column, so this is a scenario knob, not trace data."""
    if not (math.isfinite(fraction) and 0 <= fraction <= 1):
        raise ValueError(f"unallocated fraction must be in [0, 1], got {fraction}")
    if fraction == 0 or not trace.jobs:
        return trace
    rng = random.Random(f"{seed}/unallocated")
    jobs = [dataclasses.replace(job, min_runtime_s=0.0)
            if job.kind != DEBUG and rng.random() < fraction else job for job in trace.jobs]
    marked = [j for j in jobs if j.min_runtime_s == 0 and j.kind != DEBUG]
    total = sum(j.gpus * j.duration_s for j in jobs) or 1.0
    share = sum(j.gpus * j.duration_s for j in marked) / total
    return _with_jobs(trace, jobs, f"{len(marked)} jobs unallocated (QOS free, "
                      f"{share:.0%} of GPU time; fraction {fraction:g}, seed {seed})")


def classify(job: SimJob, gpus_per_node: int) -> str:
    """DEBUG for an injected debug job, else SMALL, or LARGE when the job needs more
    GPUs than one node has (a multi-node gang)."""
    return DEBUG if job.kind == DEBUG else kind_of(job.gpus, gpus_per_node)


def reclassify(trace: Trace, gpus_per_node: int) -> Trace:
    """The trace with every job's kind set by :func:`classify` for this node size
    (loaders assume 8 GPUs per node)."""
    jobs = [
        job if job.kind == (kind := classify(job, gpus_per_node))
        else dataclasses.replace(job, kind=kind)
        for job in trace.jobs
    ]
    return _with_jobs(trace, jobs, f"classes for {gpus_per_node} GPUs/node")


def inject_debug_jobs(
    trace: Trace,
    rate_per_team_per_hour: float,
    *,
    gpus: int = 1,
    duration_s: float = 600.0,
    min_runtime_s: float = 900.0,
    resumable: bool = False,
    seed: int = 0,
    teams: Iterable[str] | None = None,
) -> Trace:
    """Add Ai2's interactive debug jobs: for each team (default: every team of the
    trace) a Poisson stream of ``rate_per_team_per_hour`` jobs over the arrival span,
    each ``gpus`` GPUs for ``duration_s`` with a ``min_runtime_s`` (<= 15 min in Ai2's
    case) protection, kind DEBUG, submitted by the team's main user. A debug session
    cannot resume from a checkpoint, hence ``resumable=False``.

    Deterministic: each team's stream is seeded by (``seed``, team), so the same
    arguments give the same jobs and adding a team does not move the others'. New job
    ids follow the trace's largest, in submission order.
    """
    if not (math.isfinite(rate_per_team_per_hour) and rate_per_team_per_hour >= 0):
        raise ValueError(f"debug rate must be >= 0 per team per hour, got {rate_per_team_per_hour}")
    if not trace.jobs or rate_per_team_per_hour == 0:
        return trace
    users = trace.team_users()
    chosen = sorted(set(teams)) if teams is not None else list(users)
    unknown = [team for team in chosen if team not in users]
    if unknown:
        raise ValueError(f"no such team(s) in the trace: {', '.join(unknown)}")
    start, end = trace.jobs[0].submit_s, trace.jobs[-1].submit_s
    rate_per_s = rate_per_team_per_hour / _HOUR
    arrivals: list[tuple[float, str]] = []
    for team in chosen:
        rng = random.Random(f"{seed}/{team}")
        t = start + rng.expovariate(rate_per_s)
        while t < end:
            arrivals.append((t, team))
            t += rng.expovariate(rate_per_s)
    arrivals.sort()
    next_id = max(job.job_id for job in trace.jobs) + 1
    debug = [
        SimJob(
            job_id=next_id + i,
            team=team,
            user=users[team],
            submit_s=t,
            gpus=gpus,
            duration_s=duration_s,
            min_runtime_s=min_runtime_s,
            resumable=resumable,
            kind=DEBUG,
        )
        for i, (t, team) in enumerate(arrivals)
    ]
    jobs = sorted((*trace.jobs, *debug), key=lambda job: (job.submit_s, job.job_id))
    note = (
        f"+{len(debug)} debug jobs ({rate_per_team_per_hour:g}/team/h, {gpus} GPU, "
        f"{duration_s:g} s, min runtime {min_runtime_s:g} s, seed {seed})"
    )
    return _with_jobs(trace, jobs, note)


# --------------------------------------------------------------------------- cluster


def cluster_config(
    base: Config,
    gpus: int,
    weights: Mapping[str, float],
    *,
    users: Mapping[str, str] | None = None,
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
    gpu_type: str | None = None,
    leaf_nodes: int = 32,
    program: str = "philly",
) -> Config:
    """``base`` with a simulated cluster of ``gpus`` GPUs and a budget tree of the teams.

    Nodes ``sim[001-N]`` of ``gpu_type`` (default: base's first GPU type), one node
    class per leaf switch of ``leaf_nodes`` nodes (CPUs, memory and features copied
    from a base node class of that type when there is one); every base partition
    spans all of them. Budgets: base's org -> one program ``program`` -> one project per
    team weighted by ``weights`` -> one user (``users[team]``, default ``vc_<team>`` as
    the Philly-derived loaders name VC users; pass ``trace.team_users()`` otherwise).
    The result is checked as a file is (:func:`~slurm_ml.config.revise`), so a name
    Slurm would refuse (an upper-case team, say) raises ConfigError here rather than
    mid-simulation.
    """
    if gpus_per_node < 1 or leaf_nodes < 1:
        raise ValueError("gpus_per_node and leaf_nodes must be >= 1")
    if gpus < gpus_per_node or gpus % gpus_per_node:
        raise ValueError(f"{gpus} GPUs is not a whole number of {gpus_per_node}-GPU nodes")
    if not weights:
        raise ValueError("no teams to budget")
    type_name = gpu_type or next(iter(base.gpu_types))
    if type_name not in base.gpu_types:
        raise ValueError(f"unknown GPU type {type_name!r} (known: {', '.join(base.gpu_types)})")
    nodes = gpus // gpus_per_node
    template = next((nc for nc in base.node_classes if nc.gpu_type == type_name), None)
    leaves = _leaf_classes(
        nodes, leaf_nodes, gpu_type=type_name, gpus_per_node=gpus_per_node,
        template=template, feature=base.gpu_types[type_name].feature,
    )
    whole = _nodes(1, nodes, len(str(nodes)))
    return revise(base, {
        "cluster": {"partitions": [dataclasses.replace(p, nodes=whole)
                                   for p in base.cluster.partitions]},
        "node_classes": leaves,
        "budgets": weighted_tree(base, weights, users=users, program=program),
    }, source="simulated cluster")


def weighted_tree(base: Config, weights: Mapping[str, float], *,
                  users: Mapping[str, str] | None = None, program: str = "philly"
                  ) -> BudgetTree:
    """Base's org -> one program -> one project per team weighted by ``weights`` -> one
    user (``users[team]``, default ``vc_<team>`` as the Philly-derived loaders name VC
    users)."""
    owner = dict(users) if users is not None else {team: vc_user(team) for team in weights}
    missing = [team for team in weights if team not in owner]
    if missing:
        raise ValueError(f"no user for team(s) {', '.join(sorted(missing))}")
    return BudgetTree(
        org=base.budgets.org,
        programs=(
            BudgetProgram(
                name=program,
                weight=1.0,
                projects=tuple(
                    BudgetProject(name=team, weight=float(weight), users=(owner[team],))
                    for team, weight in sorted(weights.items())
                ),
            ),
        ),
    )


def classes_config(
    base: Config,
    node_classes: Iterable[Mapping[str, Any]],
    gpu_types: Mapping[str, Any] | None = None,
    *,
    source: str = "scenario",
) -> Config:
    """``base`` with its cluster replaced by ``node_classes`` (YAML data in
    slurm-ml.yaml's own schema; ``gpu_types`` add to base's types or change them),
    every base partition spanning all of them. Checked as a file is
    (:func:`~slurm_ml.config.revise`), so a bad class is a ConfigError naming the
    field."""
    from ClusterShell.NodeSet import NodeSet, NodeSetException
    from ClusterShell.RangeSet import RangeSetException

    classes = [dict(nc) for nc in node_classes]
    partitions = base.cluster.partitions
    try:
        nodes = str(NodeSet.fromlist([str(nc["nodes"]) for nc in classes if nc.get("nodes")]))
        partitions = tuple(dataclasses.replace(p, nodes=nodes) for p in partitions)
    except (NodeSetException, RangeSetException):
        pass  # a class's bad node set, which the config's rules name just below
    return revise(base, {"cluster": {"partitions": partitions},
                         "gpu_types": dict(gpu_types or {}), "node_classes": classes},
                  source=f"{source} cluster")


def map_accounts(trace: Trace, cfg: Config, *, teams: Mapping[str, str],
                 users: Mapping[str, str], default: str | None = None) -> Trace:
    """The trace's jobs charged to ``cfg``'s own accounts: a job's account is
    ``users[job.user]``, else ``teams[job.team]``, else ``default``. An account must be a
    project of the config's budget tree; a job no rule maps is a ValueError that names
    the teams left over, so a typo cannot silently move work into the wrong budget."""
    projects = {proj.name for prog in cfg.budgets.programs for proj in prog.projects}
    bad = sorted({a for a in (*teams.values(), *users.values(), default) if a} - projects)
    if bad:
        raise ValueError(f"no such account in the budget tree: {', '.join(bad)} "
                         f"(projects: {', '.join(sorted(projects))})")
    jobs, unmapped = [], set()
    for job in trace.jobs:
        account = users.get(job.user) or teams.get(job.team) or default
        if account is None:
            unmapped.add(job.team)
            continue
        jobs.append(job if account == job.team else dataclasses.replace(job, team=account))
    if unmapped:
        raise ValueError(f"trace team(s) {', '.join(sorted(unmapped))} map to no account: "
                         "add them to budgets.accounts.teams or give a default")
    moved = sum(1 for j, old in zip(jobs, trace.jobs, strict=True) if j.team != old.team)
    return _with_jobs(trace, jobs, f"{moved} jobs charged to the config's accounts")


def trace_config(
    base: Config,
    trace: Trace,
    gpus: int,
    vc_nodes: Mapping[str, int] | None = None,
    *,
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
    gpu_type: str | None = None,
    leaf_nodes: int = 32,
) -> Config:
    """:func:`cluster_config` for a trace: its teams weighted by :func:`team_weights`,
    each with its main user."""
    return cluster_config(
        base,
        gpus,
        team_weights(trace, vc_nodes, gpus_per_node=gpus_per_node),
        users=trace.team_users(),
        gpus_per_node=gpus_per_node,
        gpu_type=gpu_type,
        leaf_nodes=leaf_nodes,
    )


def _nodes(first: int, last: int, width: int) -> str:
    if first == last:
        return f"sim{first:0{width}d}"
    return f"sim[{first:0{width}d}-{last:0{width}d}]"


def _leaf_classes(
    nodes: int,
    leaf_nodes: int,
    *,
    gpu_type: str,
    gpus_per_node: int,
    template: NodeClass | None,
    feature: str,
) -> tuple[NodeClass, ...]:
    width = len(str(nodes))
    count = math.ceil(nodes / leaf_nodes)
    leaf_width = len(str(count))
    out = []
    for index, first in enumerate(range(1, nodes + 1, leaf_nodes), start=1):
        last = min(first + leaf_nodes - 1, nodes)
        out.append(
            NodeClass(
                name=f"sim-leaf{index:0{leaf_width}d}",
                nodes=_nodes(first, last, width),
                gpu_type=gpu_type,
                gpus_per_node=gpus_per_node,
                leaf_switch=f"leaf{index:0{leaf_width}d}",
                features=template.features if template else (feature,),
                cpus=template.cpus if template else 64,
                memory_mb=template.memory_mb if template else 512_000,
            )
        )
    return tuple(out)

