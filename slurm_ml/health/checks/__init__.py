"""Pure GPU health checks: a NodeSnapshot in, sorted Findings out.

No I/O and no clock: the probe (NVML or a replayed capture) produces the snapshot, the
caller supplies time (``xid_since``) and the job's GPUs and processes. Thresholds and
their sources: ``expect.Thresholds``; the check table is docs/design.md's "GPU health: what to
check and what to do".
"""

from __future__ import annotations

from slurm_ml.health.checks.expect import (
    XID_DRAIN,
    XID_IGNORE,
    Expectations,
    Thresholds,
    expectations_for,
    topology_cell,
)
from slurm_ml.health.checks.findings import Finding, Severity, sort_findings
from slurm_ml.health.checks.node import check_node
from slurm_ml.health.checks.reason import PREFIX, drain_reason, worst

__all__ = [
    "PREFIX",
    "XID_DRAIN",
    "XID_IGNORE",
    "Expectations",
    "Finding",
    "Severity",
    "Thresholds",
    "check_node",
    "drain_reason",
    "expectations_for",
    "sort_findings",
    "topology_cell",
    "worst",
]
