"""The report's PNG charts (matplotlib, Agg backend).

matplotlib is imported inside the functions that draw, so importing the simulator never
needs it (and ``report`` can still write its page when drawing fails). Every chart covers
each summary's window; teams keep one (colour, marker) in every chart, legends sit outside
the axes, and panels that compare policies share their y-scale.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from slurm_ml.sim.metrics import (
    ALL,
    CLASSES,
    Summary,
    ai2_series,
    human_duration,
    intervals,
    judged_occupancy,
    judged_teams,
)
from slurm_ml.sim.result import CycleSample, SimResult

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


#: Paul Tol's "muted" qualitative scheme (personal.sron.nl/~pault), made for readers with
#: any common colour-vision deficiency: its nine colours stay apart under simulated
#: deuteranopia, protanopia and tritanopia, where tab20's light twins merge. Nine hues
#: are what stays distinguishable; teams past nine are told apart by a second cue.
PALETTE = (
    "#CC6677",
    "#332288",
    "#DDCC77",
    "#117733",
    "#88CCEE",
    "#882255",
    "#44AA99",
    "#999933",
    "#AA4499",
)
#: Line markers cycle too; 7 is coprime to 9, so (colour, marker) repeats only after 63
#: teams.
MARKERS = ("o", "s", "^", "D", "v", "P", "X")
#: Stacked areas have no markers: past the palette, a hatch tells each round apart.
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


#: A trace clock at or past this (2001-09-09) is a date; an undated trace counts seconds
#: from its start, which no trace of a few years comes near.
_DATED_FROM_S = 1e9


@dataclass(frozen=True, slots=True)
class TraceClock:
    """How a simulated second maps to the trace's own time, so that charts carry the
    trace's dates and say how much the arrivals were compressed.

    ``epoch_s``: the trace's clock at simulated second 0 (``Trace.epoch_s``);
    ``first_s``: the first submission, which compression keeps in place; ``scale``: the
    arrival factor (2.5 = two and a half trace days of arrivals per simulated day)."""

    epoch_s: float = 0.0
    first_s: float = 0.0
    scale: float = 1.0

    @property
    def dated(self) -> bool:
        return self.epoch_s >= _DATED_FROM_S

    def x(self, t_s: float) -> Any:
        """Where simulated second ``t_s`` sits on a time axis: the trace date of the
        arrivals then, or simulated hours for an undated trace."""
        if not self.dated:
            return t_s / 3600.0
        trace_s = self.first_s + (t_s - self.first_s) * self.scale
        return datetime.fromtimestamp(self.epoch_s + trace_s, UTC)

    def compression(self, window: tuple[float, float]) -> str:
        """"" or, when arrivals were compressed, by how much over ``window``."""
        if abs(self.scale - 1.0) < 1e-9:
            return ""
        days = (window[1] - window[0]) / 86400.0
        return (f"arrivals compressed {self.scale:.3g}x: {days * self.scale:.1f} trace "
                f"days in {days:.1f} simulated days")

    def label(self, window: tuple[float, float]) -> str:
        what = "trace date of the arrivals (UTC)" if self.dated else "simulated hours"
        squeeze = self.compression(window)
        return f"{what}; {squeeze}" if squeeze else what

    def style(self, ax: Any) -> None:
        """Concise date ticks on a dated axis."""
        if self.dated:
            import matplotlib.dates as mdates

            locator = mdates.AutoDateLocator()  # type: ignore[no-untyped-call]
            ax.xaxis.set_major_locator(locator)
            ax.xaxis.set_major_formatter(
                mdates.ConciseDateFormatter(locator))  # type: ignore[no-untyped-call]


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
    path: Path, results: Sequence[SimResult], summaries: Sequence[Summary],
    clock: TraceClock = TraceClock(),
) -> None:
    """Per policy (a row), Ai2's measures over the judged window, the figures the targets
    judge: each team's owed (dashed) and delivered toward owed (solid) GPU-hours so far on
    the left, and their ratio on the right, which ends at the judged ratio. Teams the
    targets leave out (not enough demand) are drawn thin and say so in the legend. Rows
    share their y-scales, so policies compare by eye."""
    plt = _pyplot()
    from matplotlib.lines import Line2D

    styles = team_styles(summaries)
    fig, axes = _policy_rows(plt, len(results), cols=2, width=15, row_height=3.6,
                             sharey="col")
    teams: set[str] = set()
    unjudged: set[str] = set()
    window = summaries[0].judged_window or summaries[0].window
    for (left, right), r, s in zip(axes, results, summaries, strict=True):
        window = s.judged_window or s.window
        series = ai2_series(r, window)
        judged_set = judged_teams(s)
        shown = sorted(t for t, pts in series.items() if pts and pts[-1][1] > 0)
        for n, team in enumerate(shown):
            pts = series[team][:: max(1, len(series[team]) // MAX_POINTS)]
            if pts[-1] != series[team][-1]:
                pts.append(series[team][-1])  # the last point is the judged figure
            xs = [clock.x(t) for t, _, _ in pts]
            st = styles.get(team, TeamStyle("#000000", "", ""))
            judged = team in judged_set
            if not judged:
                unjudged.add(team)
            width = 1.4 if judged else 0.7
            every = max(1, len(xs) // 8)
            marks = {"marker": st.marker, "markersize": 4 if judged else 2,
                     "markevery": ((n * every // len(MARKERS)) % every, every)}
            left.plot(xs, [d for _, _, d in pts], color=st.colour, linewidth=width, **marks)
            left.plot(xs, [o for _, o, _ in pts], color=st.colour, linewidth=width * 0.7,
                      linestyle="--")
            ratio = [(x, d / o) for x, (_, o, d) in zip(xs, pts, strict=True) if o > 0]
            right.plot([x for x, _ in ratio], [q for _, q in ratio], color=st.colour,
                       linewidth=width, **marks)
        teams.update(shown)
        if not shown:
            left.text(0.5, 0.5, "no team was owed anything in the judged window",
                      ha="center", va="center", transform=left.transAxes)
        left.set_title(f"{text(s.policy)}: delivered toward owed (solid) and owed (dashed), "
                       "GPU-hours so far", fontsize=10)
        left.set_ylabel("GPU-hours since the\njudged window began")
        right.set_title(f"{text(s.policy)}: delivered / owed so far (Ai2's ratio; the "
                        "last point is the judged one)", fontsize=10)
        right.set_ylabel("delivered / owed")
        right.axhline(0.95, color="grey", linestyle=":", linewidth=1)
        for ax in (left, right):
            ax.grid(alpha=0.3)
            clock.style(ax)
    axes[0, 1].set_ylim(0, 1.05)
    fig.supxlabel(clock.label(window), fontsize=10)  # once: it is long for one column
    handles, labels = _team_handles(styles, teams, area=False)
    labels = [f"{lab} (not judged)" if team in unjudged else lab
              for lab, team in zip(labels, sorted(teams), strict=True)]
    if handles:
        handles += [
            Line2D([], [], color="black", linewidth=1.4),
            Line2D([], [], color="black", linewidth=1.0, linestyle="--"),
            Line2D([], [], color="grey", linestyle=":", linewidth=1),
        ]
        labels += ["delivered toward owed", "owed", "95% target"]
    _figure_legend(fig, handles, labels, title="team")
    fig.savefig(path, dpi=90)
    plt.close(fig)


#: Wait axis ticks a reader knows.
_WAIT_TICKS = {1.0: "1 s", 60.0: "1 min", 600.0: "10 min", 3600.0: "1 h", 86400.0: "1 day",
               7 * 86400.0: "1 week"}


def wait_cdfs(path: Path, results: Sequence[SimResult], summaries: Sequence[Summary],
              clock: TraceClock = TraceClock()) -> None:
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
        ax.set_xticks(list(_WAIT_TICKS), list(_WAIT_TICKS.values()))
        ax.minorticks_off()
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3, which="both")
        if kind == CLASSES[0]:
            ax.axvline(60, color="grey", linestyle=":", linewidth=1)
        if not counts:
            ax.text(
                0.5, 0.5, "no jobs of this class", ha="center", va="center", transform=ax.transAxes
            )
    for ax in axes[-1]:
        ax.set_xlabel("queue wait (log scale; under 1 s drawn at 1 s)")
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


def binned(
    result: SimResult, window: tuple[float, float], bins: int,
    values: Callable[[CycleSample], Mapping[str, float]],
) -> tuple[list[float], dict[str, list[float]]]:
    """Bin edges and, per key of ``values(sample)``, its time-weighted mean per bin over
    the window (a key absent from a sample counts as 0 there)."""
    a, b = window
    bins = max(1, bins)
    width = (b - a) / bins if b > a else 1.0
    acc: dict[str, list[float]] = {}
    cover = [0.0] * bins
    for s, d in intervals(result.samples, a, b):
        lo, hi = max(s.t_s, a), max(s.t_s, a) + d
        got = values(s)
        i = min(int((lo - a) / width), bins - 1)
        while lo < hi and i < bins:
            cut = hi if i == bins - 1 else min(hi, a + (i + 1) * width)
            seg = cut - lo
            cover[i] += seg
            for key, v in got.items():
                acc.setdefault(key, [0.0] * bins)[i] += v * seg
            lo, i = cut, i + 1
    means = {
        t: [v / c if c > 0 else 0.0 for v, c in zip(vals, cover, strict=True)]
        for t, vals in acc.items()
    }
    return [a + i * width for i in range(bins + 1)], means


def binned_busy(
    result: SimResult, window: tuple[float, float], bins: int
) -> tuple[list[float], dict[str, list[float]]]:
    """Bin edges and each team's time-weighted mean busy GPUs per bin over the window."""
    return binned(result, window, bins, lambda s: s.busy_gpus)


def _warm_up(ax: Any, s: Summary, clock: TraceClock) -> None:
    """Shade the warm-up, which no judged figure counts."""
    if s.warmup_s > 0:
        a = s.window[0]
        ax.axvspan(clock.x(a), clock.x(a + s.warmup_s), color="grey", alpha=0.15, linewidth=0)


def occupancy(path: Path, results: Sequence[SimResult], summaries: Sequence[Summary],
              clock: TraceClock = TraceClock()) -> None:
    """Per policy, busy GPUs stacked by team over time (Ai2's occupancy picture), the
    warm-up shaded; the title gives the judged occupancy, after the warm-up. The rows
    share one y-scale."""
    plt = _pyplot()
    styles = team_styles(summaries)
    fig, axes = _policy_rows(plt, len(results), cols=1, width=13, row_height=3.4,
                             sharey=True)
    teams: set[str] = set()
    for ax, r, s in zip(axes[:, 0], results, summaries, strict=True):
        edges, busy = binned_busy(r, s.window, min(MAX_POINTS, max(1, len(r.samples))))
        xs = [clock.x(e) for e in edges]
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
        _warm_up(ax, s, clock)
        ax.axhline(r.cluster_gpus, color="black", linestyle="--", linewidth=1)
        occ = judged_occupancy(s)
        shown = "-" if occ is None else f"{occ * 100:.1f}%"
        ax.set_title(
            f"{text(s.policy)}: busy GPUs by team (dashed: {r.cluster_gpus} GPUs; occupancy "
            f"after the shaded {human_duration(s.warmup_s)} warm-up {shown}, the judged "
            "figure)",
            fontsize=10,
        )
        ax.set_ylabel("busy GPUs")
        ax.grid(alpha=0.3)
        clock.style(ax)
    axes[0, 0].set_ylim(0, max(1, *(r.cluster_gpus for r in results)) * 1.05)
    axes[-1, 0].set_xlabel(clock.label(summaries[0].window))
    handles, labels = _team_handles(styles, teams, area=True)
    # Top to bottom like the stack: the first team is drawn at the bottom.
    _figure_legend(fig, handles[::-1], labels[::-1], title="team")
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _idle_and_waiting(s: CycleSample) -> dict[str, float]:
    waiting = any(s.pending_gpus.values())
    return {"idle": s.free_gpus if waiting else 0.0,
            "unusable": s.fragmented_gpus if waiting else 0.0,
            "pending": float(sum(s.pending_gpus.values()))}


def idle_while_waiting(path: Path, results: Sequence[SimResult],
                       summaries: Sequence[Summary], clock: TraceClock = TraceClock()) -> None:
    """Per policy, GPUs free while some job waited (what fragmentation and reservations
    cost), the part of them no waiting job could use, and the GPUs waiting, over time;
    the rows share one y-scale."""
    plt = _pyplot()
    fig, axes = _policy_rows(plt, len(results), cols=1, width=13, row_height=3.0,
                             sharey=True)
    colours = {"idle": PALETTE[0], "unusable": PALETTE[1], "pending": PALETTE[6]}
    for ax, r, s in zip(axes[:, 0], results, summaries, strict=True):
        edges, got = binned(r, s.window, min(MAX_POINTS, max(1, len(r.samples))),
                            _idle_and_waiting)
        xs = [clock.x(e) for e in edges]
        if got:
            idle = [*got["idle"], got["idle"][-1]]
            ax.fill_between(xs, [0.0] * len(xs), idle, step="post", color=colours["idle"],
                            alpha=0.6, linewidth=0)
            ax.step(xs, [*got["unusable"], got["unusable"][-1]], where="post",
                    color=colours["unusable"], linewidth=1.2)
            ax.step(xs, [*got["pending"], got["pending"][-1]], where="post",
                    color=colours["pending"], linewidth=1.0, linestyle="--")
        _warm_up(ax, s, clock)
        frac = s.idle_waiting_frac
        ax.set_title(
            f"{text(s.policy)}: GPUs free while jobs waited"
            + ("" if frac is None else f" ({frac * 100:.1f}% of capacity after the warm-up: "
               f"{s.idle_waiting_gpu_h or 0:,.0f} GPU-h)"),
            fontsize=10)
        ax.set_ylabel("GPUs")
        ax.set_yscale("symlog", linthresh=max(1.0, r.cluster_gpus / 100))
        ax.grid(alpha=0.3)
        clock.style(ax)
    axes[-1, 0].set_xlabel(clock.label(summaries[0].window))
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    fig.legend([Patch(facecolor=colours["idle"], alpha=0.6),
                Line2D([], [], color=colours["unusable"], linewidth=1.2),
                Line2D([], [], color=colours["pending"], linewidth=1.0, linestyle="--"),
                Patch(facecolor="grey", alpha=0.15)],
               ["free GPUs while a job waited", "of which no waiting job could use",
                "GPUs the waiting jobs asked for", "warm-up (not judged)"],
               loc="outside right upper", fontsize=8, frameon=False)
    fig.savefig(path, dpi=90)
    plt.close(fig)


class Draw(Protocol):
    def __call__(self, path: Path, results: Sequence[SimResult], summaries: Sequence[Summary],
                 clock: TraceClock = ...) -> None: ...


#: File name, what it shows (the page's caption and alt text), and how it is drawn.
CHARTS: tuple[tuple[str, str, Draw], ...] = (
    ("delivered_vs_owed.png",
     "Ai2's delivered toward owed GPU-hours per team over the judged window", delivered_vs_owed),
    ("wait_cdf.png", "Queue wait CDFs per job class and policy", wait_cdfs),
    ("occupancy.png", "GPU occupancy over time, stacked by team", occupancy),
    ("idle_while_waiting.png", "GPUs idle while jobs waited, over time", idle_while_waiting),
)
