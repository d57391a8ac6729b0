"""``budget status --plot``: owed vs delivered per allocation over time, as a PNG.

matplotlib is imported here only, and only when a plot is asked for.
"""

from __future__ import annotations

from collections.abc import Sequence

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
