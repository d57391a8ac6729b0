"""``make demo``: sample sbatch lines through admission, a small workload submitted as the
researcher users, and a node-health fault caught by the prolog and repaired."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from slurm_ml import proc
from slurm_ml.config import Config
from slurm_ml.devcluster.health import clear_fault, inject_fault
from slurm_ml.devcluster.layout import Layout
from slurm_ml.model import JobState
from slurm_ml.slurm.client import CliSlurm
from slurm_ml.slurm.parse import parse_oneliner
from slurm_ml.slurm.protocol import SubmitRequest

FINISHED = {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT,
            JobState.NODE_FAIL, JobState.OUT_OF_MEMORY, JobState.PREEMPTED}


@dataclass(frozen=True, slots=True)
class DemoJob:
    job_id: int
    user: str
    account: str
    gres: str


def sample_requests(cfg: Config, workdir: str) -> list[SubmitRequest]:
    """One GPU job per (user, account) pair, cycling through the GPU types."""
    types = sorted(cfg.gpu_types)
    reqs = []
    i = 0
    for user, accounts in cfg.budgets.user_accounts().items():
        for account in accounts:
            gtype = types[i % len(types)]
            reqs.append(SubmitRequest(
                user=user, account=account, name=f"demo-{user}-{account}",
                command="sleep 3", gres=f"gpu:{gtype}:{1 + i % 2}", time_limit="5",
                qos="alloc", workdir=workdir,
            ))
            i += 1
    return reqs


def run_demo(cfg: Config, slurm: CliSlurm, workdir: str, say: Callable[[str], None],
             timeout_s: float = 180) -> list[DemoJob]:
    """Submit the sample jobs and wait until they have finished; return them."""
    jobs = []
    for req in sample_requests(cfg, workdir):
        jid = slurm.submit(req)
        jobs.append(DemoJob(jid, req.user, req.account or "", req.gres or ""))
        say(f"submitted job {jid} as {req.user} (account {req.account}, --gres={req.gres})")
    ids = {j.job_id for j in jobs}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        live = [j for j in slurm.list_jobs(job_ids=ids) if j.state not in FINISHED]
        if not live:
            break
        say(f"waiting: {len(live)} of {len(ids)} jobs still "
            f"{'/'.join(sorted({j.state.value for j in live}))}")
        time.sleep(3)
    else:
        raise TimeoutError(f"demo jobs did not finish within {timeout_s:g}s")
    return jobs


@dataclass(frozen=True, slots=True)
class AdmissionCase:
    label: str
    user: str
    args: tuple[str, ...]
    accepted: bool
    job_id: int | None
    message: str  # what sbatch printed on stderr: slurm-ml's explanation


#: Plain sbatch lines a researcher would type; job_submit.lua + submitd act on each.
ADMISSION_CASES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("widened: typed A100-80GB job that needs 30 GB", "alice",
     ("--gres=gpu:a100_80g:4", "--comment=gpu_mem=30G")),
    ("shaped: 16 GPUs become 2 whole nodes under one leaf", "bob", ("--gpus=16",)),
    ("routed: --time-min=30 becomes 30 min of requeue protection; Slurm's TimeMin is "
     "cleared so backfill cannot shorten --time", "alice",
     ("--gres=gpu:1", "--time-min=30", "-t", "120")),
    ("routed: --time-min=0 runs uncharged in QOS free", "dave",
     ("--gres=gpu:1", "--time-min=0")),
    ("rejected: 6 GPUs on each of 2 nodes strands GPUs", "carol", ("--gres=gpu:6", "-N2")),
    ("rejected: 64 GPUs can never run here", "alice", ("--gpus=64",)),
)


def run_admission_cases(workdir: str, env: dict[str, str],
                        say: Callable[[str], None]) -> list[AdmissionCase]:
    """Submit each case held (so it takes no nodes), show what happened, cancel it."""
    out = []
    for label, user, args in ADMISSION_CASES:
        argv = ["runuser", "-u", user, "--", "sbatch", "--parsable", "--hold", "-t", "5",
                f"--chdir={workdir}", "--output=/dev/null", *args, "--wrap", "true"]
        res = proc.run(argv, check=False, env=env, timeout_s=30)
        job_id = int(res.stdout.split(";")[0]) if res.returncode == 0 else None
        message = "\n".join(line for line in res.stderr.splitlines() if "slurm-ml" in line)
        out.append(AdmissionCase(label, user, args, res.returncode == 0, job_id, message))
        say(f"{label}: sbatch {' '.join(args)} (as {user}) -> "
            f"{'job ' + str(job_id) if job_id else 'rejected'}")
    return out


@dataclass(frozen=True, slots=True)
class HealthStep:
    """One step of the node-health demo: what was done (a command) and what it printed."""

    title: str
    command: str
    output: str


#: The fault the health demo injects: an A100 whose GPU 6 has every NVLink down (Azure HPC
#: health checks' bad_nvlink_status.txt, in data/gpu/nvlink/).
DEMO_FAULT = "azhc_a100_gpu6_nvlink_status_all_inactive.txt"


def _slurm_ml(args: list[str], env: dict[str, str]) -> proc.Result:
    return proc.run([sys.executable, "-m", "slurm_ml.cli", *args], check=False, env=env,
                    timeout_s=60)


def _job_fields(job_id: int, env: dict[str, str]) -> dict[str, str]:
    out = proc.run(["scontrol", "-o", "show", "job", str(job_id)], check=False, env=env,
                   timeout_s=30).stdout.strip()
    return parse_oneliner(out.splitlines()[0]) if out else {}


def run_health_demo(cfg: Config, layout: Layout, env: dict[str, str],
                    say: Callable[[str], None], *, node: str = "gpu03",
                    timeout_s: float = 180) -> list[HealthStep]:
    """Inject a fault on ``node``, submit a job that would land there, show it run on the
    class's other node and ``node`` drained by the prolog; clear the fault and let the
    periodic check resume ``node``. The fault is cleared and ``node`` resumed even if a
    step fails."""
    steps: list[HealthStep] = []
    nc = cfg.node_class_of(node)
    if nc is None:
        raise ValueError(f"{node} is in no node class")
    try:
        fault = inject_fault(cfg, layout, node, DEMO_FAULT)
        steps.append(HealthStep(
            f"inject a fault on {node}: GPU 6 has no active NVLink",
            f"slurm-ml devcluster fault {node} {DEMO_FAULT}",
            f"{node} now replays {', '.join(fault.files)}\nthe checks say: {fault.verdict}"))
        say(steps[-1].title)
        gres = f"gpu:{nc.gpu_type}:{nc.gpus_per_node}"
        argv = ["sbatch", "--parsable", "--job-name=demo-health", f"--gres={gres}", "-t", "2",
                f"--chdir={layout.jobs}", "--output=/dev/null", "--wrap", "sleep 3"]
        res = proc.run(["runuser", "-u", "alice", "--", *argv], env=env, timeout_s=30)
        job_id = int(res.stdout.strip().split(";")[0])
        say(f"submitted job {job_id} (--gres={gres}); waiting for it to finish: after the "
            f"failed prolog Slurm holds the requeued job back ~30 s (AuthInfo cred_expire)")
        deadline = time.monotonic() + timeout_s
        fields = _job_fields(job_id, env)
        while fields.get("JobState") != "COMPLETED":
            if time.monotonic() > deadline or fields.get("JobState") in {
                    s.value for s in FINISHED}:
                raise TimeoutError(f"demo job {job_id} is {fields.get('JobState')} after "
                                   f"{timeout_s:g}s")
            time.sleep(2)
            fields = _job_fields(job_id, env)
        log = (layout.log / "hooks.log").read_text(errors="replace").splitlines()
        prolog = [ln for ln in log if "slurm-ml prolog: " in ln and f" {node}:" in ln]
        steps.append(HealthStep(
            f"a job that can only run on {nc.nodes} ({nc.name}), as alice",
            f"sbatch --gres={gres} --wrap 'sleep 3'",
            f"job {job_id}: {fields.get('JobState')} on {fields.get('NodeList')} after "
            f"{fields.get('Restarts')} restart(s)\nprolog on {node}: "
            + (prolog[-1].removeprefix("slurm-ml prolog: ") if prolog else "(not logged)")))
        sinfo = proc.run(["sinfo", "-R", "-n", node, "-o", "%N %E"], env=env,
                         timeout_s=30).stdout.strip()
        steps.append(HealthStep(f"{node} is drained with slurm-ml's reason",
                                f"sinfo -R -n {node}", sinfo))
        clear_fault(cfg, layout, node)
        steps.append(HealthStep(f"repair {node} (clear the fault)",
                                f"slurm-ml devcluster fault {node} --clear",
                                f"{node}: healthy captures restored"))
        runs = []
        for _ in range(cfg.policy.quarantine.resume_after_passes):
            out = _slurm_ml(["health", "periodic", "--node", node], env)
            runs.append((out.stdout or out.stderr).strip())
        steps.append(HealthStep(
            f"the periodic check (HealthCheckProgram) resumes {node} after "
            f"{cfg.policy.quarantine.resume_after_passes} clean runs in a row",
            f"slurm-ml health periodic --node {node}   (x"
            f"{cfg.policy.quarantine.resume_after_passes})", "\n".join(runs)))
        say(steps[-1].title)
        state = ""
        for _ in range(10):  # "idle*" until slurmctld's next ping of the resumed node
            state = proc.run(["sinfo", "-h", "-n", node, "-o", "%N %T"], env=env,
                             timeout_s=30).stdout.strip()
            if not state.endswith("*"):
                break
            time.sleep(0.5)
        steps.append(HealthStep(f"{node} is back in service", f"sinfo -n {node}", state))
    finally:
        if (layout.health / node / ".fault").exists():
            clear_fault(cfg, layout, node)
        shown = proc.run(["scontrol", "-o", "show", "node", node], check=False, env=env,
                         timeout_s=30).stdout
        if "Reason=slurm-ml:" in shown:
            _slurm_ml(["quarantine", "resume", node], env)
    return steps


def run_reconciler_demo(env: dict[str, str], say: Callable[[str], None]) -> list[HealthStep]:
    """One reconciler cycle over the demo's usage, then what an operator reads."""
    steps = []
    say("running one reconciler cycle (slurm-ml daemon --once)")
    cycle = _slurm_ml(["daemon", "--once"], env)
    steps.append(HealthStep("one reconciler cycle: fair share, SiteFactor, contracts, reclaim",
                            "slurm-ml daemon --once",
                            (cycle.stdout or cycle.stderr).strip()))
    status = _slurm_ml(["budget", "status"], env)
    steps.append(HealthStep("owed vs delivered per budget-tree node over the window",
                            "slurm-ml budget status", (status.stdout or status.stderr).strip()))
    return steps


#: A week of the real Philly trace on a 512-GPU cluster, with Ai2-style debug jobs.
SIM_ARGS = ["--start-hours", "720", "--hours", "168", "--gpus", "512", "--demand", "2.5",
            "--unallocated", "0.2",
            "--debug-rate", "0.5"]


def run_sim_demo(env: dict[str, str], say: Callable[[str], None],
                 report_dir: str) -> list[HealthStep]:
    """The four policies over a week of Philly, side by side, with the HTML report."""
    say("simulating a week of the Philly trace under four policies (about a minute)")
    res = proc.run([sys.executable, "-m", "slurm_ml.cli", "sim", *SIM_ARGS,
                    "--report", report_dir], check=False, env=env, timeout_s=600)
    out = (res.stdout or res.stderr).strip()
    return [HealthStep("the same policy code on a real trace: fifo, Slurm fair share, budgets",
                       f"slurm-ml sim {' '.join(SIM_ARGS)} --report {report_dir}",
                       out + f"\n(report: {report_dir}/index.html)")]


def cancel_cases(cases: list[AdmissionCase], env: dict[str, str]) -> None:
    ids = [str(c.job_id) for c in cases if c.job_id]
    if ids:
        proc.run(["scancel", *ids], check=False, env=env, timeout_s=30)
