"""``sim --report DIR``: report.json, a self-contained index.html and its PNG charts.

The page has no external assets (inline CSS, images beside it) so it can be copied or
mailed as a folder. Every string that reaches the HTML is escaped: team and policy names
come from traces and configs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from slurm_ml.sim import metrics
from slurm_ml.sim.metrics import Summary, comparison_rows, targets
from slurm_ml.sim.report_charts import CHARTS  # matplotlib itself loads only when drawing
from slurm_ml.sim.result import SimResult

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1200px; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
thead th { background: #f0f0f0; }
.pass { background: #e3f6e3; } .fail { background: #fbe3e3; }
figure { margin: 1em 0 2em; } img { max-width: 100%; border: 1px solid #ddd; }
pre { background: #f7f7f7; padding: 1em; white-space: pre-wrap; font-size: 0.85em; }
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


def report_data(results: Sequence[SimResult], summaries: Sequence[Summary], *, title: str,
                scenario: Mapping[str, object]) -> dict[str, Any]:
    """What report.json holds: the scenario, then per policy its summary and targets."""
    return {
        "title": title,
        "scenario": _jsonable(scenario),
        "policies": [{"policy": s.policy, "wall_s": r.wall_s, "summary": s.as_dict(),
                      "targets": [c.as_dict() for c in targets(s)]}
                     for r, s in zip(results, summaries, strict=True)],
        "charts": [name for name, _, _ in CHARTS],
    }


def _table(header: Sequence[str], rows: Sequence[Sequence[str]],
           classes: Sequence[Sequence[str]] | None = None) -> str:
    out = ["<table><thead><tr>", *(f"<th>{escape(h)}</th>" for h in header),
           "</tr></thead><tbody>"]
    for i, row in enumerate(rows):
        cells = []
        for j, c in enumerate(row):
            cls = classes[i][j] if classes else ""
            attr = f' class="{escape(cls)}"' if cls else ""
            cells.append(f"<td{attr}>{escape(c)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def _num(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def render_html(summaries: Sequence[Summary], *, title: str, scenario: Mapping[str, object],
                charts: Sequence[tuple[str, str]]) -> str:
    """The page: scenario, targets, the side-by-side table, per-team tables, charts."""
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        "<h2>Scenario</h2>",
        _table(["knob", "value"], [[str(k), v if isinstance(v, str) else json.dumps(_jsonable(v))]
                                   for k, v in scenario.items()]),
        "<h2>Outcome targets</h2>",
    ]
    rows, classes = [], []
    for s in summaries:
        for c in targets(s):
            rows.append([s.policy, c.name, "-" if c.value is None else f"{c.value:.4g}",
                         f"{c.op} {c.threshold:g}", "PASS" if c.passed else "FAIL",
                         c.explanation])
            classes.append(["", "", "", "", "pass" if c.passed else "fail", ""])
    parts.append(_table(["policy", "target", "value", "bound", "result", "why"], rows,
                        classes))
    parts += ["<h2>Side by side</h2>",
              _table(["metric", *(s.policy for s in summaries)],
                     [[label, *cells] for label, cells in comparison_rows(summaries)])]
    for s in summaries:
        parts.append(f"<h2>Teams under {escape(s.policy)}</h2>")
        parts.append(_table(
            ["team", "share (GPUs)", "owed (GPU-h)", "delivered (GPU-h)", "delivered/owed",
             "mean ratio after warm-up", "time with demand >= share", "enough demand",
             "jobs", "finished", "GPU-h run", "slowdown p50", "slowdown p90"],
            [[t.team, _num(t.share_gpus, 1), _num(t.owed_gpu_h, 1),
              _num(t.delivered_gpu_h, 1), _pct(t.ratio), _pct(t.ratio_mean),
              _pct(t.demand_frac), "yes" if t.enough_demand else "no", str(t.jobs),
              str(t.finished), _num(t.gpu_h_run, 1), _num(t.slowdown_p50),
              _num(t.slowdown_p90)] for t in s.teams]))
    parts.append("<h2>Charts</h2>")
    for name, caption in charts:
        parts.append(f'<figure><img src="{escape(name)}" alt="{escape(caption)}">'
                     f"<figcaption>{escape(caption)}</figcaption></figure>")
    parts += ["<h2>How the numbers are defined</h2>",
              f"<pre>{escape(metrics.__doc__ or '')}</pre>", "</body></html>"]
    return "\n".join(parts) + "\n"


def write_report(dir: Path, results: Sequence[SimResult], summaries: Sequence[Summary], *,
                 title: str, scenario: Mapping[str, object]) -> Path:
    """Write report.json, the PNG charts and index.html into ``dir``; return the page."""
    if not results:
        raise ValueError("nothing to report: no results")
    if len(results) != len(summaries):
        raise ValueError(f"{len(results)} results but {len(summaries)} summaries")
    for r, s in zip(results, summaries, strict=True):
        if r.policy != s.policy:
            raise ValueError(f"result {r.policy!r} paired with summary of {s.policy!r}")
    dir.mkdir(parents=True, exist_ok=True)
    for name, _, draw in CHARTS:
        draw(dir / name, results, summaries)
    data = report_data(results, summaries, title=title, scenario=scenario)
    (dir / "report.json").write_text(json.dumps(data, indent=2, allow_nan=False) + "\n",
                                     encoding="utf-8")
    page = dir / "index.html"
    page.write_text(render_html(summaries, title=title, scenario=scenario,
                                charts=[(name, caption) for name, caption, _ in CHARTS]),
                    encoding="utf-8")
    return page
