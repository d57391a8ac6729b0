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
    _dsn,
    _dsn_opt,
    _job_id,
    _slurm,
    _store,
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
    from slurm_ml.store.errors import StoreError

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
    samples: list[Any] = []
    rows: list[Any] = []
    target = _dsn(cfg, dsn)
    store_error: str | None = None if target else NO_DATABASE
    if target:
        store = _store(cfg, target)
        try:
            samples = store.util_samples_for(job_id)
            rows = store.job_gpu_stats_of(job_id)
        except StoreError as exc:
            store_error = str(exc)
        finally:
            store.close()
    stats = job_stats(job_id, cfg=cfg, job=job, acct=acct, samples=samples, rows=rows,
                      now=now, store_error=store_error)
    emit(jobstats_json(stats), as_json, jobstats_text(jobstats_json(stats)))
    if store_error is not None and stats.use.source != "summary":
        fail(f"the database could not be read and the job has no summary: its GPU use is "
             f"unknown ({store_error})")
    sys.exit(0)
