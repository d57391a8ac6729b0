"""Loaders for the published figures the simulator is calibrated and sized against.

``acme_calib/cluster_summary.csv`` (InternLM/AcmeTrace) gives per-trace queue and run
time statistics, e.g. Philly's mean and median GPU-job queue wait, which the ``fifo``
policy must reproduce within 2x; ``helios_calib/philly_vc.csv`` (HeliosArtifact) gives
the nodes of each Philly VC, the basis of the implied cluster size and team budgets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from slurm_ml.sim.traces.base import Row, TraceError, csv_rows

__all__ = ["ClusterFigures", "load_calibration", "load_vc_nodes"]

# Our name -> the column of cluster_summary.csv it comes from.
_COLUMNS = {
    "gpu_jobs": "gpu_job_num",
    "avg_queue_s": "avg_que_time_gpu",
    "median_queue_s": "med_que_time_gpu",
    "avg_run_s": "avg_run_time_gpu",
    "median_run_s": "med_run_time_gpu",
    "max_run_s": "max_run_time_gpu",
    "avg_gpus": "avg_gpu_num",
    "median_gpus": "med_gpu_num",
    "max_gpus": "max_gpu",
}


@dataclass(frozen=True, slots=True)
class ClusterFigures:
    """One trace's published GPU-job figures (seconds, GPUs); None = not published."""

    name: str
    gpu_jobs: float | None
    avg_queue_s: float | None
    median_queue_s: float | None
    avg_run_s: float | None
    median_run_s: float | None
    max_run_s: float | None
    avg_gpus: float | None
    median_gpus: float | None
    max_gpus: float | None
    values: Mapping[str, float | None] = field(default_factory=dict)  # every column as published


def load_calibration(path: str | Path) -> dict[str, ClusterFigures]:
    """Each row of ``cluster_summary.csv`` by its ``id`` (Seren, Kalos, Philly, ...).
    Empty cells are None (the trace does not publish that figure)."""
    path = Path(path)
    out: dict[str, ClusterFigures] = {}
    for row in csv_rows(path, ("id", *_COLUMNS.values())):
        name = row.text("id")
        if name in out:
            raise row.error(f"trace {name!r} appears twice")
        values = {col: _optional(row, col) for col in row.values if col != "id"}
        picked = {ours: values[col] for ours, col in _COLUMNS.items()}
        out[name] = ClusterFigures(name=name, values=values, **picked)
    if not out:
        raise TraceError(f"{path}: no data rows")
    return out


def _optional(row: Row, column: str) -> float | None:
    return row.number(column) if row.values[column].strip() else None


def load_vc_nodes(path: str | Path) -> dict[str, int]:
    """``philly_vc.csv``: VC id -> nodes (columns ``vc``, ``node num``). GPUs per node
    is not in the file: it is a setting of the Helios simulator (8 by default)."""
    path = Path(path)
    out: dict[str, int] = {}
    for row in csv_rows(path, ("vc", "node num")):
        vc = row.text("vc")
        if vc in out:
            raise row.error(f"VC {vc!r} appears twice")
        nodes = row.count("node num", "node count")
        if nodes == 0:
            raise row.error(f"VC {vc!r} has 0 nodes")
        out[vc] = nodes
    if not out:
        raise TraceError(f"{path}: no data rows")
    return out
