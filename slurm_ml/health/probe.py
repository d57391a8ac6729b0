"""The probe boundary: whatever reads GPUs hands the checks a ``NodeSnapshot``.

Two implementations:

* ``NvmlProbe`` (``slurm_ml.health.probe_nvml``) reads the live devices through
  nvidia-ml-py, each call guarded and the whole run under a watchdog;
* ``ReplayProbe`` (``slurm_ml.health.probe_replay``) reads the same snapshot back from
  captures (``nvidia-smi -q`` text/XML, ``topo -m``, ``nvlink -s/-e/-gt``, a kernel log),
  or simply returns a snapshot it was given (tests, fakes, the dev cluster).

Checks depend only on this Protocol and on ``snapshot.py``; nothing here imports NVML.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol, runtime_checkable

from slurm_ml.health.snapshot import NodeSnapshot

__all__ = ["GpuProbe"]


@runtime_checkable
class GpuProbe(Protocol):
    """Something that can take a ``NodeSnapshot`` of one node's GPUs.

    ``snapshot`` must not raise for a device-level problem (a lost GPU, an unsupported
    query, a hung call): it records it in ``Gpu.errors`` / ``NodeSnapshot.errors`` so
    that the checks can turn it into a finding. It may raise only when it cannot produce
    a snapshot at all for a reason the caller must see (e.g. ``CaptureError`` for an
    unreadable replay capture).
    """

    def snapshot(self, node: str, gpus: Collection[int] | None = None) -> NodeSnapshot:
        """Read node ``node``; ``gpus`` restricts the per-GPU detail to those NVML
        indices (the job's GPUs in a prolog), ``None`` means every GPU.

        With a restriction, ``NodeSnapshot.attached_gpus`` still reports how many GPUs
        the driver sees, so the GPU-count check stays meaningful, and Xid events of the
        GPUs left out are dropped (an event on a bus the snapshot does not list reads as
        "a GPU that fell off the bus"). ``node`` names the snapshot (``NodeSnapshot.node``).
        """
        ...
