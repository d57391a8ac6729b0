"""SiteFactor push: the daemon's batched scontrol processes vs one scontrol call per job.

Runs against the dev cluster (eval "$(slurm-ml devcluster env)"). It drains
gpu06, submits N pending jobs that wait for it, pushes SiteFactors spread like the
daemon's (one band per association for 50 associations, plus in-band --nice offsets:
~150 distinct values) with the configured scontrol_batch_size, counts the scontrol
processes, checks the values in sprio, and (for N <= 1000) times one call per job for
comparison. Cancels the jobs and resumes gpu06. Target: 10,000 jobs in <= 50 calls.
Usage: python benchmarks/bench_site_factor.py [N]   (N=10000 needs MaxJobCount > N)
"""

from __future__ import annotations

import os
import sys
import time

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config
from slurm_ml.slurm.client import CliSlurm
from slurm_ml.slurm.runner import SlurmRunner


def main(n: int) -> None:
    cfg = load_config(os.environ.get("SLURM_ML_CONFIG", DEFAULT_CONFIG))
    run = SlurmRunner(env={"SLURM_CONF": os.environ["SLURM_CONF"]}, timeout_s=900)
    slurm = CliSlurm(run, batch_size=cfg.slurm.scontrol_batch_size)
    jobs_dir = os.path.join(os.environ["SLURM_ML_DEVCLUSTER"], "jobs")
    slurm.drain_node("gpu06", "slurm-ml: benchmark hold-back")
    try:
        script = (f"for i in $(seq {n}); do sbatch --parsable --nodelist=gpu06 --gres=gpu:1 "
                  f"--chdir={jobs_dir} -o /dev/null --account=llm-pretrain --job-name=bench "
                  f"--wrap 'sleep 1'; done")
        t0 = time.perf_counter()
        ids = [int(x) for x in run(["runuser", "-u", "bob", "--", "bash", "-c", script]).split()]
        print(f"submitted {len(ids)} jobs in {time.perf_counter() - t0:.0f}s", file=sys.stderr)
        step = cfg.policy.fairshare.site_factor_step
        values = {jid: 100_000 - step * (i % 50) - (i // 50) % 3 for i, jid in enumerate(ids)}

        t0 = time.perf_counter()
        calls = slurm.set_site_factor(values)
        batched = time.perf_counter() - t0
        seen = slurm.site_factors()
        wrong = sum(1 for jid, v in values.items() if seen.get(jid) != v)

        per_job = None
        if n <= 1000:
            t0 = time.perf_counter()
            for jid, v in values.items():
                run(["scontrol", "update", f"JobId={jid}", f"SiteFactor={v + 1}"])
            per_job = time.perf_counter() - t0
        slurm.cancel(ids)
    finally:
        slurm.resume_node("gpu06")
    line = (f"jobs={n} distinct_values={len(set(values.values()))} batch_size="
            f"{cfg.slurm.scontrol_batch_size} batched_calls={calls} batched_s={batched:.3f} "
            f"wrong_in_sprio={wrong}")
    if per_job is not None:
        line += f" per_job_calls={n} per_job_s={per_job:.3f} speedup={per_job / batched:.1f}x"
    print(line)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100)
