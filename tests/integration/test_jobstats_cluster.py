"""jobstats and efficiency on the real dev cluster: samples in its PostgreSQL, the real
epilog (run by slurmd) writing the summary into the job's AdminComment through
sacctmgr, and ``slurm-ml jobstats`` reading it back once the samples are gone.

The dev cluster runs no HealthCheckProgram, so the utilisation samples the periodic
check would take go straight into the database, as in test_zombie_coverage.py; the
GPUs the epilog reads are the replayed captures.
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

import psycopg
import pytest
import yaml
from slurm_jobs import sbatch, wait_state

from slurm_ml import proc
from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.policy.admission.decision import read_record
from slurm_ml.policy.jobstats.summary import read_summary
from slurm_ml.store.postgres import PostgresStore
from slurm_ml.store.records import UtilSample, derive_key

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
SLURM_ML = str(Path(sys.executable).parent / "slurm-ml")


@pytest.fixture(scope="module")
def dsn(slurm_conf: str) -> str:
    """The dev cluster's own database: the epilog slurmd runs reads its samples there."""
    return os.environ["SLURM_ML_DSN"]


@pytest.fixture
def forget(dsn: str) -> Iterator[list[int]]:
    """Job ids whose samples and epilog rows the test leaves behind: removed after it."""
    ids: list[int] = []
    yield ids
    _drop(dsn, ids)


def _drop(dsn: str, ids: list[int]) -> None:
    if ids:
        with psycopg.connect(dsn) as conn:
            conn.execute("DELETE FROM util_samples WHERE job_id = ANY(%s)", (ids,))
            conn.execute("DELETE FROM job_gpu_stats WHERE job_id = ANY(%s)", (ids,))


def record(dsn: str, job: int, node: str, utils: dict[int, float], *, times: list[datetime],
           mem_mb: int = 30_000) -> None:
    with PostgresStore(dsn) as store:
        for at in times:
            for gpu, util in utils.items():
                store.record_util_sample(UtilSample(
                    idempotency_key=derive_key("test-jobstats", job, gpu, at), job_id=job,
                    node=node, gpu_index=gpu, sampled_at=at, util_pct=util,
                    mem_used_mb=mem_mb if util > 0 or mem_mb > 1024 else 300))


def jobstats(job: int, *args: str, dsn: str | None) -> dict[str, Any]:
    env = {**os.environ, "SLURM_ML_DSN": dsn or ""}
    res = proc.run([SLURM_ML, "jobstats", str(job), "--json", *args], check=False,
                   timeout_s=120, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    data: dict[str, Any] = json.loads(res.stdout)
    return data


def accounted_comment(job: int) -> str:
    return proc.run(["sacct", "-j", str(job), "-X", "-n", "-P", "-o", "AdminComment"]
                    ).stdout.strip()


def note(data: dict[str, Any], kind: str) -> str:
    texts = [n["text"] for n in data["notes"] if n["kind"] == kind]
    assert texts, f"no {kind} note: {data['notes']}"
    return str(texts[0])


def test_a_job_using_2_of_its_8_gpus_is_told_and_the_summary_outlives_its_samples(
        dsn: str, jobs: list[int], forget: list[int]) -> None:
    job = sbatch("alice", "--account=llm-pretrain", "--gres=gpu:8", "-N1", "--time=10",
                 "--wrap", "sleep 600", jobs=jobs)
    forget.append(job)
    node = wait_state(job, {"RUNNING"}, timeout_s=120)["NodeList"]
    now = datetime.now(UTC)
    record(dsn, job, node, {g: (93.0 if g < 2 else 0.0) for g in range(8)},
           times=[now + timedelta(seconds=s) for s in (0, 1, 2, 3)])

    running = jobstats(job, dsn=dsn)
    assert running["running"] and running["source"] == "samples"
    assert f"has not used 6 of its 8 GPUs ({node} GPUs 2-7)" in note(running, "unused_gpus")
    assert "--gres=gpu:2" in note(running, "unused_gpus")

    proc.run(["scancel", str(job)])
    deadline = time.monotonic() + 90
    while (summary := read_summary(accounted_comment(job))) is None:
        assert time.monotonic() < deadline, f"no summary in AdminComment: {accounted_comment(job)!r}"
        time.sleep(2)
    assert [u.gpu for u in summary.uses] == list(range(8))
    assert [u.idle_frac for u in summary.uses] == [0.0, 0.0] + [1.0] * 6
    record_ = read_record(accounted_comment(job))
    assert record_ is not None and record_["qos"] == "alloc" and "min_runtime" in record_

    ended = jobstats(job, dsn=dsn)
    assert not ended["running"] and ended["source"] == "samples"
    told = note(ended, "unused_gpus")
    assert f"did not use 6 of its 8 GPUs ({node} GPUs 2-7)" in told

    _drop(dsn, [job])  # the samples expire
    later = jobstats(job, dsn=dsn)
    assert later["source"] == "summary" and note(later, "unused_gpus") == told
    no_db = jobstats(job, dsn=None)  # a researcher without the database
    assert no_db["source"] == "summary" and no_db["store_error"]

    res = proc.run([SLURM_ML, "efficiency", "--since", "1h", "--by", "user", "--json"],
                   env={**os.environ, "SLURM_ML_DSN": dsn}, timeout_s=120)
    eff = json.loads(res.stdout)
    assert eff["figures_from"]["admin_comment_summary"] >= 1
    assert any(w["job_id"] == job and "unused_gpus" in w["how"] for w in eff["wasters"]), eff


@pytest.fixture(scope="module")
def short_heartbeat(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default config with a 12 s zombie heartbeat sampled every 4 s."""
    data = yaml.safe_load(DEFAULT_CONFIG.read_text())
    data["policy"]["reclaim"].update(zombie_heartbeat_s=12, sample_interval_s=4)
    data["daemon"].update(metrics_port=0, lock_key=int(uuid.uuid4().int % (2**62)) + 1)
    path = tmp_path_factory.mktemp("jobstats") / "slurm-ml.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_memory_held_with_no_compute_gets_the_zombie_note(
        dsn: str, jobs: list[int], forget: list[int], short_heartbeat: Path) -> None:
    job = sbatch("bob", "--account=llm-pretrain", "--gres=gpu:2", "-N1", "--time=10",
                 "--wrap", "sleep 600", jobs=jobs)
    forget.append(job)
    node = wait_state(job, {"RUNNING"}, timeout_s=120)["NodeList"]
    start = datetime.now(UTC)
    time.sleep(14)  # past the heartbeat
    times = [start + timedelta(seconds=s) for s in range(1, 15, 2)]
    record(dsn, job, node, {0: 0.0, 1: 0.0}, times=times, mem_mb=20_000)
    data = jobstats(job, "--config", str(short_heartbeat), dsn=dsn)
    assert data["zombie"] is not None and data["zombie"]["mem_mb"] == 20_000, data
    assert "20000 MB of memory with no compute" in note(data, "zombie")


def test_a_job_with_no_samples_says_not_measured(dsn: str, jobs: list[int]) -> None:
    job = sbatch("carol", "--account=llm-eval", "--gres=gpu:1", "--time=10", "--wrap",
                 "sleep 600", jobs=jobs)
    wait_state(job, {"RUNNING"}, timeout_s=120)
    data = jobstats(job, dsn=dsn)
    assert data["source"] == "none" and data["gpus_not_measured"] == 1
    assert "GPU use: not measured" in note(data, "not_measured")
