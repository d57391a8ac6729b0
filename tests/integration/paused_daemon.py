"""Test-only entry point: ``python paused_daemon.py SECONDS ARGS...`` runs the real
``slurm-ml daemon ARGS...`` and sleeps SECONDS after each recorded intent, before its
action, so that a test can kill -9 the process between the two.

slurm-ml itself has no setting for this. :class:`slurm_ml.daemon.loop.Daemon` takes an
``after_intent`` hook; this wrapper hands it one by wrapping the constructor, then runs
the unchanged command line.
"""

from __future__ import annotations

import functools
import logging
import sys
import time
from typing import Any

from slurm_ml.daemon import loop
from slurm_ml.daemon.plan import Action


def main() -> None:
    seconds = float(sys.argv[1])
    log = logging.getLogger("paused_daemon")

    def pause(action: Action) -> None:
        log.warning("event=test_pause_after_intent key=%s seconds=%s", action.key, seconds)
        time.sleep(seconds)

    init = loop.Daemon.__init__

    @functools.wraps(init)
    def with_pause(self: loop.Daemon, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("after_intent", pause)
        init(self, *args, **kwargs)

    loop.Daemon.__init__ = with_pause  # type: ignore[method-assign]

    from slurm_ml.cli import main as cli

    cli(args=["daemon", *sys.argv[2:]], prog_name="slurm-ml")


if __name__ == "__main__":
    main()
