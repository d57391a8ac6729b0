"""A small sample workload, submitted as the researcher users, for ``make demo``."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from slurm_ml import proc
from slurm_ml.config import Config
from slurm_ml.model import JobState
from slurm_ml.slurm.client import CliSlurm
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


def cancel_cases(cases: list[AdmissionCase], env: dict[str, str]) -> None:
    ids = [str(c.job_id) for c in cases if c.job_id]
    if ids:
        proc.run(["scancel", *ids], check=False, env=env, timeout_s=30)
