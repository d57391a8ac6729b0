"""A resolved scenario turned into what the engine runs: the trace, the cluster, the
budgets and the settings, in one place shared by ``slurm-ml sim`` and its sweeps.

Every step is a pure function of the scenario and the base config (the trace loader
reads files, or sacct for ``slurmdb``), so a sweep point rebuilt in another process or
on another node is the same run. Bad input raises ValueError (ScenarioError,
TraceError) or ConfigError, with a message that names where.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from slurm_ml.config import Config, ConfigError, revise
from slurm_ml.model import expand_hosts
from slurm_ml.sim import scenario, traces
from slurm_ml.sim.engine import SimSettings, simulate
from slurm_ml.sim.metrics import Summary, summarize
from slurm_ml.sim.report_charts import TraceClock
from slurm_ml.sim.result import SimResult
from slurm_ml.sim.scenario_file import DebugMix, Faults, Scenario, ScenarioError
from slurm_ml.sim.traces import DEFAULT_GPUS_PER_NODE, Trace

__all__ = [
    "POLICIES",
    "ConfigError",
    "Prepared",
    "node_faults",
    "prepare",
    "resolve",
    "run_policy",
    "scenario_info",
    "summaries",
]

POLICIES = ("fifo", "slurm-fairshare", "budget", "budget-nocontract")


@dataclasses.dataclass(frozen=True, slots=True)
class Prepared:
    """One scenario ready to simulate under each of its policies."""

    scenario: Scenario  # resolved: every knob the run used
    trace: Trace
    cfg: Config
    gpus: int
    scale: float
    settings: SimSettings
    demand_ratio: float | None
    #: the requests drawn and what admission did (``sim.admit``); empty when not asked
    admission: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def clock(self) -> TraceClock:
        """The trace's dates and arrival compression, for the report's time axes."""
        first = self.trace.jobs[0].submit_s if self.trace.jobs else 0.0
        return TraceClock(epoch_s=self.trace.epoch_s, first_s=first, scale=self.scale)

    @property
    def policies(self) -> tuple[str, ...]:
        return self.scenario.policies or POLICIES


def resolve(sc: Scenario) -> Scenario:
    """``sc`` with the defaults filled in, so the report records what actually ran."""
    return dataclasses.replace(
        sc, trace=sc.trace or "philly", start_hours=sc.start_hours or 0.0,
        unallocated=sc.unallocated or 0.0, seed=sc.seed or 0,
        policies=sc.policies or POLICIES)


def prepare(sc: Scenario, base: Config, *,
            load: Callable[[str], Trace] = traces.load_trace) -> Prepared:
    """Build the run ``sc`` describes on ``base``, with the scenario's ``policy`` knobs
    revised into it (checked by the config's rules: an unknown knob is an error, not
    ignored). Raises ValueError or ConfigError."""
    sc = resolve(sc)
    bad = [p for p in sc.policies or () if p not in POLICIES]
    if bad:
        raise ScenarioError(f"{sc.source}: unknown policy {', '.join(bad)} "
                            f"(known: {', '.join(POLICIES)})")
    if sc.policy:
        base = revise(base, {"policy": sc.policy}, source=f"{sc.source} policy")
    spec, start_hours, hours = sc.trace or "philly", sc.start_hours or 0.0, sc.hours
    trace = load(spec)
    if start_hours or hours is not None:
        end = trace.span_s + 1 if hours is None else (start_hours + hours) * 3600
        trace = scenario.slice_trace(trace, start_hours * 3600, end)
    if not trace.jobs:
        until = "the end" if hours is None else f"hour {start_hours + hours:g}"
        raise ValueError(f"no jobs in {spec} between hour {start_hours:g} and {until}")
    vc_nodes = traces.default_vc_nodes()
    layout: Config | None = None
    if sc.node_classes is not None:
        layout = scenario.classes_config(base, sc.node_classes, sc.gpu_types, source=sc.source)
        per_node = max(nc.gpus_per_node for nc in layout.node_classes)
        size = sum(nc.gpus_per_node * len(expand_hosts(nc.nodes))
                   for nc in layout.node_classes)
    else:
        if sc.gpu_types:
            base = revise(base, {"gpu_types": sc.gpu_types}, source=f"{sc.source} cluster")
        per_node = sc.gpus_per_node or DEFAULT_GPUS_PER_NODE
        size = (sc.nodes * per_node if sc.nodes
                else scenario.implied_cluster_gpus(trace, vc_nodes, per_node))
    scale = sc.scale
    if sc.target_load is not None:
        scale = scenario.arrival_scale_for_load(trace, size, sc.target_load)
    if scale is not None and scale != 1:
        trace = scenario.scale_arrivals(trace, scale)
    if sc.unallocated:
        trace = scenario.mark_unallocated(trace, sc.unallocated, seed=sc.seed or 0)
    if per_node != DEFAULT_GPUS_PER_NODE:
        trace = scenario.reclassify(trace, per_node)
    debug = sc.debug or DebugMix()
    if debug.rate_per_team_per_hour:
        for n, (size_gpus, p) in enumerate(sorted(debug.gpus.items())):
            trace = scenario.inject_debug_jobs(
                trace, debug.rate_per_team_per_hour * p, gpus=size_gpus,
                duration_s=debug.duration_s, min_runtime_s=debug.min_runtime_s,
                seed=(sc.seed or 0) * 1000 + n)
    shape = layout or scenario.cluster_config(
        base, size, {"_": 1.0}, users={"_": "_"}, gpus_per_node=per_node,
        gpu_type=sc.gpu_type, leaf_nodes=sc.leaf_nodes or 32)
    cfg, trace = _budgets(sc, base, shape, trace, vc_nodes)
    if sc.partition_by_team:
        from slurm_ml.sim.partition import partition_by_team

        if sc.nodes or sc.node_classes is not None:
            raise ValueError("partition_by_team sizes each team from philly_vc.csv: "
                             "give no cluster size")
        cfg, trace = partition_by_team(cfg, trace, vc_nodes)
        size = sum(vc_nodes.values()) * DEFAULT_GPUS_PER_NODE
    trace, admitted = _admission(sc, cfg, trace)
    # Slurm's GraceTime for QOS free, as install renders it from the config
    settings = SimSettings(free_grace_s=float(cfg.policy.contracts.free_grace_s))
    if sc.cycle_s is not None:
        settings = dataclasses.replace(settings, cycle_s=sc.cycle_s)
    if sc.faults.rate_per_node_per_day > 0:
        settings = dataclasses.replace(settings, faults=node_faults(
            cfg, sc.faults, start_s=trace.jobs[0].submit_s, end_s=trace.jobs[-1].submit_s,
            seed=sc.seed or 0))
    try:
        ratio: float | None = scenario.demand_ratio(trace, size)
    except ValueError:  # one arrival instant: no rate to speak of
        ratio = None
    return Prepared(scenario=sc, trace=trace, cfg=cfg, gpus=size, scale=scale or 1.0,
                    settings=settings, demand_ratio=ratio, admission=admitted)


def _admission(sc: Scenario, cfg: Config, trace: Trace) -> tuple[Trace, dict[str, Any]]:
    """The scenario's requests drawn where the trace lacks them, then admission (on or
    off) on every job (``sim.admit``)."""
    if sc.requests is None and not sc.admission:
        return trace, {}
    from slurm_ml.sim.admit import admit_jobs, draw_contracts, draw_requests

    jobs, info = list(trace.jobs), {}
    if sc.requests is not None:
        jobs, drawn = draw_requests(jobs, sc.requests, seed=sc.seed or 0,
                                    gpu_types=tuple(cfg.gpu_types), source=sc.source)
        jobs, contracts = draw_contracts(jobs, sc.requests.min_runtime_h, cfg,
                                         seed=sc.seed or 0)
        info["requests"] = {**drawn, **contracts,
                            "synthetic": drawn["synthetic"] or bool(contracts)}
    jobs, admitted = admit_jobs(jobs, cfg, on=sc.admission)
    info.update(admitted)
    return dataclasses.replace(trace, jobs=tuple(jobs)), info


def node_faults(cfg: Config, faults: Faults, *, start_s: float, end_s: float,
                seed: int) -> tuple[tuple[float, str, float], ...]:
    """Fault times per GPU node over ``[start_s, end_s)``: a Poisson process of
    ``faults.rate_per_node_per_day`` for each node, seeded by (seed, node), so adding a
    node does not move the others' faults. Each is out for ``faults.repair_hours``."""
    rate_per_s = faults.rate_per_node_per_day / 86400.0
    repair_s = faults.repair_hours * 3600.0
    out: list[tuple[float, str, float]] = []
    for name in cfg.all_nodes():
        nc = cfg.node_class_of(name)
        if nc is None or nc.gpus_per_node <= 0:
            continue
        rng = random.Random(f"{seed}/faults/{name}")
        t = start_s + rng.expovariate(rate_per_s)
        while t < end_s:
            out.append((t, name, repair_s))
            t += rng.expovariate(rate_per_s)
    return tuple(sorted(out))


def _budgets(sc: Scenario, base: Config, shape: Config, trace: Trace,
             vc_nodes: Mapping[str, int]) -> tuple[Config, Trace]:
    """``shape``'s cluster with its budget tree: weights per trace team (one program),
    or the config's own tree with the trace's work charged to its accounts."""
    per_node = max(nc.gpus_per_node for nc in shape.node_classes)
    if sc.accounts is not None:
        cfg = dataclasses.replace(shape, budgets=base.budgets)
        acc = sc.accounts
        return cfg, scenario.map_accounts(trace, cfg, teams=acc.teams, users=acc.users,
                                          default=acc.default)
    weights = (dict(sc.weights) if sc.weights is not None
               else scenario.team_weights(trace, vc_nodes, gpus_per_node=per_node))
    missing = sorted(set(trace.teams) - set(weights))
    if missing and sc.weights is not None:
        raise ScenarioError(f"{sc.source}: budgets.weights has no weight for trace team(s) "
                            f"{', '.join(missing)}")
    # a weighted team with no job in this slice still holds its budget
    users = {**{t: traces.vc_user(t) for t in weights}, **trace.team_users()}
    tree = scenario.weighted_tree(base, weights, users=users)
    # checked: a name Slurm would refuse (an upper-case team) fails here
    return revise(shape, {"budgets": tree}, source=f"{sc.source} cluster"), trace


def run_policy(prep: Prepared, policy: str,
               progress: Callable[[float, float], None] | None = None) -> SimResult:
    """One policy over the prepared run."""
    return simulate(prep.cfg, prep.trace.jobs, policy, settings=prep.settings,
                    progress=progress)


def summaries(prep: Prepared, results: Sequence[SimResult]) -> list[Summary]:
    """Each run judged over the same window (arrivals only: the drain after the last
    one, with only the longest jobs still running, would dilute every measure)."""
    jobs = prep.trace.jobs
    window = (jobs[0].submit_s, max(jobs[-1].submit_s, jobs[0].submit_s + 1))
    return [summarize(r, window=window, workload=jobs) for r in results]


def scenario_info(prep: Prepared, judged: Sequence[Summary]) -> dict[str, Any]:
    """What the report records about the run: enough to rerun it."""
    sc, trace = prep.scenario, prep.trace
    first = judged[0] if judged else None
    debug = sc.debug or DebugMix()
    return {
        "trace": sc.trace, "source": trace.source, "description": trace.description,
        "jobs": len(trace.jobs), "teams": len(trace.teams), "gpus": prep.gpus,
        "scale": prep.scale, "target_load": sc.target_load,
        "offered_load": first.offered_load if first else None,
        "judged_window_s": list(first.judged_window or ()) if first else None,
        "resolved": sc.as_dict(),
        "debug_rate_per_team_per_hour": debug.rate_per_team_per_hour, "seed": sc.seed,
        "unallocated_fraction": sc.unallocated,
        "demand_ratio": None if prep.demand_ratio is None else round(prep.demand_ratio, 3),
        "cycle_s": prep.settings.cycle_s,
        "free_grace_s": prep.settings.free_grace_s,
        **({"admission": dict(prep.admission)} if prep.admission else {}),
        "measured_window_s": list(first.window) if first else None,
        "partitioned_by_team": sc.partition_by_team,
        "node_classes": [{"name": nc.name, "nodes": nc.nodes, "gpu_type": nc.gpu_type,
                          "gpus_per_node": nc.gpus_per_node, "leaf_switch": nc.leaf_switch}
                         for nc in prep.cfg.node_classes],
        "budgets": [{"program": prog.name, "weight": prog.weight,
                     "projects": {p.name: p.weight for p in prog.projects}}
                    for prog in prep.cfg.budgets.programs],
    }

