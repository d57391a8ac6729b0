"""Checks on the device as a whole: count, probe failures, lost GPUs, PCIe, processes."""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import replace

from slurm_ml.health.checks._common import Out, join, label, num, text, unsupported
from slurm_ml.health.checks.findings import Severity
from slurm_ml.health.snapshot import Gpu, NodeSnapshot

S = Severity

#: NVML errors that mean the GPU is gone or unusable until reset (Meta GCM maps
#: GPU_IS_LOST and RESET_REQUIRED to CRITICAL, research §1.7/§2.2; docs/design.md: drain).
#: A device handle nvidia-smi or NVML cannot get at all ("Unable to determine the device
#: handle for GPU 0000:3b:00.0: Unknown Error") is the same: the GPU cannot be addressed.
_LOST = re.compile(r"gpu is lost|fallen off the bus|requires? (a )?reset|reset required"
                   r"|gpu_?is_?lost|reset_?required|device handle unavailable", re.IGNORECASE)
#: Errors in place of readings that say the GPU itself is in an error state: NVML's
#: UNKNOWN and TIMEOUT returns, nvidia-smi's ``ERR!`` and ``[Unknown Error]`` (in the
#: held-out fault captures, docs/research/gpu-fault-corpus/, these are faults of that GPU,
#: not "could not check"). Permissions, a missing library or a version mismatch are the
#: probe's problem and stay probe.gpu_error flags.
_ERROR_STATE = re.compile(r"unknown error|\berr!|\btimeout\b|timed out", re.IGNORECASE)
_NOT_THE_GPU = re.compile(r"permission|not found|mismatch|uninitiali[sz]ed|not loaded",
                          re.IGNORECASE)
#: A fan reading alone in error: the GPU computes, its cooling is in doubt.
_FAN = re.compile(r"\((?:line \d+, )?fan(?: speed)?\)$|GetFanSpeed", re.IGNORECASE)
#: CORRUPTED_INFOROM (GCM CRITICAL; nvidia-smi exit 14): the GPU still computes, but its
#: ECC and page-retirement records cannot be trusted: drain after the job, RMA.
_INFOROM = re.compile(r"inforom", re.IGNORECASE)


def probe_errors(snap: NodeSnapshot, out: Out) -> None:
    """A probe that failed (watchdog timeout, NVML init) is itself a finding: a hung
    NVML is what a sick GPU looks like (research §0.2)."""
    if not snap.errors:
        return
    first = snap.errors[0].replace("\n", " ").strip()
    out.add("probe.error", S.DRAIN_NOW, None,
            f"The GPU probe on {snap.node} failed ({first}); NVML hanging or failing to start "
            f"usually means a GPU or the driver is wedged: drain, check dmesg, reboot.",
            f"probe: {first[:40]}", errors=list(snap.errors), elapsed_s=snap.elapsed_s)


def gpu_count(snap: NodeSnapshot, job_gpus: Collection[int] | None, out: Out) -> None:
    """GPUs the driver reports vs the class (docs/design.md: drain). ``attached_gpus`` (the
    driver's count) wins over the GPUs listed, which a replayed excerpt may cut short."""
    attached = num(snap.attached_gpus)
    want, have = out.exp.gpu_count, len(snap.gpus) if attached is None else attached
    present = {g.index for g in snap.gpus}
    absent = sorted(set(job_gpus or ()) - present)
    if have != want:
        out.add("gpu.count", S.DRAIN_NOW, None,
                f"{snap.node} shows {have} GPUs but its node class expects {want}; a GPU "
                f"fell off the bus or is not configured: check nvidia-smi -L and dmesg.",
                f"{have}/{want} GPUs", expected=want, found=have, listed=len(snap.gpus),
                indices=sorted(present), missing_job_gpus=absent)
    elif absent:
        # The count is right, so the job's GPU indices do not match NVML's: a mapping
        # problem (SLURM_JOB_GPUS vs NVML order), not a fault of the node.
        out.miss("job_gpus", None, *(f"gpu {i}" for i in absent))


def _short(error: str) -> str:
    """An error without its where-from parenthetical, short enough for a drain reason:
    "Unknown Error (line 8, device handle unavailable)" → "Unknown Error"."""
    head = error.split(" (", 1)[0].strip() or error
    return head[:40]


def _mode_field(entry: str) -> str:
    return entry.split(": ", 1)[0]


def _gone(gpu: Gpu) -> bool:
    return any(_LOST.search(e) and not _NOT_THE_GPU.search(e) for e in gpu.errors)


def shared_mode_errors(snap: NodeSnapshot) -> frozenset[str]:
    """The mode fields (``Gpu.mode_errors``) that every GPU of the snapshot reads in
    error, lost GPUs aside (they were not read): a driver that cannot answer a query on
    any GPU of the node, not a GPU in an error state (health.field_kinds)."""
    read = [g for g in snap.gpus if not _gone(g)]
    if not read:
        return frozenset()
    common = {_mode_field(e) for e in read[0].mode_errors}
    for g in read[1:]:
        common &= {_mode_field(e) for e in g.mode_errors}
    return frozenset(common)


def with_own_mode_errors(gpu: Gpu, shared: frozenset[str]) -> Gpu:
    """``gpu`` with the mode fields it alone (of its node) cannot read moved into its
    ``errors``: a GPU whose peers read the field and it does not is in an error state."""
    own = tuple(e for e in gpu.mode_errors if _mode_field(e) not in shared)
    if not own:
        return gpu
    return replace(gpu, errors=gpu.errors + own)


def mode_unreadable(snap: NodeSnapshot, shared: frozenset[str], scope: Collection[int],
                    out: Out) -> None:
    """A mode that no GPU of the node can read is at most a flag: every GPU answering
    the same error for a setting, with nothing else in error, is the driver's quirk
    for that query (a real healthy 8x RTX 4090 node reads "Addressing Mode : Unknown
    Error" on all eight), not eight lost GPUs. Health readings and identity fields in
    error are judged by :func:`lost`."""
    if not shared:
        return
    hit = [g for g in snap.gpus if g.index in scope
           and any(_mode_field(e) in shared for e in g.mode_errors)]
    if not hit:
        return
    entries = list(dict.fromkeys(e for g in hit for e in g.mode_errors
                                 if _mode_field(e) in shared))
    fields = sorted(shared)
    out.add("gpu.mode_unreadable", S.FLAG, None,
            f"Every GPU of {snap.node} reads an error for {join(fields)} ({entries[0]}): a "
            f"mode the driver reports, not a health reading, and no GPU reads it while "
            f"another does not, so no GPU is drained for it; check that this driver "
            f"supports the query (nvidia-smi -q) if the setting matters.",
            f"unreadable mode {fields[0]}"[:40], fields=fields, errors=entries,
            gpus=[g.index for g in hit])


def lost(gpu: Gpu, out: Out) -> bool:
    """gpu.lost / gpu.error_state / gpu.inforom from the probe's per-GPU errors; True if
    the GPU is gone or in an error state (its other readings are then noise and are not
    checked). The same words come from NVML (``probe_nvml``) and from nvidia-smi output
    (``replay``), so a live node and a capture of it get the same verdict."""
    if not gpu.errors:
        return False
    gone = [e for e in gpu.errors if _LOST.search(e) and not _NOT_THE_GPU.search(e)]
    if gone:
        out.add("gpu.lost", S.DRAIN_NOW, gpu,
                f"{label(gpu)} reports '{gone[0]}'; it cannot run work until reset: drain, "
                f"reset or reboot, and replace it if it happens again.",
                _short(gone[0]), errors=list(gpu.errors))
        return True
    broken = [e for e in gpu.errors if _ERROR_STATE.search(e) and not _NOT_THE_GPU.search(e)]
    if broken:
        fan_only = all(_FAN.search(e) for e in broken)
        sev = S.DRAIN_AFTER_JOB if fan_only else S.DRAIN_NOW
        what = ("its fan reading is in error: the cooling may fail; drain after the job and "
                "check the fan" if fan_only else
                "the driver cannot read it: drain, check dmesg for Xid 79 or 'fallen off the "
                "bus', reset the GPU or reboot")
        out.add("gpu.error_state", sev, gpu,
                f"{label(gpu)} reads '{broken[0]}' in place of values; {what}.",
                _short(broken[0]) + (" (fan)" if fan_only else ""), errors=list(gpu.errors),
                fan_only=fan_only)
        if not fan_only:
            return True
    rom = [e for e in gpu.errors if _INFOROM.search(e)]
    if rom:
        out.add("gpu.inforom", S.DRAIN_AFTER_JOB, gpu,
                f"{label(gpu)} reports '{rom[0]}'; a corrupted InfoROM makes its ECC and "
                f"page-retirement records untrustworthy: drain after the job and open an RMA.",
                "inforom corrupted", errors=list(gpu.errors))
    rest = [e for e in gpu.errors if not _INFOROM.search(e) and e not in broken]
    if rest:
        out.add("probe.gpu_error", S.FLAG, gpu,
                f"The probe could not read some values of {label(gpu)} ({rest[0]}); the "
                f"checks that needed them report probe.missing.",
                _short(rest[0]), errors=rest)
    return False


def pcie_width(gpu: Gpu, peers: Sequence[Gpu], out: Out) -> None:
    """PCIe link width below what it should be (docs/design.md: flag).

    With ``Expectations.pcie_width`` the class says the width. Without it, the reference
    is the widest link among the GPU's peers (same product name) on this node, capped at
    the GPU's own maximum: a degraded link is the one narrower than its siblings. The
    GPU's own maximum alone is not a reference: servers and clouds put x16 cards in x8
    slots by design (the healthy AWS A10G and T4 captures run x8 of x16), so a GPU with
    no peer, or a node whose GPUs all run one width, is not judged.
    """
    cur, top = gpu.pcie_width_current, gpu.pcie_width_max
    if unsupported(cur):
        return
    have = num(cur)
    want = out.exp.pcie_width
    basis = "class"
    if want is None:
        basis = "peers"
        name = text(gpu.name)
        widths = [w for p in peers if p.index != gpu.index and text(p.name) == name
                  and (w := num(p.pcie_width_current)) is not None]
        if not widths:
            return
        want = max(widths)
        cap = num(top)
        if cap is not None:
            want = min(want, cap)
    if have is None:
        out.miss("pcie.width", gpu, "pcie_width_current")
        return
    if have < want:
        why = "" if basis == "class" else " (its peers on this node run it)"
        out.add("pcie.width", S.FLAG, gpu,
                f"{label(gpu)} runs its PCIe link at x{have} instead of x{want}{why}, which "
                f"cuts host transfers; reseat the GPU or riser at the next maintenance.",
                f"x{have}/x{want}", width=have, expected=want, basis=basis, max=num(top),
                gen=num(gpu.pcie_gen_current), gen_max=num(gpu.pcie_gen_max))


def leftover(gpu: Gpu, job_pids: Collection[int], out: Out) -> None:
    """Compute processes that are not the job's (DeepOps drains "Residual GPU processes
    found", Meta GCM: CRITICAL, research §1.4/§1.7)."""
    if gpu.processes is None:
        out.miss("process.leftover", gpu, "processes")
        return
    allowed = set(job_pids)
    extra = [p for p in gpu.processes if p.pid not in allowed]
    if not extra:
        return
    mem = sum(n for p in extra if (n := num(p.used_memory_mb)) is not None)
    who = join(f"{p.pid}" + (f" {p.name}" if p.name else "") for p in extra)
    out.add("process.leftover", S.DRAIN_NOW, gpu,
            f"{label(gpu)} still runs {len(extra)} compute process(es) that are not this "
            f"job's (pid {who}) holding {mem} MiB; kill them (reboot if they are unkillable), then "
            f"resume the node.",
            f"{len(extra)} leftover pids", pids=[p.pid for p in extra],
            names=[p.name for p in extra], used_memory_mb=mem)


#: NVML GPU recovery action (nvidia-smi "Recovery Action", driver 570+) that means the
#: GPU needs a reset or the node a reboot (DCGM fails on GPU_RESET, NODE_REBOOT and
#: DRAIN_AND_RESET, warns on DRAIN_P2P; research §1.3, §0.5).
_RECOVERY_DRAIN = frozenset({"reset", "gpu reset", "gpu_reset", "reboot", "node reboot",
                             "node_reboot", "drain and reset", "drain_and_reset"})


def recovery(gpu: Gpu, out: Out) -> None:
    """The driver's own verdict: reset required / drain-and-reset recommended / recovery
    action. A probe that did not read them (None) leaves them unchecked."""
    flags = [name for name, value in (("reset_required", gpu.reset_required),
                                      ("drain_and_reset_recommended",
                                       gpu.drain_and_reset_recommended))
             if value is True]
    if flags:
        out.add("gpu.reset_required", S.DRAIN_NOW, gpu,
                f"{label(gpu)} reports {' and '.join(f.replace('_', ' ') for f in flags)}; "
                f"drain, reset the GPU or reboot, then resume.",
                flags[0].replace("_", " "), flags=flags)
    action = gpu.recovery_action
    if not isinstance(action, str) or unsupported(action):
        return
    key = " ".join(action.strip().lower().split())
    if key in ("", "none"):
        return
    sev = S.DRAIN_NOW if key in _RECOVERY_DRAIN else S.FLAG
    out.add("gpu.recovery_action", sev, gpu,
            f"The driver asks for recovery action '{action}' on {label(gpu)}; "
            + ("drain and carry it out, then resume." if sev.drains
               else "no drain, but peer-to-peer traffic may be affected until it is done."),
            f"recovery {key}", recovery_action=action)
