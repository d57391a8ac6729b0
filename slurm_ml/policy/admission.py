"""Admission: one submission in, one decision out (rewrite, pass or reject), no I/O.

Order: capability matching widens the GPU types, gang shaping picks the node layout on
the node classes of those types, budget routing picks the QOS and protected runtime.
Each step adds one sentence to the message the researcher sees on sbatch's stderr.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from slurm_ml.config import Config
from slurm_ml.policy.admission_state import AdmissionState
from slurm_ml.policy.capability import Capability, match
from slurm_ml.policy.cluster_view import ClassSlice, ClusterView
from slurm_ml.policy.features import Constraint, parse_constraint, render, without_gpu_terms
from slurm_ml.policy.request import BadCommentKey, JobRequest, comment_keys
from slurm_ml.policy.routing import Route, route
from slurm_ml.policy.shape import Layout, shape

SLURM_ERROR = -1  # generic failure code; the message says what is wrong
RECORD_PREFIX = "slurm-ml "


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with a submission. ``accept`` with no changes is a pass-through."""

    accept: bool = True
    message: str = ""
    code: int = 0  # Slurm error code on reject
    layout: Layout | None = None  # new node layout; None = keep
    gpu_type: str | None = None  # GRES type to keep when GPUs are rewritten
    untype_gpus: bool = False  # drop the GRES type (the features carry the types now)
    features: str | None = None  # new --constraint; None = keep
    qos: str | None = None
    time_min: int | None = None
    clear_time_min: bool = False
    site_factor: int | None = None
    record: dict[str, object] = field(default_factory=dict)

    @property
    def rewrites_gpus(self) -> bool:
        return self.layout is not None or self.untype_gpus

    def admin_comment(self) -> str:
        """Compact record kept in the job's AdminComment, for ``slurm-ml why``."""
        return RECORD_PREFIX + json.dumps(self.record, separators=(",", ":"), sort_keys=True)


PASS = Decision()


def decide(req: JobRequest, cfg: Config, view: ClusterView, state: AdmissionState,
           now: datetime, *, routing: bool = True) -> Decision:
    """Rewrite, pass or reject one job; ``routing=False`` for updates of existing jobs."""
    if not req.is_gpu:
        return PASS
    if any(p not in view.partitions for p in req.partitions):
        return PASS
    try:
        keys = comment_keys(req.comment)
        constraint = parse_constraint(req.features)
        total = req.total_gpus() or 0
        nodes = req.min_nodes or 1
        cap = match(req, constraint, gpu_types=cfg.gpu_types,
                    feature_to_type=view.feature_to_type, state=state,
                    margin_pct=cfg.policy.admission.memory_margin_pct,
                    gpus_per_node=total if nodes == 1 else total // nodes)
    except BadCommentKey as exc:
        return Decision(accept=False, code=SLURM_ERROR, message=f"slurm-ml: {exc}.")
    if constraint is None:  # too rich to rewrite: keep the user's own type choice
        cap = Capability(cap.requested, tuple(t for t in view.type_order if t in cap.requested))
    slices = _eligible(view.in_partitions(req.partitions), cap, constraint, view)
    verdict = shape(req, slices, view.type_order, allow_fragment="allow_fragment" in keys)
    if verdict.reject:
        return Decision(accept=False, code=verdict.code,
                        message=f"slurm-ml rejected this job: {verdict.reject}.")
    notes: list[str] = []
    layout = verdict.layout
    types = _final_types(cap, layout, slices, view.type_order)
    widened = bool(cap.requested) and set(types) != set(cap.requested)
    features = None
    multi = layout is not None and layout.whole_nodes
    if constraint is not None and (widened or (multi and len(types) > 1)):
        base = without_gpu_terms(constraint, view.feature_to_type) if widened else constraint
        feats = tuple(cfg.gpu_types[t].feature for t in types)
        features = render(base, feats, matching=multi)
    if cap.note and (widened or not cap.widened):
        notes.append(cap.note)
    if layout is not None:
        notes.append(_layout_note(req, layout, cfg))
    if verdict.note:
        notes.append(verdict.note.capitalize() + ".")
    rt = route(req, cfg, state) if routing else Route()
    if rt.note:
        notes.append(rt.note)
    typed = sorted(req.typed_gpus)
    record: dict[str, object] = {"v": 1, "at": int(now.timestamp())}
    if cap.need is not None:
        record["need_gb"] = round(cap.need.gb, 1)
        record["need_src"] = cap.need.source
    if widened:
        record["types"] = list(types)
    if layout is not None:
        record["shape"] = f"{layout.nodes}x{layout.per_node}"
    if rt.qos:
        record["qos"] = rt.qos
    if rt.time_min is not None:
        record["time_min"] = rt.time_min
    if req.requeue is not None:
        record["requeue"] = int(req.requeue)
    if rt.site_factor is not None:
        record["site_factor"] = rt.site_factor
    return Decision(
        message=("slurm-ml: " + " ".join(notes)) if notes else "",
        layout=layout,
        gpu_type=typed[0] if len(typed) == 1 and not widened else None,
        untype_gpus=widened and bool(typed),
        features=features,
        qos=rt.qos if rt.qos != req.qos else None,
        time_min=rt.time_min,
        clear_time_min=rt.clear_time_min,
        site_factor=rt.site_factor,
        record=record,
    )


def _eligible(slices: tuple[ClassSlice, ...], cap: Capability,
              constraint: Constraint | None, view: ClusterView) -> tuple[ClassSlice, ...]:
    """Node classes the job could land on: right GPU type and the user's other features.

    GPU-type terms are already in ``cap``; terms naming no feature slurm-ml knows are
    left for Slurm to judge.
    """
    known = {f for s in view.slices for f in (*s.node_class.features, s.gpu.feature)}
    terms = [t for t in (constraint.terms if constraint else ())
             if not all(n in view.feature_to_type for n in t) and any(n in known for n in t)]
    return tuple(
        s for s in slices
        if (not cap.acceptable or s.gpu.name in cap.acceptable)
        and all(any(n in s.node_class.features or n == s.gpu.feature for n in t) for t in terms)
    )


def _final_types(cap: Capability, layout: Layout | None, slices: tuple[ClassSlice, ...],
                 order: tuple[str, ...]) -> tuple[str, ...]:
    present = set(layout.types) if layout is not None else {s.gpu.name for s in slices}
    if cap.acceptable:
        return tuple(t for t in cap.acceptable if t in present)
    return tuple(t for t in order if t in present)


def _layout_note(req: JobRequest, layout: Layout, cfg: Config) -> str:
    if not layout.whole_nodes:
        return (f"Kept on one node ({layout.per_node} GPUs fit in one node), so its GPUs "
                f"share NVLink instead of the network.")
    wait = cfg.policy.admission.leaf_switch_wait_min
    return (f"Shaped to whole nodes: {layout.describe()}, exclusive, and it waits up to "
            f"{wait:g} min for nodes under one leaf switch before taking any.")
