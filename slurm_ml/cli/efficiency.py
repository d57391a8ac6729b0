"""``slurm-ml jobstats JOBID`` (researchers) and ``slurm-ml efficiency`` (operators): what
GPU jobs used of what they held (registered on the main group by ``slurm_ml.cli``)."""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from slurm_ml import assets
from slurm_ml.cli.common import EXIT_BAD_INPUT, SLURM_HINT, emit, fail, load_config_or_exit
from slurm_ml.cli.reconciler import (
    NO_DATABASE,
    _config_opt,
    _dsn_opt,
    _job_id,
    _read_store,
    _slurm,
)


@click.command("jobstats")
@click.argument("job_id", callback=_job_id)
@_config_opt
@_dsn_opt
@click.option("--json", "as_json", is_flag=True, help="Machine-readable result.")
def jobstats_cmd(job_id: int, config_path: str | None, dsn: str | None, as_json: bool) -> None:
    """What a job used of what it held, and what to change: per GPU the mean and peak
    utilisation, peak memory against the GPU's memory and the time idle; CPU and memory
    efficiency (sacct, as seff computes them); and notes in the job's own flags (GPUs it
    did not use, the zombie pattern, a smaller GPU type, data starvation), each with the
    evidence it rests on. A running job shows its samples so far. Once the samples have
    expired, the summary the epilog kept in the job's AdminComment is read instead.

    Exit codes: 0 ok (figures that were not measured say so); 1 Slurm unavailable, or
    the database could not be read and the job has no summary to fall back on; 2 bad
    config, a bad job id, or a job neither slurmctld nor slurmdbd knows.
    """
    from slurm_ml.ops.jobstats import job_stats, jobstats_json, jobstats_text
    from slurm_ml.slurm.errors import SlurmError

    cfg = load_config_or_exit(assets.config_path(config_path))
    slurm = _slurm(cfg)
    now = int(time.time())
    try:
        job = next((j for j in slurm.list_jobs(job_ids=[job_id]) if j.job_id == job_id), None)
        acct = slurm.job_accounting(job_id)
    except SlurmError as exc:
        fail(f"cannot read Slurm: {exc}{SLURM_HINT}")
    if job is None and acct is None:
        fail(f"job {job_id}: neither slurmctld nor slurmdbd knows it", EXIT_BAD_INPUT)
    read, store_error = _read_store(cfg, dsn, lambda store: (
        store.util_samples_for(job_id), store.job_gpu_stats_of(job_id)))
    samples, rows = read if read is not None else ([], [])
    stats = job_stats(job_id, cfg=cfg, job=job, acct=acct, samples=samples, rows=rows,
                      now=now, store_error=store_error)
    emit(jobstats_json(stats), as_json, jobstats_text(jobstats_json(stats)))
    if store_error is not None and stats.use.source != "summary":
        fail(f"the database could not be read and the job has no summary: its GPU use is "
             f"unknown ({store_error})")
    sys.exit(0)


_UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def _when(_ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """``7d``/``12h``/``30m`` ago, ``now``, or an ISO date-time (local time without a zone)."""
    from datetime import datetime

    if value is None:
        return None
    text = value.strip().lower()
    if text == "now":
        return int(time.time())
    if text[:-1].isdigit() and text[-1:] in _UNITS:
        return int(time.time()) - int(text[:-1]) * _UNITS[text[-1]]
    try:
        return int(datetime.fromisoformat(value).timestamp())
    except ValueError:
        raise click.BadParameter(f"{value!r}: write 7d, 12h, 30m, now or an ISO date-time "
                                 f"such as 2026-12-01T08:00") from None


@click.command("efficiency")
@_config_opt
@_dsn_opt
@click.option("--since", "start", callback=_when, default="7d", show_default=True,
              help="Start of the range: 7d, 12h, 30m ago, or an ISO date-time.")
@click.option("--until", "end", callback=_when, default="now", show_default=True,
              help="End of the range: now, a span ago, or an ISO date-time.")
@click.option("--by", type=click.Choice(["team", "user", "partition"]), default="team",
              show_default=True, help="Group by Slurm account (team), user or partition.")
@click.option("--top", type=click.IntRange(0, 1000), default=10, show_default=True,
              help="How many of the most wasteful jobs to list.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable result.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              metavar="FILE.png", help="Also draw the GPU-hours per group (matplotlib).")
def efficiency_cmd(  # noqa: PLR0917  (click passes one argument per option)
        config_path: str | None, dsn: str | None, start: int, end: int, by: str,
        top: int, as_json: bool, plot_path: str | None) -> None:
    """GPU-hours allocated, computing and idle per team, user or partition over a time
    range (sacct for the allocations; the epilog's AdminComment summaries, else its rows
    in PostgreSQL, for the use), the jobs that wasted most and how, and the GPU-hours of
    jobs admission widened on measured GPU memory.

    Exit codes: 0 ok; 1 Slurm unavailable, the database could not be read (the table is
    still printed, jobs without a summary counted as not measured), or the plot could
    not be written; 2 bad config, a range that ends before it starts, or a --plot path
    that is not a .png in a writable directory.
    """
    from datetime import UTC, datetime
    from pathlib import Path

    from slurm_ml.cli.reconciler import _check_plot_path
    from slurm_ml.ops.efficiency import efficiency, efficiency_json, efficiency_text
    from slurm_ml.slurm.errors import SlurmError

    cfg = load_config_or_exit(assets.config_path(config_path))
    if end <= start:
        fail(f"--until ({end}) must be after --since ({start})", EXIT_BAD_INPUT)
    if plot_path:
        _check_plot_path(Path(plot_path))
    click.echo("reading slurmdbd (sacct) ...", err=True)
    try:
        jobs = _slurm(cfg).accounted_jobs(start, end)
    except SlurmError as exc:
        fail(f"cannot read Slurm: {exc}{SLURM_HINT}")
    since = datetime.fromtimestamp(start, UTC)
    stats, store_error = _read_store(cfg, dsn, lambda store: store.job_gpu_stats_since(since))
    rows: dict[int, list[Any]] = {}
    for r in stats or ():
        rows.setdefault(r.job_id, []).append(r)
    data = efficiency_json(efficiency(jobs, rows, cfg=cfg, start=start, end=end, by=by,
                                      top=top, store_error=store_error))
    emit(data, as_json, efficiency_text(data))
    if plot_path:
        from slurm_ml.ops.plot import plot_efficiency

        try:
            plot_efficiency(data, plot_path)
        except (OSError, ValueError) as exc:
            fail(f"cannot write the plot {plot_path}: {exc}")
        click.echo(f"wrote {plot_path}", err=True)
    if store_error is not None and store_error != NO_DATABASE:
        fail(f"the database could not be read: jobs without a summary are not measured "
             f"({store_error})")
