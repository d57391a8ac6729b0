"""What a health check reports: a finding, and how bad it is."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Severity(enum.StrEnum):
    """What to do about a finding, worst first.

    ``DRAIN_NOW``: the GPU must not run this job (the prolog fails, Slurm requeues the
    job elsewhere). ``DRAIN_AFTER_JOB``: let the running or starting job finish, take no
    new work (a reset or reboot fixes it). ``FLAG``: log and count it, change nothing.
    """

    DRAIN_NOW = "drain"
    DRAIN_AFTER_JOB = "drain_after_job"
    FLAG = "flag"

    @property
    def rank(self) -> int:
        """0 for the worst severity; sorting by rank puts drains first."""
        return _RANK[self]

    @property
    def drains(self) -> bool:
        return self is not Severity.FLAG


_RANK = {Severity.DRAIN_NOW: 0, Severity.DRAIN_AFTER_JOB: 1, Severity.FLAG: 2}


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing a check found wrong (or could not look at).

    ``check_id`` is stable and dotted ("nvlink.active_links", "xid.79"); ``gpu`` is the
    NVML index, None for node-level findings. ``message`` is one sentence for an operator,
    ``detail`` a terse parenthetical for a Slurm drain reason ("0/12 active"), and
    ``evidence`` the numbers behind it, JSON-able.
    """

    check_id: str
    severity: Severity
    gpu: int | None
    message: str
    evidence: dict[str, object] = field(default_factory=dict, hash=False)
    detail: str = ""

    def sort_key(self) -> tuple[int, int, str, str]:
        return (self.severity.rank, -1 if self.gpu is None else self.gpu, self.check_id,
                self.message)


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Deterministic order: severity (worst first), GPU (node-level first), check id."""
    return sorted(findings, key=Finding.sort_key)
