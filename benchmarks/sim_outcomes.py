"""Issue 18's targets table: every ``examples/sim/outcomes-*.yaml`` scenario x the four
policies x seeds, each measure the median over seeds with its min-max range.

Measures, per run (a scenario file, one policy, one seed; the seed replaces the file's
``seed``: which jobs are unallocated and the debug arrivals), over the judged window
(``slurm_ml.sim.metrics``: first arrival + 10% warm-up to the last arrival) unless said:

- **debug p90**: p90 queue wait of the debug jobs (never-started ones at their censored
  wait), over every arrival, the warm-up included, as ``metrics.targets`` judges it;
  target <= 60 s.
- **occupancy**: busy GPU time over capacity in the judged window; target >= 95%, or
  no more than half a point below ``fifo``'s in the same seed where ``fifo`` itself is
  under 95% (``metrics.occupancy_bound``).
- **worst team**: lowest Ai2 delivered/owed (capped, hour by hour: ``ai2_measures``)
  over the teams with enough demand (decided from the offered load, the same for every
  policy); target >= 95%. **median team**: median over every team owed something;
  target >= 98%. Both exactly as ``metrics.targets`` judges them.
- **large p90**: p90 wait of jobs of >= 16 GPUs submitted in the judged window
  (``metrics.large_job_p90_wait``), and its ratio to ``fifo``'s in the same seed;
  target: ``budget``'s no worse than ``fifo``'s (ratio <= 1).
- **preemption loss**: GPU-seconds lost to requeues (contracts and Slurm's QOS
  preemption; not node faults) over GPU-seconds delivered, over the whole run
  (``metrics.preemption_loss_fraction``); target <= 2%.

The "targets met" column (``budget`` only) judges each target on the median over seeds
(the large-job target on the median of the per-seed ratios) and says in how many seeds
each was met.

Usage: python benchmarks/sim_outcomes.py [SCENARIO.yaml ...] [--seeds 0,1,2] [--jobs 2]
                                         [--out DIR] [--config slurm-ml.yaml] [--json]
                                         [--policies budget,fifo] [--set KEY=VALUE ...]
``--set`` overrides a scenario key in every scenario, as ``slurm-ml sim --set`` does
(``engine.cycle_s=60``, ``policy.fast_lane.preempt_cap_fraction=0.02``).
Without scenario files it runs every examples/sim/outcomes-*.yaml. Each run is written
to ``OUT/<scenario>/<policy>-seed<N>.json`` as soon as it ends; a rerun skips the runs
already there (same scenario text, config text, seed and policy), so an interrupted
table resumes. Progress goes to stderr, the Markdown tables (or ``--json``: the
aggregated data) to stdout. On 2 shared cores the six scenarios x 4 policies x 3 seeds
took 18 minutes with ``--jobs 2`` (2026-12-02; a two-week ``budget`` run 2-3.5 min).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from slurm_ml.sim.metrics import occupancy_bound, relative_wait
from slurm_ml.sim.sweep import json_safe, write_text_atomic

REPO = Path(__file__).resolve().parents[1]
POLICIES = ("fifo", "slurm-fairshare", "budget", "budget-nocontract")
FORMAT = 1

#: (key, heading, unit, op, threshold): what a cell shows and, for budget, its target.
#: ``large_vs_fifo`` is the target's measure for the large-job column.
TARGETS: tuple[tuple[str, str, str, str, float], ...] = (
    ("debug_p90_s", "debug p90", "s", "<=", 60.0),
    # judged as occupancy - metrics.occupancy_bound(fifo's): >= 0
    ("occupancy_margin", "occupancy", "pct", ">=", 0.0),
    ("worst_ratio", "worst team", "pct", ">=", 0.95),
    ("median_ratio", "median team", "pct", ">=", 0.98),
    ("large_vs_fifo", "large p90 vs fifo", "x", "<=", 1.0),
    ("loss_frac", "preemption loss", "pct", "<=", 0.02),
)
_EPS = 1e-9


# ----------------------------------------------------------------- one run

@functools.lru_cache(maxsize=2)
def _prepared(scenario_path: str, seed: int, config_path: str,
              overrides: tuple[str, ...] = ()) -> Any:
    """The scenario built once per (file, seed, overrides) in a worker: the policies
    share it. ``overrides``: ``KEY.PATH=VALUE`` texts, as ``sim --set`` takes them."""
    import dataclasses

    from slurm_ml.config import load_config
    from slurm_ml.sim.prepare import prepare
    from slurm_ml.sim.scenario_file import load_scenario, parse_override

    sc = dataclasses.replace(load_scenario(scenario_path, tuple(map(parse_override, overrides))),
                             seed=seed, policies=POLICIES)
    return prepare(sc, load_config(config_path))


def run_one(scenario_path: str, policy: str, seed: int, config_path: str,
            overrides: tuple[str, ...] = ()) -> dict[str, Any]:
    """Simulate one policy on one scenario and seed (with ``overrides``: see
    ``_prepared``); its measures (JSON-ready)."""
    from slurm_ml.sim.metrics import targets
    from slurm_ml.sim.prepare import run_policy, summaries
    from slurm_ml.sim.workload import DEBUG

    t0 = time.monotonic()
    prep = _prepared(scenario_path, seed, config_path, overrides)
    result = run_policy(prep, policy)
    (s,) = summaries(prep, [result])
    checks = {c.name: c for c in targets(s)}
    window = s.judged_window or s.window
    debug = s.waits.get(DEBUG)
    worst = checks["min ratio (enough demand)"]
    needy = sorted(t.team for t in s.ai2.values() if t.enough_demand and t.ratio is not None)
    low = min((t for t in s.ai2.values() if t.enough_demand and t.ratio is not None),
              key=lambda t: t.ratio or 0.0, default=None)
    return {
        "debug_p90_s": checks["debug p90 wait"].value,
        "occupancy": checks["occupancy"].value,
        "worst_ratio": worst.value,
        "worst_team": low.team if low is not None else None,
        "median_ratio": checks["median team ratio"].value,
        "large_p90_s": s.large_p90_s,
        "large_jobs": s.large_jobs,
        "loss_frac": s.loss_frac,
        "debug_jobs": debug.jobs if debug is not None else 0,
        "debug_never_started": debug.never_started if debug is not None else 0,
        "enough_demand_teams": needy,
        "offered_load": s.offered_load,
        "jobs": len(prep.trace.jobs),
        "gpus": prep.gpus,
        "scale": prep.scale,
        "judged_window_s": list(window),
        "preemptions": s.preemptions,
        "qos_preemptions": s.qos_preemptions,
        "lost_gpu_h_run": sum(j.lost_gpu_s for j in result.jobs) / 3600.0,
        "sim_wall_s": result.wall_s,
        "wall_s": time.monotonic() - t0,
    }


def _key(scenario_path: str, policy: str, seed: int, config_path: str,
         overrides: tuple[str, ...] = ()) -> str:
    h = hashlib.sha256()
    parts = [Path(scenario_path).read_bytes(), Path(config_path).read_bytes(),
             f"{policy}/{seed}/{FORMAT}".encode()]
    if overrides:  # without, the key of the runs made before --set
        parts.append("\n".join(overrides).encode())
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()


def _path(out: Path, scenario_path: str, policy: str, seed: int) -> Path:
    return out / Path(scenario_path).stem / f"{policy}-seed{seed}.json"


def _load_done(path: Path, key: str) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = isinstance(data, dict) and data.get("key") == key and data.get("status") == "ok"
    return data if ok else None


def _task(scenario_path: str, policy: str, seed: int, *, config_path: str, out: str,
          commit: str | None, overrides: tuple[str, ...] = ()) -> dict[str, Any]:
    """Worker: one run, written atomically to its file."""
    measures = run_one(scenario_path, policy, seed, config_path, overrides)
    data = {"format": FORMAT, "status": "ok",
            "key": _key(scenario_path, policy, seed, config_path, overrides),
            "scenario": Path(scenario_path).stem, "scenario_path": scenario_path,
            "policy": policy, "seed": seed, "config": config_path, "commit": commit,
            "overrides": list(overrides), "measures": measures}
    write_text_atomic(_path(Path(out), scenario_path, policy, seed),
                      json.dumps(json_safe(data), indent=1, sort_keys=True))
    return data


# ----------------------------------------------------------------- all runs

def _commit() -> str | None:
    done = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=False)
    return done.stdout.strip() or None if done.returncode == 0 else None


def _frozen_config(config_path: str, out: Path) -> str:
    """A copy of the config's text under ``out``, named by its hash: what every run of
    this table reads (the same text gives the same file, so resumed tables find it)."""
    text = Path(config_path).read_text(encoding="utf-8")
    frozen = out / ".config" / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.yaml"
    if not frozen.is_file():
        write_text_atomic(frozen, text)
    return str(frozen)


def _cost(scenario_path: str, policy: str) -> float:
    """Rough relative run time, to start the longest runs first."""
    text = Path(scenario_path).read_text(encoding="utf-8")
    weeks = 2.0 if "hours: 336" in text else 1.0
    return weeks * (1.0 if policy == "fifo" else 4.0)


def run_all(scenarios: Sequence[str], seeds: Sequence[int], *, jobs: int, out: Path,
            config_path: str, log: Callable[[str], None],
            policies: Sequence[str] = POLICIES,
            overrides: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Every (scenario, policy, seed) not in ``out`` yet, ``jobs`` at a time; every
    run's record (the done ones read back). A failed run is logged and left out.

    The runs read a copy of ``config_path`` taken now (``_frozen_config``), so an edit
    to the config while a table runs changes none of its runs."""
    commit = _commit()
    config_path = _frozen_config(config_path, out)
    todo: list[tuple[str, str, int]] = []
    records: list[dict[str, Any]] = []
    for sc in scenarios:
        for seed in seeds:
            for policy in policies:
                done = _load_done(_path(out, sc, policy, seed),
                                  _key(sc, policy, seed, config_path, overrides))
                if done is not None:
                    records.append(done)
                else:
                    todo.append((sc, policy, seed))
    total = len(todo)
    log(f"{len(records)} runs already in {out}, {total} to run, {jobs} at a time")
    todo.sort(key=lambda t: (-_cost(t[0], t[1]), t[0], t[2]))
    t0 = time.monotonic()
    finished = 0

    def report(spec: tuple[str, str, int], data: dict[str, Any] | None,
               err: BaseException | None) -> None:
        nonlocal finished
        finished += 1
        name = f"{Path(spec[0]).stem} {spec[1]} seed {spec[2]}"
        elapsed = time.monotonic() - t0
        if err is not None:
            log(f"[{finished}/{total}] {name}: FAILED: {type(err).__name__}: {err}")
            return
        assert data is not None
        m = data["measures"]
        log(f"[{finished}/{total}] {name}: {m['wall_s']:.0f} s (debug p90 "
            f"{_cell(m['debug_p90_s'], 's')}, occupancy {_cell(m['occupancy'], 'pct')}, "
            f"worst {_cell(m['worst_ratio'], 'pct')}); {elapsed / 60:.1f} min elapsed")
        records.append(data)

    if jobs <= 1:
        for spec in todo:
            try:
                data = _task(*spec, config_path=config_path, out=str(out), commit=commit,
                             overrides=overrides)
            except Exception as exc:  # logged; the other runs still run
                report(spec, None, exc)
            else:
                report(spec, data, None)
        return records
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures: dict[Future[dict[str, Any]], tuple[str, str, int]] = {
            pool.submit(_task, *spec, config_path=config_path, out=str(out), commit=commit,
                        overrides=overrides): spec for spec in todo}
        for fut in as_completed(futures):
            err = fut.exception()
            report(futures[fut], None if err is not None else fut.result(), err)
    return records


# ----------------------------------------------------------------- aggregation

def _stats(values: Sequence[float | None]) -> dict[str, Any]:
    got = [v for v in values if v is not None]
    return {"median": statistics.median(got) if got else None,
            "min": min(got) if got else None, "max": max(got) if got else None,
            "values": list(values), "n": len(got)}


def _met(value: float | None, op: str, threshold: float) -> bool | None:
    if value is None:
        return None
    return value <= threshold + _EPS if op == "<=" else value >= threshold - _EPS


def aggregate(records: Sequence[dict[str, Any]], scenarios: Sequence[str],
              seeds: Sequence[int], policies: Sequence[str] = POLICIES) -> dict[str, Any]:
    """Per scenario and policy: each measure over the seeds; budget's targets."""
    by: dict[tuple[str, str, int], Mapping[str, Any]] = {
        (r["scenario"], r["policy"], r["seed"]): r["measures"] for r in records}
    out: dict[str, Any] = {}
    for path in scenarios:
        name = Path(path).stem
        pols: dict[str, Any] = {}
        for policy in policies:
            runs = {s: by[name, policy, s] for s in seeds if (name, policy, s) in by}
            if not runs:
                continue
            for s, measured in list(runs.items()):
                fifo = by.get((name, "fifo", s), {})
                mine = measured.get("large_p90_s")
                m = dict(measured)
                runs[s] = m
                m["large_vs_fifo"] = relative_wait(mine, fifo.get("large_p90_s"))
                occ = measured.get("occupancy")
                m["occupancy_margin"] = (None if occ is None
                                         else occ - occupancy_bound(fifo.get("occupancy")))
            keys = ("debug_p90_s", "occupancy", "occupancy_margin", "worst_ratio",
                    "median_ratio",
                    "large_p90_s", "large_vs_fifo", "loss_frac", "offered_load",
                    "debug_jobs", "large_jobs", "jobs", "preemptions", "wall_s")
            entry: dict[str, Any] = {"seeds": sorted(runs),
                                     **{k: _stats([runs[s].get(k) for s in sorted(runs)])
                                        for k in keys}}
            entry["worst_team"] = [runs[s].get("worst_team") for s in sorted(runs)]
            entry["gpus"] = next(iter(runs.values()))["gpus"]
            if policy == "budget":
                entry["targets"] = {
                    key: {"op": op, "threshold": thr,
                          "median_met": _met(entry[key]["median"], op, thr),
                          "seeds_met": sum(1 for s in sorted(runs)
                                           if _met(runs[s].get(key), op, thr)),
                          "seeds": len(runs)}
                    for key, _h, _u, op, thr in TARGETS}
            pols[policy] = entry
        out[name] = {"path": str(Path(path).resolve().relative_to(REPO))
                     if Path(path).resolve().is_relative_to(REPO) else path,
                     "policies": pols}
    return out


def _cell(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "pct":
        return f"{v * 100:.1f}%"
    if unit in ("s", "n"):
        return f"{v:,.0f}"
    return f"{v:.2f}"


def _range(st: Mapping[str, Any], unit: str) -> str:
    if st["median"] is None:
        return "-"
    mid = _cell(st["median"], unit)
    if st["n"] < 2 or _cell(st["min"], unit) == _cell(st["max"], unit):
        return mid
    return f"{mid} ({_cell(st['min'], unit)}–{_cell(st['max'], unit)})"


def render(agg: Mapping[str, Any]) -> str:
    """One Markdown table per scenario: rows policies, median (min-max) over seeds."""
    lines: list[str] = []
    for name, sc in agg.items():
        pols = sc["policies"]
        if not pols:
            continue
        first = next(iter(pols.values()))
        seeds = first["seeds"]
        lines.append(f"**{name}** (`{sc['path']}`): {first['gpus']} GPUs, "
                     f"{_range(first['jobs'], 'n')} jobs incl. "
                     f"{_range(first['debug_jobs'], 'n')} debug, "
                     f"{_range(first['large_jobs'], 'n')} of >= 16 GPUs in the judged window, "
                     f"offered load {_range(first['offered_load'], 'x')}; seeds "
                     f"{','.join(str(s) for s in seeds)}")
        lines.append("")
        lines.append("| policy | debug p90 s | occupancy | worst team (enough demand) "
                     "| median team | large p90 s | large vs fifo | preemption loss "
                     "| targets met |")
        lines.append("|---|---|---|---|---|---|---|---|---|")
        for policy, e in pols.items():
            met = "-"
            if "targets" in e:
                t = e["targets"]
                ok = [h for k, h, *_ in TARGETS if t[k]["median_met"]]
                miss = [f"{h} ({t[k]['seeds_met']}/{t[k]['seeds']} seeds)"
                        for k, h, *_ in TARGETS if not t[k]["median_met"]]
                met = f"**{len(ok)}/{len(TARGETS)}**" + (
                    f"; missed: {', '.join(miss)}" if miss else "")
            lines.append(
                f"| {policy} | {_range(e['debug_p90_s'], 's')} "
                f"| {_range(e['occupancy'], 'pct')} | {_range(e['worst_ratio'], 'pct')} "
                f"| {_range(e['median_ratio'], 'pct')} | {_range(e['large_p90_s'], 's')} "
                f"| {_range(e['large_vs_fifo'], 'x')} | {_range(e['loss_frac'], 'pct')} "
                f"| {met} |")
        lines.append("")
    return "\n".join(lines)


def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--seeds: {text!r}: {exc}") from exc
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"--seeds: {text!r}: distinct integers >= 0")
    return seeds


def _policies(text: str) -> list[str]:
    got = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in got if p not in POLICIES]
    if not got or bad:
        raise argparse.ArgumentTypeError(f"choose from {', '.join(POLICIES)}, not {text!r}")
    return got


def main(argv: Sequence[str] | None = None) -> int:
    from slurm_ml.assets import DEFAULT_CONFIG

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenarios", nargs="*",
                    help="scenario files (default: examples/sim/outcomes-*.yaml)")
    ap.add_argument("--seeds", type=_seeds, default=[0, 1, 2])
    ap.add_argument("--jobs", type=int, default=2, help="parallel processes (default 2)")
    ap.add_argument("--out", type=Path,
                    default=Path(tempfile.gettempdir()) / "slurm-ml-sim-outcomes",
                    help="per-run JSON files; runs already there are skipped")
    ap.add_argument("--config", default=str(DEFAULT_CONFIG),
                    help="slurm-ml.yaml whose policy knobs to simulate")
    ap.add_argument("--json", action="store_true", help="print the aggregated data")
    ap.add_argument("--policies", type=_policies, default=list(POLICIES),
                    help=f"comma-separated subset of {','.join(POLICIES)} (default all)")
    ap.add_argument("--set", dest="overrides", action="append", default=[],
                    metavar="KEY=VALUE", help="a scenario key for every scenario "
                    "(as slurm-ml sim --set); repeatable")
    args = ap.parse_args(argv)
    scenarios = [str(Path(p).resolve()) for p in args.scenarios] or [
        str(p) for p in sorted((REPO / "examples" / "sim").glob("outcomes-*.yaml"))]
    missing = [p for p in scenarios if not Path(p).is_file()]
    if missing:
        ap.error(f"no such scenario file: {', '.join(missing)}")

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    records = run_all(scenarios, args.seeds, jobs=max(1, args.jobs), out=args.out,
                      config_path=str(Path(args.config).resolve()), log=log,
                      policies=args.policies, overrides=tuple(args.overrides))
    agg = aggregate(records, scenarios, args.seeds, args.policies)
    expected = len(scenarios) * len(args.policies) * len(args.seeds)
    if args.json:
        print(json.dumps(json_safe({"seeds": args.seeds, "runs": len(records),
                                  "expected_runs": expected, "commit": _commit(),
                                  "scenarios": agg}), indent=1))
    else:
        print(render(agg))
    return 0 if len(records) == expected else 1


if __name__ == "__main__":
    raise SystemExit(main())
