"""Kill a finished job's leftover GPU processes, and only that job's.

SIGTERM, wait up to ``term_wait_s`` for them to exit, SIGKILL what is left, wait up to
``kill_wait_s``, re-check. Before SIGKILL each pid's job is checked again, so a pid the
kernel reused meanwhile for another job's process is not hit. What survives SIGKILL is
stuck in the driver and means the node needs a reset: the epilog drains it.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from slurm_ml.health.snapshot import NodeSnapshot
from slurm_ml.hooks.procs import ProcessTable, job_of

__all__ = ["KillResult", "gpu_pids", "kill_job_processes"]


@dataclass(frozen=True, slots=True)
class KillResult:
    """``targets``: the job's GPU processes found; ``terminated``: gone after SIGTERM;
    ``killed``: gone after SIGKILL; ``survivors``: still there; ``foreign``: GPU processes
    of another job (or of none), left alone."""

    targets: tuple[int, ...] = ()
    terminated: tuple[int, ...] = ()
    killed: tuple[int, ...] = ()
    survivors: tuple[int, ...] = ()
    foreign: tuple[int, ...] = ()


def gpu_pids(snap: NodeSnapshot) -> dict[int, tuple[int, ...]]:
    """pid → the GPU indices it runs on, from every GPU's process list."""
    out: dict[int, set[int]] = {}
    for g in snap.gpus:
        for p in g.processes or ():
            out.setdefault(p.pid, set()).add(g.index)
    return {pid: tuple(sorted(gpus)) for pid, gpus in sorted(out.items())}


def _wait(pids: list[int], procs: ProcessTable, limit_s: float, poll_s: float,
          sleep: Callable[[float], None]) -> list[int]:
    """Poll until every pid is gone or ``limit_s`` passed; the ones still alive."""
    waited = 0.0
    alive = [p for p in pids if procs.alive(p)]
    while alive and waited < limit_s:
        step = min(poll_s, limit_s - waited)
        sleep(step)
        waited += step
        alive = [p for p in alive if procs.alive(p)]
    return alive


def kill_job_processes(pids: Iterable[int], job_id: int, procs: ProcessTable, *,
                       sleep: Callable[[float], None], term_wait_s: float = 5.0,
                       kill_wait_s: float = 2.0, poll_s: float = 0.25) -> KillResult:
    """Terminate those of ``pids`` that belong to ``job_id``; see the module doc."""
    mine: list[int] = []
    foreign: list[int] = []
    for pid in sorted(set(pids)):
        if pid <= 1 or not procs.alive(pid):
            continue
        (mine if job_of(procs, pid) == job_id else foreign).append(pid)
    if not mine:
        return KillResult(foreign=tuple(foreign))
    for pid in mine:
        procs.kill(pid, signal.SIGTERM)
    left = _wait(mine, procs, term_wait_s, poll_s, sleep)
    left = [p for p in left if job_of(procs, p) == job_id]  # not a reused pid
    for pid in left:
        procs.kill(pid, signal.SIGKILL)
    survivors = _wait(left, procs, kill_wait_s, poll_s, sleep)
    gone_term = [p for p in mine if p not in left]
    return KillResult(targets=tuple(mine), terminated=tuple(gone_term),
                      killed=tuple(p for p in left if p not in survivors),
                      survivors=tuple(survivors), foreign=tuple(foreign))
