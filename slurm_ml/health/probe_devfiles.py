"""DeviceFileProcesses: the live compute processes of the dev cluster's fake GPUs.

The dev cluster's GPUs are character devices (``<dev_dir>/nvidia<N>``, aliases of
/dev/null) and its probe replays captures taken on other machines, so no capture can list
the processes running on *these* GPUs. This ``GpuProbe`` decorator fills that one reading
live, the way the NVIDIA driver does: a process that holds ``<dev_dir>/nvidia<N>`` open is
a compute process on GPU N. Every dev node shares one host and one device directory, so a
process counts on node X only when its environment says ``SLURMD_NODENAME=X`` (slurmstepd
sets it for every job; a process without it is on no dev node).

Each GPU's ``processes`` is replaced (a capture's pids belong to the machine it was taken
on); a process's GPU memory is not read (None). What /proc does not let us read (a process
that exits mid-scan, another user's descriptors when not root) is skipped. Everything else
of the snapshot is the inner probe's.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Collection
from pathlib import Path

from slurm_ml.health.probe import GpuProbe
from slurm_ml.health.snapshot import GpuProcess, NodeSnapshot

__all__ = ["DeviceFileProcesses", "device_holders"]

_DEVICE = re.compile(r"^nvidia(\d+)$")
NODE_VAR = "SLURMD_NODENAME"


def _devices(dev_dir: Path) -> dict[str, int]:
    """Resolved path of each ``nvidia<N>`` in ``dev_dir`` → N."""
    try:
        names = os.listdir(dev_dir)
    except OSError:
        return {}
    base = os.path.realpath(dev_dir)
    return {os.path.join(base, n): int(m.group(1)) for n in names if (m := _DEVICE.match(n))}


def _environ_value(pid_dir: Path, key: str) -> str | None:
    try:
        raw = (pid_dir / "environ").read_bytes()
    except OSError:
        return None
    prefix = key.encode() + b"="
    for item in raw.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix):].decode(errors="replace")
    return None


def _comm(pid_dir: Path) -> str:
    try:
        return (pid_dir / "comm").read_text(errors="replace").strip()
    except OSError:
        return ""


def device_holders(dev_dir: Path, node: str, *, proc_root: Path = Path("/proc")
                   ) -> dict[int, dict[int, str]]:
    """GPU index → {pid: command name} of the processes on ``node`` (by SLURMD_NODENAME)
    that hold ``dev_dir/nvidia<index>`` open."""
    devices = _devices(dev_dir)
    out: dict[int, dict[int, str]] = {}
    if not devices:
        return out
    try:
        pids = [p for p in os.listdir(proc_root) if p.isdigit()]
    except OSError:
        return out
    for pid in pids:
        pid_dir = proc_root / pid
        try:
            fds = os.listdir(pid_dir / "fd")
        except OSError:
            continue
        held: set[int] = set()
        for fd in fds:
            try:
                target = os.readlink(pid_dir / "fd" / fd)
            except OSError:
                continue
            index = devices.get(target)
            if index is not None:
                held.add(index)
        if not held or _environ_value(pid_dir, NODE_VAR) != node:
            continue
        name = _comm(pid_dir)
        for index in held:
            out.setdefault(index, {})[int(pid)] = name
    return out


class DeviceFileProcesses:
    """A ``GpuProbe`` whose GPU process lists are the live holders of the fake device
    files (see the module doc); every other reading comes from ``inner``."""

    def __init__(self, inner: GpuProbe, dev_dir: Path, *,
                 proc_root: Path = Path("/proc")) -> None:
        self.inner = inner
        self.dev_dir = dev_dir
        self.proc_root = proc_root

    def snapshot(self, node: str, gpus: Collection[int] | None = None) -> NodeSnapshot:
        snap = self.inner.snapshot(node, gpus)
        live = device_holders(self.dev_dir, node, proc_root=self.proc_root)
        return dataclasses.replace(snap, gpus=tuple(
            dataclasses.replace(g, processes=tuple(
                GpuProcess(pid, None, name) for pid, name in sorted(live.get(g.index, {}).items())))
            for g in snap.gpus))


def _is_probe(p: DeviceFileProcesses) -> GpuProbe:  # mypy: the Protocol is satisfied
    return p
