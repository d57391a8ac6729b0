"""Zombie verdicts on the real dev cluster need samples that cover the heartbeat on every
GPU of the job (issue 16): the real ``slurm-ml daemon --once`` gives no verdict for an
idle job with a GPU never sampled or a gap in its samples, ``slurm-ml why`` says why, and
the same job with its samples complete is warned.

The samples go straight into the database (the dev cluster runs no HealthCheckProgram);
the config has a 30 s heartbeat sampled every 10 s, so gaps over 20 s count.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from slurm_jobs import sbatch, wait_state

from slurm_ml import proc
from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.slurm.client import CliSlurm
from slurm_ml.slurm.runner import SlurmRunner
from slurm_ml.store.migrate import migrate
from slurm_ml.store.postgres import PostgresStore
from slurm_ml.store.records import UtilSample, derive_key

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
SLURM_ML = str(Path(sys.executable).parent / "slurm-ml")
HEARTBEAT, INTERVAL = 30, 10


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("zombie")
    data = yaml.safe_load(DEFAULT_CONFIG.read_text())
    pol = data["policy"]
    pol["reclaim"].update(zombie_heartbeat_s=HEARTBEAT, sample_interval_s=INTERVAL,
                          zombie_grace_s=0, fix_runaway=False)
    pol["contracts"].update(preempt_cap_fraction=0.01)  # zombies only: no budget requeues
    data["daemon"].update(metrics_port=0, lock_key=int(uuid.uuid4().int % (2**62)) + 1)
    data["store"]["spool_dir"] = str(base / "spool")
    path = base / "slurm-ml.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def dsn(pg_module_dsn: str) -> str:
    """A fresh database, migrated: the samples go in before the daemon's first cycle."""
    migrate(pg_module_dsn)
    return pg_module_dsn


@pytest.fixture(scope="module")
def idle_job(slurm_conf: str) -> Iterator[tuple[int, str, int]]:
    """A resumable 2-GPU job that does nothing: (job id, node, its GPU count)."""
    ids: list[int] = []
    try:
        job = sbatch("bob", "--account=llm-pretrain", "--gres=gpu:2", "-N1", "--requeue",
                     "--time-min=1", "--time=15", "--wrap", "sleep 900", jobs=ids)
        fields = wait_state(job, {"RUNNING"}, timeout_s=120)
        slurm = CliSlurm(SlurmRunner(env={"SLURM_CONF": slurm_conf}, timeout_s=30))
        [seen] = slurm.list_jobs(job_ids=[job])
        assert seen.start_time is not None
        wait = seen.start_time + 2 * HEARTBEAT - time.time()
        if wait > 0:
            time.sleep(wait)  # longer than the heartbeat, and room for a gap before it
        yield job, fields["NodeList"], seen.total_gpus
    finally:
        if ids:
            proc.run(["scancel", *map(str, ids)], check=False)


def record(dsn: str, job: int, node: str, gpu: int, ago: list[int]) -> None:
    """Idle samples (0 %, 30 GB held) of one GPU, ``ago`` seconds before now."""
    now = datetime.now(UTC)
    with PostgresStore(dsn) as store:
        for a in ago:
            at = now - timedelta(seconds=a)
            store.record_util_sample(UtilSample(
                idempotency_key=derive_key("test-coverage", job, gpu, at), job_id=job,
                node=node, gpu_index=gpu, sampled_at=at, util_pct=0.0, mem_used_mb=30_000))


def run(dsn: str, *args: str) -> dict[str, Any]:
    res = proc.run([SLURM_ML, *args, "--json"], check=False, timeout_s=180,
                   env={**os.environ, "SLURM_ML_DSN": dsn})
    assert res.returncode == 0, res.stderr[-3000:]
    data: dict[str, Any] = json.loads(res.stdout)
    return data


def warned(cycle: dict[str, Any], job: int) -> bool:
    return ("zombie_warn", job) in [(a["kind"], a["job_id"]) for a in cycle["actions"]]


EVERY_10S = list(range(0, 2 * HEARTBEAT - 10, 10))  # back to before the heartbeat's start


def test_no_verdict_without_samples_covering_every_gpu_then_a_warning(
        config: Path, dsn: str, idle_job: tuple[int, str, int]) -> None:
    job, node, gpus = idle_job
    assert gpus >= 2, gpus
    for gpu in range(gpus - 1):  # the last GPU is never sampled
        record(dsn, job, node, gpu, EVERY_10S)

    cycle = run(dsn, "daemon", "--config", str(config), "--once")
    assert not warned(cycle, job), cycle
    why = run(dsn, "why", str(job), "--config", str(config))["zombie"]
    assert why["state"] == "no_verdict", why
    assert f"1 of its {gpus} GPUs has no sample of this run" in why["text"], why

    # the last GPU: one reading before the heartbeat and one now, 90 s apart
    record(dsn, job, node, gpus - 1, [0, 90])
    cycle = run(dsn, "daemon", "--config", str(config), "--once")
    assert not warned(cycle, job), cycle
    why = run(dsn, "why", str(job), "--config", str(config))["zombie"]
    assert why["state"] == "no_verdict", why
    assert f"{node} GPU {gpus - 1}'s samples cover" in why["text"], why
    assert f"> 2 x {INTERVAL} s" in why["text"], why

    # the same job with every GPU's samples complete is a zombie
    for gpu in range(gpus):
        record(dsn, job, node, gpu, EVERY_10S)
    cycle = run(dsn, "daemon", "--config", str(config), "--once")
    assert warned(cycle, job), cycle
    assert run(dsn, "why", str(job), "--config", str(config))["zombie"]["state"] == "zombie"
