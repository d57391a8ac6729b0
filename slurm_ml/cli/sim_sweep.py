"""``slurm-ml sim sweep``: one scenario at several values of one knob, on this machine's
cores or as a Slurm job array, gathered into one table and one chart
(the logic is ``slurm_ml.sim.sweep``; this module is its flags and its output)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from slurm_ml import assets
from slurm_ml.cli.common import EXIT_BAD_INPUT, EXIT_FAILED, emit, fail, load_config_or_exit

POLICIES = ("fifo", "slurm-fairshare", "budget", "budget-nocontract")  # sim.prepare's


@contextmanager
def _bar(label: str, total: int) -> Iterator[Callable[[int, str], None]]:
    """``tick(done, line)``: a rich bar on a TTY, else ``line`` on stderr (CI logs)."""
    if not sys.stderr.isatty():
        yield lambda _done, line: click.echo(line, err=True)
        return
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda done, _line: bar.update(task, completed=done)


@click.command("sweep")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="slurm-ml.yaml whose policy knobs to simulate (as for `slurm-ml sim`).")
@click.option("--scenario", "scenario_path", type=click.Path(dir_okay=False), required=True,
              help="The scenario file (docs/simulator.md) every point starts from.")
@click.option("--vary", required=True, metavar="KNOB=V1,V2,...",
              help="The knob, as a dotted path into the scenario file, and its values, e.g. "
                   "engine.cycle_s=60,300,600 or policy.fairshare.window_hours=72,168,336.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True,
              help="Directory for points/, sweep.json, sweep.md and sweep.png; points "
                   "already there with the same scenario are not run again.")
@click.option("--policy", "policies", multiple=True, type=click.Choice(POLICIES),
              help="Policy to run at each point (repeat; default: the file's, else all four).")
@click.option("--hours", type=float, default=None,
              help="Simulate this many hours of arrivals (overrides the file's slice.hours).")
@click.option("--jobs", type=click.IntRange(min=1), default=None,
              help="Points run at once on this machine (default: its CPU count).")
@click.option("--on-slurm", is_flag=True,
              help="Run the points as one Slurm job array instead, and wait for it.")
@click.option("--partition", default=None, help="With --on-slurm: the partition to use.")
@click.option("--account", default=None, help="With --on-slurm: the account to charge.")
@click.option("--time-limit", type=click.IntRange(min=1), default=None,
              help="With --on-slurm: each task's time limit in minutes.")
@click.option("--poll-s", type=click.FloatRange(min=0.1), default=5.0, hidden=True,
              help="With --on-slurm: seconds between looks at the array.")
@click.option("--json", "as_json", is_flag=True, help="Print sweep.json.")
def sweep_cmd(*, config_path: str | None, scenario_path: str, vary: str, out_dir: str,
              policies: tuple[str, ...], hours: float | None, jobs: int | None,
              on_slurm: bool, partition: str | None, account: str | None,
              time_limit: int | None, poll_s: float, as_json: bool) -> None:
    """Run one scenario at each value of one knob and write one table (sweep.md) and one
    chart (sweep.png) of each measure against it, per policy: worst and median team
    delivered/owed, debug and large-job p90 wait, occupancy, GPU-hours lost.

    Each point is written to OUT/points/ as it finishes, so a rerun only runs the points
    that are missing or whose scenario changed. With --on-slurm the points run as one
    job array on --partition (each task: `sim sweep-point`), gathered when it ends.

    Exit codes: 0 ok; 1 a point failed (the others are still written); 2 bad input.
    """
    from slurm_ml.sim import sweep as sw
    from slurm_ml.sim.report import check_report_deps

    if on_slurm and not partition:
        fail("--on-slurm needs --partition (the partition the admin set aside for sweeps)",
             EXIT_BAD_INPUT)
    if not on_slurm and (partition or account or time_limit):
        fail("--partition, --account and --time-limit go with --on-slurm", EXIT_BAD_INPUT)
    base_path = assets.config_path(config_path)
    base = load_config_or_exit(base_path)
    out = Path(out_dir)
    if why := check_report_deps(out):
        fail(f"--out: {why}", EXIT_BAD_INPUT)
    try:
        sweep = sw.plan(scenario_path, vary, out, config_path=base_path, hours=hours,
                        policies=policies, base=base)
    except ValueError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    out.mkdir(parents=True, exist_ok=True)
    todo, total = sweep.todo(), len(sweep.points)
    click.echo(f"sweep {sweep.knob}: {total} points, {total - len(todo)} done already, "
               f"{len(todo)} to run" + (" on Slurm" if on_slurm and todo else ""), err=True)
    failed = _run_slurm(sweep, partition or "", account, time_limit, poll_s) if on_slurm \
        else _run_local(sweep, jobs)
    data = sw.write_outputs(sweep)
    click.echo(f"wrote {out / 'sweep.md'}, {out / 'sweep.png'}, {out / 'sweep.json'}",
               err=True)
    emit(data, as_json, sw.render_table(data))
    if failed:
        for i, why in sorted(failed.items()):
            click.echo(f"slurm-ml: error: point {sweep.knob}={sweep.points[i].label}: {why}",
                       err=True)
        fail(f"{len(failed)} of {total} points failed: {sw.failed_names(sweep, failed)} "
             "(rerun to retry only those)", EXIT_FAILED)


def _run_local(sweep: Any, jobs: int | None) -> dict[int, str]:
    from slurm_ml.sim import sweep as sw

    todo = sweep.todo()
    count = [0]
    with _bar("sweep", len(todo)) as tick:
        def progress(p: Any, err: str | None) -> None:
            count[0] += 1
            state = "done" if err is None else f"FAILED: {err}"
            tick(count[0], f"  [{count[0]}/{len(todo)}] {sweep.knob}={p.label} {state}")

        return sw.run_local(sweep, jobs=jobs or os.cpu_count(), progress=progress)


def _run_slurm(sweep: Any, partition: str, account: str | None, time_limit: int | None,
               poll_s: float) -> dict[int, str]:
    from slurm_ml.sim import sweep as sw
    from slurm_ml.slurm.client import CliSlurm
    from slurm_ml.slurm.errors import SlurmError

    todo = len(sweep.todo())
    last = [-1]
    with _bar("array", todo) as tick:
        def submitted(job_id: int, n: int) -> None:
            click.echo(f"submitted array job {job_id} ({n} tasks) to partition {partition}",
                       err=True)

        def progress(done: int, n: int) -> None:
            if done != last[0]:
                last[0] = done
                tick(done, f"  array: {done}/{n} tasks done")

        try:
            return sw.run_on_slurm(sweep, CliSlurm(), partition=partition,
                                   python=sys.executable, time_limit_min=time_limit,
                                   account=account, poll_s=poll_s, on_submit=submitted,
                                   progress=progress)
        except SlurmError as exc:
            fail(f"slurm: {exc}", EXIT_FAILED)
        except KeyboardInterrupt:
            fail("interrupted: the array was cancelled; points already written are kept, "
                 "a rerun submits the rest", EXIT_FAILED)


@click.command("sweep-point", hidden=True)
@click.option("--manifest", "manifest", type=click.Path(dir_okay=False, exists=True),
              required=True)
@click.option("--index", type=int, required=True)
def sweep_point_cmd(*, manifest: str, index: int) -> None:
    """One point of a sweep's manifest (what each task of `sweep --on-slurm` runs).

    Exit codes: 0 ok; 1 the point failed (OUT/points/NAME.err says why); 2 bad input.
    """
    from slurm_ml.sim import sweep as sw

    try:
        sweep = sw.load_manifest(manifest)
    except (ValueError, KeyError, OSError) as exc:
        fail(f"{manifest}: {exc}", EXIT_BAD_INPUT)
    if not 0 <= index < len(sweep.points):
        fail(f"--index {index}: the manifest has points 0..{len(sweep.points) - 1}",
             EXIT_BAD_INPUT)
    p = sweep.points[index]
    try:
        data = sw.run_point(sweep, index)
    except Exception as exc:
        fail(f"point {sweep.knob}={p.label}: {type(exc).__name__}: {exc}", EXIT_FAILED)
    click.echo(json.dumps({"point": p.name, "wall_s": data["wall_s"],
                           "measures": data["measures"]}, indent=1))
