"""Node-hours held by draining nodes, with and without repairs at the contract.

A node-level Monte Carlo, not the scheduling simulator (``slurm_ml.sim``, which has no
node faults): each of ``--nodes`` nodes runs whole-node jobs back to back; faults come
at ``--fault-rate`` per node-day (Poisson), each needs ``--repair-h`` hours of repair.
A fault on a busy node is a drain-after-job finding: the node takes no new work, and
``slurm_ml.policy.repairs.plan_repairs`` (the daemon's own function) says, cycle by
cycle, what happens to the job on it. Without repairs at the contract the node drains
until its job ends; with them, a resumable job is requeued once its protected runtime
has ended (plus the checkpoint grace), a non-resumable one runs to its end.

Jobs: run time log-normal (median ``--median-h``, sigma 1.2, at most 7 days), a
``--resumable`` share with ``--requeue``, ``--time-min`` uniform in 1..8 h (the cap).

    .venv/bin/python benchmarks/sim_repairs.py --nodes 200 --days 90
"""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config
from slurm_ml.model import GpuRequest, Job, JobState, Node
from slurm_ml.policy.repairs import NodeFinding, plan_repairs

DAY = 86400.0
EPOCH = 1_800_000_000  # the simulated times, as Slurm's epoch seconds


@dataclass(frozen=True, slots=True)
class Run:
    start: float
    end: float
    resumable: bool
    time_min_min: int


def _job(run: Run, node: str, jid: int) -> Job:
    return Job(job_id=jid, name="train", user="u", account="a", partition="gpu", qos="alloc",
               state=JobState.RUNNING, reason="None", nodes=node, num_nodes=1,
               gpus=(GpuRequest(8, "node", None),), time_limit_min=None,
               time_min_min=run.time_min_min, requeue=run.resumable, site_factor=None,
               priority=None, submit_time=EPOCH + int(run.start),
               start_time=EPOCH + int(run.start))


def _drain_wait(cfg: object, now: float, run: Run) -> float:
    """Seconds from the finding until the node is empty, per ``plan_repairs``."""
    node = Node("n1", "ALLOCATED", frozenset({"DRAIN"}), "slurm-ml: remap.pending",
                (), "gpu:8", 8, None, 64, 512_000)
    at = EPOCH + int(now)
    finding = {"n1": [NodeFinding("n1", "remap.pending", "pending", at)]}
    rp = plan_repairs(at, [node], [_job(run, "n1", 1)], finding, cfg)  # type: ignore[arg-type]
    (wait,) = rp.nodes[0].jobs
    grace = cfg.policy.contracts.requeue_grace_s + cfg.policy.fairshare.cycle_interval_s  # type: ignore[attr-defined]
    if wait.kind == "requeue":
        return grace  # requeued in this cycle: the signal's grace, then it is gone
    if wait.kind == "protected" and wait.until is not None:
        return (wait.until - at) + grace
    return run.end - now  # finishes: runs to its end


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--days", type=float, default=90)
    ap.add_argument("--fault-rate", type=float, default=1 / 30, help="faults per node-day")
    ap.add_argument("--repair-h", type=float, default=4.0)
    ap.add_argument("--median-h", type=float, default=12.0)
    ap.add_argument("--resumable", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    cfg = load_config(DEFAULT_CONFIG)
    rng = random.Random(args.seed)
    horizon = args.days * DAY
    held = {"without": 0.0, "with": 0.0}
    faults = busy_faults = 0
    for _ in range(args.nodes):
        t, runs = 0.0, []
        while t < horizon + 7 * DAY:
            dur = min(7 * DAY, rng.lognormvariate(0.0, 1.2) * args.median_h * 3600)
            runs.append(Run(t, t + dur, rng.random() < args.resumable, rng.randint(60, 480)))
            t += dur
        f = rng.expovariate(args.fault_rate / DAY)
        while f < horizon:
            faults += 1
            run = next(r for r in runs if r.start <= f < r.end)
            busy_faults += 1
            repair = args.repair_h * 3600
            held["without"] += (run.end - f) + repair
            held["with"] += _drain_wait(cfg, f, run) + repair
            f += rng.expovariate(args.fault_rate / DAY)
    print(f"{args.nodes} nodes x {args.days:g} days, {args.fault_rate:g} faults/node-day, "
          f"repair {args.repair_h:g} h, job median {args.median_h:g} h, "
          f"{args.resumable:.0%} resumable: {faults} faults")
    for k in ("without", "with"):
        print(f"  {k:<7} repairs at the contract: {held[k] / 3600:10.0f} node-hours held "
              f"({held[k] / 3600 / max(1, faults):.1f} h per fault)")
    cut = 1 - held["with"] / held["without"] if held["without"] else 0.0
    print(f"  cut: {cut:.0%}")


if __name__ == "__main__":
    main()
