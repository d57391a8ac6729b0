"""The engine's event loop: arrivals, ends and policy cycles on a virtual clock.

At each event time the ends are handled first (GPUs freed), then the arrivals, then,
when one is due, the policy cycle (re-order, requeues) and a scheduling pass
(:mod:`slurm_ml.sim.engine.sched`). Every cycle leaves a :class:`CycleSample`. The same
policy functions the daemon runs decide the order and the requeues
(:mod:`slurm_ml.sim.policies`); the engine only keeps the books.
"""

from __future__ import annotations

import gc
import heapq
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from slurm_ml.config import Config
from slurm_ml.model import ALLOC_QOS
from slurm_ml.policy import fairshare
from slurm_ml.policy.fairshare import FairShare
from slurm_ml.policy.fairshare.tree import flatten
from slurm_ml.policy.lane_requeue import wake_cycle_at
from slurm_ml.sim import state as es
from slurm_ml.sim.cluster import Alloc, Cluster
from slurm_ml.sim.engine.sample import sample
from slurm_ml.sim.engine.sched import Scheduler
from slurm_ml.sim.policies import POLICIES, BudgetCycleDecision, CycleOutcome, make_policy
from slurm_ml.sim.result import CycleSample, JobOutcome, SimResult
from slurm_ml.sim.state import DONE, NEVER, PENDING, RUNNING, SimSettings, SimState, Task
from slurm_ml.sim.workload import SimJob

__all__ = ["POLICIES", "CycleRecord", "Engine", "SimSettings", "simulate"]

#: The ledger forgets footprints older than the window this often (simulated seconds).
_PRUNE_S = 86400.0
_PROGRESS_CALLS = 100
#: allocations between young collections while a run is going (Python's default: 700)
_GC_GEN0 = 100_000
_DEFAULTS = SimSettings()


@dataclass(frozen=True, slots=True)
class CycleRecord:
    """One policy cycle, as :meth:`Engine.cycles` yields it."""

    t_s: float
    sample: CycleSample
    decision: BudgetCycleDecision | None  # budget: what the policy decided, and on what inputs


def simulate(cfg: Config, jobs: Sequence[SimJob], policy: str, *,
             settings: SimSettings = _DEFAULTS,
             progress: Callable[[float, float], None] | None = None) -> SimResult:
    """Replay ``jobs`` on the cluster of ``cfg`` under ``policy`` (one of ``POLICIES``).

    ``progress(sim_t, end_t)`` is called about a hundred times over the run; ``end_t``
    is ``settings.end_s``, else the last submission (the run may go on past it).
    """
    engine = Engine(cfg, jobs, policy, settings, decisions=False)
    for _ in engine.cycles(progress):
        pass
    return engine.result()


class Engine:
    """One run. :meth:`cycles` advances it cycle by cycle; :meth:`result` sums it up."""

    def __init__(self, cfg: Config, jobs: Sequence[SimJob], policy: str,
                 settings: SimSettings = _DEFAULTS, *, decisions: bool = True) -> None:
        """``decisions``: each :class:`CycleRecord` carries the policy's decision and
        its inputs (the whole queue as the contracts see it): for tests and reports;
        without them a cycle costs only what deciding costs."""
        self._decisions = decisions
        cluster = Cluster(cfg)
        if cluster.total == 0:
            raise ValueError("the config has no GPU nodes to simulate")
        tasks = [es.new_task(cfg, cluster, job) for job in jobs]
        by_id = {t.spec.job_id: t for t in tasks}
        if len(by_id) != len(tasks):
            raise ValueError("job ids must be unique")
        self.st = SimState(cfg=cfg, settings=settings, cluster=cluster,
                           tree=flatten(cfg.budgets), tasks=tasks, by_id=by_id,
                           capacity=fairshare.capacity_billing_gpus(cfg))
        self.policy = make_policy(policy, self.st)
        self.sched = Scheduler(self.st, self._start, self._preempt, self._requeued,
                               self._signal)
        self._arrivals = sorted(tasks, key=lambda t: (t.spec.submit_s, t.spec.job_id))
        self._next_arrival = 0
        self._ends: list[tuple[float, int, int, int]] = []  # (at, seq, job id, run_no)
        self._seq = 0
        first = self._arrivals[0].spec.submit_s if self._arrivals else 0.0
        self._cycle = math.floor(first / settings.cycle_s)  # the clock starts by the first job
        self._start_s = self._cycle * settings.cycle_s
        self.st.now = self._start_s
        index = {name: n for n, name in enumerate(cluster.names)}
        unknown = sorted({node for _, node, _ in settings.faults} - set(index))
        if unknown:
            raise ValueError(f"faults on unknown node(s): {', '.join(unknown)}")
        #: (at, 0 = fault / 1 = repaired, node index, repair seconds), a heap
        self._faults: list[tuple[float, int, int, float]] = [
            (at, 0, index[node], repair) for at, node, repair in settings.faults]
        heapq.heapify(self._faults)
        self._node_faults = 0
        self._samples: list[CycleSample] = []
        self._last_cycle_t: float | None = None  # when the last cycle (any kind) ran
        self._woken = 0
        self._pruned_at = 0.0
        self._wall = 0.0
        #: cycles between samples of the standings (``SimSettings.owed_every_s``)
        self._owed_every = max(1, round(settings.owed_every_s / settings.cycle_s))

    # ------------------------------------------------------------------ the loop

    def cycles(self, progress: Callable[[float, float], None] | None = None,
               ) -> Iterator[CycleRecord]:
        """Run to the end, yielding after every policy cycle."""
        st, s = self.st, self.st.settings
        last_submit = self._arrivals[-1].spec.submit_s if self._arrivals else 0.0
        horizon = s.end_s if s.end_s is not None else last_submit
        origin = self._start_s
        step = (horizon - origin) / _PROGRESS_CALLS if horizon > origin else math.inf
        mark = origin + step
        began = time.perf_counter()
        # The run allocates millions of short-lived values (footprints, WaitingJobs, keys)
        # and builds almost no reference cycles: at the default threshold (700) the cyclic
        # collector runs thousands of times over the long-lived state, a quarter of an
        # overloaded run's time. Collect less often while it runs; no decision depends on it.
        gc_was = gc.get_threshold()
        if gc_was[0]:  # 0: the caller has turned automatic collection off; leave it so
            gc.set_threshold(max(gc_was[0], _GC_GEN0), max(gc_was[1], 50),
                             max(gc_was[2], 100))
        try:
            while True:
                t = self._next_time()
                if t is None or (s.end_s is not None and t > s.end_s):
                    break
                st.now = t
                self._events(t)
                if t == self._cycle * s.cycle_s:
                    record = self._run_cycle()
                    self._wall += time.perf_counter() - began
                    yield record
                    began = time.perf_counter()
                elif t == self._wake_due():
                    self._woken_cycle()
                else:
                    self.sched.run()
                if progress is not None and t >= mark:
                    progress(t, horizon)
                    mark = origin + (math.floor((t - origin) / step) + 1) * step
                    if mark > horizon + step / 2:  # past the estimate: only the last call
                        mark = math.inf
        finally:
            gc.set_threshold(*gc_was)
            self._wall += time.perf_counter() - began
        if progress is not None:
            progress(st.now, horizon)

    def _next_time(self) -> float | None:
        """The next event time; None once nothing is left to happen."""
        st = self.st
        arrival = (self._arrivals[self._next_arrival].spec.submit_s
                   if self._next_arrival < len(self._arrivals) else math.inf)
        end = self._ends[0][0] if self._ends else math.inf
        cycle = self._cycle * st.settings.cycle_s
        idle = arrival == math.inf and end == math.inf and not st.running and not st.pending
        if idle and (st.settings.end_s is None or cycle > st.settings.end_s):
            return None
        fault = self._faults[0][0] if self._faults else math.inf
        return min(arrival, end, cycle, fault, self.sched.next_claim(), self._wake_due())

    def _wake_due(self) -> float:
        """When submitd's earliest lane wake has the daemon cycle (inf: none waiting),
        as the daemon's loop decides it (``policy.lane_requeue.wake_cycle_at``)."""
        wakes = self.st.wakes
        if not wakes:
            return math.inf
        return wake_cycle_at(wakes[0], self._last_cycle_t, self.st.cfg.policy.fast_lane)

    def _served_wakes(self) -> None:
        """A cycle now has served every wake due by now; it is the last cycle."""
        st = self.st
        while st.wakes and st.wakes[0] <= st.now:
            heapq.heappop(st.wakes)
        self._last_cycle_t = st.now

    def _woken_cycle(self) -> None:
        """A cycle a wake brought forward: the policy decides and Slurm schedules as in
        a regular one, but it takes no sample and leaves the regular cycles' times (the
        daemon's loop keeps its schedule too)."""
        self._decide()
        self._woken += 1

    def _events(self, t: float) -> None:
        st = self.st
        ends = self._ends
        while ends and ends[0][0] <= t:
            _, _, job_id, run_no = heapq.heappop(ends)
            task = st.by_id[job_id]
            if task.state == RUNNING and task.run_no == run_no:
                if task.grace_end is not None and t < task.run_start + task.remaining:
                    # its GraceTime is over: Slurm requeues it, eligible again only after
                    # this pass (as at once without a grace), so its preemptor goes first
                    self._preempt(task)
                    self.sched.requeue_after_pass(task)
                else:
                    self._finish(task)
        self.sched.claimed(t)
        faults = self._faults
        while faults and faults[0][0] <= t:
            _, repaired, node, repair_s = heapq.heappop(faults)
            if repaired:
                self._repaired(node)
            else:
                self._fault(node, repair_s)
        arrivals, i = self._arrivals, self._next_arrival
        while i < len(arrivals) and arrivals[i].spec.submit_s <= t:
            self._arrive(arrivals[i])
            i += 1
        self._next_arrival = i

    def _decide(self, *, decide: bool = False) -> CycleOutcome:
        """The policy's cycle on the state now, its requeues, then Slurm's pass."""
        st = self.st
        self._served_wakes()
        out = self.policy.cycle(st, decide=decide)
        st.fresh.clear()
        if out.reordered:
            st.alloc_queue = None  # its order is the old keys'
            if not out.sorted:
                st.pending.sort(key=es.task_key)
            self.sched.changed()
        for rq in out.requeues:
            self._requeue(st.by_id[rq.victim], rq.gpus, lane=rq.details.get("lane") is True)
        self.sched.run()
        return out

    def _run_cycle(self) -> CycleRecord:
        st = self.st
        out = self._decide(decide=self._decisions)
        fair = None
        if self._cycle % self._owed_every == 0:  # every policy alike, so reports compare
            fair = out.fair if out.fair is not None else fairshare.fair_share(
                st.cfg, st.ledger, st.stamp(st.now), capacity=st.capacity)
        owed, delivered = _owed(fair) if fair is not None else ({}, {})
        record = CycleRecord(t_s=st.now, sample=sample(st, owed, delivered),
                             decision=out.decision)
        self._samples.append(record.sample)
        self._cycle += 1
        if st.now - self._pruned_at >= _PRUNE_S:
            self._prune()
        return record

    def _prune(self) -> None:
        st = self.st
        window = max(1, round(st.cfg.policy.fairshare.window_hours * 3600))
        st.ledger.prune(st.stamp(st.now) - window)
        cap_window = st.cfg.policy.contracts.preempt_cap_window_s
        now = st.stamp(st.now)
        st.recent_requeues = [(at, g) for at, g in st.recent_requeues if now - at < cap_window]
        st.lane_requeues = [(at, g) for at, g in st.lane_requeues if now - at < cap_window]
        cooldown = st.cfg.policy.contracts.requeue_cooldown_s
        st.last_requeue = {j: at for j, at in st.last_requeue.items() if now - at < cooldown}
        self._pruned_at = st.now

    # ------------------------------------------------------------------ transitions

    def _arrive(self, task: Task) -> None:
        st = self.st
        if not st.cluster.feasible(task.spec.gpus, task.types):
            task.state = NEVER
            return
        task.state = PENDING
        task.pend_since = st.now
        task.key = self.policy.key(st, task)
        task.footprint = es.pending_footprint(st, task)
        st.ledger.add(task.footprint)
        st.add_pending(task)
        self.sched.arrived(task)

    def _start(self, task: Task, alloc: Alloc) -> None:
        st = self.st
        st.cluster.take(alloc)
        st.left_pending(task)
        task.state = RUNNING
        task.alloc = alloc
        task.held = sum(g for _, g in alloc)
        task.run_start = st.now
        task.run_no += 1
        task.end_at = st.now + task.remaining
        if task.first_start is None:
            task.first_start = st.now
        task.running_job = es.running_job(st, task)
        opened = es.running_footprint(st, task)
        assert task.footprint is not None
        st.ledger.replace(task.footprint, opened)
        task.footprint = opened
        st.add_running(task)
        heapq.heappush(self._ends, (task.end_at, self._seq, task.spec.job_id, task.run_no))
        self._seq += 1

    def _stop(self, task: Task) -> None:
        """Take a running task off its nodes and close its run's footprint."""
        st = self.st
        st.left_running(task)
        task.grace_end = None
        st.cluster.release(task.alloc)
        task.run_s += st.now - task.run_start
        task.runs.append((task.run_start, st.now, task.held))
        closed = es.running_footprint(st, task, until=st.now)
        assert task.footprint is not None
        st.ledger.replace(task.footprint, closed)
        task.footprint = None
        task.alloc = ()
        self.sched.changed()

    def _finish(self, task: Task) -> None:
        self._stop(task)
        task.state = DONE
        task.end = self.st.now
        task.remaining = 0.0

    def _requeue(self, task: Task, gpus: int, *, lane: bool = False) -> None:
        """The contracts' requeue (``lane``: the fast lane's): back to pending, having
        lost the work since its last checkpoint; it counts against the cooldown and its
        cap (the cluster's, or the lane's own)."""
        st = self.st
        self._halt(task)
        now = st.stamp(st.now)
        st.last_requeue[task.spec.job_id] = now
        (st.lane_requeues if lane else st.recent_requeues).append((now, gpus))
        self._requeued(task)

    def _signal(self, victims: list[Task], end: float) -> None:
        """Slurm preempts running QOS free jobs with a GraceTime: each runs on (holding
        its GPUs) until ``end``, then is requeued, unless it ends first."""
        st = self.st
        for task in victims:
            task.grace_end = end
            if end < task.end_at:  # it ends then: reservations are made from the new end
                st.moved_end(task, end)
                heapq.heappush(self._ends, (end, self._seq, task.spec.job_id, task.run_no))
                self._seq += 1

    def _preempt(self, task: Task) -> None:
        """Slurm requeues a QOS free job for an alloc one (not the daemon: no cooldown,
        no cap); the scheduler queues it again once its pass is over."""
        self._halt(task)
        self.st.qos_preemptions += 1

    def _halt(self, task: Task) -> None:
        """A preemption: the run ends, its work since the last checkpoint is lost."""
        lost = self._cut(task)
        task.lost_gpu_s += lost
        task.requeues += 1
        self.st.preemptions += 1

    def _cut(self, task: Task) -> float:
        """End the running task's run, keeping its work up to the last checkpoint; back
        to PENDING. Returns the GPU-seconds lost (the caller says what they count as)."""
        st = self.st
        if task.state != RUNNING:
            raise AssertionError(f"requeue of job {task.spec.job_id}, which is not running")
        ran = st.now - task.run_start
        saved = math.floor(ran / st.settings.checkpoint_s) * st.settings.checkpoint_s
        self._stop(task)
        task.remaining -= saved
        task.state = PENDING
        task.end_at = math.inf
        return (ran - saved) * task.spec.gpus

    def _fault(self, node: int, repair_s: float) -> None:
        """The node fails: its jobs go back to the queue from their last checkpoint (a
        node fault, not a preemption) and it takes no work until ``repair_s`` later. A
        fault on a node already under repair is part of the same repair."""
        st = self.st
        if node in st.down:
            return
        self._node_faults += 1
        for task in [t for t in st.running.values() if any(n == node for n, _ in t.alloc)]:
            st.fault_lost_gpu_s += self._cut(task)  # not a preemption: counted apart
            st.fault_requeues += 1
            self._requeued(task)
        free = st.cluster.free[node]
        if free:
            st.cluster.take(((node, free),))
        st.down[node] = free
        st.room_dirty.add(node)
        self.sched.changed()
        heapq.heappush(self._faults, (st.now + repair_s, 1, node, 0.0))

    def _repaired(self, node: int) -> None:
        st = self.st
        free = st.down.pop(node)
        if free:
            st.cluster.release(((node, free),))
        st.room_dirty.add(node)
        self.sched.changed()

    def _requeued(self, task: Task) -> None:
        st = self.st
        task.state = PENDING
        task.pend_since = st.now
        task.end_at = math.inf
        task.key = self.policy.key(st, task)
        task.footprint = es.pending_footprint(st, task)
        st.ledger.add(task.footprint)
        st.add_pending(task)

    # ------------------------------------------------------------------ the result

    def result(self) -> SimResult:
        st = self.st
        outcomes = tuple(
            JobOutcome(job_id=t.spec.job_id, team=t.spec.team, kind=t.spec.kind,
                       gpus=t.spec.gpus, submit_s=t.spec.submit_s, start_s=t.first_start,
                       end_s=t.end,
                       run_s=t.run_s + (st.now - t.run_start if t.state == RUNNING else 0.0),
                       requeues=t.requeues, lost_gpu_s=t.lost_gpu_s,
                       runs=(*t.runs, *(((t.run_start, st.now, t.held),)
                                        if t.state == RUNNING else ())),
                       feasible=t.state != NEVER, allocated=t.qos == ALLOC_QOS)
            for t in st.tasks)
        return SimResult(policy=self.policy.name, cluster_gpus=st.cluster.total,
                         start_s=self._start_s, end_s=st.now, jobs=outcomes,
                         samples=tuple(self._samples), team_weights=es.team_weights(st.cfg),
                         wall_s=self._wall, preemptions=st.preemptions,
                         qos_preemptions=st.qos_preemptions, node_faults=self._node_faults,
                         woken_cycles=self._woken,
                         fault_requeues=st.fault_requeues,
                         fault_lost_gpu_s=st.fault_lost_gpu_s)


def _owed(fair: FairShare) -> tuple[dict[str, float], dict[str, float]]:
    owed = {s.account: s.owed for s in fair.standings if s.kind == "project"}
    delivered = {s.account: s.delivered for s in fair.standings if s.kind == "project"}
    return owed, delivered

