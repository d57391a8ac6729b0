"""``slurm-ml sim sweep``: one scenario run at several values of one knob, so a policy
setting is chosen from a curve instead of a single run.

A sweep is a list of points (the scenario file with one override each, read by the same
strict loader as ``sim --scenario``). Each point is computed on its own, in a worker
process or a Slurm array task, and written atomically to ``DIR/points/<name>.json`` with
a key over everything that decides its result (the resolved scenario, the knob value and
the base config's text): a rerun skips every point whose file has the same key, so an
interrupted or partly failed sweep only redoes what is missing. Gathering reads the
point files into ``sweep.json``, a Markdown table and one chart.

Nothing here talks to Slurm directly: :func:`run_on_slurm` gets a ``SlurmClient``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import shlex
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from slurm_ml.config import Config
from slurm_ml.sim.metrics import Summary, targets
from slurm_ml.sim.scenario_file import Scenario, ScenarioError, load_scenario, parse_override
from slurm_ml.sim.workload import LARGE

__all__ = [
    "MEASURES",
    "Point",
    "Sweep",
    "SweepError",
    "array_command",
    "gather",
    "load_manifest",
    "measures",
    "parse_vary",
    "plan",
    "render_table",
    "run_local",
    "run_on_slurm",
    "run_point",
    "write_chart",
    "write_manifest",
    "write_outputs",
    "write_text_atomic",
]

#: (key, heading, unit): what the table and the chart show per policy and knob value.
MEASURES: tuple[tuple[str, str, str], ...] = (
    ("worst_ratio", "worst enough-demand team delivered/owed", "pct"),
    ("median_ratio", "median team delivered/owed", "pct"),
    ("debug_p90_s", "debug p90 wait", "s"),
    ("large_p90_s", "large-job p90 wait", "s"),
    ("occupancy", "occupancy (judged window)", "pct"),
    ("lost_pct", "GPU-h lost to preemption / GPU-h run", "pct"),
)
POINTS_DIR = "points"
MANIFEST = "manifest.json"
FORMAT = 1  # of the point files and the manifest


class SweepError(ValueError):
    """A sweep that cannot start: a bad --vary, a point's scenario the loader refuses."""


@dataclasses.dataclass(frozen=True, slots=True)
class Point:
    """One knob value of a sweep, with the scenario it resolves to."""

    index: int
    label: str  # the value as the user wrote it
    value: Any  # read as YAML
    name: str  # file-name safe, unique in the sweep
    scenario: Scenario
    key: str  # hash of what decides the result

    def path(self, out: Path) -> Path:
        return out / POINTS_DIR / f"{self.name}.json"

    def error_path(self, out: Path) -> Path:
        return out / POINTS_DIR / f"{self.name}.err"


@dataclasses.dataclass(frozen=True, slots=True)
class Sweep:
    """Everything a worker needs to compute any point (and the manifest records)."""

    scenario_path: str
    config_path: str
    knob: str
    hours: float | None
    policies: tuple[str, ...]
    out: Path
    points: tuple[Point, ...]

    def done(self) -> list[Point]:
        return [p for p in self.points if _done(p, self.out)]

    def todo(self) -> list[Point]:
        return [p for p in self.points if not _done(p, self.out)]


def _split(values: str) -> list[str]:
    """Comma-separated values; commas inside ``[]`` or ``{}`` belong to the value."""
    out, depth, cur = [], 0, ""
    for ch in values:
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return out


def parse_vary(text: str) -> tuple[str, list[tuple[str, Any]]]:
    """``KNOB=v1,v2,...`` -> (knob, [(label, value), ...]). Raises SweepError."""
    knob, sep, values = text.partition("=")
    knob = knob.strip()
    if not sep or not knob or not all(knob.split(".")):
        raise SweepError(f"--vary {text!r}: expected KNOB.PATH=V1,V2,... "
                         "(e.g. engine.cycle_s=60,300,600)")
    labels = _split(values)
    if not labels or any(not v for v in labels):
        raise SweepError(f"--vary {text!r}: empty value in the list")
    dupes = sorted({v for v in labels if labels.count(v) > 1})
    if dupes:
        raise SweepError(f"--vary {text!r}: value(s) given twice: {', '.join(dupes)}")
    out = []
    for label in labels:
        try:
            _, value = parse_override(f"{knob}={label}")
        except ScenarioError as exc:
            raise SweepError(f"--vary: {exc}") from exc
        out.append((label, value))
    return knob, out


def _safe(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", s)[:80]


def _text_hash(path: str) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return "unreadable"


def _point_key(sc: Scenario, knob: str, value: Any, config_hash: str) -> str:
    from slurm_ml.sim.prepare import resolve

    data = {"format": FORMAT, "scenario": resolve(sc).as_dict(), "knob": knob,
            "value": value, "config_sha256": config_hash}
    blob = json.dumps(data, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def _scenario(scenario_path: str, knob: str, value: Any, hours: float | None,
              policies: Sequence[str]) -> Scenario:
    sc = load_scenario(scenario_path, ((tuple(knob.split(".")), value),))
    return dataclasses.replace(sc, hours=hours if hours is not None else sc.hours,
                               policies=tuple(policies) or sc.policies)


def plan(scenario_path: str | Path, vary: str, out: Path, *, config_path: str | Path,
         hours: float | None = None, policies: Sequence[str] = (),
         base: Config | None = None) -> Sweep:
    """The sweep's points, each scenario loaded and checked now (a bad knob or value is a
    SweepError before anything runs). With ``base`` (the config loaded from
    ``config_path``) each point's ``policy.*`` knobs are checked against it too."""
    from slurm_ml.config import ConfigError, revise
    from slurm_ml.sim.prepare import POLICIES

    knob, values = parse_vary(vary)
    scenario_path, config_path = str(Path(scenario_path).resolve()), str(
        Path(config_path).resolve())
    config_hash = _text_hash(config_path)
    points = []
    for i, (label, value) in enumerate(values):
        try:
            sc = _scenario(scenario_path, knob, value, hours, policies)
        except ScenarioError as exc:
            raise SweepError(str(exc)) from exc
        bad = [p for p in sc.policies or () if p not in POLICIES]
        if bad:
            raise SweepError(f"{sc.source}: unknown policy {', '.join(bad)} "
                             f"(known: {', '.join(POLICIES)})")
        if sc.policy and base is not None:
            try:
                revise(base, {"policy": sc.policy}, source=f"{sc.source} ({knob}={label})")
            except ConfigError as exc:
                raise SweepError(f"--vary {knob}={label}: invalid policy:\n{exc}") from exc
        points.append(Point(index=i, label=label, value=value,
                            name=f"{i:03d}-{_safe(f'{knob}={label}')}", scenario=sc,
                            key=_point_key(sc, knob, value, config_hash)))
    return Sweep(scenario_path=scenario_path, config_path=config_path, knob=knob,
                 hours=hours, policies=tuple(policies), out=Path(out), points=tuple(points))


def _done(p: Point, out: Path) -> bool:
    try:
        data = json.loads(p.path(out).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("key") == p.key and data.get("status") == "ok"


# ----------------------------------------------------------------- one point

def measures(s: Summary) -> dict[str, float | None]:
    """The sweep's measures of one policy's run (keys of :data:`MEASURES`)."""
    checks = {c.name: c.value for c in targets(s)}
    large = s.waits.get(LARGE)
    run = sum(t.gpu_h_run for t in s.teams)
    return {
        "worst_ratio": checks.get("min ratio (enough demand)"),
        "median_ratio": checks.get("median team ratio"),
        "debug_p90_s": checks.get("debug p90 wait"),
        "large_p90_s": large.p90_s if large is not None and large.jobs else None,
        "occupancy": checks.get("occupancy"),
        "lost_pct": s.lost_gpu_h / run if run > 0 else None,
    }


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file beside it (made with its folder),
    so a reader sees the old file or the new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def run_point(sweep: Sweep, index: int) -> dict[str, Any]:
    """Compute point ``index`` and write its file (its ``.err`` file on failure, then
    re-raise). Runs in a worker process or a Slurm array task."""
    from slurm_ml.config import load_config
    from slurm_ml.sim.prepare import prepare, run_policy, scenario_info, summaries

    p = sweep.points[index]
    started = time.monotonic()
    try:
        prep = prepare(p.scenario, load_config(sweep.config_path))
        results = [run_policy(prep, name) for name in prep.policies]
        judged = summaries(prep, results)
        out = {
            "format": FORMAT, "status": "ok", "key": p.key, "index": p.index,
            "knob": sweep.knob, "label": p.label, "value": p.value,
            "wall_s": round(time.monotonic() - started, 3),
            "scenario": scenario_info(prep, judged),
            "policies": [s.policy for s in judged],
            "measures": {s.policy: measures(s) for s in judged},
            "summaries": [s.as_dict() for s in judged],
        }
    except Exception as exc:
        write_text_atomic(p.error_path(sweep.out),
                      f"{type(exc).__name__}: {exc}\n\n{traceback.format_exc()}")
        raise
    write_text_atomic(p.path(sweep.out), json.dumps(json_safe(out), indent=1, sort_keys=True))
    p.error_path(sweep.out).unlink(missing_ok=True)
    return out


def json_safe(x: Any) -> Any:
    """JSON without NaN or infinity (None instead)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): json_safe(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [json_safe(v) for v in x]
    return x


def _worker(sweep: Sweep, index: int) -> int:
    run_point(sweep, index)
    return index


def run_local(sweep: Sweep, *, jobs: int | None = None,
              progress: Callable[[Point, str | None], None] | None = None
              ) -> dict[int, str]:
    """Compute the points not done yet, ``jobs`` at a time (1: in this process).
    ``progress(point, error)`` is called as each finishes. Returns index -> error."""
    todo = sweep.todo()
    failed: dict[int, str] = {}

    def finished(p: Point, err: str | None) -> None:
        if err is not None:
            failed[p.index] = err
        if progress is not None:
            progress(p, err)

    workers = max(1, min(jobs or os.cpu_count() or 1, len(todo)))
    if workers == 1:
        for p in todo:
            try:
                run_point(sweep, p.index)
            except Exception as exc:
                finished(p, f"{type(exc).__name__}: {exc}")
            else:
                finished(p, None)
        return failed
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures: dict[Future[int], Point] = {pool.submit(_worker, sweep, p.index): p
                                             for p in todo}
        for fut in as_completed(futures):
            p = futures[fut]
            err = fut.exception()
            finished(p, None if err is None else f"{type(err).__name__}: {err}")
    return failed


# ----------------------------------------------------------------- Slurm

def write_manifest(sweep: Sweep) -> Path:
    """``DIR/manifest.json``: what an array task needs to rebuild the sweep."""
    data = {"format": FORMAT, "scenario_path": sweep.scenario_path,
            "config_path": sweep.config_path, "knob": sweep.knob, "hours": sweep.hours,
            "policies": list(sweep.policies), "out": str(sweep.out.resolve()),
            "points": [{"index": p.index, "label": p.label, "name": p.name, "key": p.key}
                       for p in sweep.points]}
    path = sweep.out / MANIFEST
    write_text_atomic(path, json.dumps(data, indent=1))
    return path


def load_manifest(path: str | Path) -> Sweep:
    """The sweep a manifest describes, re-planned from its files; SweepError when the
    scenario or config changed since it was written (the keys would not match)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if data.get("format") != FORMAT:
        raise SweepError(f"{path}: manifest format {data.get('format')!r}, "
                         f"expected {FORMAT}")
    labels = ",".join(p["label"] for p in data["points"])
    sweep = plan(data["scenario_path"], f"{data['knob']}={labels}", Path(data["out"]),
                 config_path=data["config_path"], hours=data["hours"],
                 policies=data["policies"])
    for p, want in zip(sweep.points, data["points"], strict=True):
        if p.key != want["key"]:
            raise SweepError(f"{path}: point {p.name}: the scenario or config changed since "
                             "the manifest was written; rerun the sweep")
    return sweep


def array_command(manifest: Path, python: str) -> str:
    """The shell line each array task runs (its index from Slurm)."""
    return (f"{shlex.quote(python)} -m slurm_ml.cli sim sweep-point "
            f"--manifest {shlex.quote(str(manifest.resolve()))} "
            "--index $SLURM_ARRAY_TASK_ID")


_ENDED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
                    "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED", "SPECIAL_EXIT"})


def run_on_slurm(sweep: Sweep, slurm: Any, *, partition: str, python: str,
                 time_limit_min: int | None = None, account: str | None = None,
                 poll_s: float = 5.0, sleep: Callable[[float], None] = time.sleep,
                 on_submit: Callable[[int, int], None] | None = None,
                 progress: Callable[[int, int], None] | None = None) -> dict[int, str]:
    """Submit the points not done yet as one job array on ``partition`` and wait for it
    to end; returns index -> why, for the points that have no result then. ``slurm`` is
    a :class:`~slurm_ml.slurm.protocol.SlurmClient`."""
    from slurm_ml.slurm.protocol import ArrayRequest

    todo = sweep.todo()
    if not todo:
        return {}
    manifest = write_manifest(sweep)
    logs = sweep.out.resolve() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    req = ArrayRequest(indices=tuple(p.index for p in todo),
                       command=array_command(manifest, python), partition=partition,
                       account=account, name="slurm-ml-sweep",
                       time_limit=None if time_limit_min is None else str(time_limit_min),
                       output=str(logs / "%A_%a.out"), workdir=str(sweep.out.resolve()))
    job_id = slurm.submit_array(req)
    if on_submit is not None:
        on_submit(job_id, len(todo))
    try:
        seen = _wait(slurm, job_id, todo, sweep.out, poll_s=poll_s, sleep=sleep,
                     progress=progress)
    except KeyboardInterrupt:  # else a rerun would submit the running points again
        slurm.cancel([job_id])
        raise
    failed = {}
    for p in todo:
        if not _done(p, sweep.out):
            state = seen.get(p.index, "ended")
            failed[p.index] = (f"array task {job_id}_{p.index} {state}: "
                               f"{_first_line(p.error_path(sweep.out)) or 'no result'} "
                               f"(log: {logs / f'{job_id}_{p.index}.out'})")
    return failed


def _wait(slurm: Any, job_id: int, todo: Sequence[Point], out: Path, *, poll_s: float,
          sleep: Callable[[float], None], progress: Callable[[int, int], None] | None
          ) -> dict[int, str]:
    """Poll the array until squeue lists no live task; the last state seen per index."""
    seen: dict[int, str] = {}
    unseen = 0  # polls before squeue first lists the array (it should at once)
    while True:
        tasks = slurm.array_tasks(job_id)
        seen.update(tasks)
        live = {i for i, s in tasks.items() if s not in _ENDED}
        if progress is not None:
            progress(sum(_done(p, out) for p in todo), len(todo))
        if not live and (seen or unseen >= 5):
            return seen
        unseen += not seen
        sleep(poll_s)


def _first_line(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").splitlines()[0]
    except (OSError, IndexError):
        return None


# ----------------------------------------------------------------- gathering

def gather(sweep: Sweep) -> dict[str, Any]:
    """Every point's result (or its absence) as one JSON-ready dict: sweep.json."""
    points = []
    for p in sweep.points:
        row: dict[str, Any] = {"index": p.index, "label": p.label, "value": p.value,
                               "name": p.name}
        if _done(p, sweep.out):
            data = json.loads(p.path(sweep.out).read_text(encoding="utf-8"))
            order = data.get("policies") or sorted(data["measures"])
            row.update(status="ok", measures={k: data["measures"][k] for k in order},
                       scenario=data["scenario"], wall_s=data.get("wall_s"),
                       summaries=data.get("summaries"))
        else:
            row.update(status="failed", error=_first_line(p.error_path(sweep.out))
                       or "no result")
        points.append(row)
    return {"format": FORMAT, "scenario": sweep.scenario_path, "config": sweep.config_path,
            "knob": sweep.knob, "hours": sweep.hours,
            "policies": sorted({pol for r in points for pol in r.get("measures", {})},
                               key=_policy_order(points)),
            "measures": [{"key": k, "title": t, "unit": u} for k, t, u in MEASURES],
            "points": points}


def _policy_order(points: Sequence[Mapping[str, Any]]) -> Callable[[str], int]:
    order: list[str] = []
    for r in points:
        order += [p for p in r.get("measures", {}) if p not in order]
    return order.index


def _fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "pct":
        return f"{v * 100:.1f}%"
    return f"{v:.0f} s"


def render_table(data: Mapping[str, Any]) -> str:
    """sweep.md: knob value x policy -> each measure."""
    knob = data["knob"]
    head = [knob, "policy", *(m["title"] for m in data["measures"])]
    lines = [f"# Sweep of `{knob}`", "",
             f"Scenario `{data['scenario']}`"
             + (f", {data['hours']:g} h of arrivals" if data.get("hours") else "") + ".", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in data["points"]:
        if r["status"] != "ok":
            why = str(r["error"]).replace("|", "\\|")
            lines.append(f"| {r['label']} | FAILED: {why} |"
                         + " |" * len(data["measures"]))
            continue
        for pol, ms in r["measures"].items():
            cells = [_fmt(ms.get(m["key"]), m["unit"]) for m in data["measures"]]
            lines.append(f"| {r['label']} | {pol} | " + " | ".join(cells) + " |")
    lines += ["", "Ratios are Ai2's delivered/owed over the judged window (warm-up and "
              "drain excluded); waits include jobs that never started, at their censored "
              "wait; lost GPU-hours are work undone by preemption, over all GPU-hours run.",
              ""]
    return "\n".join(lines)


def _numeric(points: Sequence[Mapping[str, Any]]) -> bool:
    return all(isinstance(r["value"], int | float) and not isinstance(r["value"], bool)
               for r in points)


def write_chart(data: Mapping[str, Any], path: Path) -> Path:
    """sweep.png: one panel per measure against the knob, one line per policy."""
    from slurm_ml.sim.report_charts import MARKERS, PALETTE, _pyplot, text

    plt = _pyplot()
    ms = data["measures"]
    points = [r for r in data["points"] if r["status"] == "ok"]
    numeric = _numeric(points)
    cols = 3
    rows = math.ceil(len(ms) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    for n, m in enumerate(ms):
        ax = axes[n // cols][n % cols]
        for k, pol in enumerate(data["policies"]):
            xs, ys = [], []
            for j, r in enumerate(points):
                v = r["measures"].get(pol, {}).get(m["key"])
                if v is None:
                    continue
                xs.append(r["value"] if numeric else j)
                ys.append(v * 100 if m["unit"] == "pct" else v)
            ax.plot(xs, ys, marker=MARKERS[k % len(MARKERS)], color=PALETTE[k % len(PALETTE)],
                    label=text(pol))
        if not numeric:
            ax.set_xticks(range(len(points)), [text(r["label"]) for r in points])
        ax.set_title(m["title"], fontsize=10)
        ax.set_xlabel(text(data["knob"]))
        ax.set_ylabel("%" if m["unit"] == "pct" else "seconds")
        ax.grid(alpha=0.3)
    for n in range(len(ms), rows * cols):
        axes[n // cols][n % cols].set_visible(False)
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="upper center", ncol=len(labels), frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_outputs(sweep: Sweep) -> dict[str, Any]:
    """Gather, then write sweep.json, sweep.md and sweep.png in the sweep's directory."""
    data = gather(sweep)
    write_text_atomic(sweep.out / "sweep.json", json.dumps(json_safe(data), indent=1))
    write_text_atomic(sweep.out / "sweep.md", render_table(data))
    write_chart(data, sweep.out / "sweep.png")
    return data


def failed_names(sweep: Sweep, failed: Iterable[int]) -> str:
    return ", ".join(f"{sweep.knob}={sweep.points[i].label}" for i in sorted(failed))
