"""Admission in the simulator: each job goes through ``policy.admission.decide``, the
code submitd runs, before it is queued.

A trace gives GPU counts, rarely the GPU type a user named, the memory a job needs or
how a multi-GPU job is parallel. Where it lacks them they are drawn per job from the
scenario's ``requests`` section (seeded), and the run is marked synthetic. Each job is
then submitted as the sbatch line a user would write for it (``--gres=gpu:<type>:N``,
``-N k`` for whole nodes, ``gpu_mem=`` and ``parallel=`` in ``--comment``), built as
``submitd.wire.to_request`` builds it from that line (``tests/unit/test_sim_admission.py``
checks the two agree). With admission off a typed job runs on its type only, as Slurm
runs ``--gres=gpu:a100_80g:N``; with it on, on every type the decision allows
(capability matching widens, shaping fits the node classes). Pure: no I/O, the clock
passed in.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from slurm_ml.config import Config
from slurm_ml.model import GpuRequest
from slurm_ml.policy.admission import AdmissionDecision, decide, routing
from slurm_ml.policy.admission.cluster_view import ClusterView, cluster_view
from slurm_ml.policy.admission.request import JobRequest
from slurm_ml.policy.admission.state import AdmissionState
from slurm_ml.sim.scenario_file import RUN, Requests, ScenarioError
from slurm_ml.sim.workload import DEBUG, SimJob

__all__ = ["admit_jobs", "draw_contracts", "draw_requests", "job_request"]

#: the clock admission is called with; it only stamps the decision record
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def _pick(rng: random.Random, dist: Mapping[Any, float]) -> Any:
    u, acc = rng.random(), 0.0
    items = list(dist.items())
    for value, p in items:
        acc += p
        if u < acc:
            return value
    return items[-1][0]


def draw_requests(jobs: Sequence[SimJob], requests: Requests, *, seed: int,
                  gpu_types: Sequence[str], source: str = "<scenario>",
                  ) -> tuple[list[SimJob], dict[str, Any]]:
    """Each job with the GPU type and memory need it lacks drawn from ``requests``.

    Every job takes two draws from one stream seeded by ``seed``, so the values do not
    depend on which fields a trace already had. Returns the jobs and what the report
    records: the distributions, which fields were drawn and ``synthetic``.
    """
    unknown = sorted(set(requests.gpu_type) - set(gpu_types))
    if unknown:
        raise ScenarioError(f"{source}: requests.gpu_type names {', '.join(unknown)}, not a "
                            f"GPU type of this cluster ({', '.join(gpu_types)})")
    rng = random.Random(f"sim.admit requests {seed}")
    out: list[SimJob] = []
    drawn = {"gpu_type": 0, "mem_gb": 0}
    for job in jobs:
        t = _pick(rng, requests.gpu_type or {None: 1.0})
        changes: dict[str, Any] = {}
        if job.gpu_type is None and t is not None:
            changes["gpu_type"] = t
            drawn["gpu_type"] += 1
        asked: str | None = changes.get("gpu_type", job.gpu_type)
        own = requests.mem_gb_by_type.get(asked) if asked is not None else None
        m = _pick(rng, own or requests.mem_gb or {None: 1.0})
        if job.mem_gb is None and m is not None:
            changes["mem_gb"] = float(m)
            drawn["mem_gb"] += 1
        out.append(dataclasses.replace(job, **changes) if changes else job)
    out, drawn["parallel"] = _draw_parallel(out, requests.parallel, seed=seed)
    info = {"synthetic": any(drawn.values()), "drawn_jobs": drawn, "seed": seed,
            "gpu_type": dict(requests.gpu_type),
            "mem_gb": {f"{k:g}": v for k, v in requests.mem_gb.items()},
            "mem_gb_by_type": {t: {f"{k:g}": v for k, v in d.items()}
                               for t, d in requests.mem_gb_by_type.items()},
            "parallel": dict(requests.parallel),
            "note": "drawn per job from the scenario's requests distributions: the trace "
                    "has no GPU type, GPU memory or parallelism columns"}
    return out, info


def _draw_parallel(jobs: list[SimJob], parallel: Mapping[str, float], *,
                   seed: int) -> tuple[list[SimJob], int]:
    """Each job of several GPUs with the ``parallel=`` it lacks, drawn from ``parallel``;
    returns the jobs and how many were drawn.

    Its own stream, one draw for every job whatever its size: the type and memory draws
    stay what they were without it (so admission off runs the same jobs), and which
    jobs are data parallel does not depend on the sizes of the others. A one-GPU job has
    no GPUs to link, so it says nothing.
    """
    if not parallel:
        return jobs, 0
    rng = random.Random(f"sim.admit parallel {seed}")
    out: list[SimJob] = []
    drawn = 0
    for job in jobs:
        kind = _pick(rng, parallel)
        says = job.gpus > 1 and job.parallel is None
        drawn += says
        out.append(dataclasses.replace(job, parallel=kind) if says else job)
    return out, drawn


def draw_contracts(jobs: Sequence[SimJob], min_runtime_h: Mapping[float | str, float],
                   cfg: Config, *, seed: int) -> tuple[list[SimJob], dict[str, Any]]:
    """Each allocated trace job's minimum-runtime contract from the --time-min its user
    asks for, drawn from ``min_runtime_h`` (hours, or ``run``: its whole run), as
    admission routes it (``routing.protected_minutes``: capped at
    ``policy.contracts.min_runtime_cap_min``). Debug and free jobs keep theirs. Trace run
    times are what jobs ran, not their --time limits, so no time-limit cap applies.

    One draw per job from its own stream, so the type and memory draws do not move.
    """
    if not min_runtime_h:
        return list(jobs), {}
    rng = random.Random(f"sim.admit min_runtime {seed}")
    out: list[SimJob] = []
    drawn = capped = 0
    for job in jobs:
        h = _pick(rng, min_runtime_h)
        if job.min_runtime_s <= 0 or job.kind == DEBUG:
            out.append(job)
            continue
        asked = math.ceil(job.duration_s / 60) if h == RUN else math.ceil(float(h) * 60)
        minutes, _ = routing.protected_minutes(max(1, asked), None, cfg)
        capped += minutes < asked
        drawn += 1
        out.append(dataclasses.replace(job, min_runtime_s=minutes * 60.0))
    return out, {
        "min_runtime_h": {k if isinstance(k, str) else f"{k:g}": v
                          for k, v in min_runtime_h.items()},
        "contracts_drawn": drawn, "contracts_capped": capped,
        "min_runtime_cap_min": cfg.policy.contracts.min_runtime_cap_min,
        "contracts_note": "the --time-min each allocated trace job asks for is drawn "
                          "(the trace has none), then capped as admission caps it"}


def job_request(job: SimJob, *, gpus_per_node: int) -> JobRequest:
    """The JobRequest submitd would build for the sbatch line of this job: one node
    (``--gres=gpu:T:N``) up to ``gpus_per_node`` GPUs, whole nodes (``-N k
    --gres=gpu:T:<per node>``) for a multiple of it, else a per-job total (``--gpus=T:N``)
    for shaping to lay out; the memory need as ``gpu_mem=<GB>G`` and the parallelism as
    ``parallel=<kind>`` in --comment."""
    if job.gpus <= gpus_per_node:
        gpus, nodes = GpuRequest(count=job.gpus, per="node", gpu_type=job.gpu_type), None
    elif job.gpus % gpus_per_node == 0:
        nodes = job.gpus // gpus_per_node
        gpus = GpuRequest(count=gpus_per_node, per="node", gpu_type=job.gpu_type)
    else:
        gpus, nodes = GpuRequest(count=job.gpus, per="job", gpu_type=job.gpu_type), None
    keys = [] if job.mem_gb is None else [f"gpu_mem={job.mem_gb:g}G"]
    if job.parallel is not None:
        keys.append(f"parallel={job.parallel}")
    comment = " ".join(keys)
    return JobRequest(user=job.user, name="wrap", account=job.team, gpus=(gpus,),
                      min_nodes=nodes, max_nodes=nodes, comment=comment)


def allowed_types(decision: AdmissionDecision, req: JobRequest) -> tuple[str, ...] | None:
    """The GPU types an accepted job may run on: the widened set admission recorded,
    else the type it named (None: untyped, any type)."""
    types = decision.record.get("types")
    if isinstance(types, list) and types:
        return tuple(str(t) for t in types)
    typed = sorted(req.typed_gpus)
    return tuple(typed) if typed else None


def admit_jobs(jobs: Sequence[SimJob], cfg: Config, *, on: bool,
               view: ClusterView | None = None,
               state: AdmissionState | None = None) -> tuple[list[SimJob], dict[str, Any]]:
    """Each job with the GPU types it may run on. Off: its own type (``gpu_types``
    None). On: ``decide`` on its sbatch line; a rejected job keeps its own type (the
    user would resubmit it as asked) and is counted. Decisions are cached per (GPUs,
    type, need, parallelism, account): nothing else in the request differs between jobs."""
    if not on:
        return list(jobs), {"admission": "off"}
    view = view or cluster_view(cfg)
    state = state or AdmissionState()
    per_node = max((nc.gpus_per_node for nc in cfg.node_classes), default=1)
    cache: dict[tuple[int, str | None, float | None, str | None, str],
                tuple[tuple[str, ...] | None, bool]] = {}
    out: list[SimJob] = []
    widened = rejected = 0
    runs_on: dict[str, int] = {}
    for job in jobs:
        key = (job.gpus, job.gpu_type, job.mem_gb, job.parallel, job.team)
        got = cache.get(key)
        if got is None:
            req = job_request(job, gpus_per_node=per_node)
            decision = decide(req, cfg, view, state, EPOCH)
            got = ((allowed_types(decision, req), False) if decision.accept
                   else ((job.gpu_type,) if job.gpu_type else None, True))
            cache[key] = got
        types, refused = got
        rejected += refused
        widened += types is not None and job.gpu_type is not None and set(types) != {
            job.gpu_type}
        label = "|".join(types) if types else "any"
        runs_on[label] = runs_on.get(label, 0) + 1
        out.append(dataclasses.replace(job, gpu_types=types) if types is not None else job)
    return out, {"admission": "on", "jobs": len(out), "widened": widened,
                 "rejected": rejected, "decisions": len(cache),
                 "runs_on": dict(sorted(runs_on.items()))}
