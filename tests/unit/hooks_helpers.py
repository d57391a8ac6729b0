"""Shared builders for the hook tests: the example config, healthy A100 nodes, probes."""

from __future__ import annotations

import threading
from collections.abc import Collection
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from builders import a100 as healthy_a100
from builders import nvlinks, slurm_node

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import Config, load_config
from slurm_ml.health.probe_replay import ReplayProbe
from slurm_ml.health.snapshot import Gpu, GpuProcess, NodeSnapshot
from slurm_ml.slurm.fake import FakeSlurm

EXAMPLE_CONFIG = DEFAULT_CONFIG
CFG: Config = load_config(EXAMPLE_CONFIG)  # a100-80g gpu[01-02], a100-40g gpu[03-04], ...
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def later(minutes: float) -> datetime:
    return NOW + timedelta(minutes=minutes)


def a100(i: int, **changes: Any) -> Gpu:
    """A healthy A100 (builders.a100) with its memory and utilisation read, as the hooks
    record them."""
    read = {"memory_total_mb": 81920, "memory_used_mb": 0, "utilization_gpu_pct": 0.0}
    return healthy_a100(i, **(read | changes))


def snapshot(node: str = "gpu03", n: int = 8, **per_gpu: Any) -> NodeSnapshot:
    """A healthy 8x A100 node; ``g3={"nvlinks": ...}`` changes GPU 3."""
    gpus = tuple(a100(i, **per_gpu.get(f"g{i}", {})) for i in range(n))
    topo = {(i, j): "X" if i == j else "NV12" for i in range(n) for j in range(n)}
    return NodeSnapshot(node=node, gpus=gpus, driver_version="535.104.12", topology=topo,
                        xids=(), source="test", attached_gpus=n)


def nvlink_down(node: str = "gpu03", gpu: int = 3) -> NodeSnapshot:
    snap = snapshot(node)
    down = nvlinks(12, active=False)
    return replace(snap, gpus=tuple(replace(g, nvlinks=down) if g.index == gpu else g
                                    for g in snap.gpus))


def with_processes(snap: NodeSnapshot, **per_gpu: list[tuple[int, int]]) -> NodeSnapshot:
    """``g0=[(pid, MiB), ...]``: compute processes on GPU 0 (memory used = their sum)."""
    def change(g: Gpu) -> Gpu:
        procs = per_gpu.get(f"g{g.index}")
        if procs is None:
            return g
        return replace(g, processes=tuple(GpuProcess(pid, mb, "python") for pid, mb in procs),
                       memory_used_mb=sum(mb for _, mb in procs))

    return replace(snap, gpus=tuple(change(g) for g in snap.gpus))


def probe(snap: NodeSnapshot) -> ReplayProbe:
    return ReplayProbe(snap)


class HangingProbe:
    """Never answers until ``release`` is set (a wedged NVML)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def snapshot(self, node: str, gpus: Collection[int] | None = None) -> NodeSnapshot:
        self.calls += 1
        self.release.wait(30)
        return snapshot(node)


class RaisingProbe:
    def snapshot(self, node: str, gpus: Collection[int] | None = None) -> NodeSnapshot:
        raise RuntimeError("capture unreadable")


def fake_slurm(**drains: str) -> FakeSlurm:
    """Every node of the example config; ``gpu04="admin: DIMM"`` drains gpu04."""
    return FakeSlurm([slurm_node(n, reason=drains.get(n, ""), drained=n in drains)
                      for n in CFG.all_nodes()])


def env(node: str = "gpu03", job: int = 42, gpus: str | None = "0,1,2,3",
        **extra: str) -> dict[str, str]:
    out = {"SLURMD_NODENAME": node, "SLURM_JOB_ID": str(job), "SLURM_JOB_USER": "alice",
           "SLURM_JOB_UID": "1000", "SLURM_JOB_NAME": "train", "SLURM_JOB_ACCOUNT": "llm"}
    if gpus is not None:
        out["SLURM_JOB_GPUS"] = gpus
    return out | extra
