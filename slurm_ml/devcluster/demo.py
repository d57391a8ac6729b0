"""A small sample workload, submitted as the researcher users, for ``make demo``."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

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
