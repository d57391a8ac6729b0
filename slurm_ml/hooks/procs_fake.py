"""FakeProcessTable: a stateful process table for epilog tests (no real signals)."""

from __future__ import annotations

import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["FakeProc", "FakeProcessTable"]


@dataclass
class FakeProc:
    """``ignores_term``: survives SIGTERM; ``unkillable``: survives SIGKILL too (stuck in
    the driver, state D)."""

    pid: int
    cgroup: str = ""
    environ: dict[str, str] = field(default_factory=dict)
    alive: bool = True
    ignores_term: bool = False
    unkillable: bool = False


class FakeProcessTable:
    def __init__(self, procs: Iterable[FakeProc] = ()) -> None:
        self.procs: dict[int, FakeProc] = {p.pid: p for p in procs}
        self.signals: list[tuple[int, signal.Signals]] = []

    def add(self, proc: FakeProc) -> FakeProc:
        self.procs[proc.pid] = proc
        return proc

    def _live(self, pid: int) -> FakeProc | None:
        p = self.procs.get(pid)
        return p if p is not None and p.alive else None

    def cgroup(self, pid: int) -> str | None:
        p = self._live(pid)
        return None if p is None else p.cgroup

    def environ(self, pid: int) -> Mapping[str, str] | None:
        p = self._live(pid)
        return None if p is None else dict(p.environ)

    def alive(self, pid: int) -> bool:
        return self._live(pid) is not None

    def kill(self, pid: int, sig: signal.Signals) -> None:
        if pid <= 1:
            raise ValueError(f"refusing to signal pid {pid}")
        self.signals.append((pid, sig))
        p = self._live(pid)
        if p is None or p.unkillable:
            return
        if sig == signal.SIGKILL or (sig == signal.SIGTERM and not p.ignores_term):
            p.alive = False

    def signalled(self) -> set[int]:
        """Every pid that got any signal."""
        return {pid for pid, _ in self.signals}
