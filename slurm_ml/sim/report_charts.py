"""The report's PNG charts (matplotlib, Agg backend).

matplotlib is imported inside the functions that draw, so importing the simulator never
needs it (and ``report`` can still write its page when drawing fails). Every chart covers
each summary's window; teams keep one (colour, marker) in every chart, legends sit outside
the axes, and panels that compare policies share their y-scale.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_ml.sim.metrics import ALL, CLASSES, Summary, intervals
from slurm_ml.sim.result import SimResult

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


#: Tableau's 20 colours, the ten strong ones first, so up to ten teams get clearly different
#: hues and the next ten their lighter twins (the same values as matplotlib's tab20).
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#aec7e8",
    "#ffbb78",
    "#98df8a",
    "#ff9896",
    "#c5b0d5",
    "#c49c94",
    "#f7b6d2",
    "#c7c7c7",
    "#dbdb8d",
    "#9edae5",
)
#: Line markers cycle too; 7 is coprime to 20, so (colour, marker) repeats only after 140
#: teams, and a strong/light twin pair never shares a marker.
MARKERS = ("o", "s", "^", "D", "v", "P", "X")
#: Stacked areas have no markers: past the palette, a hatch tells the second round apart.
HATCHES = ("", "//", "..", "xx", "\\\\", "++", "--")


@dataclass(frozen=True, slots=True)
class TeamStyle:
    """How one team is drawn in every chart and panel."""

    colour: str
    marker: str
    hatch: str


def team_styles(summaries: Sequence[Summary]) -> dict[str, TeamStyle]:
    """One style per team (sorted by name), the same in every chart; no matplotlib needed."""
    teams = sorted({t.team for s in summaries for t in s.teams})
    return {
        t: TeamStyle(
            PALETTE[i % len(PALETTE)],
            MARKERS[i % len(MARKERS)],
            HATCHES[(i // len(PALETTE)) % len(HATCHES)],
        )
        for i, t in enumerate(teams)
    }


def _hours(t: float, origin: float) -> float:
    return (t - origin) / 3600.0


def _team_handles(
    styles: Mapping[str, TeamStyle], teams: Iterable[str], *, area: bool
) -> tuple[list[Any], list[str]]:
    """Legend proxies for these teams: a marked line, or a (hatched) patch for areas."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Any] = []
    labels: list[str] = []
    for team in sorted(set(teams)):
        st = styles.get(team, TeamStyle("#000000", "", ""))
        handles.append(
            Patch(facecolor=st.colour, hatch=st.hatch, edgecolor="white")
            if area
            else Line2D([], [], color=st.colour, marker=st.marker, markersize=5, linewidth=1.4)
        )
        labels.append(text(team))
    return handles, labels


def _figure_legend(fig: Any, handles: Sequence[Any], labels: Sequence[str], *, title: str) -> None:
    """One legend for the whole figure, outside every axes, so it never covers a curve."""
    if handles:
        fig.legend(
            handles,
            labels,
            loc="outside right upper",
            fontsize=8,
            title=title,
            title_fontsize=8,
            frameon=False,
            ncol=1 if len(labels) <= 24 else 2,
        )


#: The running ratio is drawn up to this; early on, owed is tiny and ratios spike.
RATIO_CAP = 3.0


def _policy_rows(plt: Any, rows: int, *, cols: int, width: float, row_height: float,
                 sharey: bool | str) -> tuple[Any, Any]:
    """One row of panels per policy, sharing the time axis (and y as asked), so that
    policies compare by eye; room below the rows for a legend."""
    fig, axes = plt.subplots(rows, cols, figsize=(width, row_height * rows + 0.8),
                             squeeze=False, sharex=True, sharey=sharey, layout="constrained")
    return fig, axes


def delivered_vs_owed(
    path: Path, results: Sequence[SimResult], summaries: Sequence[Summary]
) -> None:
    """Per policy (a row), each team's delivered (solid) and owed (dashed) window GPU-hours
    on the left, and their running ratio on the right, where small gaps are visible. Rows
    share their y-scales, so policies compare by eye."""
    plt = _pyplot()
    from matplotlib.lines import Line2D

    styles = team_styles(summaries)
    fig, axes = _policy_rows(plt, len(results), cols=2, width=15, row_height=3.6,
                             sharey="col")
    teams: set[str] = set()
    top = 1.2
    for (left, right), r, s in zip(axes, results, summaries, strict=True):
        a, b = s.window
        samples = [x for x in sorted(r.samples, key=lambda x: x.t_s) if a <= x.t_s <= b]
        shown = samples[:: max(1, len(samples) // MAX_POINTS)]
        mine_teams = sorted({t for x in shown for t in x.owed_gpu_h})
        for n, team in enumerate(mine_teams):
            mine = [x for x in shown if team in x.owed_gpu_h]
            xs = [_hours(x.t_s, a) for x in mine]
            owed = [x.owed_gpu_h[team] for x in mine]
            got = [x.delivered_gpu_h.get(team, 0.0) for x in mine]
            st = styles.get(team, TeamStyle("#000000", "", ""))
            every = max(1, len(xs) // 8)
            marks = {
                "marker": st.marker,
                "markersize": 4,
                "markevery": ((n * every // len(MARKERS)) % every, every),
            }
            left.plot(xs, got, color=st.colour, linewidth=1.4, **marks)
            left.plot(xs, owed, color=st.colour, linewidth=1.0, linestyle="--")
            pairs = [(x, g / o) for x, g, o in zip(xs, got, owed, strict=True) if o > 0]
            right.plot(
                [x for x, _ in pairs],
                [q for _, q in pairs],
                color=st.colour,
                linewidth=1.2,
                **marks,
            )
            top = max(top, *(q * 1.05 for _, q in pairs)) if pairs else top
        teams.update(mine_teams)
        if not mine_teams:
            left.text(
                0.5,
                0.5,
                "no owed/delivered samples",
                ha="center",
                va="center",
                transform=left.transAxes,
            )
        left.set_title(
            f"{text(s.policy)}: delivered (solid) vs owed (dashed), window totals so far",
            fontsize=10,
        )
        left.set_ylabel("GPU-hours in the\nbudget window")
        right.set_title(
            f"{text(s.policy)}: running ratio delivered / owed (shaded: warm-up)", fontsize=10
        )
        right.set_ylabel("running delivered / owed")
        right.axhline(1.0, color="black", linewidth=0.8)
        right.axhline(0.95, color="grey", linestyle=":", linewidth=1)
        if s.warmup_s > 0:
            right.axvspan(0, s.warmup_s / 3600.0, color="grey", alpha=0.15, linewidth=0)
        for ax in (left, right):
            ax.grid(alpha=0.3)
    axes[0, 1].set_ylim(0, min(top, RATIO_CAP))
    if top > RATIO_CAP:
        for ax in axes[:, 1]:
            ax.set_ylabel(f"running delivered / owed\n(cut at {RATIO_CAP:g})")
    for ax in axes[-1]:
        ax.set_xlabel("simulated time since the window start (hours)")
    handles, labels = _team_handles(styles, teams, area=False)
    if handles:
        handles += [
            Line2D([], [], color="black", linewidth=1.4),
            Line2D([], [], color="black", linewidth=1.0, linestyle="--"),
            Line2D([], [], color="grey", linestyle=":", linewidth=1),
        ]
        labels += ["delivered", "owed", "95% of owed"]
    _figure_legend(fig, handles, labels, title="team")
    fig.savefig(path, dpi=90)
    plt.close(fig)


def wait_cdfs(path: Path, results: Sequence[SimResult], summaries: Sequence[Summary]) -> None:
    """Per job class, the CDF of queue waits, one line per policy (never-started jobs at
    their wait until the run's end, as in the metrics). Panels share both axes."""
    plt = _pyplot()
    from matplotlib.lines import Line2D

    kinds = [*CLASSES, ALL]
    fig, axes = plt.subplots(
        2, 2, figsize=(12, 8), squeeze=False, sharex=True, sharey=True, layout="constrained"
    )
    colours = {s.policy: PALETTE[i % len(PALETTE)] for i, s in enumerate(summaries)}
    for ax, kind in zip(axes.flat, kinds, strict=True):
        counts: dict[str, int] = {}
        for r, s in zip(results, summaries, strict=True):
            a, b = s.window
            jobs = [j for j in r.jobs if a <= j.submit_s <= b and kind in (ALL, j.kind)]
            if not jobs:
                continue
            waits = sorted(
                max(1.0, j.wait_s if j.wait_s is not None else r.end_s - j.submit_s) for j in jobs
            )
            step = max(1, len(waits) // MAX_POINTS)
            idx = [*range(0, len(waits), step), len(waits) - 1]
            ax.step(
                [waits[i] for i in idx],
                [(i + 1) / len(waits) for i in idx],
                where="post",
                color=colours[s.policy],
                linewidth=1.5,
            )
            counts[s.policy] = len(jobs)
        if len(set(counts.values())) == 1:
            n = f"n={next(iter(counts.values()))} per policy"
        else:
            n = ", ".join(f"{text(p)} n={c}" for p, c in counts.items())
        ax.set_title(f"{kind} jobs" + (f" ({n})" if counts else ""), fontsize=10)
        ax.set_xscale("log")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3, which="both")
        if kind == CLASSES[0]:
            ax.axvline(60, color="grey", linestyle=":", linewidth=1)
        if not counts:
            ax.text(
                0.5, 0.5, "no jobs of this class", ha="center", va="center", transform=ax.transAxes
            )
    for ax in axes[-1]:
        ax.set_xlabel("queue wait (s, log scale; under 1 s drawn at 1 s)")
    for ax in axes[:, 0]:
        ax.set_ylabel("fraction of jobs waiting at most x")
    handles: list[Any] = [Line2D([], [], color=colours[s.policy], linewidth=1.5) for s in summaries]
    labels = [text(s.policy) for s in summaries]
    handles.append(Line2D([], [], color="grey", linestyle=":", linewidth=1))
    labels.append("60 s debug target")
    fig.legend(
        handles,
        labels,
        loc="outside lower center",
        ncol=min(6, len(labels)),
        fontsize=9,
        frameon=False,
        title="policy",
        title_fontsize=9,
    )
    fig.savefig(path, dpi=90)
    plt.close(fig)


def binned_busy(
    result: SimResult, window: tuple[float, float], bins: int
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
    means = {
        t: [v / c if c > 0 else 0.0 for v, c in zip(vals, cover, strict=True)]
        for t, vals in acc.items()
    }
    return [a + i * width for i in range(bins + 1)], means


def occupancy(path: Path, results: Sequence[SimResult], summaries: Sequence[Summary]) -> None:
    """Per policy, busy GPUs stacked by team over time (Ai2's occupancy picture); the rows
    share one y-scale."""
    plt = _pyplot()
    styles = team_styles(summaries)
    fig, axes = _policy_rows(plt, len(results), cols=1, width=13, row_height=3.4,
                             sharey=True)
    teams: set[str] = set()
    for ax, r, s in zip(axes[:, 0], results, summaries, strict=True):
        a = s.window[0]
        edges, busy = binned_busy(r, s.window, min(MAX_POINTS, max(1, len(r.samples))))
        xs = [_hours(e, a) for e in edges]
        base = [0.0] * (len(edges) - 1)
        for team in sorted(busy):
            st = styles.get(team, TeamStyle("#000000", "", ""))
            top = [lo + v for lo, v in zip(base, busy[team], strict=True)]
            ax.fill_between(
                xs,
                [*base, base[-1]],
                [*top, top[-1]],
                step="post",
                facecolor=st.colour,
                hatch=st.hatch,
                edgecolor="white",
                linewidth=0,
            )
            base = top
        teams.update(busy)
        ax.axhline(r.cluster_gpus, color="black", linestyle="--", linewidth=1)
        occ = "-" if s.occupancy is None else f"{s.occupancy * 100:.1f}%"
        ax.set_title(
            f"{text(s.policy)}: busy GPUs by team (dashed: {r.cluster_gpus} GPUs; occupancy {occ})",
            fontsize=10,
        )
        ax.set_ylabel("busy GPUs")
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylim(0, max(1, *(r.cluster_gpus for r in results)) * 1.05)
    axes[-1, 0].set_xlabel("simulated time since the window start (hours)")
    handles, labels = _team_handles(styles, teams, area=True)
    # Top to bottom like the stack: the first team is drawn at the bottom.
    _figure_legend(fig, handles[::-1], labels[::-1], title="team")
    fig.savefig(path, dpi=90)
    plt.close(fig)


Draw = Callable[[Path, Sequence[SimResult], Sequence[Summary]], None]

#: File name, what it shows (the page's caption and alt text), and how it is drawn.
CHARTS: tuple[tuple[str, str, Draw], ...] = (
    ("delivered_vs_owed.png", "Delivered vs owed GPU-hours per team over time", delivered_vs_owed),
    ("wait_cdf.png", "Queue wait CDFs per job class and policy", wait_cdfs),
    ("occupancy.png", "GPU occupancy over time, stacked by team", occupancy),
)
