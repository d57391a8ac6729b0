"""Simulator speed: simulated days per wall-clock second, and peak memory.

Replays the real Philly trace (``traces/pollux_philly/philly.csv`` shipped in ``slurm_ml/data/``:
82k jobs over 109 days, 15 VCs = teams) on a 1,000-GPU cluster (125 nodes x 8 GPUs,
budgets proportional to ``philly_vc.csv``) under a policy, and reports how many
simulated days one wall-clock second covers, the peak RSS, and with ``--profile`` where
the time goes. Without the trace file (or with ``--synthetic``) it runs a synthetic
Philly-like workload instead, and says so in its output.

``--overload`` is issue 17's case instead: two weeks of the real trace (hours 720-1056)
with arrivals scaled to 2.5x the cluster's capacity (``scenario.arrival_scale_for``),
20% of the jobs unallocated (QOS free) and 0.5 debug jobs per team per hour, as
``slurm-ml sim --start-hours 720 --hours 336 --gpus 1000 --demand 2.5 --unallocated 0.2
--debug-rate 0.5`` builds it; the run goes on until the backlog has drained.

Usage: python benchmarks/bench_sim.py [--policy budget[,fifo...]] [--gpus 1000] [--days D]
                                      [--demand X] [--overload] [--synthetic]
                                      [--cycle-s S] [--profile] [--json]
Targets: quiet (issue 6) >= 1 simulated day per second with policy ``budget``, <= 1 GB
RSS; overload (issue 17) >= 5 simulated days per second, <= 1 GB RSS.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import math
import pstats
import random
import resource
import sys
import time
from pathlib import Path
from typing import Any

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import Config, load_config
from slurm_ml.sim.engine import Engine, SimSettings
from slurm_ml.sim.workload import LARGE, SMALL, SimJob

REPO = Path(__file__).resolve().parents[1]
PHILLY = "traces/pollux_philly/philly.csv"
DAY = 86400.0


def _philly_trace() -> Any:
    """The shipped Philly trace, or None when the loader or its file is missing."""
    try:
        from slurm_ml.sim import traces
    except ImportError:
        return None
    path = traces.default_data_dir() / PHILLY
    return traces.load_philly(path) if path.exists() else None


def philly(
    days: float | None, gpus: int, demand: float | None
) -> tuple[Config, list[SimJob], str] | None:
    """The real trace on a ``gpus``-GPU cluster; None when the loader or file is missing."""
    from slurm_ml.sim import scenario, traces

    trace = _philly_trace()
    if trace is None:
        return None
    if days is not None:
        trace = scenario.slice_trace(trace, 0.0, days * DAY)
    if demand is not None:
        trace = scenario.scale_arrivals(trace, scenario.arrival_scale_for(trace, gpus, demand))
    cfg = scenario.trace_config(load_config(DEFAULT_CONFIG), trace, gpus, traces.default_vc_nodes())
    return cfg, list(trace.jobs), f"real: {trace.description}"


def overload(
    gpus: int,
    demand: float,
    *,
    start_hours: float,
    hours: float,
    unallocated: float,
    debug_rate: float,
) -> tuple[Config, list[SimJob], str] | None:
    """A slice of the real trace at ``demand`` times the cluster's capacity (as
    ``slurm-ml sim --start-hours --hours --demand --unallocated --debug-rate`` builds it);
    None when the trace file is missing."""
    from slurm_ml.sim import scenario, traces

    trace = _philly_trace()
    if trace is None:
        return None
    trace = scenario.slice_trace(trace, start_hours * 3600, (start_hours + hours) * 3600)
    trace = scenario.scale_arrivals(trace, scenario.arrival_scale_for(trace, gpus, demand))
    if unallocated:
        trace = scenario.mark_unallocated(trace, unallocated, seed=0)
    if debug_rate:
        trace = scenario.inject_debug_jobs(trace, debug_rate, seed=0)
    cfg = scenario.trace_config(load_config(DEFAULT_CONFIG), trace, gpus, traces.default_vc_nodes())
    ratio = scenario.demand_ratio(trace, gpus)
    return cfg, list(trace.jobs), (f"real, overloaded ({ratio:.2f}x demand): {trace.description}")


def synthetic(days: float | None, gpus: int) -> tuple[Config, list[SimJob], str]:
    """SYNTHETIC Philly-like jobs: 15 teams, ~750 jobs/day (Poisson), Philly's GPU-count
    mix (93% single-GPU) and a log-normal run time with Philly's median (~19 min) and
    mean (~3.6 h)."""
    import dataclasses

    from slurm_ml.model import BudgetProgram, BudgetProject, BudgetTree, NodeClass

    rnd = random.Random(6)
    span = (days or 109.0) * DAY
    teams = [f"vc{i:02d}" for i in range(15)]
    sizes = [(1, 0.932), (2, 0.022), (4, 0.023), (8, 0.020), (16, 0.0024), (32, 0.0008)]
    jobs: list[SimJob] = []
    t = 0.0
    while True:
        t += rnd.expovariate(750.0 / DAY)
        if t >= span:
            break
        gpus_asked = rnd.choices([g for g, _ in sizes], [w for _, w in sizes])[0]
        duration = min(30 * DAY, max(1.0, rnd.lognormvariate(math.log(1144.0), 2.2)))
        team = rnd.choice(teams)
        jobs.append(
            SimJob(
                job_id=len(jobs) + 1,
                team=team,
                user=f"u{team}",
                submit_s=t,
                gpus=gpus_asked,
                duration_s=duration,
                kind=LARGE if gpus_asked > 8 else SMALL,
            )
        )
    base = load_config(DEFAULT_CONFIG)
    nodes = gpus // 8
    classes = tuple(
        NodeClass(
            f"leaf{i}",
            f"sim[{i * 32 + 1:03d}-{min(nodes, (i + 1) * 32):03d}]",
            "a100_80g",
            8,
            f"leaf{i}",
            ("a100_80g",),
            64,
            512_000,
        )
        for i in range(math.ceil(nodes / 32))
    )
    budgets = BudgetTree(
        "ml",
        (
            BudgetProgram(
                "philly",
                1.0,
                tuple(
                    BudgetProject(team, 1.0 + i % 4, (f"u{team}",)) for i, team in enumerate(teams)
                ),
            ),
        ),
    )
    cfg = dataclasses.replace(base, node_classes=classes, budgets=budgets)
    return cfg, jobs, f"SYNTHETIC Philly-like workload: {len(jobs)} jobs, 15 teams"


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def run_one(
    cfg: Config,
    jobs: list[SimJob],
    policy: str,
    profile: bool,
    cycle_s: float = SimSettings().cycle_s,
) -> tuple[dict[str, object], cProfile.Profile | None]:
    """One simulation under ``policy``: its speed (the whole run, and its loaded part:
    the cycles that began with work queued), and the profile when asked."""
    profiler = cProfile.Profile() if profile else None
    engine = Engine(cfg, jobs, policy, SimSettings(cycle_s=cycle_s), decisions=False)
    began = time.perf_counter()
    cpu_began = time.process_time()  # beside the wall time: this machine is shared
    if profiler is not None:
        profiler.enable()
    loaded_sim = loaded_wall = 0.0
    last_t: float | None = None
    last_wall = began
    queued = False
    for record in engine.cycles():
        wall_now = time.perf_counter()
        if queued and last_t is not None:
            loaded_sim += record.t_s - last_t
            loaded_wall += wall_now - last_wall
        queued = any(record.sample.pending_gpus.values())
        last_t, last_wall = record.t_s, wall_now
    result = engine.result()
    if profiler is not None:
        profiler.disable()
    wall = time.perf_counter() - began
    cpu = time.process_time() - cpu_began
    days = (result.end_s - result.start_s) / DAY
    return {
        "policy": policy,
        "cycle_s": cycle_s,
        "cluster_gpus": result.cluster_gpus,
        "jobs": len(jobs),
        "simulated_days": round(days, 2),
        "wall_s": round(wall, 2),
        "sim_days_per_s": round(days / wall, 2),
        "cpu_s": round(cpu, 2),
        "sim_days_per_cpu_s": round(days / cpu, 2) if cpu else None,
        "loaded_days": round(loaded_sim / DAY, 2),
        "loaded_wall_s": round(loaded_wall, 2),
        "loaded_days_per_s": round(loaded_sim / DAY / loaded_wall, 2) if loaded_wall else None,
        "cycles": len(result.samples),
        "preemptions": result.preemptions,
        "qos_preemptions": result.qos_preemptions,
        "peak_rss_mb": round(peak_rss_mb(), 1),
    }, profiler


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--policy",
        default="budget",
        help="a policy, or several separated by commas (run in that order)",
    )
    ap.add_argument("--gpus", type=int, default=None, help="cluster GPUs (default 1000)")
    ap.add_argument("--days", type=float, default=None, help="first D days of arrivals")
    ap.add_argument(
        "--demand",
        type=float,
        default=None,
        help="scale arrivals to this demand/capacity ratio (real trace only)",
    )
    ap.add_argument(
        "--overload",
        action="store_true",
        help="the overload case: hours 720-1056 of the real trace at 2.5x "
        "demand, 20%% unallocated, 0.5 debug jobs/team/h (issue 17)",
    )
    ap.add_argument("--start-hours", type=float, default=720.0, help="with --overload")
    ap.add_argument("--hours", type=float, default=336.0, help="with --overload")
    ap.add_argument("--unallocated", type=float, default=0.2, help="with --overload")
    ap.add_argument("--debug-rate", type=float, default=0.5, help="with --overload")
    ap.add_argument("--cycle-s", type=float, default=SimSettings().cycle_s,
                    help="the policy cycle in simulated seconds (the daemon's is 60)")
    ap.add_argument("--synthetic", action="store_true", help="skip the real trace")
    ap.add_argument("--profile", action="store_true", help="print the top functions")
    ap.add_argument("--profile-out", metavar="FILE",
                    help="with --profile: also dump the pstats to FILE.POLICY")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    gpus = args.gpus or 1000
    began = time.perf_counter()
    if args.overload:
        got = overload(
            gpus,
            args.demand or 2.5,
            start_hours=args.start_hours,
            hours=args.hours,
            unallocated=args.unallocated,
            debug_rate=args.debug_rate,
        )
        if got is None:
            print("the overload case needs the real trace", file=sys.stderr)
            return 2
    else:
        got = None if args.synthetic else philly(args.days, gpus, args.demand)
    cfg, jobs, workload = got if got is not None else synthetic(args.days, gpus)
    load_s = time.perf_counter() - began
    rss_before = peak_rss_mb()
    target_days = 5.0 if args.overload else 1.0
    target = f">= {target_days:g} simulated day/s and <= 1024 MB"
    rows = []
    ok = True
    for policy in args.policy.split(","):
        out, profiler = run_one(cfg, jobs, policy.strip(), args.profile, args.cycle_s)
        # ru_maxrss is the process's peak so far: later policies include earlier ones
        out = {
            "workload": workload,
            **out,
            "load_s": round(load_s, 2),
            "rss_after_load_mb": round(rss_before, 1),
            "target": target,
        }
        out["meets_target"] = (
            float(str(out["sim_days_per_s"])) >= target_days
            and float(str(out["peak_rss_mb"])) <= 1024
        )
        ok = ok and bool(out["meets_target"])
        rows.append(out)
        if not args.json:
            for key, value in out.items():
                print(f"{key:>18}: {value}")
            print()
        if profiler is not None:
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
            print(text.getvalue(), file=sys.stderr)
            if args.profile_out:
                profiler.dump_stats(f"{args.profile_out}.{policy.strip()}")
    if args.json:
        print(json.dumps(rows if len(rows) > 1 else rows[0], indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
