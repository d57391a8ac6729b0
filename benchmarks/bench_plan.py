"""The daemon's whole decide pass (``plan_cycle``) on a SYNTHETIC cluster.

Same synthetic world as ``bench_decide.py`` (5,000-user tree, 2,000 nodes x 8 GPUs), but
as the daemon sees it: 50,000 pending and 10,000 running ``Job`` records from slurmctld,
40,000 ``JobUsage`` rows from slurmdbd (finished and running), 10% of the running jobs
with GPU samples in the heartbeat window (half of those idle), and 1,000 requeue /
warning decisions in the history. ``plan_cycle`` runs fair share, SiteFactors, contracts,
zombies and drains over it. Everything is made up (seeded); no Slurm, no database.

``--contended``: the same world with every idle GPU taken by a filler job (allocated, not
resumable), so that no pending job fits and the node-level requeue planner searches
for every starved job until the preemption cap is spent (the default world has ~1%
empty nodes: most starved jobs fit, and the planner is only asked "does it fit").

Usage: python benchmarks/bench_plan.py [--runs N] [--json] [--contended]
Targets (issue 5): one decide pass <= 2 s and <= 500 MB RSS on this machine.
"""

from __future__ import annotations

import dataclasses
import json
import random
import resource
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_decide import (
    FINISHED,
    HOUR,
    NOW,
    PENDING,
    PROGRAMS,
    PROJECTS,
    RUNNING,
    USERS,
    synthetic_tree,
)

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config
from slurm_ml.daemon.observe import Observation
from slurm_ml.daemon.plan import plan_cycle
from slurm_ml.model import GpuRequest, Job, JobState, JobUsage, Node, NodeClass
from slurm_ml.store.records import ReconcilerDecision, UtilSample


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _at(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def world(rng: random.Random, contended: bool = False):  # type: ignore[no-untyped-def]
    base = load_config(DEFAULT_CONFIG)
    half = PROGRAMS * PROJECTS * USERS // 5
    classes = tuple(
        NodeClass(name=f"syn-{t}", nodes=f"syn[{i * half + 1:04d}-{(i + 1) * half:04d}]",
                  gpu_type=t, gpus_per_node=8, leaf_switch=f"leaf{i}", features=(t,),
                  cpus=64, memory_mb=512_000)
        for i, t in enumerate(("a100_80g", "a100_40g")))
    cfg = dataclasses.replace(base, budgets=synthetic_tree(rng), node_classes=classes)
    assocs = [(proj.name, u) for prog in cfg.budgets.programs for proj in prog.projects
              for u in proj.users]
    names = cfg.all_nodes()
    nodes = tuple(Node(n, "MIXED", frozenset(), "", (), "", 8,
                       "a100_80g" if i < half else "a100_40g", 64, 512_000)
                  for i, n in enumerate(names))
    jobs: list[Job] = []
    usage: list[JobUsage] = []
    jid = 1

    def make(state: JobState, submit: int, start: int | None, node: str = "") -> Job:
        nonlocal jid
        account, user = rng.choice(assocs)
        gtype = rng.choice(("a100_80g", "a100_40g"))
        gpus = rng.choice((1, 1, 1, 2, 4, 8))
        job = Job(job_id=jid, name=f"j{jid % 97}", user=user, account=account,
                  partition="gpu", qos="alloc" if rng.random() > 0.2 else "free", state=state,
                  reason="Resources" if state == JobState.PENDING else "None", nodes=node,
                  num_nodes=1, gpus=(GpuRequest(gpus, "node", gtype),), time_limit_min=1440,
                  time_min_min=60, requeue=rng.random() < 0.5, site_factor=None,
                  priority=rng.randint(1, 10**6), submit_time=submit, start_time=start,
                  nice=rng.choice((0, 0, 0, 50)))
        jid += 1
        return job

    for _ in range(FINISHED):
        run = NOW - rng.randint(0, 180 * HOUR)
        j = make(JobState.COMPLETED, run - rng.randint(0, 6 * HOUR), run)
        gtype = j.gpus[0].gpu_type
        usage.append(JobUsage(j.job_id, j.user, j.account, j.qos, JobState.COMPLETED, 0,
                              {"gres/gpu": j.total_gpus, f"gres/gpu:{gtype}": j.total_gpus},
                              start=run, end=min(NOW, run + rng.randint(600, 24 * HOUR)),
                              submit=j.submit_time))
    running: list[Job] = []
    for _ in range(RUNNING):
        run = NOW - rng.randint(0, 48 * HOUR)
        j = make(JobState.RUNNING, run - rng.randint(0, 6 * HOUR), run, rng.choice(names))
        running.append(j)
        jobs.append(j)
        gtype = j.gpus[0].gpu_type
        usage.append(JobUsage(j.job_id, j.user, j.account, j.qos, JobState.RUNNING, 0,
                              {"gres/gpu": j.total_gpus, f"gres/gpu:{gtype}": j.total_gpus},
                              start=run, end=None, submit=j.submit_time))
    if contended:  # every idle GPU taken by a job nobody may requeue
        busy = {n: 0 for n in names}
        for j in running:
            busy[j.nodes] += j.total_gpus
        for n, used in busy.items():
            if used < 8:
                filler = dataclasses.replace(
                    make(JobState.RUNNING, NOW - HOUR, NOW - HOUR, n), qos="alloc",
                    requeue=False, gpus=(GpuRequest(8 - used, "node", None),))
                jobs.append(filler)
    for _ in range(PENDING):
        jobs.append(make(JobState.PENDING, NOW - rng.randint(0, 72 * HOUR), None))
    samples: dict[int, tuple[UtilSample, ...]] = {}
    for j in rng.sample(running, RUNNING // 10):
        idle = rng.random() < 0.5
        rows = []
        for k in range(0, 1200, 60):
            for gpu in range(j.total_gpus):
                rows.append(UtilSample(idempotency_key=f"s{j.job_id}-{gpu}-{k}",
                                       job_id=j.job_id, node=j.nodes, gpu_index=gpu,
                                       sampled_at=_at(NOW - k),
                                       util_pct=0.0 if idle else 80.0, mem_used_mb=20_000))
        samples[j.job_id] = tuple(rows)
    history = tuple(ReconcilerDecision(idempotency_key=f"d{i}", cycle=NOW - 600, job_id=j.job_id,
                                       kind=rng.choice(("requeue", "zombie_warn")), reason="",
                                       decided_at=_at(NOW - rng.randint(0, 3000)), dry_run=False,
                                       details={"gpus": j.total_gpus})
                    for i, j in enumerate(rng.sample(running, 1000)))
    obs = Observation(now=NOW, jobs=tuple(jobs), nodes=nodes, usage=tuple(usage),
                      runaway=frozenset(), samples=samples, history=history, orphans=())
    return cfg, obs


def main(runs: int, as_json: bool, contended: bool = False) -> None:
    rss_start = rss_mb()
    cfg, obs = world(random.Random(7), contended)
    rss_inputs = rss_mb()
    times = []
    plan = None
    for _ in range(runs):
        t0 = time.perf_counter()
        plan = plan_cycle(cfg, obs)
        times.append(time.perf_counter() - t0)
    assert plan is not None
    out = {
        "bench": "plan_cycle", "synthetic": True, "contended": contended,
        "pending": PENDING, "running": RUNNING,
        "finished": FINISHED, "users": PROGRAMS * PROJECTS * USERS, "runs": runs,
        "first_s": round(times[0], 3), "median_s": round(statistics.median(times), 3),
        "rss_start_mb": round(rss_start, 1), "rss_inputs_mb": round(rss_inputs, 1),
        "rss_peak_mb": round(rss_mb(), 1), "site_factors": len(plan.site_factors),
        "actions": {k: sum(1 for a in plan.actions if a.decision == k)
                    for k in sorted({a.decision for a in plan.actions})},
    }
    if not as_json:
        print(f"plan_cycle over {PENDING} pending / {RUNNING} running / {FINISHED} finished "
              f"jobs, {out['users']} users (synthetic)")
        print(f"  median {out['median_s']:.3f} s of {runs} (first {out['first_s']:.3f} s)  "
              f"target <= 2 s")
        print(f"  RSS peak {out['rss_peak_mb']:.0f} MB (inputs {out['rss_inputs_mb']:.0f} MB)"
              f"  target <= 500 MB")
        print(f"  actions {out['actions']}")
    print(json.dumps(out))


if __name__ == "__main__":
    args = sys.argv[1:]
    n = int(args[args.index("--runs") + 1]) if "--runs" in args else 3
    main(n, "--json" in args, "--contended" in args)
