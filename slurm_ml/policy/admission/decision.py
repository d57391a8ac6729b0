"""Admission: one submission in, one decision out (rewrite, pass or reject), no I/O.

Order: capability matching widens the GPU types, gang shaping picks the node layout on
the node classes of those types, budget routing picks the QOS and protected runtime.
Each step adds one sentence to the message the researcher sees on sbatch's stderr.

Every decision is stamped into the job's AdminComment as ``slurm-ml {json}``. Its
``min_runtime`` key (minutes) is the minimum-runtime contract of a routed job: the time
the reconciler may not requeue it, read back with ``recorded_min_runtime_min``. It is 0 for
QOS free and absent for jobs slurm-ml does not route. Slurm's own ``time_min`` is never
used for it (see ``routing``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from slurm_ml.config import Config
from slurm_ml.model import ALLOC_QOS, FREE_QOS
from slurm_ml.policy.admission.capability import Capability, describe_need, match
from slurm_ml.policy.admission.cluster_view import ClassSlice, ClusterView
from slurm_ml.policy.admission.features import (
    Constraint,
    parse_constraint,
    render,
    without_gpu_terms,
)
from slurm_ml.policy.admission.request import (
    BadCommentKey,
    JobRequest,
    comment_keys,
    gpu_mem_gb,
    parallelism,
)
from slurm_ml.policy.admission.routing import (
    ESLURM_ACCOUNTING_POLICY,
    Route,
    reroute_update,
    route,
    update_route,
)
from slurm_ml.policy.admission.shape import (
    ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE,
    Layout,
    ShapeVerdict,
    node_needs,
    shape,
    types_for,
)
from slurm_ml.policy.admission.state import AdmissionState

SLURM_ERROR = -1  # generic failure code; the message says what is wrong
#: "Requested partition configuration not available now": what slurmctld answers a job
#: over a partition limit when it enforces them (EnforcePartLimits)
ESLURM_REQUESTED_PART_CONFIG_UNAVAILABLE = 2015
RECORD_PREFIX = "slurm-ml "


@dataclass(frozen=True, slots=True)
class AdmissionDecision:
    """What to do with a submission. ``accept`` with no changes is a pass-through."""

    accept: bool = True
    message: str = ""
    code: int = 0  # Slurm error code on reject
    layout: Layout | None = None  # new node layout; None = keep
    gpu_type: str | None = None  # GRES type to keep when GPUs are rewritten
    untype_gpus: bool = False  # drop the GRES type (the features carry the types now)
    features: str | None = None  # new --constraint; None = keep
    qos: str | None = None
    clear_time_min: bool = False  # clear Slurm's --time-min; admission never sets one
    site_factor: int | None = None
    record: dict[str, object] = field(default_factory=dict)
    #: (account, GPUs) when this decision put the job in the fast lane: submitd counts it
    #: against the lane's caps until the next cycle does (``with_lane_admission``)
    lane: tuple[str, int] | None = None

    @property
    def rewrites_gpus(self) -> bool:
        return self.layout is not None or self.untype_gpus

    def admin_comment(self) -> str:
        """Compact record kept in the job's AdminComment, for ``slurm-ml why``."""
        return RECORD_PREFIX + json.dumps(self.record, separators=(",", ":"), sort_keys=True)


PASS = AdmissionDecision()


@dataclass(frozen=True, slots=True)
class Before:
    """A job as slurmctld holds it when its owner updates it: what an update may not
    change without admission (its record) and where it comes from."""

    partitions: tuple[str, ...] = ()
    qos: str | None = None
    #: its AdminComment holds slurm-ml's admission record; None: not known (a shim that
    #: does not send the AdminComment)
    recorded: bool | None = None


def read_record(admin_comment: str) -> dict[str, object] | None:
    """The slurm-ml record in a job's AdminComment; None when there is none or it is not
    a JSON object.

    The copy in slurmdbd may have every double quote turned into a backtick:
    ``sacctmgr modify job ... set AdminComment=`` does that (22.05.8), and the epilog
    writes its summary that way, after slurmctld stopped taking updates for the job. A
    record with no double quote is read with its backticks turned back; slurm-ml never
    writes a backtick of its own.
    """
    if not admin_comment or not admin_comment.startswith(RECORD_PREFIX):
        return None
    text = admin_comment[len(RECORD_PREFIX):]
    if '"' not in text:
        text = text.replace("`", '"')
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) else None


def recorded_min_runtime_min(admin_comment: str) -> int | None:
    """The protected runtime, in minutes, that admission recorded in a job's AdminComment.

    None when the AdminComment holds no slurm-ml record, when the record has no
    ``min_runtime`` (a job in a QOS slurm-ml does not route, or one admitted before the
    key existed, whose contract was still Slurm's TimeMin) or when the value is not a
    non-negative integer.
    """
    record = read_record(admin_comment)
    value = record.get("min_runtime") if record is not None else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def contract_min_runtime_s(admin_comment: str, time_min_min: int | None) -> int | None:
    """A job's minimum-runtime contract in seconds, uncapped: what admission recorded in
    its AdminComment, else Slurm's TimeMin (jobs admitted before the record existed);
    None when it has neither. The daemon's views and the repair planner read it here."""
    minutes = recorded_min_runtime_min(admin_comment)
    if minutes is None:
        minutes = time_min_min
    return None if minutes is None else minutes * 60


def decide(req: JobRequest, cfg: Config, view: ClusterView, state: AdmissionState,
           now: datetime, *, routing: bool = True, update: bool = False,
           asked_qos: str | None = None,
           before: Before | None = None) -> AdmissionDecision:
    """Rewrite, pass or reject one job.

    A job is judged whenever any partition of its ``--partition`` list is one slurm-ml
    manages (no list: the default partition): Slurm may start it in any of them, so a
    list that adds a partition slurm-ml does not manage is no way around a spent budget.
    It is decided exactly as with its managed partitions alone: shaped (and widened) on
    their nodes, routed as any job, and a rejection says where it was judged. A list
    that names only partitions slurm-ml does not manage passes untouched.

    Updates of existing jobs: ``routing=False`` when the update touches only the shape
    (and ``--time-min``); ``update=True`` when it touches QOS, account or partition,
    with ``asked_qos`` the QOS the update names (``routing.reroute_update``) and
    ``before`` the job as slurmctld holds it before the update.
    """
    if not req.is_gpu:
        return PASS
    managed = tuple(p for p in req.partitions if p in view.partitions)
    if req.partitions and not managed:
        return PASS
    elsewhere = tuple(p for p in req.partitions if p not in view.partitions)
    if elsewhere and req.typed_gpus - set(cfg.gpu_types):
        # No node slurm-ml manages has that type: the job can only start in a partition
        # slurm-ml does not manage, whose nodes it does not know.
        return PASS
    unknown = sorted(req.typed_gpus - set(cfg.gpu_types))
    if unknown:
        return AdmissionDecision(
            accept=False, code=ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE,
            message=(f"slurm-ml rejected this job: GPU type {', '.join(unknown)} "
                     f"does not exist on this cluster; the types are "
                     f"{', '.join(view.type_order)}."))
    too_long = _over_time_limit(req, cfg, managed, elsewhere)
    if too_long:
        return AdmissionDecision(accept=False, code=ESLURM_REQUESTED_PART_CONFIG_UNAVAILABLE,
                                 message=f"slurm-ml rejected this job: {too_long}.")
    keys = comment_keys(req.comment)
    fragment = "allow_fragment" in keys
    constraint = parse_constraint(req.features)
    total = req.total_gpus() or 0
    try:
        # a bad gpu_mem or parallel is an error on every GPU job, widened or not
        gpu_mem_gb(req.comment)
        parallelism(req.comment)
        cap = match(req, constraint, gpu_types=cfg.gpu_types,
                    feature_to_type=view.feature_to_type, state=state,
                    margin_pct=cfg.policy.admission.memory_margin_pct,
                    gpus_per_node=total // max(req.min_nodes or 1, 1) if fragment else total)
    except BadCommentKey as exc:
        return AdmissionDecision(accept=False, code=SLURM_ERROR, message=f"slurm-ml: {exc}.")
    if constraint is None:  # too rich to rewrite: keep the user's own type choice
        cap = Capability(cap.requested, tuple(t for t in view.type_order if t in cap.requested))
    candidates = _eligible(view.in_partitions(managed), constraint, view)
    can_widen = set(cap.acceptable) > cap.requested
    # With a wider retry to come, the fixes of a first refusal are worked out only if the
    # retry is refused too.
    verdict = _shape_on(req, candidates, cap.requested, view, fragment, advise=not can_widen)
    if verdict.reject and can_widen:
        wider = _shape_on(req, candidates, frozenset(cap.acceptable), view, fragment)
        verdict = (wider if not wider.reject else
                   _shape_on(req, candidates, cap.requested, view, fragment))
    if verdict.reject:
        where = _judged_where(managed, elsewhere)
        return AdmissionDecision(accept=False, code=verdict.code,
                                 message=f"slurm-ml rejected this job{where}: {verdict.reject}.")
    layout = verdict.layout
    types = _final_types(req, cap, layout, candidates, view.type_order)
    widened = bool(cap.requested) and not set(types) <= cap.requested
    multi = layout is not None and layout.whole_nodes
    features = None
    # a multi-node layout that only some GPU types fill exactly is steered onto them
    steer = multi and not req.typed_gpus and set(types) < {s.gpu.name for s in candidates}
    if constraint is not None and (widened or (multi and (len(types) > 1 or steer))):
        base = without_gpu_terms(constraint, view.feature_to_type) if widened else constraint
        features = render(base, tuple(cfg.gpu_types[t].feature for t in types), matching=multi)
    notes = _notes(req, cfg, cap, types=types, widened=widened, layout=layout,
                   shape_note=verdict.note)
    if not routing:
        rt = update_route(req)
    elif update:
        rt = reroute_update(req, cfg, state, asked_qos=asked_qos)
    else:
        rt = route(req, cfg, state)
    if update and not rt.refuse and before is not None:
        rt = _unrecorded_into_alloc(req, rt, before, view)
    if rt.refuse:
        return AdmissionDecision(accept=False, code=ESLURM_ACCOUNTING_POLICY, message=rt.refuse)
    if rt.note:
        notes.append(rt.note)
    typed = sorted(req.typed_gpus)
    return AdmissionDecision(
        message=("slurm-ml: " + " ".join(notes)) if notes else "",
        layout=layout,
        gpu_type=typed[0] if len(typed) == 1 and not widened else None,
        untype_gpus=widened and bool(typed),
        features=features,
        qos=rt.qos if rt.qos != req.qos else None,
        clear_time_min=rt.clear_time_min,
        site_factor=rt.site_factor,
        record=_record(req, now, cap, types=types if widened else None, layout=layout, rt=rt),
        lane=(rt.account, req.total_gpus() or 0) if rt.lane and rt.account else None,
    )


def _over_time_limit(req: JobRequest, cfg: Config, managed: tuple[str, ...],
                     elsewhere: tuple[str, ...]) -> str:
    """Why the job's --time is longer than every partition it may run in allows ("" when
    one allows it). Slurm accepts such a job unless it enforces partition limits, and it
    then pends forever with reason PartitionTimeLimit. A partition slurm-ml does not
    manage may allow it, so a list that names one is left to Slurm."""
    if req.time_limit_min is None or elsewhere:
        return ""
    names = set(managed) or {cfg.cluster.default_partition.name}
    parts = [p for p in cfg.cluster.partitions if p.name in names]
    most = max((p.max_time_min for p in parts), default=None)
    if most is None or req.time_limit_min <= most:
        return ""
    where = ", ".join(p.name for p in parts)
    return (f"its time limit, {_duration(req.time_limit_min)}, is longer than partition "
            f"{where} allows ({_duration(most)}), so it would pend forever (reason "
            f"PartitionTimeLimit). Ask for --time={_duration(most)} or less")


def _duration(minutes: int) -> str:
    """Minutes as Slurm writes a time limit: D-HH:MM:SS, or HH:MM:SS under a day."""
    days, rest = divmod(minutes, 24 * 60)
    clock = f"{rest // 60:02d}:{rest % 60:02d}:00"
    return f"{days}-{clock}" if days else clock


def _judged_where(managed: tuple[str, ...], elsewhere: tuple[str, ...]) -> str:
    """Where a rejected job was judged, when its partition list reaches beyond slurm-ml."""
    if not elsewhere:
        return ""
    return (f" for partition {','.join(managed)} (Slurm may start it in any partition of "
            f"its --partition list; slurm-ml judges it on the ones it manages, not "
            f"{','.join(elsewhere)})")


def _unrecorded_into_alloc(req: JobRequest, rt: Route, before: Before,
                           view: ClusterView) -> Route:
    """Refuse an update that puts a job without an admission record in QOS alloc: one
    that comes from partitions slurm-ml does not manage, or one not in alloc already.

    Such a job was never routed (submitted elsewhere, or accepted unchanged while submitd
    could not answer), and an update cannot write the record (slurmctld lets only
    SlurmUser and root set AdminComment): the daemon would find an alloc job with no
    recorded protected runtime or routing. QOS free needs neither, so it may move there,
    and a job already in alloc keeps what it has (an update of its account is routed as
    for any job). The record, not the partitions, decides, so moving into a managed
    partition in QOS free first and asking for alloc next is refused as well."""
    if (rt.qos or req.qos) != ALLOC_QOS or before.recorded:
        return rt
    entering = bool(before.partitions) and not any(p in view.partitions
                                                   for p in before.partitions)
    if not entering and (before.recorded is None or before.qos == ALLOC_QOS):
        return rt
    job = f"job {req.job_id}" if req.job_id is not None else "this job"
    resubmit = f"submit it again with --partition={','.join(req.partitions)}" \
        if req.partitions else "submit it again"
    if entering:
        into = ",".join(p for p in req.partitions if p in view.partitions)
        head = (f"slurm-ml refused moving {job} into partition {into} in QOS {ALLOC_QOS}: it "
                f"was submitted to {','.join(before.partitions)}, which slurm-ml does not "
                f"manage, so it has no admission record")
        instead = f"Move it with QOS={FREE_QOS}"
    else:
        head = (f"slurm-ml refused QOS {ALLOC_QOS} for {job}: it has no admission record "
                f"(it was submitted where slurm-ml does not manage, or accepted while "
                f"submitd could not judge it)")
        instead = f"Leave it in QOS {FREE_QOS}"
    return Route(account=rt.account, refuse=(
        f"{head}, and budget routing and protected runtime are fixed when a job is "
        f"submitted: an update cannot record them. {instead} (uncharged, preemptible), "
        f"or {resubmit}."))


def _shape_on(req: JobRequest, candidates: tuple[ClassSlice, ...], types: frozenset[str],
              view: ClusterView, fragment: bool, *, advise: bool = True) -> ShapeVerdict:
    slices = tuple(s for s in candidates if not types or s.gpu.name in types)
    return shape(req, slices, view.type_order, allow_fragment=fragment, advise=advise)


def _notes(req: JobRequest, cfg: Config, cap: Capability, *, types: tuple[str, ...],
           widened: bool, layout: Layout | None, shape_note: str) -> list[str]:
    notes = []
    if widened and cap.need is not None:
        why = f"it needs {describe_need(req, cap.need)} plus a {_margin(cfg)}% margin"
        if cap.nvlink:
            why += ", with NVLink between its GPUs"
        elif cap.pcie_ok:
            why += ", without NVLink (parallel=data in --comment)"
        extra = [t for t in types if t not in cap.requested]
        notes.append(f"GPU type widened from {'|'.join(sorted(cap.requested))} to "
                     f"{'|'.join(types)}: {why}, and {', '.join(extra)} "
                     f"{'fits' if len(extra) == 1 else 'fit'} that, so it can start sooner. "
                     f"To keep the type you asked for, add pin_gpu to --comment.")
    short = [t for t in cap.short if t in types]
    if short and cap.need is not None:
        notes.append(f"Warning: {', '.join(short)} {'has' if len(short) == 1 else 'have'} "
                     f"less GPU memory than the {describe_need(req, cap.need)} this job "
                     f"needs; it may run out of GPU memory there.")
    if layout is not None:
        notes.append(_layout_note(layout, cfg, types))
    if shape_note:
        notes.append(shape_note + ".")
    return notes


def _margin(cfg: Config) -> str:
    return f"{cfg.policy.admission.memory_margin_pct:g}"


def _record(req: JobRequest, now: datetime, cap: Capability, *,
            types: tuple[str, ...] | None, layout: Layout | None, rt: Route) -> dict[str, object]:
    record: dict[str, object] = {"v": 1, "at": int(now.timestamp())}
    if cap.need is not None:
        record["need_gb"] = round(cap.need.gb, 1)
        record["need_src"] = cap.need.source
    if types is not None:
        record["types"] = list(types)
    if layout is not None:
        record["shape"] = f"{layout.nodes}x{layout.per_node}"
    if rt.qos:
        record["qos"] = rt.qos
    if rt.min_runtime is not None:
        record["min_runtime"] = rt.min_runtime
    if req.requeue is not None:
        record["requeue"] = int(req.requeue)
    if rt.site_factor is not None:
        record["site_factor"] = rt.site_factor
    if rt.lane:
        record["lane"] = 1
    return record


def _eligible(slices: tuple[ClassSlice, ...], constraint: Constraint | None,
              view: ClusterView) -> tuple[ClassSlice, ...]:
    """Node classes whose features satisfy the user's non-GPU constraint terms.

    GPU-type terms are handled by capability matching; terms naming no feature
    slurm-ml knows are left for Slurm to judge.
    """
    known = {f for s in view.slices for f in (*s.node_class.features, s.gpu.feature)}
    terms = [t for t in (constraint.terms if constraint else ())
             if not all(n in view.feature_to_type for n in t) and any(n in known for n in t)]
    return tuple(
        s for s in slices
        if all(any(n in s.node_class.features or n == s.gpu.feature for n in t) for t in terms)
    )


def _final_types(req: JobRequest, cap: Capability, layout: Layout | None,
                 candidates: tuple[ClassSlice, ...], order: tuple[str, ...]) -> tuple[str, ...]:
    """The GPU types that can run the job in its final layout, widening included: their
    nodes hold its GPUs per node, CPUs and memory."""
    allowed = set(cap.acceptable) if cap.acceptable else {s.gpu.name for s in candidates}
    if layout is not None and layout.whole_nodes:
        top = layout.max_nodes or layout.nodes
        mine = tuple(s for s in candidates if s.gpu.name in allowed)
        fits = set(layout.types) | types_for(req, mine, top, layout.per_node)
    else:
        nodes = max(req.min_nodes or 1, 1) if layout is None else layout.nodes
        per_node = layout.per_node if layout is not None else \
            (req.total_gpus() or 0) // nodes
        cpus, mem = node_needs(req, nodes, per_node)
        fits = {s.gpu.name for s in candidates if s.gpn >= per_node
                and s.node_class.cpus >= cpus and s.node_class.memory_mb >= mem}
    return tuple(t for t in order if t in allowed and t in fits)


def _layout_note(layout: Layout, cfg: Config, types: tuple[str, ...]) -> str:
    if not layout.whole_nodes:
        linked = bool(types) and all(cfg.gpu_types[t].nvlink_links > 0 for t in types)
        return (f"Kept on one node ({layout.per_node} GPUs fit in one node), so its GPUs "
                f"{'share NVLink' if linked else 'talk within the node'} instead of "
                f"the network.")
    wait = cfg.policy.admission.leaf_switch_wait_min
    return (f"Shaped to whole nodes: {layout.describe()}, exclusive, and it waits up to "
            f"{wait:g} min for nodes under one leaf switch before taking any.")
