"""submitd's wake for the daemon: a cycle soon after a job enters the fast lane.

A lane job that cannot start may get room from the daemon's lane requeues
(``policy.lane_requeue``), but only in a cycle: with the 60 s default it would wait up
to a minute for one, on top of ``preempt_after_s``. So submitd, which sees the job
first, sends the daemon one datagram when it lanes a job, and the daemon runs a cycle
``preempt_after_s`` later (``policy.lane_requeue.wake_cycle_at``).

The channel is a Unix datagram socket (``daemon.wake_socket``): sending never blocks
and never fails the submission (no listener, a full queue or a bad path are ignored;
the next regular cycle still comes), and a wake is only a hint, so a lost or forged
one costs at most an early cycle, no more often than ``fast_lane.wake_min_gap_s``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import socket
import threading
from bisect import insort
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["Wake", "WakeBox", "WakeError", "WakeListener", "decode", "encode", "send_wake"]

VERSION = 1
_MAX_DATAGRAM = 512


class WakeError(ValueError):
    """A datagram that is not a wake (the listener logs and drops it)."""


@dataclass(frozen=True, slots=True)
class Wake:
    """A job entered the lane at ``at`` (epoch seconds)."""

    at: float
    job_name: str = ""
    account: str = ""


def encode(wake: Wake) -> bytes:
    return json.dumps({"v": VERSION, "op": "lane", "at": wake.at, "name": wake.job_name,
                       "account": wake.account}).encode()


def decode(data: bytes) -> Wake:
    """The wake in ``data``; :class:`WakeError` saying what is wrong otherwise."""
    try:
        msg = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WakeError(f"not JSON: {exc}") from None
    if not isinstance(msg, dict) or msg.get("v") != VERSION or msg.get("op") != "lane":
        raise WakeError(f"not a version-{VERSION} lane wake: {str(msg)[:80]}")
    at = msg.get("at")
    if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at):
        raise WakeError(f"'at' must be epoch seconds, got {at!r}")
    name, account = str(msg.get("name", "")), str(msg.get("account", ""))
    return Wake(float(at), name[:200], account[:200])


def send_wake(path: str, wake: Wake) -> bool:
    """Send ``wake`` to the daemon at ``path``, never blocking; True if it was sent."""
    if not path:
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.setblocking(False)
            s.sendto(encode(wake), path)
    except OSError as exc:  # no daemon listening, queue full, no such path, permissions
        log.debug("event=wake_not_sent path=%s error=%s", path, exc)
        return False
    return True


class WakeBox:
    """The times the daemon was asked to cycle at, thread-safe: the listener adds, the
    loop reads the earliest and drops those a cycle has served."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._times: list[float] = []
        self.received = 0

    def request(self, at: float) -> None:
        with self._lock:
            insort(self._times, at)
            self.received += 1

    def next_at(self) -> float | None:
        with self._lock:
            return self._times[0] if self._times else None

    def served(self, cycle_at: float) -> int:
        """Drop the wakes due by ``cycle_at`` (a cycle that began then saw their jobs
        waiting long enough); how many were dropped."""
        with self._lock:
            keep = [t for t in self._times if t > cycle_at]
            dropped = len(self._times) - len(keep)
            self._times = keep
            return dropped


def _listened(path: Path) -> bool:
    """Whether a live socket is bound at ``path`` (a stale file refuses connections)."""
    if not path.exists():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


class WakeListener:
    """Receives wakes on a Unix datagram socket in a thread, and hands each to
    ``on_wake``. The socket file is created mode 0660 (submitd runs as the daemon's
    service user or group) and removed on :meth:`close`."""

    def __init__(self, path: Path, on_wake: Callable[[Wake], None]) -> None:
        self.path = path
        self._on_wake = on_wake
        self._stop = threading.Event()
        self.rejected = 0
        if _listened(path):
            raise WakeError(f"{path}: another process listens on it (a second daemon on "
                            "this host?); this one runs without wakes")
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a stale socket of an earlier run
        path.parent.mkdir(parents=True, exist_ok=True)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self._sock.bind(str(path))
            os.chmod(path, 0o660)
        except OSError:
            self._sock.close()
            raise
        self._sock.settimeout(0.5)
        self._thread = threading.Thread(target=self._serve, name="wake-listener", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data = self._sock.recv(_MAX_DATAGRAM)
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                raise
            try:
                wake = decode(data)
            except WakeError as exc:
                self.rejected += 1
                log.warning("event=wake_rejected path=%s error=%s", self.path, exc)
                continue
            self._on_wake(wake)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._sock.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
