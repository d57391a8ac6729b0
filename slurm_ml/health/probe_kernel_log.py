"""Xids and other GPU kernel messages from the live kernel log, added to another
probe's snapshot (the same readers a replayed capture goes through).

NVML keeps no Xid history, so on a real node the Xid checks read ``dmesg`` (root, as the
prolog runs). A log that cannot be read leaves ``xids`` unread (a ``probe.missing`` flag),
never an error finding: a missing kernel log must not drain a node.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection

from slurm_ml import proc
from slurm_ml.health.probe import GpuProbe
from slurm_ml.health.replay.kernel import parse_kernel_events
from slurm_ml.health.replay.xid import parse_xids
from slurm_ml.health.snapshot import NodeSnapshot, bus_key

DMESG = ("dmesg", "--time-format", "iso")  # ISO times parse to epoch seconds


def read_kernel_log(timeout_s: float = 2.0) -> str | None:
    """The kernel ring buffer, or None when it cannot be read in time."""
    try:
        res = proc.run(DMESG, timeout_s=timeout_s, check=False)
    except proc.CommandError:
        return None
    return res.stdout if res.returncode == 0 else None


class KernelLogXids:
    """A ``GpuProbe`` that adds the kernel log's Xids to ``inner``'s snapshot."""

    def __init__(self, inner: GpuProbe,
                 read: Callable[[], str | None] = read_kernel_log) -> None:
        self.inner = inner
        self.read = read

    def snapshot(self, node: str, gpus: Collection[int] | None = None) -> NodeSnapshot:
        snap = self.inner.snapshot(node, gpus)
        if snap.xids is not None:
            return snap
        text = self.read()
        if text is None:
            return snap
        events = parse_xids(text)
        kernel = parse_kernel_events(text)
        if gpus is not None:  # the job's GPUs only: another GPU's message is not this job's
            mine = {k for g in snap.gpus if (k := bus_key(g.pci_bus_id)) is not None}
            events = tuple(e for e in events if bus_key(e.pci_bus_id) in mine)
            kernel = tuple(e for e in kernel if bus_key(e.pci_bus_id) in mine)
        return dataclasses.replace(snap, xids=events, kernel_events=kernel)
