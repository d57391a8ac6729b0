"""Admission policy, end to end: job_desc fields in (as the Lua shim sends them), reply out.

Every case goes through ``wire.normalize`` → ``wire.to_request`` → ``admission.decide`` →
``wire.reply_for``, the same path ``PolicyServer.handle_line`` takes, on the example
config (conf/slurm-ml.yaml). GPU specs are written with a ``{g}`` placeholder and run in
both spellings: Slurm 22.05's ``gres:gpu:a100_80g:2`` and 23.11+'s ``gres/gpu:a100_80g:2``;
the reply must keep the spelling of the request.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import os
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml
from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet
from jobdesc_helpers import applied, gpu_items, total_gpus

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import Config, load_config, parse_config
from slurm_ml.policy.admission import decide, recorded_min_runtime_min
from slurm_ml.policy.admission.cluster_view import cluster_view
from slurm_ml.policy.admission.state import AccountStanding, AdmissionState
from slurm_ml.submitd.server import PolicyServer
from slurm_ml.submitd.state import StateRefresher
from slurm_ml.submitd.wire import (
    INFINITE,
    NO_VAL,
    NO_VAL16,
    BadRequest,
    asked_qos,
    gres_prefix,
    normalize,
    parse_line,
    reply_for,
    to_request,
    touched,
)

EXAMPLE = DEFAULT_CONFIG
EXAMPLE_DATA: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
CFG = load_config(EXAMPLE)
NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
LEAF_WAIT_S = 600  # leaf_switch_wait_min: 10

STATE = AdmissionState(
    standing={
        "llm-pretrain": AccountStanding("llm-pretrain", exhausted=False, site_factor=700,
                                        usage_gpu_hours=100.0, budget_gpu_hours=5000.0),
        "llm-eval": AccountStanding("llm-eval", exhausted=True, site_factor=5,
                                    usage_gpu_hours=2000.0, budget_gpu_hours=1000.0),
        "detection": AccountStanding("detection", exhausted=False, site_factor=None,
                                     usage_gpu_hours=10.0, budget_gpu_hours=100.0),
        "physics": AccountStanding("physics", exhausted=False, site_factor=9),
    },
    profiles_gb={("alice", "train"): 30.0, ("bob", "small"): 20.0},
    loaded_at=NOW,
)

#: reply ``set`` keys about the GPUs and the node layout (capability + shaping)
SHAPE_KEYS = frozenset({"tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket",
                        "min_nodes", "max_nodes", "ntasks_per_node", "shared", "req_switch",
                        "wait4switch", "features"})
#: reply ``set`` keys about budget routing
ROUTE_KEYS = frozenset({"qos", "time_min", "site_factor"})
#: whole-node multi-node additions
WHOLE = {"shared": 0, "req_switch": 1, "wait4switch": LEAF_WAIT_S}
#: A user may not change OverSubscribe in an update (slurmctld denies it), so no "shared".
WHOLE_UPDATE = {k: v for k, v in WHOLE.items() if k != "shared"}

PREFIXES = pytest.mark.parametrize("g", ["gres:", "gres/"], ids=["slurm22.05", "slurm23.11"])


# --------------------------------------------------------------------------- helpers


def fmt(value: Any, g: str) -> Any:
    """Fill the ``{g}`` GRES prefix placeholder into strings, recursively."""
    if isinstance(value, str):
        return value.replace("{g}", g)
    if isinstance(value, dict):
        return {k: fmt(v, g) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(fmt(v, g) for v in value)
    return value


def submit(job: Mapping[str, Any], *, state: AdmissionState = STATE, cfg: Config = CFG,
           routing: bool = True) -> dict[str, Any]:
    """What submitd answers for these job_desc fields (op=submit)."""
    fields = normalize(job)
    req = to_request(fields)
    decision = decide(req, cfg, cluster_view(cfg), state, NOW, routing=routing)
    wait_s = int(cfg.policy.admission.leaf_switch_wait_min * 60)
    return reply_for(decision, fields, req, leaf_wait_s=wait_s)


def only(changes: Mapping[str, Any], keys: frozenset[str]) -> dict[str, Any]:
    return {k: v for k, v in changes.items() if k in keys}


def config_with(**admission: Any) -> Config:
    data = copy.deepcopy(EXAMPLE_DATA)
    data["policy"]["admission"].update(admission)
    return parse_config(data, "test")




def _class_features(cfg: Config) -> list[tuple[str, int, str, frozenset[str], NodeSet]]:
    out = []
    for cls in cfg.node_classes:
        feats = frozenset({*cls.features, cfg.gpu_types[cls.gpu_type].feature})
        out.append((cls.name, cls.gpus_per_node, cls.gpu_type, feats,
                    NodeSet(cls.nodes, resolver=RESOLVER_NOGROUP)))
    return out


_TERM = re.compile(r"^(?P<open>[(\[]?)(?P<body>[A-Za-z0-9_.\-|]+)(?P<close>[)\]]?)$")


def layout_problem(after: Mapping[str, Any], cfg: Config = CFG) -> str | None:
    """Why the node layout of a rewritten job cannot be satisfied here, or None if it can.

    Follows Slurm's semantics: a plain OR term lets each node carry any of the features,
    a matching OR ``[a|b]`` makes every node carry the same one; features no node has are
    left to Slurm (as the policy does); constraints with counts or ``!`` are not judged.
    """
    nodes = int(after.get("min_nodes") or 1)
    if after.get("max_nodes") not in (None, nodes):
        return f"min_nodes {nodes} != max_nodes {after.get('max_nodes')}"
    per_node_items = gpu_items(after.get("tres_per_node"))
    task_items = gpu_items(after.get("tres_per_task"))
    job_items = gpu_items(after.get("tres_per_job"))
    if per_node_items:
        per_node = sum(c for _t, c in per_node_items)
    elif task_items:
        tasks_per_node = after.get("ntasks_per_node") or math.ceil(
            (after.get("num_tasks") or 1) / nodes)
        per_node = sum(c for _t, c in task_items) * tasks_per_node
    elif job_items:
        per_node = math.ceil(sum(c for _t, c in job_items) / nodes)
    else:
        return "no GPU left in the job"
    types = {t for t, _c in per_node_items + task_items + job_items if t}
    expr = str(after.get("features") or "")
    known = {f for _n, _g, _t, feats, _ns in _class_features(cfg) for f in feats}
    plain: list[set[str]] = []
    matching: list[list[str]] = []
    if expr:
        for raw in expr.split("&"):
            m = _TERM.match(raw.strip())
            if not m:
                return None  # counts, negation, nesting: not judged here
            names = m["body"].split("|")
            if not set(names) & known:
                continue  # unknown to slurm-ml: Slurm's call
            (matching.append(names) if m["open"] == "[" else plain.append(set(names)))
    parts = [p.name for p in cfg.cluster.partitions]
    wanted = [p for p in str(after.get("partition") or "").split(",") if p] or [
        cfg.cluster.default_partition.name]
    for part in cfg.cluster.partitions:
        if part.name not in wanted or part.name not in parts:
            continue
        members = NodeSet(part.nodes, resolver=RESOLVER_NOGROUP)
        for choice in itertools.product(*matching) if matching else [()]:
            count = 0
            for _name, gpn, gtype, feats, nodeset in _class_features(cfg):
                if types and gtype not in types:
                    continue
                if not all(term & feats for term in plain):
                    continue
                if not all(c in feats for c in choice):
                    continue
                if gpn < per_node or (nodes > 1 and gpn != per_node):
                    continue
                count += len(members & nodeset)
            if count >= nodes:
                return None
    return (f"{nodes} node(s) x {per_node} GPUs (types {sorted(types) or 'any'}, "
            f"features {expr!r}) fits no partition of {wanted}")


# --------------------------------------------------------------------------- capability + shape

#: (id, job_desc fields, expected `set` restricted to SHAPE_KEYS, message must contain)
REWRITES: list[tuple[str, dict[str, Any], dict[str, Any], list[str]]] = [
    # --- capability matching: widening
    ("node-typed-30g-profile-widens-to-both-a100",
     {"user_name": "alice", "name": "train", "tres_per_node": "{g}gpu:a100_80g:4"},
     {"tres_per_node": "{g}gpu:4", "features": "(a100_80g|a100_40g)"},
     ["GPU type widened from a100_80g to a100_80g|a100_40g", "30 GB per GPU",
      "the p95 peak of your last runs named 'train'", "10% margin",
      "with NVLink between its GPUs", "pin_gpu"]),
    ("node-typed-gpu_mem-comment-widens",
     {"user_name": "bob", "name": "other", "tres_per_node": "{g}gpu:a100_80g:2",
      "comment": "gpu_mem=30G"},
     {"tres_per_node": "{g}gpu:2", "features": "(a100_80g|a100_40g)"},
     ["widened", "gpu_mem in --comment"]),
    ("gpu_mem-comment-beats-profile",
     {"user_name": "alice", "name": "train", "tres_per_node": "{g}gpu:a100_80g:4",
      "comment": "gpu_mem=70G"},
     {}, []),
    ("gpu_mem-in-MB",
     {"user_name": "bob", "tres_per_node": "{g}gpu:a100_80g:1", "comment": "gpu_mem=30000M"},
     {"tres_per_node": "{g}gpu:1", "features": "(a100_80g|a100_40g)"}, ["widened"]),
    ("gpu_mem-GiB-and-upper-case-key",
     {"user_name": "bob", "tres_per_node": "{g}gpu:a100_80g:2", "comment": "GPU_MEM=30GiB"},
     {"tres_per_node": "{g}gpu:2", "features": "(a100_80g|a100_40g)"}, ["widened"]),
    ("gpu_mem-among-user-comment-text",
     {"user_name": "bob", "tres_per_node": "{g}gpu:a100_80g:2",
      "comment": "sweep 7, gpu_mem=30G; see wiki"},
     {"tres_per_node": "{g}gpu:2", "features": "(a100_80g|a100_40g)"}, ["widened"]),
    ("margin-36g-fits-40g",
     {"user_name": "bob", "tres_per_node": "{g}gpu:a100_80g:2", "comment": "gpu_mem=36G"},
     {"tres_per_node": "{g}gpu:2", "features": "(a100_80g|a100_40g)"}, ["widened"]),
    ("margin-37g-does-not-fit-40g",
     {"user_name": "bob", "tres_per_node": "{g}gpu:a100_80g:2", "comment": "gpu_mem=37G"},
     {}, []),
    ("job-typed-gpus4-widens-and-keeps-one-node",
     {"user_name": "alice", "name": "train", "tres_per_job": "{g}gpu:a100_80g:4"},
     {"tres_per_job": "", "tres_per_node": "{g}gpu:4", "min_nodes": 1, "max_nodes": 1,
      "features": "(a100_80g|a100_40g)"},
     ["widened", "Kept on one node"]),
    ("job-typed-gpus1-untyped-in-place",
     {"user_name": "bob", "tres_per_job": "{g}gpu:a100_80g:1", "comment": "gpu_mem=30G"},
     {"tres_per_job": "{g}gpu:1", "features": "(a100_80g|a100_40g)"}, ["widened"]),
    ("task-typed-widens-on-one-node",
     {"user_name": "alice", "name": "train", "tres_per_task": "{g}gpu:a100_80g:1",
      "num_tasks": 4},
     {"tres_per_task": "{g}gpu:1", "min_nodes": 1, "max_nodes": 1,
      "features": "(a100_80g|a100_40g)"},
     ["widened", "Kept on one node"]),
    # --- NVLink and single-GPU jobs
    ("multi-gpu-needs-nvlink-so-no-v100",
     {"user_name": "bob", "tres_per_node": "{g}gpu:a100_80g:4", "comment": "gpu_mem=20G"},
     {"tres_per_node": "{g}gpu:4", "features": "(a100_80g|a100_40g)"},
     ["widened", "with NVLink between its GPUs"]),
    ("single-gpu-may-widen-to-v100",
     {"user_name": "bob", "tres_per_node": "{g}gpu:a100_80g:1", "comment": "gpu_mem=20G"},
     {"tres_per_node": "{g}gpu:1", "features": "(a100_80g|a100_40g|v100)"},
     ["widened from a100_80g to a100_80g|a100_40g|v100"]),
    ("single-gpu-29g-fits-v100",
     {"user_name": "bob", "tres_per_node": "{g}gpu:a100_80g:1", "comment": "gpu_mem=29G"},
     {"tres_per_node": "{g}gpu:1", "features": "(a100_80g|a100_40g|v100)"}, ["widened"]),
    ("single-gpu-30g-profile-too-big-for-v100",
     {"user_name": "alice", "name": "train", "tres_per_node": "{g}gpu:a100_80g:1"},
     {"tres_per_node": "{g}gpu:1", "features": "(a100_80g|a100_40g)"}, ["widened"]),
    ("v100-multi-gpu-has-no-nvlink-to-keep",
     {"user_name": "bob", "tres_per_node": "{g}gpu:v100:2", "comment": "gpu_mem=20G"},
     {"tres_per_node": "{g}gpu:2", "features": "(a100_80g|a100_40g|v100)"}, ["widened"]),
    ("nvlink-judged-on-the-final-one-node-shape",
     # 4 tasks x 1 GPU could spread over nodes, but it is kept on 1 node x 4 GPUs, which
     # needs NVLink
     {"user_name": "bob", "tres_per_task": "{g}gpu:a100_80g:1", "num_tasks": 4,
      "comment": "gpu_mem=20G"},
     {"tres_per_task": "{g}gpu:1", "min_nodes": 1, "max_nodes": 1,
      "features": "(a100_80g|a100_40g)"},
     ["widened", "Kept on one node", "share NVLink"]),
    # --- parallel= in --comment: data parallel needs no NVLink, tensor parallel does
    ("data-parallel-multi-gpu-may-widen-to-v100",
     {"user_name": "bob", "tres_per_node": "{g}gpu:a100_80g:4",
      "comment": "gpu_mem=20G parallel=data"},
     {"tres_per_node": "{g}gpu:4", "features": "(a100_80g|a100_40g|v100)"},
     ["widened from a100_80g to a100_80g|a100_40g|v100",
      "without NVLink (parallel=data in --comment)"]),
    ("data-parallel-value-is-read-case-blind",
     {"user_name": "bob", "tres_per_node": "{g}gpu:a100_80g:2",
      "comment": "PARALLEL=Data, gpu_mem=20G"},
     {"tres_per_node": "{g}gpu:2", "features": "(a100_80g|a100_40g|v100)"}, ["widened"]),
    ("data-parallel-still-needs-the-memory",
     {"user_name": "bob", "tres_per_node": "{g}gpu:a100_80g:4",
      "comment": "gpu_mem=30G parallel=data"},
     {"tres_per_node": "{g}gpu:4", "features": "(a100_80g|a100_40g)"}, ["widened"]),
    ("data-parallel-8-gpus-fit-no-v100-node",
     {"user_name": "bob", "tres_per_node": "{g}gpu:a100_80g:8",
      "comment": "gpu_mem=20G parallel=data"},
     {"tres_per_node": "{g}gpu:8", "features": "(a100_80g|a100_40g)"}, ["widened"]),
    ("data-parallel-from-the-profile-need",
     {"user_name": "bob", "name": "small", "tres_per_node": "{g}gpu:a100_80g:4",
      "comment": "parallel=data"},
     {"tres_per_node": "{g}gpu:4", "features": "(a100_80g|a100_40g|v100)"},
     ["widened", "the p95 peak of your last runs named 'small'", "parallel=data"]),
    ("tensor-parallel-keeps-nvlink",
     {"user_name": "bob", "tres_per_node": "{g}gpu:a100_80g:4",
      "comment": "gpu_mem=20G parallel=tensor"},
     {"tres_per_node": "{g}gpu:4", "features": "(a100_80g|a100_40g)"},
     ["widened", "with NVLink between its GPUs"]),
    ("parallel-as-a-plain-word-is-the-users-own",
     {"user_name": "bob", "tres_per_node": "{g}gpu:a100_80g:4",
      "comment": "gpu_mem=20G parallel sweep"},
     {"tres_per_node": "{g}gpu:4", "features": "(a100_80g|a100_40g)"},
     ["widened", "with NVLink between its GPUs"]),
    ("data-parallel-without-a-need-does-not-widen",
     {"user_name": "bob", "name": "other", "tres_per_node": "{g}gpu:a100_80g:4",
      "comment": "parallel=data"},
     {}, []),
    ("data-parallel-and-pin_gpu-does-not-widen",
     {"user_name": "bob", "tres_per_node": "{g}gpu:a100_80g:4",
      "comment": "gpu_mem=20G parallel=data pin_gpu"},
     {}, []),
    # --- no widening
    ("no-need-no-widening",
     {"user_name": "alice", "name": "other", "tres_per_node": "{g}gpu:a100_80g:4"},
     {}, []),
    ("pin_gpu-opts-out",
     {"user_name": "alice", "name": "train", "tres_per_node": "{g}gpu:a100_80g:4",
      "comment": "pin_gpu"},
     {}, []),
    ("pin_gpu-opts-out-of-explicit-need",
     {"user_name": "bob", "tres_per_node": "{g}gpu:a100_80g:1",
      "comment": "gpu_mem=10G pin_gpu"},
     {}, []),
    ("untyped-request-is-not-widened",
     {"user_name": "alice", "name": "train", "tres_per_node": "{g}gpu:4"},
     {}, []),
    ("need-above-requested-type-warns-and-keeps-it",
     {"user_name": "bob", "tres_per_node": "{g}gpu:a100_80g:4", "comment": "gpu_mem=90G"},
     {}, ["Warning", "90 GB per GPU", "a100_80g has less", "may run out of GPU memory"]),
    ("need-above-requested-type-widens-up-and-still-warns",
     {"user_name": "bob", "tres_per_node": "{g}gpu:a100_40g:4", "comment": "gpu_mem=60G"},
     {"tres_per_node": "{g}gpu:4", "features": "(a100_80g|a100_40g)"},
     ["widened", "a100_40g has less", "may run out of GPU memory"]),
    # --- GPU type named in --constraint
    ("constraint-type-with-untyped-gres",
     {"user_name": "alice", "name": "train", "tres_per_node": "{g}gpu:4",
      "features": "a100_80g"},
     {"features": "(a100_80g|a100_40g)"}, ["widened"]),
    ("constraint-keeps-non-gpu-terms",
     {"user_name": "alice", "name": "train", "tres_per_node": "{g}gpu:a100_80g:4",
      "features": "nvlink&a100_80g"},
     {"tres_per_node": "{g}gpu:4", "features": "nvlink&(a100_80g|a100_40g)"}, ["widened"]),
    ("constraint-keeps-unknown-feature",
     {"user_name": "alice", "name": "train", "tres_per_node": "{g}gpu:4",
      "features": "bigmem&a100_80g"},
     {"features": "bigmem&(a100_80g|a100_40g)"}, ["widened"]),
    ("constraint-or-group-already-acceptable",
     {"user_name": "alice", "name": "train", "tres_per_node": "{g}gpu:4",
      "features": "(a100_80g|a100_40g)&nvlink"},
     {}, []),
    ("complex-constraint-with-count-left-alone",
     {"user_name": "alice", "name": "train", "tres_per_node": "{g}gpu:a100_80g:4",
      "features": "nvlink*2&a100_80g"},
     {}, []),
    ("complex-constraint-with-negation-left-alone",
     {"user_name": "alice", "name": "train", "tres_per_node": "{g}gpu:a100_80g:4",
      "features": "!v100"},
     {}, []),
    ("non-gpu-gres-kept-when-untyping",
     {"user_name": "alice", "name": "train", "tres_per_node": "{g}gpu:a100_80g:4,{g}nvme:1"},
     {"tres_per_node": "{g}gpu:4,{g}nvme:1", "features": "(a100_80g|a100_40g)"}, ["widened"]),
    # --- gang shaping
    ("node-untyped-one-node-already",
     {"user_name": "bob", "tres_per_node": "{g}gpu:4"}, {}, []),
    ("gpus16-two-whole-nodes-under-one-leaf",
     {"user_name": "bob", "tres_per_job": "{g}gpu:16"},
     {"tres_per_job": "", "tres_per_node": "{g}gpu:8", "min_nodes": 2, "max_nodes": 2,
      **WHOLE, "features": "[a100_80g|a100_40g]"},
     ["Shaped to whole nodes: 2 nodes x 8 GPUs, exclusive", "10 min", "leaf switch"]),
    ("gpus16-keeps-other-gres-per-node",
     {"user_name": "bob", "tres_per_job": "{g}gpu:16", "tres_per_node": "{g}nvme:1"},
     {"tres_per_job": "", "tres_per_node": "{g}gpu:8,{g}nvme:1", "min_nodes": 2,
      "max_nodes": 2, **WHOLE, "features": "[a100_80g|a100_40g]"},
     ["2 nodes x 8 GPUs"]),
    ("gpus16-typed-keeps-type",
     {"user_name": "bob", "tres_per_job": "{g}gpu:a100_80g:16"},
     {"tres_per_job": "", "tres_per_node": "{g}gpu:a100_80g:8", "min_nodes": 2,
      "max_nodes": 2, **WHOLE},
     ["2 nodes x 8 GPUs"]),
    ("gpus16-typed-widened-matching-or",
     {"user_name": "alice", "name": "train", "tres_per_job": "{g}gpu:a100_80g:16"},
     {"tres_per_job": "", "tres_per_node": "{g}gpu:8", "min_nodes": 2, "max_nodes": 2,
      **WHOLE, "features": "[a100_80g|a100_40g]"},
     ["widened", "2 nodes x 8 GPUs"]),
    ("gpus16-constraint-keeps-non-gpu-term",
     {"user_name": "bob", "tres_per_job": "{g}gpu:16", "features": "nvlink"},
     {"tres_per_job": "", "tres_per_node": "{g}gpu:8", "min_nodes": 2, "max_nodes": 2,
      **WHOLE, "features": "nvlink&[a100_80g|a100_40g]"},
     ["2 nodes x 8 GPUs"]),
    ("gpus16-complex-constraint-not-rewritten",
     {"user_name": "bob", "tres_per_job": "{g}gpu:16", "features": "nvlink*2"},
     {"tres_per_job": "", "tres_per_node": "{g}gpu:8", "min_nodes": 2, "max_nodes": 2,
      **WHOLE},
     ["2 nodes x 8 GPUs"]),
    ("node-N2-gpu8-whole-nodes",
     {"user_name": "bob", "tres_per_node": "{g}gpu:8", "min_nodes": 2},
     {"tres_per_node": "{g}gpu:8", "min_nodes": 2, "max_nodes": 2, **WHOLE,
      "features": "[a100_80g|a100_40g]"},
     ["2 nodes x 8 GPUs"]),
    ("node-N2-gpu4-kept-and-steered-to-the-4-gpu-nodes",
     {"user_name": "bob", "tres_per_node": "{g}gpu:4", "min_nodes": 2, "max_nodes": 2},
     {"tres_per_node": "{g}gpu:4", "min_nodes": 2, "max_nodes": 2, **WHOLE,
      "features": "v100"},
     ["2 nodes x 4 GPUs"]),
    ("job-gpus4-one-node",
     {"user_name": "bob", "tres_per_job": "{g}gpu:4"},
     {"tres_per_job": "", "tres_per_node": "{g}gpu:4", "min_nodes": 1, "max_nodes": 1},
     ["Kept on one node"]),
    ("job-gpus8-one-node",
     {"user_name": "bob", "tres_per_job": "{g}gpu:8"},
     {"tres_per_job": "", "tres_per_node": "{g}gpu:8", "min_nodes": 1, "max_nodes": 1},
     ["Kept on one node (8 GPUs fit in one node)"]),
    ("job-gpus4-already-pinned-to-one-node",
     {"user_name": "bob", "tres_per_job": "{g}gpu:4", "min_nodes": 1, "max_nodes": 1},
     {}, []),
    ("task-gpus4-one-node",
     {"user_name": "bob", "tres_per_task": "{g}gpu:1", "num_tasks": 4},
     {"min_nodes": 1, "max_nodes": 1}, ["Kept on one node"]),
    ("task-16x1-two-nodes-ntasks-per-node",
     {"user_name": "bob", "tres_per_task": "{g}gpu:1", "num_tasks": 16},
     {"min_nodes": 2, "max_nodes": 2, "ntasks_per_node": 8, **WHOLE,
      "features": "[a100_80g|a100_40g]"},
     ["2 nodes x 8 GPUs"]),
    ("task-8x2-two-nodes-ntasks-per-node",
     {"user_name": "bob", "tres_per_task": "{g}gpu:2", "num_tasks": 8},
     {"min_nodes": 2, "max_nodes": 2, "ntasks_per_node": 4, **WHOLE,
      "features": "[a100_80g|a100_40g]"},
     ["2 nodes x 8 GPUs"]),
    ("task-typed-16-widened-two-nodes",
     {"user_name": "alice", "name": "train", "tres_per_task": "{g}gpu:a100_80g:1",
      "num_tasks": 16, "features": "a100_80g&nvlink"},
     {"tres_per_task": "{g}gpu:1", "min_nodes": 2, "max_nodes": 2, "ntasks_per_node": 8,
      **WHOLE, "features": "nvlink&[a100_80g|a100_40g]"},
     ["widened", "2 nodes x 8 GPUs"]),
    ("v100-typed-N2x4-whole-nodes",
     {"user_name": "dave", "tres_per_node": "{g}gpu:v100:4", "min_nodes": 2},
     {"tres_per_node": "{g}gpu:v100:4", "min_nodes": 2, "max_nodes": 2, **WHOLE},
     ["2 nodes x 4 GPUs"]),
    ("v100-typed-gpus8-becomes-2x4",
     {"user_name": "dave", "tres_per_job": "{g}gpu:v100:8"},
     {"tres_per_job": "", "tres_per_node": "{g}gpu:v100:4", "min_nodes": 2, "max_nodes": 2,
      **WHOLE},
     ["2 nodes x 4 GPUs"]),
    ("allow_fragment-keeps-stranding-shape",
     {"user_name": "bob", "tres_per_node": "{g}gpu:6", "min_nodes": 2,
      "comment": "allow_fragment"},
     {}, ["shape kept as submitted"]),
    ("allow_fragment-keeps-small-multi-node-shape",
     {"user_name": "bob", "tres_per_node": "{g}gpu:2", "min_nodes": 2,
      "comment": "allow_fragment"},
     {}, ["shape kept as submitted"]),
    ("socket-requests-not-reshaped",
     {"user_name": "bob", "tres_per_socket": "{g}gpu:2", "min_nodes": 3},
     {}, ["requests are not reshaped"]),
    ("debug-partition-managed-too",
     {"user_name": "bob", "tres_per_job": "{g}gpu:16", "partition": "debug"},
     {"tres_per_job": "", "tres_per_node": "{g}gpu:8", "min_nodes": 2, "max_nodes": 2,
      **WHOLE, "features": "[a100_80g|a100_40g]"},
     ["2 nodes x 8 GPUs"]),
]


@PREFIXES
@pytest.mark.parametrize(("job", "want", "says"), [c[1:] for c in REWRITES],
                         ids=[c[0] for c in REWRITES])
def test_capability_and_shape(g: str, job: dict[str, Any], want: dict[str, Any],
                              says: list[str]) -> None:
    reply = submit(fmt(job, g))
    assert reply["action"] == "accept", reply
    assert only(reply["set"], SHAPE_KEYS) == fmt(want, g)
    for text in says:
        assert text in reply["message"]
    if not any("widened" in s for s in says):
        assert "widened" not in reply["message"]
    # the reply keeps the request's gres spelling
    other = "gres:" if g == "gres/" else "gres/"
    assert other not in json.dumps(reply["set"])


@PREFIXES
@pytest.mark.parametrize(("job", "want", "says"), [c[1:] for c in REWRITES],
                         ids=[c[0] for c in REWRITES])
def test_rewrites_keep_gpu_total_and_feasible_shape(g: str, job: dict[str, Any],
                                                    want: dict[str, Any], says: list[str]) -> None:
    before = fmt(job, g)
    reply = submit(before)
    after = applied(before, reply)
    assert total_gpus(after) == total_gpus(before)
    if "min_nodes" in reply["set"]:
        assert layout_problem(after) is None


def test_widening_never_moves_a_job_off_the_type_it_asked_for() -> None:
    """v100:8 with 20 GB: the v100 layout is 2 whole nodes x 4; the A100 nodes hold 8
    per node, a different layout, so they are not added and nothing claims widening."""
    reply = submit({"user_name": "bob", "tres_per_job": "gres:gpu:v100:8",
                    "comment": "gpu_mem=20G"})
    assert reply["action"] == "accept"
    assert "features" not in reply["set"]
    assert reply["set"]["tres_per_node"] == "gres:gpu:v100:4"
    assert reply["set"]["min_nodes"] == 2
    assert "widened" not in reply["message"]


def test_widening_message_names_the_types_actually_allowed() -> None:
    reply = submit({"user_name": "bob", "tres_per_node": "gres:gpu:a100_80g:4",
                    "comment": "gpu_mem=20G"})
    feats = reply["set"]["features"]
    allowed = feats.strip("()[]").split("|")
    m = re.search(r"widened from \S+ to (\S+):", reply["message"])
    assert m is not None, reply["message"]
    assert m[1].split("|") == allowed


#: (id, job_desc, text the message must quote exactly as the user writes it)
VERBATIM_NOTES: list[tuple[str, dict[str, Any], str]] = [
    ("allow_fragment-key-keeps-its-case",
     {"user_name": "bob", "tres_per_node": "gres:gpu:6", "min_nodes": 2,
      "comment": "allow_fragment"},
     "allow_fragment"),
    ("per-socket-note-keeps-GPU-upper-case",
     {"user_name": "bob", "tres_per_socket": "gres:gpu:2"},
     "Per-socket GPU requests are not reshaped"),
]


@pytest.mark.parametrize(("job", "text"), [c[1:] for c in VERBATIM_NOTES],
                         ids=[c[0] for c in VERBATIM_NOTES])
def test_shape_notes_keep_their_spelling(job: dict[str, Any], text: str) -> None:
    assert text in submit(job)["message"]


def test_gres_equals_count_spelling_keeps_the_count() -> None:
    """``gres/gpu:a100_80g=4`` is a spelling the parser accepts; untyping it keeps 4 GPUs."""
    job = {"user_name": "alice", "name": "train", "tres_per_node": "gres/gpu:a100_80g=4"}
    reply = submit(job)
    assert reply["set"]["features"] == "(a100_80g|a100_40g)"
    assert gpu_items(reply["set"]["tres_per_node"]) == [(None, 4)]
    assert reply["set"]["tres_per_node"].startswith("gres/")


def test_gres_alias_field_is_read_as_tres_per_node() -> None:
    """Slurm 22.05 may send --gres in ``gres``; normalize folds it into tres_per_node."""
    reply = submit({"user_name": "bob", "gres": "gres:gpu:8", "min_nodes": 2})
    assert only(reply["set"], SHAPE_KEYS) == {
        "tres_per_node": "gres:gpu:8", "min_nodes": 2, "max_nodes": 2, **WHOLE,
        "features": "[a100_80g|a100_40g]"}


# --------------------------------------------------------------------------- task layouts

#: (id, job) whose reshaping must leave room for every task (--ntasks-per-node is a
#: per-node maximum when --ntasks is given too)
TASK_CAPACITY: list[tuple[str, dict[str, Any]]] = [
    ("job-ntasks-4-reshaped-to-one-node",
     {"user_name": "bob", "tres_per_job": "gres:gpu:4", "num_tasks": 4}),
    ("job-gpus16-ntasks-16-reshaped-to-two-nodes",
     {"user_name": "bob", "tres_per_job": "gres:gpu:16", "num_tasks": 16}),
    ("task-16-ntasks-per-node-set-by-shaping",
     {"user_name": "bob", "tres_per_task": "gres:gpu:1", "num_tasks": 16}),
]


@pytest.mark.parametrize("job", [c[1] for c in TASK_CAPACITY], ids=[c[0] for c in TASK_CAPACITY])
def test_reshaped_layout_has_room_for_every_task(job: dict[str, Any]) -> None:
    reply = submit(job)
    assert reply["action"] == "accept"
    after = applied(job, reply)
    per_node = after.get("ntasks_per_node")
    if per_node is not None:
        assert per_node * (after.get("min_nodes") or 1) >= after["num_tasks"]


# --------------------------------------------------------------------------- rejects

#: (id, job, code, message must contain)
REJECTS: list[tuple[str, dict[str, Any], int, list[str]]] = [
    ("node-N2-gpu6-strands-gpus",
     {"user_name": "bob", "tres_per_node": "{g}gpu:6", "min_nodes": 2, "max_nodes": 2}, 2006,
     ["slurm-ml rejected this job", "2 nodes with 6 GPUs each would strand GPUs",
      "whole nodes (8 or 4 GPUs per node here)", "Nearest valid requests:",
      "--nodes=1 (6 GPUs)", "add allow_fragment to --comment"]),
    ("node-N2-gpu2-kept-not-packed",
     {"user_name": "bob", "tres_per_node": "{g}gpu:2", "min_nodes": 2, "max_nodes": 2}, 2006,
     ["2 nodes with 2 GPUs each would strand GPUs", "--nodes=1 --gres=gpu:4 (4 GPUs)",
      "add allow_fragment to --comment"]),
    ("node-N4-gpu1-kept-not-packed",
     {"user_name": "bob", "tres_per_node": "{g}gpu:1", "min_nodes": 4}, 2006,
     ["4 nodes with 1 GPU each would strand GPUs", "--nodes=1 --gres=gpu:4 (4 GPUs)",
      "add allow_fragment to --comment"]),
    ("job-gpus12-strands-gpus",
     {"user_name": "bob", "tres_per_job": "{g}gpu:12"}, 2006,
     ["12 GPUs would strand GPUs", "Nearest valid requests:", "--gpus=16 (16 GPUs)",
      "--gpus=8 (8 GPUs)"]),
    ("task-12x1-strands-gpus",
     {"user_name": "bob", "tres_per_task": "{g}gpu:1", "num_tasks": 12}, 2006,
     ["12 GPUs would strand GPUs"]),
    ("node-N2-gpu5-strands-gpus",
     {"user_name": "bob", "tres_per_node": "{g}gpu:5", "min_nodes": 2}, 2006,
     ["2 nodes with 5 GPUs each"]),
    ("gpus64-larger-than-any-partition",
     {"user_name": "bob", "tres_per_job": "{g}gpu:64"}, 2014,
     ["the job asks for 64 GPUs", "so it would pend forever",
      "Largest feasible request: --gpus="]),
    ("v100-typed-12-larger-than-v100-pool",
     {"user_name": "dave", "tres_per_job": "{g}gpu:v100:12"}, 2014,
     ["asks for 12 GPUs", "most any job can get here is 8",
      "Largest feasible request: --gpus=8 (2 nodes x 4 GPUs)"]),
    ("a100_80g-typed-24-larger-than-its-pool",
     {"user_name": "bob", "tres_per_job": "{g}gpu:a100_80g:24"}, 2014,
     ["asks for 24 GPUs", "Largest feasible request: --gpus=16 (2 nodes x 8 GPUs)"]),
    ("v100-node-typed-N3",
     {"user_name": "dave", "tres_per_node": "{g}gpu:v100:4", "min_nodes": 3}, 2014,
     ["asks for 12 GPUs"]),
    ("constraint-matches-no-node",
     {"user_name": "bob", "tres_per_node": "{g}gpu:2", "features": "v100&nvlink"}, 2014,
     ["no node in the partitions this job may use"]),
    ("bad-gpu_mem-word",
     {"user_name": "bob", "tres_per_node": "{g}gpu:a100_80g:2", "comment": "gpu_mem=lots"}, -1,
     ["gpu_mem='lots'", "gpu_mem=30G"]),
    ("bad-gpu_mem-zero",
     {"user_name": "bob", "tres_per_node": "{g}gpu:a100_80g:2", "comment": "gpu_mem=0G"}, -1,
     ["gpu_mem"]),
    ("bad-gpu_mem-empty",
     {"user_name": "bob", "tres_per_node": "{g}gpu:a100_80g:2", "comment": "gpu_mem="}, -1,
     ["gpu_mem"]),
    ("bad-gpu_mem-negative",
     {"user_name": "bob", "tres_per_node": "{g}gpu:a100_80g:2", "comment": "gpu_mem=-3G"}, -1,
     ["gpu_mem"]),
    ("bad-parallel-word",
     {"user_name": "bob", "tres_per_node": "{g}gpu:a100_80g:4",
      "comment": "gpu_mem=20G parallel=pipeline"}, -1,
     ["parallel='pipeline' in --comment is neither data nor tensor", "NVLink",
      "write parallel=data", "parallel=tensor", "leave the key out"]),
    ("bad-parallel-empty",
     {"user_name": "bob", "tres_per_node": "{g}gpu:a100_80g:4", "comment": "parallel="},
     -1, ["parallel=''"]),
    ("bad-parallel-on-a-job-nothing-widens",
     {"user_name": "bob", "tres_per_node": "{g}gpu:2", "comment": "parallel=dp"}, -1,
     ["parallel='dp'"]),
    ("bad-gpu_mem-type-from-constraint",
     {"user_name": "bob", "tres_per_node": "{g}gpu:2", "features": "a100_80g",
      "comment": "gpu_mem=3X"}, -1,
     ["gpu_mem"]),
]


@PREFIXES
@pytest.mark.parametrize(("job", "code", "says"), [c[1:] for c in REJECTS],
                         ids=[c[0] for c in REJECTS])
def test_rejects(g: str, job: dict[str, Any], code: int, says: list[str]) -> None:
    reply = submit(fmt(job, g))
    assert reply["action"] == "reject"
    assert reply["code"] == code
    assert "set" not in reply
    for text in says:
        assert text in reply["message"]


#: (id, job_desc) where the shape is too large for one GPU type: either rejected (2014) or
#: accepted with a layout Slurm can satisfy under the matching-OR it is given.
TOO_BIG_FOR_ONE_TYPE: list[tuple[str, dict[str, Any]]] = [
    ("gpus24", {"user_name": "bob", "tres_per_job": "gres:gpu:24"}),
    ("gpus32", {"user_name": "bob", "tres_per_job": "gres:gpu:32"}),
    ("node-N3-gpu8", {"user_name": "bob", "tres_per_node": "gres:gpu:8", "min_nodes": 3}),
    ("task-32x1", {"user_name": "bob", "tres_per_task": "gres:gpu:1", "num_tasks": 32}),
]


@pytest.mark.parametrize("job", [c[1] for c in TOO_BIG_FOR_ONE_TYPE],
                         ids=[c[0] for c in TOO_BIG_FOR_ONE_TYPE])
def test_multi_node_shape_is_satisfiable_or_rejected(job: dict[str, Any]) -> None:
    reply = submit(job)
    if reply["action"] == "reject":
        assert reply["code"] == 2014
        return
    assert layout_problem(applied(job, reply)) is None


def test_largest_feasible_request_named_in_2014_is_itself_feasible() -> None:
    reply = submit({"user_name": "bob", "tres_per_job": "gres:gpu:64"})
    m = re.search(r"Largest feasible request: --gpus=(\d+)", reply["message"])
    assert m is not None, reply["message"]
    largest = {"user_name": "bob", "tres_per_job": f"gres:gpu:{m[1]}"}
    again = submit(largest)
    assert again["action"] == "accept", again
    assert layout_problem(applied(largest, again)) is None


# --------------------------------------------------------------------------- pass-through

#: (id, job_desc) that slurm-ml must leave exactly as submitted
PASS_THROUGH: list[tuple[str, dict[str, Any]]] = [
    ("cpu-only", {"user_name": "carol"}),
    ("cpu-only-with-other-gres", {"user_name": "alice", "tres_per_node": "{g}nvme:1"}),
    ("zero-gpus", {"user_name": "alice", "tres_per_node": "{g}gpu:0"}),
    ("cpu-only-bad-gpu_mem-ignored", {"user_name": "alice", "comment": "gpu_mem=lots"}),
    ("cpu-only-time-min-0", {"user_name": "alice", "time_min": INFINITE}),
    ("unmanaged-partition",
     {"user_name": "alice", "name": "train", "partition": "cpu",
      "tres_per_node": "{g}gpu:a100_80g:4"}),
    ("unmanaged-partition-huge-request",
     {"user_name": "alice", "partition": "cloud", "tres_per_job": "{g}gpu:64"}),
    ("unmanaged-partition-stranding-shape",
     {"user_name": "carol", "partition": "other", "tres_per_node": "{g}gpu:6", "min_nodes": 2}),
    ("only-unmanaged-partitions-in-list",
     {"user_name": "carol", "partition": "cpu,cloud", "tres_per_job": "{g}gpu:16"}),
    # a type no managed node has: the job can only start in the unmanaged partition
    ("type-only-an-unmanaged-partition-in-the-list-has",
     {"user_name": "carol", "partition": "gpu,cloud", "tres_per_node": "{g}gpu:h100:8"}),
]


@PREFIXES
@pytest.mark.parametrize("job", [c[1] for c in PASS_THROUGH], ids=[c[0] for c in PASS_THROUGH])
def test_pass_through(g: str, job: dict[str, Any]) -> None:
    reply = submit(fmt(job, g))
    assert reply == {"v": 1, "action": "accept", "set": {}, "message": ""}


# --------------------------------------------------------------------------- budget routing

ONE_GPU = {"tres_per_node": "gres/gpu:1"}

#: The user's --time-min moved into the record and cleared from the job, in the note.
MOVED = "Slurm's --time-min was moved into this protection so the scheduler cannot shorten"
#: ... and dropped from a free job.
DROPPED = "Its --time-min was dropped (QOS free protects no runtime)"

#: (id, job_desc, expected `set` restricted to ROUTE_KEYS, the record's min_runtime (None =
#: no such key), message must contain, must not). Admission never sets Slurm's time_min:
#: the protected runtime lives in the AdminComment record; a --time-min the user gave is
#: cleared (NO_VAL) on every job it routes.
ROUTES: list[tuple[str, dict[str, Any], dict[str, Any], int | None, list[str], list[str]]] = [
    ("alloc-default-recorded",
     {"user_name": "alice"}, {"qos": "alloc", "site_factor": 700}, 60,
     ["QOS alloc, charged to llm-pretrain", "protected from requeue for its first 60 min (the "
      "default"], [MOVED]),
    ("alloc-user-time-min-moved-and-cleared",
     {"user_name": "alice", "time_min": 120}, {"qos": "alloc", "time_min": NO_VAL,
                                              "site_factor": 700}, 120,
     ["first 120 min.", MOVED], ["(the default"]),
    ("alloc-time-min-capped",
     {"user_name": "alice", "time_min": 600},
     {"qos": "alloc", "time_min": NO_VAL, "site_factor": 700}, 480,
     ["first 480 min (capped from 600 min", MOVED], []),
    ("alloc-time-min-at-cap",
     {"user_name": "alice", "time_min": 480},
     {"qos": "alloc", "time_min": NO_VAL, "site_factor": 700}, 480, ["first 480 min."], []),
    ("alloc-default-limited-by-time-limit",
     {"user_name": "alice", "time_limit": 20}, {"qos": "alloc", "site_factor": 700}, 20,
     ["first 20 min (your --time limit)"], [MOVED]),
    ("alloc-user-time-min-limited-by-time-limit",
     {"user_name": "alice", "time_min": 300, "time_limit": 90},
     {"qos": "alloc", "time_min": NO_VAL, "site_factor": 700}, 90,
     ["first 90 min (your --time limit)", MOVED], []),
    ("alloc-dev-cluster-incident-15-min-limit",  # --time=15 --time-min=1 was killed at 1 min
     {"user_name": "alice", "time_min": 1, "time_limit": 15},
     {"qos": "alloc", "time_min": NO_VAL, "site_factor": 700}, 1, ["first 1 min.", MOVED], []),
    ("alloc-time-limit-infinite",
     {"user_name": "alice", "time_limit": INFINITE}, {"qos": "alloc", "site_factor": 700}, 60,
     [], []),
    ("alloc-time-min-noval-is-unset",
     {"user_name": "alice", "time_min": NO_VAL}, {"qos": "alloc", "site_factor": 700}, 60,
     ["(the default"], [MOVED]),
    ("alloc-explicit-account",
     {"user_name": "alice", "account": "detection"}, {"qos": "alloc"}, 60,
     ["charged to detection"], []),
    ("alloc-explicit-qos-alloc-unchanged",
     {"user_name": "alice", "qos": "alloc"}, {"site_factor": 700}, 60, [], []),
    ("alloc-explicit-qos-alloc-time-min-cleared",
     {"user_name": "alice", "qos": "alloc", "time_min": 30},
     {"time_min": NO_VAL, "site_factor": 700}, 30, [MOVED], []),
    ("alloc-program-account-is-budgeted",
     {"user_name": "alice", "account": "nlp"}, {"qos": "alloc"}, 60, ["charged to nlp"], []),
    ("free-time-min-0-as-infinite-22.05",
     {"user_name": "alice", "time_min": INFINITE},
     {"qos": "free", "time_min": NO_VAL, "site_factor": 700}, 0,
     ["--time-min=0 asks for no protected runtime", "QOS free"], [DROPPED, "protected from"]),
    ("free-time-min-0-literal",
     {"user_name": "alice", "time_min": 0},
     {"qos": "free", "time_min": NO_VAL, "site_factor": 700}, 0, ["--time-min=0"], [DROPPED]),
    ("free-exhausted-budget",
     {"user_name": "carol"}, {"qos": "free", "site_factor": 5}, 0,
     ["Account llm-eval has used its GPU-time budget", "2000 of 1000 GPU-hours",
      "returns to alloc"], ["--no-requeue", DROPPED]),
    ("free-exhausted-user-time-min-cleared",
     {"user_name": "carol", "time_min": 120}, {"qos": "free", "time_min": NO_VAL,
                                              "site_factor": 5}, 0,
     ["has used its GPU-time budget", DROPPED], [MOVED]),
    ("free-exhausted-time-min-0-cleared",
     {"user_name": "carol", "time_min": INFINITE},
     {"qos": "free", "time_min": NO_VAL, "site_factor": 5}, 0, ["QOS free"], [DROPPED]),
    ("free-exhausted-overrides-qos-alloc",
     {"user_name": "carol", "qos": "alloc"}, {"qos": "free", "site_factor": 5}, 0, [], []),
    # policy.admission.unbudgeted: untouched (the default); free: test_admission_unbudgeted
    ("untouched-account-not-in-budget-tree",
     {"user_name": "alice", "account": "physics"}, {}, None,
     ["Account physics has no GPU-time budget", "keeps its association's default QOS"],
     ["(your default account)", "QOS free"]),
    ("untouched-user-without-account",
     {"user_name": "eve"}, {}, None,
     ["Your default account (slurm-ml could not read it) has no GPU-time budget"],
     ["(none)", "QOS free"]),
    ("free-no-requeue-warning",
     {"user_name": "carol", "requeue": 0}, {"qos": "free", "site_factor": 5}, 0,
     ["With --no-requeue a preempted job is cancelled"], []),
    ("alloc-no-requeue-no-warning",
     {"user_name": "alice", "requeue": 0}, {"qos": "alloc", "site_factor": 700}, 60,
     [], ["--no-requeue"]),
    ("free-explicit-qos-free",
     {"user_name": "alice", "qos": "free"}, {"site_factor": 700}, 0, ["You chose QOS free"],
     []),
    ("free-explicit-qos-free-user-time-min-cleared",
     {"user_name": "alice", "qos": "free", "time_min": 45},
     {"time_min": NO_VAL, "site_factor": 700}, 0, ["You chose QOS free", DROPPED], []),
    ("free-explicit-qos-free-time-min-0",
     {"user_name": "alice", "qos": "free", "time_min": INFINITE},
     {"time_min": NO_VAL, "site_factor": 700}, 0, ["QOS free"], []),
    ("other-qos-untouched",
     {"user_name": "carol", "qos": "high", "time_min": INFINITE}, {}, None,
     ["QOS high is not routed by slurm-ml"], []),
    ("other-qos-keeps-the-users-time-min",
     {"user_name": "carol", "qos": "high", "time_min": 30}, {}, None,
     ["QOS high is not routed by slurm-ml"], [MOVED]),
]


def record_of(reply: Mapping[str, Any]) -> dict[str, Any]:
    text = reply["set"]["admin_comment"]
    assert text.startswith("slurm-ml ")
    record: dict[str, Any] = json.loads(text.removeprefix("slurm-ml "))
    return record


@pytest.mark.parametrize(("job", "want", "min_runtime", "says", "never"),
                         [c[1:] for c in ROUTES], ids=[c[0] for c in ROUTES])
def test_budget_routing(job: dict[str, Any], want: dict[str, Any], min_runtime: int | None,
                        says: list[str], never: list[str]) -> None:
    reply = submit({**ONE_GPU, **job})
    assert reply["action"] == "accept"
    assert only(reply["set"], ROUTE_KEYS) == want
    assert only(reply["set"], SHAPE_KEYS) == {}
    assert record_of(reply).get("min_runtime") == min_runtime
    assert recorded_min_runtime_min(reply["set"]["admin_comment"]) == min_runtime
    for text in says:
        assert text in reply["message"]
    for text in never:
        assert text not in reply["message"]


def test_admission_never_sets_a_time_min_only_clears_one() -> None:
    """Slurm's --time-min lets backfill lower the --time limit: admission never sets it."""
    for _id, job, *_ in ROUTES:
        for time_min in (None, 1, 30, 60, 600, INFINITE):
            fields = {**ONE_GPU, **job}
            if time_min is not None:
                fields["time_min"] = time_min
            reply = submit(fields)
            assert reply["set"].get("time_min", NO_VAL) == NO_VAL, (fields, reply)


#: (id, admission knobs, job_desc, expected set restricted to ROUTE/SHAPE keys (plus the
#: record's min_runtime), must not say)
CONFIG_VARIANTS: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any], list[str]]] = [
    ("default-at-the-cap",  # a default above the cap is refused by config check
     {"default_min_runtime_min": 480}, {"user_name": "alice", **ONE_GPU},
     {"qos": "alloc", "site_factor": 700, "min_runtime": 480}, ["None", "capped"]),
    ("default-zero-protects-nothing",
     {"default_min_runtime_min": 0}, {"user_name": "alice", **ONE_GPU},
     {"qos": "alloc", "site_factor": 700, "min_runtime": 0}, []),
    ("zero-margin-40g-fits-40g",
     {"memory_margin_pct": 0}, {"user_name": "bob", "tres_per_node": "gres:gpu:a100_80g:2",
                                "comment": "gpu_mem=40G"},
     {"tres_per_node": "gres:gpu:2", "features": "(a100_80g|a100_40g)"}, []),
    ("leaf-wait-follows-config",
     {"leaf_switch_wait_min": 2.5}, {"user_name": "bob", "tres_per_job": "gres:gpu:16"},
     {"tres_per_job": "", "tres_per_node": "gres:gpu:8", "min_nodes": 2, "max_nodes": 2,
      "shared": 0, "req_switch": 1, "wait4switch": 150, "features": "[a100_80g|a100_40g]"},
     []),
]


@pytest.mark.parametrize(("knobs", "job", "want", "never"), [c[1:] for c in CONFIG_VARIANTS],
                         ids=[c[0] for c in CONFIG_VARIANTS])
def test_config_knobs(knobs: dict[str, Any], job: dict[str, Any], want: dict[str, Any],
                      never: list[str]) -> None:
    reply = submit(job, cfg=config_with(**knobs))
    assert reply["action"] == "accept"
    want = dict(want)
    if "min_runtime" in want:
        assert record_of(reply)["min_runtime"] == want.pop("min_runtime")
    keys = frozenset(want) | (ROUTE_KEYS if set(want) & ROUTE_KEYS else SHAPE_KEYS)
    assert only(reply["set"], keys) == want
    for text in never:
        assert text not in reply["message"]


# --------------------------------------------------------------------------- the record

AT = int(NOW.timestamp())

#: (id, job_desc, the AdminComment record)
RECORDS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("widened-by-profile",
     {"user_name": "alice", "name": "train", "tres_per_node": "gres:gpu:a100_80g:4"},
     {"v": 1, "at": AT, "need_gb": 30.0, "need_src": "profile", "types": ["a100_80g", "a100_40g"],
      "qos": "alloc", "min_runtime": 60, "site_factor": 700}),
    ("need-from-comment-not-widened",
     {"user_name": "dave", "tres_per_node": "gres:gpu:a100_80g:4", "comment": "gpu_mem=70.5G"},
     {"v": 1, "at": AT, "need_gb": 70.5, "need_src": "comment", "qos": "alloc",
      "min_runtime": 60}),
    ("shaped",
     {"user_name": "dave", "tres_per_job": "gres/gpu:16", "time_min": 30},
     {"v": 1, "at": AT, "shape": "2x8", "qos": "alloc", "min_runtime": 30}),
    ("free-no-requeue",
     {"user_name": "carol", "tres_per_node": "gres:gpu:1", "requeue": 0},
     {"v": 1, "at": AT, "qos": "free", "min_runtime": 0, "requeue": 0, "site_factor": 5}),
    ("other-qos-requeue",
     {"user_name": "carol", "tres_per_node": "gres:gpu:1", "qos": "high", "requeue": 1},
     {"v": 1, "at": AT, "requeue": 1}),
]


@pytest.mark.parametrize(("job", "record"), [c[1:] for c in RECORDS], ids=[c[0] for c in RECORDS])
def test_admin_comment_record(job: dict[str, Any], record: dict[str, Any]) -> None:
    reply = submit(job)
    text = reply["set"]["admin_comment"]
    assert text.startswith("slurm-ml ")
    assert json.loads(text.removeprefix("slurm-ml ")) == record


#: (id, AdminComment text, what recorded_min_runtime_min reads from it)
RECORDED_MIN_RUNTIME: list[tuple[str, str, int | None]] = [
    ("alloc-record", 'slurm-ml {"at":1,"min_runtime":30,"qos":"alloc","v":1}', 30),
    ("free-record-is-zero", 'slurm-ml {"at":1,"min_runtime":0,"qos":"free","v":1}', 0),
    ("key-order-and-spaces", 'slurm-ml { "v": 1, "min_runtime": 480 }', 480),
    ("empty", "", None),
    ("operator-note-not-a-record", "moved off gpu03 by ops", None),
    ("record-without-the-key", 'slurm-ml {"at":1,"requeue":1,"v":1}', None),
    ("pre-fix-record-time-min-is-not-read", 'slurm-ml {"qos":"alloc","time_min":60,"v":1}',
     None),
    ("prefix-without-space", 'slurm-ml{"min_runtime":30}', None),
    ("other-tool-prefix", 'other {"min_runtime":30}', None),
    ("garbage-json", "slurm-ml {min_runtime: 30", None),
    ("truncated", 'slurm-ml {"min_runtime":30', None),
    ("not-an-object", "slurm-ml [30]", None),
    ("json-null", "slurm-ml null", None),
    ("deeply-nested", "slurm-ml " + "[" * 100_000, None),
    ("negative", 'slurm-ml {"min_runtime":-5,"v":1}', None),
    ("fraction", 'slurm-ml {"min_runtime":30.5,"v":1}', None),
    ("whole-float", 'slurm-ml {"min_runtime":30.0,"v":1}', None),
    ("string", 'slurm-ml {"min_runtime":"30","v":1}', None),
    ("bool", 'slurm-ml {"min_runtime":true,"v":1}', None),
    ("null", 'slurm-ml {"min_runtime":null,"v":1}', None),
]


@pytest.mark.parametrize(("text", "minutes"), [c[1:] for c in RECORDED_MIN_RUNTIME],
                         ids=[c[0] for c in RECORDED_MIN_RUNTIME])
def test_recorded_min_runtime_min(text: str, minutes: int | None) -> None:
    assert recorded_min_runtime_min(text) == minutes


# --------------------------------------------------------------------------- modify (scontrol update)

CURRENT = {"user_name": "alice", "name": "train", "partition": "gpu", "account": "llm-pretrain",
           "tres_per_node": "gres:gpu:4", "time_limit": 600, "job_id": 42}

TIME_MIN_UPDATE = ("slurm-ml: TimeMin not changed: the protected runtime is fixed at "
                   "submission (AdminComment), and Slurm's TimeMin would let the scheduler "
                   "shorten the job's time limit.")

#: (id, current job_rec fields, update fields, expected reply without "v")
MODIFIES: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]] = [
    ("non-shape-update-left-alone", CURRENT, {"time_limit": 30, "comment": "x"},
     {"action": "accept", "set": {}, "message": ""}),
    ("empty-update-left-alone", CURRENT, {"features": "", "min_nodes": None},
     {"action": "accept", "set": {}, "message": ""}),
    ("gpus16-reshaped-no-routing", CURRENT, {"tres_per_job": "gres:gpu:16"},
     {"action": "accept",
      "set": {"tres_per_job": "", "tres_per_node": "gres:gpu:8", "min_nodes": 2, "max_nodes": 2,
              **WHOLE_UPDATE, "features": "[a100_80g|a100_40g]"},
      "message": "slurm-ml: Shaped to whole nodes: 2 nodes x 8 GPUs, exclusive, and it waits up "
                 "to 10 min for nodes under one leaf switch before taking any."}),
    ("new-gpu-spec-replaces-old-ones",
     {**CURRENT, "tres_per_job": "gres:gpu:16"}, {"tres_per_node": "gres:gpu:2"},
     {"action": "accept", "set": {}, "message": ""}),
    ("min-nodes-update-strands-gpus", {**CURRENT, "tres_per_node": "gres:gpu:6"},
     {"min_nodes": 2}, {"action": "reject", "code": 2006}),
    # A job record's memory 0 is also "asked for none": not --mem=0's whole node.
    ("current-memory-zero-is-not-whole-node-use",
     {**CURRENT, "tres_per_node": "gres:gpu:2", "min_mem_per_node": 0},
     {"min_nodes": 2, "tres_per_node": "gres:gpu:6"}, {"action": "reject", "code": 2006}),
    ("noval-update-fields-ignored", CURRENT, {"min_nodes": NO_VAL, "features": "nvlink"},
     {"action": "accept", "set": {}, "message": ""}),
    ("typed-current-widened-by-constraint-update",
     {**CURRENT, "tres_per_node": "gres/gpu:a100_80g:4"}, {"features": "a100_80g&nvlink"},
     {"action": "accept",
      "set": {"tres_per_node": "gres/gpu:4", "features": "nvlink&(a100_80g|a100_40g)"}}),
    ("gres-alias-update", CURRENT, {"gres": "gres:gpu:a100_80g:16"},
     {"action": "accept",
      "set": {"tres_per_node": "gres:gpu:8", "min_nodes": 2, "max_nodes": 2, **WHOLE_UPDATE,
              "features": "[a100_80g|a100_40g]"}}),
    ("update-to-unmanaged-partition", {**CURRENT, "partition": "cpu"},
     {"tres_per_job": "gres:gpu:64"}, {"action": "accept", "set": {}, "message": ""}),
    ("exhausted-account-not-rerouted", {**CURRENT, "user_name": "carol", "account": "llm-eval"},
     {"tres_per_node": "gres:gpu:2"}, {"action": "accept", "set": {}, "message": ""}),
    # TimeMin: the protected runtime is fixed at submission, in the AdminComment record; a
    # user's update may not set Slurm's time_min on a routed job (backfill would lower the
    # job's time limit to it), so it is cleared and slurmctld.log says why.
    ("time-min-update-cleared", CURRENT, {"time_min": 30},
     {"action": "accept", "set": {"time_min": NO_VAL}, "message": TIME_MIN_UPDATE}),
    ("time-min-update-cleared-in-qos-alloc", {**CURRENT, "qos": "alloc"}, {"time_min": 30},
     {"action": "accept", "set": {"time_min": NO_VAL}, "message": TIME_MIN_UPDATE}),
    ("time-min-update-cleared-in-qos-free", {**CURRENT, "qos": "free"}, {"time_min": 600},
     {"action": "accept", "set": {"time_min": NO_VAL}, "message": TIME_MIN_UPDATE}),
    ("time-min-update-with-a-reshape", CURRENT, {"tres_per_job": "gres:gpu:16", "time_min": 5},
     {"action": "accept",
      "set": {"tres_per_job": "", "tres_per_node": "gres:gpu:8", "min_nodes": 2, "max_nodes": 2,
              **WHOLE_UPDATE, "features": "[a100_80g|a100_40g]", "time_min": NO_VAL},
      "message": "slurm-ml: Shaped to whole nodes: 2 nodes x 8 GPUs, exclusive, and it waits up "
                 "to 10 min for nodes under one leaf switch before taking any. "
                 + TIME_MIN_UPDATE.removeprefix("slurm-ml: ")}),
    ("time-min-update-to-zero-left-alone", CURRENT, {"time_min": 0},
     {"action": "accept", "set": {}, "message": ""}),
    ("time-min-update-noval-ignored", CURRENT, {"time_min": NO_VAL},
     {"action": "accept", "set": {}, "message": ""}),
    ("current-time-min-is-not-the-updates", {**CURRENT, "time_min": 60},
     {"tres_per_node": "gres:gpu:2"}, {"action": "accept", "set": {}, "message": ""}),
    ("time-min-update-of-cpu-job-left-alone",
     {k: v for k, v in CURRENT.items() if k != "tres_per_node"}, {"time_min": 30},
     {"action": "accept", "set": {}, "message": ""}),
    ("time-min-update-in-unrouted-qos-left-alone", {**CURRENT, "qos": "high"}, {"time_min": 30},
     {"action": "accept", "set": {}, "message": ""}),
    ("time-min-update-in-unmanaged-partition-left-alone", {**CURRENT, "partition": "cpu"},
     {"time_min": 30}, {"action": "accept", "set": {}, "message": ""}),
]


def server(state: AdmissionState = STATE, cfg: Config = CFG) -> PolicyServer:
    refresher = StateRefresher(None, cfg)
    refresher.current = state
    return PolicyServer(cfg, refresher, clock=lambda: NOW)


@pytest.mark.parametrize(("current", "update", "want"), [c[1:] for c in MODIFIES],
                         ids=[c[0] for c in MODIFIES])
def test_modify(current: dict[str, Any], update: dict[str, Any], want: dict[str, Any]) -> None:
    line = json.dumps({"v": 1, "op": "modify", "uid": 0, "job": update, "current": current})
    reply = server().handle_line(line)
    for key, value in want.items():
        assert reply[key] == value, reply
    assert not set(reply.get("set", {})) & (ROUTE_KEYS - {"time_min"} | {"admin_comment"})
    assert reply.get("set", {}).get("time_min", NO_VAL) == NO_VAL  # cleared, never set


@pytest.mark.parametrize("job", [c[1] for c in ROUTES if c[1].get("qos") != "high"],
                         ids=[c[0] for c in ROUTES if c[1].get("qos") != "high"])
def test_time_min_only_update_of_an_admitted_job_only_clears_time_min(
        job: dict[str, Any]) -> None:
    """A TimeMin update re-runs the shape check on the job as admission left it: no-op."""
    fields = {**ONE_GPU, **job}
    current = applied(fields, submit(fields))
    current.pop("admin_comment")
    line = json.dumps({"v": 1, "op": "modify", "uid": 0, "job": {"time_min": 45},
                       "current": current})
    reply = server().handle_line(line)
    assert reply == {"v": 1, "action": "accept", "set": {"time_min": NO_VAL},
                     "message": TIME_MIN_UPDATE}


def test_modify_finds_the_owner_from_user_id() -> None:
    current = {k: v for k, v in CURRENT.items() if k != "user_name"}
    current["user_id"] = os.getuid()
    line = json.dumps({"v": 1, "op": "modify", "job": {"tres_per_job": "gres:gpu:8"},
                       "current": current})
    reply = server().handle_line(line)
    assert reply["action"] == "accept"
    assert reply["set"]["min_nodes"] == 1


def test_submit_through_handle_line_matches_the_pure_path() -> None:
    job = {"user_name": "alice", "name": "train", "tres_per_job": "gres/gpu:a100_80g:16"}
    reply = server().handle_line(json.dumps({"v": 1, "op": "submit", "uid": 1000, "job": job}))
    assert reply == submit(job)


# --------------------------------------------------------------------------- decoding

#: (id, job_desc fields, JobRequest attributes expected)
DECODES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("user-id-only", {"user_id": 1234}, {"user": "uid1234"}),
    ("partition-list", {"user_name": "a", "partition": "gpu,debug"},
     {"partitions": ("gpu", "debug")}),
    ("no-partition", {"user_name": "a", "partition": ""}, {"partitions": ()}),
    ("time-min-infinite-is-zero", {"user_name": "a", "time_min": INFINITE}, {"time_min_min": 0}),
    ("time-min-noval-is-unset", {"user_name": "a", "time_min": NO_VAL}, {"time_min_min": None}),
    ("time-limit-infinite-is-unset", {"user_name": "a", "time_limit": INFINITE},
     {"time_limit_min": None}),
    ("numbers-as-strings", {"user_name": "a", "min_nodes": "2", "num_tasks": " 8 "},
     {"min_nodes": 2, "num_tasks": 8}),
    ("whole-floats", {"user_name": "a", "min_nodes": 2.0}, {"min_nodes": 2}),
    ("noval16", {"user_name": "a", "ntasks_per_node": NO_VAL16}, {"ntasks_per_node": None}),
    ("max-nodes-zero-is-unset", {"user_name": "a", "max_nodes": 0}, {"max_nodes": None}),
    ("exclusive", {"user_name": "a", "shared": 0}, {"exclusive": True}),
    ("not-exclusive", {"user_name": "a", "shared": 1}, {"exclusive": False}),
    ("no-requeue", {"user_name": "a", "requeue": 0}, {"requeue": False}),
    ("switch-zero-is-unset", {"user_name": "a", "req_switch": 0}, {"switches": None}),
    ("numeric-name", {"user_name": "a", "name": 7}, {"name": "7"}),
    ("gpu-specs-all-fields",
     {"user_name": "a", "tres_per_node": "gres/gpu:a100_80g:2,gres/nvme:1",
      "tres_per_job": "gres:gpu:3", "tres_per_task": "gpu:v100:1", "tres_per_socket": "gres/gpu"},
     {"typed_gpus": frozenset({"a100_80g", "v100"}), "is_gpu": True}),
]


@pytest.mark.parametrize(("job", "attrs"), [c[1:] for c in DECODES], ids=[c[0] for c in DECODES])
def test_to_request_decodes(job: dict[str, Any], attrs: dict[str, Any]) -> None:
    req = to_request(job)
    for key, value in attrs.items():
        assert getattr(req, key) == value


#: (id, job_desc fields, BadRequest message pattern)
BAD_JOBS: list[tuple[str, dict[str, Any], str]] = [
    ("no-user", {"tres_per_node": "gres:gpu:1"}, "user_name is missing"),
    ("empty-user", {"user_name": ""}, "user_name is missing"),
    ("user-list", {"user_name": ["alice"]}, "user_name must be a string"),
    ("user-id-text", {"user_id": "root"}, "user_id must be an integer"),
    ("min-nodes-word", {"user_name": "a", "min_nodes": "two"}, "min_nodes must be an integer"),
    ("min-nodes-negative", {"user_name": "a", "min_nodes": -1}, "min_nodes must not be negative"),
    ("min-nodes-fraction", {"user_name": "a", "min_nodes": 1.5}, "min_nodes must be an integer"),
    ("min-nodes-bool", {"user_name": "a", "min_nodes": True}, "min_nodes must be an integer"),
    ("min-nodes-nan", {"user_name": "a", "min_nodes": float("nan")}, "min_nodes"),
    ("min-nodes-infinity", {"user_name": "a", "min_nodes": float("inf")}, "min_nodes"),
    ("time-min-word", {"user_name": "a", "time_min": "soon"}, "time_min must be an integer"),
    ("requeue-word", {"user_name": "a", "requeue": "yes"}, "requeue must be an integer"),
    ("features-object", {"user_name": "a", "features": {"a100": 1}}, "features must be a string"),
    ("features-fraction", {"user_name": "a", "features": 3.5}, "features must be a string"),
    ("tres-list", {"user_name": "a", "tres_per_node": ["gres:gpu:1"]},
     "tres_per_node must be a string"),
    ("comment-list", {"user_name": "a", "comment": []}, "comment must be a string"),
    ("partition-bool", {"user_name": "a", "partition": False}, "partition must be a string"),
]


@pytest.mark.parametrize(("job", "error"), [c[1:] for c in BAD_JOBS], ids=[c[0] for c in BAD_JOBS])
def test_to_request_rejects_bad_types(job: dict[str, Any], error: str) -> None:
    with pytest.raises(BadRequest, match=error):
        to_request(job)


#: (id, request line, BadRequest message pattern)
BAD_LINES: list[tuple[str, str, str]] = [
    ("not-json", "{nope", "not JSON"),
    ("array", "[1, 2]", "must be a JSON object"),
    ("version", '{"v": 2, "op": "ping"}', "protocol version 2"),
    ("no-op", '{"v": 1}', "unknown op None"),
    ("unknown-op", '{"op": "delete"}', "unknown op 'delete'"),
    ("uid-text", '{"op": "submit", "uid": "root"}', "uid must be an integer"),
    ("uid-nan", '{"op": "ping", "uid": NaN}', "uid must be an integer"),
    ("job-list", '{"op": "submit", "job": []}', "must be JSON objects"),
    ("current-text", '{"op": "modify", "current": "x"}', "must be JSON objects"),
]


@pytest.mark.parametrize(("line", "error"), [c[1:] for c in BAD_LINES], ids=[c[0] for c in BAD_LINES])
def test_parse_line_rejects(line: str, error: str) -> None:
    with pytest.raises(BadRequest, match=error):
        parse_line(line)


@pytest.mark.parametrize(("line", "error"), [c[1:] for c in BAD_LINES], ids=[c[0] for c in BAD_LINES])
def test_handle_line_answers_bad_requests_as_errors(line: str, error: str) -> None:
    srv = server()
    reply = srv.handle_line(line)
    assert reply["action"] == "error"
    assert re.search(error, reply["error"])
    assert srv.counts == {"bad_request": 1}


#: (id, job fields that to_request cannot decode) answered as bad requests by handle_line
BAD_SUBMITS: list[tuple[str, dict[str, Any]]] = [
    ("no-user", {"tres_per_node": "gres:gpu:1"}),
    ("min-nodes-word", {"user_name": "a", "tres_per_node": "gres:gpu:1", "min_nodes": "x"}),
    ("features-object", {"user_name": "a", "tres_per_node": "gres:gpu:1", "features": {}}),
]


@pytest.mark.parametrize("job", [c[1] for c in BAD_SUBMITS], ids=[c[0] for c in BAD_SUBMITS])
def test_handle_line_bad_job_fields(job: dict[str, Any]) -> None:
    srv = server()
    reply = srv.handle_line(json.dumps({"op": "submit", "job": job}))
    assert reply["action"] == "error"
    assert srv.counts["bad_request"] == 1


#: (id, job fields, the gres spelling the reply uses)
PREFIX_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("22.05-node", {"tres_per_node": "gres:gpu:2"}, "gres:"),
    ("23.11-node", {"tres_per_node": "gres/gpu:2"}, "gres/"),
    ("23.11-job", {"tres_per_job": "gres/gpu:16"}, "gres/"),
    ("23.11-task", {"tres_per_task": "gres/gpu:1"}, "gres/"),
    ("bare", {"tres_per_node": "gpu:2"}, "gres:"),
    ("none", {}, "gres:"),
]


@pytest.mark.parametrize(("job", "prefix"), [c[1:] for c in PREFIX_CASES],
                         ids=[c[0] for c in PREFIX_CASES])
def test_gres_prefix(job: dict[str, Any], prefix: str) -> None:
    assert gres_prefix(job) == prefix


# --------------------------------------------------------------------------- modify: QOS, account, partition

#: a job carol (account llm-eval, budget spent) submitted: routed to QOS free
SPENT = {**CURRENT, "user_name": "carol", "account": "llm-eval", "qos": "free"}
#: a job alice submitted -A physics (no budget): untouched, in the site's QOS normal
OUTSIDE = {**CURRENT, "account": "physics", "qos": "normal"}
FREE_MODE = config_with(unbudgeted="free")
SPENT_NOTE = ("Account llm-eval has used its GPU-time budget for this window (2000 of 1000 "
              "GPU-hours), so the job runs in QOS free")

#: (id, config, current job_rec fields, update, expected reply fields, message must contain)
REROUTES: list[tuple[str, Config, dict[str, Any], dict[str, Any], dict[str, Any], list[str]]] = [
    # A job whose budget is spent cannot move itself into alloc.
    ("spent-account-qos-alloc-refused", CFG, SPENT, {"qos": "alloc"},
     {"action": "reject", "code": 2050},
     ["slurm-ml refused QOS alloc for job 42: account llm-eval has used its GPU-time budget "
      "for this window (2000 of 1000 GPU-hours).", "The job keeps its QOS",
      "scontrol update JobId=42 Account=<account> QOS=alloc"]),
    ("spent-account-qos-alloc-with-a-reshape-refused", CFG, SPENT,
     {"qos": "alloc", "tres_per_job": "gres:gpu:16"}, {"action": "reject", "code": 2050},
     ["refused QOS alloc"]),
    ("shape-refusal-comes-first", CFG, {**SPENT, "tres_per_node": "gres:gpu:6"},
     {"qos": "alloc", "min_nodes": 2}, {"action": "reject", "code": 2006}, ["strand"]),
    ("spent-account-qos-reset-to-default-stays-free", CFG, SPENT, {"qos": ""},
     {"action": "accept", "set": {"qos": "free", "site_factor": 5}}, [SPENT_NOTE]),
    ("spent-account-qos-free-kept", CFG, SPENT, {"qos": "free"},
     {"action": "accept", "set": {"site_factor": 5}}, ["You chose QOS free"]),
    ("outside-account-qos-alloc-refused", CFG, OUTSIDE, {"qos": "alloc"},
     {"action": "reject", "code": 2050},
     ["refused QOS alloc for job 42: account physics has no GPU-time budget in slurm-ml.",
      "Run it under a budget account: scontrol update JobId=42 Account=<account> QOS=alloc."]),
    ("outside-account-qos-alloc-refused-in-free-mode", FREE_MODE, OUTSIDE, {"qos": "alloc"},
     {"action": "reject", "code": 2050}, ["has no GPU-time budget"]),
    ("default-account-outside-qos-alloc-refused", CFG,
     {k: v for k, v in OUTSIDE.items() if k != "account"} | {"user_name": "eve"},
     {"qos": "alloc"}, {"action": "reject", "code": 2050},
     ["your default account (slurm-ml could not read it) has no GPU-time budget"]),
    ("outside-account-own-qos-left-to-slurm", CFG, OUTSIDE, {"qos": "long"},
     {"action": "accept", "set": {}, "message": ""}, []),
    # An account change gets the routing a submission gets.
    ("alloc-job-moved-to-spent-account-goes-free", CFG, {**CURRENT, "qos": "alloc"},
     {"account": "llm-eval"}, {"action": "accept", "set": {"qos": "free", "site_factor": 5}},
     [SPENT_NOTE]),
    ("alloc-job-moved-to-spent-account-asking-alloc-refused", CFG, {**CURRENT, "qos": "alloc"},
     {"account": "llm-eval", "qos": "alloc"}, {"action": "reject", "code": 2050},
     ["refused QOS alloc", "llm-eval has used its GPU-time budget"]),
    ("alloc-job-moved-outside-the-tree-refused", CFG, {**CURRENT, "qos": "alloc"},
     {"account": "physics"}, {"action": "reject", "code": 2050},
     ["refused this update of job 42: it would keep the job in QOS alloc: account physics has "
      "no GPU-time budget in slurm-ml.",
      "Give the QOS too: scontrol update JobId=42 Account=physics QOS=<qos>."]),
    ("alloc-job-moved-outside-the-tree-in-free-mode-goes-free", FREE_MODE,
     {**CURRENT, "qos": "alloc"}, {"account": "physics"},
     {"action": "accept", "set": {"qos": "free", "site_factor": 9}},
     ["Account physics has no GPU-time budget, so the job runs in QOS free"]),
    ("free-job-moved-to-a-budget-with-room-keeps-free", CFG, SPENT,
     {"account": "llm-pretrain"}, {"action": "accept", "set": {"site_factor": 700}},
     ["You chose QOS free"]),
    # A budget with room: alloc, as on submission; the protected runtime stays recorded.
    ("budget-with-room-qos-alloc-accepted", CFG, {**CURRENT, "qos": "free"}, {"qos": "alloc"},
     {"action": "accept", "set": {"site_factor": 700},
      "message": "slurm-ml: The job runs in QOS alloc, charged to llm-pretrain."}, []),
    ("budget-with-room-qos-alloc-and-time-min-cleared", CFG, {**CURRENT, "qos": "free"},
     {"qos": "alloc", "time_min": 30},
     {"action": "accept", "set": {"site_factor": 700, "time_min": NO_VAL},
      "message": "slurm-ml: The job runs in QOS alloc, charged to llm-pretrain. "
                 + TIME_MIN_UPDATE.removeprefix("slurm-ml: ")}, []),
    ("qos-alloc-with-time-min-zero-refused", CFG, {**CURRENT, "qos": "free"},
     {"qos": "alloc", "time_min": 0}, {"action": "reject", "code": 2050},
     ["TimeMin=0 asks for no protected runtime. Leave TimeMin=0 out of the update."]),
    ("reset-to-default-with-room-goes-alloc", CFG, {**CURRENT, "qos": "free"}, {"qos": ""},
     {"action": "accept", "set": {"qos": "alloc", "site_factor": 700}}, ["QOS alloc"]),
    # What submission leaves alone, an update leaves alone.
    ("partition-to-unmanaged-left-alone", CFG, SPENT, {"partition": "cpu", "qos": "alloc"},
     {"action": "accept", "set": {}, "message": ""}, []),
    ("cpu-only-job-left-alone", CFG,
     {k: v for k, v in SPENT.items() if k != "tres_per_node"}, {"qos": "alloc"},
     {"action": "accept", "set": {}, "message": ""}, []),
    ("unrouted-qos-left-alone", CFG, SPENT, {"qos": "high"},
     {"action": "accept", "set": {}, "message": ""}, []),
    ("partition-update-reroutes", CFG, {**CURRENT, "account": "llm-eval", "qos": "alloc"},
     {"partition": "gpu"}, {"action": "accept", "set": {"qos": "free", "site_factor": 5}},
     [SPENT_NOTE]),
    # A partition list that reaches a managed partition is routed, whatever else it names.
    ("spent-job-into-a-list-with-an-unmanaged-partition-asking-alloc-refused", CFG, SPENT,
     {"partition": "cpu,gpu", "qos": "alloc"}, {"action": "reject", "code": 2050},
     ["refused QOS alloc", "llm-eval has used its GPU-time budget"]),
    ("spent-job-asking-alloc-in-a-mixed-list-refused", CFG, {**SPENT, "partition": "gpu,cpu"},
     {"qos": "alloc"}, {"action": "reject", "code": 2050}, ["refused QOS alloc"]),
    ("alloc-job-into-a-mixed-list-under-a-spent-account-goes-free", CFG,
     {**CURRENT, "qos": "alloc"}, {"partition": "gpu,cpu", "account": "llm-eval"},
     {"action": "accept", "set": {"qos": "free", "site_factor": 5}}, [SPENT_NOTE]),
    # A job submitted outside slurm-ml has no admission record, and an update cannot
    # write one: into a managed partition it may come in QOS free only.
    ("unmanaged-job-moved-into-gpu-in-alloc-refused", CFG,
     {**CURRENT, "partition": "cpu", "qos": "alloc"}, {"partition": "cpu,gpu"},
     {"action": "reject", "code": 2050},
     ["refused moving job 42 into partition gpu in QOS alloc: it was submitted to cpu, "
      "which slurm-ml does not manage", "Move it with QOS=free",
      "submit it again with --partition=cpu,gpu"]),
    ("unmanaged-job-moved-into-gpu-in-free-accepted", CFG,
     {**CURRENT, "partition": "cpu", "qos": "normal"}, {"partition": "gpu", "qos": "free"},
     {"action": "accept", "set": {"site_factor": 700}}, ["You chose QOS free"]),
    # The record decides, not the partitions: in through QOS free, then alloc, is refused.
    ("unrecorded-free-job-asking-alloc-refused", CFG,
     {**CURRENT, "qos": "free", "admin_comment": ""}, {"qos": "alloc"},
     {"action": "reject", "code": 2050},
     ["refused QOS alloc for job 42: it has no admission record",
      "Leave it in QOS free (uncharged, preemptible), or submit it again with "
      "--partition=gpu."]),
    ("recorded-free-job-asking-alloc-accepted", CFG,
     {**CURRENT, "qos": "free", "admin_comment": 'slurm-ml {"min_runtime":0,"v":1}'},
     {"qos": "alloc"}, {"action": "accept", "set": {"site_factor": 700}}, ["QOS alloc"]),
    ("unrecorded-alloc-job-moved-to-a-spent-account-goes-free", CFG,
     {**CURRENT, "qos": "alloc", "admin_comment": ""}, {"account": "llm-eval"},
     {"action": "accept", "set": {"qos": "free", "site_factor": 5}}, [SPENT_NOTE]),
    ("unrecorded-alloc-job-keeps-alloc-on-a-partition-update", CFG,
     {**CURRENT, "qos": "alloc", "admin_comment": ""}, {"partition": "gpu,debug"},
     {"action": "accept"}, ["QOS alloc, charged to llm-pretrain"]),
]


@pytest.mark.parametrize(("cfg", "current", "update", "want", "says"),
                         [c[1:] for c in REROUTES], ids=[c[0] for c in REROUTES])
def test_modify_of_qos_account_partition_is_routed_as_a_submission(
        cfg: Config, current: dict[str, Any], update: dict[str, Any], want: dict[str, Any],
        says: list[str]) -> None:
    line = json.dumps({"v": 1, "op": "modify", "uid": 1000, "job": update, "current": current})
    reply = server(cfg=cfg).handle_line(line)
    for key, value in want.items():
        assert reply[key] == value, reply
    for text in says:
        assert text in reply["message"], reply
    assert "admin_comment" not in reply.get("set", {})  # slurmctld denies it to users
    assert "shared" not in reply.get("set", {})
    account = update.get("account", current.get("account"))
    if account in ("llm-eval", "physics", None):  # spent, or no budget: never alloc
        assert reply.get("set", {}).get("qos") != "alloc"


@pytest.mark.parametrize(("update", "want"), [
    ({"qos": ""}, {"qos"}),
    ({"account": "x", "partition": None}, {"account"}),
    ({"partition": ""}, {"partition"}),
    ({"features": "", "min_nodes": 2}, {"min_nodes"}),
    ({"time_limit": 30, "comment": "x"}, set()),
])
def test_touched_counts_routing_fields_even_when_empty(update: dict[str, Any],
                                                        want: set[str]) -> None:
    assert touched(update) == want


@pytest.mark.parametrize(("update", "want"), [
    ({"qos": "alloc"}, "alloc"), ({"qos": ""}, None), ({}, None), ({"qos": 3}, None)])
def test_asked_qos_is_the_qos_an_update_names(update: dict[str, Any], want: str | None) -> None:
    assert asked_qos(update) == want
