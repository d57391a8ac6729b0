"""Capability matching: widen a typed GPU request to every type that can run the job.

A user who asks for ``a100_80g`` but needs 30 GB waits for the scarcest GPU while
40 GB cards idle. The need comes from ``gpu_mem=`` in --comment, else from the p95 of
the user's last runs of the same job name; with neither, the request is left alone.
A job with several GPUs on a node that asked for an NVLink type keeps NVLink, unless
its researcher says ``parallel=data``: such a job needs no NVLink, so PCIe types join.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_ml.model import GpuType
from slurm_ml.policy.admission.features import Constraint, gpu_type_terms
from slurm_ml.policy.admission.request import (
    DATA,
    TENSOR,
    JobRequest,
    comment_keys,
    gpu_mem_gb,
    parallelism,
)
from slurm_ml.policy.admission.state import AdmissionState


@dataclass(frozen=True, slots=True)
class Need:
    gb: float
    source: str  # "comment" | "profile"


@dataclass(frozen=True, slots=True)
class Capability:
    requested: frozenset[str]  # GPU types the user named (empty = untyped)
    acceptable: tuple[str, ...]  # in config order; == requested when nothing may widen
    need: Need | None = None
    nvlink: bool = False  # the job needs NVLink between its GPUs
    short: tuple[str, ...] = ()  # requested types with less memory than the need
    #: several GPUs per node, and ``parallel=data`` let types without NVLink in
    pcie_ok: bool = False


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
    """Which GPU types could run this job, by memory, and NVLink for multi-GPU nodes.

    Never drops a type the user asked for: widening only adds.
    """
    requested = set(req.typed_gpus)
    if constraint is not None:
        requested |= gpu_type_terms(constraint, feature_to_type)
    order = tuple(gpu_types)
    if not requested:
        return Capability(frozenset(), ())
    keep = tuple(t for t in order if t in requested)
    need = gpu_need(req, state)
    if need is None or "pin_gpu" in comment_keys(req.comment):
        return Capability(frozenset(requested), keep)
    floor = need.gb * (1 + margin_pct / 100)
    kind = parallelism(req.comment)
    nvlink = gpus_per_node > 1 and needs_nvlink(kind, requested, gpu_types)
    ok = {name for name, t in gpu_types.items()
          if t.memory_gb >= floor and (t.nvlink_links > 0 or not nvlink)}
    short = tuple(t for t in keep if gpu_types[t].memory_gb < floor)
    return Capability(frozenset(requested), tuple(t for t in order if t in ok | requested),
                      need, nvlink, short, pcie_ok=gpus_per_node > 1 and kind == DATA)


def needs_nvlink(kind: str | None, requested: set[str], gpu_types: dict[str, GpuType]) -> bool:
    """Whether a job with several GPUs on a node must keep NVLink between them.

    The researcher's ``parallel=`` decides when given. Without it, a job written for an
    NVLink type may depend on NVLink (tensor parallelism slows to a crawl over PCIe),
    and nothing in the request says otherwise, so it keeps it.
    """
    if kind is not None:
        return kind == TENSOR
    return any(gpu_types[t].nvlink_links > 0 for t in requested)


def describe_need(req: JobRequest, need: Need) -> str:
    if need.source == "comment":
        return f"{need.gb:.0f} GB per GPU (gpu_mem in --comment)"
    return f"{need.gb:.0f} GB per GPU (the p95 peak of your last runs named {req.name!r})"
