"""``slurm-ml submitd``: the resident policy server the job_submit.lua shim asks.

One JSON line in, one JSON line out, over a Unix socket (mode 0660); the shim keeps its
connection open across submissions. Each connection is served by its own thread; the
decision itself is pure and takes well under a millisecond, so nothing on the request
path touches the database. SIGHUP reloads the config (a bad one is refused and the old
one kept) and refreshes the state. No failure of a reload stops submitd; a refused one is
logged and shown by ``ping`` (``config_reload_failed``), ``stats`` (also the errors) and
the metrics (:mod:`.metrics`) until a reload succeeds.
"""

from __future__ import annotations

import contextlib
import grp
import json
import logging
import os
import pwd
import signal
import socket
import socketserver
import stat
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from slurm_ml.config import Config, ConfigError, load_config
from slurm_ml.policy.admission import decide
from slurm_ml.policy.admission.cluster_view import ClusterView, cluster_view
from slurm_ml.policy.admission.state import LaneAdmission
from slurm_ml.policy.lane_requeue import wakes_on
from slurm_ml.submitd.auth import socket_dir_problem
from slurm_ml.submitd.metrics import SubmitdMetrics
from slurm_ml.submitd.state import StateRefresher
from slurm_ml.submitd.wire import (
    ROUTE_FIELDS,
    VERSION,
    BadRequest,
    asked_qos,
    before_update,
    merge_update,
    normalize,
    parse_line,
    reply_for,
    to_request,
    touched,
)
from slurm_ml.wake import Wake, send_wake

log = logging.getLogger(__name__)
MAX_LINE = 64 * 1024  # a job_desc summary is < 2 KiB; anything near this is garbage
#: The most issues of a refused config one log line and ``stats`` list (the file has all).
_SHOWN_ISSUES = 10


class SubmitdError(RuntimeError):
    """submitd cannot start (socket in use, bad path or group)."""


@dataclass(frozen=True, slots=True)
class Policy:
    """The config and the cluster view derived from it, swapped together on reload."""

    cfg: Config
    view: ClusterView


class PolicyServer:
    """Answers request lines; independent of the transport so tests and benchmarks call it."""

    def __init__(self, cfg: Config, refresher: StateRefresher, config_path: Path | None = None,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 metrics: SubmitdMetrics | None = None) -> None:
        self.policy = Policy(cfg, cluster_view(cfg))
        self.refresher = refresher
        self.config_path = config_path
        self.clock = clock
        self.counts: Counter[str] = Counter()
        self.started = time.time()
        self.config_loaded_at = self.started  # when the running config was read
        #: the last reload's errors while it failed (the running config is older than
        #: the file); None once a reload succeeds
        self.reload_errors: list[str] | None = None
        self.metrics = metrics or SubmitdMetrics(_shim_timeout_s(cfg))
        self.metrics.watch(
            state_error=lambda: refresher.last_error is not None,
            state_loaded=lambda: (refresher.current.loaded_at.timestamp()
                                  if refresher.current.loaded_at else 0.0),
            reload_failed=lambda: self.reload_errors is not None,
            config_loaded=lambda: self.config_loaded_at)

    def reload(self) -> bool:
        """Re-read the config file; keep the old one if the new one is bad.

        Never raises (it runs in SIGHUP's handler, in the thread that serves until
        SIGTERM): the loader reports a file's every problem as a ConfigError, and
        anything else (a bug) is logged with its traceback and refused the same way.
        """
        if self.config_path is None:
            self.refresher.poke()
            return False
        try:
            cfg = load_config(self.config_path)
            policy = Policy(cfg, cluster_view(cfg))
        except ConfigError as exc:
            errors = [str(issue) for issue in exc.issues]
            log.error("event=config_reload_refused path=%s issues=%d errors=%s (config reload "
                      "refused, keeping the running config)", self.config_path, len(errors),
                      json.dumps(errors[:_SHOWN_ISSUES]))
            self._refused(errors)
            return False
        except Exception as exc:
            log.exception("event=config_reload_failed path=%s (config reload refused, keeping "
                          "the running config)", self.config_path)
            self._refused([f"{self.config_path}: could not be read: "
                           f"{type(exc).__name__}: {exc}"[:500]])
            return False
        self.policy = policy
        self.config_loaded_at = time.time()
        self.reload_errors = None
        self.counts["reloads"] += 1
        log.warning("event=config_reloaded path=%s", self.config_path)
        self.refresher.set_config(cfg)  # also refreshes the state
        return True

    def _refused(self, errors: list[str]) -> None:
        self.reload_errors = errors
        self.counts["reload_refused"] += 1
        self.refresher.poke()  # the state is refreshed all the same

    def handle_line(self, line: bytes | str) -> dict[str, Any]:
        """One request line → the reply object. Never raises."""
        t0 = time.perf_counter()
        reply, action = self._answer(line, t0)
        if action is not None:  # a submission or an update, not a control request
            self.metrics.answered(action, time.perf_counter() - t0,
                                  _shim_timeout_s(self.policy.cfg))
        return reply

    def long_line(self) -> dict[str, Any]:
        """The reply to a request line longer than MAX_LINE (never read whole)."""
        self.counts["bad_request"] += 1
        self.metrics.answered("bad_request", 0.0, _shim_timeout_s(self.policy.cfg))
        return {"v": VERSION, "action": "error", "error": "request line too long"}

    def _answer(self, line: bytes | str, t0: float) -> tuple[dict[str, Any], str | None]:
        """The reply, and how it answers a submission or update (``metrics.ACTIONS``;
        None for ping, stats and refresh)."""
        try:
            env = parse_line(line)
            if env.op == "ping":
                return {"v": VERSION, "action": "pong",
                        "config_reload_failed": self.reload_errors is not None}, None
            if env.op == "stats":
                return {"v": VERSION, "action": "stats", "stats": self.stats()}, None
            if env.op == "refresh":  # asynchronous: poll stats until refresh_served >= request
                request = self.refresher.request_refresh()
                return {"v": VERSION, "action": "refreshing",
                        "generation": self.refresher.generation, "request": request}, None
            policy, state = self.policy, self.refresher.current
            update = env.op == "modify"
            if update:
                fields = touched(env.job)
                if not fields:
                    return ({"v": VERSION, "action": "accept", "set": {}, "message": ""},
                            "accept")
                job = merge_update(env.current, env.job)
                job.setdefault("user_name", _user_name(job.get("user_id")))
                # QOS, account or partition: judged by routing as a submission would be
                routing = bool(fields & ROUTE_FIELDS)
            else:
                job = normalize(env.job)
                routing = True
            req = to_request(job)
            now = self.clock()
            decision = decide(req, policy.cfg, policy.view, state, now,
                              routing=routing, update=update, asked_qos=asked_qos(env.job),
                              before=before_update(env.current) if update else None)
            if decision.accept and decision.lane is not None:
                self.refresher.note_lane(LaneAdmission(now, *decision.lane))
                self._wake_daemon(policy.cfg, now, req.name, decision.lane[0])
            wait_s = int(policy.cfg.policy.admission.leaf_switch_wait_min * 60)
            reply = reply_for(decision, job, req, leaf_wait_s=wait_s, update=update)
            self.counts[reply["action"]] += 1
            # Rejects are worth a line at INFO; every accepted job's decision is already
            # stamped into its AdminComment, so those lines are DEBUG (they cost CPU on
            # slurmctld's critical path).
            log.log(logging.INFO if reply["action"] == "reject" else logging.DEBUG,
                    "decision op=%s job=%s user=%s name=%s action=%s set=%s ms=%.2f",
                    env.op, req.job_id, req.user, req.name, reply["action"],
                    ",".join(sorted(reply.get("set", {}))) or "-",
                    (time.perf_counter() - t0) * 1000)
            if reply["action"] == "reject":
                return reply, "reject"
            return reply, "rewrite" if reply.get("set") else "accept"
        except BadRequest as exc:
            self.counts["bad_request"] += 1
            log.warning("bad request: %s", exc)
            return {"v": VERSION, "action": "error", "error": str(exc)}, "bad_request"
        except Exception as exc:  # a policy bug must not take submissions down with it
            self.counts["internal_error"] += 1
            log.exception("internal error on a request; the shim accepts the job unchanged")
            return ({"v": VERSION, "action": "error", "error": f"internal error: {exc}"},
                    "internal_error")

    def _wake_daemon(self, cfg: Config, now: datetime, name: str, account: str) -> None:
        """Tell the daemon a job entered the lane, for the cycles that can make room for
        it (:mod:`slurm_ml.wake`, ``lane_requeue.wake_times``); never blocks, never fails
        the request."""
        if not cfg.daemon.wake_socket or not wakes_on(cfg.policy.fast_lane):
            return
        sent = send_wake(cfg.daemon.wake_socket, Wake(now.timestamp(), name, account))
        self.counts["wakes_sent" if sent else "wakes_unsent"] += 1

    def stats(self) -> dict[str, Any]:
        state = self.refresher.current
        return {
            "uptime_s": round(time.time() - self.started, 1),
            "counts": dict(self.counts),
            "config": str(self.config_path) if self.config_path else None,
            "config_loaded_at": datetime.fromtimestamp(self.config_loaded_at, UTC).isoformat(),
            "config_reload_failed": self.reload_errors is not None,
            "config_reload_errors": (None if self.reload_errors is None
                                     else self.reload_errors[:_SHOWN_ISSUES]),
            "state_generation": self.refresher.generation,
            "refresh_served": self.refresher.served,
            "state_loaded_at": state.loaded_at.isoformat() if state.loaded_at else None,
            "state_error": self.refresher.last_error,
            "accounts": len(state.standing),
            "profiles": len(state.profiles_gb),
            "default_accounts": len(state.default_accounts),
            "slurm_error": self.refresher.slurm_error,
        }


def _shim_timeout_s(cfg: Config) -> float:
    """How long the shim waits for a reply before it lets the job through unchanged."""
    return cfg.policy.admission.socket_timeout_ms / 1000


def _user_name(uid: object) -> str | None:
    """The job owner's name: job_rec carries only the uid in slurm_job_modify."""
    if not isinstance(uid, int):
        return None
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


class _Handler(socketserver.StreamRequestHandler):
    """One shim connection, in its own thread; the shim keeps it open across submissions.

    Blocking reads and writes on a thread per connection: per request that is one
    recv, the decision and one send, which keeps submitd's CPU per submission close to
    the policy's own cost (slurmctld waits for us under its locks).
    """

    server: _Server

    def handle(self) -> None:
        policy = self.server.policy_server
        while True:
            try:
                line = self.rfile.readline(MAX_LINE + 1)
            except OSError:
                return
            if not line:
                return
            if len(line) > MAX_LINE and not line.endswith(b"\n"):
                self._send(policy.long_line())
                return
            if not self._send(policy.handle_line(line)):
                return

    def _send(self, reply: dict[str, Any]) -> bool:
        if self.server.auth_key:  # proves to the shim that submitd answers (submitd.auth)
            reply = {**reply, "auth": self.server.auth_key}
        try:
            self.wfile.write(json.dumps(reply, separators=(",", ":")).encode() + b"\n")
        except OSError:
            return False  # the shim gave up (timeout); nothing to answer
        return True


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 256  # socketserver's 5 makes a burst of connects fail with EAGAIN

    def __init__(self, path: Path, policy_server: PolicyServer, auth_key: str | None) -> None:
        self.policy_server = policy_server
        self.auth_key = auth_key
        super().__init__(str(path), _Handler)


def _require_private_dir(path: Path) -> None:
    """Refuse a socket directory that would let someone else bind the path once submitd
    stops (:func:`~slurm_ml.submitd.auth.socket_dir_problem`)."""
    problem = socket_dir_problem(path)
    if problem is not None:
        raise SubmitdError(f"refusing to listen on {path}: {problem}")


def _claim_socket_path(path: Path) -> None:
    """Remove a stale socket left by a crash; refuse if another submitd is listening, or
    if the directory would let someone else bind the path once submitd stops."""
    _require_private_dir(path)
    if not path.exists() and not path.is_symlink():
        path.parent.mkdir(parents=True, exist_ok=True)
        # Again once it exists: under a parent others may write (sticky /tmp), someone
        # else may have made the directory between the check and the mkdir.
        _require_private_dir(path)
        return
    if not stat.S_ISSOCK(path.lstat().st_mode):
        raise SubmitdError(f"{path} exists and is not a socket; refusing to replace it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1)
        probe.connect(str(path))
    except OSError:
        path.unlink()
        return
    finally:
        probe.close()
    raise SubmitdError(f"another submitd is already listening on {path}")


class Listener:
    """The bound socket and its accept thread; ``serve`` adds the signal handling."""

    def __init__(self, server: PolicyServer, socket_path: Path, group: str | None = None,
                 auth_key: str | None = None):
        _claim_socket_path(socket_path)
        self.path = socket_path
        self._srv = _Server(socket_path, server, auth_key)
        self._inode = socket_path.lstat().st_ino
        self._thread: threading.Thread | None = None
        try:
            if group:
                try:
                    os.chown(socket_path, -1, grp.getgrnam(group).gr_gid)
                except KeyError:
                    raise SubmitdError(f"group {group!r} does not exist") from None
            os.chmod(socket_path, 0o660)
        except BaseException:
            self.close()
            raise

    def start(self) -> None:
        self._thread = threading.Thread(target=self._srv.serve_forever, name="accept",
                                        daemon=True)
        self._thread.start()

    def close(self) -> None:
        if self._thread is not None:
            self._srv.shutdown()  # waits for serve_forever to return
            self._thread = None
        self._srv.server_close()
        # Only our own socket: a submitd started after this one was killed has bound the
        # path anew, and removing its socket would leave it deaf.
        with contextlib.suppress(FileNotFoundError):
            if self.path.lstat().st_ino == self._inode:
                self.path.unlink()


def _reload(server: PolicyServer) -> None:
    """SIGHUP's handler. An exception here would surface in the serving loop and stop
    submitd; reload() raises none, and this makes sure of it."""
    try:
        server.reload()
    except Exception:
        log.exception("event=config_reload_failed (keeping the running config)")


def serve(server: PolicyServer, socket_path: Path, group: str | None = None,
          auth_key: str | None = None) -> None:
    """Listen until SIGTERM/SIGINT; SIGHUP reloads the config and refreshes the state.
    ``auth_key`` goes into every reply, for the shim to check (:mod:`.auth`).

    Runs in the main thread: Python delivers signals there.
    """
    listener = Listener(server, socket_path, group, auth_key)
    stop = threading.Event()
    try:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        signal.signal(signal.SIGHUP, lambda *_: _reload(server))
        listener.start()
        log.warning("submitd listening on %s (mode 0660%s; replies %s)", socket_path,
                    f", group {group}" if group else "",
                    "carry the reply key" if auth_key else "carry no key")
        while not stop.wait(1.0):
            pass
        log.warning("submitd stopping")
    finally:
        listener.close()
