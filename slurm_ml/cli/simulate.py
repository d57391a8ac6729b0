"""``slurm-ml sim``: replay a trace through the production policies before changing them
(registered on the main group by ``slurm_ml.cli``)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from slurm_ml import assets
from slurm_ml.cli.common import EXIT_BAD_INPUT, emit, fail, load_config_or_exit

POLICIES = ("fifo", "slurm-fairshare", "budget", "budget-nocontract")


@contextmanager
def _progress(label: str) -> Iterator[Callable[[float, float], None]]:
    """A progress bar on a TTY (rich), nothing otherwise (CI logs, pipes)."""
    if not sys.stderr.isatty():
        yield lambda _now, _end: None
        return
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        task = bar.add_task(label, total=1.0)
        yield lambda now, end: bar.update(task, completed=(now / end) if end > 0 else 1.0)


@click.command("sim")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="slurm-ml.yaml whose policy knobs to simulate (default $SLURM_ML_CONFIG, "
                   "then slurm_ml/share/slurm-ml.yaml); its cluster is replaced by --gpus nodes.")
@click.option("--scenario", "scenario_path", type=click.Path(dir_okay=False), default=None,
              help="A what-if as one YAML file (docs/simulator.md); flags override it.")
@click.option("--trace", "spec", default=None,
              help="KIND[:PATH][?KEY=VALUE]: philly, chronus, gavel, tiresias, "
                   "pollux?duration_s=N (default: the traces shipped in slurm_ml/data/).")
@click.option("--policy", "policies", multiple=True, type=click.Choice(POLICIES),
              help="Policy to run (repeat to compare side by side; default: all four).")
@click.option("--start-hours", type=float, default=None,
              help="Skip this many hours of the trace.")
@click.option("--hours", type=float, default=None,
              help="Simulate this many hours of arrivals (default: the whole trace).")
@click.option("--gpus", type=int, default=None,
              help="Cluster size (default: what the trace implies, e.g. Philly's VC nodes).")
@click.option("--scale", type=float, default=None,
              help="Arrival-rate factor (2 = twice as many jobs per hour).")
@click.option("--load", "--demand", "demand", type=float, default=None,
              help="Pick --scale so that the offered load (GPU-hours requested inside the "
                   "judged window / capacity) is this, e.g. 2.5.")
@click.option("--debug-rate", type=float, default=None,
              help="Inject debug jobs (1 GPU, 10 min, 15-min protection) per team per hour.")
@click.option("--unallocated", type=float, default=None,
              help="Fraction of the trace's jobs submitted as unallocated work (QOS free, "
                   "preempted by Slurm for alloc jobs); Ai2 saw 18%% of GPU time.")
@click.option("--cycle-s", type=float, default=None,
              help="Policy cycle in simulated seconds (default: the engine's).")
@click.option("--partition-by-team", is_flag=True,
              help="Each team runs only on its own nodes (Philly's VC quotas, sizes from "
                   "philly_vc.csv); --gpus is then ignored. For calibration.")
@click.option("--seed", type=int, default=None, help="Random seed (default 0).")
@click.option("--report", "report_dir", type=click.Path(file_okay=False), default=None,
              help="Write report.json, index.html and PNG charts here.")
@click.option("--json", "as_json", is_flag=True, help="Print the summaries as JSON.")
def sim_cmd(*, config_path: str | None, scenario_path: str | None, spec: str | None,
            policies: tuple[str, ...], start_hours: float | None,
            hours: float | None, gpus: int | None, scale: float | None, demand: float | None,
            debug_rate: float | None, unallocated: float | None, cycle_s: float | None,
            partition_by_team: bool, seed: int | None,
            report_dir: str | None, as_json: bool) -> None:
    """Replay a real trace through the same policy code the daemon and admission run, on
    a virtual clock, and compare policies: per-team delivered vs owed GPU-hours, queue
    waits per job class, occupancy, preemptions, fragmentation, starvation.

    Exit codes: 0 ok; 2 bad input (config, trace file, options).
    """
    import dataclasses

    from slurm_ml.config import ConfigError
    from slurm_ml.sim import scenario, traces
    from slurm_ml.sim.engine import SimSettings, simulate
    from slurm_ml.sim.metrics import compare, summarize, targets
    from slurm_ml.sim.report import check_report_deps
    from slurm_ml.sim.scenario_file import DebugMix, Scenario, load_scenario
    from slurm_ml.sim.traces import DEFAULT_GPUS_PER_NODE

    base_path = assets.config_path(config_path)
    base = load_config_or_exit(base_path)
    # before a minute of simulating, not after: the report must not fail then
    if report_dir and (why := check_report_deps(Path(report_dir))):
        fail(f"--report: {why}", EXIT_BAD_INPUT)
    if scale is not None and demand is not None:
        fail("give --scale or --load, not both", EXIT_BAD_INPUT)
    try:
        sc = load_scenario(scenario_path) if scenario_path else Scenario()
    except ValueError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    if scale is not None or demand is not None:  # a flag overrides either file knob
        sc = dataclasses.replace(sc, scale=scale, target_load=demand)
    if debug_rate is not None:
        sc = dataclasses.replace(sc, debug=dataclasses.replace(
            sc.debug or DebugMix(), rate_per_team_per_hour=debug_rate))
    sc = dataclasses.replace(
        sc,
        trace=spec or sc.trace or "philly",
        start_hours=start_hours if start_hours is not None else (sc.start_hours or 0.0),
        hours=hours if hours is not None else sc.hours,
        nodes=gpus // (sc.gpus_per_node or DEFAULT_GPUS_PER_NODE) if gpus else sc.nodes,
        unallocated=unallocated if unallocated is not None else (sc.unallocated or 0.0),
        seed=seed if seed is not None else (sc.seed or 0),
        policies=tuple(policies) or sc.policies or POLICIES,
    )
    bad = [p for p in sc.policies or () if p not in POLICIES]
    if bad:
        fail(f"{sc.source}: unknown policy {', '.join(bad)} (known: {', '.join(POLICIES)})",
             EXIT_BAD_INPUT)
    if sc.policy:
        base = _with_overrides(base_path, sc.policy, sc.source)
    spec = sc.trace or "philly"
    start_hours = sc.start_hours or 0.0
    hours = sc.hours
    scale, demand = sc.scale, sc.target_load
    unallocated = sc.unallocated or 0.0
    seed = sc.seed or 0
    per_node = sc.gpus_per_node or DEFAULT_GPUS_PER_NODE
    debug = sc.debug or DebugMix()
    try:
        trace = traces.load_trace(spec)
        if start_hours or hours is not None:
            end = trace.span_s + 1 if hours is None else (start_hours + hours) * 3600
            trace = scenario.slice_trace(trace, start_hours * 3600, end)
        if not trace.jobs:
            fail(f"no jobs in {spec} between hour {start_hours:g} and "
                 f"{'the end' if hours is None else f'hour {start_hours + hours:g}'}",
                 EXIT_BAD_INPUT)
        vc_nodes = traces.default_vc_nodes()
        if gpus is not None and gpus % per_node:
            fail(f"--gpus {gpus} is not a whole number of {per_node}-GPU nodes", EXIT_BAD_INPUT)
        size = (sc.nodes * per_node if sc.nodes
                else scenario.implied_cluster_gpus(trace, vc_nodes, per_node))
        if demand is not None:
            scale = scenario.arrival_scale_for_load(trace, size, demand)
        if scale is not None and scale != 1:
            trace = scenario.scale_arrivals(trace, scale)
        if unallocated:
            trace = scenario.mark_unallocated(trace, unallocated, seed=seed)
        if per_node != DEFAULT_GPUS_PER_NODE:
            trace = scenario.reclassify(trace, per_node)
        if debug.rate_per_team_per_hour:
            for n, (size_gpus, p) in enumerate(sorted(debug.gpus.items())):
                trace = scenario.inject_debug_jobs(
                    trace, debug.rate_per_team_per_hour * p, gpus=size_gpus,
                    duration_s=debug.duration_s, min_runtime_s=debug.min_runtime_s,
                    seed=seed * 1000 + n)
        weights = (dict(sc.weights) if sc.weights is not None
                   else scenario.team_weights(trace, vc_nodes, gpus_per_node=per_node))
        missing = sorted(set(trace.teams) - set(weights))
        if missing and sc.weights is not None:
            fail(f"{sc.source}: budgets.weights has no weight for trace team(s) "
                 f"{', '.join(missing)}", EXIT_BAD_INPUT)
        cfg = scenario.cluster_config(
            # a weighted team with no job in this slice still holds its budget
            base, size, weights,
            users={**{t: traces.vc_user(t) for t in weights}, **trace.team_users()},
            gpus_per_node=per_node,
            gpu_type=sc.gpu_type, leaf_nodes=sc.leaf_nodes or 32)
        if partition_by_team:
            from slurm_ml.sim.partition import partition_by_team as partitioned

            if gpus is not None:
                fail("--partition-by-team sizes each team from philly_vc.csv: drop --gpus",
                     EXIT_BAD_INPUT)
            cfg, trace = partitioned(cfg, trace, vc_nodes)
            size = sum(vc_nodes.values()) * DEFAULT_GPUS_PER_NODE
    except (ValueError, ConfigError) as exc:  # TraceError is a ValueError
        fail(str(exc), EXIT_BAD_INPUT)
    settings = SimSettings() if cycle_s is None else dataclasses.replace(SimSettings(),
                                                                         cycle_s=cycle_s)
    try:
        ratio: float | None = scenario.demand_ratio(trace, size)
    except ValueError:  # one arrival instant: no rate to speak of
        ratio = None
    shown = "n/a" if ratio is None else f"{ratio:.2f}x"
    click.echo(f"simulating {len(trace.jobs)} jobs of {len(trace.teams)} teams on {size} GPUs "
               f"({trace.description}); demand {shown} capacity", err=True)
    results = []
    for name in sc.policies or POLICIES:
        with _progress(f"sim {name}") as tick:
            result = simulate(cfg, trace.jobs, name, settings=settings, progress=tick)
        click.echo(f"  {name}: {(result.end_s - result.start_s) / 86400:.1f} simulated days "
                   f"in {result.wall_s:.1f} s", err=True)
        results.append(result)
    # Judge the policies while work arrives: the drain after the last arrival (only the
    # longest jobs still running) would dilute occupancy and waits alike.
    window = (trace.jobs[0].submit_s, max(trace.jobs[-1].submit_s, trace.jobs[0].submit_s + 1))
    summaries = [summarize(r, window=window, workload=trace.jobs) for r in results]
    scenario_info: dict[str, Any] = {
        "trace": spec, "source": trace.source, "description": trace.description,
        "jobs": len(trace.jobs), "teams": len(trace.teams), "gpus": size,
        "scale": scale or 1.0, "target_load": demand,
        "offered_load": summaries[0].offered_load if summaries else None,
        "judged_window_s": list(summaries[0].judged_window or ()) if summaries else None,
        "resolved": sc.as_dict(),
        "debug_rate_per_team_per_hour": debug.rate_per_team_per_hour, "seed": seed,
        "unallocated_fraction": unallocated,
        "demand_ratio": None if ratio is None else round(ratio, 3),
        "cycle_s": settings.cycle_s, "measured_window_s": list(window),
        "partitioned_by_team": partition_by_team,
    }
    if report_dir:
        from slurm_ml.sim.report import write_report

        page = write_report(Path(report_dir), results, summaries,
                            title=f"slurm-ml sim: {spec}", scenario=scenario_info)
        click.echo(f"report: {page}", err=True)
    data = {"scenario": scenario_info,
            "policies": [{**s.as_dict(), "targets": [t.as_dict() for t in targets(s)]}
                         for s in summaries]}
    emit(data, as_json, compare(summaries))


def _with_overrides(path: Path, overrides: Any, source: str) -> Any:
    """The base config file's YAML with the scenario's policy knobs merged in, read by
    the one strict config parser (so an unknown knob is an error, not ignored)."""
    import yaml

    from slurm_ml.config import ConfigError, parse_config

    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}

    def merge(into: Any, extra: Any) -> Any:
        if isinstance(into, dict) and isinstance(extra, dict):
            return {**into, **{k: merge(into.get(k), v) for k, v in extra.items()}}
        return extra

    try:
        return parse_config(merge(data, overrides), source=f"{path} + {source} policy")
    except ConfigError as exc:
        fail(f"invalid policy overrides in {source}:\n{exc}", EXIT_BAD_INPUT)
