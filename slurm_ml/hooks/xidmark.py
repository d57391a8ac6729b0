"""When this node's hooks last read the kernel log: the next run judges only newer Xids.

An Xid is reported once: by the first prolog, epilog or periodic run after it was logged
(a drain-listed Xid from before a GPU reset must not drain the node again at every job).
A node-local file, so it works with the database down.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def _path(state_dir: Path, node: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in node) or "node"
    return state_dir / f"xid-mark-{safe}"


def read_mark(state_dir: Path | None, node: str) -> float | None:
    """Epoch seconds of the last kernel-log read, or None (judge everything since boot)."""
    if state_dir is None:
        return None
    try:
        return float(_path(state_dir, node).read_text().strip())
    except (OSError, ValueError):
        return None


def write_mark(state_dir: Path | None, node: str, epoch_s: float) -> None:
    """Best effort, atomic: a lost mark only means Xids may be judged twice."""
    if state_dir is None:
        return
    target = _path(state_dir, node)
    tmp = target.with_suffix(".tmp")
    with contextlib.suppress(OSError):
        state_dir.mkdir(parents=True, exist_ok=True)
        tmp.write_text(f"{epoch_s}\n")
        os.replace(tmp, target)
