"""``sim --report DIR``: report.json, a self-contained index.html and its PNG charts.

The page has no external assets (inline CSS, images beside it) so it can be copied or
mailed as a folder. Every string that reaches the HTML is escaped: team and policy names
come from traces and configs.

A report comes after a simulation that may have taken minutes, so ``write_report`` does
not throw that work away: a chart that cannot be drawn (no matplotlib, a bug) or a
section that cannot be computed becomes a note on the page and in report.json saying
what failed and what to do. ``check_report_deps`` lets the CLI refuse up front instead.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any, Final

from slurm_ml.sim import metrics
from slurm_ml.sim.metrics import (
    TARGET_RULES,
    Summary,
    baseline_of,
    comparison_rows,
    flagged_teams,
    human_duration,
    shown_value,
    targets,
)
from slurm_ml.sim.report_charts import CHARTS, TraceClock  # matplotlib loads only to draw
from slurm_ml.sim.result import SimResult

log = logging.getLogger(__name__)

#: What the charts need, as pip spells it (pyproject.toml's main dependencies have it).
MATPLOTLIB_REQUIREMENT: Final = "matplotlib>=3.7"
INSTALL_HINT: Final = f"pip install '{MATPLOTLIB_REQUIREMENT}' (or reinstall slurm-ml)"


def check_report_deps(dir: Path | None = None) -> str | None:
    """Why ``sim --report`` could not write a full report, or None: the CLI calls this
    before simulating, so a missing matplotlib or an unwritable ``dir`` costs nothing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot  # the charts need pyplot, not just the package
    except Exception as exc:  # ImportError, or a broken install failing on import
        return (
            f"the report's charts need matplotlib, which failed to import "
            f"({type(exc).__name__}: {exc}): {INSTALL_HINT}"
        )
    if dir is not None:
        probe = dir
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        if probe.exists() and not probe.is_dir():
            return f"cannot write the report in {dir}: {probe} is not a directory"
        if not os.access(probe, os.W_OK | os.X_OK):
            return f"cannot write the report in {dir}: {probe} is not writable"
    return None


def _fix_for(exc: BaseException) -> str:
    """What the reader can do about a chart that failed with ``exc``."""
    if isinstance(exc, ImportError):
        return f"install it, then rerun: {INSTALL_HINT}"
    return (
        "the numbers above are unaffected; please report this (the full traceback is "
        "logged at DEBUG by slurm_ml.sim.report)"
    )


def _failure(what: str, exc: BaseException) -> dict[str, str]:
    log.warning("report: %s failed (%s: %s); the page says so", what, type(exc).__name__, exc)
    log.debug("report: %s failed", what, exc_info=exc)
    return {"what": what, "error": f"{type(exc).__name__}: {exc}", "fix": _fix_for(exc)}


def _note(failure: Mapping[str, str]) -> str:
    return (
        f'<p class="note">Could not draw {escape(failure["what"])}: '
        f"<code>{escape(failure['error'])}</code>. {escape(failure['fix'])}.</p>"
    )


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1200px; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
td.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
thead th { background: #f0f0f0; }
td.pass { background: #e3f6e3; } td.fail { background: #fbe3e3; }
figure { margin: 1em 0 2em; } img { max-width: 100%; border: 1px solid #ddd; }
pre { background: #f7f7f7; padding: 1em; white-space: pre-wrap; font-size: 0.85em; }
.note { background: #fff4d6; border-left: 4px solid #e0a800; padding: 0.6em 1em; }
"""


def _jsonable(x: object) -> Any:
    """Plain JSON values: str keys, lists, None for non-finite floats, str for the rest."""
    if x is None or isinstance(x, bool | int | str):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple | set | frozenset):
        return [_jsonable(v) for v in x]
    return str(x)


def _policy_data(r: SimResult, s: Summary, baseline: Summary | None) -> dict[str, Any]:
    out: dict[str, Any] = {"policy": s.policy, "wall_s": r.wall_s}
    try:
        out["summary"] = _jsonable(s.as_dict())
        out["targets"] = _jsonable([c.as_dict() for c in targets(s, baseline)])
        out["flagged_teams"] = _jsonable([f.as_dict() for f in flagged_teams(s)])
    except Exception as exc:  # keep the other policies and the page
        out["error"] = _failure(f"the summary of {s.policy}", exc)
    return out


def report_data(
    results: Sequence[SimResult],
    summaries: Sequence[Summary],
    *,
    title: str,
    scenario: Mapping[str, object],
    chart_failures: Mapping[str, Mapping[str, str]] | None = None,
    clock: TraceClock | None = None,
) -> dict[str, Any]:
    """What report.json holds: the scenario and its time axis, then per policy its
    summary, its six judged targets and its flagged teams, the charts drawn and, for each
    chart that was not, what failed and what to do."""
    failed = chart_failures or {}
    return {
        "title": title,
        "scenario": _jsonable(scenario),
        "time_axis": _time_axis(clock or TraceClock(), summaries),
        "policies": [_policy_data(r, s, baseline_of(summaries))
                     for r, s in zip(results, summaries, strict=True)],
        "charts": [name for name, _, _ in CHARTS if name not in failed],
        "chart_failures": [{"chart": name, **f} for name, f in failed.items()],
    }


def _time_axis(clock: TraceClock, summaries: Sequence[Summary]) -> dict[str, Any]:
    window = summaries[0].window if summaries else (0.0, 0.0)
    return {"dated": clock.dated, "trace_epoch_s": clock.epoch_s, "scale": clock.scale,
            "first_submit_s": clock.first_s, "label": clock.label(window),
            "compression": clock.compression(window) or None}


#: A cell that reads as a number (a count, 1,234.5, 95.8%, 300 s, >= 0.95, "-"): right-aligned.
_NUMERIC = re.compile(
    r"^(?:[<>]=\s*)?(?:-|[-+]?[\d,]*\.?\d+(?:e[-+]?\d+)?\s*(?:%|s|x|min|h|days)?)"
    r"(?:\s+(?:PASS|FAIL))?$"
)


def _table(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    classes: Sequence[Sequence[str]] | None = None,
) -> str:
    out = ["<table><thead><tr>", *(f"<th>{escape(h)}</th>" for h in header), "</tr></thead><tbody>"]
    for i, row in enumerate(rows):
        cells = []
        for j, c in enumerate(row):
            cls = " ".join(
                x
                for x in (
                    classes[i][j] if classes else "",
                    "num" if j and _NUMERIC.match(c) else "",
                )
                if x
            )
            attr = f' class="{escape(cls)}"' if cls else ""
            cells.append(f"<td{attr}>{escape(c)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def _num(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def _scenario_table(scenario: Mapping[str, object]) -> str:
    """One row per knob; the resolved scenario file's sections are spelled out key by key
    (``resolved.debug.gpus``), so the page shows everything a rerun needs."""
    rows: list[list[str]] = []

    def add(key: str, v: object, depth: int) -> None:
        if isinstance(v, Mapping) and v and depth > 0:
            for k, sub in v.items():
                add(f"{key}.{k}", sub, depth - 1)
        else:
            rows.append([key, v if isinstance(v, str) else json.dumps(_jsonable(v))])

    for k, v in scenario.items():
        add(str(k), v, 2 if k == "resolved" else 0)
    return _table(["knob", "value"], rows)


def _targets_table(summaries: Sequence[Summary]) -> str:
    rows, classes = [], []
    base = baseline_of(summaries)
    for s in summaries:
        for c in targets(s, base):
            rows.append(
                [
                    s.policy,
                    c.name,
                    shown_value(c),
                    TARGET_RULES[c.name],
                    "PASS" if c.passed else "FAIL",
                    c.explanation,
                ]
            )
            classes.append(["", "", "", "", "pass" if c.passed else "fail", ""])
    return _table(["policy", "target", "value", "target's rule", "result", "why"], rows, classes)


def _side_by_side(summaries: Sequence[Summary]) -> str:
    return _table(
        ["metric", *(s.policy for s in summaries)],
        [[label, *cells] for label, cells in comparison_rows(summaries)],
    )


def _teams_table(s: Summary) -> str:
    """Per team: Ai2's measures where the workload was given (the judged ones), whether the
    fairness targets judge the team, and a flag for a team they leave out below 95%."""
    flags = {f.team: f for f in flagged_teams(s)}
    if s.offered_load is None:
        return _running_teams_table(s, flags)
    rows, classes = [], []
    for t in s.teams:
        a = s.ai2.get(t.team)
        flag = flags.get(t.team)
        judged = "yes" if a is not None and a.enough_demand else "no"
        rows.append([
            t.team,
            _num(t.share_gpus, 1),
            _num(a.entitled_gpu_h if a else None, 0),
            _num(a.offered_gpu_h if a else None, 0),
            _num(a.owed_gpu_h if a else None, 0),
            _num(a.delivered_owed_gpu_h if a else None, 0),
            _pct(a.ratio if a else None),
            judged if flag is None else "no: FLAGGED (see above)",
            str(t.jobs),
            str(t.finished),
            _num(t.gpu_h_run, 0),
            _num(t.slowdown_p50),
            _num(t.slowdown_p90),
        ])
        classes.append(["", "", "", "", "", "", "fail" if flag else "",
                        "fail" if flag else "", "", "", "", "", ""])
    return _table(
        [
            "team",
            "share (GPUs)",
            "entitled (GPU-h)",
            "offered (GPU-h)",
            "owed (GPU-h)",
            "delivered toward owed (GPU-h)",
            "delivered/owed (Ai2)",
            "judged by the fairness targets",
            "jobs",
            "finished",
            "GPU-h run",
            "slowdown p50",
            "slowdown p90",
        ],
        rows,
        classes,
    )


def _running_teams_table(s: Summary, flags: Mapping[str, Any]) -> str:
    """Without the workload (no offered load), the policy's running ratio is all there is."""
    return _table(
        ["team", "share (GPUs)", "owed (GPU-h)", "delivered (GPU-h)",
         "delivered/owed after warm-up", "time with demand >= share", "judged", "jobs",
         "finished", "GPU-h run", "slowdown p50", "slowdown p90"],
        [
            [
                t.team,
                _num(t.share_gpus, 1),
                _num(t.owed_gpu_h, 1),
                _num(t.delivered_gpu_h, 1),
                _pct(t.judged_ratio),
                _pct(t.demand_frac),
                "yes" if t.enough_demand else
                (f"no: FLAGGED, {flags[t.team].why}" if t.team in flags else "no"),
                str(t.jobs),
                str(t.finished),
                _num(t.gpu_h_run, 1),
                _num(t.slowdown_p50),
                _num(t.slowdown_p90),
            ]
            for t in s.teams
        ],
    )


def _flagged(summaries: Sequence[Summary]) -> str:
    rows = [[s.policy, f.team, _pct(f.ratio), f.why]
            for s in summaries for f in flagged_teams(s)]
    if not rows:
        return ("<p>None: every team below 95% of what it was owed is judged by the "
                "fairness targets above.</p>")
    return ("<p>These teams got under 95% of what they were owed, but the fairness "
            "targets leave them out because they asked for less than their share. Check "
            "that this is what you expect of them.</p>\n"
            + _table(["policy", "team", "delivered/owed (Ai2)", "why it is not judged"], rows))


def _time_note(clock: TraceClock, summaries: Sequence[Summary]) -> str:
    s = summaries[0]
    a, b = s.window
    parts = [f"Charts run along {escape(clock.label(s.window))}."]
    if s.warmup_s > 0:
        parts.append(f"The first {escape(human_duration(s.warmup_s))} of the window are a "
                     "warm-up (shaded): the simulated cluster starts empty, so occupancy and "
                     "fairness are judged after it.")
    parts.append(f"Window: {escape(human_duration(b - a))} of simulated time.")
    return "<p>" + " ".join(parts) + "</p>"


def _section(heading: str, body: Callable[[], str]) -> str:
    """``<h2>heading</h2>`` and the body, or a note saying why the body is missing."""
    try:
        html = body()
    except Exception as exc:  # one broken table must not cost the rest of the page
        html = _note(_failure(f"the section {heading!r}", exc))
    return f"<h2>{escape(heading)}</h2>\n{html}"


def _figure(name: str, caption: str, failure: Mapping[str, str] | None) -> str:
    if failure is not None:
        return f"<figure>{_note(failure)}<figcaption>{escape(caption)}</figcaption></figure>"
    return (
        f'<figure><img src="{escape(name)}" alt="{escape(caption)}">'
        f"<figcaption>{escape(caption)}</figcaption></figure>"
    )


def render_html(
    summaries: Sequence[Summary],
    *,
    title: str,
    scenario: Mapping[str, object],
    charts: Sequence[tuple[str, str]],
    chart_failures: Mapping[str, Mapping[str, str]] | None = None,
    clock: TraceClock | None = None,
) -> str:
    """The page: the six targets first, the side-by-side table, flagged teams, per-team
    tables, charts (or, for a chart in ``chart_failures``, a note saying what failed and
    what to do), then the scenario."""
    failed = chart_failures or {}
    time_axis = clock or TraceClock()
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        _section("Outcome targets", lambda: _targets_table(summaries)),
        _section("Side by side", lambda: _side_by_side(summaries)),
        _section("Teams the fairness targets do not judge", lambda: _flagged(summaries)),
    ]
    for s in summaries:
        parts.append(_section(f"Teams under {s.policy}", functools.partial(_teams_table, s)))
    parts.append(_section("Charts", lambda: _time_note(time_axis, summaries)))
    parts += [_figure(name, caption, failed.get(name)) for name, caption in charts]
    parts.append(_section("Scenario (everything a rerun needs)",
                          lambda: _scenario_table(scenario)))
    parts += [
        "<h2>How the numbers are defined</h2>",
        f"<pre>{escape(metrics.__doc__ or '')}</pre>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def _draw_all(
    dir: Path, results: Sequence[SimResult], summaries: Sequence[Summary], clock: TraceClock
) -> dict[str, dict[str, str]]:
    """Draw every chart; return, per chart that could not be drawn, what failed."""
    failed: dict[str, dict[str, str]] = {}
    for name, caption, draw in CHARTS:
        target = dir / name
        try:
            draw(target, results, summaries, clock)
        except Exception as exc:
            failed[name] = _failure(f"the chart {name} ({caption})", exc)
            try:  # no stale or half-written image under the note, no leaked figure
                target.unlink(missing_ok=True)
                plt = sys.modules.get("matplotlib.pyplot")
                if plt is not None:
                    plt.close("all")
            except Exception:  # best effort: the note is what matters
                log.debug("report: cleaning up after %s failed", name, exc_info=True)
    return failed


def write_report(
    dir: Path,
    results: Sequence[SimResult],
    summaries: Sequence[Summary],
    *,
    title: str,
    scenario: Mapping[str, object],
    unwritten: list[str] | None = None,
    clock: TraceClock | None = None,
) -> Path:
    """Write report.json, the PNG charts and index.html into ``dir``; return the page.

    Raises ValueError only for mismatched inputs (a caller's bug, checked before anything
    is written). After that nothing raises: a failed chart or section becomes a note, and
    a file that cannot be written is logged as an error (``check_report_deps(dir)``
    catches both causes before the simulation) and its path appended to ``unwritten``.
    ``clock`` puts the trace's dates and compression on the charts' time axes."""
    lost = unwritten if unwritten is not None else []
    if not results:
        raise ValueError("nothing to report: no results")
    if len(results) != len(summaries):
        raise ValueError(f"{len(results)} results but {len(summaries)} summaries")
    for r, s in zip(results, summaries, strict=True):
        if r.policy != s.policy:
            raise ValueError(f"result {r.policy!r} paired with summary of {s.policy!r}")
    page = dir / "index.html"
    try:
        dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        log.error("report: cannot create %s: %s", dir, exc)
        lost.append(str(dir))
        return page
    time_axis = clock or TraceClock()
    failed = _draw_all(dir, results, summaries, time_axis)
    data = report_data(results, summaries, title=title, scenario=scenario, chart_failures=failed,
                       clock=time_axis)
    try:
        (dir / "report.json").write_text(
            json.dumps(data, indent=2, allow_nan=False) + "\n", encoding="utf-8"
        )
    except (OSError, ValueError, TypeError) as exc:
        log.error("report: cannot write %s: %s", dir / "report.json", exc)
        lost.append(str(dir / "report.json"))
    try:
        page.write_text(
            render_html(
                summaries,
                title=title,
                scenario=scenario,
                charts=[(name, caption) for name, caption, _ in CHARTS],
                chart_failures=failed,
                clock=time_axis,
            ),
            encoding="utf-8",
        )
    except OSError as exc:
        log.error("report: cannot write %s: %s", page, exc)
        lost.append(str(page))
    return page
