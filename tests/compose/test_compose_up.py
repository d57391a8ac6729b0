"""The docker compose cluster for real: build the image, `docker compose up`, submit a
job through slurm-ml's admission, tear it all down.

Skipped, saying why, where no Docker engine answers (docker.from_env().ping()) or the
`docker compose` plugin is missing. The build fetches Debian packages and PyPI wheels:
allow it ~10 minutes the first time. Set SLURM_ML_COMPOSE_KEEP=1 to leave the cluster up
after the test (then `docker compose -p slurm-ml-test down -v`).
"""

from __future__ import annotations

import gc
import json
import os
import re
import subprocess
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
PROJECT = "slurm-ml-test"
IMAGE = "slurm-ml:dev"
UP_TIMEOUT_S = 900

# The image build (~10 minutes the first time) and `compose up --wait` (UP_TIMEOUT_S) run in
# the first test's setup: far more than the 300 s default.
pytestmark = [pytest.mark.compose, pytest.mark.timeout(UP_TIMEOUT_S + 1800)]


def _engine() -> Any:
    try:
        import docker
    except ImportError:
        pytest.skip("the docker Python SDK is not installed (pip install -e '.[dev]')")
    reason = None
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # any failure to reach the engine means: no Docker here
        reason = f"no Docker engine answers ({type(exc).__name__}: {exc})"
    if reason is not None:
        # docker's UnixHTTPConnection.connect() leaves its socket unclosed when the engine's
        # socket is missing; collect it here, where that ResourceWarning is expected, rather
        # than let it fail whichever later test the garbage collector happens to run in.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
        pytest.skip(reason)
    return client


def compose(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", "compose", "-p", PROJECT, "-f", str(REPO / "docker-compose.yml"), *args],
        cwd=REPO, capture_output=True, text=True, timeout=timeout, check=check)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    client = _engine()
    try:
        compose("version", timeout=30)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"`docker compose` is not available: {exc}")
    client.images.build(path=str(REPO), dockerfile="devcluster/Dockerfile", tag=IMAGE, rm=True)
    try:
        up = compose("up", "-d", "--no-build", "--wait", "--wait-timeout", str(UP_TIMEOUT_S),
                     timeout=UP_TIMEOUT_S + 60, check=False)
        if up.returncode != 0:
            logs = compose("logs", "--no-color", "--tail", "80", timeout=60, check=False)
            pytest.fail(f"docker compose up failed:\n{up.stderr}\n{logs.stdout[-20000:]}")
        yield client
    finally:
        if os.environ.get("SLURM_ML_COMPOSE_KEEP") != "1":
            compose("down", "-v", "--remove-orphans", timeout=300, check=False)


def in_ctld(*argv: str, user: str | None = None) -> str:
    cmd = ["runuser", "-u", user, "--", *argv] if user else list(argv)
    res = compose("exec", "-T", "slurmctld", *cmd, timeout=60, check=False)
    assert res.returncode == 0, f"{' '.join(cmd)}: {res.stdout}{res.stderr}"
    return res.stdout


def show_job(job_id: int) -> dict[str, str]:
    line = in_ctld("scontrol", "-o", "show", "job", str(job_id)).strip()
    fields: dict[str, str] = {}
    # AdminComment's JSON holds spaces: take it whole, then split the rest on spaces.
    m = re.search(r"AdminComment=(slurm-ml \{.*?\})(?= \w+=|$)", line)
    if m:
        fields["AdminComment"] = m.group(1)
        line = line.replace(m.group(0), "")
    for token in line.split():
        key, _, value = token.partition("=")
        fields.setdefault(key, value)
    return fields


def test_sbatch_goes_through_slurm_ml(cluster: Any) -> None:
    out = in_ctld("sbatch", "--parsable", "--chdir=/tmp", "--gres=gpu:a100_80g:2",
                  "--wrap", "sleep 2", user="alice")
    job_id = int(out.strip().split(";")[0])
    job = show_job(job_id)
    admin = job.get("AdminComment", "")
    assert admin.startswith("slurm-ml {"), job
    record = json.loads(admin.removeprefix("slurm-ml "))
    assert isinstance(record, dict) and record
    assert job["QOS"] in ("alloc", "free")  # routed by budget
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        state = show_job(job_id).get("JobState", "")
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
            break
        time.sleep(2)
    assert state == "COMPLETED", show_job(job_id)


def test_impossible_request_is_rejected_with_a_reason(cluster: Any) -> None:
    res = compose("exec", "-T", "slurmctld", "runuser", "-u", "bob", "--", "sbatch",
                  "--chdir=/tmp", "--gpus=64", "--wrap", "true", timeout=60, check=False)
    assert res.returncode != 0
    assert "slurm-ml" in res.stderr or "GPU" in res.stderr, res.stderr


def test_every_service_is_healthy(cluster: Any) -> None:
    ps = compose("ps", "--format", "json", timeout=60)
    rows = [json.loads(line) for line in ps.stdout.splitlines() if line.strip().startswith("{")]
    if not rows and ps.stdout.strip().startswith("["):
        rows = json.loads(ps.stdout)
    health = {r["Service"]: r.get("Health", "") for r in rows}
    for service, state in health.items():
        assert state == "healthy", f"{service}: {state or 'no healthcheck'}"
    assert {"slurmctld", "slurmdbd", "gpu01", "gpu02", "submitd", "reconciler"} <= set(health)
