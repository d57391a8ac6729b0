"""Prometheus metrics of submitd, on a registry of its own (tests make many).

What an operator must see from outside: how submissions are answered, and whether
admission is failing open. The shim lets a job through unchanged when submitd errs
(``internal_error``), cannot read the request (``bad_request``) or answers later than the
shim waits (``policy.admission.socket_timeout_ms``: ``slow_replies``), so those count apart.
The reply time is submitd's own, from the request line read to the reply built; the
shim's wait adds the socket and any queueing before it. The state gauges say whether
routing runs on a stale budget standing (PostgreSQL unreadable) and whether the config
in use is the file on disk (``slurm_ml_config_*``, the daemon's names: one rule for
both).

``serve`` binds the port, or says why not and lets submitd run on without metrics: a
second submitd on the host (a test's, a standby's) finds the port taken.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

log = logging.getLogger(__name__)

#: How a request was answered: passed unchanged, rewritten, rejected; or failed open, the
#: job passing unchanged (a request submitd could not read, or an error of its own).
ACTIONS = ("accept", "rewrite", "reject", "bad_request", "internal_error")
#: The shim's default wait (``policy.admission.socket_timeout_ms``, the Lua shim's
#: TIMEOUT_MS): a bucket edge whatever the config says, so that a rule may ask for it.
SHIM_TIMEOUT_S = 0.2
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, SHIM_TIMEOUT_S, 0.5, 1.0,
            2.5)


class SubmitdMetrics:
    """submitd's metrics. ``shim_timeout_s``: the shim's wait when submitd started (a
    histogram's buckets are fixed); ``slow_replies`` follows the config as reloaded."""

    def __init__(self, shim_timeout_s: float = SHIM_TIMEOUT_S,
                 registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "slurm_ml_submitd_requests_total",
            "Submissions and updates answered, by action: accept (unchanged), rewrite, "
            "reject, bad_request and internal_error (both pass the job unchanged)",
            ["action"], registry=r)
        for action in ACTIONS:
            self.requests.labels(action)  # every series from the start, at 0
        self.reply_seconds = Histogram(
            "slurm_ml_submitd_reply_seconds",
            "submitd's time from a request line to its reply (the shim's wait adds the "
            "socket)", registry=r,
            buckets=tuple(sorted({*_BUCKETS, shim_timeout_s})))
        self.slow_replies = Counter(
            "slurm_ml_submitd_slow_replies_total",
            "Replies later than the shim waits (policy.admission.socket_timeout_ms): the "
            "shim had let the job through unchanged", registry=r)
        self.state_error = Gauge(
            "slurm_ml_submitd_state_error",
            "1 while the last refresh of budget standing and GPU memory profiles from "
            "PostgreSQL failed (admission routes on the state read before)", registry=r)
        self.state_loaded = Gauge(
            "slurm_ml_submitd_state_loaded_timestamp_seconds",
            "When the budget standing and profiles admission uses were read (0: never, "
            "no database configured or none answered yet)", registry=r)
        self.config_reload_failed = Gauge(
            "slurm_ml_config_reload_failed",
            "1 while the last config reload (SIGHUP) was refused and submitd runs on the "
            "config it had before; 0 once a reload succeeds", registry=r)
        self.config_loaded = Gauge(
            "slurm_ml_config_last_reload_success_timestamp_seconds",
            "When the config submitd runs on was read (at start or the last successful "
            "reload)", registry=r)
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def answered(self, action: str, seconds: float, shim_timeout_s: float) -> None:
        """A request answered ``action`` (one of ACTIONS) in ``seconds``."""
        self.requests.labels(action).inc()
        self.reply_seconds.observe(seconds)
        if seconds > shim_timeout_s:
            self.slow_replies.inc()

    def watch(self, *, state_error: Callable[[], bool], state_loaded: Callable[[], float],
              reload_failed: Callable[[], bool], config_loaded: Callable[[], float]) -> None:
        """Read the state gauges from these at each scrape (they are submitd's own
        fields, set by the refresher's and the reload's threads)."""
        self.state_error.set_function(lambda: float(state_error()))
        self.state_loaded.set_function(state_loaded)
        self.config_reload_failed.set_function(lambda: float(reload_failed()))
        self.config_loaded.set_function(config_loaded)

    def serve(self, port: int, addr: str) -> bool:
        """Serve /metrics on ``addr:port`` (0: off). A port that cannot be bound is
        logged and nothing else: submissions must not wait on the metrics."""
        if not port:
            return False
        try:
            self._server, self._thread = start_http_server(port, addr=addr,
                                                           registry=self.registry)
        except OSError as exc:
            log.warning("event=metrics_unavailable addr=%s port=%d error=%s (another "
                        "submitd on this host? running without /metrics)", addr, port, exc)
            return False
        log.info("event=metrics_listening addr=%s port=%d", addr, port)
        return True

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
