"""Example 1.4 of the seed material: per-pool utilisation with admission off and on.

The seed material's Example 1.4, as quoted to us: a 1,024-GPU cluster of 400 A100-80GB
and 424 A100-40GB on 8-GPU NVLink nodes and 200 V100-32GB on 4-GPU PCIe nodes; jobs
needing 35 GB copied an A100-80GB template, and the V100 nodes "support only data
parallelism"; utilisation went from 60% to 84% with capability matching, measured
memory needs and backfill (A100-40GB 64% -> 88%, V100 0% -> 71%). The seed itself is not
available to us: those figures are the quotation's, and the A100-80GB row is derived
from them (total x 1,024 minus the other two pools, over 400), not quoted.

This runs ``examples/sim/example-1.4.yaml`` (``sim.prepare``, the pipeline ``slurm-ml
sim --scenario`` runs) with ``admission: off`` and ``on``, under each of its policies,
and prints each pool's occupancy over the judged window beside the seed's figures, and
the share of the slice's GPU-hours that admission let onto a V100.
``--data-share F`` replaces the file's stated data/tensor split of multi-GPU jobs (a
sensitivity check, not the scenario: the file's own split is the result).
``--variant all-80g`` is the same with every job asking for A100-80GB: then "before"
cannot use A100-40GB or V100 at all.

Usage: python benchmarks/sim_example_1_4.py [--variant example|all-80g] [--seed N]
       [--data-share F] [--json]
(about 45 s on one core for the two arms and two policies)
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
from slurm_ml.sim.prepare import prepare, run_policy, summaries
from slurm_ml.sim.scenario_file import load_scenario

REPO = Path(__file__).resolve().parents[1]
SCENARIO = REPO / "examples" / "sim" / "example-1.4.yaml"
POOLS = (("a100_80g", "A100-80GB", 400), ("a100_40g", "A100-40GB", 424),
         ("v100", "V100-32GB", 200))
#: the issue's figures (before, after); None where the issue gives none
SEED: dict[str, tuple[float, float]] = {"a100_40g": (0.64, 0.88), "v100": (0.0, 0.71),
                                        "total": (0.60, 0.84)}
VARIANTS: dict[str, tuple[tuple[tuple[str, ...], Any], ...]] = {
    "example": (),
    # the file's parallel split is kept: only the type named and its need change
    "all-80g": ((("requests", "gpu_type"), {"a100_80g": 1.0}),
                (("requests", "mem_gb"), {16: 0.25, 24: 0.15, 35: 0.45, 60: 0.15})),
}


def _data_share(share: float | None) -> tuple[tuple[tuple[str, ...], Any], ...]:
    """The override that makes ``share`` of multi-GPU jobs say parallel=data."""
    if share is None:
        return ()
    split = {k: v for k, v in (("data", share), ("tensor", 1 - share)) if v > 0}
    return ((("requests", "parallel"), split),)


def _v100_share(jobs: Any) -> float:
    """GPU-hours of the jobs admission let onto a V100, over all the slice's GPU-hours
    (each job's whole run, so a little beyond the judged window)."""
    total = sum(j.gpus * j.duration_s for j in jobs)
    may = sum(j.gpus * j.duration_s for j in jobs if j.gpu_types and "v100" in j.gpu_types)
    return may / total if total else 0.0


def _derived_80g(total: float, a40: float, v100: float) -> float:
    return (total * 1024 - a40 * 424 - v100 * 200) / 400


def run(variant: str, seed: int | None = None,
        data_share: float | None = None) -> dict[str, Any]:
    base = load_config(DEFAULT_CONFIG)
    arms: dict[str, Any] = {}
    for arm, on in (("off", False), ("on", True)):
        reseed = () if seed is None else ((("seed",), seed),)
        sc = load_scenario(SCENARIO, overrides=(*VARIANTS[variant], *reseed,
                                                *_data_share(data_share),
                                                (("admission",), on)))
        t0 = time.perf_counter()
        prep = prepare(sc, base)
        results = [run_policy(prep, p) for p in prep.policies]
        judged = summaries(prep, results)
        arms[arm] = {
            "wall_s": round(time.perf_counter() - t0, 1),
            "admission": dict(prep.admission),
            "jobs": len(prep.trace.jobs), "scale": prep.scale,
            "v100_may_gpu_h_share": _v100_share(prep.trace.jobs),
            "parallel": dict(sc.requests.parallel) if sc.requests else {},
            "policies": {s.policy: {"total": s.steady_occupancy,
                                    "pools": dict(s.type_occupancy),
                                    "offered_load": s.offered_load,
                                    "wait_p50_s": s.waits["all"].p50_s,
                                    "wait_p90_s": s.waits["all"].p90_s,
                                    "sim_wall_s": s.wall_s}
                         for s in judged},
        }
    seed80 = tuple(_derived_80g(SEED["total"][i], SEED["a100_40g"][i], SEED["v100"][i])
                   for i in (0, 1))
    return {"variant": variant, "seed_override": seed, "data_share": data_share,
            "scenario": str(SCENARIO.relative_to(REPO)),
            "seed": {**SEED, "a100_80g_derived": seed80}, "arms": arms}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.0f}%"


def table(data: dict[str, Any]) -> str:
    off, on = data["arms"]["off"], data["arms"]["on"]
    policies = list(on["policies"])
    head = ["pool", "GPUs", "seed before -> after"] + [f"ours {p} off -> on" for p in policies]
    rows = []
    for key, label, gpus in (*POOLS, ("total", "total", 1024)):
        if key == "a100_80g":
            b, a = data["seed"]["a100_80g_derived"]
            seed = f"({_pct(b)} -> {_pct(a)}, derived)"
        else:
            b, a = data["seed"][key]
            seed = f"{_pct(b)} -> {_pct(a)}"
        def get(arm: dict[str, Any], policy: str, key: str = key) -> float | None:
            got = arm["policies"][policy]
            value: float | None = got["total"] if key == "total" else got["pools"].get(key)
            return value

        ours = [f"{_pct(get(off, p))} -> {_pct(get(on, p))}" for p in policies]
        rows.append([label, str(gpus), seed, *ours])
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(head, widths, strict=True)),
             "-+-".join("-" * w for w in widths)]
    lines += [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    adm = on["admission"]
    lines.append("")
    lines.append(f"{on['jobs']} jobs (arrivals x{on['scale']:.2f}), offered load "
                 f"{on['policies'][policies[0]]['offered_load']:.2f}; admission on widened "
                 f"{adm['widened']} jobs, rejected {adm['rejected']} "
                 f"({adm['decisions']} distinct decide() calls); runs on: {adm['runs_on']}")
    lines.append(f"parallel split of multi-GPU jobs: {on['parallel'] or 'none said'}; "
                 f"admission let {on['v100_may_gpu_h_share']:.1%} of the slice's GPU-hours "
                 f"onto a V100 (V100s are {200 / 1024:.1%} of the GPUs)")
    lines.append(f"wall time: off {off['wall_s']} s, on {on['wall_s']} s (prepare + "
                 f"{len(policies)} policies each)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variant", choices=sorted(VARIANTS), default="example")
    ap.add_argument("--seed", type=int, default=None,
                    help="draw the synthetic requests with this seed (default: the file's)")
    ap.add_argument("--data-share", type=float, default=None,
                    help="share of multi-GPU jobs that say parallel=data, instead of the "
                         "file's (a sensitivity check)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.data_share is not None and not 0 <= args.data_share <= 1:
        ap.error("--data-share must be in [0, 1]")
    data = run(args.variant, args.seed, args.data_share)
    if args.json:
        json.dump(data, sys.stdout, indent=1, default=str)
        print()
    else:
        print(table(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
