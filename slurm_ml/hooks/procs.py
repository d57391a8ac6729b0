"""The process boundary of the epilog: which job a process belongs to, and signals.

``ProcessTable`` is the Protocol; ``ProcFs`` reads the real ``/proc`` and signals with
``os.kill``; ``slurm_ml.hooks.procs_fake.FakeProcessTable`` is the stateful fake.

A process belongs to job N when its cgroup path has a ``job_N`` component (cgroup v1
``/slurm/uid_1000/job_N/step_0``, v2 ``/system.slice/slurmstepd.scope/job_N/...``); only
when its cgroup names no job at all does its environment decide (``SLURM_JOB_ID=N``).
So a process that carries job A's environment but lives in job B's cgroup is B's. A
user name never decides.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol, runtime_checkable

__all__ = ["ProcFs", "ProcessTable", "job_of"]

_JOB = re.compile(r"/job_(\d+)(?=/|$)", re.MULTILINE)


@runtime_checkable
class ProcessTable(Protocol):
    def cgroup(self, pid: int) -> str | None:
        """The text of /proc/<pid>/cgroup, None if the process is gone or unreadable."""
        ...

    def environ(self, pid: int) -> Mapping[str, str] | None:
        """The process's environment, None if it is gone or unreadable."""
        ...

    def alive(self, pid: int) -> bool:
        """True while the process exists and is not a zombie."""
        ...

    def kill(self, pid: int, sig: signal.Signals) -> None:
        """Send ``sig``; a process that is already gone is not an error."""
        ...


def job_of(procs: ProcessTable, pid: int) -> int | None:
    """The Slurm job ``pid`` belongs to (cgroup first, then SLURM_JOB_ID), None if none."""
    cg = procs.cgroup(pid)
    if cg:
        jobs = {int(m) for m in _JOB.findall(cg)}
        if len(jobs) == 1:
            return jobs.pop()
        if jobs:  # two jobs in one process's cgroups: ambiguous, not ours to judge
            return None
    env = procs.environ(pid)
    raw = (env or {}).get("SLURM_JOB_ID", "").strip()
    return int(raw) if raw.isdigit() else None


class ProcFs:
    """``ProcessTable`` over a real /proc (``root`` for tests of the parsing)."""

    def __init__(self, root: Path = Path("/proc")) -> None:
        self.root = root

    def cgroup(self, pid: int) -> str | None:
        try:
            return (self.root / str(pid) / "cgroup").read_text(errors="replace")
        except OSError:
            return None

    def environ(self, pid: int) -> Mapping[str, str] | None:
        try:
            raw = (self.root / str(pid) / "environ").read_bytes()
        except OSError:
            return None
        out = {}
        for item in raw.split(b"\0"):
            key, sep, value = item.partition(b"=")
            if sep and key:
                out[key.decode(errors="replace")] = value.decode(errors="replace")
        return out

    def alive(self, pid: int) -> bool:
        try:
            stat = (self.root / str(pid) / "stat").read_text(errors="replace")
        except OSError:
            return False
        state = stat.rpartition(")")[2].split()[:1]  # the field after "(comm)"
        return state not in (["Z"], ["X"], ["x"])

    def kill(self, pid: int, sig: signal.Signals) -> None:
        if pid <= 1:
            raise ValueError(f"refusing to signal pid {pid}")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
