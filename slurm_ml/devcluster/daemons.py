"""Start, find and stop the dev cluster's daemons by pid file.

``down`` must stop only what ``up`` started, so every daemon has a pid file
under the state directory and we check ``/proc/<pid>/cmdline`` names the
program we expect before signalling it (pids get reused).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path


def read_pid(pidfile: Path) -> int | None:
    try:
        text = pidfile.read_text().split("\n", 1)[0].strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace")


def is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


def alive(pidfile: Path, program: str) -> int | None:
    """The pid in ``pidfile`` if that process is running ``program``, else None."""
    pid = read_pid(pidfile)
    if pid is None or is_zombie(pid):
        return None
    return pid if program in cmdline(pid) else None


def wait_for(
    what: str, check: Callable[[], bool], timeout_s: float, interval_s: float = 0.5
) -> None:
    """Poll ``check`` until it is true; raise TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if check():
                return
        except Exception:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not ready after {timeout_s:g}s")
        time.sleep(interval_s)


def stop(pidfile: Path, program: str, timeout_s: float = 15.0) -> bool:
    """SIGTERM the daemon, then SIGKILL after ``timeout_s``. True if one was running."""
    pid = alive(pidfile, program)
    if pid is None:
        pidfile.unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        # The process itself, not only its pid file: slurmctld removes its pid file before
        # it has exited, and whoever asks next (is munged still needed?) must not see it.
        if alive(pidfile, program) is None and is_zombie(pid):  # gone, or a zombie
            break
        time.sleep(0.2)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    pidfile.unlink(missing_ok=True)
    return True
