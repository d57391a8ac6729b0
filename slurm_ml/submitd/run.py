"""Wire submitd together: config, store, state refresher, server, metrics."""

from __future__ import annotations

import logging
from pathlib import Path

from slurm_ml.config import Config
from slurm_ml.slurm.client import CliSlurm
from slurm_ml.slurm.runner import SlurmRunner
from slurm_ml.store.dsn import log_unsafe
from slurm_ml.store.errors import StoreError
from slurm_ml.store.postgres import PostgresStore
from slurm_ml.store.protocol import Store
from slurm_ml.submitd.auth import load_or_create_key
from slurm_ml.submitd.server import PolicyServer, serve
from slurm_ml.submitd.state import StateRefresher

log = logging.getLogger(__name__)
DEFAULT_SOCKET = Path("/run/slurm-ml/submitd.sock")


def open_store(cfg: Config, dsn: str | None = None) -> Store | None:
    """The configured PostgreSQL store, or None (admission then runs without state)."""
    target = cfg.store.resolve_dsn(dsn)
    if not target:
        log.warning("no database configured (store.dsn / $SLURM_ML_DSN): admission runs "
                    "without budget standing or GPU memory profiles")
        return None
    log_unsafe(target, log, "submitd")
    try:
        return PostgresStore(target, connect_timeout_s=cfg.store.connect_timeout_s)
    except (StoreError, ValueError) as exc:
        log.error("database DSN unusable, running without state: %s", exc)
        return None


def run_submitd(cfg: Config, config_path: Path | None, socket_path: Path, *,
                group: str | None = None, dsn: str | None = None,
                key_file: Path | None = None) -> None:
    """Serve until SIGTERM/SIGINT. ``key_file``: the reply key the shim checks, made
    there if absent (:mod:`slurm_ml.submitd.auth`); None: replies carry no key."""
    auth_key = load_or_create_key(key_file) if key_file is not None else None
    store = open_store(cfg, dsn)
    # slurmdbd's default accounts, read in the background like the store's state.
    slurm = CliSlurm(SlurmRunner(timeout_s=cfg.slurm.command_timeout_s))
    refresher = StateRefresher(store, cfg, slurm=slurm)
    refresher.start()
    server = PolicyServer(cfg, refresher, config_path=config_path)
    # submitd.* is read at start only, like the socket: a reload changes the policy
    server.metrics.serve(cfg.submitd.metrics_port, cfg.submitd.metrics_addr)
    try:
        serve(server, socket_path, group, auth_key)
    finally:
        server.metrics.close()
        refresher.stop()
        if store is not None:
            store.close()
