"""The docker compose cluster for real: build the image from host-built wheels, bring all
nine services up, and on it submit as a researcher through the real job_submit shim (a
widened job, a rejected one), drain a node with a replayed GPU fault, run a reconciler
cycle and read `budget status`, then tear everything down: containers, networks, volumes.

Skipped, saying why, where no Docker engine answers (`make engine` starts one) or no
compose implementation is installed: `docker compose` (v2) or Debian's `docker-compose`
(1.29). The first build fetches Debian packages (host network) and takes ~4 minutes; the
wheels come from the host (`pip wheel`), so the build needs no PyPI. Set
SLURM_ML_COMPOSE_KEEP=1 to leave the cluster up (then `docker-compose -p slurm-ml-test
down -v`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROJECT = "slurm-ml-test"
IMAGE = "slurm-ml:dev"
WHEELS = REPO / "devcluster" / "wheels"
UP_TIMEOUT_S = 900
SERVICES = {"init", "mariadb", "postgres", "slurmdbd", "submitd", "slurmctld", "gpu01",
            "gpu02", "reconciler"}
#: A100 GPU 6 with every NVLink down (Azure HPC health checks' bad_nvlink_status.txt, in
#: data/gpu, which the nodes mount read-only).
NVLINK_DOWN = "azhc_a100_gpu6_nvlink_status_all_inactive.txt"
ENV = "set -a; . /etc/slurm/slurm-ml.env; set +a; "  # the operator's settings (DSN)

pytestmark = [pytest.mark.compose, pytest.mark.timeout(UP_TIMEOUT_S + 1800)]


def sh(*argv: str, timeout: float = 120, check: bool = True
       ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, check=check)


def _engine_or_skip() -> None:
    if shutil.which("docker") is None:
        pytest.skip("no docker client on PATH (`make engine` installs docker.io)")
    try:
        info = sh("docker", "info", timeout=20, check=False)
    except subprocess.TimeoutExpired:
        pytest.skip("no Docker engine answers within 20 s (`make engine` starts one)")
    if info.returncode != 0:
        pytest.skip(f"no Docker engine answers (`make engine` starts one): "
                    f"{info.stderr.strip()[:200]}")


def _compose_cmd() -> list[str]:
    """`docker compose` (v2) where the plugin is installed, else Debian's docker-compose."""
    if sh("docker", "compose", "version", timeout=30, check=False).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.skip("no compose implementation: neither `docker compose` nor docker-compose")


COMPOSE: list[str] = []


#: Debian's docker-compose (v1) gives up on any one engine request after 60 s; on the vfs
#: storage driver removing a container deletes a full copy of the image (about 1.4 GB),
#: and `down` removing nine at once on 2 cores was seen to take longer. The test's own
#: timeouts bound the run instead.
COMPOSE_ENV = {"COMPOSE_HTTP_TIMEOUT": "600"}


def compose(*args: str, timeout: float = 120, check: bool = True
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMPOSE, "-p", PROJECT, "-f", str(REPO / "docker-compose.yml"),
                           *args], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          check=check, env={**os.environ, **COMPOSE_ENV})


def _project(kind: str) -> list[str]:
    """Names of the project's containers (incl. stopped), networks or volumes."""
    label = f"label=com.docker.compose.project={PROJECT}"
    cmd = {"container": ["docker", "ps", "-a", "--filter", label, "--format", "{{.Names}}"],
           "network": ["docker", "network", "ls", "--filter", label, "--format", "{{.Name}}"],
           "volume": ["docker", "volume", "ls", "--filter", label, "--format", "{{.Name}}"]}
    return sh(*cmd[kind], timeout=60).stdout.split()


def _service_states() -> dict[str, str]:
    """service -> "healthy", "exited 0", "starting", ..."""
    out: dict[str, str] = {}
    for name in _project("container"):
        doc = json.loads(sh("docker", "inspect", name, timeout=60).stdout)[0]
        service = doc["Config"]["Labels"]["com.docker.compose.service"]
        state = doc["State"]
        health = (state.get("Health") or {}).get("Status")
        out[service] = (health if health and state["Status"] == "running"
                        else f"{state['Status']} {state.get('ExitCode')}")
    return out


def _image_id() -> str | None:
    got = sh("docker", "image", "inspect", "-f", "{{.Id}}", IMAGE, timeout=60, check=False)
    return got.stdout.strip() or None if got.returncode == 0 else None


def _build_image() -> None:
    """Build IMAGE from host wheels; the image the tag left behind is removed, since each
    run's build is a new image (on the vfs storage driver about 5 GB of disk apiece: a
    day of runs filled the CI machine's disk, 2026-12-06)."""
    for old in WHEELS.glob("*.whl"):
        old.unlink()
    sh(sys.executable, "-m", "pip", "wheel", "-q", "-w", str(WHEELS), str(REPO), timeout=600)
    before = _image_id()
    build = sh("docker", "build", "--network", "host", "-f", "devcluster/Dockerfile",
               "-t", IMAGE, ".", timeout=1800, check=False)
    if build.returncode != 0:
        pytest.fail(f"image build failed:\n{build.stdout[-6000:]}\n{build.stderr[-4000:]}")
    if before is not None and before != _image_id():
        sh("docker", "rmi", before, timeout=300, check=False)  # in use elsewhere: it stays


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    _engine_or_skip()
    COMPOSE[:] = _compose_cmd()
    _build_image()
    try:
        up = compose("up", "-d", "--no-build", timeout=UP_TIMEOUT_S, check=False)
        if up.returncode != 0:
            pytest.fail(f"compose up failed:\n{up.stderr[-6000:]}")
        deadline = time.monotonic() + UP_TIMEOUT_S
        while time.monotonic() < deadline:
            states = _service_states()
            if set(states) == SERVICES and all(
                    s in ("healthy", "exited 0") for s in states.values()):
                break
            if any(s.startswith("exited") and s != "exited 0" for s in states.values()):
                break
            time.sleep(5)
        yield
    finally:
        if os.environ.get("SLURM_ML_COMPOSE_KEEP") != "1":
            compose("down", "-v", "--remove-orphans", timeout=300, check=False)


def in_svc(service: str, *argv: str, user: str | None = None, check: bool = True,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    cmd = ["runuser", "-u", user, "--", *argv] if user else list(argv)
    res = compose("exec", "-T", service, *cmd, timeout=timeout, check=False)
    if check:
        assert res.returncode == 0, f"{service}: {' '.join(cmd)}: {res.stdout}{res.stderr}"
    return res


def show_job(job_id: int) -> dict[str, str]:
    line = in_svc("slurmctld", "scontrol", "-o", "show", "job", str(job_id)).stdout.strip()
    fields: dict[str, str] = {}
    at = line.find("AdminComment=slurm-ml {")
    if at >= 0:  # the JSON record whole, whatever it holds
        start = line.index("{", at)
        _, end = json.JSONDecoder().raw_decode(line, start)
        fields["AdminComment"] = "slurm-ml " + line[start:end]
        line = line[:at] + line[end:]
    for token in line.split():
        key, _, value = token.partition("=")
        fields.setdefault(key, value)
    return fields


def wait_state(job_id: int, states: set[str], timeout_s: float = 180) -> dict[str, str]:
    deadline = time.monotonic() + timeout_s
    while True:
        job = show_job(job_id)
        if job.get("JobState") in states or time.monotonic() > deadline:
            return job
        time.sleep(2)


def test_every_service_comes_up_healthy(cluster: None) -> None:
    states = _service_states()
    assert set(states) == SERVICES, states
    assert states.pop("init") == "exited 0"
    assert all(s == "healthy" for s in states.values()), states


def test_a_researchers_job_is_widened_by_the_shim_and_runs(cluster: None) -> None:
    res = in_svc("slurmctld", "sbatch", "--parsable", "--chdir=/tmp",
                 "--gres=gpu:a100_80g:2", "--comment", "gpu_mem=35G", "--wrap", "sleep 30",
                 user="alice")  # 2 GPUs x 30 s: enough GPU-hours for budget status to show
    job_id = int(res.stdout.strip().split(";")[0])
    assert "GPU type widened from a100_80g to a100_80g|a100_40g" in res.stderr
    job = show_job(job_id)
    record = json.loads(job["AdminComment"].removeprefix("slurm-ml "))
    assert record["types"] == ["a100_80g", "a100_40g"] and record["need_gb"] == 35.0
    assert job["QOS"] == "alloc" and job["Features"] == "(a100_80g|a100_40g)"
    assert wait_state(job_id, {"COMPLETED", "FAILED", "CANCELLED"})["JobState"] == "COMPLETED"


def test_an_impossible_request_is_rejected_with_what_to_do(cluster: None) -> None:
    res = in_svc("slurmctld", "sbatch", "--chdir=/tmp", "--gpus=64", "--wrap", "true",
                 user="bob", check=False)
    assert res.returncode != 0
    assert "slurm-ml rejected this job" in res.stderr
    assert "Largest feasible request: --gpus=8" in res.stderr


def test_a_gpu_fault_drains_the_node_with_the_owned_reason(cluster: None) -> None:
    in_svc("gpu01", "env", "SLURM_ML_GPU_DATA=/srv/slurm-ml/gpu-data", "slurm-ml",
           "devcluster", "fault", "gpu01", NVLINK_DOWN, "--state-dir", "/var/lib/slurm-ml",
           "--config", "/etc/slurm-ml/slurm-ml.yaml")
    res = in_svc("slurmctld", "sbatch", "--parsable", "--chdir=/tmp", "-w", "gpu01",
                 "--gres=gpu:a100_80g:8", "--comment", "pin_gpu", "-t", "2", "--wrap",
                 "sleep 2", user="alice")
    job_id = int(res.stdout.strip().split(";")[0])
    deadline = time.monotonic() + 120
    reason = ""
    while time.monotonic() < deadline and not reason:
        reason = in_svc("slurmctld", "sinfo", "-R", "-h", "-n", "gpu01",
                        "-o", "%E").stdout.strip()
        time.sleep(2)
    in_svc("slurmctld", "scancel", str(job_id))
    assert reason == "slurm-ml: nvlink.active_links gpu6 (0/12 active)"
    assert "DRAIN" in in_svc("slurmctld", "sinfo", "-h", "-n", "gpu01",
                             "-o", "%T").stdout.upper()


def test_a_reconciler_cycle_and_budget_status(cluster: None) -> None:
    # The reconciler service holds the leader lock and runs its cycles; a dry run decides
    # without it, so one cycle's decisions can be read here.
    cycle = json.loads(in_svc("reconciler", "sh", "-c",
                              ENV + "slurm-ml daemon --once --dry-run --json").stdout)
    assert cycle["outcome"] != "passive" and not cycle["failed"], cycle
    logs = sh("docker", "logs", f"{PROJECT}_reconciler_1", timeout=60, check=False)
    if logs.returncode != 0:  # compose v2 names containers with dashes
        logs = sh("docker", "logs", f"{PROJECT}-reconciler-1", timeout=60)
    assert "event=cycle_end" in logs.stdout + logs.stderr
    status = json.loads(in_svc("reconciler", "sh", "-c",
                               ENV + "slurm-ml budget status --json").stdout)
    nodes = {n["path"]: n for n in status["nodes"]}
    # alice's 2 GPUs x 30 s (shown to 0.01 GPU-h)
    assert nodes["ml/nlp/llm-pretrain"]["delivered_gpu_hours"] >= 0.01


def test_zz_down_removes_containers_networks_and_volumes(cluster: None) -> None:
    if os.environ.get("SLURM_ML_COMPOSE_KEEP") == "1":
        pytest.skip("SLURM_ML_COMPOSE_KEEP=1: the cluster stays up")
    compose("down", "-v", "--remove-orphans", timeout=900)
    assert _project("container") == []
    assert _project("network") == []
    assert _project("volume") == []
