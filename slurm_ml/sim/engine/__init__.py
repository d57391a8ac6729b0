"""The discrete-event simulator: a virtual clock jumping between arrivals, ends and cycles.

Between events nothing happens, so the clock jumps (no per-second ticks). At each
event time the ends are handled first (GPUs freed), then the arrivals, then, when one is
due, the policy cycle (re-order, requeues) and a scheduling pass. Every cycle leaves a
:class:`~slurm_ml.sim.result.CycleSample`. The same policy functions the daemon runs
decide the order and the requeues (:mod:`slurm_ml.sim.policies`); the engine only keeps
the books, in :mod:`slurm_ml.sim.state`.

Callers import from here. The parts:

* :mod:`.loop`: :class:`Engine` and :func:`simulate`, the clock and its events;
* :mod:`.sched`: Slurm's scheduling pass, EASY backfill around one reservation;
* :mod:`.preempt`: Slurm's own preempt/qos, QOS ``alloc`` requeueing QOS ``free``;
* :mod:`.sample`: each cycle's sample of who holds, who waits, and what is idle.
"""

from slurm_ml.sim.engine.loop import POLICIES, CycleRecord, Engine, SimSettings, simulate

__all__ = ["POLICIES", "CycleRecord", "Engine", "SimSettings", "simulate"]
