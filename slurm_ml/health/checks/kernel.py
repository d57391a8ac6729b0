"""Kernel messages that are not Xids: a GPU off the bus, not initialised, failing its probe.

Severities follow what the messages mean (NVIDIA's driver text, the reporters'
resolutions in data/SOURCES.md): a GPU that fell off the bus, never initialised, failed
the driver's probe, lacks power or asks for a reset cannot run work (drain now); a
corrupted InfoROM leaves the GPU working with untrustworthy ECC records (drain after
the job, RMA); an uncorrectable PCIe AER error drains after the job, a fatal one now, a
corrected one and a link trained below its capability are flagged.
"""

from __future__ import annotations

from collections.abc import Collection

from slurm_ml.health.checks._common import Out, gpus_by_bus, label
from slurm_ml.health.checks.findings import Severity
from slurm_ml.health.snapshot import Gpu, KernelEvent, NodeSnapshot, bus_key

S = Severity

#: kind → (severity, what it means, what to do).
RULES: dict[str, tuple[Severity, str, str]] = {
    "fallen_off_bus": (S.DRAIN_NOW, "fell off the bus (the driver lost contact with it)",
                       "drain, power-cycle the node, reseat or replace the GPU if it recurs"),
    "init_failed": (S.DRAIN_NOW, "failed to initialise (RmInitAdapter)",
                    "drain, check power and seating, reboot; replace the GPU if it recurs"),
    "probe_failed": (S.DRAIN_NOW, "failed the NVIDIA driver's probe",
                     "drain, check that the driver supports this GPU and that it is seated, "
                     "reboot"),
    "power_cables": (S.DRAIN_NOW, "lacks power (the driver says its power cables or "
                                  "external power are missing)",
                     "drain and check the GPU's power cables"),
    "reset_required": (S.DRAIN_NOW, "needs a reset", "drain, reset the GPU or reboot"),
    "gsp_timeout": (S.DRAIN_NOW, "timed out talking to its GSP firmware (the banner of Xid "
                                 "119)", "drain, reset the GPU or reboot; update the driver "
                                         "if it recurs"),
    "nvswitch_fatal": (S.DRAIN_NOW, "reported a fatal NVSwitch error (SXid)",
                       "drain, check nvidia-fabricmanager and the NVSwitch, reboot"),
    "fabricmanager_failed": (S.DRAIN_NOW, "has no running NVIDIA Fabric Manager (it failed "
                                          "to start or stopped with an error)",
                             "drain; NVLink traffic through the NVSwitches is off until "
                             "nvidia-fabricmanager runs: check its journal, restart it, reboot"),
    "fabricmanager_idle": (S.FLAG, "runs nvidia-fabricmanager with nothing to manage "
                                   "(NV_WARN_NOTHING_TO_DO: no NVSwitch)",
                           "no drain; disable the service on nodes without NVSwitches"),
    "nvswitch_sxid": (S.FLAG, "reported a non-fatal NVSwitch error (SXid)",
                      "no drain; watch for repeats and fatal SXids"),
    "inforom": (S.DRAIN_AFTER_JOB, "has a corrupted InfoROM (its ECC and page-retirement "
                                   "records cannot be trusted)",
                "drain after the job and open an RMA"),
    "pcie_aer_fatal": (S.DRAIN_NOW, "had a fatal PCIe error",
                       "drain, reboot, reseat the GPU or riser"),
    "pcie_aer_uncorrected": (S.DRAIN_AFTER_JOB, "had an uncorrected PCIe error",
                             "drain after the job, reseat the GPU or riser"),
    "pcie_aer_corrected": (S.FLAG, "had corrected PCIe errors",
                           "watch the count; reseat the GPU or riser if it keeps growing"),
    "pcie_link_limited": (S.FLAG, "trained its PCIe link below what it is capable of",
                          "no drain; reseat the GPU or riser at the next maintenance if "
                          "its peers run wider"),
}


def kernel_events(snap: NodeSnapshot, scope: Collection[int], since: float | None,
                  out: Out) -> None:
    """One finding per (GPU, switch or bus, kind). Events on a GPU outside ``scope`` are skipped;
    an address no enumerated GPU has (a GPU off the bus is no longer listed) stays
    node-level, named by that address. A "fallen off the bus" line next to an Xid 79 of
    the same GPU is that Xid's own text: the Xid finding carries it."""
    if snap.kernel_events is None:
        return  # no kernel log read: the xid check already reports the missing log
    by_bus = gpus_by_bus(snap)
    xid79 = {bus_key(e.pci_bus_id) for e in snap.xids or () if e.xid == 79
             and (since is None or e.timestamp is None or e.timestamp >= since)}
    groups: dict[tuple[str, str], list[KernelEvent]] = {}
    gpu_of: dict[str, Gpu] = {}
    for ev in snap.kernel_events:
        if ev.kind not in RULES:
            continue
        if since is not None and ev.timestamp is not None and ev.timestamp < since:
            continue
        key = bus_key(ev.pci_bus_id)
        if ev.kind == "fallen_off_bus" and key is not None and key in xid79:
            continue
        gpu = by_bus.get(key) if key is not None else None
        if gpu is not None and gpu.index not in scope:
            continue
        where = (f"gpu{gpu.index}" if gpu is not None
                 else f"bus:{key[0]:04x}:{key[1]:02x}:{key[2]:02x}" if key is not None else "")
        if gpu is not None:
            gpu_of[where] = gpu
        groups.setdefault((where, ev.kind), []).append(ev)
    for (where, kind), events in sorted(groups.items()):
        sev, meaning, action = RULES[kind]
        gpu = gpu_of.get(where)
        bus = events[0].pci_bus_id
        switch = kind.startswith("nvswitch")
        node_level = kind.startswith("fabricmanager")
        who = (label(gpu) if gpu is not None
               else snap.node or "The node" if node_level
               else f"The NVSwitch at {bus}" if switch and bus
               else f"The GPU at {bus}" if bus else "A GPU (no address logged)")
        n = len(events)
        stamps = [e.timestamp for e in events if e.timestamp is not None]
        evidence: dict[str, object] = {
            "kind": kind, "count": n, "since": since, "sample": events[0].message[:200],
            "first_ts": min(stamps) if stamps else None,
            "last_ts": max(stamps) if stamps else None,
        }
        if gpu is None:
            evidence["pci_bus_id"] = bus
        times = "" if n == 1 else f" ({n} messages)"
        source = "its Fabric Manager log" if node_level else "the kernel log"
        out.add(f"kernel.{kind}", sev, gpu,
                f"{who} {meaning} according to {source}{times}: "
                f"'{events[0].message[:120]}'; {action}.",
                f"{kind.replace('_', ' ')}" + (f" {bus}" if gpu is None and bus else ""),
                **evidence)
