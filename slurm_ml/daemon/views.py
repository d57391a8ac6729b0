"""Turn what Slurm and the store report into the value types the policies take (pure).

Billing: a job's GPUs count at their type's ``billing_weight`` (the same numbers the
rendered ``TRESBillingWeights`` use). A typed accounting entry (``gres/gpu:a100_80g``)
gives the type; GPUs accounted only as untyped ``gres/gpu`` are billed at weight 1.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime

from slurm_ml.config import Config, FairshareConfig
from slurm_ml.gres import tres_gpu_type
from slurm_ml.model import ALLOC_QOS, Job, JobState, JobUsage, Node, expand_hosts
from slurm_ml.policy.admission import contract_min_runtime_s
from slurm_ml.policy.admission.features import gpu_type_terms, parse_constraint
from slurm_ml.policy.cluster_jobs import RunningJob, WaitingJob
from slurm_ml.policy.fairshare import Footprint, PendingJob, is_short_job
from slurm_ml.policy.fairshare.gang import GangJob, is_gang
from slurm_ml.policy.fairshare.lane import LaneJob, is_short_work
from slurm_ml.policy.pending import ExcludedPending, code_of, wait_of, waits_for_gpus
from slurm_ml.policy.reclaim import CompletingJob, GpuSample, OrphanReport
from slurm_ml.policy.refunds import FaultDrain, Refund, refunds
from slurm_ml.store.records import AuditEntry, HealthEvent, ReconcilerDecision, UtilSample


def usage_billing_gpus(cfg: Config, u: JobUsage) -> float:
    """Billing GPUs of one accounted allocation."""
    return _UsageBilling(cfg)(u)


class _UsageBilling:
    """:func:`usage_billing_gpus` for many rows: each TRES name's weight looked up once
    (a window's 40,000 rows name a handful), the sum taken as that function defines."""

    def __init__(self, cfg: Config) -> None:
        self._cfg = cfg
        self._weights: dict[str, float | None] = {}  # None: not a typed GPU

    def _weight(self, key: str) -> float | None:
        name = tres_gpu_type(key)
        if name is None:
            return None
        gpu_type = self._cfg.gpu_types.get(name)
        return gpu_type.billing_weight if gpu_type else 1.0

    def __call__(self, u: JobUsage) -> float:
        weights = self._weights
        typed = 0.0
        billing = 0.0
        for key, count in u.alloc_tres.items():
            if key in weights:
                weight = weights[key]
            else:
                weight = weights[key] = self._weight(key)
            if weight is not None:
                typed += count
                billing += count * weight
        untyped = u.alloc_tres.get("gres/gpu", 0.0) - typed
        return billing + max(0.0, untyped)


#: A Slurm host list as node names (the one reader, in the model layer).
expand = expand_hosts


def job_gpu_type(cfg: Config, job: Job, nodes: Sequence[str] | None = None) -> str | None:
    """The GPU type a running job got: its nodes' class, else the type it asked for."""
    for node in expand(job.nodes) if nodes is None else nodes:
        t = cfg.gpu_type_of_node(node)
        if t is not None:
            return t.name
    typed = {g.gpu_type for g in job.gpus if g.gpu_type}
    return typed.pop() if len(typed) == 1 else None


def acceptable_types(cfg: Config, job: Job) -> frozenset[str]:
    """GPU types a pending job may run on (empty = any): typed GRES, else the constraint."""
    return _acceptable_types(job, _feature_to_type(cfg))


def _feature_to_type(cfg: Config) -> tuple[tuple[str, str], ...]:
    return tuple((t.feature, n) for n, t in cfg.gpu_types.items())


def _acceptable_types(job: Job, feature_to_type: tuple[tuple[str, str], ...]) -> frozenset[str]:
    typed = frozenset(g.gpu_type for g in job.gpus if g.gpu_type)
    if typed:
        return typed
    if not job.features:
        return frozenset()
    return _constraint_types(job.features, feature_to_type)


@functools.lru_cache(maxsize=4096)
def _constraint_types(features: str, feature_to_type: tuple[tuple[str, str], ...],
                      ) -> frozenset[str]:
    constraint = parse_constraint(features)
    if constraint is None:
        return frozenset()
    return gpu_type_terms(constraint, dict(feature_to_type))


def job_billing_gpus(cfg: Config, job: Job, gpu_type: str | None = None,
                     types: Iterable[str] = ()) -> float:
    """Billing GPUs of a job: its type's weight, or the highest of the types it accepts
    (any type, when it names none)."""
    return job.total_gpus * _billing_weight(cfg, gpu_type, types)


def _billing_weight(cfg: Config, gpu_type: str | None, types: Iterable[str]) -> float:
    """The weight :func:`job_billing_gpus` bills a job's GPUs at."""
    names = [gpu_type] if gpu_type else (list(types) or list(cfg.gpu_types))
    weights = [cfg.gpu_types[n].billing_weight for n in names if n in cfg.gpu_types]
    return max(weights) if weights else 1.0


def footprints(cfg: Config, jobs: Sequence[Job], usage: Sequence[JobUsage],
               refunded: Collection[tuple[int, int]] = ()) -> list[Footprint]:
    """The window's allocations (from slurmdbd) plus the jobs pending now (from slurmctld)
    that wait for GPUs: a held, dependent or limit-blocked job is no demand.

    ``refunded``: (job id, start) of runs a fault ended (:func:`run_refunds`): they
    delivered nothing, though the team asked for GPUs all the same (demand stays)."""
    return CycleJobs(cfg, jobs).footprints(usage, refunded)


def usage_footprints(cfg: Config, usage: Sequence[JobUsage],
                     refunded: Collection[tuple[int, int]] = ()) -> list[Footprint]:
    """The window's allocations as :func:`footprints` has them (its first part)."""
    billing = _UsageBilling(cfg)
    # sacct --truncate ends a run still going at the window's end (now): it has not
    # ended, and fair share counts it as running now (its GPUs, for the entitlement)
    return [Footprint(job_id=u.job_id, account=u.account, user=u.user,
                      billing_gpus=billing(u), allocated=u.qos == ALLOC_QOS,
                      pending_from=u.submit, run_from=u.start,
                      until=None if u.state == JobState.RUNNING else u.end)
            if (u.job_id, u.start) not in refunded else
            Footprint(job_id=u.job_id, account=u.account, user=u.user,
                      billing_gpus=billing(u), allocated=u.qos == ALLOC_QOS,
                      pending_from=u.submit if u.submit is not None else u.start,
                      run_from=None, until=u.end)
            for u in usage if u.gpus > 0]


def pending_jobs(jobs: Sequence[Job], cfg: FairshareConfig) -> list[PendingJob]:
    """Pending jobs as fair share sees them (only those that wait for GPUs: the others
    are not ranked either); ``short`` from the recorded contract."""
    return _pending_of(_waiting_rows(jobs, _Contracts()), cfg)


def _pending_of(rows: Iterable[_Row], cfg: FairshareConfig) -> list[PendingJob]:
    """:func:`pending_jobs` of the rows :func:`_waiting_rows` gives."""
    shorts: dict[tuple[int | None, int | None], bool] = {}  # few distinct contracts
    out = []
    for j, _gpus, protected in rows:
        key = (protected, j.time_limit_min)
        short = shorts.get(key)
        if short is None:
            short = shorts[key] = is_short_job(
                None if protected is None else protected / 60, j.time_limit_min, cfg)
        out.append(PendingJob(job_id=j.job_id, account=j.account, user=j.user, qos=j.qos,
                              nice=j.nice, short=short))
    return out


def lane_jobs(cfg: Config, jobs: Sequence[Job]) -> tuple[list[LaneJob], list[LaneJob]]:
    """Short alloc work the fast lane counts, as (pending, running): pending jobs that
    wait for GPUs (the ones :func:`pending_jobs` ranks) and running ones, each within
    ``policy.fast_lane.max_job_gpus``."""
    return CycleJobs(cfg, jobs).lane


def running_jobs(cfg: Config, jobs: Sequence[Job]) -> list[RunningJob]:
    return CycleJobs(cfg, jobs).running


def waiting_jobs(cfg: Config, jobs: Sequence[Job]) -> list[WaitingJob]:
    """Pending GPU jobs that wait for GPUs, in Slurm's order (highest priority first,
    then submit time)."""
    return CycleJobs(cfg, jobs).waiting


#: A job with its GPUs (``Job.total_gpus``) and contract (:func:`protected_s`).
_Row = tuple[Job, int, int | None]


class _Contracts:
    """:func:`protected_s`, read once per distinct record: admission writes the same few
    records on most jobs, and each read parses JSON."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, int | None], int | None] = {}

    def __call__(self, j: Job) -> int | None:
        key = (j.admin_comment, j.time_min_min)
        if key in self._seen:
            return self._seen[key]
        got = self._seen[key] = protected_s(j)
        return got


def _waiting_rows(jobs: Iterable[Job], contract: _Contracts) -> list[_Row]:
    """The pending jobs that wait for GPUs (any number of them), in the jobs' order."""
    waits: dict[str, bool] = {}  # a queue of 50,000 jobs has a handful of reasons
    out: list[_Row] = []
    for j in jobs:
        if j.state != JobState.PENDING:
            continue
        wait = waits.get(j.reason)
        if wait is None:
            wait = waits[j.reason] = waits_for_gpus(j.reason)
        if wait:
            out.append((j, j.total_gpus, contract(j)))
    return out
#: A pending job that waits for GPUs and asks for some: its acceptable types and billing.
_Priced = tuple[Job, int, frozenset[str], float]


class CycleJobs:
    """slurmctld's jobs as one cycle reads them: fair share's pending jobs and demand,
    Slurm's waiting queue, the fast lane's and the running jobs.

    A cycle reads the same 60,000 jobs in each of these ways, and each used to work out
    a job's GPUs, contract, acceptable types and billing again: that was most of the
    cycle's time. Here each is worked out once per job, and each list is built when it
    is first read (a command that shows the running jobs pays for no pending one). The
    lists are this object's own: a caller that changes one changes it for later reads.
    """

    def __init__(self, cfg: Config, jobs: Sequence[Job]) -> None:
        self._cfg = cfg
        self._jobs = jobs
        self._contract = _Contracts()
        self._built: dict[int, WaitingJob] = {}  # by order

    @functools.cached_property
    def _waiting_rows(self) -> list[_Row]:
        return _waiting_rows(self._jobs, self._contract)

    @functools.cached_property
    def _running_rows(self) -> list[_Row]:
        """The running jobs, in the jobs' order."""
        return [(j, j.total_gpus, self._contract(j))
                for j in self._jobs if j.state == JobState.RUNNING]

    @functools.cached_property
    def _priced(self) -> list[_Priced]:
        """The waiting jobs that ask for GPUs, with the types they accept and their
        billing GPUs (:func:`acceptable_types`, :func:`job_billing_gpus`)."""
        cfg = self._cfg
        features = _feature_to_type(cfg)
        one_type: dict[str, frozenset[str]] = {}
        weight_of: dict[frozenset[str], float] = {}
        out: list[_Priced] = []
        for j, gpus, _protected in self._waiting_rows:
            if gpus <= 0:
                continue
            requests = j.gpus
            if len(requests) == 1 and requests[0].gpu_type:  # the common request
                name = requests[0].gpu_type
                types = one_type.get(name)
                if types is None:
                    types = one_type[name] = frozenset((name,))
            else:
                types = _acceptable_types(j, features)
            weight = weight_of.get(types)
            if weight is None:
                weight = weight_of[types] = _billing_weight(cfg, None, types)
            out.append((j, gpus, types, gpus * weight))
        return out

    @functools.cached_property
    def pending(self) -> list[PendingJob]:
        """:func:`pending_jobs`."""
        return _pending_of(self._waiting_rows, self._cfg.policy.fairshare)

    def footprints(self, usage: Sequence[JobUsage],
                   refunded: Collection[tuple[int, int]] = ()) -> list[Footprint]:
        """:func:`footprints`."""
        return [*usage_footprints(self._cfg, usage, refunded), *self.demand]

    @functools.cached_property
    def demand(self) -> list[Footprint]:
        """The pending part of :func:`footprints`."""
        return [Footprint(job_id=j.job_id, account=j.account, user=j.user,
                          billing_gpus=billing, allocated=j.qos == ALLOC_QOS,
                          pending_from=j.submit_time, run_from=None, until=None)
                for j, _gpus, _types, billing in self._priced]

    @functools.cached_property
    def waiting(self) -> list[WaitingJob]:
        """:func:`waiting_jobs`."""
        return self.waiting_where(lambda _job: True)

    @functools.cached_property
    def _in_order(self) -> list[_Priced]:
        """:attr:`_priced` in Slurm's order (highest priority first, then submit time)."""
        return sorted(self._priced, key=lambda r: (-(r[0].priority or 0), r[0].submit_time or 0,
                                                   r[0].job_id))

    def waiting_order(self) -> list[Job]:
        """The jobs of :attr:`waiting`, in its order, none built as a ``WaitingJob``."""
        return [row[0] for row in self._in_order]

    def waiting_where(self, keep: Callable[[Job], bool]) -> list[WaitingJob]:
        """Those of :attr:`waiting` whose job ``keep`` takes, in its order; only those
        are built (the contracts ask for the alloc jobs of starving accounts alone, and
        most cycles for none), each once, so that every read gives the same values."""
        built = self._built
        out = []
        for order, row in enumerate(self._in_order):
            if not keep(row[0]):
                continue
            got = built.get(order)
            if got is None:
                j, gpus, types, billing = row
                got = built[order] = WaitingJob(
                    job_id=j.job_id, account=j.account, user=j.user, qos=j.qos, gpus=gpus,
                    gpu_types=types, billing_gpus=billing, submit=j.submit_time or 0,
                    reason=j.reason, order=order)
            out.append(got)
        return out

    @functools.cached_property
    def gangs(self) -> list[GangJob]:
        """The waiting alloc jobs the gang rule may raise (``fairshare.gang.is_gang``):
        none when the rule is off."""
        fcfg = self._cfg.policy.fairshare
        return [GangJob(job_id=j.job_id, gpus=gpus, submit=j.submit_time or 0, nice=j.nice)
                for j, gpus, _protected in self._waiting_rows
                if j.submit_time is not None and is_gang(gpus, fcfg, j.qos)]

    @functools.cached_property
    def lane(self) -> tuple[list[LaneJob], list[LaneJob]]:
        """:func:`lane_jobs`."""
        fcfg, most = self._cfg.policy.fairshare, self._cfg.policy.fast_lane.max_job_gpus
        pending: list[LaneJob] = []
        running: list[LaneJob] = []
        for rows, out in ((self._waiting_rows, pending), (self._running_rows, running)):
            for j, gpus, protected in rows:
                if j.qos != ALLOC_QOS or not 0 < gpus <= most:
                    continue
                if not is_short_work(None if protected is None else protected / 60,
                                     j.time_limit_min, fcfg):
                    continue
                out.append(LaneJob(job_id=j.job_id, account=j.account, gpus=gpus,
                                   submit=j.submit_time or 0, nice=j.nice))
        return pending, running

    @functools.cached_property
    def running(self) -> list[RunningJob]:
        """:func:`running_jobs`."""
        cfg = self._cfg
        weight_of: dict[str | None, float] = {}
        out = []
        for j, gpus, protected in self._running_rows:
            if not j.start_time or gpus <= 0:
                continue
            names = expand(j.nodes)
            gpu_type = job_gpu_type(cfg, j, names)
            weight = weight_of.get(gpu_type)
            if weight is None:
                weight = weight_of[gpu_type] = _billing_weight(cfg, gpu_type, ())
            out.append(RunningJob(
                job_id=j.job_id, name=j.name, account=j.account, user=j.user, qos=j.qos,
                gpus=gpus, gpu_type=gpu_type, billing_gpus=gpus * weight, nodes=names,
                start=j.start_time, time_min_s=protected, requeue=j.requeue, batch=j.batch))
        return out


def fault_drains(entries: Iterable[AuditEntry]) -> list[FaultDrain]:
    """slurm-ml's health drains in the audit log (``drain`` by a hook, applied), as the
    refund rule reads them: an operator's drain or one that Slurm refused ends no job."""
    out = []
    for e in entries:
        hook = e.details.get("hook")
        if e.action != "drain" or not isinstance(hook, str) or e.details.get("applied") is False:
            continue
        job = e.details.get("job_id")
        findings = e.details.get("findings")
        checks = e.details.get("checks")
        names = checks if isinstance(checks, list) else [
            f.get("check_id") for f in findings if isinstance(f, dict)
        ] if isinstance(findings, list) else []
        reason = e.details.get("reason")
        out.append(FaultDrain(key=e.idempotency_key, node=e.target, at=_epoch(e.at), hook=hook,
                              job_id=job if isinstance(job, int) else None,
                              checks=tuple(dict.fromkeys(str(n) for n in names if n)),
                              reason=reason if isinstance(reason, str) else ""))
    return out


def repair_drains(decisions: Iterable[ReconcilerDecision]) -> list[FaultDrain]:
    """The daemon's requeues for a repair at the contract of a node with a finding, as
    drains naming the job (hook ``repair``): the fault ended that run. A requeue for an
    admin's maintenance is no fault and refunds nothing."""
    out = []
    for d in decisions:
        node, checks = d.details.get("node"), d.details.get("checks")
        if d.kind != "repair_requeue" or d.job_id is None or d.details.get("cause") != "finding":
            continue
        out.append(FaultDrain(key=d.idempotency_key, node=node if isinstance(node, str) else "",
                              at=_epoch(d.decided_at), hook="repair", job_id=d.job_id,
                              checks=tuple(str(c) for c in checks)
                              if isinstance(checks, list) else (),
                              reason=str(d.details.get("drain_reason") or "")))
    return out


def run_refunds(cfg: Config, usage: Sequence[JobUsage],
                drains: Sequence[FaultDrain]) -> list[Refund]:
    """The window's runs a slurm-ml drain ended (:mod:`slurm_ml.policy.refunds`); only
    charged (QOS alloc) runs: a free run costs its team nothing to refund."""
    if not drains:
        return []
    return refunds([u for u in usage if u.qos == ALLOC_QOS], drains,
                   lambda u: expand(u.nodes), _UsageBilling(cfg),
                   cfg.policy.fairshare.refund_slack_s)


def excluded_pending(cfg: Config, jobs: Sequence[Job]) -> list[ExcludedPending]:
    """Pending GPU jobs that are not demand, per association and Slurm reason code (what
    ``budget status`` shows apart from the pending GPUs it counts)."""
    acc: dict[tuple[str, str, str], tuple[int, int, float]] = {}
    for j in jobs:
        if j.state != JobState.PENDING or j.total_gpus <= 0 or waits_for_gpus(j.reason):
            continue
        key = (j.account, j.user, code_of(j.reason))
        n, g, b = acc.get(key, (0, 0, 0.0))
        acc[key] = (n + 1, g + j.total_gpus,
                    b + job_billing_gpus(cfg, j, types=acceptable_types(cfg, j)))
    return [ExcludedPending(account=a, user=u, reason=code, wait=wait_of(code), jobs=n,
                            gpus=g, billing_gpus=b)
            for (a, u, code), (n, g, b) in sorted(acc.items())]


def protected_s(job: Job) -> int | None:
    """The job's minimum-runtime contract in seconds: what admission recorded in
    AdminComment, else Slurm's TimeMin (jobs admitted before the record existed)."""
    return contract_min_runtime_s(job.admin_comment, job.time_min_min)


def free_gpus(cfg: Config, nodes: Sequence[Node], running: Sequence[RunningJob]) -> dict[str, int]:
    """Idle GPUs per type on nodes that can take work (not drained, down or failing)."""
    busy: dict[str, int] = {}
    for r in running:
        per_node = r.gpus // max(1, len(r.nodes)) if r.nodes else 0
        for name in r.nodes:
            busy[name] = busy.get(name, 0) + per_node
    out: dict[str, int] = {}
    for node in nodes:
        node_class = cfg.node_class_of(node.name)
        if node_class is None or node.drained or node.state in _UNUSABLE \
                or "NOT_RESPONDING" in node.flags:
            continue
        total = node.gpus_total or node_class.gpus_per_node
        gtype = node_class.gpu_type
        out[gtype] = out.get(gtype, 0) + max(0, total - busy.get(node.name, 0))
    return out


_UNUSABLE = frozenset({"DOWN", "FAIL", "FUTURE", "UNKNOWN"})


def completing_jobs(jobs: Sequence[Job]) -> list[CompletingJob]:
    return [CompletingJob(job_id=j.job_id, nodes=expand(j.nodes), ended_at=j.end_time)
            for j in jobs if j.state == JobState.COMPLETING]


def _epoch(at: datetime) -> int:
    return int(at.timestamp())


def gpu_samples(samples: Mapping[int, Sequence[UtilSample]]) -> dict[int, list[GpuSample]]:
    # the health check samples every GPU of a node at once: a heartbeat window of tens of
    # thousands of samples has far fewer distinct times
    epochs: dict[datetime, int] = {}

    def epoch(at: datetime) -> int:
        got = epochs.get(at)
        if got is None:
            got = epochs[at] = _epoch(at)
        return got

    return {job: [GpuSample(job_id=s.job_id, node=s.node, gpu=s.gpu_index, at=epoch(s.sampled_at),
                            util_pct=s.util_pct, mem_mb=s.mem_used_mb) for s in rows]
            for job, rows in samples.items()}


def orphan_reports(events: Sequence[HealthEvent]) -> list[OrphanReport]:
    out = []
    for e in events:
        pids = e.details.get("pids")
        out.append(OrphanReport(
            node=e.node, at=_epoch(e.observed_at), gpu=e.gpu_index,
            pids=tuple(int(p) for p in pids if isinstance(p, int)) if isinstance(pids, list)
            else ()))
    return out
