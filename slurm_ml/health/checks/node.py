"""check_node: every check over one snapshot."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from slurm_ml.health.checks import dcgm, device, kernel, memory, nvlink, xid
from slurm_ml.health.checks._common import Out, text
from slurm_ml.health.checks.expect import Expectations, Thresholds
from slurm_ml.health.checks.findings import Finding, sort_findings
from slurm_ml.health.snapshot import Gpu, NodeSnapshot


def _match(gpu: Gpu, previous: NodeSnapshot | None) -> Gpu | None:
    """The same physical GPU in the previous snapshot: by UUID, else bus id, else index.
    Two different UUIDs mean the GPU was replaced: no delta."""
    if previous is None:
        return None
    for attr in ("uuid", "pci_bus_id"):
        mine = text(getattr(gpu, attr))
        if mine is None:
            continue
        for old in previous.gpus:
            if text(getattr(old, attr)) == mine:
                return old
        if any(text(getattr(old, attr)) is not None for old in previous.gpus):
            return None  # the previous snapshot knows this attribute: the GPU is new
    return next((old for old in previous.gpus if old.index == gpu.index), None)


def bridged(snap: NodeSnapshot, exp: Expectations) -> Expectations:
    """For PCIe cards that NVLink bridges may pair: the expectations of a bridged node
    when the product is always bridged, or when any GPU on this node shows a bridge (an
    active link, an ``NV`` cell); otherwise NVLink is not expected."""
    if exp.bridge_links == 0 or exp.nvlink_links_per_gpu:
        return exp
    seen = any(isinstance(g.nvlinks, tuple) and any(k.active is True for k in g.nvlinks)
               for g in snap.gpus)
    seen = seen or any(c.strip().upper().startswith("NV")
                       for c in (snap.topology or {}).values())
    if exp.bridge_required or seen:
        return replace(exp, nvlink_links_per_gpu=exp.bridge_links)
    return exp


def check_node(snap: NodeSnapshot, exp: Expectations, th: Thresholds, *,
               gpus: Collection[int] | None = None, previous: NodeSnapshot | None = None,
               xid_since: float | None = None,
               job_pids: Collection[int] | None = None) -> list[Finding]:
    """Every health check over one snapshot, findings sorted (severity, GPU, check id).

    ``gpus``: only these GPU indices are checked (the job's, from SLURM_JOB_GPUS mapped to
    NVML indices); node-level checks (GPU count, probe failure, Xids on GPUs that are not
    enumerated) always run. ``previous``: an earlier snapshot of the node; enables the
    delta checks (NVLink error counters, lifetime ECC). ``xid_since``: ignore Xids logged
    before this time (same clock as XidEvent.timestamp). ``job_pids``: processes allowed on
    the GPUs; with it, any other compute process is a leftover.

    Pure: no I/O, no clock. Missing readings (None) give ``probe.missing`` FLAGs, never a
    drain; NOT_SUPPORTED is tolerated where the hardware lacks the feature.
    """
    exp = bridged(snap, exp)
    out = Out(exp, th)
    scope = {g.index for g in snap.gpus} if gpus is None else set(gpus)
    device.probe_errors(snap, out)
    device.gpu_count(snap, gpus, out)
    shared_modes = device.shared_mode_errors(snap)
    device.mode_unreadable(snap, shared_modes, scope, out)
    for read in snap.gpus:
        gpu = device.with_own_mode_errors(read, shared_modes)
        if gpu.index not in scope or device.lost(gpu, out):
            continue
        device.recovery(gpu, out)
        memory.ecc_volatile(gpu, out)
        memory.remap(gpu, out)
        memory.retired_pages(gpu, out)
        nvlink.active_links(gpu, out)
        nvlink.fabric(gpu, out)
        device.pcie_width(gpu, snap.gpus, out)
        if job_pids is not None:
            device.leftover(gpu, job_pids, out)
        old = _match(gpu, previous)
        if old is not None:
            memory.ecc_aggregate(gpu, old, out)
            nvlink.errors(gpu, old, out)
    nvlink.topology(snap, scope, out)
    nvlink.bridges(snap, scope, out)
    xid.xids(snap, scope, xid_since, out)
    kernel.kernel_events(snap, scope, xid_since, out)
    dcgm.dcgm_diag(snap, scope, out)
    return sort_findings(out.findings + out.missing_findings())
