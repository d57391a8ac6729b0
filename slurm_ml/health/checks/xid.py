"""Xid events from the kernel log: drain, flag or ignore by code (research §4)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection

from slurm_ml.health.checks._common import Out, gpus_by_bus, join, label
from slurm_ml.health.checks.expect import Thresholds
from slurm_ml.health.checks.findings import Severity
from slurm_ml.health.snapshot import Gpu, NodeSnapshot, XidEvent, bus_key

S = Severity

#: Short names for messages (NVIDIA Xid catalog, research §4 table).
NAMES: dict[int, str] = {
    13: "graphics engine exception", 31: "GPU memory page fault",
    43: "GPU stopped processing", 45: "preemptive cleanup", 48: "double-bit ECC error",
    61: "PMU breakpoint", 62: "micro-controller halt", 63: "row remap/page retirement recorded",
    64: "row remap/page retirement failure", 68: "NVDEC exception", 74: "NVLink error",
    79: "GPU fallen off the bus", 92: "high single-bit ECC rate", 94: "contained ECC error",
    95: "uncontained ECC error", 109: "context-switch timeout", 119: "GSP RPC timeout",
    120: "GSP error", 140: "unrecovered ECC error", 144: "NVLink SAW error",
    145: "NVLink RLW error", 146: "NVLink TLW error", 147: "NVLink TREX error",
    148: "NVLink NVLPW_CTRL error", 149: "NVLink NETIR error", 150: "NVLink MSE error",
    154: "GPU recovery action changed",
}

#: "Xid 45 … caused by previous Xid 149": the driver names the primary error of a
#: follow-up event (research §4: Xid 45 "follow the primary Xid").
_CAUSED_BY = re.compile(r"caused by previous Xid (\d{1,6})", re.IGNORECASE)

#: Xid 154 "GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)": the
#: driver's own verdict (NVML_GPU_RECOVERY_ACTION_*; DCGM fails on GPU reset, node reboot
#: and drain-and-reset, warns on drain P2P, research §1.3/§0.6).
_ACTION = re.compile(r"\bto\s+0x([0-9a-fA-F]+)")
_ACTIONS: dict[int, tuple[str, Severity | None]] = {
    0: ("none", None), 1: ("a GPU reset", S.DRAIN_NOW), 2: ("a node reboot", S.DRAIN_NOW),
    3: ("draining P2P", S.FLAG), 4: ("drain and reset", S.DRAIN_NOW),
}


def _severity(code: int, ev: XidEvent, th: Thresholds) -> tuple[Severity | None, str]:
    """Severity of an event judged as Xid ``code`` (None: ignore) and what to do."""
    if code in th.xid_drain:
        return S.DRAIN_NOW, "drain, reset or reboot, and replace the GPU if it recurs"
    if code in th.xid_ignore:
        return None, ""
    if code in th.xid_drain_after_job:
        return S.DRAIN_AFTER_JOB, ("drain after the job and reset the GPU (the application "
                                   "that hit it was stopped; other work is unaffected)")
    if code == 154:
        m = _ACTION.search(ev.message)
        if m is not None:
            name, sev = _ACTIONS.get(int(m.group(1), 16), ("an unknown action", S.FLAG))
            return sev, f"the driver asks for {name}"
    return S.FLAG, "no action unless it repeats"


def _judged_as(ev: XidEvent, th: Thresholds) -> int:
    """The code an event is judged by: its own, or, for an ignored follow-up event that
    names its cause ("Xid 45 … caused by previous Xid 149"), the worst cause. The cause
    line itself may be missing from the log (rotated, or logged before a reboot)."""
    if ev.xid not in th.xid_ignore:
        return ev.xid
    causes = [int(c) for c in _CAUSED_BY.findall(ev.message)]
    causes = [c for c in causes if c != ev.xid]
    if not causes:
        return ev.xid

    def rank(code: int) -> int:
        sev, _ = _severity(code, ev, th)
        return 3 if sev is None else sev.rank

    return min(causes, key=rank)


#: The class of an Xid the check leaves alone (an application's fault, or Xid 154 saying
#: the driver wants no action).
IGNORE = "ignore"
#: Every class an Xid can fall in: the severity the check gives it, or IGNORE.
XID_CLASSES: tuple[str, ...] = (S.DRAIN_NOW.value, S.DRAIN_AFTER_JOB.value, S.FLAG.value,
                                IGNORE)


def xid_class(ev: XidEvent, th: Thresholds) -> str:
    """What the check makes of ``ev``: one of :data:`XID_CLASSES`. A follow-up event that
    names its cause is classed as that cause, as the check judges it."""
    sev, _ = _severity(_judged_as(ev, th), ev, th)
    return IGNORE if sev is None else sev.value


def tally(snap: NodeSnapshot, th: Thresholds) -> Counter[tuple[int | str, str]]:
    """Every Xid of the snapshot counted by (GPU, :func:`xid_class`), for the node's
    metrics. The GPU is found as the check finds it: the NVML index of the GPU at the PCI
    address the line names, else that address as written (a GPU off the bus is no longer
    listed), "" for a line that names none. Unlike the check there is no time window: the
    count is of what the kernel log still holds. Empty when no kernel log was read."""
    by_bus = gpus_by_bus(snap)
    out: Counter[tuple[int | str, str]] = Counter()
    for ev in snap.xids or ():
        key = bus_key(ev.pci_bus_id)
        gpu = by_bus.get(key) if key is not None else None
        where: int | str = gpu.index if gpu is not None else ev.pci_bus_id or ""
        out[where, xid_class(ev, th)] += 1
    return out


def xids(snap: NodeSnapshot, scope: Collection[int], since: float | None, out: Out) -> None:
    """Group the Xids logged since ``since`` by (GPU, code). Events without a timestamp
    cannot be placed in time: they are counted and the evidence says so. Events on a GPU
    outside ``scope`` are skipped; events on an unknown bus (a GPU that fell off the bus is
    no longer enumerated) stay, node-level."""
    if snap.xids is None:
        out.miss("xid", None, "xids")
        return
    by_bus = gpus_by_bus(snap)
    groups: dict[tuple[int, int, str], list[tuple[XidEvent, Severity, str]]] = {}
    gpu_of: dict[int, Gpu] = {}
    for ev in snap.xids:
        if since is not None and ev.timestamp is not None and ev.timestamp < since:
            continue
        key = bus_key(ev.pci_bus_id)
        gpu = by_bus.get(key) if key is not None else None
        if gpu is not None and gpu.index not in scope:
            continue
        code = _judged_as(ev, out.th)
        sev, action = _severity(code, ev, out.th)
        if sev is None:
            continue
        if gpu is not None:
            gpu_of[gpu.index] = gpu
        group = (-1 if gpu is None else gpu.index, code,
                 "" if gpu is not None else ev.pci_bus_id or "")
        groups.setdefault(group, []).append((ev, sev, action))
    for (index, code, bus), events in sorted(groups.items()):
        gpu = gpu_of.get(index)
        _, sev, action = min(events, key=lambda e: e[1].rank)
        evs = [e for e, _, _ in events]
        n = len(evs)
        untimed = sum(1 for e in evs if e.timestamp is None)
        stamps = [e.timestamp for e in evs if e.timestamp is not None]
        where = (label(gpu) if gpu is not None
                 else f"The GPU at {bus} (not enumerated)" if bus else "A GPU (bus not logged)")
        when = f" since t={since:g}" if since is not None else ""
        note = f" ({untimed} without a timestamp, counted anyway)" if untimed else ""
        name = NAMES.get(code, "see the NVIDIA Xid catalog")
        via = sorted({e.xid for e in evs if e.xid != code})
        if via:
            name += f", reported as Xid {join(via)} 'caused by previous Xid {code}'"
        evidence: dict[str, object] = {
            "xid": code, "reported_as": via, "count": n, "untimed": untimed, "since": since,
            "first_ts": min(stamps) if stamps else None,
            "last_ts": max(stamps) if stamps else None,
            "pids": sorted({e.pid for e in evs if e.pid is not None})[:10],
            "sample": evs[0].message[:200],
        }
        if gpu is None:
            evidence["pci_bus_id"] = bus or None
        out.add(f"xid.{code}", sev, gpu,
                f"{where} logged Xid {code} ({name}) {n} time(s){when}{note}; {action}.",
                f"Xid {code} x{n}", **evidence)
