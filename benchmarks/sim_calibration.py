"""Calibration: ``fifo`` on the real Philly trace against the published Philly waits.

Issue 6 asks for the mean and median GPU-job queue wait of ``fifo`` on the Philly
trace, at the cluster size the trace implies, within 2x of the published figures
(``traces/acme_calib/cluster_summary.csv``, row Philly: mean 3,761 s, median 189 s).

It replays ``pollux_philly/philly.csv`` four ways, because two things differ between
the extract and the cluster the figures were measured on:

- **pool vs partitioned**: one shared pool of 2,816 GPUs (352 nodes x 8, the node
  counts of ``helios_calib/philly_vc.csv``), or each VC only on its own nodes (Philly's
  VC quotas; ``slurm_ml.sim.partition``).
- **load 1x vs published load**: the extract holds fewer jobs and GPU-seconds than the
  full trace the figures describe; the second variant scales its arrival rate so its
  GPU-seconds match the published total (complete + cancel + fail GPU time).

Usage: python benchmarks/sim_calibration.py [--json]   (about a minute on 2 cores)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config
from slurm_ml.sim import scenario, traces
from slurm_ml.sim.engine import simulate
from slurm_ml.sim.metrics import summarize
from slurm_ml.sim.partition import partition_by_team

REPO = Path(__file__).resolve().parents[1]
PUBLISHED_GPU_TIME = ("complete_gpu_time", "cancel_gpu_time", "fail_gpu_time")


def published() -> tuple[float, float, float]:
    """(mean wait s, median wait s, total GPU-seconds) of Philly in cluster_summary.csv."""
    row = traces.default_calibration()["Philly"]
    if row.avg_queue_s is None or row.median_queue_s is None:
        raise SystemExit("cluster_summary.csv has no Philly queue figures")
    total = sum(row.values[c] or 0.0 for c in PUBLISHED_GPU_TIME)
    return row.avg_queue_s, row.median_queue_s, total


def run(partitioned: bool, load: float) -> dict[str, Any]:
    base = load_config(DEFAULT_CONFIG)
    trace = traces.load_trace("philly")
    vc_nodes = traces.default_vc_nodes()
    gpus = scenario.implied_cluster_gpus(trace, vc_nodes)
    if load != 1:
        trace = scenario.scale_arrivals(trace, load)
    cfg = scenario.trace_config(base, trace, gpus, vc_nodes)
    if partitioned:
        cfg, trace = partition_by_team(cfg, trace, vc_nodes)
    t0 = time.monotonic()
    result = simulate(cfg, trace.jobs, "fifo")
    summary = summarize(result)
    waits = summary.waits["all"]
    return {"layout": "partitioned by VC" if partitioned else "one pool", "load": load,
            "gpus": gpus, "jobs": len(trace.jobs), "mean_s": waits.mean_s,
            "median_s": waits.p50_s, "p90_s": waits.p90_s, "occupancy": summary.occupancy,
            "wall_s": time.monotonic() - t0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    mean, median, gpu_s = published()
    trace = traces.load_trace("philly")
    extract_gpu_s = sum(j.gpus * j.duration_s for j in trace.jobs)
    load = round(gpu_s / extract_gpu_s, 2)
    rows = []
    for partitioned in (False, True):
        for factor in (1.0, load):
            print(f"fifo, {'partitioned' if partitioned else 'pool'}, load x{factor} ...",
                  file=sys.stderr)
            rows.append(run(partitioned, factor))
    for row in rows:
        row["mean_ratio"] = row["mean_s"] / mean if row["mean_s"] is not None else None
        row["median_ratio"] = row["median_s"] / median if row["median_s"] is not None else None
    out = {"published": {"mean_s": mean, "median_s": median, "gpu_seconds": gpu_s},
           "extract": {"jobs": len(trace.jobs), "gpu_seconds": extract_gpu_s,
                       "published_load_factor": load},
           "runs": rows}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"published Philly: mean {mean:.0f} s, median {median:.0f} s, "
          f"{gpu_s:.3g} GPU-s; extract: {extract_gpu_s:.3g} GPU-s (x{load} to match)")
    print("| layout | load | mean wait | median wait | p90 | occupancy | mean/published "
          "| median/published |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['layout']} | x{r['load']:g} | {r['mean_s']:.0f} s | {r['median_s']:.0f} s "
              f"| {r['p90_s']:.0f} s | {r['occupancy']:.1%} | {r['mean_ratio']:.3f} "
              f"| {r['median_ratio']:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
