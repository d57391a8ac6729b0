"""Issue 18's fast-lane lever: the lane's own requeues (``policy.lane_requeue``) against
the same scenarios without them, at the daemon's 60 s cycle.

Each issue-18 scenario named (default: the three one-week ones) runs ``budget`` per seed
in three variants, all else as its file says:

- **300 s, no lane requeues**: the targets table's setting (the simulator's default
  cycle);
- **60 s, no lane requeues**: the daemon's cycle (``fairshare.cycle_interval_s``);
- **60 s, lane requeues**: and ``fast_lane.preempt_cap_fraction`` = ``--cap`` (0.02),
  without submitd's wakes (``fast_lane.wake_min_gap_s`` = 0): at each ``--lane-cycles``;
- **60 s, lane requeues, wakes**: the same with the wakes at their default (10 s): a
  cycle ``preempt_after_s`` after each lane admission, as the daemon's loop runs one.

and ``fifo`` at 60 s for the large-job ratio. Measures as ``sim_outcomes.py`` (its
``run_one``). The simulator stops a victim at once and charges it the work since its
last checkpoint; the daemon signals it and requeues after ``contracts.requeue_grace_s``
(60 s by default), which a lane job waits on top of what is measured here.

Usage: python benchmarks/sim_lane_requeue.py [SCENARIO.yaml ...] [--seeds 0,1,2]
                                             [--cap 0.02] [--lane-cycles 60,30]
                                             [--only TEXT] [--jobs 2] [--json]
       python benchmarks/sim_lane_requeue.py --from-json RUN.json
Progress to stderr, a Markdown table (median over seeds, min-max) to stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sim_outcomes import REPO, _range, _stats, run_one

from slurm_ml.assets import DEFAULT_CONFIG

SCENARIOS = tuple(str(REPO / "examples" / "sim" / f) for f in (
    "outcomes-1-philly-1w.yaml", "outcomes-2-philly-1w-unalloc20.yaml",
    "outcomes-6-ai2-nonproportional.yaml"))
MEASURES = (("debug_p90_s", "debug p90 s", "s"), ("worst_ratio", "worst team", "pct"),
            ("median_ratio", "median team", "pct"), ("large_vs_fifo", "large p90 vs fifo", "x"),
            ("loss_frac", "preemption loss", "pct"), ("occupancy", "occupancy", "pct"))


def variants(cap: float, lane_cycles: Sequence[int] = (60,)
             ) -> list[tuple[str, str, tuple[str, ...]]]:
    """(label, policy, overrides): the lane's requeues at each of ``lane_cycles``."""
    c60 = ("engine.cycle_s=60",)
    return [("budget, 300 s cycle", "budget", ()),
            ("budget, 60 s cycle", "budget", c60),
            *((f"budget, {c} s, lane requeues {cap:g}", "budget",
               (f"engine.cycle_s={c}", f"policy.fast_lane.preempt_cap_fraction={cap}",
                "policy.fast_lane.wake_min_gap_s=0"))
              for c in lane_cycles),
            (f"budget, 60 s, lane requeues {cap:g}, wakes", "budget",
             ("engine.cycle_s=60", f"policy.fast_lane.preempt_cap_fraction={cap}")),
            ("fifo, 60 s cycle", "fifo", c60)]


def _one(path: str, label: str, policy: str, seed: int, overrides: tuple[str, ...]
         ) -> tuple[str, str, int, dict[str, Any]]:
    return path, label, seed, run_one(path, policy, seed, str(DEFAULT_CONFIG), overrides)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenarios", nargs="*", default=list(SCENARIOS))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--cap", type=float, default=0.02)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--lane-cycles", default="60",
                    help="cycle times (s) to run the lane's requeues at, comma-separated")
    ap.add_argument("--only", default="",
                    help="run only the variants whose label contains this (and fifo)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--from-json", type=Path, default=None,
                    help="render the tables of an earlier --json run, running nothing")
    args = ap.parse_args(argv)
    if args.from_json is not None:
        print(render(json.loads(args.from_json.read_text())))
        return 0
    seeds = [int(s) for s in args.seeds.split(",")]
    kinds = [v for v in variants(args.cap, [int(c) for c in args.lane_cycles.split(",")])
             if args.only in v[0] or v[1] == "fifo"]
    todo = [(path, label, policy, seed, ov) for path in args.scenarios
            for label, policy, ov in kinds for seed in seeds]
    results: dict[tuple[str, str, int], dict[str, Any]] = {}
    t0 = time.monotonic()
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(_one, *t) for t in todo]
        for k, fut in enumerate(as_completed(futures), 1):
            path, label, seed, m = fut.result()
            results[path, label, seed] = m
            print(f"[{k}/{len(todo)}] {Path(path).stem} {label} seed {seed}: "
                  f"debug p90 {m['debug_p90_s']:.0f} s ({time.monotonic() - t0:.0f} s)",
                  file=sys.stderr, flush=True)
    for (path, _label, seed), m in results.items():
        fifo = results.get((path, "fifo, 60 s cycle", seed))
        big, ref = m.get("large_p90_s"), fifo.get("large_p90_s") if fifo else None
        m["large_vs_fifo"] = big / ref if big is not None and ref else None
    flat = {f"{Path(p).stem}|{lbl}|{s}": m for (p, lbl, s), m in results.items()}
    if args.json:
        print(json.dumps(flat, indent=1, default=str))
        return 0
    print(render(flat))
    return 0


def render(flat: dict[str, dict[str, Any]]) -> str:
    """The Markdown tables of ``--json``'s output (keys ``scenario|variant|seed``): one
    per scenario, a row per variant in the order first seen, median (min-max) over the
    seeds."""
    by: dict[str, dict[str, list[dict[str, Any]]]] = {}
    seeds: dict[str, set[str]] = {}
    for key, m in flat.items():
        stem, label, seed = key.rsplit("|", 2)
        by.setdefault(stem, {}).setdefault(label, []).append(m)
        seeds.setdefault(stem, set()).add(seed)
    out: list[str] = []
    for stem, rows_of in by.items():
        out += [f"\n**{stem}** (seeds {','.join(sorted(seeds[stem]))})\n",
                "| variant | " + " | ".join(h for _, h, _ in MEASURES) + " | requeues |",
                "|---" * (len(MEASURES) + 2) + "|"]
        for label, rows in rows_of.items():
            cells = [_range(_stats([r.get(k) for r in rows]), unit) for k, _, unit in MEASURES]
            pre = _range(_stats([float(r["preemptions"]) for r in rows]), "n")
            out.append(f"| {label} | " + " | ".join(cells) + f" | {pre} |")
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
