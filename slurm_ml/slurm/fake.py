"""FakeSlurm: a stateful in-memory Slurm for unit tests of code above the boundary.

It keeps jobs, nodes and accounting in dicts and behaves like slurmctld for
the operations in :class:`SlurmClient` (unknown ids raise SlurmCommandError
with Slurm's own message, requeue puts a job back to PENDING, and so on).
It also counts calls, so tests can check batching. Tests shape jobs with
:meth:`FakeSlurm.add_job`, :meth:`~FakeSlurm.set_job` and the state helpers
(:meth:`~FakeSlurm.start`, :meth:`~FakeSlurm.pend`, :meth:`~FakeSlurm.completing`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from slurm_ml.model import GpuRequest, Job, JobAccounting, JobState, JobUsage, Node
from slurm_ml.slurm.batching import site_factor_scripts
from slurm_ml.slurm.errors import SlurmCommandError
from slurm_ml.slurm.priority import PriorityParts
from slurm_ml.slurm.protocol import ArrayRequest, JobSignal, SubmitRequest
from slurm_ml.slurm.tres import parse_gpu_spec
from slurm_ml.slurm.version import SlurmVersion

_ENDED = {JobState.COMPLETED, JobState.CANCELLED, JobState.FAILED, JobState.TIMEOUT,
          JobState.NODE_FAIL, JobState.PREEMPTED, JobState.OUT_OF_MEMORY}
#: Pending reasons sprio has no row for: slurmctld computes no priority for these jobs.
_NO_PRIORITY = {"JobHeldUser", "JobHeldAdmin", "Dependency", "BeginTime"}
#: Reasons slurmctld blanks (to None) when a pending job's SiteFactor is updated, until its
#: scheduler next reaches the job (22.05 on the dev cluster: Resources -> None at once,
#: back 1.5 s later). See ``FakeSlurm.scheduler_lag``.
_BLANKED_BY_UPDATE = {"Resources", "Priority"}


class FakeSlurm:
    def __init__(self, nodes: Iterable[Node] = (), *, version: str = "22.05.8",
                 batch_size: int = 100) -> None:
        self.nodes: dict[str, Node] = {n.name: n for n in nodes}
        self.jobs: dict[int, Job] = {}
        self.usage: list[JobUsage] = []
        #: slurmdbd's job records (sacct -j, accounted_jobs); tests add them
        self.accounting: dict[int, JobAccounting] = {}
        self.runaway: set[int] = set()
        #: user → DefaultAccount, for default_accounts() (sacctmgr show user)
        self.user_default_accounts: dict[str, str] = {}
        #: Weighted priority factors per job (PriorityParts field -> value), for sprio.
        self.factors: dict[int, dict[str, int]] = {}
        self.calls: list[tuple[str, ...]] = []
        #: True: a SiteFactor update blanks a pending job's Resources/Priority reason to
        #: None, as slurmctld does until its scheduler next reaches the job, and it stays
        #: None until :meth:`scheduler_pass` (the fake has no scheduler). False (default):
        #: the scheduler has reached every job again by the next read.
        self.scheduler_lag = False
        self._blanked: dict[int, str] = {}
        #: Signals sent with signal_job, in order: (job id, signal, target).
        self.signals: list[tuple[int, str, str]] = []
        #: A job's own --signal (its #SBATCH line), for job_signal(); tests set it.
        self.job_signals: dict[int, JobSignal] = {}
        #: Job arrays from submit_array: id -> (request, index -> state); tests end tasks
        #: with finish_task, and ``on_poll`` (if set) runs at each array_tasks call.
        self.arrays: dict[int, tuple[ArrayRequest, dict[int, str]]] = {}
        self.on_poll: Any = None
        self.batch_size = batch_size
        self._version = SlurmVersion.parse(version)
        self._next_id = 1

    def _call(self, *argv: str) -> None:
        self.calls.append(argv)

    def _err(self, what: str) -> SlurmCommandError:
        return SlurmCommandError(("scontrol",), 1, what)

    def version(self) -> SlurmVersion:
        return self._version

    def submit(self, req: SubmitRequest) -> int:
        self._call("sbatch")
        jid = self._next_id
        self._next_id += 1
        gpus: list[GpuRequest] = []
        if req.gres:
            gpus += parse_gpu_spec(req.gres, "node")
        if req.gpus:
            gpus += parse_gpu_spec(f"gpu:{req.gpus}", "job")
        self.jobs[jid] = Job(
            job_id=jid, name=req.name, user=req.user, account=req.account or "",
            partition=req.partition or "gpu", qos=req.qos or "alloc", state=JobState.PENDING,
            reason="JobHeldUser" if req.hold else "Priority", nodes="", num_nodes=req.nodes,
            gpus=tuple(gpus), time_limit_min=None, time_min_min=None,
            requeue=req.requeue is not False, site_factor=0, priority=0, submit_time=None,
            start_time=None, features=req.constraint or "", comment=req.comment or "",
        )
        return jid

    def submit_array(self, req: ArrayRequest) -> int:
        """Like sbatch --array: every task pending; an empty index list is refused."""
        self._call("sbatch", "--array")
        if not req.indices:
            raise ValueError("a job array needs at least one index")
        jid = self._next_id
        self._next_id += 1
        self.arrays[jid] = (req, {i: "PENDING" for i in req.indices})
        return jid

    def array_tasks(self, job_id: int) -> dict[int, str]:
        self._call("squeue", "-r", f"--jobs={job_id}")
        if self.on_poll is not None:
            self.on_poll(self, job_id)
        if job_id not in self.arrays:
            return {}
        return dict(self.arrays[job_id][1])

    def finish_task(self, job_id: int, index: int, state: str = "COMPLETED") -> None:
        """Test helper: array task ``index`` of ``job_id`` is now in ``state``."""
        self.arrays[job_id][1][index] = state

    def list_jobs(
        self,
        *,
        states: Collection[JobState] | None = None,
        job_ids: Collection[int] | None = None,
        users: Collection[str] | None = None,
    ) -> list[Job]:
        self._call("squeue")
        return [
            j for j in self.jobs.values()
            if (states is None or j.state in states)
            and (job_ids is None or j.job_id in job_ids)
            and (users is None or j.user in users)
        ]

    def list_nodes(self) -> list[Node]:
        self._call("scontrol", "show", "node")
        return list(self.nodes.values())

    def job_usage(self, start: int, end: int) -> list[JobUsage]:
        self._call("sacct")
        out = []
        for u in self.usage:
            if u.job_id in self.runaway or u.start is None:
                continue
            lo, hi = max(u.start, start), min(u.end if u.end is not None else end, end)
            if hi > lo:
                out.append(replace(u, elapsed_s=hi - lo))
        return out

    def job_accounting(self, job_id: int) -> JobAccounting | None:
        self._call("sacct", "-j")
        return self.accounting.get(job_id)

    def accounted_jobs(self, start: int, end: int) -> list[JobAccounting]:
        self._call("sacct", "-X")
        out = []
        for a in self.accounting.values():
            if a.start is None:
                continue
            lo, hi = max(a.start, start), min(a.end if a.end is not None else end, end)
            if hi > lo:
                out.append(replace(a, elapsed_s=hi - lo))
        return sorted(out, key=lambda a: a.job_id)

    def set_accounted_admin_comment(self, job_id: int, text: str) -> None:
        """As sacctmgr does: every double and single quote becomes a backtick."""
        self._call("sacctmgr", "modify", "job")
        if job_id not in self.accounting:
            raise SlurmCommandError(("sacctmgr",), 1, " Nothing modified")
        self.accounting[job_id] = replace(
            self.accounting[job_id], admin_comment=text.replace('"', "`").replace("'", "`"))

    def set_site_factor(self, factors: Mapping[int, int]) -> int:
        scripts = site_factor_scripts(factors, self.batch_size)
        for lines in scripts:
            self._call("scontrol", "update", "SiteFactor")
            for line in lines:
                ids, _, value = line.removeprefix("update JobId=").partition(" SiteFactor=")
                for jid in map(int, ids.split(",")):
                    job = self.jobs.get(jid)
                    if job is None:
                        continue
                    job = replace(job, site_factor=int(value))
                    if (self.scheduler_lag and job.state is JobState.PENDING
                            and job.reason in _BLANKED_BY_UPDATE):
                        self._blanked[jid] = job.reason
                        job = replace(job, reason="None")
                    self.jobs[jid] = job
        return len(scripts)

    def scheduler_pass(self) -> None:
        """slurmctld's scheduler reaches every job again: blanked reasons come back."""
        for jid, reason in self._blanked.items():
            job = self.jobs.get(jid)
            if job is not None and job.state is JobState.PENDING and job.reason == "None":
                self.jobs[jid] = replace(job, reason=reason)
        self._blanked.clear()

    def site_factors(self) -> dict[int, int]:
        return {j.job_id: j.site_factor or 0 for j in self.jobs.values()
                if j.state is JobState.PENDING}

    def priority_parts(self, job_id: int) -> PriorityParts | None:
        """Like sprio: pending, eligible jobs only; priority = site + factors - nice."""
        self._call("sprio", f"--jobs={job_id}")
        job = self.jobs.get(job_id)
        if job is None or job.state is not JobState.PENDING or job.reason in _NO_PRIORITY:
            return None
        f = self.factors.get(job_id, {})
        parts = PriorityParts(
            job_id=job_id, partition=job.partition.split(",")[0],
            priority=0, site=job.site_factor or 0, age=f.get("age", 0),
            assoc=f.get("assoc", 0), fairshare=f.get("fairshare", 0),
            job_size=f.get("job_size", 0), partition_factor=f.get("partition_factor", 0),
            qos=f.get("qos", 0), nice=job.nice)
        return replace(parts, priority=max(1, parts.factor_sum))

    def _job(self, jid: int) -> Job:
        job = self.jobs.get(jid)
        if job is None or job.state in _ENDED:
            raise self._err(f"Invalid job id specified for job {jid}")
        return job

    def requeue(self, job_ids: Sequence[int]) -> None:
        """Slurm's order of refusals: unknown, not requeueable, then pending."""
        self._call("scontrol", "requeue", *map(str, job_ids))
        for jid in job_ids:
            job = self._job(jid)
            if not job.requeue:
                raise self._err(f"Requested operation is presently disabled for job {jid}")
            if job.state is JobState.PENDING:
                raise self._err(f"Job is pending execution for job {jid}")
            # a preempted job's preemption is over too (preempt_time 0 in squeue once
            # requeued: tests/fixtures/slurm/22.05/preempt_grace)
            self.jobs[jid] = replace(job, state=JobState.PENDING, reason="BeginTime", nodes="",
                                     start_time=None, end_time=None, preempt_time=None)

    def cancel(self, job_ids: Sequence[int]) -> None:
        self._call("scancel", *map(str, job_ids))
        for jid in job_ids:
            if jid in self.arrays:  # every task of an array that has not ended
                tasks = self.arrays[jid][1]
                tasks.update({i: "CANCELLED" for i, st in tasks.items()
                              if st in ("PENDING", "RUNNING")})
                continue
            self.jobs[jid] = replace(self._job(jid), state=JobState.CANCELLED)

    def signal_job(self, job_id: int, signal: str, *, target: str = "batch") -> None:
        """Like scancel: an unknown or ended job is refused; a signal to a pending job's
        steps or shell reaches nothing, but Slurm takes it."""
        self._call("scancel", f"--signal={signal}", target, str(job_id))
        if target not in ("batch", "full", "steps"):
            raise ValueError(f"signal target {target!r}")  # a caller's bug, not Slurm's no
        job = self.jobs.get(job_id)
        if job is None or job.state in _ENDED:
            raise SlurmCommandError(("scancel",), 1, f"scancel: error: Kill job error on job "
                                    f"id {job_id}: Invalid job id specified")
        self.signals.append((job_id, signal, target))

    def job_signal(self, job_id: int) -> JobSignal | None:
        self._call("scontrol", "write", "batch_script", str(job_id))
        return self.job_signals.get(job_id)

    def release(self, job_ids: Sequence[int]) -> None:
        self._call("scontrol", "release", *map(str, job_ids))
        for jid in job_ids:
            self.jobs[jid] = replace(self._job(jid), reason="None")

    # ------------------------------------------------------- test helpers
    def add_job(self, job: Job) -> int:
        """Put ``job`` in the queue as it is (any state and fields); returns its id."""
        self.jobs[job.job_id] = job
        self._next_id = max(self._next_id, job.job_id + 1)
        return job.job_id

    def set_job(self, jid: int, **changes: Any) -> Job:
        """Change any Job fields of ``jid`` (nice, batch, requeue, qos, ...); no call is
        counted: this is the test arranging the world, not a client acting on it."""
        self.jobs[jid] = job = replace(self.jobs[jid], **changes)
        return job

    def start(self, jid: int, nodes: str, at: int) -> None:
        """The scheduler started ``jid`` on ``nodes`` at ``at``."""
        self.jobs[jid] = replace(self._job(jid), state=JobState.RUNNING, nodes=nodes,
                                 start_time=at, reason="None")

    def pend(self, jid: int, *, reason: str = "Priority", submit_time: int | None = None) -> None:
        """``jid`` waits in the queue for ``reason``; it holds no nodes."""
        job = self._job(jid)
        self.jobs[jid] = replace(job, state=JobState.PENDING, reason=reason, nodes="",
                                 start_time=None, end_time=None,
                                 submit_time=job.submit_time if submit_time is None
                                 else submit_time)

    def completing(self, jid: int, end_time: int) -> None:
        """``jid`` ended at ``end_time`` but its nodes have not finished cleaning up."""
        self.jobs[jid] = replace(self._job(jid), state=JobState.COMPLETING, end_time=end_time)

    def _node(self, name: str) -> Node:
        if name not in self.nodes:
            raise SlurmCommandError(("scontrol",), 1,
                                    "slurm_update error: Invalid node name specified")
        return self.nodes[name]

    def drain_node(self, node: str, reason: str) -> None:
        self._call("scontrol", "update", f"NodeName={node}", "State=DRAIN")
        n = self._node(node)
        self.nodes[node] = replace(n, flags=n.flags | {"DRAIN"}, reason=reason)

    def resume_node(self, node: str) -> None:
        self._call("scontrol", "update", f"NodeName={node}", "State=RESUME")
        n = self._node(node)
        self.nodes[node] = replace(n, flags=n.flags - {"DRAIN"}, reason="")

    def list_runaway_jobs(self) -> list[int]:
        self._call("sacctmgr", "show", "runawayjobs")
        return sorted(self.runaway)

    def fix_runaway_jobs(self) -> list[int]:
        """Returns the ids it fixed; they are runaway no more (and count in job_usage)."""
        fixed = self.list_runaway_jobs()
        self.runaway.difference_update(fixed)
        return fixed

    def default_accounts(self) -> dict[str, str]:
        self._call("sacctmgr", "show", "user")
        return dict(self.user_default_accounts)
