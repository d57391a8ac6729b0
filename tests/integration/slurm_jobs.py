"""Submitting jobs as a researcher and reading their state back from the real slurmctld,
shared by the integration modules."""

from __future__ import annotations

import json
import os
import re
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

from slurm_ml import proc
from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.slurm.parse import parse_oneliner
from slurm_ml.submitd.client import ask

SLURM_ML = str(Path(sys.executable).parent / "slurm-ml")


def show(job_id: int) -> dict[str, str]:
    """``scontrol -o show job``, as a field dict."""
    out = proc.run(["scontrol", "-o", "show", "job", str(job_id)]).stdout
    return parse_oneliner(out.strip().splitlines()[0])


def wait_state(job_id: int, states: set[str], timeout_s: float = 90) -> dict[str, str]:
    """Poll until the job is in one of ``states``; AssertionError with its fields if not."""
    deadline = time.monotonic() + timeout_s
    while True:
        fields = show(job_id)
        if fields["JobState"] in states:
            return fields
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} still {fields['JobState']}: {fields}")
        time.sleep(1)


def sbatch(user: str, *args: str, jobs: list[int]) -> int:
    """``sbatch ARGS`` as ``user`` (output discarded); the id is appended to ``jobs``."""
    workdir = os.path.join(os.environ["SLURM_ML_DEVCLUSTER"], "jobs")
    res = proc.run(["runuser", "-u", user, "--", "sbatch", "--parsable", f"--chdir={workdir}",
                    "--output=/dev/null", *args], check=False, timeout_s=30)
    assert res.returncode == 0, res.stderr
    jobs.append(int(res.stdout.strip().split(";")[0]))
    return jobs[-1]


def sbatch_timed(user: str, account: str, *args: str, jobs: list[int]) -> tuple[int, float]:
    """``sbatch ARGS`` as ``user`` charged to ``account`` (output discarded; the id is
    appended to ``jobs``): (job id, wall time of the submission), for a wait bound."""
    workdir = os.path.join(os.environ["SLURM_ML_DEVCLUSTER"], "jobs")
    at = time.time()
    res = proc.run(["runuser", "-u", user, "--", "sbatch", "--parsable", f"--chdir={workdir}",
                    "--output=/dev/null", f"--account={account}", *args],
                   check=False, timeout_s=30)
    assert res.returncode == 0, res.stderr
    jobs.append(int(res.stdout.strip().split(";")[0]))
    return jobs[-1], at


def sbatch_charged(user: str, account: str, *args: str) -> int:
    """``sbatch ARGS`` as ``user`` charged to ``account`` with a 15-minute limit (output
    discarded): the reconciler tests' jobs. The caller cancels them."""
    workdir = os.path.join(os.environ["SLURM_ML_DEVCLUSTER"], "jobs")
    res = proc.run(["runuser", "-u", user, "--", "sbatch", "--parsable", f"--chdir={workdir}",
                    "--output=/dev/null", f"--account={account}", "--time=15", *args],
                   check=False, timeout_s=30)
    assert res.returncode == 0, res.stderr
    return int(res.stdout.strip().split(";")[0])


def daemon_config(path: Path, *, weights: dict[str, float] | None = None,
                  **policy: dict[str, Any]) -> Path:
    """The default config with ``policy`` section updates (and program ``weights``),
    metrics off, a lock key of its own (tests never wait on another daemon's lock), no
    wake socket (test daemons would share the default path) and its spool beside
    ``path``."""
    data = yaml.safe_load(DEFAULT_CONFIG.read_text())
    for prog in data["budgets"]["programs"]:
        prog["weight"] = (weights or {}).get(prog["name"], prog["weight"])
    for section, knobs in policy.items():
        data["policy"][section].update(knobs)
    data["daemon"].update(metrics_port=0, lock_key=int(uuid.uuid4().int % (2**62)) + 1,
                          wake_socket="")
    data["store"]["spool_dir"] = str(path.parent / "spool")
    path.write_text(yaml.safe_dump(data))
    return path


def daemon_once(cfg: Path, dsn: str) -> dict[str, Any]:
    """One real ``slurm-ml daemon --once --json`` cycle against ``dsn`` (as $SLURM_ML_DSN,
    like the installed service); its JSON report."""
    res = proc.run([SLURM_ML, "daemon", "--config", str(cfg), "--once", "--json"],
                   check=False, timeout_s=180, env={**os.environ, "SLURM_ML_DSN": dsn})
    assert res.returncode == 0, res.stderr[-3000:]
    data: dict[str, Any] = json.loads(res.stdout)
    return data


def refresh_submitd(sock: Path | None = None) -> None:
    """Make submitd (on ``sock``, by default the dev cluster's socket) read the store now
    and wait until it has: until a refresh that began
    after the request has finished (one already under way when it came may have read
    the store before the caller's writes; waiting for the next generation only was
    seen to return with the old state in CI)."""
    if sock is None:
        from slurm_ml.devcluster.layout import Layout

        sock = Layout(Path(os.environ["SLURM_ML_DEVCLUSTER"])).submitd_socket
    request = ask(sock, {"v": 1, "op": "refresh"})["request"]
    deadline = time.monotonic() + 15
    while ask(sock, {"v": 1, "op": "stats"})["stats"]["refresh_served"] < request:
        assert time.monotonic() < deadline, "submitd did not refresh its state"
        time.sleep(0.2)


def daemon_view(cfg_path: Path) -> Any:
    """What the daemon would see and decide now under ``cfg_path`` (nothing applied), for
    the requeue tests' explanations of a miss: a namespace of ``cfg``, ``now``, ``obs``,
    ``plan``, ``running`` (the policy's running jobs) and ``positions``."""
    from types import SimpleNamespace

    from slurm_ml.config import load_config
    from slurm_ml.daemon import views
    from slurm_ml.daemon.observe import observe
    from slurm_ml.daemon.plan import plan_cycle
    from slurm_ml.policy import contracts
    from slurm_ml.slurm.client import CliSlurm

    cfg = load_config(cfg_path)
    now = int(time.time())
    obs = observe(cfg, CliSlurm(), None, now)
    plan = plan_cycle(cfg, obs)
    running = views.running_jobs(cfg, obs.jobs)
    return SimpleNamespace(cfg=cfg, now=now, obs=obs, plan=plan, running=running,
                           positions=contracts.allocation_positions(plan.fair, running))


def unreachable_slurm_conf(slurm_conf: str, into: Path) -> Path:
    """A copy of the cluster's slurm.conf (with its gres.conf and topology.conf) in
    ``into`` whose controller port nobody listens on: Slurm commands retry, then time out.
    Whatever port the cluster runs on (`devcluster up --ports-offset` moves it)."""
    here = Path(slurm_conf)
    text, n = re.subn(r"(?m)^SlurmctldPort=\d+$", "SlurmctldPort=16999", here.read_text())
    assert n == 1, f"{slurm_conf}: no single SlurmctldPort line"
    conf = into / "slurm.conf"
    conf.write_text(text)
    for name in ("gres.conf", "topology.conf"):
        (into / name).write_text((here.parent / name).read_text())
    return conf
