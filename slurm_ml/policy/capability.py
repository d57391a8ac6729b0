"""Capability matching: widen a typed GPU request to every type that can run the job.

A user who asks for ``a100_80g`` but needs 30 GB waits for the scarcest GPU while
40 GB cards idle. The need comes from ``gpu_mem=`` in --comment, else from the p95 of
the user's last runs of the same job name; with neither, the request is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_ml.model import GpuType
from slurm_ml.policy.admission_state import AdmissionState
from slurm_ml.policy.features import Constraint, gpu_type_terms
from slurm_ml.policy.request import JobRequest, comment_keys, gpu_mem_gb


@dataclass(frozen=True, slots=True)
class Need:
    gb: float
    source: str  # "comment" | "profile"


@dataclass(frozen=True, slots=True)
class Capability:
    requested: frozenset[str]  # GPU types the user named (empty = untyped)
    acceptable: tuple[str, ...]  # in config order; == requested when nothing widened
    need: Need | None = None
    note: str = ""

    @property
    def widened(self) -> bool:
        return set(self.acceptable) != set(self.requested)


def gpu_need(req: JobRequest, state: AdmissionState) -> Need | None:
    """GPU memory the job needs, per GPU: explicit comment first, then the profile."""
    explicit = gpu_mem_gb(req.comment)
    if explicit is not None:
        return Need(explicit, "comment")
    profile = state.profiles_gb.get((req.user, req.name))
    return Need(profile, "profile") if profile else None


def match(req: JobRequest, constraint: Constraint | None, *, gpu_types: dict[str, GpuType],
          feature_to_type: dict[str, str], state: AdmissionState, margin_pct: float,
          gpus_per_node: int) -> Capability:
    """Which GPU types may run this job (by memory, and NVLink for multi-GPU nodes)."""
    requested = set(req.typed_gpus)
    if constraint is not None:
        requested |= gpu_type_terms(constraint, feature_to_type)
    requested &= set(gpu_types)
    order = tuple(gpu_types)
    if not requested:
        return Capability(frozenset(), ())
    keep = tuple(t for t in order if t in requested)
    need = gpu_need(req, state)
    if need is None or "pin_gpu" in comment_keys(req.comment):
        return Capability(frozenset(requested), keep)
    floor = need.gb * (1 + margin_pct / 100)
    nvlink = gpus_per_node > 1 and any(gpu_types[t].nvlink_links > 0 for t in requested)
    ok = {name for name, t in gpu_types.items()
          if t.memory_gb >= floor and (t.nvlink_links > 0 or not nvlink)}
    acceptable = tuple(t for t in order if t in ok | requested)
    source = ("gpu_mem in --comment" if need.source == "comment"
              else f"the p95 peak of your last runs named {req.name!r}")
    note = ""
    short = sorted(t for t in requested if gpu_types[t].memory_gb < floor)
    if short:
        note = (f"Warning: the job needs about {need.gb:.0f} GB per GPU ({source}) but "
                f"{', '.join(short)} has less; it may run out of GPU memory.")
    cap = Capability(frozenset(requested), acceptable, need, note)
    if cap.widened:
        extra = [t for t in acceptable if t not in requested]
        why = (f"it needs {need.gb:.0f} GB per GPU ({source}), plus a "
               f"{margin_pct:g}% margin")
        if nvlink:
            why += ", with NVLink between its GPUs"
        cap = Capability(frozenset(requested), acceptable, need,
                         f"GPU type widened from {'|'.join(sorted(requested))} to "
                         f"{'|'.join(acceptable)}: {why}, and {', '.join(extra)} "
                         f"{'fits' if len(extra) == 1 else 'fit'} that, so it can start "
                         f"sooner. To keep the type you asked for, add pin_gpu to --comment.")
    return cap
