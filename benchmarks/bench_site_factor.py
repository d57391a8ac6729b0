"""SiteFactor push: one batched scontrol process vs one scontrol call per job.

Runs against the dev cluster (eval "$(slurm-ml devcluster env)"). It drains
gpu06, submits N pending jobs that wait for it, times both ways of setting a
distinct-per-account SiteFactor, cancels the jobs and resumes gpu06.
Usage: python benchmarks/bench_site_factor.py [N]
"""

from __future__ import annotations

import os
import sys
import time

from slurm_ml.slurm.client import CliSlurm
from slurm_ml.slurm.runner import SlurmRunner


def main(n: int) -> None:
    run = SlurmRunner(env={"SLURM_CONF": os.environ["SLURM_CONF"]}, timeout_s=300)
    slurm = CliSlurm(run)
    jobs_dir = os.path.join(os.environ["SLURM_ML_DEVCLUSTER"], "jobs")
    slurm.drain_node("gpu06", "slurm-ml: benchmark hold-back")
    try:
        script = "\n".join(
            f"sbatch --parsable --nodelist=gpu06 --gres=gpu:1 --chdir={jobs_dir} -o /dev/null "
            f"--account=llm-pretrain --job-name=bench --wrap 'sleep 1'" for _ in range(n))
        ids = [int(x) for x in run(["runuser", "-u", "bob", "--", "bash", "-c", script]).split()]
        values = {jid: 3000 + 10 * (i % 3) for i, jid in enumerate(ids)}

        t0 = time.perf_counter()
        calls = slurm.set_site_factor(values)
        batched = time.perf_counter() - t0

        t0 = time.perf_counter()
        for jid, v in values.items():
            run(["scontrol", "update", f"JobId={jid}", f"SiteFactor={v + 1}"])
        per_job = time.perf_counter() - t0
        slurm.cancel(ids)
    finally:
        slurm.resume_node("gpu06")
    print(f"jobs={n} batched_calls={calls} batched_s={batched:.3f} "
          f"per_job_calls={n} per_job_s={per_job:.3f} speedup={per_job / batched:.1f}x")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100)
