"""The report's PNG charts (matplotlib, Agg backend).

matplotlib is an optional dependency: it is imported inside the functions that draw,
so importing the simulator never needs it. Every chart covers each summary's window.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurm_ml.sim.metrics import ALL, CLASSES, Summary, intervals
from slurm_ml.sim.result import SimResult

if TYPE_CHECKING:
    from matplotlib.axes import Axes

#: At most this many points per line or area, so a months-long trace stays drawable.
MAX_POINTS = 600


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def text(s: str) -> str:
    """A team or policy name as matplotlib shows it literally: no mathtext from ``$``,
    and a leading ``_`` (which hides a legend entry) padded."""
    s = s.replace("$", r"\$")
    return " " + s if s.startswith("_") else s


def team_colours(summaries: Sequence[Summary]) -> dict[str, Any]:
    """One colour per team, the same in every chart and panel."""
    import matplotlib

    teams = sorted({t.team for s in summaries for t in s.teams})
    cmap = matplotlib.colormaps["tab20" if len(teams) <= 20 else "turbo"]
    n = max(1, len(teams) - 1)
    return {t: cmap(i if len(teams) <= 20 else i / n) for i, t in enumerate(teams)}


def _hours(t: float, origin: float) -> float:
    return (t - origin) / 3600.0


def _team_legend(ax: Axes, handles: Sequence[Any], labels: Sequence[str]) -> None:
    if handles:
        ax.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                  ncol=1 if len(labels) <= 16 else 2, frameon=False)


def delivered_vs_owed(path: Path, results: Sequence[SimResult],
                      summaries: Sequence[Summary]) -> None:
    """Per policy (a row), each team's delivered (solid) and owed (dashed) window GPU-hours
    on the left, and delivered / owed on the right, where small gaps are visible."""
    plt = _pyplot()
    colours = team_colours(summaries)
    fig, axes = plt.subplots(len(results), 2, figsize=(14, 3.4 * len(results) + 0.6),
                             squeeze=False, sharex=True)
    for (left, right), r, s in zip(axes, results, summaries, strict=True):
        a, b = s.window
        samples = [x for x in sorted(r.samples, key=lambda x: x.t_s) if a <= x.t_s <= b]
        shown = samples[::max(1, len(samples) // MAX_POINTS)]
        handles, labels = [], []
        for team in sorted({t for x in shown for t in x.owed_gpu_h}):
            mine = [x for x in shown if team in x.owed_gpu_h]
            xs = [_hours(x.t_s, a) for x in mine]
            owed = [x.owed_gpu_h[team] for x in mine]
            got = [x.delivered_gpu_h.get(team, 0.0) for x in mine]
            colour = colours.get(team)
            (line,) = left.plot(xs, got, color=colour, linewidth=1.4)
            left.plot(xs, owed, color=colour, linewidth=1.0, linestyle="--")
            pairs = [(x, g / o) for x, g, o in zip(xs, got, owed, strict=True) if o > 0]
            right.plot([x for x, _ in pairs], [q for _, q in pairs], color=colour,
                       linewidth=1.2)
            handles.append(line)
            labels.append(text(team))
        if not handles:
            left.text(0.5, 0.5, "no owed/delivered samples", ha="center", va="center",
                      transform=left.transAxes)
        left.set_title(f"{text(s.policy)}: delivered (solid) vs owed (dashed)", fontsize=10)
        left.set_ylabel("GPU-hours in the\nbudget window")
        right.set_title(f"{text(s.policy)}: delivered / owed (shaded: warm-up)", fontsize=10)
        right.set_ylabel("delivered / owed")
        right.axhline(1.0, color="black", linewidth=0.8)
        right.axhline(0.95, color="grey", linestyle=":", linewidth=1)
        if s.warmup_s > 0:
            right.axvspan(0, s.warmup_s / 3600.0, color="grey", alpha=0.15, linewidth=0)
        for ax in (left, right):
            ax.grid(alpha=0.3)
        _team_legend(right, handles, labels)
    for ax in axes[-1]:
        ax.set_xlabel("simulated time since the window start (hours)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def wait_cdfs(path: Path, results: Sequence[SimResult], summaries: Sequence[Summary]) -> None:
    """Per job class, the CDF of queue waits, one line per policy (never-started jobs at
    their wait until the run's end, as in the metrics)."""
    plt = _pyplot()
    kinds = [*CLASSES, ALL]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), squeeze=False)
    for ax, kind in zip(axes.flat, kinds, strict=True):
        drawn = False
        for r, s in zip(results, summaries, strict=True):
            a, b = s.window
            jobs = [j for j in r.jobs if a <= j.submit_s <= b and kind in (ALL, j.kind)]
            if not jobs:
                continue
            waits = sorted(max(1.0, j.wait_s if j.wait_s is not None else r.end_s - j.submit_s)
                           for j in jobs)
            step = max(1, len(waits) // MAX_POINTS)
            idx = [*range(0, len(waits), step), len(waits) - 1]
            ax.step([waits[i] for i in idx], [(i + 1) / len(waits) for i in idx], where="post",
                    label=f"{text(s.policy)} (n={len(jobs)})")
            drawn = True
        ax.set_xscale("log")
        ax.set_ylim(0, 1.02)
        ax.set_title(f"{kind} jobs", fontsize=10)
        ax.set_xlabel("queue wait (s, log scale; under 1 s drawn at 1 s)")
        ax.set_ylabel("fraction of jobs waiting at most x")
        ax.grid(alpha=0.3, which="both")
        if kind == CLASSES[0]:
            ax.axvline(60, color="grey", linestyle=":", linewidth=1, label="60 s target")
        if drawn:
            ax.legend(fontsize=8, loc="lower right")
        else:
            ax.text(0.5, 0.5, "no jobs of this class", ha="center", va="center",
                    transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def binned_busy(result: SimResult, window: tuple[float, float], bins: int
                ) -> tuple[list[float], dict[str, list[float]]]:
    """Bin edges and each team's time-weighted mean busy GPUs per bin over the window."""
    a, b = window
    bins = max(1, bins)
    width = (b - a) / bins if b > a else 1.0
    acc: dict[str, list[float]] = {}
    cover = [0.0] * bins
    for s, d in intervals(result.samples, a, b):
        lo, hi = max(s.t_s, a), max(s.t_s, a) + d
        i = min(int((lo - a) / width), bins - 1)
        while lo < hi and i < bins:
            cut = hi if i == bins - 1 else min(hi, a + (i + 1) * width)
            seg = cut - lo
            cover[i] += seg
            for team, gpus in s.busy_gpus.items():
                acc.setdefault(team, [0.0] * bins)[i] += gpus * seg
            lo, i = cut, i + 1
    means = {t: [v / c if c > 0 else 0.0 for v, c in zip(vals, cover, strict=True)]
             for t, vals in acc.items()}
    return [a + i * width for i in range(bins + 1)], means


def occupancy(path: Path, results: Sequence[SimResult], summaries: Sequence[Summary]) -> None:
    """Per policy, busy GPUs stacked by team over time (Ai2's occupancy picture)."""
    plt = _pyplot()
    colours = team_colours(summaries)
    fig, axes = plt.subplots(len(results), 1, figsize=(11, 3.2 * len(results) + 0.6),
                             squeeze=False, sharex=True)
    for ax, r, s in zip(axes[:, 0], results, summaries, strict=True):
        a = s.window[0]
        edges, busy = binned_busy(r, s.window, min(MAX_POINTS, max(1, len(r.samples))))
        xs = [_hours(e, a) for e in edges]
        base = [0.0] * (len(edges) - 1)
        handles, labels = [], []
        for team in sorted(busy):
            top = [lo + v for lo, v in zip(base, busy[team], strict=True)]
            h = ax.fill_between(xs, [*base, base[-1]], [*top, top[-1]], step="post",
                                color=colours.get(team), linewidth=0)
            handles.append(h)
            labels.append(text(team))
            base = top
        ax.axhline(r.cluster_gpus, color="black", linestyle="--", linewidth=1)
        occ = "-" if s.occupancy is None else f"{s.occupancy * 100:.1f}%"
        ax.set_title(f"{text(s.policy)}: busy GPUs by team (dashed: {r.cluster_gpus} GPUs; "
                     f"occupancy {occ})", fontsize=10)
        ax.set_ylabel("busy GPUs")
        ax.set_ylim(0, max(1, r.cluster_gpus) * 1.05)
        ax.grid(alpha=0.3)
        _team_legend(ax, handles, labels)
    axes[-1, 0].set_xlabel("simulated time since the window start (hours)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


Draw = Callable[[Path, Sequence[SimResult], Sequence[Summary]], None]

#: File name, what it shows (the page's caption and alt text), and how it is drawn.
CHARTS: tuple[tuple[str, str, Draw], ...] = (
    ("delivered_vs_owed.png", "Delivered vs owed GPU-hours per team over time",
     delivered_vs_owed),
    ("wait_cdf.png", "Queue wait CDFs per job class and policy", wait_cdfs),
    ("occupancy.png", "GPU occupancy over time, stacked by team", occupancy),
)
