"""The audit log's drains, alarms and passes, as the hooks read them.

The readers live in ``slurm_ml.store.audit_log`` so that the daemon (which may not
import hooks) reads the breakers' inputs with the same code; this module keeps the
hooks' import path.
"""

from __future__ import annotations

from slurm_ml.store.audit_log import (
    DRAIN,
    PASS_CHECK,
    RESET,
    RESUME,
    TRIP,
    class_nodes,
    drain_checks,
    drain_events,
    entry_scope,
    last_drain_at,
    last_resets,
    open_alarms,
    owned_drained,
    run_results,
)

__all__ = [
    "DRAIN",
    "PASS_CHECK",
    "RESET",
    "RESUME",
    "TRIP",
    "class_nodes",
    "drain_checks",
    "drain_events",
    "entry_scope",
    "last_drain_at",
    "last_resets",
    "open_alarms",
    "owned_drained",
    "run_results",
]
