"""``slurm-ml daemon``, ``slurm-ml budget status`` and ``slurm-ml why``: the reconciler's
operator commands (registered on the main group by ``slurm_ml.cli``)."""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from slurm_ml import assets
from slurm_ml.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_OK,
    SLURM_HINT,
    emit,
    fail,
    load_config_or_exit,
)

T = TypeVar("T")


def _config_opt(f: Any) -> Any:
    return click.option("--config", "config_path", type=click.Path(dir_okay=False),
                        default=None,
                        help="slurm-ml.yaml (default $SLURM_ML_CONFIG, then "
                             "the packaged conf/slurm-ml.yaml).")(f)


def _dsn_opt(f: Any) -> Any:
    return click.option("--dsn", default=None,
                        help="PostgreSQL DSN (default $SLURM_ML_DSN, then store.dsn).")(f)


def _dsn(cfg: Any, dsn: str | None) -> str:
    return str(cfg.store.resolve_dsn(dsn))


def _slurm(cfg: Any) -> Any:
    from slurm_ml.slurm.client import CliSlurm
    from slurm_ml.slurm.runner import SlurmRunner

    return CliSlurm(SlurmRunner(timeout_s=cfg.slurm.command_timeout_s),
                    batch_size=cfg.slurm.scontrol_batch_size)


#: ``store_error`` of ``why`` and ``budget status`` when no DSN names a database: what
#: the database holds is then as unknown as when it is down
NO_DATABASE = "no database configured: pass --dsn, set $SLURM_ML_DSN or store.dsn"


def _store(cfg: Any, dsn: str) -> Any:
    from slurm_ml.store.postgres import PostgresStore

    if not dsn:
        fail("no database: pass --dsn, set $SLURM_ML_DSN or store.dsn", EXIT_BAD_INPUT)
    from slurm_ml.store.errors import InvalidDsn

    try:
        return PostgresStore(dsn, connect_timeout_s=cfg.store.connect_timeout_s)
    except (ValueError, InvalidDsn) as exc:
        fail(f"bad DSN: {exc}", EXIT_BAD_INPUT)


def _read_store(cfg: Any, dsn: str | None, read: Callable[[Any], T]) -> tuple[T | None, str | None]:
    """``read(store)`` on the configured database, closed after: (its result, None), or
    (None, why it could not be read: NO_DATABASE when none is configured)."""
    from slurm_ml.store.errors import StoreError

    target = _dsn(cfg, dsn)
    if not target:
        return None, NO_DATABASE
    store = _store(cfg, target)
    try:
        return read(store), None
    except StoreError as exc:
        return None, str(exc)
    finally:
        store.close()


def _wake_listener(cfg: Any, daemon: Any, dry_run: bool) -> Any:
    """The listener for submitd's wakes (``daemon.wake_socket``), or None: none is
    configured, this is a dry run (which must not take the leader's socket), or the
    socket cannot be bound (said on stderr; the daemon then keeps its regular cycles)."""
    from pathlib import Path

    from slurm_ml.wake import WakeError, WakeListener

    if dry_run or not cfg.daemon.wake_socket:
        return None
    try:
        return WakeListener(Path(cfg.daemon.wake_socket), daemon.wake)
    except (OSError, WakeError) as exc:
        click.echo(f"slurm-ml daemon: wake socket {cfg.daemon.wake_socket} unavailable "
                   f"({exc}); lane jobs wait for regular cycles", err=True)
        return None


# ------------------------------------------------------------------ daemon
@click.command("daemon")
@_config_opt
@_dsn_opt
@click.option("--once", is_flag=True, help="Run one cycle and exit.")
@click.option("--dry-run", is_flag=True,
              help="Decide and record what would be done (decisions marked dry_run); change "
                   "nothing in Slurm. Needs no leader lock.")
@click.option("--json", "as_json", is_flag=True, help="With --once: the cycle as JSON.")
def daemon_cmd(config_path: str | None, dsn: str | None, once: bool, dry_run: bool,
               as_json: bool) -> None:
    """The reconciler: fair share → SiteFactor, scheduling contracts, reclamation.

    Each cycle (policy.fairshare.cycle_interval_s) observes Slurm and PostgreSQL, decides
    with the pure policies and applies, recording every action in the audit log first.
    Only the holder of the PostgreSQL advisory lock (daemon.lock_key) acts; a second
    daemon stays passive. SIGHUP reloads the config (a bad one is rejected, the old one
    kept); SIGTERM stops after the current cycle. Without --once or --dry-run it also
    listens on daemon.wake_socket, where submitd asks for an early cycle for a job it
    put in the fast lane (while policy.fast_lane.wake_min_gap_s > 0).

    Exit codes: 0 ok (with --once: the cycle ran, acted or stayed passive); 1 with --once:
    Slurm or the database was unavailable, or an action failed; 2 bad config or options.
    SIGHUP reloads policy.*; daemon.* and slurm.* need a restart.
    """
    from slurm_ml.daemon.loop import Daemon
    from slurm_ml.daemon.metrics import Metrics
    from slurm_ml.store.errors import StoreError
    from slurm_ml.store.leader import PgLeaderLock
    from slurm_ml.store.migrate import migrate

    path = assets.config_path(config_path)
    cfg = load_config_or_exit(path)
    if logging.getLogger().level > logging.INFO:
        logging.getLogger("slurm_ml").setLevel(logging.INFO)
    target = _dsn(cfg, dsn)
    store = _store(cfg, target)
    from slurm_ml.store.dsn import log_unsafe

    log_unsafe(target, logging.getLogger("slurm_ml.daemon"), "daemon")
    try:
        migrate(target, connect_timeout_s=cfg.store.connect_timeout_s)
    except StoreError as exc:
        click.echo(f"slurm-ml daemon: database not ready ({exc}); will retry each cycle",
                   err=True)
    lock = PgLeaderLock(target, cfg.daemon.lock_key,
                        connect_timeout_s=cfg.store.connect_timeout_s,
                        holder=f"slurm-ml daemon pid {os.getpid()}")
    metrics = Metrics()
    d = Daemon(cfg, slurm=_slurm(cfg), store=store, lock=lock, config_path=path,
               dry_run=dry_run, metrics=metrics)
    if not once:
        try:
            metrics.serve(cfg.daemon.metrics_port, cfg.daemon.metrics_addr)
        except OSError as exc:
            click.echo(f"slurm-ml daemon: metrics port {cfg.daemon.metrics_port} unavailable "
                       f"({exc}); running without /metrics", err=True)
        listener = _wake_listener(cfg, d, dry_run)
        signal.signal(signal.SIGHUP, lambda *_: setattr(d, "reload_requested", True))
        signal.signal(signal.SIGTERM, lambda *_: d.stop.set())
        signal.signal(signal.SIGINT, lambda *_: d.stop.set())
    else:
        listener = None
    try:
        result = d.run(once=once)
    finally:
        if listener is not None:
            listener.close()
        d.close()
        store.close()
    if once:
        data = {"cycle": result.cycle, "outcome": result.outcome,
                "seconds": round(result.seconds, 3), "message": result.message,
                "counts": result.counts, "leader": result.leader,
                "site_factor_calls": 0 if result.report is None
                else result.report.site_factor_calls,
                "actions": [] if result.report is None else [
                    {"kind": a.decision, "job_id": a.job_id, "node": a.node,
                     "reason": a.reason}
                    for a in (result.report.applied + result.report.would)],
                "already": [] if result.report is None else [
                    {"kind": a.decision, "job_id": a.job_id, "node": a.node}
                    for a in result.report.already],
                "failed": [] if result.report is None else [
                    {"kind": a.decision, "job_id": a.job_id, "node": a.node, "error": err}
                    for a, err in result.report.failed]}
        human = (f"cycle {result.cycle}: {result.outcome} in {result.seconds:.2f}s "
                 f"{result.counts} {result.message}").rstrip()
        emit(data, as_json, human)
        bad = result.outcome in ("slurm_unavailable", "store_unavailable")
        sys.exit(EXIT_FAILED if bad else EXIT_OK)


# ------------------------------------------------------------------ budget
@click.group()
def budget() -> None:
    """GPU-time budgets: owed vs delivered per allocation."""


@budget.command("status")
@_config_opt
@_dsn_opt
@click.option("--json", "as_json", is_flag=True, help="Machine-readable result.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              metavar="FILE.png", help="Also draw owed vs delivered over time (matplotlib).")
def budget_status(config_path: str | None, dsn: str | None, as_json: bool,
                  plot_path: str | None) -> None:
    """Per budget-tree node over the window: budget share, owed, delivered, their ratio,
    pending demand (and, apart, pending GPUs that wait for something other than GPUs:
    holds, dependencies, limits, per reason), allocated vs unallocated GPU-hours and the
    mean GPU utilisation of the delivered hours, the GPU-hours refunded for runs a
    slurm-ml drain ended (with the database), then the scheduling order of associations
    with pending work.

    Exit codes: 0 ok; 1 Slurm unavailable, or the database could not be read or none
    is configured (the table is still printed: a line on stdout says utilisation and
    refunds are unknown, null in --json with `store_error`), or --plot without history,
    or the plot could not be written; 2 bad config, or a --plot path that is not a .png
    in a writable directory.
    """
    from datetime import UTC, datetime

    from slurm_ml.daemon import views
    from slurm_ml.daemon.observe import observe, with_fault_drains
    from slurm_ml.daemon.plan import current_fair_share
    from slurm_ml.ops import report
    from slurm_ml.slurm.errors import SlurmError
    from slurm_ml.store.errors import StoreError

    cfg = load_config_or_exit(assets.config_path(config_path))
    if plot_path:
        _check_plot_path(Path(plot_path))
    now = int(time.time())
    click.echo("reading slurmctld and slurmdbd ...", err=True)
    try:
        obs = observe(cfg, _slurm(cfg), None, now)
    except SlurmError as exc:
        fail(f"cannot read Slurm: {exc}{SLURM_HINT}")
    util: dict[str, float] = {}
    snapshots: list[Any] = []
    target = _dsn(cfg, dsn)
    window_start = now - int(cfg.policy.fairshare.window_hours * 3600)
    store_error: str | None = None if target else NO_DATABASE
    if target:
        store = _store(cfg, target)
        try:
            since = datetime.fromtimestamp(window_start, UTC)
            obs = with_fault_drains(cfg, store, obs)  # fault refunds, as the daemon has them
            util = report.utilisation_by_account(store.job_gpu_stats_since(since))
            if plot_path:
                snapshots = store.budget_snapshots(since=since)
        except StoreError as exc:
            store_error = str(exc)
        finally:
            store.close()
    refunds = views.run_refunds(cfg, obs.usage, obs.drains)
    fair = current_fair_share(cfg, obs, refunds)
    data = report.budget_json(fair, util, views.excluded_pending(cfg, obs.jobs), refunds,
                              store_error=store_error)
    emit(data, as_json, report.budget_text(data))
    if plot_path:
        from slurm_ml.ops.plot import plot_budget

        if store_error is not None:
            fail(f"nothing to plot: the database could not be read ({store_error})")
        if not snapshots:
            fail("nothing to plot: no budget snapshots in the window (is the daemon "
                 "running and the database reachable?)")
        try:
            plot_budget(snapshots, plot_path)
        except (OSError, ValueError) as exc:
            fail(f"cannot write the plot {plot_path}: {exc}")
        click.echo(f"wrote {plot_path}", err=True)
    if store_error is not None:
        fail(f"the database could not be read: GPU utilisation and refunds unknown "
             f"({store_error})")


def _check_plot_path(path: Path) -> None:
    """Refuse a --plot target before minutes of reading Slurm, not after."""
    if path.suffix.lower() != ".png":
        fail(f"--plot {path}: name a .png file", EXIT_BAD_INPUT)
    parent = path.parent  # Path("b.png").parent is Path("."); savefig makes no directory
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        fail(f"--plot {path}: {parent} is not a writable directory", EXIT_BAD_INPUT)


# ------------------------------------------------------------------ why
def _job_id(_ctx: click.Context, _param: click.Parameter, value: str) -> int:
    """A plain job id. An array task (``1234_5``) or het component (``1234+0``) has its
    own job id, which is what slurm-ml records; Python's int() would read ``1234_5`` as
    12345, another job."""
    if value.isascii() and value.isdigit():
        return int(value)
    if "_" in value or "+" in value:
        raise click.BadParameter(
            f"{value} names an array task or a het-job component; slurm-ml knows each by "
            f"its own job id: find it with `squeue -j {value} -h -o %A` (or `sacct -j "
            f"{value} -X -o JobIDRaw`) and ask `slurm-ml why` that id")
    raise click.BadParameter(f"{value!r} is not a job id (digits only)")


@click.command("why")
@click.argument("job_id", callback=_job_id)
@_config_opt
@_dsn_opt
@click.option("--json", "as_json", is_flag=True, help="Machine-readable result.")
def why_cmd(job_id: int, config_path: str | None, dsn: str | None, as_json: bool) -> None:
    """Why a job is where it is: its priority parts (SiteFactor and how it was derived,
    its account's budget position), slurm-ml's admission record, what the zombie rule
    makes of a running job now (no verdict, and why, when its GPU samples fall short),
    what a repair at the contract of its node waits for (until when), and every requeue,
    cancel or warning slurm-ml decided for it, with reasons.

    Exit codes: 0 ok; 1 Slurm unavailable, or the database (the job's history) could
    not be read or none is configured: what Slurm says is still printed, and a line on
    stdout says the history is unknown (null in --json, with `store_error`), never that
    nothing happened; 2 bad config, a bad job id, or a job unknown to Slurm and to
    slurm-ml. An array task (1234_5) is asked by its own job id.
    """
    from datetime import UTC, datetime

    from slurm_ml.daemon import repair_view
    from slurm_ml.daemon.observe import observe
    from slurm_ml.daemon.plan import current_fair_share, fast_lane, zombie_status_of
    from slurm_ml.ops import report
    from slurm_ml.slurm.errors import SlurmError
    from slurm_ml.store.errors import StoreError

    cfg = load_config_or_exit(assets.config_path(config_path))
    slurm = _slurm(cfg)
    now = int(time.time())
    click.echo("reading slurmctld and slurmdbd ...", err=True)
    try:
        obs = observe(cfg, slurm, None, now)
        parts = slurm.priority_parts(job_id)
    except SlurmError as exc:
        fail(f"cannot read Slurm: {exc}{SLURM_HINT}")
    job = next((j for j in obs.jobs if j.job_id == job_id), None)
    fair = current_fair_share(cfg, obs)
    decisions: list[Any] = []
    made_room: list[Any] = []
    zombie = None
    repairs: list[Any] = []
    target = _dsn(cfg, dsn)
    store_error: str | None = None if target else NO_DATABASE
    if target:
        store = _store(cfg, target)
        try:
            decisions = store.decisions_for_job(job_id)
            made_room = store.requeues_for(job_id)
            # the samples a cycle reads (observe: twice the heartbeat back)
            since = now - int(cfg.policy.reclaim.zombie_heartbeat_s * 2)
            samples = store.util_samples_since(datetime.fromtimestamp(since, UTC),
                                               job_ids=[job_id])
            zombie = zombie_status_of(cfg, obs.jobs, samples, job_id, now)
            health = store.health_events_since(
                datetime.fromtimestamp(now - repair_view.LOOKBACK_S, UTC), limit=100_000)
            repairs = repair_view.repairs_for_job(cfg, obs.nodes, obs.jobs, health,
                                                   job_id=job_id, now=now)
        except StoreError as exc:
            store_error = str(exc)
        finally:
            store.close()
    parts_dict = None if parts is None else {**dataclasses.asdict(parts),
                                             "factor_sum": parts.factor_sum}
    data = report.why_json(job_id, job, parts_dict, fair, decisions, zombie=zombie,
                           repairs=repairs, lane=fast_lane(cfg, obs.jobs),
                           made_room=made_room, store_error=store_error)
    emit(data, as_json, report.why_text(data))
    if store_error is not None:
        fail(f"the database could not be read: the job's history is unknown ({store_error})")
    if job is None and not decisions:  # unknown to Slurm and to slurm-ml
        sys.exit(EXIT_BAD_INPUT)
