"""``slurm-ml sim``: replay a trace through the production policies before changing them
(registered on the main group by ``slurm_ml.cli``)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from slurm_ml import assets
from slurm_ml.cli.common import EXIT_BAD_INPUT, EXIT_FAILED, emit, fail, load_config_or_exit
from slurm_ml.cli.sim_sweep import sweep_cmd, sweep_point_cmd

POLICIES = ("fifo", "slurm-fairshare", "budget", "budget-nocontract")  # sim.prepare's


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


@click.group("sim", invoke_without_command=True)
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="slurm-ml.yaml whose policy knobs to simulate (default $SLURM_ML_CONFIG, "
                   "then the packaged conf/slurm-ml.yaml); its cluster is replaced by --gpus "
                   "nodes.")
@click.option("--scenario", "scenario_path", type=click.Path(dir_okay=False), default=None,
              help="A what-if as one YAML file (docs/simulator.md); flags override it.")
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE",
              help="Set one scenario key, as if written in the --scenario file (checked by "
                   "the same rules), e.g. --set engine.cycle_s=60 or --set "
                   "policy.fast_lane.preempt_cap_fraction=0.02; VALUE is YAML. Repeatable; "
                   "works without --scenario too.")
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
              help="Inject this many debug jobs per team per hour (10 min, 15-min "
                   "protection; 1 GPU unless the scenario's debug.gpus draws other sizes).")
@click.option("--unallocated", type=float, default=None,
              help="Fraction of the trace's jobs submitted as unallocated work (QOS free, "
                   "preempted by Slurm for alloc jobs); Ai2 saw 18% of GPU time.")
@click.option("--cycle-s", type=float, default=None,
              help="Policy cycle in simulated seconds (default: the engine's).")
@click.option("--partition-by-team", is_flag=True,
              help="Each team runs only on its own nodes (Philly's VC quotas, sizes from "
                   "philly_vc.csv); --gpus is then ignored. For calibration.")
@click.option("--seed", type=int, default=None, help="Random seed (default 0).")
@click.option("--report", "report_dir", type=click.Path(file_okay=False), default=None,
              help="Write report.json, index.html and PNG charts here.")
@click.option("--json", "as_json", is_flag=True, help="Print the summaries as JSON.")
@click.pass_context
def sim_cmd(ctx: click.Context, *, config_path: str | None, scenario_path: str | None,
            overrides: tuple[str, ...], spec: str | None,
            policies: tuple[str, ...], start_hours: float | None,
            hours: float | None, gpus: int | None, scale: float | None, demand: float | None,
            debug_rate: float | None, unallocated: float | None, cycle_s: float | None,
            partition_by_team: bool, seed: int | None,
            report_dir: str | None, as_json: bool) -> None:
    """Replay a real trace through the same policy code the daemon and admission run, on
    a virtual clock, and compare policies: per-team delivered vs owed GPU-hours, queue
    waits per job class, occupancy, preemptions, fragmentation, starvation.

    `slurm-ml sim sweep` runs one scenario at several values of one knob.

    Exit codes: 0 ok; 1 the results were printed but --report could not write its page
    or report.json (the errors say why); 2 bad input (config, trace file, options).
    """
    if ctx.invoked_subcommand is not None:
        given = [p.opts[0] for p in ctx.command.params
                 if ctx.params.get(p.name or "") not in (None, False, ())]
        if given:  # `sim --hours 5 sweep ...` would silently drop --hours
            fail(f"`slurm-ml sim {ctx.invoked_subcommand}` takes its own options: put "
                 f"{', '.join(given)} after "
                 f"{ctx.invoked_subcommand}", EXIT_BAD_INPUT)
        return
    import dataclasses

    from slurm_ml.config import ConfigError
    from slurm_ml.sim.metrics import baseline_of, compare, targets
    from slurm_ml.sim.prepare import prepare, run_policy, scenario_info, summaries
    from slurm_ml.sim.report import check_report_deps
    from slurm_ml.sim.scenario_file import (
        DebugMix,
        Scenario,
        load_scenario,
        parse_override,
        parse_scenario,
    )
    from slurm_ml.sim.traces import DEFAULT_GPUS_PER_NODE

    base_path = assets.config_path(config_path)
    base = load_config_or_exit(base_path)
    # before a minute of simulating, not after: the report must not fail then
    if report_dir and (why := check_report_deps(Path(report_dir))):
        fail(f"--report: {why}", EXIT_BAD_INPUT)
    if scale is not None and demand is not None:
        fail("give --scale or --load, not both", EXIT_BAD_INPUT)
    try:
        sets = tuple(parse_override(text) for text in overrides)
        if scenario_path:
            sc = load_scenario(scenario_path, sets)
        else:  # an empty scenario file, so --set is checked by the file's rules
            sc = parse_scenario("{}\n", "--set", sets) if sets else Scenario()
    except ValueError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    if scale is not None or demand is not None:  # a flag overrides either file knob
        sc = dataclasses.replace(sc, scale=scale, target_load=demand)
    if debug_rate is not None:
        sc = dataclasses.replace(sc, debug=dataclasses.replace(
            sc.debug or DebugMix(), rate_per_team_per_hour=debug_rate))
    if gpus is not None:
        per_node = sc.gpus_per_node or DEFAULT_GPUS_PER_NODE
        if sc.node_classes is not None:
            fail(f"--gpus cannot resize {sc.source}'s node_classes: edit the file",
                 EXIT_BAD_INPUT)
        if partition_by_team:
            fail("--partition-by-team sizes each team from philly_vc.csv: drop --gpus",
                 EXIT_BAD_INPUT)
        if gpus % per_node or gpus < per_node:
            fail(f"--gpus {gpus} is not a whole number of {per_node}-GPU nodes",
                 EXIT_BAD_INPUT)
        sc = dataclasses.replace(sc, nodes=gpus // per_node)
    sc = dataclasses.replace(
        sc, trace=spec or sc.trace,
        start_hours=start_hours if start_hours is not None else sc.start_hours,
        hours=hours if hours is not None else sc.hours,
        unallocated=unallocated if unallocated is not None else sc.unallocated,
        seed=seed if seed is not None else sc.seed,
        policies=tuple(policies) or sc.policies,
        cycle_s=cycle_s if cycle_s is not None else sc.cycle_s,
        partition_by_team=partition_by_team or sc.partition_by_team)
    try:
        prep = prepare(sc, base)
    except ConfigError as exc:
        fail(f"invalid scenario in {sc.source}:\n{exc}", EXIT_BAD_INPUT)
    except ValueError as exc:  # ScenarioError and TraceError are ValueErrors
        fail(str(exc), EXIT_BAD_INPUT)
    trace, size = prep.trace, prep.gpus
    shown = "n/a" if prep.demand_ratio is None else f"{prep.demand_ratio:.2f}x"
    click.echo(f"simulating {len(trace.jobs)} jobs of {len(trace.teams)} teams on {size} GPUs "
               f"({trace.description}); demand {shown} capacity", err=True)
    results = []
    for name in prep.policies:
        with _progress(f"sim {name}") as tick:
            result = run_policy(prep, name, progress=tick)
        click.echo(f"  {name}: {(result.end_s - result.start_s) / 86400:.1f} simulated days "
                   f"in {result.wall_s:.1f} s", err=True)
        results.append(result)
    judged = summaries(prep, results)
    info = scenario_info(prep, judged)
    unwritten: list[str] = []
    if report_dir:
        from slurm_ml.sim.report import write_report

        page = write_report(Path(report_dir), results, judged,
                            title=f"slurm-ml sim: {prep.scenario.trace}", scenario=info,
                            unwritten=unwritten, clock=prep.clock)
        click.echo(f"report: NOT written: {', '.join(unwritten)} (the errors above say "
                   f"why); the results follow" if unwritten else f"report: {page}", err=True)
    data = {"scenario": info,
            "policies": [{**s.as_dict(),
                          "targets": [t.as_dict() for t in targets(s, baseline_of(judged))]}
                         for s in judged]}
    emit(data, as_json, compare(judged))
    if unwritten:
        sys.exit(EXIT_FAILED)


sim_cmd.add_command(sweep_cmd)  # the subcommands, from a module of their own
sim_cmd.add_command(sweep_point_cmd)
