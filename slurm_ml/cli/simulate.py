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
@click.option("--trace", "spec", default="philly", show_default=True,
              help="KIND[:PATH][?KEY=VALUE]: philly, chronus, gavel, tiresias, "
                   "pollux?duration_s=N (default: the traces shipped in slurm_ml/data/).")
@click.option("--policy", "policies", multiple=True, type=click.Choice(POLICIES),
              help="Policy to run (repeat to compare side by side; default: all four).")
@click.option("--start-hours", type=float, default=0.0, show_default=True,
              help="Skip this many hours of the trace.")
@click.option("--hours", type=float, default=None,
              help="Simulate this many hours of arrivals (default: the whole trace).")
@click.option("--gpus", type=int, default=None,
              help="Cluster size (default: what the trace implies, e.g. Philly's VC nodes).")
@click.option("--scale", type=float, default=None,
              help="Arrival-rate factor (2 = twice as many jobs per hour).")
@click.option("--demand", type=float, default=None,
              help="Pick --scale so that demand is this many times capacity (e.g. 2.5).")
@click.option("--debug-rate", type=float, default=0.0, show_default=True,
              help="Inject debug jobs (1 GPU, 10 min, 15-min protection) per team per hour.")
@click.option("--unallocated", type=float, default=0.0, show_default=True,
              help="Fraction of the trace's jobs submitted as unallocated work (QOS free, "
                   "preempted by Slurm for alloc jobs); Ai2 saw 18%% of GPU time.")
@click.option("--cycle-s", type=float, default=None,
              help="Policy cycle in simulated seconds (default: the engine's).")
@click.option("--partition-by-team", is_flag=True,
              help="Each team runs only on its own nodes (Philly's VC quotas, sizes from "
                   "philly_vc.csv); --gpus is then ignored. For calibration.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--report", "report_dir", type=click.Path(file_okay=False), default=None,
              help="Write report.json, index.html and PNG charts here.")
@click.option("--json", "as_json", is_flag=True, help="Print the summaries as JSON.")
def sim_cmd(*, config_path: str | None, spec: str, policies: tuple[str, ...], start_hours: float,
            hours: float | None, gpus: int | None, scale: float | None, demand: float | None,
            debug_rate: float, unallocated: float, cycle_s: float | None,
            partition_by_team: bool, seed: int,
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
    from slurm_ml.sim.traces import DEFAULT_GPUS_PER_NODE

    base = load_config_or_exit(assets.config_path(config_path))
    if scale is not None and demand is not None:
        fail("give --scale or --demand, not both", EXIT_BAD_INPUT)
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
        size = gpus or scenario.implied_cluster_gpus(trace, vc_nodes)
        if demand is not None:
            scale = scenario.arrival_scale_for(trace, size, demand)
        if scale is not None and scale != 1:
            trace = scenario.scale_arrivals(trace, scale)
        if unallocated:
            trace = scenario.mark_unallocated(trace, unallocated, seed=seed)
        if debug_rate:
            trace = scenario.inject_debug_jobs(trace, debug_rate, seed=seed)
        cfg = scenario.trace_config(base, trace, size, vc_nodes)
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
    for name in policies or POLICIES:
        with _progress(f"sim {name}") as tick:
            result = simulate(cfg, trace.jobs, name, settings=settings, progress=tick)
        click.echo(f"  {name}: {(result.end_s - result.start_s) / 86400:.1f} simulated days "
                   f"in {result.wall_s:.1f} s", err=True)
        results.append(result)
    # Judge the policies while work arrives: the drain after the last arrival (only the
    # longest jobs still running) would dilute occupancy and waits alike.
    window = (trace.jobs[0].submit_s, max(trace.jobs[-1].submit_s, trace.jobs[0].submit_s + 1))
    summaries = [summarize(r, window=window) for r in results]
    scenario_info: dict[str, Any] = {
        "trace": spec, "source": trace.source, "description": trace.description,
        "jobs": len(trace.jobs), "teams": len(trace.teams), "gpus": size,
        "scale": scale or 1.0, "debug_rate_per_team_per_hour": debug_rate, "seed": seed,
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
