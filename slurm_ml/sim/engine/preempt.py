"""Slurm's own preemption: a QOS ``alloc`` job that does not fit requeues QOS ``free`` jobs.

slurm-ml renders ``PreemptType=preempt/qos``, ``PreemptMode=REQUEUE`` and QOS ``alloc``
with ``Preempt=free``, so slurmctld itself, at scheduling time and without the daemon,
requeues free (unallocated, uncharged) work to start allocated work. This is what makes
unallocated work cheap to admit. Victims are chosen like Slurm's preempt/qos does in
spirit: only on nodes the job could use, the fewest GPUs taken away, youngest runs first
(least work lost). With a GraceTime (``SimSettings.free_grace_s``) the victims run on
until it ends, and only then free their GPUs (:mod:`slurm_ml.sim.engine.sched`).

The contracts' requeues (``policy.contracts.plan_requeues``) plan room node by node on
``sim.room.placement_nodes``, the same planner the daemon runs on what slurmctld reports.
"""

from __future__ import annotations

import math

from slurm_ml.sim.cluster import Alloc
from slurm_ml.sim.state import SimState, Task


def victims_for(st: SimState, task: Task) -> tuple[list[Task], Alloc] | None:
    """The free jobs to requeue so that ``task`` starts now, and where it would start;
    None when even requeueing every free job on usable nodes would not make room."""
    if st.free_running == 0:
        return None
    cluster = st.cluster
    types = task.types
    on_node: dict[int, list[Task]] = {}
    for other in st.free_tasks.values():  # the running free jobs, in start order
        # not one that started this instant: Slurm does not start and preempt a job in
        # the same pass (the baseline policies order free work among alloc work)
        if other.run_start >= st.now or other.grace_end is not None:
            continue  # ... nor one already preempted, in its grace
        for n, _ in other.alloc:
            if cluster.type_of[n] in types:
                on_node.setdefault(n, []).append(other)
    if not on_node:
        return None
    gpus = task.spec.gpus
    chosen: dict[int, Task] = {}
    if cluster.one_node(gpus, types):
        best: tuple[int, int, list[Task]] | None = None  # (GPUs taken, node, victims)
        for n, tasks in on_node.items():
            if cluster.gpn[n] < gpus:
                continue
            free, taken, picked = cluster.free[n], 0, []
            for other in sorted(tasks, key=lambda t: -t.run_start):  # youngest first
                if free >= gpus:
                    break
                got = _held_on(other, n)
                free += got
                taken += other.held
                picked.append(other)
            if free >= gpus and (best is None or taken < best[0]):
                best = (taken, n, picked)
        if best is None:
            return None
        chosen = {t.spec.job_id: t for t in best[2]}
    else:
        # whole nodes: those only free jobs (or nothing) hold, cheapest first
        whole = []
        for n, tasks in on_node.items():
            held = sum(_held_on(t, n) for t in tasks)
            if cluster.free[n] + held == cluster.gpn[n]:
                whole.append((sum(t.held for t in tasks), n, tasks))
        by_group: dict[tuple[int, int], list[tuple[int, int, list[Task]]]] = {}
        for item in whole:
            n = item[1]
            by_group.setdefault((cluster.type_of[n], cluster.gpn[n]), []).append(item)
        for (gtype, gpn), items in by_group.items():
            need = math.ceil(gpus / gpn) - cluster.whole_free(gtype, gpn)
            if need <= 0 or len(items) < need:
                continue
            for _, _, tasks in sorted(items)[:need]:
                chosen.update({t.spec.job_id: t for t in tasks})
            break
        if not chosen:
            return None
    victims = list(chosen.values())
    for v in victims:  # try it: free their GPUs, place, and put them back
        cluster.release(v.alloc)
    alloc = cluster.place(gpus, types)
    for v in victims:
        cluster.take(v.alloc)
    return None if alloc is None else (victims, alloc)


def _held_on(task: Task, node: int) -> int:
    alloc = task.alloc
    if len(alloc) == 1:  # most jobs: one node
        n, g = alloc[0]
        return g if n == node else 0
    return sum(g for n, g in alloc if n == node)
