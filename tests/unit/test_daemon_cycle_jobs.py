"""``views.CycleJobs`` reads each job once for the whole cycle; what it gives must be what
reading every job on its own gives (the reference functions below are the daemon's
views as they were, one job at a time), on a queue that mixes every shape a job takes:
typed and untyped requests, several GRES records, constraints, allocations, recorded
contracts, reasons that are and are not demand, jobs without GPUs or a start."""

from __future__ import annotations

import itertools
import random

from daemon_helpers import CFG, NOW

from slurm_ml.config import Config
from slurm_ml.daemon import views
from slurm_ml.daemon.plan import ObservedQueue
from slurm_ml.model import ALLOC_QOS, GpuRequest, Job, JobState, JobUsage
from slurm_ml.policy.cluster_jobs import RunningJob, WaitingJob
from slurm_ml.policy.fairshare import Footprint, PendingJob, is_short_job
from slurm_ml.policy.fairshare.lane import LaneJob, is_short_work
from slurm_ml.policy.pending import waits_for_gpus

REASONS = ("Resources", "Priority", "Dependency", "JobHeldUser", "QOSMaxGRESPerUser",
           "ReqNodeNotAvail, Reserved for maintenance", "BeginTime")
REQUESTS = (
    (GpuRequest(1, "node", "a100_80g"),),
    (GpuRequest(4, "node", "v100"),),
    (GpuRequest(2, "node", None),),
    (GpuRequest(8, "job", None),),
    (GpuRequest(1, "task", "a100_40g"),),
    (GpuRequest(1, "socket", None),),
    (GpuRequest(2, "node", "a100_80g"), GpuRequest(2, "node", "a100_40g")),
    (GpuRequest(0, "node", None),),
    (),
)
FEATURES = ("", "a100_80g|a100_40g", "v100", "nvlink", "a100_80g&nvlink")
RECORDS = ("", 'slurm-ml {"min_runtime": 10}', 'slurm-ml {"min_runtime": 120}',
           "slurm-ml not json", "a comment of the site's")
USERS = (("llm-pretrain", "alice"), ("llm-pretrain", "bob"), ("llm-eval", "carol"),
         ("detection", "dave"), ("detection", "alice"), ("nowhere", "zed"))


def jobs(n: int = 600, seed: int = 3) -> list[Job]:
    rng = random.Random(seed)
    out = []
    for job_id in range(1, n + 1):
        state = rng.choice((JobState.PENDING, JobState.PENDING, JobState.RUNNING,
                            JobState.COMPLETING, JobState.SUSPENDED))
        account, user = rng.choice(USERS)
        running = state == JobState.RUNNING
        out.append(Job(
            job_id=job_id, name=f"j{job_id}", user=user, account=account, partition="gpu",
            qos=rng.choice((ALLOC_QOS, ALLOC_QOS, "free")), state=state,
            reason=rng.choice(REASONS) if state == JobState.PENDING else "None",
            nodes=rng.choice(("gpu01", "gpu[03-04]", "cpu1", "")) if running else "",
            num_nodes=rng.choice((1, 1, 2)), gpus=rng.choice(REQUESTS),
            time_limit_min=rng.choice((30, 60, 600, None)),
            time_min_min=rng.choice((5, 60, None)), requeue=rng.random() < 0.5,
            site_factor=None, priority=rng.choice((None, 10, 500, 500)),
            submit_time=rng.choice((None, NOW - 7200, NOW - 60)),
            start_time=rng.choice((None, NOW - 3600)) if running else None,
            features=rng.choice(FEATURES), admin_comment=rng.choice(RECORDS),
            nice=rng.choice((0, 0, 50, -10)), batch=rng.random() < 0.8,
            num_tasks=rng.choice((None, 2)), sockets_per_node=rng.choice((None, 2)),
            alloc_gpus=rng.choice((None, None, 3)) if running else None))
    return out


def usage_rows() -> list[JobUsage]:
    tres = ({"gres/gpu": 4.0, "gres/gpu:a100_80g": 4.0}, {"gres/gpu": 2.0},
            {"gres/gpu": 3.0, "gres/gpu:v100": 1.0, "gres/gpu:h100": 1.0}, {"cpu": 8.0})
    return [JobUsage(job_id=1000 + i, user=user, account=account, qos=qos,
                     state=JobState.RUNNING if i % 3 == 0 else JobState.COMPLETED,
                     elapsed_s=600, alloc_tres=dict(t), start=NOW - 7200 + i,
                     end=None if i % 3 == 0 else NOW - 60, submit=None if i % 4 else NOW - 9000)
            for i, ((account, user), t, qos) in enumerate(
                itertools.product(USERS, tres, (ALLOC_QOS, "free")))]


# The reference: each job read on its own.


def ref_pending(js: list[Job], cfg: Config) -> list[PendingJob]:
    return [PendingJob(job_id=j.job_id, account=j.account, user=j.user, qos=j.qos,
                       nice=j.nice,
                       short=is_short_job(None if (s := views.protected_s(j)) is None
                                          else s / 60, j.time_limit_min, cfg.policy.fairshare))
            for j in js if j.state == JobState.PENDING and waits_for_gpus(j.reason)]


def ref_demand(js: list[Job], cfg: Config) -> list[Footprint]:
    return [Footprint(job_id=j.job_id, account=j.account, user=j.user,
                      billing_gpus=views.job_billing_gpus(
                          cfg, j, types=views.acceptable_types(cfg, j)),
                      allocated=j.qos == ALLOC_QOS, pending_from=j.submit_time, run_from=None,
                      until=None)
            for j in js
            if j.state == JobState.PENDING and j.total_gpus > 0 and waits_for_gpus(j.reason)]


def ref_waiting(js: list[Job], cfg: Config) -> list[WaitingJob]:
    pending = [j for j in js if j.state == JobState.PENDING and j.total_gpus > 0
               and waits_for_gpus(j.reason)]
    pending.sort(key=lambda j: (-(j.priority or 0), j.submit_time or 0, j.job_id))
    return [WaitingJob(job_id=j.job_id, account=j.account, user=j.user, qos=j.qos,
                       gpus=j.total_gpus, gpu_types=views.acceptable_types(cfg, j),
                       billing_gpus=views.job_billing_gpus(
                           cfg, j, types=views.acceptable_types(cfg, j)),
                       submit=j.submit_time or 0, reason=j.reason, order=order)
            for order, j in enumerate(pending)]


def ref_lane(js: list[Job], cfg: Config) -> tuple[list[LaneJob], list[LaneJob]]:
    pending: list[LaneJob] = []
    running: list[LaneJob] = []
    for j in js:
        if j.qos != ALLOC_QOS or not 0 < j.total_gpus <= cfg.policy.fast_lane.max_job_gpus:
            continue
        if j.state == JobState.PENDING and not waits_for_gpus(j.reason):
            continue
        if j.state not in (JobState.PENDING, JobState.RUNNING):
            continue
        protected = views.protected_s(j)
        if not is_short_work(None if protected is None else protected / 60,
                             j.time_limit_min, cfg.policy.fairshare):
            continue
        (pending if j.state == JobState.PENDING else running).append(LaneJob(
            job_id=j.job_id, account=j.account, gpus=j.total_gpus, submit=j.submit_time or 0,
            nice=j.nice))
    return pending, running


def ref_running(js: list[Job], cfg: Config) -> list[RunningJob]:
    out = []
    for j in js:
        if j.state != JobState.RUNNING or not j.start_time or j.total_gpus <= 0:
            continue
        names = views.expand(j.nodes)
        gpu_type = views.job_gpu_type(cfg, j, names)
        out.append(RunningJob(
            job_id=j.job_id, name=j.name, account=j.account, user=j.user, qos=j.qos,
            gpus=j.total_gpus, gpu_type=gpu_type,
            billing_gpus=views.job_billing_gpus(cfg, j, gpu_type), nodes=names,
            start=j.start_time, time_min_s=views.protected_s(j), requeue=j.requeue,
            batch=j.batch))
    return out


def ref_usage_footprints(cfg: Config, rows: list[JobUsage],
                         refunded: set[tuple[int, int]]) -> list[Footprint]:
    out = []
    for u in rows:
        if u.gpus <= 0:
            continue
        typed = billing = 0.0
        for key, count in u.alloc_tres.items():
            name = key.partition(":")[2] if key.startswith("gres/gpu:") else None
            if name:
                gpu_type = cfg.gpu_types.get(name)
                typed += count
                billing += count * (gpu_type.billing_weight if gpu_type else 1.0)
        billing += max(0.0, u.alloc_tres.get("gres/gpu", 0.0) - typed)
        done = (u.job_id, u.start) in refunded
        out.append(Footprint(
            job_id=u.job_id, account=u.account, user=u.user, billing_gpus=billing,
            allocated=u.qos == ALLOC_QOS,
            pending_from=(u.submit if u.submit is not None else u.start) if done else u.submit,
            run_from=None if done else u.start,
            until=u.end if done or u.state != JobState.RUNNING else None))
    return out


def test_the_cycles_job_lists_are_those_of_each_job_read_alone() -> None:
    js = jobs()
    table = views.CycleJobs(CFG, js)
    assert table.pending == ref_pending(js, CFG) == views.pending_jobs(js, CFG.policy.fairshare)
    assert table.waiting == ref_waiting(js, CFG) == views.waiting_jobs(CFG, js)
    assert table.lane == ref_lane(js, CFG) == views.lane_jobs(CFG, js)
    assert table.running == ref_running(js, CFG) == views.running_jobs(CFG, js)
    assert table.demand == ref_demand(js, CFG)
    # every shape is there: the lists are not trivially equal
    assert table.lane[0] and table.lane[1] and table.running and len(table.waiting) > 50
    assert {w.gpu_types for w in table.waiting} >= {frozenset(), frozenset({"v100"}),
                                                   frozenset({"a100_80g", "a100_40g"})}


def test_the_windows_footprints_are_those_of_each_row_read_alone() -> None:
    js, rows = jobs(), usage_rows()
    refunded = {(rows[1].job_id, rows[1].start), (rows[6].job_id, rows[6].start)}
    got = views.footprints(CFG, js, rows, refunded)
    assert got == ref_usage_footprints(CFG, rows, refunded) + ref_demand(js, CFG)
    assert got == views.CycleJobs(CFG, js).footprints(rows, refunded)
    assert [views.usage_billing_gpus(CFG, u) for u in rows if u.gpus > 0] == [
        f.billing_gpus for f in ref_usage_footprints(CFG, rows, set())]


def test_the_observed_queue_reads_the_waiting_jobs_but_those_room_is_coming_for() -> None:
    js = jobs()
    full = ref_waiting(js, CFG)
    coming = {w.job_id for w in full[::7]}
    left = [w for w in full if w.job_id not in coming]
    queue = ObservedQueue(views.CycleJobs(CFG, js), coming)
    accounts = queue.alloc_accounts()
    assert accounts == list(dict.fromkeys(w.account for w in left if w.qos == ALLOC_QOS))
    some = accounts[:2]
    assert queue.alloc_jobs(some) == [w for w in left
                                      if w.qos == ALLOC_QOS and w.account in some]
    ids = {w.job_id for w in full[::3]}
    assert queue.jobs(ids) == [w for w in left if w.job_id in ids]
    # a second read gives the very values of the first
    assert all(a is b for a, b in zip(queue.jobs(ids), queue.jobs(ids), strict=True))
