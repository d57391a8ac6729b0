"""Outcomes across offered load: every ``examples/sim/outcomes-*.yaml`` scenario at
offered loads 1.5, 2, 2.5 and 3 (the scenario's ``arrivals.target_load`` set to each),
under ``fifo`` and ``budget``, judged on the six outcome targets.

Each load is one ``benchmarks/sim_outcomes.py`` table (the same runs, measures and
targets: ``metrics.targets``' rules, occupancy against ``fifo``'s where ``fifo`` is under
95%, the large-job p90 against ``fifo``'s in the same seed), written to
``OUT/load-<L>/``; runs already there are skipped, so an interrupted sweep resumes.
``--set KEY=VALUE`` applies to every run (a lever: ``--set
policy.fairshare.gang_first_after_min=240``), and ``--baseline DIR`` takes ``fifo``'s
runs from another sweep's folder (a lever changes ``budget`` only, so its sweep need not
run ``fifo`` again).

Prints one Markdown table, a row per scenario and load: ``budget``'s six measures,
each marked where it misses, and ``fifo``'s occupancy and large-job p90 beside them.

Usage: python benchmarks/sim_load_sweep.py [--loads 1.5,2,2.5,3] [--seeds 0] [--jobs 2]
           [--out DIR] [--baseline DIR] [--set KEY=VALUE ...] [--json]
(seed 0, both policies, six scenarios x four loads: about 35 minutes on 2 cores.)
``--recorded`` runs nothing and prints the table of the runs already there.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sim_outcomes as oc

from slurm_ml.sim.metrics import human_duration

LOADS = (1.5, 2.0, 2.5, 3.0)
#: (key of a budget measure, heading, unit): the six targets, in ``oc.TARGETS``' order
SHOWN = (("debug_p90_s", "debug p90", "s"), ("occupancy", "occupancy", "pct"),
         ("worst_ratio", "worst team", "pct"), ("median_ratio", "median team", "pct"),
         ("large_vs_fifo", "large p90 vs fifo", "x"), ("loss_frac", "loss", "pct"))


def _label(load: float) -> str:
    return f"{load:g}"


def _scenarios() -> list[str]:
    return [str(p) for p in sorted((oc.REPO / "examples" / "sim").glob("outcomes-*.yaml"))]


def recorded(loads: list[float], *, seeds: list[int], out: Path,
             baseline: Path | None) -> dict[str, Any]:
    """Per load, the aggregate of the runs recorded under ``out`` (and ``fifo``'s under
    ``baseline``), whatever config or code made them: the table of a sweep made earlier,
    as its records say (each names its commit and config)."""
    scenarios = _scenarios()
    got: dict[str, Any] = {}
    for load in loads:
        folders = [out / f"load-{_label(load)}"]
        if baseline is not None:
            folders.append(baseline / f"load-{_label(load)}")
        records = []
        for i, folder in enumerate(folders):
            for path in sorted(folder.glob("*/*-seed*.json")):
                rec = json.loads(path.read_text(encoding="utf-8"))
                if rec["seed"] in seeds and (i == 0 or rec["policy"] == "fifo"):
                    records.append(rec)
        got[_label(load)] = oc.aggregate(records, scenarios, seeds,
                                         [p for p in oc.POLICIES if p in {"fifo", "budget"}])
    return got


def sweep(loads: list[float], *, seeds: list[int], jobs: int, out: Path,
          baseline: Path | None, overrides: tuple[str, ...], config: str,
          policies: list[str]) -> dict[str, Any]:
    """Per load, ``sim_outcomes``' aggregate of its runs (fifo's from ``baseline``)."""
    scenarios = _scenarios()
    got: dict[str, Any] = {}
    for load in loads:
        sets = (f"arrivals.target_load={load:g}", *overrides)
        def log(msg: str, load: float = load) -> None:
            print(f"[load {load:g}] {msg}", file=sys.stderr, flush=True)

        records = oc.run_all(scenarios, seeds, jobs=jobs, out=out / f"load-{_label(load)}",
                             config_path=config, log=log, policies=policies, overrides=sets)
        if baseline is not None and "fifo" not in policies:
            records += oc.run_all(scenarios, seeds, jobs=jobs,
                                  out=baseline / f"load-{_label(load)}", config_path=config,
                                  log=log, policies=["fifo"],
                                  overrides=(f"arrivals.target_load={load:g}",))
        got[_label(load)] = oc.aggregate(records, scenarios, seeds,
                                         sorted({*policies, "fifo"}, key=oc.POLICIES.index))
    return got


def _cell(entry: dict[str, Any], key: str, unit: str) -> str:
    value = entry[key]["median"]
    if value is None:
        return "-"
    shown = (human_duration(value) if unit == "s" else f"{value * 100:.1f}%"
             if unit == "pct" else f"{value:.2f}")
    met = entry.get("targets", {}).get("occupancy_margin" if key == "occupancy" else key)
    return shown if met is None or met["median_met"] is not False else f"**{shown}** (missed)"


def render(data: dict[str, Any]) -> str:
    lines = ["| scenario | load | " + " | ".join(h for _, h, _ in SHOWN)
             + " | targets met | fifo occupancy | fifo large p90 |",
             "|---|---|" + "---|" * (len(SHOWN) + 3)]
    names = list(next(iter(data.values())).keys()) if data else []
    for name in names:
        for load, agg in data.items():
            pols = agg[name]["policies"]
            budget, fifo = pols.get("budget"), pols.get("fifo")
            if budget is None:
                continue
            met = sum(1 for t in budget["targets"].values() if t["median_met"])
            fifo_occ = "-" if fifo is None else _cell(fifo, "occupancy", "pct")
            fifo_large = "-" if fifo is None else _cell(fifo, "large_p90_s", "s")
            offered = budget["offered_load"]["median"]
            lines.append(
                f"| {name.removeprefix('outcomes-')} | {load} ({offered:.2f}) | "
                + " | ".join(_cell(budget, k, u) for k, _, u in SHOWN)
                + f" | {met}/6 | {fifo_occ} | {fifo_large} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from slurm_ml.assets import DEFAULT_CONFIG

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loads", type=lambda t: [float(x) for x in t.split(",")],
                    default=list(LOADS))
    ap.add_argument("--seeds", type=oc._seeds, default=[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path,
                    default=Path(tempfile.gettempdir()) / "slurm-ml-load-sweep")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="a sweep folder to take fifo's runs from (then fifo is not rerun)")
    ap.add_argument("--policies", type=oc._policies, default=["fifo", "budget"])
    ap.add_argument("--config", default=str(DEFAULT_CONFIG))
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--recorded", action="store_true",
                    help="run nothing: the table of the runs already under --out (and "
                         "--baseline), whatever config or commit made them")
    args = ap.parse_args(argv)
    if args.recorded:
        data = recorded(args.loads, seeds=args.seeds, out=args.out, baseline=args.baseline)
        print(json.dumps(oc.json_safe(data), indent=1) if args.json else render(data))
        return 0
    policies = args.policies if args.baseline is None else [
        p for p in args.policies if p != "fifo"]
    data = sweep(args.loads, seeds=args.seeds, jobs=max(1, args.jobs), out=args.out,
                 baseline=args.baseline, overrides=tuple(args.overrides),
                 config=str(Path(args.config).resolve()), policies=policies)
    print(json.dumps(oc.json_safe(data), indent=1) if args.json else render(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
