"""``slurm-ml submitd``: the resident policy server the job_submit.lua shim asks.

One JSON line in, one JSON line out, over a Unix socket (mode 0660); the shim keeps its
connection open across submissions. Connections are served concurrently by asyncio; the
decision itself is pure and takes well under a millisecond, so nothing on the request
path touches the database. SIGHUP reloads the config (a bad one is refused and the old
one kept) and refreshes the state.
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import json
import logging
import os
import pwd
import signal
import socket
import stat
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from slurm_ml.config import Config, ConfigError, load_config
from slurm_ml.policy.admission import decide
from slurm_ml.policy.cluster_view import ClusterView, cluster_view
from slurm_ml.submitd.state import StateRefresher
from slurm_ml.submitd.wire import (
    SHAPE_FIELDS,
    VERSION,
    BadRequest,
    merge_update,
    normalize,
    parse_line,
    reply_for,
    to_request,
)

log = logging.getLogger(__name__)
MAX_LINE = 64 * 1024  # a job_desc summary is < 2 KiB; anything near this is garbage


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
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.policy = Policy(cfg, cluster_view(cfg))
        self.refresher = refresher
        self.config_path = config_path
        self.clock = clock
        self.counts: Counter[str] = Counter()
        self.started = time.time()

    def reload(self) -> bool:
        """Re-read the config file; keep the old one if the new one is bad."""
        if self.config_path is None:
            self.refresher.poke()
            return False
        try:
            cfg = load_config(self.config_path)
        except ConfigError as exc:
            log.error("config reload refused, keeping the running config: %s", exc)
            self.refresher.poke()
            self.counts["reload_refused"] += 1
            return False
        self.policy = Policy(cfg, cluster_view(cfg))
        self.refresher.set_config(cfg)  # also refreshes the state
        self.counts["reloads"] += 1
        log.warning("config reloaded from %s", self.config_path)
        return True

    def handle_line(self, line: bytes | str) -> dict[str, Any]:
        """One request line → the reply object. Never raises."""
        t0 = time.perf_counter()
        try:
            env = parse_line(line)
            if env.op == "ping":
                return {"v": VERSION, "action": "pong"}
            if env.op == "stats":
                return {"v": VERSION, "action": "stats", "stats": self.stats()}
            if env.op == "refresh":  # asynchronous: poll stats for state_generation
                self.refresher.poke()
                return {"v": VERSION, "action": "refreshing",
                        "generation": self.refresher.generation}
            policy, state = self.policy, self.refresher.current
            if env.op == "modify":
                if not SHAPE_FIELDS & {k for k, v in env.job.items() if v not in (None, "")}:
                    return {"v": VERSION, "action": "accept", "set": {}, "message": ""}
                job = merge_update(env.current, env.job)
                job.setdefault("user_name", _user_name(job.get("user_id")))
                routing = False
            else:
                job = normalize(env.job)
                routing = True
            req = to_request(job)
            decision = decide(req, policy.cfg, policy.view, state, self.clock(),
                              routing=routing)
            wait_s = int(policy.cfg.policy.admission.leaf_switch_wait_min * 60)
            reply = reply_for(decision, job, req, leaf_wait_s=wait_s)
            if env.op == "modify":
                reply.get("set", {}).pop("admin_comment", None)
            self.counts[reply["action"]] += 1
            log.info("decision op=%s job=%s user=%s name=%s action=%s set=%s ms=%.2f",
                     env.op, req.job_id, req.user, req.name, reply["action"],
                     ",".join(sorted(reply.get("set", {}))) or "-",
                     (time.perf_counter() - t0) * 1000)
            return reply
        except BadRequest as exc:
            self.counts["bad_request"] += 1
            log.warning("bad request: %s", exc)
            return {"v": VERSION, "action": "error", "error": str(exc)}
        except Exception as exc:  # a policy bug must not take submissions down with it
            self.counts["internal_error"] += 1
            log.exception("internal error on a request; the shim accepts the job unchanged")
            return {"v": VERSION, "action": "error", "error": f"internal error: {exc}"}

    def stats(self) -> dict[str, Any]:
        state = self.refresher.current
        return {
            "uptime_s": round(time.time() - self.started, 1),
            "counts": dict(self.counts),
            "config": str(self.config_path) if self.config_path else None,
            "state_generation": self.refresher.generation,
            "state_loaded_at": state.loaded_at.isoformat() if state.loaded_at else None,
            "state_error": self.refresher.last_error,
            "accounts": len(state.standing),
            "profiles": len(state.profiles_gb),
        }


def _user_name(uid: object) -> str | None:
    """The job owner's name: job_rec carries only the uid in slurm_job_modify."""
    if not isinstance(uid, int):
        return None
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


class _Connection(asyncio.Protocol):
    """One shim connection; the shim keeps it open and sends one line per submission.

    A Protocol rather than asyncio streams: per request this is a buffer scan and a
    write, which keeps submitd's CPU per submission near the policy's own cost.
    """

    def __init__(self, server: PolicyServer) -> None:
        self.server = server
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.buf += data
        while (end := self.buf.find(b"\n")) >= 0:
            line = bytes(self.buf[:end])
            del self.buf[:end + 1]
            reply = self.server.handle_line(line)
            self.transport.write(json.dumps(reply, separators=(",", ":")).encode() + b"\n")
        if len(self.buf) > MAX_LINE:
            self.server.counts["bad_request"] += 1
            reply = {"v": VERSION, "action": "error", "error": "request line too long"}
            self.transport.write(json.dumps(reply).encode() + b"\n")
            self.transport.close()


def _claim_socket_path(path: Path) -> None:
    """Remove a stale socket left by a crash; refuse if another submitd is listening."""
    if not path.exists() and not path.is_symlink():
        path.parent.mkdir(parents=True, exist_ok=True)
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


async def serve(server: PolicyServer, socket_path: Path, group: str | None = None,
                ready: Callable[[], None] | None = None) -> None:
    """Listen until SIGTERM/SIGINT; SIGHUP reloads the config and refreshes the state."""
    _claim_socket_path(socket_path)
    loop = asyncio.get_running_loop()
    srv = await loop.create_unix_server(lambda: _Connection(server), path=str(socket_path))
    try:
        if group:
            try:
                os.chown(socket_path, -1, grp.getgrnam(group).gr_gid)
            except KeyError:
                raise SubmitdError(f"group {group!r} does not exist") from None
        os.chmod(socket_path, 0o660)
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGHUP, server.reload)
        log.warning("submitd listening on %s (mode 0660%s)", socket_path,
                    f", group {group}" if group else "")
        if ready:
            ready()
        await stop.wait()
        log.warning("submitd stopping")
    finally:
        srv.close()
        await srv.wait_closed()
        with contextlib.suppress(FileNotFoundError):
            socket_path.unlink()
