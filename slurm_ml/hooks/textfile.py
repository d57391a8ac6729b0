"""The periodic check's node_exporter textfile: counted, rendered, written, never in the way.

Every periodic run hands what it knows about its node to a :data:`Publish`; the one
:func:`publisher` builds adds the local spool's backlog, renders the metric families
(``health.textfile``) and writes ``slurm-ml-<node>.prom`` into ``health.textfile_dir``
(``health.textfile_write``). Metrics are for operators to look at; a check must never
decide differently, or exit differently, because they could not be written. So a
missing directory, a full disk or a bug here becomes one note in the run's outcome (its
log line), and nothing else.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path

from slurm_ml.health.textfile import NodeHealth, render
from slurm_ml.health.textfile_write import write_textfile
from slurm_ml.store.errors import SpoolError
from slurm_ml.store.protocol import Store
from slurm_ml.store.spool import SpoolingStore

__all__ = ["Publish", "publisher", "spooled"]

log = logging.getLogger(__name__)

#: Publishes one run's view of its node; returns why nothing was published, None when it
#: was.
Publish = Callable[[NodeHealth], str | None]


def publisher(directory: Path, store: Store) -> Publish:
    """Write each run's textfile into ``directory``, with ``store``'s spool backlog."""

    def publish(health: NodeHealth) -> str | None:
        if not directory.is_dir():
            # Not created: its absence says no node_exporter reads there (none installed,
            # or one pointed elsewhere), so a file there would help no one.
            return f"{directory} does not exist"
        try:
            health = dataclasses.replace(health, spool_records=spooled(store))
            write_textfile(directory, health.node, render(health))
        except OSError as exc:
            return str(exc)
        except Exception as exc:  # a bug in the metrics must not fail the check
            log.exception("textfile of %s", health.node)
            return f"{type(exc).__name__}: {exc}"
        return None

    return publish


def spooled(store: Store) -> int | None:
    """Records waiting in ``store``'s local spool; None when it has none or it cannot be
    read. ``Spool.pending_count`` takes none of the spool's locks, and needs none: the
    file is only appended to or replaced whole, so it counts the backlog as it was at
    some moment of the read."""
    if not isinstance(store, SpoolingStore):
        return None
    try:
        return store.spool.pending_count()
    except SpoolError as exc:
        log.debug("spool not counted: %s", exc)
        return None
