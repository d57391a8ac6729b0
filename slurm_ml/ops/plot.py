"""``budget status --plot`` (owed vs delivered per allocation over time) and
``efficiency --plot`` (GPU-hours computing, idle and not measured per group), as PNGs.

matplotlib is imported here only, and only when a plot is asked for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from slurm_ml.store.records import BudgetSnapshot


def plot_budget(snapshots: Sequence[BudgetSnapshot], path: str) -> None:
    """Bars per snapshot time: delivered (solid) and owed (outline) per project account;
    top-level accounts (those without a parent) are left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parents = {s.parent for s in snapshots if s.parent}
    leaves = sorted({s.account for s in snapshots if s.account not in parents})
    times = sorted({s.taken_at for s in snapshots})
    if len(times) > 48:  # keep the bars readable: at most 48 columns
        step = len(times) / 48
        times = [times[int(i * step)] for i in range(48)]
    by = {(s.account, s.taken_at): s for s in snapshots}
    fig, ax = plt.subplots(figsize=(max(6.0, len(times) * 0.4), 4.5))
    width = 0.8 / max(1, len(leaves))
    xs = list(range(len(times)))
    for i, account in enumerate(leaves):
        shift = [x - 0.4 + width * (i + 0.5) for x in xs]
        delivered = [by[(account, t)].usage_gpu_hours if (account, t) in by else 0.0
                     for t in times]
        owed = [by[(account, t)].owed_gpu_hours if (account, t) in by else 0.0 for t in times]
        bars = ax.bar(shift, delivered, width, label=f"{account} delivered")
        ax.bar(shift, owed, width, fill=False, edgecolor=bars.patches[0].get_facecolor()
               if bars.patches else "black", linewidth=1.2, label=f"{account} owed")
    ax.set_xticks(xs, [t.strftime("%m-%d %H:%M") for t in times], rotation=60, fontsize=7)
    ax.set_ylabel("billing GPU-hours in the window")
    ax.set_title("Owed (outline) vs delivered (filled) per allocation")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_efficiency(data: Mapping[str, Any], path: str) -> None:
    """One bar per group (``efficiency --json``'s ``groups``): its allocated GPU-hours split
    into computing, idle, the rest of the measured hours, and not measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(data["groups"])[:30]  # the 30 largest allocations stay readable
    names = [g["name"] for g in groups]
    computing = [g["computing_gpu_h"] for g in groups]
    idle = [g["idle_gpu_h"] for g in groups]
    rest = [max(0.0, g["measured_gpu_h"] - c - i) for g, c, i in zip(groups, computing, idle,
                                                                     strict=True)]
    unknown = [g["not_measured_gpu_h"] for g in groups]
    fig, ax = plt.subplots(figsize=(max(6.0, len(names) * 0.6), 4.5))
    xs = list(range(len(names)))
    bottom = [0.0] * len(names)
    styles: tuple[tuple[list[float], str, dict[str, Any]], ...] = (
            (computing, "computing", {"color": "#44AA99"}),
            (idle, "idle (at or below the idle threshold)", {"color": "#CC6677"}),
            (rest, "held, partly busy", {"color": "#DDCC77"}),
            (unknown, "not measured", {"color": "white", "edgecolor": "#888888",
                                       "hatch": "//"}))
    for values, label, style in styles:
        ax.bar(xs, values, 0.7, bottom=bottom, label=label, **style)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_xticks(xs, names, rotation=60, fontsize=7, ha="right")
    ax.set_ylabel("GPU-hours allocated")
    ax.set_title(f"GPU-hours per {data['by']}: computing, idle and the rest")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
