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
from slurm_ml.sim.metrics import Summary, baseline_of, comparison_rows, targets
from slurm_ml.sim.report_charts import CHARTS  # matplotlib itself loads only when drawing
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
) -> dict[str, Any]:
    """What report.json holds: the scenario, then per policy its summary and targets, the
    charts drawn and, for each chart that was not, what failed and what to do."""
    failed = chart_failures or {}
    return {
        "title": title,
        "scenario": _jsonable(scenario),
        "policies": [_policy_data(r, s, baseline_of(summaries))
                     for r, s in zip(results, summaries, strict=True)],
        "charts": [name for name, _, _ in CHARTS if name not in failed],
        "chart_failures": [{"chart": name, **f} for name, f in failed.items()],
    }


#: A cell that reads as a number (a count, 1,234.5, 95.8%, 300 s, >= 0.95, "-"): right-aligned.
_NUMERIC = re.compile(
    r"^(?:[<>]=\s*)?(?:-|[-+]?[\d,]*\.?\d+(?:e[-+]?\d+)?\s*(?:%|s|x)?)"
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
                    "-" if c.value is None else f"{c.value:.4g}",
                    f"{c.op} {c.threshold:g}",
                    "PASS" if c.passed else "FAIL",
                    c.explanation,
                ]
            )
            classes.append(["", "", "", "", "pass" if c.passed else "fail", ""])
    return _table(["policy", "target", "value", "bound", "result", "why"], rows, classes)


def _side_by_side(summaries: Sequence[Summary]) -> str:
    return _table(
        ["metric", *(s.policy for s in summaries)],
        [[label, *cells] for label, cells in comparison_rows(summaries)],
    )


def _teams_table(s: Summary) -> str:
    return _table(
        [
            "team",
            "share (GPUs)",
            "owed (GPU-h)",
            "delivered (GPU-h)",
            "delivered/owed",
            "mean ratio after warm-up",
            "time with demand >= share",
            "enough demand",
            "jobs",
            "finished",
            "GPU-h run",
            "slowdown p50",
            "slowdown p90",
        ],
        [
            [
                t.team,
                _num(t.share_gpus, 1),
                _num(t.owed_gpu_h, 1),
                _num(t.delivered_gpu_h, 1),
                _pct(t.ratio),
                _pct(t.ratio_mean),
                _pct(t.demand_frac),
                "yes" if t.enough_demand else "no",
                str(t.jobs),
                str(t.finished),
                _num(t.gpu_h_run, 1),
                _num(t.slowdown_p50),
                _num(t.slowdown_p90),
            ]
            for t in s.teams
        ],
    )


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
) -> str:
    """The page: scenario, targets, the side-by-side table, per-team tables, charts (or,
    for a chart in ``chart_failures``, a note saying what failed and what to do)."""
    failed = chart_failures or {}
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        _section("Scenario", lambda: _scenario_table(scenario)),
        _section("Outcome targets", lambda: _targets_table(summaries)),
        _section("Side by side", lambda: _side_by_side(summaries)),
    ]
    for s in summaries:
        parts.append(_section(f"Teams under {s.policy}", functools.partial(_teams_table, s)))
    parts.append("<h2>Charts</h2>")
    parts += [_figure(name, caption, failed.get(name)) for name, caption in charts]
    parts += [
        "<h2>How the numbers are defined</h2>",
        f"<pre>{escape(metrics.__doc__ or '')}</pre>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def _draw_all(
    dir: Path, results: Sequence[SimResult], summaries: Sequence[Summary]
) -> dict[str, dict[str, str]]:
    """Draw every chart; return, per chart that could not be drawn, what failed."""
    failed: dict[str, dict[str, str]] = {}
    for name, caption, draw in CHARTS:
        target = dir / name
        try:
            draw(target, results, summaries)
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
) -> Path:
    """Write report.json, the PNG charts and index.html into ``dir``; return the page.

    Raises ValueError only for mismatched inputs (a caller's bug, checked before anything
    is written). After that nothing raises: a failed chart or section becomes a note, and
    a file that cannot be written is logged as an error (``check_report_deps(dir)``
    catches both causes before the simulation) and its path appended to ``unwritten``."""
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
    failed = _draw_all(dir, results, summaries)
    data = report_data(results, summaries, title=title, scenario=scenario, chart_failures=failed)
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
            ),
            encoding="utf-8",
        )
    except OSError as exc:
        log.error("report: cannot write %s: %s", page, exc)
        lost.append(str(page))
    return page
