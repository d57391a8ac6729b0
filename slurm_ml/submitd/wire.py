"""The JSON-lines protocol between job_submit.lua and submitd, and its decoding.

Request (one line): ``{"v": 1, "op": "submit"|"modify"|"ping"|"stats"|"refresh",
"uid": N, "job": {...job_desc fields...}, "current": {...job_rec fields, modify only}}``.
Job fields carry Slurm's ``job_desc`` names (see ``JOB_FIELDS``); the shim leaves out
values equal to NO_VAL/NO_VAL16, so a missing key means "not given".

Reply (one line): ``{"v": 1, "action": "accept"|"reject", "set": {field: value},
"message": str, "code": int}``; ``set`` values are assigned to ``job_desc`` as they are,
with ``""`` clearing a string field and ``NO_VAL`` clearing a number.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from slurm_ml.gres import gpu_items, parse_item, untyped
from slurm_ml.model import GpuRequest
from slurm_ml.policy.admission import AdmissionDecision, Before, read_record
from slurm_ml.policy.admission.request import NO_MIN_RUNTIME, JobRequest
from slurm_ml.slurm.tres import parse_gpu_spec

VERSION = 1
NO_VAL = 4294967294
NO_VAL16 = 65534
INFINITE = 4294967295
JOB_SHARED_NONE = 0  # job_desc.shared for --exclusive

#: job_desc fields the shim serialises (Slurm 22.05 and 24.11 names).
JOB_FIELDS = (
    "user_name", "user_id", "account", "partition", "qos",
    "tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket", "gres",
    "features", "min_nodes", "max_nodes", "num_tasks", "ntasks_per_node",
    "time_limit", "time_min", "requeue", "name", "comment", "array_inx",
    "het_job_offset", "shared", "req_switch", "wait4switch", "job_id",
    # what decides whether a node can hold the job besides its GPUs
    "cpus_per_task", "cpus_per_tres", "min_cpus", "pn_min_cpus", "min_mem_per_node",
    "min_mem_per_cpu", "mem_per_tres", "ntasks_per_tres",
)
#: A field no job_desc has: how the GPUs per node were written ("--gres" or
#: "--gpus-per-node"; job_desc has both in tres_per_node). ``submit-check`` sends it,
#: read off the sbatch line; the shim does not, and advice then names --gres.
GPU_OPTION = "gpu_option"
GPU_OPTIONS = frozenset({"--gres", "--gpus-per-node"})
TRES_FIELDS = {"tres_per_node": "node", "tres_per_job": "job", "tres_per_task": "task",
               "tres_per_socket": "socket"}
#: Fields whose change in an update (``scontrol update``) is re-checked by policy: the
#: GPU request and node layout, and time_min (cleared on routed jobs, see
#: ``routing.update_route``). job_submit.lua keeps the same list.
SHAPE_FIELDS = frozenset({"tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket",
                          "gres", "features", "min_nodes", "max_nodes", "num_tasks",
                          "ntasks_per_node", "time_min"})
#: Fields whose change in an update is judged by budget routing, as a submission would be
#: (``routing.reroute_update``): a job's owner may change them while it pends. They count
#: even when empty: ``QOS=`` asks slurmctld for the association's default QOS (``alloc``
#: for budget accounts). job_submit.lua keeps the same list.
ROUTE_FIELDS = frozenset({"qos", "account", "partition"})


class BadRequest(ValueError):
    """A request line submitd cannot act on; the reply says why and the shim fails open."""


@dataclass(frozen=True, slots=True)
class Envelope:
    op: str
    uid: int | None
    job: Mapping[str, Any]
    current: Mapping[str, Any] = field(default_factory=dict)


def parse_line(line: bytes | str) -> Envelope:
    """One request line → Envelope; anything malformed raises BadRequest."""
    try:
        data = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest("request must be a JSON object")
    if data.get("v", VERSION) != VERSION:
        raise BadRequest(f"protocol version {data.get('v')!r} is not {VERSION}")
    op = data.get("op")
    if op not in {"submit", "modify", "ping", "stats", "refresh"}:
        raise BadRequest(f"unknown op {op!r}")
    uid = data.get("uid")
    if uid is not None and not _is_int(uid):
        raise BadRequest("uid must be an integer")
    job = data.get("job", {})
    current = data.get("current", {})
    if not isinstance(job, dict) or not isinstance(current, dict):
        raise BadRequest("job and current must be JSON objects")
    return Envelope(op=op, uid=uid, job=job, current=current)


def _is_int(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and value == int(value)


def _text(job: Mapping[str, Any], key: str) -> str | None:
    value = job.get(key)
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return value
    if _is_int(value):
        return str(int(value))
    raise BadRequest(f"{key} must be a string, not {type(value).__name__}")


def _num(job: Mapping[str, Any], key: str) -> int | None:
    value = job.get(key)
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not _is_int(value):
        raise BadRequest(f"{key} must be an integer, not {value!r}")
    number = int(value)
    if number < 0:
        raise BadRequest(f"{key} must not be negative")
    return None if number in (NO_VAL, NO_VAL16) else number


#: the largest value a field can carry and mean it; Lua hands NO_VAL64 (and NO_VAL64
#: without its MEM_PER_CPU bit) over as a float near 2**64 or 2**63
_MAX_REAL = 2**53


def _amount(job: Mapping[str, Any], key: str) -> int | None:
    """A count or size field; None when not given or one of Slurm's "no value" marks."""
    value = job.get(key)
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= _MAX_REAL:
        return None
    return _num(job, key)


def _per_gpu(job: Mapping[str, Any], key: str) -> int | None:
    """``gres:gpu:16`` (cpus_per_tres, mem_per_tres; ``gres/`` on 23.11+) → 16, read with
    the one GRES grammar (:mod:`slurm_ml.gres`)."""
    items = gpu_items(_text(job, key) or "")
    return items[0].count if items else None


def gres_prefix(job: Mapping[str, Any]) -> str:
    """The ``gres:``/``gres/`` spelling this Slurm uses, read off the request itself."""
    for key in TRES_FIELDS:
        value = job.get(key)
        if isinstance(value, str) and "gres/" in value:
            return "gres/"
    return "gres:"


def normalize(job: Mapping[str, Any]) -> dict[str, Any]:
    """Fold ``gres`` (22.05's alias of tres_per_node) into tres_per_node, once."""
    out = dict(job)
    gres = out.pop("gres", None)
    if gres and not out.get("tres_per_node"):
        out["tres_per_node"] = gres
    return out


def to_request(job: Mapping[str, Any]) -> JobRequest:
    """Decode job_desc fields into the policy's JobRequest (raises BadRequest)."""
    user = _text(job, "user_name") or (
        f"uid{_num(job, 'user_id')}" if _num(job, "user_id") is not None else None)
    if not user:
        raise BadRequest("user_name is missing")
    gpus: list[GpuRequest] = []
    for key, per in TRES_FIELDS.items():
        spec = _text(job, key)
        if spec:
            gpus.extend(parse_gpu_spec(spec, per))
    time_min = _num(job, "time_min")
    if job.get("time_min") == INFINITE:
        time_min = NO_MIN_RUNTIME
    time_limit = _num(job, "time_limit")
    if job.get("time_limit") == INFINITE:
        time_limit = None
    requeue = _num(job, "requeue")
    shared = _num(job, "shared")
    switches = _num(job, "req_switch")
    offset = _num(job, "het_job_offset")
    return JobRequest(
        user=user,
        name=_text(job, "name") or "",
        account=_text(job, "account"),
        partitions=partitions_of(job),
        qos=_text(job, "qos"),
        gpus=tuple(gpus),
        features=_text(job, "features") or "",
        min_nodes=_num(job, "min_nodes"),
        max_nodes=_num(job, "max_nodes") or None,
        num_tasks=_num(job, "num_tasks"),
        ntasks_per_node=_num(job, "ntasks_per_node"),
        time_limit_min=time_limit,
        time_min_min=time_min,
        requeue=None if requeue is None else bool(requeue),
        comment=_text(job, "comment") or "",
        array=_text(job, "array_inx"),
        het_offset=offset,
        exclusive=None if shared is None else shared == JOB_SHARED_NONE,
        switches=switches or None,
        job_id=_num(job, "job_id"),
        cpus_per_task=_amount(job, "cpus_per_task") or None,
        cpus_per_gpu=_per_gpu(job, "cpus_per_tres") or None,
        min_cpus=_amount(job, "min_cpus") or None,
        pn_min_cpus=_amount(job, "pn_min_cpus") or None,
        mem_per_node_mb=_amount(job, "min_mem_per_node"),
        mem_per_cpu_mb=_amount(job, "min_mem_per_cpu") or None,
        mem_per_gpu_mb=_per_gpu(job, "mem_per_tres") or None,
        ntasks_per_gpu=_amount(job, "ntasks_per_tres") or None,
        gpu_option=option if (option := job.get(GPU_OPTION)) in GPU_OPTIONS else None,
    )


def touched(update: Mapping[str, Any]) -> frozenset[str]:
    """The fields of an update that policy re-checks: shape fields given a value, and
    routing fields given at all."""
    return frozenset(k for k, v in update.items()
                     if (k in SHAPE_FIELDS and v not in (None, ""))
                     or (k in ROUTE_FIELDS and v is not None))


def asked_qos(update: Mapping[str, Any]) -> str | None:
    """The QOS an update names; None when it names none (or asks for the default)."""
    qos = update.get("qos")
    return qos if isinstance(qos, str) and qos else None


def partitions_of(job: Mapping[str, Any]) -> tuple[str, ...]:
    """The partition list a job's ``partition`` field names (``gpu,cpu``), in order."""
    return tuple(p for p in (_text(job, "partition") or "").split(",") if p)


def before_update(current: Mapping[str, Any]) -> Before:
    """The job an update starts from, as the shim sent it: its partitions, its QOS, and
    whether its AdminComment holds slurm-ml's admission record (None when the shim sent
    no ``admin_comment``, as one older than this field does: the record rule then holds
    only for jobs moved in from unmanaged partitions)."""
    comment = current.get("admin_comment")
    return Before(partitions=partitions_of(current), qos=_text(current, "qos"),
                  recorded=(read_record(comment) is not None
                            if isinstance(comment, str) else None))


def merge_update(current: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """The job as it would be after ``scontrol update``: update's given fields win.

    A new GPU spec in any tres_per_* field replaces all old ones (Slurm does the same).
    The job's current time_min is left out (policy never reads it on an update), so a
    time_min in the result is one the update sets. So is a current memory of 0: a job
    record holds 0 both for ``--mem=0`` (all of a node) and for a job that asked for no
    memory with no DefMemPer* set, and reading the second as the first would let an
    update through as whole-node use that is not.
    """
    merged = {k: v for k, v in normalize(current).items()
              if v is not None and k != "time_min"
              and not (k in ("min_mem_per_node", "min_mem_per_cpu") and v == 0)}
    given = {k: v for k, v in normalize(update).items()
             if v is not None and v not in (NO_VAL, NO_VAL16)}
    if any(k in TRES_FIELDS for k in given):
        for key in TRES_FIELDS:
            merged.pop(key, None)
    merged.update(given)
    if not merged.get("max_nodes"):
        merged.pop("max_nodes", None)
    return merged


def _gpu_item(item: str) -> bool:
    return bool(parse_gpu_spec(item.strip(), "node"))


def _untyped(item: str) -> str:
    """``gres:gpu:a100:2`` → ``gres:gpu:2``, ``gres/gpu:3g.40gb=2`` → ``gres/gpu=2``."""
    got = parse_item(item)
    return item if got is None else untyped(got)


def _rewrite(spec: str, gpu_item: str | None, *, untype: bool = False) -> str:
    """Replace (or drop, with None) the GPU items of a TRES list, keeping the rest."""
    items = [i for i in spec.split(",") if i.strip()]
    out = []
    for item in items:
        if not _gpu_item(item):
            out.append(item)
        elif untype:
            out.append(_untyped(item))
    if gpu_item:
        out.insert(0, gpu_item)
    return ",".join(out)


def reply_for(decision: AdmissionDecision, job: Mapping[str, Any], req: JobRequest,
              *, leaf_wait_s: int, update: bool = False) -> dict[str, Any]:
    """The reply line for a decision on ``job`` (the fields the shim sent).

    ``update``: the answer to a user's ``scontrol update``. It never touches
    OverSubscribe (slurmctld denies a sharing change from a non-operator, after applying
    part of the update) and leaves the AdminComment record of the submission alone.
    """
    if not decision.accept:
        return {"v": VERSION, "action": "reject", "message": decision.message,
                "code": decision.code}
    changes: dict[str, Any] = {}
    layout = decision.layout
    prefix = gres_prefix(job)
    per_task = any(g.per == "task" for g in req.gpus)
    if decision.rewrites_gpus:
        for key in TRES_FIELDS:
            spec = job.get(key)
            if not isinstance(spec, str) or not any(_gpu_item(i) for i in spec.split(",")):
                continue
            keep_here = layout is None or (per_task and key == "tres_per_task")
            if keep_here:
                new = _rewrite(spec, None, untype=True) if decision.untype_gpus else spec
            else:
                new = _rewrite(spec, None)
            if new != spec:
                changes[key] = new
        if layout is not None:
            if not per_task:
                kind = f"{decision.gpu_type}:" if decision.gpu_type else ""
                item = f"{prefix}gpu:{kind}{layout.per_node}"
                base = changes.get("tres_per_node", job.get("tres_per_node") or "")
                changes["tres_per_node"] = _rewrite(str(base), item)
            changes["min_nodes"] = layout.nodes
            changes["max_nodes"] = layout.max_nodes or layout.nodes  # a range kept
            if layout.ntasks_per_node is not None:
                changes["ntasks_per_node"] = layout.ntasks_per_node
            if layout.whole_nodes:
                changes.update(req_switch=1, wait4switch=leaf_wait_s)
                if not update:
                    changes["shared"] = JOB_SHARED_NONE
    if decision.features is not None:
        changes["features"] = decision.features
    if decision.qos is not None:
        changes["qos"] = decision.qos
    if decision.clear_time_min:  # the protected runtime is in the record, never here
        changes["time_min"] = NO_VAL
    if decision.site_factor is not None:
        changes["site_factor"] = decision.site_factor
    if decision.record and not update:
        changes["admin_comment"] = decision.admin_comment()
    return {"v": VERSION, "action": "accept", "set": changes, "message": decision.message}
