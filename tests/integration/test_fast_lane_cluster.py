"""Issue 18 on the real dev cluster: a researcher's debug job starts within 60 s on a full
cluster, through the fast lane, and ``slurm-ml why`` says how.

Every GPU is busy: allocated work of nlp (alice, ``--no-requeue``, so the contracts have
no victim) on the a100_80g nodes, unallocated work (QOS free, ``--time-min=0``) on the
rest, and a whole a100 node of vision's allocated work waiting behind them. The daemon
runs as a real loop with the default policy (the lane's own requeues: 0.02 of 40 GPUs
floors to none, so only Slurm's preemption makes room) on a database
of this module's own, its regular cycles 10 minutes apart; its first cycle records the
lane's room that admission reads. Then carol submits a debug job (1 GPU, a 10-minute
limit and contract). Admission puts it in the fast lane, so it ranks above every band,
and Slurm's preempt/qos preempts free work for it at once, with QOS free's 30 s grace.
Slurm itself would requeue that work only at its next 30-s time-limit sweep
(``policy.preempt_grace``): the daemon, woken by submitd, does it at the grace's end.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_jobs import daemon_config, refresh_submitd, show, wait_state
from slurm_jobs import sbatch_timed as sbatch
from woken_daemon import woken_daemon

from slurm_ml import proc
from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config
from slurm_ml.config.rules import associations
from slurm_ml.daemon.observe import observe
from slurm_ml.daemon.plan import plan_cycle
from slurm_ml.devcluster.cluster import DevCluster
from slurm_ml.devcluster.layout import Layout
from slurm_ml.policy.fairshare.lane import lane_site_factor
from slurm_ml.slurm.client import CliSlurm
from slurm_ml.store.postgres import PostgresStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
SLURM_ML = str(Path(sys.executable).parent / "slurm-ml")
#: the issue's bound on a debug job's wait on a full cluster
DEBUG_START_S = 60


@pytest.fixture
def woken(tmp_path: Path, pg_dsn: str, slurm_conf: str) -> Iterator[tuple[Path, Path, str]]:
    """The daemon with the default policy, regular cycles 10 minutes apart, woken by
    submitd (:func:`woken_daemon.woken_daemon`), on the test's own database. (config,
    daemon log, DSN)"""
    cfg = daemon_config(tmp_path / "lane.yaml", fairshare={"cycle_interval_s": 600})
    log = tmp_path / "daemon.log"
    with woken_daemon(cfg, pg_dsn, log):
        yield cfg, log, pg_dsn


def record_lane(dsn: str) -> None:
    """The budget snapshots of the daemon's plan for now, lane room included."""
    cfg = load_config(DEFAULT_CONFIG)
    plan = plan_cycle(cfg, observe(cfg, CliSlurm(), None, int(time.time())))
    assert any(s.lane_gpus is not None for s in plan.snapshots)
    with PostgresStore(dsn) as store:
        for snap in plan.snapshots:
            store.record_budget_snapshot(snap)


@pytest.fixture
def cluster(slurm_conf: str) -> DevCluster:
    root = Path(os.environ["SLURM_ML_DEVCLUSTER"])
    cl = DevCluster(load_config(DEFAULT_CONFIG), Layout(root), say=lambda _m: None,
                    config_path=DEFAULT_CONFIG)
    cl.start_submitd()
    return cl


def fill(jobs: list[int]) -> dict[str, list[int]]:
    """Every GPU busy: nlp's allocated work on both a100_80g nodes, free work elsewhere;
    vision's allocated a100_80g node waiting."""
    out: dict[str, list[int]] = {"alloc": [], "free": []}
    for _ in range(2):
        out["alloc"].append(sbatch("alice", "llm-pretrain", "--gres=gpu:a100_80g:8",
                                   "--no-requeue", "--time=30", "--wrap", "sleep 900",
                                   jobs=jobs)[0])
    for gres in ("a100_40g:8", "a100_40g:8", "v100:4", "v100:4"):
        out["free"].append(sbatch("bob", "llm-pretrain", f"--gres=gpu:{gres}", "--requeue",
                                  "--time-min=0", "--time=30", "--wrap", "sleep 900",
                                  jobs=jobs)[0])
    for job in out["alloc"] + out["free"]:
        wait_state(job, {"RUNNING"}, timeout_s=120)
    for job in out["free"]:
        assert show(job)["QOS"] == "free"
    out["waiting"] = [sbatch("dave", "detection", "--gres=gpu:a100_80g:8", "--time=30",
                             "--wrap", "sleep 900", jobs=jobs)[0]]
    wait_state(out["waiting"][0], {"PENDING"}, timeout_s=30)
    return out


def test_debug_job_starts_within_a_minute_on_a_full_cluster(
        woken: tuple[Path, Path, str], jobs: list[int]) -> None:
    cfg, log, dsn = woken
    held = fill(jobs)
    refresh_submitd()

    debug, submitted = sbatch("carol", "llm-eval", "--gres=gpu:1", "--time=10",
                              "--time-min=10", "--wrap", "sleep 300", jobs=jobs)
    fields = wait_state(debug, {"RUNNING"}, timeout_s=DEBUG_START_S + 30)
    waited = time.time() - submitted
    assert waited <= DEBUG_START_S, f"debug job {debug} waited {waited:.0f} s: {fields}\n" \
        f"{log.read_text()[-4000:]}"
    print(f"debug job {debug} waited {waited:.1f} s")
    # the woken cycle at the grace's end (if Slurm's sweep came first, it finds the
    # preemption done and has nothing to finish)
    deadline = time.monotonic() + 45
    while log.read_text().count("event=cycle_end") < 2:
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.5)
    dlog = log.read_text()

    conf = load_config(cfg)
    lane = lane_site_factor(conf.policy.fairshare, associations(conf.budgets))
    assert '"lane":1' in fields["AdminComment"], fields["AdminComment"]
    assert fields["QOS"] == "alloc"
    # free work made room: one free job was preempted, and requeued at its grace's end by
    # the daemon (woken by submitd), or by Slurm's sweep if that came first
    states = {j: show(j)["JobState"] for j in held["free"]}
    assert any(s != "RUNNING" for s in states.values()), states
    assert "event=wake account=llm-eval" in dlog, dlog[-3000:]
    finished = [int(j) for j in re.findall(r"event=preempt_requeue job=(\d+)", dlog)]
    assert all(j in held["free"] for j in finished), dlog[-3000:]
    assert show(held["waiting"][0])["JobState"] == "PENDING"  # nothing else jumped ahead

    env = {**os.environ, "SLURM_ML_DSN": dsn}
    why = proc.run([SLURM_ML, "why", str(debug), "--config", str(cfg), "--json"],
                   check=False, timeout_s=60, env=env)
    assert why.returncode == 0, why.stderr
    data = json.loads(why.stdout)
    assert data["lane"]["member"] is True and data["lane"]["site_factor"] == lane
    assert data["lane"]["admitted_in_lane"] is True
    text = proc.run([SLURM_ML, "why", str(debug), "--config", str(cfg)], check=False,
                    timeout_s=60, env=env).stdout
    assert "Fast lane" in text and "preempts unallocated" in text, text
    assert "s after its submission" in text, text
    # and a free job the daemon requeued says who did, and why
    for victim in finished:
        mine = proc.run([SLURM_ML, "why", str(victim), "--config", str(cfg), "--json"],
                        check=False, timeout_s=60, env=env)
        decided = json.loads(mine.stdout)["history"]
        assert [d["kind"] for d in decided] == ["preempt_requeue"], decided
        assert "grace ended" in decided[0]["reason"], decided


def test_a_long_job_of_the_same_researcher_does_not_take_the_lane(
        cluster: DevCluster, admin_dsn: str, jobs: list[int], tmp_path: Path) -> None:
    record_lane(admin_dsn)
    refresh_submitd()
    long_job, _ = sbatch("carol", "llm-eval", "--hold", "--gres=gpu:1", "--time=120",
                         "--wrap", "true", jobs=jobs)
    fields = show(long_job)
    assert '"lane"' not in fields["AdminComment"], fields["AdminComment"]
