"""Properties of admission over generated submissions, and a fuzz of submitd's request path.

Each generated job_desc goes the way ``PolicyServer.handle_line`` sends it (normalize →
to_request → decide → reply_for) on the example config. Whatever the request, a
decision never asks for more GPUs than the job did, never produces a node layout the
cluster cannot hold, explains every reject, and never raises.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jobdesc_helpers import applied, gpu_items, total_gpus

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import Config, load_config
from slurm_ml.policy.admission import decide, recorded_min_runtime_min
from slurm_ml.policy.admission.cluster_view import cluster_view
from slurm_ml.policy.admission.state import AccountStanding, AdmissionState
from slurm_ml.submitd.server import PolicyServer
from slurm_ml.submitd.state import StateRefresher
from slurm_ml.submitd.wire import (
    INFINITE,
    JOB_FIELDS,
    NO_VAL,
    NO_VAL16,
    normalize,
    reply_for,
    to_request,
)

EXAMPLE = DEFAULT_CONFIG
CFG = load_config(EXAMPLE)
VIEW = cluster_view(CFG)
NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
LEAF_WAIT_S = int(CFG.policy.admission.leaf_switch_wait_min * 60)
MARGIN = 1 + CFG.policy.admission.memory_margin_pct / 100
STATE = AdmissionState(
    standing={
        "llm-pretrain": AccountStanding("llm-pretrain", False, 700, 100.0, 5000.0),
        "llm-eval": AccountStanding("llm-eval", True, 5, 2000.0, 1000.0),
        "detection": AccountStanding("detection", False, None, 10.0, 100.0),
    },
    profiles_gb={("alice", "train"): 30.0, ("bob", "small"): 20.0, ("dave", "big"): 75.0,
                 ("carol", "tiny"): 5.0},
    loaded_at=NOW,
)
FEATURE_TO_TYPE = {t.feature: name for name, t in CFG.gpu_types.items()}
FAST = settings(max_examples=200, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])


# --------------------------------------------------------------------------- reading job_desc



def per_node_gpus(job: Mapping[str, Any]) -> int:
    nodes = job.get("min_nodes") or 1
    per_node = gpu_items(job.get("tres_per_node"))
    per_task = gpu_items(job.get("tres_per_task"))
    per_job = gpu_items(job.get("tres_per_job"))
    if per_node:
        return sum(c for _t, c in per_node)
    if per_task:  # the busiest node holds at least its share of the tasks
        return sum(c for _t, c in per_task) * math.ceil((job.get("num_tasks") or 1) / nodes)
    return math.ceil(sum(c for _t, c in per_job) / nodes)


def gres_types(job: Mapping[str, Any]) -> set[str]:
    return {t for key in ("tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket")
            for t, _c in gpu_items(job.get(key)) if t}


_TERM = re.compile(r"^(?P<open>[(\[]?)(?P<body>[A-Za-z0-9_.\-|]+)(?P<close>[)\]]?)$")


def constraint_terms(expr: str) -> list[tuple[bool, list[str]]] | None:
    """Top-level AND terms as (matching OR?, names); None for richer expressions."""
    out = []
    for raw in expr.split("&") if expr else []:
        m = _TERM.match(raw.strip())
        if not m:
            return None
        out.append((m["open"] == "[", m["body"].split("|")))
    return out


def allowed_types(job: Mapping[str, Any]) -> set[str]:
    """GPU types the job may run on: its GRES type and its GPU-type constraint terms."""
    types = set(CFG.gpu_types)
    typed = gres_types(job) & types
    if typed:
        types &= typed
    for _matching, names in constraint_terms(str(job.get("features") or "")) or []:
        if all(n in FEATURE_TO_TYPE for n in names):
            types &= {FEATURE_TO_TYPE[n] for n in names}
    return types


def classes() -> list[tuple[int, str, frozenset[str], NodeSet]]:
    return [(c.gpus_per_node, c.gpu_type,
             frozenset({*c.features, CFG.gpu_types[c.gpu_type].feature}),
             NodeSet(c.nodes, resolver=RESOLVER_NOGROUP)) for c in CFG.node_classes]


CLASSES = classes()
KNOWN = {f for _g, _t, feats, _n in CLASSES for f in feats}


def layout_problem(after: Mapping[str, Any], cfg: Config = CFG) -> str | None:
    """Why Slurm could never satisfy the rewritten job's node layout here (None: it can).

    A matching OR ``[a|b]`` needs every node to carry the same one; features unknown to
    slurm-ml are Slurm's call; expressions with counts or ``!`` are not judged.
    """
    nodes = int(after.get("min_nodes") or 1)
    top = after.get("max_nodes")
    if top is not None and top < nodes:
        return f"min_nodes {nodes} > max_nodes {top}"
    if top is not None and top > nodes:  # a range kept: every count in it must fit
        for n in range(nodes, top + 1):
            problem = layout_problem({**after, "min_nodes": n, "max_nodes": n}, cfg)
            if problem is not None:
                return problem
        return None
    per_node = per_node_gpus(after)
    if per_node <= 0:
        return "no GPU per node"
    tasks, tasks_per_node = after.get("num_tasks"), after.get("ntasks_per_node")
    if tasks and tasks_per_node and tasks_per_node * nodes < tasks:
        return f"{tasks} tasks do not fit {nodes} node(s) at --ntasks-per-node={tasks_per_node}"
    types = gres_types(after)
    expr = str(after.get("features") or "")
    terms = constraint_terms(expr)
    if terms is None:
        return None
    plain = [set(n) for m, n in terms if not m and set(n) & KNOWN]
    matching = [n for m, n in terms if m and set(n) & KNOWN]
    wanted = [p for p in str(after.get("partition") or "").split(",") if p] or [
        cfg.cluster.default_partition.name]
    for part in cfg.cluster.partitions:
        if part.name not in wanted:
            continue
        members = NodeSet(part.nodes, resolver=RESOLVER_NOGROUP)
        for choice in itertools.product(*matching):
            count = sum(
                len(members & nodeset) for gpn, gtype, feats, nodeset in CLASSES
                if (not types or gtype in types) and all(t & feats for t in plain)
                and all(c in feats for c in choice)
                and gpn >= per_node and (nodes == 1 or gpn == per_node))
            if count >= nodes:
                return None
    return (f"{nodes} node(s) x {per_node} GPUs (types {sorted(types) or 'any'}, "
            f"features {expr!r}) fits no partition of {wanted}")


def contradictory(job: Mapping[str, Any]) -> bool:
    """A GRES type that a GPU-type --constraint term rules out: unsatisfiable as submitted."""
    typed = gres_types(job) & set(CFG.gpu_types)
    if not typed:
        return False
    for _m, names in constraint_terms(str(job.get("features") or "")) or []:
        if all(n in FEATURE_TO_TYPE for n in names) and not typed & {
                FEATURE_TO_TYPE[n] for n in names}:
            return True
    return False


# --------------------------------------------------------------------------- strategies

USERS = ["alice", "bob", "carol", "dave", "eve"]
NAMES = ["train", "small", "big", "tiny", "other", ""]
GPU_TYPES = [None, "a100_80g", "a100_40g", "v100"]
PARTITIONS = [None, "gpu", "debug", "gpu,debug", "cpu", "gpu,cpu", "cpu,debug", "cpu,cloud"]
FEATURES = [None, "a100_80g", "a100_40g", "v100", "nvlink", "pcie", "a100", "bigmem",
            "a100_80g&nvlink", "nvlink&a100_40g", "(a100_80g|a100_40g)", "[a100_80g|a100_40g]",
            "(a100_40g|v100)", "a100_80g&bigmem", "nvlink*2", "!v100", "v100&nvlink"]
COMMENT_WORDS = st.one_of(
    st.builds(lambda n: f"gpu_mem={n}G", st.integers(1, 100)),
    st.sampled_from(["pin_gpu", "allow_fragment", "note", "ckpt=/scratch/x", "gpu_mem=lots"]),
)

#: parallel= words, added only where a test asks for them (``with_parallel``): adding them
#: to COMMENT_WORDS would move every other test's derandomized examples
PARALLEL_WORDS = st.sampled_from(["parallel=data", "parallel=tensor", "parallel"])


@st.composite
def with_parallel(draw: st.DrawFn) -> dict[str, Any]:
    """A job_desc whose comment may also say how the job is parallel."""
    job = draw(job_desc())
    if draw(st.booleans()):
        words = [str(job.get("comment") or ""), draw(PARALLEL_WORDS)]
        job["comment"] = " ".join(w for w in words if w)
    return job


@st.composite
def gpu_spec(draw: st.DrawFn, prefix: str) -> tuple[str, str]:
    """(tres_per_* field, value) of one GPU request, in one Slurm version's spelling."""
    field = draw(st.sampled_from(["tres_per_node", "tres_per_job", "tres_per_task",
                                  "tres_per_socket"]))
    gtype = draw(st.sampled_from(GPU_TYPES))
    count = draw(st.one_of(st.integers(1, 8), st.integers(0, 70)))
    item = f"{prefix}gpu:{gtype}:{count}" if gtype else f"{prefix}gpu:{count}"
    if draw(st.booleans()) and field == "tres_per_node":
        item += f",{prefix}nvme:1"
    return field, item


@st.composite
def job_desc(draw: st.DrawFn) -> dict[str, Any]:
    """job_desc fields as the shim sends them (NO_VAL fields left out)."""
    job: dict[str, Any] = {"user_name": draw(st.sampled_from(USERS))}
    name = draw(st.sampled_from(NAMES))
    if name:
        job["name"] = name
    prefix = draw(st.sampled_from(["gres:", "gres/"]))  # Slurm 22.05 or 23.11+
    if draw(st.integers(0, 9)):  # mostly GPU jobs
        field, value = draw(gpu_spec(prefix))
        job[field] = value
    optional: dict[str, st.SearchStrategy[Any]] = {
        "partition": st.sampled_from(PARTITIONS),
        "features": st.sampled_from(FEATURES),
        "min_nodes": st.integers(1, 6),
        "num_tasks": st.integers(1, 40),
        "ntasks_per_node": st.integers(1, 8),
        "account": st.sampled_from(["llm-pretrain", "llm-eval", "detection", "physics", "nlp"]),
        "qos": st.sampled_from(["alloc", "free", "normal"]),
        "time_min": st.sampled_from([0, 30, 60, 600, INFINITE, NO_VAL]),
        "time_limit": st.sampled_from([10, 120, 10080, INFINITE]),
        "requeue": st.sampled_from([0, 1]),
        "comment": st.lists(COMMENT_WORDS, max_size=3).map(" ".join),
    }
    for key, strategy in optional.items():
        if draw(st.booleans()):
            value = draw(strategy)
            if value is not None:
                job[key] = value
    if "min_nodes" in job and draw(st.booleans()):
        job["max_nodes"] = job["min_nodes"] + draw(st.integers(0, 2))
    return job


def answer(job: Mapping[str, Any]) -> dict[str, Any]:
    fields = normalize(job)
    req = to_request(fields)
    decision = decide(req, CFG, VIEW, STATE, NOW)
    return reply_for(decision, fields, req, leaf_wait_s=LEAF_WAIT_S)


def managed_gpu_job(job: Mapping[str, Any]) -> bool:
    """A GPU job that may start in a partition slurm-ml manages: one of its list is, or
    it names none (the default partition)."""
    parts = [p for p in str(job.get("partition") or "").split(",") if p]
    return (total_gpus(job) != 0 or bool(gpu_items(job.get("tres_per_socket")))) and (
        not parts or any(p in VIEW.partitions for p in parts))


# --------------------------------------------------------------------------- properties


@FAST
@given(job_desc())
def test_replies_are_well_formed_and_rejects_explain_themselves(job: dict[str, Any]) -> None:
    reply = answer(job)  # never raises
    assert reply["v"] == 1
    assert reply["action"] in ("accept", "reject")
    if reply["action"] == "reject":
        assert reply["code"] != 0
        assert isinstance(reply["message"], str)
        assert reply["message"].strip()
        assert reply["message"].startswith("slurm-ml")
        assert "set" not in reply
    else:
        assert isinstance(reply["set"], dict)
        assert isinstance(reply["message"], str)
        json.dumps(reply)  # the reply line must serialise


@FAST
@given(job_desc())
def test_never_asks_for_more_gpus(job: dict[str, Any]) -> None:
    reply = answer(job)
    before = total_gpus(normalize(job))
    if reply["action"] != "accept" or before is None:
        return
    after = total_gpus(applied(job, reply))
    assert after is not None
    assert after <= before


@FAST
@given(job_desc())
def test_accepted_jobs_keep_their_gpu_total(job: dict[str, Any]) -> None:
    reply = answer(job)
    before = total_gpus(normalize(job))
    if reply["action"] == "accept" and before is not None:
        assert total_gpus(applied(job, reply)) == before


@FAST
@given(job_desc())
def test_layouts_are_feasible_and_multi_node_uses_whole_nodes(job: dict[str, Any]) -> None:
    reply = answer(job)
    if reply["action"] != "accept" or "min_nodes" not in reply["set"]:
        return
    changes = reply["set"]
    assert changes["max_nodes"] >= changes["min_nodes"]
    if changes["max_nodes"] > changes["min_nodes"]:  # a range kept, or narrowed inside
        assert job["min_nodes"] <= changes["min_nodes"]
        assert changes["max_nodes"] <= job.get("max_nodes", job["min_nodes"])
    after = applied(job, reply)
    if contradictory(job):
        return  # the user's own GRES type and --constraint exclude each other
    if changes["min_nodes"] > 1:
        assert changes["shared"] == 0
        assert changes["req_switch"] == 1
        assert changes["wait4switch"] == LEAF_WAIT_S
        assert per_node_gpus(after) in {gpn for gpn, _t, _f, _n in CLASSES}
    problem = layout_problem(after)
    assert problem is None, problem


@FAST
@given(with_parallel())
def test_widening_respects_memory_and_nvlink(job: dict[str, Any]) -> None:
    """Types slurm-ml adds have the memory (with margin) and, for multi-GPU nodes on
    NVLink hardware, NVLink unless the job says parallel=data (with parallel=tensor,
    whatever the hardware); the types the user named are never dropped for lack of
    memory."""
    reply = answer(job)
    if reply["action"] != "accept" or "features" not in reply["set"]:
        return
    before = normalize(job)
    if constraint_terms(str(before.get("features") or "")) is None:
        return
    requested = gres_types(before) & set(CFG.gpu_types)
    for _m, names in constraint_terms(str(before.get("features") or "")) or []:
        if all(n in FEATURE_TO_TYPE for n in names):
            requested |= {FEATURE_TO_TYPE[n] for n in names}
    if not requested:
        return
    after = applied(job, reply)
    added = allowed_types(after) - requested
    if not added:
        return
    comment = str(job.get("comment") or "")
    assert "pin_gpu" not in comment
    sizes = re.findall(r"gpu_mem=(\d+)G", comment)  # the last one counts
    need = float(sizes[-1]) if sizes else \
        STATE.profiles_gb[(job["user_name"], job.get("name", ""))]
    for gpu in added:
        assert CFG.gpu_types[gpu].memory_gb >= need * MARGIN, (gpu, need)
    said = re.findall(r"parallel=(\w+)", comment)
    nvlink = (said[-1] == "tensor" if said
              else any(CFG.gpu_types[t].nvlink_links for t in requested))
    if per_node_gpus(after) > 1 and nvlink:
        for gpu in added:
            assert CFG.gpu_types[gpu].nvlink_links > 0, (gpu, reply["set"])


@FAST
@given(job_desc())
def test_reply_keeps_the_requests_gres_spelling(job: dict[str, Any]) -> None:
    specs = [v for k, v in job.items() if k.startswith("tres_per_")]
    spellings = {s[:5] for v in specs for s in str(v).split(",")}
    reply = answer(job)
    if reply["action"] != "accept" or not spellings:
        return
    written = [str(v) for k, v in reply["set"].items() if k.startswith("tres_per_") and v]
    if "gres/" in spellings:
        assert not any("gres:" in w for w in written), (job, reply["set"])
    else:
        assert not any("gres/" in w for w in written), (job, reply["set"])


@FAST
@given(job_desc())
def test_cpu_only_and_unmanaged_jobs_pass_untouched(job: dict[str, Any]) -> None:
    if managed_gpu_job(job):
        return
    assert answer(job) == {"v": 1, "action": "accept", "set": {}, "message": ""}


@FAST
@given(job_desc(), st.sampled_from(["cpu", "cloud,cpu"]))
def test_an_unmanaged_partition_in_the_list_changes_no_decision(job: dict[str, Any],
                                                                 extra: str) -> None:
    """Slurm may start a job in any partition of its list, so adding one slurm-ml does not
    manage is no way around admission: the job is rewritten, routed and recorded exactly
    as with its managed partitions alone; a rejection only says where it was judged."""
    managed = job.get("partition") or "gpu"
    if not managed_gpu_job(job) or "cpu" in managed:
        return
    alone = answer({**job, "partition": managed})
    listed = answer({**job, "partition": f"{extra},{managed}"})
    assert listed["action"] == alone["action"]
    if alone["action"] == "accept":
        assert listed == alone
    else:
        assert listed["code"] == alone["code"]
        assert f"for partition {managed} (Slurm may start it in any" in listed["message"]


@FAST
@given(job_desc())
def test_routing_only_picks_alloc_or_free(job: dict[str, Any]) -> None:
    reply = answer(job)
    if reply["action"] != "accept" or not managed_gpu_job(job):
        return
    changes = reply["set"]
    assert changes.get("qos") in (None, "alloc", "free")
    if job.get("qos") == "normal":
        assert "qos" not in changes and "time_min" not in changes
        return
    tree = CFG.budgets.user_accounts().get(job["user_name"], ())
    account = job.get("account") or (tree[0] if tree else None)
    if account not in {name for name, _parent in CFG.budgets.accounts()}:
        # policy.admission.unbudgeted: untouched (the default): Slurm's QOS, not routed
        assert "qos" not in changes and "time_min" not in changes
        assert recorded_min_runtime_min(changes.get("admin_comment", "")) is None
        return
    qos = changes.get("qos", job.get("qos"))
    assert qos in ("alloc", "free")
    if job.get("time_min") in (0, INFINITE):
        assert qos == "free"
    protected = recorded_min_runtime_min(changes["admin_comment"])
    if qos == "free":
        assert protected == 0
    else:
        cap = CFG.policy.contracts.min_runtime_cap_min
        limit = job.get("time_limit")
        assert protected is not None
        assert 0 < protected <= cap
        assert limit in (None, INFINITE) or protected <= limit
        asked = job.get("time_min")
        if asked not in (None, NO_VAL):
            assert protected == min(asked, cap, limit or asked)


@FAST
@given(job_desc())
def test_admission_never_gives_slurm_a_time_min(job: dict[str, Any]) -> None:
    """Slurm's --time-min lets backfill lower a job's time limit to it (a job submitted
    with --time=15 --time-min=1 was started with a 1-min limit and killed): admission
    never sets one, and clears the user's on every job it routes."""
    reply = answer(job)
    if reply["action"] != "accept":
        return
    changes = reply["set"]
    assert changes.get("time_min", NO_VAL) == NO_VAL
    routed = managed_gpu_job(job) and job.get("qos") != "normal"
    if routed and job.get("time_min") not in (None, NO_VAL):
        assert changes["time_min"] == NO_VAL
    if not routed:
        assert "time_min" not in changes


# --------------------------------------------------------------------------- fuzzing submitd

def policy_server() -> PolicyServer:
    refresher = StateRefresher(None, CFG)
    refresher.current = STATE
    return PolicyServer(CFG, refresher, clock=lambda: NOW)


SERVER = policy_server()
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**64, 2**64)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                               max_size=4),
    max_leaves=12,
)
FIELD_VALUES = st.one_of(
    JSON,
    st.sampled_from([NO_VAL, NO_VAL16, INFINITE, -1, 0, 2**63, 2.5, 1e300, float("nan"),
                     float("inf"), True, "", "gres:gpu:a100_80g:4",
                     "gres/gpu:16", "gpu", "gres/gpu:a100_80g=4", "gres:gpu:0", "a100_80g",
                     "[a100_80g|v100]", "gpu,debug", "gpu_mem=30G allow_fragment"]),
)
JOB_OBJECTS = st.builds(
    lambda owner, fields: {**owner, **fields},
    st.fixed_dictionaries({}, optional={"user_name": st.sampled_from(USERS)}),
    st.dictionaries(st.sampled_from(JOB_FIELDS), FIELD_VALUES, max_size=10),
)


def check_reply(reply: object) -> None:
    assert isinstance(reply, dict)
    assert reply.get("action") in ("accept", "reject", "error", "pong", "stats", "refreshing")
    json.dumps(reply)


@FAST
@given(st.binary(max_size=200))
def test_handle_line_survives_arbitrary_bytes(line: bytes) -> None:
    check_reply(SERVER.handle_line(line))


@FAST
@given(JSON)
def test_handle_line_survives_arbitrary_json(value: object) -> None:
    check_reply(SERVER.handle_line(json.dumps(value)))


@FAST
@given(st.sampled_from(["submit", "modify"]), JOB_OBJECTS, JOB_OBJECTS,
       st.one_of(st.none(), FIELD_VALUES))
def test_handle_line_survives_wrong_field_types(op: str, job: dict[str, Any],
                                                current: dict[str, Any], uid: object) -> None:
    line = json.dumps({"v": 1, "op": op, "uid": uid, "job": job, "current": current})
    check_reply(SERVER.handle_line(line))


@FAST
@given(st.sampled_from(["submit", "modify"]), JOB_OBJECTS, JOB_OBJECTS)
def test_wrong_field_types_are_bad_requests_not_internal_errors(
        op: str, job: dict[str, Any], current: dict[str, Any]) -> None:
    """Whatever the shim sends, submitd answers it or calls it a bad request; an
    ``internal error`` would mean decoding let a bad value through to the policy."""
    server = policy_server()
    line = json.dumps({"v": 1, "op": op, "uid": 0, "job": job, "current": current})
    reply = server.handle_line(line)
    check_reply(reply)
    assert server.counts["internal_error"] == 0, reply


# --------------------------------------------------------------------------- CPUs and memory


@st.composite
def job_desc_with_needs(draw: st.DrawFn) -> dict[str, Any]:
    """job_desc fields with CPUs and memory as sbatch sets them (one memory option)."""
    job = draw(job_desc())
    prefix = "gres/" if any("gres/" in str(v) for v in job.values()) else "gres:"
    if draw(st.booleans()):
        job["cpus_per_task"] = draw(st.integers(1, 96))
    elif draw(st.booleans()):
        job["cpus_per_tres"] = f"{prefix}gpu:{draw(st.integers(1, 20))}"
    mem = draw(st.sampled_from(["", "node", "cpu", "gpu"]))
    if mem == "node":
        job["min_mem_per_node"] = draw(st.sampled_from([0, 4096, 64000, 256000, 400000,
                                                        512000, 600000]))
    elif mem == "cpu":
        job["min_mem_per_cpu"] = draw(st.sampled_from([1000, 4000, 8000, 16000]))
    elif mem == "gpu":
        job["mem_per_tres"] = f"{prefix}gpu:{draw(st.sampled_from([8192, 32768, 65536, 102400]))}"
    return job


def _spec_count(spec: object) -> int | None:
    m = re.search(r"gpu:(\d+)$", str(spec or ""))
    return int(m[1]) if m else None


def node_share(job: Mapping[str, Any]) -> tuple[int, int, int, int]:
    """(nodes, GPUs, CPUs, MB) of each node of a job_desc, as Slurm would lay it out."""
    nodes = int(job.get("min_nodes") or 1)
    gpus = per_node_gpus(job)
    tasks, per_node = job.get("num_tasks"), job.get("ntasks_per_node")
    spread = math.ceil(tasks / nodes) if tasks else None
    on_node = min(per_node, spread) if per_node and spread else (per_node or spread or 1)
    cpus = on_node * (job.get("cpus_per_task") or 1)
    per_gpu = _spec_count(job.get("cpus_per_tres"))
    if per_gpu:
        cpus = max(cpus, gpus * per_gpu)
    mem = job.get("min_mem_per_node") or 0
    if job.get("min_mem_per_cpu"):
        mem = max(mem, cpus * job["min_mem_per_cpu"])
    mem_gpu = _spec_count(job.get("mem_per_tres"))
    if mem_gpu:
        mem = max(mem, gpus * mem_gpu)
    return nodes, gpus, cpus, mem


def holding_class(job: Mapping[str, Any]) -> str | None:
    """A node class of the job's GPU types whose nodes each hold the job's share of GPUs,
    CPUs and memory, with enough of them; None when there is none."""
    nodes, gpus, cpus, mem = node_share(job)
    types = allowed_types(job)
    for cls in CFG.node_classes:
        count = len(NodeSet(cls.nodes, resolver=RESOLVER_NOGROUP))
        if (cls.gpu_type in types and cls.gpus_per_node >= gpus and cls.cpus >= cpus
                and cls.memory_mb >= mem and count >= nodes):
            return cls.name
    return None


@FAST
@given(job_desc_with_needs())
def test_a_job_that_fits_a_node_class_still_fits_after_the_rewrite(job: dict[str, Any]) -> None:
    """Whatever admission does to a job that some node class can hold (GPUs, CPUs and
    memory per node), the job it accepts is one that a node class still holds."""
    before = normalize(job)
    if (not managed_gpu_job(job) or gpu_items(before.get("tres_per_socket"))
            or contradictory(job) or constraint_terms(str(before.get("features") or "")) is None
            or holding_class(before) is None):
        return
    reply = answer(job)
    if reply["action"] != "accept":
        return
    after = applied(job, reply)
    assert holding_class(after) is not None, (node_share(after), reply["set"])
