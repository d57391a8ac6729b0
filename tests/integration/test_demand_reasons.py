"""Demand is only what waits for GPUs, on the real dev cluster (issue 16 item 2).

vision's dave runs one a100_40g job and queues a dependency chain behind it (two whole
a100_80g nodes, ``--dependency=afterok``) and a held job (``--hold``); nlp's alice runs a
resumable v100 job. The real daemon runs one cycle: the budget it records for either
team is what fair share gives without the chain and the held job (before issue 16 it
counted their 24 billing GPUs as detection's demand), it requeues nothing, and
``budget status`` lists the three jobs apart, with Slurm's reasons.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from slurm_jobs import daemon_config, show, wait_state
from slurm_jobs import sbatch_charged as sbatch

from slurm_ml import proc
from slurm_ml.config import load_config
from slurm_ml.daemon.observe import observe
from slurm_ml.daemon.plan import current_fair_share
from slurm_ml.policy.fairshare import FairShare
from slurm_ml.slurm.client import CliSlurm
from slurm_ml.store.postgres import PostgresStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
SLURM_ML = str(Path(sys.executable).parent / "slurm-ml")


def env_with(dsn: str) -> dict[str, str]:
    return {**os.environ, "SLURM_ML_DSN": dsn}


@pytest.fixture(scope="module")
def cfg_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 3-minute window in 20 s buckets (only this test's jobs count), requeues allowed
    at once: a wrongly counted demand would show as a requeue of alice's job."""
    return daemon_config(
        tmp_path_factory.mktemp("demand") / "slurm-ml.yaml",
        fairshare={"window_hours": 0.05, "owed_bucket_s": 20, "cycle_interval_s": 3},
        contracts={"preempt_after_wait_s": 0, "preempt_cap_fraction": 0.5},
        reclaim={"fix_runaway": False})


@pytest.fixture(scope="module")
def jobs(slurm_conf: str) -> Iterator[dict[str, int]]:
    ids: dict[str, int] = {}
    try:
        ids["nlp"] = sbatch("alice", "llm-pretrain", "--gres=gpu:v100:4", "--requeue",
                            "--time-min=1", "--wrap", "sleep 600")
        ids["anchor"] = sbatch("dave", "detection", "--gres=gpu:a100_40g:8", "--wrap",
                               "sleep 600")
        for key in ("nlp", "anchor"):
            wait_state(ids[key], {"RUNNING"}, timeout_s=120)
        ids["chain1"] = sbatch("dave", "detection", "--gres=gpu:a100_80g:8",
                               f"--dependency=afterok:{ids['anchor']}", "--wrap", "sleep 60")
        ids["chain2"] = sbatch("dave", "detection", "--gres=gpu:a100_80g:8",
                               f"--dependency=afterok:{ids['chain1']}", "--wrap", "sleep 60")
        ids["held"] = sbatch("dave", "detection", "--gres=gpu:a100_80g:8", "--hold",
                             "--wrap", "sleep 60")
        yield ids
    finally:
        if ids:
            proc.run(["scancel", *map(str, ids.values())], check=False)


def _by_account(fair: FairShare) -> dict[str, tuple[float | None, float, float, float]]:
    return {s.account: (s.ratio, s.owed, s.demand, s.pending_gpus) for s in fair.standings
            if s.kind == "project"}


def test_a_dependency_chain_and_a_held_job_change_no_ratio_and_are_listed_apart(
        cfg_path: Path, pg_module_dsn: str, jobs: dict[str, int]) -> None:
    blocked = {jobs["chain1"]: "Dependency", jobs["chain2"]: "Dependency",
               jobs["held"]: "JobHeldUser"}
    deadline = time.monotonic() + 60
    while {j: show(j)["Reason"] for j in blocked} != blocked:  # slurmctld sets them at once
        assert time.monotonic() < deadline, {j: show(j) for j in blocked}
        time.sleep(1)
    time.sleep(25)  # a bucket or so with the blocked jobs pending

    res = proc.run([SLURM_ML, "daemon", "--config", str(cfg_path), "--once", "--json"],
                   check=False, timeout_s=180, env=env_with(pg_module_dsn))
    assert res.returncode == 0, res.stderr[-3000:]
    cycle: dict[str, Any] = json.loads(res.stdout)
    assert [a for a in cycle["actions"] if a["kind"] == "requeue"] == [], cycle
    assert show(jobs["nlp"])["JobState"] == "RUNNING"
    with PostgresStore(pg_module_dsn) as store:
        snaps = {s.account: s for s in store.latest_budget_snapshots()}
    at = int(snaps["detection"].taken_at.timestamp())

    # the same moment, read again: fair share with and without the blocked jobs
    cfg = load_config(cfg_path)
    obs = observe(cfg, CliSlurm(), None, at)
    seen = {j.job_id: j.reason for j in obs.jobs if j.job_id in blocked}
    assert seen == blocked  # what 24.11 prints for them
    without = dataclasses.replace(obs, jobs=tuple(j for j in obs.jobs
                                                  if j.job_id not in blocked))
    got, base = _by_account(current_fair_share(cfg, obs)), _by_account(
        current_fair_share(cfg, without))
    assert got == base
    for account in ("detection", "llm-pretrain"):
        ratio, owed, _demand, _pending = base[account]
        assert ratio is not None and owed > 0, base
        assert snaps[account].owed_gpu_hours == pytest.approx(owed, rel=1e-9, abs=1e-9), (
            account, snaps[account], base)
    assert base["detection"][3] == 0.0  # nothing of detection waits for GPUs

    status = proc.run([SLURM_ML, "budget", "status", "--config", str(cfg_path), "--json"],
                      timeout_s=120, env=env_with(pg_module_dsn))
    data = json.loads(status.stdout)
    listed = {(e["account"], e["user"], e["reason"], e["jobs"], e["gpus"])
              for e in data["excluded_pending"]}
    assert listed == {("detection", "dave", "Dependency", 2, 16),
                      ("detection", "dave", "JobHeldUser", 1, 8)}, data["excluded_pending"]
    row = next(r for r in data["nodes"] if r["kind"] == "project"
               and r["account"] == "detection")
    assert row["pending_gpus"] == 0 and row["excluded_pending_gpus"] == 16.0 + 8.0
    assert row["excluded_pending"] == {"Dependency": 16.0, "JobHeldUser": 8.0}
    text = proc.run([SLURM_ML, "budget", "status", "--config", str(cfg_path)],
                    timeout_s=120, env=env_with(pg_module_dsn)).stdout
    assert "detection has 24 billing GPUs pending that are not demand" in text, text
