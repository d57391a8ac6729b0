"""How much compiling the simulator's hot path with mypyc buys, measured, not shipped.

Issue 17 asks for 5 simulated days/s under overload; interpreted, ``budget`` runs at
about 1.5. This copies ``slurm_ml/`` and ``benchmarks/`` into a temporary directory,
compiles the policy code and the simulator's engine there with mypyc (the code is
mypy-strict already, so it compiles unchanged), and runs ``bench_sim.py --overload``
on the interpreted tree and on the compiled copy, back to back in one run. Same
counts: those each run reports (cycles, preemptions, simulated days) must match; the
whole-outcome check is ``tests/unit/test_sim_overload_digest.py`` run with
``PYTHONPATH=DIR`` on a ``--keep DIR`` copy (with ``tests/`` copied in).

Needs a C compiler and the Python headers (``gcc``, ``python3-dev``); mypyc comes with
mypy, a dev dependency. The build takes about two minutes on two cores.

Usage: python benchmarks/mypyc_trial.py [--policy budget[,fifo]] [--keep DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: what the simulator runs per event and per cycle; the CLI, traces, config loading and
#: the report stay interpreted
COMPILED = ("slurm_ml/model.py", "slurm_ml/policy", "slurm_ml/sim/engine",
            "slurm_ml/sim/state.py", "slurm_ml/sim/cluster.py", "slurm_ml/sim/policies.py",
            "slurm_ml/sim/workload.py", "slurm_ml/sim/partition.py", "slurm_ml/sim/room.py")
SAME = ("simulated_days", "cycles", "preemptions", "qos_preemptions")


def bench(root: Path, policy: str) -> list[dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "bench_sim.py"), "--overload",
         "--policy", policy, "--json"],
        check=False, cwd=root, env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode not in (0, 1):  # 1: ran, the target missed
        sys.exit(f"bench_sim.py failed ({out.returncode}):\n{out.stderr[-4000:]}")
    data = json.loads(out.stdout)  # one policy: bench_sim prints its row alone
    rows: list[dict[str, Any]] = data if isinstance(data, list) else [data]
    return rows


def build(into: Path) -> None:
    for part in ("slurm_ml", "benchmarks"):
        shutil.copytree(REPO / part, into / part,
                        ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copy2(REPO / "pyproject.toml", into)  # mypy's settings: mypyc type-checks first
    print(f"mypyc: compiling {len(COMPILED)} paths in {into} (about two minutes)",
          file=sys.stderr, flush=True)
    mypyc = Path(sys.executable).with_name("mypyc")
    done = subprocess.run([str(mypyc), *COMPILED], check=False, cwd=into, timeout=1800,
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"mypyc failed ({done.returncode}):\n{(done.stdout + done.stderr)[-4000:]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default="budget,fifo")
    ap.add_argument("--keep", metavar="DIR", help="build in DIR and keep it")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="slurm-ml-mypyc."))
    try:
        build(tmp)
        print("bench: interpreted tree", file=sys.stderr, flush=True)
        plain = bench(REPO, args.policy)
        print("bench: compiled copy", file=sys.stderr, flush=True)
        compiled = bench(tmp, args.policy)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    rows = []
    for p, c in zip(plain, compiled, strict=True):
        rows.append({"policy": p["policy"], "interpreted_s": p["wall_s"],
                     "compiled_s": c["wall_s"], "speedup": round(p["wall_s"] / c["wall_s"], 2),
                     "interpreted_day_per_s": p["sim_days_per_s"],
                     "compiled_day_per_s": c["sim_days_per_s"],
                     "compiled_peak_rss_mb": c["peak_rss_mb"],
                     "same_counts": all(p[k] == c[k] for k in SAME)})
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        for r in rows:
            print(f"{r['policy']:>8}: interpreted {r['interpreted_s']:.1f} s "
                  f"({r['interpreted_day_per_s']} day/s), compiled {r['compiled_s']:.1f} s "
                  f"({r['compiled_day_per_s']} day/s), {r['speedup']}x, "
                  f"peak {r['compiled_peak_rss_mb']} MB, same counts: {r['same_counts']}")
    return 0 if all(r["same_counts"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
