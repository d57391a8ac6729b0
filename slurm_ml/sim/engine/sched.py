"""Slurm's scheduling pass: jobs in priority order, EASY backfill around one reservation.

The first job that cannot start gets a reservation at the earliest time enough nodes
free up (running jobs end at start + remaining duration: the trace's durations are the
estimates); a later job may start now only if it fits and either ends before that time
or stays off the reserved nodes. Once a pass has run, nothing can start until something
changes, so an arriving job is tried alone against the standing reservation instead of
re-running the pass (it gives the same decisions: see :meth:`Scheduler.arrived`).

A QOS alloc job that does not fit may first requeue QOS free jobs, as slurmctld's
preempt/qos does (:mod:`slurm_ml.sim.engine.preempt`); only when that cannot make room
does it take the reservation or wait.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import islice
from operator import attrgetter, indexOf, itemgetter

from slurm_ml.model import ALLOC_QOS
from slurm_ml.sim.cluster import Alloc
from slurm_ml.sim.engine.preempt import victims_for
from slurm_ml.sim.state import PENDING, Key, SimState, Task, task_key

_ID: Callable[[tuple[float, int]], int] = itemgetter(1)
_AT: Callable[[tuple[float, int]], float] = itemgetter(0)
_ALLOC: Callable[[Task], Alloc] = attrgetter("alloc")
_QOS: Callable[[Task], str] = attrgetter("qos")


def _next_alloc(pending: list[Task], i: int, queue: list[Task] | None) -> int:
    """The place of the first QOS alloc job at or after ``i`` (the end: none), during a
    pass: by ``queue`` (``SimState.alloc_queue``) when it is kept, else a walk in C."""
    if queue is not None:
        if i >= len(pending):
            return i
        # the queue holds the pass's alloc jobs not started yet, and every job from
        # ``i`` on is one of those or free: the first of them with a key from here on
        k = bisect_left(queue, pending[i].key, key=task_key)
        if k == len(queue):
            return len(pending)
        return bisect_left(pending, queue[k].key, i, key=task_key)
    try:
        return i + indexOf(map(_QOS, map(pending.__getitem__, range(i, len(pending)))),
                           ALLOC_QOS)
    except ValueError:
        return len(pending)


@dataclass(frozen=True, slots=True)
class Reservation:
    """The blocked head job's reservation: its key, when, and on which nodes."""

    key: Key
    at: float
    nodes: frozenset[int]


class _Jumps:
    """The next job a pass can start, past its reservation: among the jobs
    :meth:`Scheduler._short` found (a heap in key order, which is their order in the
    queue), or, when it found them too many to be worth it (None), by walking the queue.
    Either way the same job, or the end.

    The jobs come off the heap, and their places are looked up, only as the pass asks:
    it asks for a few of hundreds, and sorting them all, or bisecting the queue for each,
    was the dearest step of a pass under overload."""

    __slots__ = ("by_id", "heap", "lo", "queue")

    def __init__(self, heap: list[tuple[Key, int]] | None, by_id: dict[int, Task],
                 lo: int, queue: list[Task] | None) -> None:
        self.heap = heap  # (key, job id)
        self.by_id = by_id
        self.lo = lo  # where the pass was when they were found: none lies before it
        # ``SimState.alloc_queue`` where ``stop`` takes only QOS alloc jobs and it is kept
        self.queue = queue

    def next(self, i: int, pending: list[Task], stop: Callable[[Task], bool]) -> int:
        """The first place at or after ``i`` whose job ``stop`` accepts, else the end."""
        heap = self.heap
        if heap is None:
            queue = self.queue
            if queue is not None and i < len(pending):
                # ``stop`` takes only alloc jobs: walk those alone (the same, in order)
                k = bisect_left(queue, pending[i].key, key=task_key)
                for task in islice(queue, k, None):
                    if stop(task):
                        return bisect_left(pending, task.key, i, key=task_key)
                return len(pending)
            while i < len(pending) and not stop(pending[i]):
                i += 1
            return i
        while heap:
            task = self.by_id[heapq.heappop(heap)[1]]
            if stop(task):
                # During a pass the queue is in key order and keeps every job until the
                # pass ends, so a job's place is where its key bisects (keys are unique).
                j = bisect_left(pending, task.key, self.lo, key=task_key)
                if i <= j < len(pending) and pending[j] is task:
                    return j
        return len(pending)


class Scheduler:
    """Runs passes over ``st.pending``; ``start`` starts a task on an allocation."""

    def __init__(self, st: SimState, start: Callable[[Task, Alloc], None],
                 preempt: Callable[[Task], None] | None = None,
                 requeued: Callable[[Task], None] | None = None,
                 signal: Callable[[list[Task], float], None] | None = None) -> None:
        self.st = st
        self.start = start
        # Slurm's QOS preemption (None: never): ``preempt`` stops a free job now,
        # ``requeued`` puts it back in the queue once the pass is over; with a GraceTime
        # (``SimSettings.free_grace_s``) ``signal(victims, end)`` starts the victims'
        # grace instead, and the preemptor claims what they free at its end.
        self.preempt = preempt
        self.requeued = requeued
        self.signal = signal
        #: (victims' grace end, seq, preemptor's job id), a heap: see :meth:`claimed`
        self._claims: list[tuple[float, int, int]] = []
        self._claim_seq = 0
        self._stopped: list[Task] = []
        self.settled = False  # the last pass still holds: nothing changed since but arrivals
        self.reservation: Reservation | None = None
        # (GPUs, types) -> earliest()'s answer, valid while the cluster's version is this
        self._earliest: dict[tuple[int, tuple[int, ...]], tuple[float, frozenset[int]] | None] = {}
        self._earliest_at = -1

    def changed(self) -> None:
        """GPUs were freed or the order changed: the next chance needs a full pass."""
        self.settled = False

    def run(self) -> None:
        """A full pass, unless the last one still holds."""
        if not self.settled:
            self.full_pass()

    def full_pass(self) -> None:
        st, cluster, now = self.st, self.st.cluster, self.st.now
        res: Reservation | None = None
        fit_any: dict[tuple[int, ...], int] = {}  # types -> fewest GPUs that did not fit
        fit_off: dict[tuple[int, ...], int] = {}  # ... off the reserved nodes
        started: list[int] = []
        dead = 0  # type sets of which not even one GPU fits: once all are, stop
        kinds = len({types for _, types in st.pending_shapes})
        no_room: dict[tuple[int, ...], int] = {}  # ... not even by preempting free jobs
        hopeless = 0  # type sets of which not even a 1-GPU job can preempt its way in
        blocked = started_free = False  # an alloc job found no room; free work started
        alloc_left = st.pending_alloc  # alloc jobs from here on (read only while res is None)
        pending = st.pending
        count = len(pending)  # started jobs leave the list after the loop
        # Past the reservation only some jobs can start (``_Jumps``): with nothing free,
        # a short alloc job that may preempt; with GPUs free only on the reserved nodes
        # for every type set (``off_dead`` of ``kinds``), a job that ends before it.
        short: _Jumps | None = None
        ending: _Jumps | None = None
        off_dead = 0
        i = -1
        while True:
            i += 1
            if i >= count:
                break
            task = pending[i]
            is_alloc = task.qos == ALLOC_QOS
            alloc_left -= is_alloc
            if cluster.free_total == 0 or dead == kinds:
                # No job fits now (every type set failed with 1 GPU, or nothing is free):
                # only an alloc job preempting free work can still start.
                if self.preempt is None or st.free_running == 0:
                    break
                if res is None:
                    if not is_alloc:
                        if not alloc_left:
                            break  # only free jobs from here on: each would be passed over
                        # A free job: only alloc jobs behind it may still preempt, and
                        # nothing changes while free jobs are passed over, so go straight
                        # to the next alloc job (there is one: ``alloc_left``). Under
                        # overload the queue's head is old free work, every pass.
                        # (thousands of free jobs may lie between)
                        i = _next_alloc(pending, i + 1, st.alloc_queue)
                        if i >= count:
                            break
                        task = pending[i]
                        is_alloc = True
                        alloc_left -= 1
                else:
                    if hopeless == kinds:
                        break  # nothing fits, no one can preempt, the reservation is made
                    # The jobs up to the next alloc job that ends before the reservation
                    # and asks for fewer GPUs than its type set failed to preempt for
                    # would each be passed over (nothing changes meanwhile): skip them.
                    at = res.at
                    if short is None:
                        short = self._short(st.alloc_by_remaining, i, at - now,
                                            st.alloc_queue)
                    i = short.next(i, pending, lambda t: (  # called at once:
                        t.qos == ALLOC_QOS and now + t.remaining <= at  # noqa: B023
                        and t.spec.gpus < no_room.get(t.types, 1 << 30)))
                    if i >= count:
                        break
                    task = pending[i]
                    is_alloc = True
            elif res is not None and off_dead == kinds:
                # Every job that outlasts the reservation would be passed over (it fits
                # nowhere off the reserved nodes, and only a job that could start now
                # anyway may preempt): go to the next that does not.
                at = res.at
                if ending is None:
                    ending = self._short(st.by_remaining, i, at - now, None)
                i = ending.next(i, pending, lambda t: now + t.remaining <= at)  # noqa: B023
                if i >= count:
                    break
                task = pending[i]
                is_alloc = task.qos == ALLOC_QOS
            # (a job whose victims are still in their grace waits for them: no more)
            can_preempt = (self.preempt is not None and st.free_running > 0 and is_alloc
                           and task.awaits_victims <= now)
            gpus, types = task.spec.gpus, task.types
            alloc: Alloc | None = None
            ends_in_time = res is None or now + task.remaining <= res.at
            if cluster.free_total > 0 and gpus < fit_any.get(types, 1 << 30):
                if ends_in_time:
                    alloc = cluster.place(gpus, types)
                    if alloc is None:
                        fit_any[types] = gpus
                        dead += gpus == 1
                elif gpus < fit_off.get(types, 1 << 30):
                    alloc = cluster.place(gpus, types, res.nodes if res else frozenset())
                    if alloc is None:
                        fit_off[types] = gpus
                        off_dead += gpus == 1
            # Slurm's preempt/qos: only what could start now anyway may preempt, so a
            # job behind the reservation that would outlast it never takes its nodes.
            if alloc is None and can_preempt and ends_in_time \
                    and gpus < no_room.get(types, 1 << 30):
                alloc, signalled = self._preempt_for(task)
                if alloc is None and not signalled:
                    no_room[types] = gpus
                    hopeless += gpus == 1
                    blocked = True
            if alloc is None:
                if res is None:
                    res = self._reserve(task)
                continue
            self.start(task, alloc)
            started.append(i)
            started_free = started_free or task.qos != ALLOC_QOS
        for i in reversed(started):
            del pending[i]
        self.reservation = res
        # Free work this pass started is preemptible from the next pass on: run one then
        # (slurmctld schedules periodically too), rather than only when something changes.
        self.settled = not (blocked and started_free)
        if self._stopped:
            assert self.requeued is not None
            for task in self._stopped:
                self.requeued(task)
            self._stopped.clear()
            # a requeued job may fit what is left
            self.settled = self.settled and cluster.free_total == 0

    def _short(self, index: list[tuple[float, int]], lo: int, span: float,
               queue: list[Task] | None) -> _Jumps:
        """The jobs of ``index`` (a sorted ``(remaining, job id)`` list) whose run time is
        at most ``span`` (with a margin for rounding: the caller tests exactly), in key
        order; or none (walk the queue) when they are a quarter or more of what is left to
        walk from ``lo``. Jobs started in the pass have left the index. ``queue``: where
        the index holds only QOS alloc jobs, ``SimState.alloc_queue``, for a walk of them."""
        m = bisect_right(index, (span + 1e-6 + abs(span) * 1e-12, math.inf))
        if 4 * m >= len(self.st.pending) - lo:
            return _Jumps(None, self.st.by_id, lo, queue)
        ids = list(map(_ID, islice(index, m)))  # in C: there may be hundreds
        heap = list(zip(map(task_key, map(self.st.by_id.__getitem__, ids)), ids, strict=True))
        heapq.heapify(heap)
        return _Jumps(heap, self.st.by_id, lo, queue)

    def requeue_after_pass(self, task: Task) -> None:
        """A free job Slurm has just stopped goes back to the queue when the next pass
        is over (Slurm holds a requeued job a while: it does not start in that pass)."""
        self._stopped.append(task)
        self.settled = False

    def _preempt_for(self, task: Task) -> tuple[Alloc | None, bool]:
        """Preempt the free jobs in ``task``'s way: (where it starts now, or None; whether
        victims were signalled instead). With no GraceTime the victims are requeued and
        ``task`` starts at once. With one, Slurm signals them and requeues them when it
        ends, and ``task`` starts then on what they free (the engine's claim: it has the
        priority that made them its victims); meanwhile its reservation, made from their
        new end, keeps backfill off their GPUs, and it preempts no more."""
        assert self.preempt is not None
        found = victims_for(self.st, task)
        if found is None:
            return None, False
        victims, _ = found
        grace = self.st.settings.free_grace_s
        if grace > 0 and self.signal is not None:
            end = self.st.now + grace
            self.signal(victims, end)
            task.awaits_victims = end
            heapq.heappush(self._claims, (end, self._claim_seq, task.spec.job_id))
            self._claim_seq += 1
            self._earliest_at = -1  # their ends moved: reservations must see it
            return None, True
        for victim in victims:
            self.preempt(victim)
        self._stopped.extend(victims)
        return self.st.cluster.place(task.spec.gpus, task.types), False

    def next_claim(self) -> float:
        """When the earliest claim falls due (inf: none)."""
        return self._claims[0][0] if self._claims else math.inf

    def claimed(self, t: float) -> None:
        """Preemptors whose victims' grace has ended by ``t`` start on the GPUs those
        freed, ahead of the pass, as the pass that preempted for them would have."""
        st, claims = self.st, self._claims
        while claims and claims[0][0] <= t:
            task = st.by_id[heapq.heappop(claims)[2]]
            if task.state != PENDING:
                continue  # it started meanwhile
            alloc = st.cluster.place(task.spec.gpus, task.types)
            if alloc is not None:
                self._start_now(task, alloc)

    def _start_now(self, task: Task, alloc: Alloc) -> None:
        """Start ``task`` outside a pass (a pass removes its own starts at its end)."""
        self.start(task, alloc)
        self.st.pending.remove(task)

    def arrived(self, task: Task) -> None:
        """``task`` just joined ``st.pending``. While the last pass holds, the jobs ahead
        of it still cannot start (nothing was freed, and a job that did not fit or did not
        end before the reservation still does not), so only ``task`` can change anything:
        ahead of the reserved job it may move the reservation (full pass), behind it is
        the backfill test alone."""
        if not self.settled:
            return
        cluster = self.st.cluster
        if (self.preempt is not None and self.st.free_running > 0
                and task.qos == ALLOC_QOS):
            self.full_pass()  # it may preempt free work: in priority order, as Slurm does
            return
        if cluster.free_total == 0:
            return  # the stale reservation is never used: GPUs free only through changed()
        res = self.reservation
        gpus, types = task.spec.gpus, task.types
        if res is None:
            alloc = cluster.place(gpus, types)
            if alloc is None:
                self.reservation = self._reserve(task)
                return
        elif task.key < res.key:
            self.full_pass()
            return
        elif self.st.now + task.remaining <= res.at:
            alloc = cluster.place(gpus, types)
        else:
            alloc = cluster.place(gpus, types, res.nodes)
        if alloc is not None:
            self._start_now(task, alloc)

    def _reserve(self, task: Task) -> Reservation:
        """The reservation for ``task``. ``earliest`` depends only on the shape, the free
        GPUs and the running jobs' ends and nodes, and every start and stop takes or
        releases GPUs (a new cluster version): an unchanged version gives the same answer,
        as passes for one arrival after another often ask."""
        cluster = self.st.cluster
        if cluster.version != self._earliest_at:
            self._earliest.clear()
            self._earliest_at = cluster.version
        shape = (task.spec.gpus, task.types)
        if shape in self._earliest:
            got = self._earliest[shape]
        else:
            got = self._earliest[shape] = cluster.earliest(task.spec.gpus, task.types,
                                                           self._ends())
        if got is None:  # cannot happen for a feasible job: everything ends some day
            return Reservation(task.key, math.inf, frozenset())
        return Reservation(task.key, got[0], got[1])

    def _ends(self) -> Iterator[tuple[float, Alloc]]:
        """The running jobs' (end, allocation), soonest first, made as ``earliest`` walks
        them (it stops at the first that makes room), in C: a walk can take hundreds."""
        ends = self.st.ends
        return zip(map(_AT, ends), map(_ALLOC, map(self.st.running.__getitem__,
                                                  map(_ID, ends))), strict=True)
