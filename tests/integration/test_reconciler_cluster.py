"""The reconciler daemon against the real dev cluster and a fresh PostgreSQL database.

One module-scoped workload fills the cluster with allocated work of the nlp program
(program budgets 70/30 in this test's config, a 3-minute window so that only this
test's usage counts): every a100 GPU and both v100 nodes, one v100 job resumable, one
not. Then researchers of both programs queue v100 jobs, and the daemon (the real
``slurm-ml daemon`` process, run as root like in production) decides.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from psycopg.conninfo import make_conninfo
from slurm_jobs import daemon_config, daemon_view, show, unreachable_slurm_conf, wait_state
from slurm_jobs import sbatch_charged as sbatch

from slurm_ml import proc
from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.store.postgres import PostgresStore
from slurm_ml.store.records import UtilSample, derive_key

# The module's workload (six jobs, each waited for up to 120 s) starts in the first test's
# setup; tests sleep past the minimum runtime and the zombie heartbeat (65 s, 61 s) and run
# daemon cycles of up to 180 s: more than the 300 s default.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]
REPO = Path(__file__).resolve().parents[2]
CONFIG = DEFAULT_CONFIG
SLURM_ML = str(Path(sys.executable).parent / "slurm-ml")
PAUSED_DAEMON = Path(__file__).with_name("paused_daemon.py")


# ------------------------------------------------------------------ helpers




def sprio_site(job_ids: list[int]) -> dict[int, int]:
    """SiteFactor of those of ``job_ids`` that sprio lists (pending, eligible ones). All
    jobs are asked for and filtered here: 24.11's ``sprio -j a,b`` exits 1 ("Invalid job
    id: a") when one of them is not listed (running, ended, begin time), where 22.05's
    leaves it out."""
    out = proc.run(["sprio", "-h", "-o", "%i %S"]).stdout
    rows = {int(a): int(b) for a, b in (line.split() for line in out.splitlines() if line)}
    return {j: rows[j] for j in job_ids if j in rows}


def with_dsn(dsn: str, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a slurm-ml process given ``dsn``: like the installed services,
    it reads $SLURM_ML_DSN, never --dsn (a command line shows the password in ps)."""
    return {**(os.environ if env is None else env), "SLURM_ML_DSN": dsn}


def daemon(cfg: Path, dsn: str, *args: str, env: dict[str, str] | None = None,
           check: bool = True) -> dict[str, Any]:
    res = proc.run([SLURM_ML, "daemon", "--config", str(cfg), "--once",
                    "--json", *args], check=False, timeout_s=180, env=with_dsn(dsn, env))
    if check:
        assert res.returncode == 0, res.stderr[-3000:]
    data: dict[str, Any] = json.loads(res.stdout)
    data["_stderr"] = res.stderr
    return data


def audit_rows(dsn: str, key_prefix: str | None = None) -> list[tuple[str, str, str]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT idempotency_key, action, target FROM audit_log "
                            "ORDER BY id").fetchall()
    return [(str(k), str(a), str(t)) for k, a, t in rows
            if key_prefix is None or str(k).startswith(key_prefix)]


def explain(cfg_path: Path) -> str:
    """Why the contracts planned nothing: positions, free GPUs, and per waiting job the
    blocker of every running job (printed when a requeue test fails)."""
    from slurm_ml.daemon import views
    from slurm_ml.daemon.plan import ledger
    from slurm_ml.policy import contracts, placement

    v = daemon_view(cfg_path)
    cfg, now, obs, running, pos = v.cfg, v.now, v.obs, v.running, v.positions
    free = placement.node_slots(placement.cluster_nodes(cfg, obs.nodes), running)
    out = [f"free={ {n: s.free for n, s in free.items()} }", f"positions={pos}"]
    for w in views.waiting_jobs(cfg, obs.jobs):
        p = pos.get(w.account)
        starved = p is not None and contracts.is_starved(now, w, p, free, cfg.policy.contracts)
        out.append(f"waiting {w} starved={starved}")
        out += [f"  running {r.job_id} {r.account} {r.gpu_type} protected={r.time_min_s} "
                f"ran={now - r.start} blocker={contracts.victim_blocker(now, r, w, positions=pos, ledger=ledger(()), cfg=cfg.policy.contracts)}"
                for r in running]
    return "\n".join(out)


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def dsn(pg_module_dsn: str) -> str:
    """A fresh database: the daemon's snapshots must not leak into submitd's."""
    return pg_module_dsn


def write_config(path: Path, **policy: dict[str, Any]) -> Path:
    """A 3-minute window in 20 s buckets, nlp 70 / vision 30, requeues at once (the
    signal-and-grace path has its own tests: test_apply_signal, test_requeue_checkpoint),
    zombies judged on 20 s samples over a minute; ``policy`` overrides per section."""
    sections: dict[str, dict[str, Any]] = {
        "fairshare": {"window_hours": 0.05, "owed_bucket_s": 20, "cycle_interval_s": 3},
        "contracts": {"preempt_after_wait_s": 0, "preempt_cap_fraction": 0.5,
                      "requeue_grace_s": 0},
        "reclaim": {"zombie_heartbeat_s": 60, "sample_interval_s": 20, "zombie_grace_s": 0,
                    "fix_runaway": False},
    }
    for section, knobs in policy.items():
        sections.setdefault(section, {}).update(knobs)
    return daemon_config(path, weights={"nlp": 70, "vision": 30}, **sections)


@pytest.fixture(scope="module")
def cfgs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("daemon")
    return {
        # no requeue budget: ranking only
        "rank": write_config(base / "rank.yaml", contracts={"preempt_cap_fraction": 0.01}),
        "act": write_config(base / "act.yaml"),
    }


@pytest.fixture(scope="module")
def workload(slurm_conf: str) -> Iterator[dict[str, int]]:
    """nlp (alice, llm-pretrain) fills the cluster with allocated work."""
    ids: dict[str, int] = {}
    try:
        for i, gtype in enumerate(("a100_80g", "a100_80g", "a100_40g")):
            ids[f"fill{i}"] = sbatch("alice", "llm-pretrain", f"--gres=gpu:{gtype}:8",
                                     "--no-requeue", "--wrap", "sleep 900")
        ids["zombie"] = sbatch("bob", "llm-pretrain", "--gres=gpu:a100_40g:8", "--requeue",
                               "--time-min=1", "--wrap", "sleep 900")
        ids["resumable"] = sbatch("alice", "llm-pretrain", "--gres=gpu:v100:4", "--requeue",
                                  "--time-min=1", "--wrap", "sleep 900")
        ids["pinned"] = sbatch("alice", "llm-pretrain", "--gres=gpu:v100:4", "--no-requeue",
                               "--time-min=1", "--wrap", "sleep 900")
        for job in ids.values():
            wait_state(job, {"RUNNING"}, timeout_s=120)
        ids["started"] = int(time.time())
        yield ids
    finally:
        jobs = [str(v) for k, v in ids.items() if k != "started"]
        if jobs:
            proc.run(["scancel", *jobs], check=False)


@pytest.fixture(scope="module")
def queued(workload: dict[str, int]) -> dict[str, int]:
    """A vision and an nlp researcher queue one v100 job each; both pend (no v100 free).
    vision also queues a whole a100 node, so that its demand (9.6 of 32 billing GPUs, its
    full 30%) makes nlp clearly over-served even if the cluster took a while to start
    nlp's jobs (pending time with idle GPUs is owed, not delivered)."""
    out = {"vision": sbatch("dave", "detection", "--gres=gpu:v100:4", "--wrap", "sleep 900"),
           "nlp": sbatch("alice", "llm-pretrain", "--gres=gpu:v100:4", "--wrap", "sleep 900"),
           "vision_big": sbatch("dave", "detection", "--gres=gpu:a100_80g:8", "--wrap",
                                "sleep 900")}
    for job in out.values():
        fields = wait_state(job, {"PENDING"}, timeout_s=120)
        assert fields["JobState"] == "PENDING"
    workload.update({f"queued_{k}": v for k, v in out.items()})
    return out


# ------------------------------------------------------------------ tests


def test_under_served_program_ranks_first_in_sprio_and_budget_status(
        cfgs: dict[str, Path], dsn: str, queued: dict[str, int], tmp_path: Path) -> None:
    time.sleep(25)  # a bucket or so in which vision waits while nlp holds everything
    cycle = daemon(cfgs["rank"], dsn)

    assert cycle["outcome"] == "acted", cycle
    site = sprio_site(list(queued.values()))
    assert site[queued["vision"]] > site[queued["nlp"]] > 0, site
    long = proc.run(["sprio", "-l", "-j", str(queued["vision"])]).stdout
    assert str(site[queued["vision"]]) in long
    status = proc.run([SLURM_ML, "budget", "status", "--config", str(cfgs["rank"]),
                       "--json"], timeout_s=120, env=with_dsn(dsn))
    data = json.loads(status.stdout)
    order = [(r["account"], r["user"]) for r in data["ranking"]]
    assert order.index(("detection", "dave")) < order.index(("llm-pretrain", "alice")), order
    png = tmp_path / "budget.png"
    proc.run([SLURM_ML, "budget", "status", "--config", str(cfgs["rank"]),
              "--plot", str(png)], timeout_s=120, env=with_dsn(dsn))
    assert png.read_bytes()[:4] == b"\x89PNG"
    by_acct = {r["account"]: r for r in data["nodes"] if r["kind"] == "program"}
    assert by_acct["nlp"]["budget_share"] == 0.7
    assert by_acct["nlp"]["delivered_gpu_hours"] > 0
    # vision ran nothing of this module's; an earlier module's jobs (test_demand_reasons'
    # detection jobs) may still fall in the 3-minute window, so compare, do not expect 0.
    assert by_acct["vision"]["delivered_gpu_hours"] < by_acct["nlp"]["delivered_gpu_hours"]
    assert by_acct["vision"]["pending_gpus"] > 0
    rank_of = {(r["account"], r["user"]): r["site_factor"] for r in data["ranking"]}
    assert rank_of[("detection", "dave")] > rank_of[("llm-pretrain", "alice")]
    # no requeue budget in this config: nothing was requeued
    assert cycle["counts"]["applied"] == 0, cycle
    why = proc.run([SLURM_ML, "why", str(queued["vision"]), "--config", str(cfgs["rank"]),
                    "--json"], timeout_s=120, env=with_dsn(dsn))
    answer = json.loads(why.stdout)
    assert answer["priority"]["site"] == site[queued["vision"]]
    assert answer["budget"]["association"]["rank"] == 1
    assert answer["admission"]["qos"] == "alloc"


def test_a_gang_that_has_waited_goes_above_every_band(
        cfgs: dict[str, Path], dsn: str, queued: dict[str, int], tmp_path: Path) -> None:
    """nlp ranks below vision, but nlp's two-node gang that has waited 3 s (the rule's
    threshold here) gets a SiteFactor above vision's band, so Slurm reserves for it; with
    the rule off (``rank``) the same gang sits in nlp's band."""
    cfg = write_config(tmp_path / "gang.yaml", contracts={"preempt_cap_fraction": 0.01},
                       fairshare={"gang_min_gpus": 16, "gang_first_after_min": 0.05})
    gang = sbatch("alice", "llm-pretrain", "-N", "2", "--gres=gpu:a100_80g:8", "--wrap",
                  "sleep 900")
    try:
        wait_state(gang, {"PENDING"}, timeout_s=120)
        time.sleep(5)
        cycle = daemon(cfg, dsn)
        assert cycle["outcome"] == "acted", cycle
        site = sprio_site([gang, queued["vision"], queued["nlp"]])
        assert site[gang] > site[queued["vision"]] > site[queued["nlp"]], site
        daemon(cfgs["rank"], dsn)
        site = sprio_site([gang, queued["nlp"]])
        assert site[gang] == site[queued["nlp"]], site
    finally:
        proc.run(["scancel", str(gang)], check=False)


def test_resumable_over_served_job_is_requeued_for_the_starved_one(
        cfgs: dict[str, Path], dsn: str, workload: dict[str, int],
        queued: dict[str, int]) -> None:
    ran = time.time() - workload["started"]
    if ran < 65:
        time.sleep(65 - ran)  # past the 1-minute minimum runtime of the v100 jobs
    dry = daemon(cfgs["act"], dsn, "--dry-run")
    assert dry["outcome"] == "dry_run"
    if ("requeue", workload["resumable"]) not in [(a["kind"], a["job_id"])
                                                  for a in dry["actions"]]:
        raise AssertionError(f"no requeue planned: {dry}\n{explain(cfgs['act'])}")
    assert int(show(workload["resumable"]).get("Restarts", "0")) == 0  # a dry run does nothing

    cycle = daemon(cfgs["act"], dsn)

    kinds = [(a["kind"], a["job_id"]) for a in cycle["actions"]]
    assert ("requeue", workload["resumable"]) in kinds, cycle
    assert all(job != workload["pinned"] for _kind, job in kinds), cycle
    requeued = show(workload["resumable"])
    assert requeued["JobState"] in {"COMPLETING", "PENDING", "REQUEUED", "CONFIGURING", "RUNNING"}
    assert int(requeued.get("Restarts", "0")) == 1, requeued
    assert show(workload["pinned"])["JobState"] == "RUNNING"
    wait_state(queued["vision"], {"RUNNING", "CONFIGURING"}, timeout_s=90)

    why = proc.run([SLURM_ML, "why", str(workload["resumable"]), "--config",
                    str(cfgs["act"]), "--json"], timeout_s=120, env=with_dsn(dsn))
    hist = json.loads(why.stdout)["history"]
    assert [(h["kind"], h["dry_run"]) for h in hist] == [("requeue", True), ("requeue", False)]
    hist = hist[1:]
    assert "minimum runtime" in hist[0]["reason"] and str(queued["vision"]) in hist[0]["reason"]

    again = daemon(cfgs["act"], dsn)  # the pinned job is never requeued, nor R twice
    assert all(a["job_id"] not in (workload["pinned"], workload["resumable"])
               for a in again["actions"]), again


def _zombie_samples(dsn: str, job: int, node: str, minutes: int = 3) -> None:
    now = datetime.now(UTC)
    with PostgresStore(dsn) as store:
        for k in range(minutes * 6 + 1):
            at = now - timedelta(seconds=10 * k)
            for gpu in range(8):
                store.record_util_sample(UtilSample(
                    idempotency_key=derive_key("test-zombie", job, gpu, at), job_id=job,
                    node=node, gpu_index=gpu, sampled_at=at, util_pct=0.0, mem_used_mb=30000))


def test_zombie_is_warned_then_requeued(cfgs: dict[str, Path], dsn: str,
                                        workload: dict[str, int]) -> None:
    job = workload["zombie"]
    fields = wait_state(job, {"RUNNING"}, timeout_s=120)
    _zombie_samples(dsn, job, fields["NodeList"])

    first = daemon(cfgs["act"], dsn)
    assert ("zombie_warn", job) in [(a["kind"], a["job_id"]) for a in first["actions"]], first
    assert show(job)["JobState"] == "RUNNING"  # a warning first, no action yet

    _zombie_samples(dsn, job, fields["NodeList"])
    second = daemon(cfgs["act"], dsn)
    assert ("zombie_requeue", job) in [(a["kind"], a["job_id"]) for a in second["actions"]]
    assert int(show(job).get("Restarts", "0")) == 1
    keys = [k for k, action, _t in audit_rows(dsn) if action in ("zombie_warn",
                                                                   "zombie_requeue")]
    assert len(keys) == 4  # warn intent+done, requeue intent+done


def test_kill_9_mid_cycle_then_restart_repeats_nothing(
        cfgs: dict[str, Path], dsn: str, workload: dict[str, int]) -> None:
    # a fresh resumable zombie, already warned by one cycle, on the first zombie's node
    proc.run(["scancel", str(workload["zombie"])], check=False)
    job = sbatch("bob", "llm-pretrain", "--gres=gpu:a100_40g:8", "--requeue", "--time-min=1",
                 "--wrap", "sleep 900")
    workload["zombie2"] = job
    fields = wait_state(job, {"RUNNING"}, timeout_s=150)
    time.sleep(61)  # the job must have run longer than the heartbeat
    _zombie_samples(dsn, job, fields["NodeList"])
    daemon(cfgs["act"], dsn)  # warns
    _zombie_samples(dsn, job, fields["NodeList"])

    # the real daemon, pausing 60 s after each intent (a test-only wrapper of its entry)
    child = subprocess.Popen([sys.executable, str(PAUSED_DAEMON), "60", "--config",
                              str(cfgs["act"]), "--once"], env=with_dsn(dsn),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        while not any(a == "zombie_requeue" and t == f"job {job}" for _k, a, t in audit_rows(dsn)):
            assert time.monotonic() < deadline, "the daemon never recorded its intent"
            assert child.poll() is None, child.stderr.read() if child.stderr else ""
            time.sleep(0.2)
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(timeout=10)
        if child.stderr is not None:
            child.stderr.close()  # else a ResourceWarning, an error under filterwarnings
    assert show(job)["JobState"] == "RUNNING"  # killed between intent and action

    daemon(cfgs["act"], dsn)  # the restart finishes the interrupted action ...
    daemon(cfgs["act"], dsn)  # ... and a further cycle does nothing more
    rows = [(k, a) for k, a, t in audit_rows(dsn) if t == f"job {job}" and a == "zombie_requeue"]
    assert len(rows) == 2 and rows[1][0] == rows[0][0] + "/done", rows
    assert int(show(job).get("Restarts", "0")) == 1


def test_runaway_job_is_fixed(cfgs: dict[str, Path], dsn: str, slurm_conf: str,
                              tmp_path: Path) -> None:
    from runaway import runaway_job

    from slurm_ml.slurm.client import CliSlurm

    cfg = write_config(tmp_path / "runaway.yaml", reclaim={"fix_runaway": True},
                       contracts={"preempt_cap_fraction": 0.01})
    with runaway_job(slurm_conf) as rj:
        assert rj.job_id in CliSlurm().list_runaway_jobs()
        cycle = daemon(cfg, dsn)
        fixed = [a for a in cycle["actions"] if a["kind"] == "fix_runaway"]
        assert len(fixed) == 1, cycle
        assert rj.job_id not in CliSlurm().list_runaway_jobs()
    assert any(a == "fix_runaway" for _k, a, _t in audit_rows(dsn))


def test_second_daemon_stays_passive(cfgs: dict[str, Path], dsn: str) -> None:
    leader = subprocess.Popen([SLURM_ML, "daemon", "--config", str(cfgs["rank"])],
                              env=with_dsn(dsn), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            second = daemon(cfgs["rank"], dsn)
            if second["outcome"] == "passive":
                break
            assert time.monotonic() < deadline, "the first daemon never took the lock"
            time.sleep(1)
        assert second["counts"] == {}
    finally:
        leader.send_signal(signal.SIGTERM)
        leader.wait(timeout=60)
        if leader.stderr is not None:
            leader.stderr.close()  # else a ResourceWarning, an error under filterwarnings
    assert leader.returncode == 0
    assert daemon(cfgs["rank"], dsn)["outcome"] == "acted"  # the lock was released


def test_unreachable_slurm_or_database_means_no_action_and_exit_1(
        cfgs: dict[str, Path], dsn: str, slurm_conf: str, tmp_path: Path) -> None:
    conf = unreachable_slurm_conf(slurm_conf, tmp_path)
    cfg = write_config(tmp_path / "short.yaml")
    text = yaml.safe_load(cfg.read_text())
    text["slurm"]["command_timeout_s"] = 5
    cfg.write_text(yaml.safe_dump(text))
    before = len(audit_rows(dsn))
    down = daemon(cfg, dsn, env={**os.environ, "SLURM_CONF": str(conf)}, check=False)
    assert down["outcome"] == "slurm_unavailable", down
    assert len(audit_rows(dsn)) == before

    no_db = make_conninfo(dsn, port="1", connect_timeout="2")
    res = proc.run([SLURM_ML, "daemon", "--config", str(cfg), "--once", "--json"],
                   check=False, timeout_s=120, env=with_dsn(no_db))
    assert res.returncode == 1, res.stderr
    assert json.loads(res.stdout)["outcome"] == "store_unavailable"


def test_metrics_served_and_sighup_with_a_bad_config_keeps_the_old_one(cfgs: dict[str, Path], dsn: str,
                                                    tmp_path: Path) -> None:
    import socket
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    data = yaml.safe_load(cfgs["rank"].read_text())
    data["daemon"]["metrics_port"] = port
    cfg = tmp_path / "live.yaml"
    cfg.write_text(yaml.safe_dump(data))
    child = subprocess.Popen([SLURM_ML, "daemon", "--config", str(cfg)], env=with_dsn(dsn),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(8)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        assert "slurm_ml_daemon_leader 1.0" in metrics
        assert 'slurm_ml_daemon_cycles_total{outcome="acted"}' in metrics
        assert 'slurm_ml_allocation_owed_gpu_hours{account="detection"}' in metrics
        cfg.write_text("policy: [broken\n")
        child.send_signal(signal.SIGHUP)
        time.sleep(8)  # two more cycles at 3 s
        assert child.poll() is None, "the daemon died on a bad config"
    finally:
        child.send_signal(signal.SIGTERM)
        _out, err = child.communicate(timeout=60)
    assert child.returncode == 0
    rejected = err.index("event=config_reload_rejected")
    assert "outcome=acted" in err[rejected:], err[-2000:]
