"""Fair-share decide pass: fair_share + site_factors on a SYNTHETIC 5,000-user tree.

Everything here is made up (seeded, reproducible): 10 programs x 50 projects x 10 users
with random budget weights, a 2,000-node cluster (16,000 GPUs, two billing weights),
50,000 pending and 10,000 running jobs, and 30,000 finished jobs spread over the 168-hour
window, 20% of all jobs free-QOS. No Slurm, no database: it times the pure policy only.

Usage: python benchmarks/bench_decide.py [--runs N] [--json]
Targets (issue 5): one decide pass <= 2 s and <= 500 MB RSS on this machine.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import random
import resource
import statistics
import sys
import time
from pathlib import Path

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config
from slurm_ml.model import BudgetProgram, BudgetProject, BudgetTree, NodeClass
from slurm_ml.policy.fairshare import (
    Footprint,
    PendingJob,
    capacity_billing_gpus,
    fair_share,
    site_factors,
)

REPO = Path(__file__).resolve().parents[1]
NOW = 1_800_000_000
HOUR = 3600
PROGRAMS, PROJECTS, USERS = 10, 50, 10
PENDING, RUNNING, FINISHED = 50_000, 10_000, 30_000
FREE_SHARE = 0.2
SIZES = (1, 1, 1, 2, 4, 8)  # GPUs per job
WEIGHTS = (1.0, 0.8)  # billing weights of the two synthetic GPU types (a100_80g, a100_40g)


def synthetic_tree(rng: random.Random) -> BudgetTree:
    programs = tuple(
        BudgetProgram(
            name=f"prog{p:02d}", weight=rng.uniform(1, 10),
            projects=tuple(
                BudgetProject(name=f"proj{p:02d}-{j:02d}", weight=rng.uniform(1, 10),
                              users=tuple(f"u{p:02d}{j:02d}{u}" for u in range(USERS)))
                for j in range(PROJECTS)))
        for p in range(PROGRAMS))
    return BudgetTree(org="synthetic", programs=programs)


def synthetic_jobs(tree: BudgetTree, rng: random.Random,
                   ) -> tuple[list[Footprint], list[PendingJob]]:
    assocs = [(proj.name, user) for prog in tree.programs for proj in prog.projects
              for user in proj.users]
    footprints: list[Footprint] = []
    pending: list[PendingJob] = []
    job_id = 1

    def job(pending_from: int, run_from: int | None, until: int | None) -> Footprint:
        nonlocal job_id
        account, user = rng.choice(assocs)
        gpus = rng.choice(SIZES) * rng.choice(WEIGHTS)
        fp = Footprint(job_id, account, user, gpus, rng.random() >= FREE_SHARE,
                       pending_from, run_from, until)
        job_id += 1
        return fp

    for _ in range(FINISHED):  # some straddle the window start
        run = NOW - rng.randint(0, 180 * HOUR)
        footprints.append(job(run - rng.randint(0, 6 * HOUR), run,
                              min(NOW, run + rng.randint(600, 24 * HOUR))))
    for _ in range(RUNNING):
        run = NOW - rng.randint(0, 48 * HOUR)
        footprints.append(job(run - rng.randint(0, 6 * HOUR), run, None))
    for _ in range(PENDING):
        fp = job(NOW - rng.randint(0, 72 * HOUR), None, None)
        footprints.append(fp)
        pending.append(PendingJob(fp.job_id, fp.account, fp.user,
                                  "alloc" if fp.allocated else "free", rng.choice((0, 0, 0, 50))))
    return footprints, pending


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def main(runs: int, as_json: bool) -> None:
    rss_start = rss_mb()
    rng = random.Random(5)
    base = load_config(DEFAULT_CONFIG)
    half = PROGRAMS * PROJECTS * USERS // 5  # nodes per class: 2,000 nodes x 8 GPUs
    classes = tuple(
        NodeClass(name=f"syn-{t}", nodes=f"syn[{i * half + 1:04d}-{(i + 1) * half:04d}]",
                  gpu_type=t, gpus_per_node=8, leaf_switch=f"leaf{i}", features=(t,),
                  cpus=64, memory_mb=512_000)
        for i, t in enumerate(("a100_80g", "a100_40g")))
    cfg = dataclasses.replace(base, budgets=synthetic_tree(rng), node_classes=classes)
    footprints, pending = synthetic_jobs(cfg.budgets, rng)
    rss_inputs = rss_mb()

    times: list[dict[str, float]] = []
    for _ in range(runs):
        t0 = time.perf_counter()
        assocs = {(j.account, j.user) for j in pending}
        fs = fair_share(cfg, footprints, NOW, assocs)
        t1 = time.perf_counter()
        values = site_factors(fs, pending, cfg.policy.fairshare)
        t2 = time.perf_counter()
        times.append({"fair_share_s": t1 - t0, "site_factors_s": t2 - t1, "total_s": t2 - t0})
    rss_peak = rss_mb()

    cold = times[0]
    warm = {k: statistics.median(t[k] for t in times[1:] or times) for k in cold}
    org = fs.standings[0]
    out = {
        "bench": "decide", "synthetic": True, "python": platform.python_version(),
        "users": sum(len(group) for group in fs.fair_tree_order),
        "tree_nodes": len(fs.standings), "pending": len(pending), "running": RUNNING,
        "finished": FINISHED, "buckets": round((NOW - fs.window_start) / 3600),
        "capacity_billing_gpus": capacity_billing_gpus(cfg), "ranks": fs.ranks,
        "runs": runs,
        "cold_total_s": round(cold["total_s"], 3),
        "fair_share_s": round(warm["fair_share_s"], 3),
        "site_factors_s": round(warm["site_factors_s"], 3),
        "total_s": round(warm["total_s"], 3),
        "rss_start_mb": round(rss_start, 1), "rss_inputs_mb": round(rss_inputs, 1),
        "rss_peak_mb": round(rss_peak, 1),
        "org_owed_h": round(org.owed), "org_delivered_h": round(org.delivered),
        "jobs_with_site_factor": sum(1 for v in values.values() if v > 0),
    }
    if not as_json:
        rows = [
            ("tree", f"{out['users']} users, {out['tree_nodes']} nodes (synthetic)"),
            ("jobs", f"{PENDING} pending, {RUNNING} running, {FINISHED} finished"),
            ("window", f"{out['buckets']} buckets of 1 h, capacity "
                       f"{out['capacity_billing_gpus']:.0f} billing GPUs"),
            ("fair_share", f"{out['fair_share_s']:.3f} s (median of {runs})"),
            ("site_factors", f"{out['site_factors_s']:.3f} s"),
            ("decide total", f"{out['total_s']:.3f} s (first run {out['cold_total_s']:.3f} s)"
                             "  target <= 2 s"),
            ("RSS", f"{out['rss_peak_mb']:.0f} MB peak (inputs {out['rss_inputs_mb']:.0f} MB,"
                    f" start {out['rss_start_mb']:.0f} MB)  target <= 500 MB"),
        ]
        for name, value in rows:
            print(f"{name:<14} {value}")
    print(json.dumps(out))


if __name__ == "__main__":
    args = sys.argv[1:]
    n_runs = int(args[args.index("--runs") + 1]) if "--runs" in args else 5
    main(n_runs, "--json" in args)
