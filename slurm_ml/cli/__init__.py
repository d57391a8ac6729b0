"""``slurm-ml``: the operator's command line. The only place logging is configured.

Exit codes: 0 ok; 1 the operation failed (Slurm, database or dev cluster
error, with a message); 2 bad input (usage or configuration errors);
3 not ready (e.g. the dev cluster is not fully up).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from slurm_ml import __version__
from slurm_ml.assets import asset_path

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_NOT_READY = 0, 1, 2, 3
# The checkout's conf/slurm-ml.yaml, else the copy installed with the package.
DEFAULT_CONFIG = asset_path("conf", "slurm-ml.yaml", strict=False)
DEFAULT_STATE = Path.cwd() / ".devcluster"


def _fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    click.echo(f"slurm-ml: error: {message}", err=True)
    sys.exit(code)


def _emit(data: Any, as_json: bool, human: str) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True) if as_json else human)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="slurm-ml")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
def main(verbose: int) -> None:
    """slurm-ml: make a shared Slurm cluster good at ML work."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(
        level=level, stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )


def _load_config(path: str | Path) -> Any:
    from slurm_ml.config import ConfigError, load_config

    try:
        return load_config(path)
    except ConfigError as exc:
        _fail(f"invalid configuration {path}:\n{exc}", EXIT_BAD_INPUT)


# ------------------------------------------------------------------- config
@main.group()
def config() -> None:
    """Validate slurm-ml configuration files."""


@config.command("check")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable result.")
def config_check(file: str, as_json: bool) -> None:
    """Validate FILE. Exit 0 when valid; exit 2 with every error, `path: message` per line."""
    from slurm_ml.config import ConfigError, load_config

    try:
        cfg = load_config(file)
    except ConfigError as exc:
        if as_json:
            issues = [{"path": i.path, "message": i.message} for i in exc.issues]
            click.echo(json.dumps({"valid": False, "file": file, "errors": issues}, indent=2))
        else:
            for issue in exc.issues:
                click.echo(str(issue), err=True)
            click.echo(f"{file}: {len(exc.issues)} error(s)", err=True)
        sys.exit(EXIT_BAD_INPUT)
    summary = {
        "valid": True, "file": file, "gpu_types": len(cfg.gpu_types),
        "node_classes": len(cfg.node_classes), "nodes": len(cfg.all_nodes()),
        "programs": len(cfg.budgets.programs),
    }
    _emit(summary, as_json, f"{file}: OK ({summary['nodes']} nodes, "
          f"{summary['node_classes']} node classes, {summary['programs']} programs)")


# ----------------------------------------------------------------------- db
@main.group()
def db() -> None:
    """Manage slurm-ml's PostgreSQL database."""


@db.command("migrate")
@click.option("--dsn", envvar="SLURM_ML_DSN", required=True,
              help="PostgreSQL DSN (default: $SLURM_ML_DSN).")
@click.option("--json", "as_json", is_flag=True)
def db_migrate(dsn: str, as_json: bool) -> None:
    """Apply pending schema migrations (idempotent)."""
    from slurm_ml.store.errors import StoreError
    from slurm_ml.store.migrate import migrate

    try:
        applied = migrate(dsn)
    except StoreError as exc:
        _fail(str(exc))
    _emit({"applied": applied}, as_json,
          f"applied: {', '.join(applied)}" if applied else "schema is up to date")


# ------------------------------------------------------------------- health
@main.group()
def health() -> None:
    """GPU node health checks."""


@health.command("check")
@click.option("--from-nvidia-smi", "capture_dir", required=True, metavar="DIR",
              type=click.Path(file_okay=False),
              help="Directory of captures: nvidia-smi -q [-x], topo -m, nvlink -s/-e, dmesg.")
@click.option("--node", default=None, help="Node name; its class comes from the config.")
@click.option("--class", "node_class", default=None, metavar="NODECLASS",
              help="Node class whose expectations apply (wins over --node).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="slurm-ml.yaml for --class/--node (default conf/slurm-ml.yaml).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def health_check(capture_dir: str, node: str | None, node_class: str | None,
                 config_path: str | None, as_json: bool) -> None:
    """Check a node from its captures, without NVML.

    Without --class or --node the expectations are inferred from the captures (GPU
    count, NVLink links, topology): only a GPU unlike its peers is caught then.

    Exit codes: 0 healthy (no drain finding); 1 a drain finding; 2 bad input
    (unreadable capture, unknown class or node, invalid config).
    """
    from slurm_ml.health.replay.errors import CaptureError
    from slurm_ml.health.report import HealthInputError, check_captures

    cfg = None
    if config_path is not None or node_class is not None or node is not None:
        cfg = _load_config(config_path or DEFAULT_CONFIG)
    try:
        report = check_captures(capture_dir, node=node, node_class=node_class, config=cfg)
    except (CaptureError, HealthInputError) as exc:
        _fail(str(exc), EXIT_BAD_INPUT)
    _emit(report.as_dict(), as_json, report.render())
    sys.exit(report.exit_code)


def _hook_opts(f: Any) -> Any:
    f = click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")(f)
    f = click.option("--dsn", default=None,
                     help="PostgreSQL DSN (default $SLURM_ML_DSN, then store.dsn; none: "
                          "records only spool).")(f)
    return click.option("--config", "config_path", type=click.Path(dir_okay=False),
                        default=None,
                        help="slurm-ml.yaml (default $SLURM_ML_CONFIG, then "
                             "conf/slurm-ml.yaml).")(f)


def _open_db(dsn: str, connect_timeout_s: float) -> Any:
    from slurm_ml.store.postgres import PostgresStore

    return PostgresStore(dsn, connect_timeout_s=connect_timeout_s)


def _hook_settings(config_path: str | None, dsn: str | None) -> Any:
    from slurm_ml.hooks.wiring import HookSettings

    return HookSettings.from_env(os.environ, default_config=DEFAULT_CONFIG,
                                 config=config_path, dsn=dsn)


def _hook(name: str, config_path: str | None, dsn: str | None, as_json: bool, *,
          run: Any, fallback_code: int) -> NoReturn:
    """Run a Slurm hook: a broken config or an unexpected error exits ``fallback_code``
    (never a code that makes Slurm drain the node on slurm-ml's behalf)."""
    from slurm_ml.config import ConfigError
    from slurm_ml.hooks import wiring

    settings = _hook_settings(config_path, dsn)
    try:
        cfg = wiring.load(settings)
    except ConfigError as exc:
        click.echo(f"slurm-ml {name}: not run: invalid configuration "
                   f"{settings.config_path}:\n{exc}", err=True)
        sys.exit(fallback_code)
    b = wiring.connect(settings, cfg, open_db=_open_db)
    try:
        outcome = run(b)
    except Exception:  # a bug in slurm-ml must not take the node out of service
        logging.getLogger("slurm_ml.cli").exception("slurm-ml %s failed", name)
        sys.exit(fallback_code)
    finally:
        b.close()
    _emit(wiring.outcome_json(outcome), as_json,
          f"slurm-ml {name}: {outcome.action}: {outcome.message}")
    sys.exit(getattr(outcome, "exit_code", EXIT_OK))


@health.command("prolog")
@_hook_opts
def health_prolog(config_path: str | None, dsn: str | None, as_json: bool) -> None:
    """Slurm Prolog: check the job's GPUs before it starts (reads Slurm's environment).

    On a drain-now finding the node is drained (reason `slurm-ml: <check> gpu<N> ...`,
    through the circuit breaker) and the job is requeued elsewhere.

    Exit codes: 0 the job may start (also whenever slurm-ml did not take the node out of
    service, e.g. a bad config or the breaker refused the drain); 1 the node is out of
    service: Slurm requeues the job.
    """
    from slurm_ml.hooks import wiring

    env = dict(os.environ)
    _hook("prolog", config_path, dsn, as_json, run=lambda b: wiring.prolog(env, b),
          fallback_code=EXIT_OK)


@health.command("epilog")
@_hook_opts
def health_epilog(config_path: str | None, dsn: str | None, as_json: bool) -> None:
    """Slurm Epilog: kill the job's leftover GPU processes, clean /dev/shm, record the
    job's GPU stats, re-check its GPUs (reads Slurm's environment).

    Always exits 0: a failing epilog makes Slurm drain the node itself, past the circuit
    breaker; every drain slurm-ml wants it makes explicitly.
    """
    from slurm_ml.hooks import wiring

    env = dict(os.environ)
    _hook("epilog", config_path, dsn, as_json, run=lambda b: wiring.epilog(env, b),
          fallback_code=EXIT_OK)


@health.command("periodic")
@click.option("--node", default=None,
              help="Node to check (default $SLURMD_NODENAME, then the short host name).")
@_hook_opts
def health_periodic(node: str | None, config_path: str | None, dsn: str | None,
                    as_json: bool) -> None:
    """Full health check of this node, for Slurm's HealthCheckProgram.

    Drains the node (through the circuit breaker) on a drain finding when it is idle,
    resumes a drain slurm-ml owns after policy.quarantine.resume_after_passes clean runs
    in a row, never touches anyone else's drain, and records per-job GPU utilisation.

    Exit codes: 0 it ran (whatever it found); 1 it could not run at all (bad config).
    """
    import socket

    from slurm_ml.hooks import wiring

    target = node or wiring.default_node(os.environ, socket.gethostname())
    _hook("periodic", config_path, dsn, as_json, run=lambda b: wiring.periodic(target, b),
          fallback_code=EXIT_FAILED)


# --------------------------------------------------------------- quarantine
@main.group()
def quarantine() -> None:
    """slurm-ml's node drains and the per-class circuit breaker."""


def _operator_boundaries(config_path: str | None, dsn: str | None) -> Any:
    from slurm_ml.hooks import wiring

    settings = _hook_settings(config_path, dsn)
    return wiring.connect(settings, _load_config(settings.config_path), open_db=_open_db)


def _operator_errors() -> tuple[type[Exception], ...]:
    from slurm_ml.hooks.quarantine_ops import QuarantineError
    from slurm_ml.slurm.errors import SlurmError
    from slurm_ml.store.errors import StoreError

    return (QuarantineError, SlurmError, StoreError)


def _actor() -> str:
    import getpass

    from slurm_ml.hooks import wiring

    try:
        login = getpass.getuser()
    except (KeyError, OSError):
        login = ""
    return wiring.operator(os.environ, login)


@quarantine.command("list")
@_hook_opts
def quarantine_list(config_path: str | None, dsn: str | None, as_json: bool) -> None:
    """slurm-ml's drains (with their clean-check streak) and open breaker alarms.

    Exit codes: 0 ok; 1 Slurm or the database could not be read (what could be read is
    still printed); 2 bad config.
    """
    from slurm_ml.hooks import wiring

    b = _operator_boundaries(config_path, dsn)
    try:
        view = wiring.quarantine_list(b)
    except _operator_errors() as exc:
        _fail(str(exc))
    finally:
        b.close()
    lines = []
    for d in view.drains:
        streak = "?" if d.streak is None else str(d.streak)
        lines.append(f"drained  {d.node:<8} {d.node_class or '-':<10} {streak}/{d.needed} "
                     f"clean checks  {d.reason}")
    for a in view.alarms:
        lines.append(f"ALARM    {a.node_class}: breaker tripped at {a.at.isoformat()} "
                     f"refusing {a.refused} (drained: {', '.join(a.drained) or '-'}); "
                     f"`slurm-ml quarantine reset {a.node_class}` re-arms it")
    if not lines:
        lines.append("no slurm-ml drains, no breaker alarms")
    _emit(view.to_json(), as_json, "\n".join(lines))
    if not view.store_ok:
        click.echo("slurm-ml: error: the database could not be read: alarms and streaks "
                   "are unknown (" + "; ".join(view.errors) + ")", err=True)
        sys.exit(EXIT_FAILED)


@quarantine.command("resume")
@click.argument("node")
@click.option("--force", is_flag=True, help="Also lift a drain slurm-ml does not own.")
@_hook_opts
def quarantine_resume(node: str, force: bool, config_path: str | None, dsn: str | None,
                      as_json: bool) -> None:
    """Resume NODE now (audited). Only a drain slurm-ml owns, unless --force.

    Exit codes: 0 resumed; 1 refused (not drained, drained by someone else) or failed;
    2 no such node or bad config.
    """
    from slurm_ml.hooks import wiring
    from slurm_ml.hooks.quarantine_ops import UnknownTarget

    b = _operator_boundaries(config_path, dsn)
    try:
        result = wiring.quarantine_resume(node, b, actor=_actor(), force=force)
    except UnknownTarget as exc:
        _fail(str(exc), EXIT_BAD_INPUT)
    except _operator_errors() as exc:
        _fail(str(exc))
    finally:
        b.close()
    _emit(wiring.outcome_json(result), as_json,
          f"resumed {result.node} (was: {result.previous_reason})"
          + (" [forced]" if result.forced else ""))


@quarantine.command("reset")
@click.argument("node_class", metavar="CLASS")
@_hook_opts
def quarantine_reset(node_class: str, config_path: str | None, dsn: str | None,
                     as_json: bool) -> None:
    """Close the circuit-breaker alarm of node class CLASS (audited), so that slurm-ml
    drains there again.

    Exit codes: 0 reset; 1 the audit entry could not be written; 2 no such class or bad
    config.
    """
    from slurm_ml.hooks import wiring
    from slurm_ml.hooks.quarantine_ops import UnknownTarget

    b = _operator_boundaries(config_path, dsn)
    try:
        result = wiring.quarantine_reset(node_class, b, actor=_actor())
    except UnknownTarget as exc:
        _fail(str(exc), EXIT_BAD_INPUT)
    except _operator_errors() as exc:
        _fail(str(exc))
    finally:
        b.close()
    cleared = "unknown (database unreadable)" if result.cleared is None else result.cleared
    _emit(wiring.outcome_json(result), as_json,
          f"reset {result.node_class}: {cleared} open alarm(s) closed")


# --------------------------------------------------------------- devcluster
@main.group()
def devcluster() -> None:
    """A real local Slurm cluster (slurmctld, slurmd x6, slurmdbd, MariaDB, PostgreSQL)."""


def _state_opt(f: Any) -> Any:
    f = click.option("--state-dir", type=click.Path(file_okay=False), default=None,
                     help="Where the cluster keeps all its state (default ./.devcluster, "
                          "or $SLURM_ML_DEVCLUSTER).")(f)
    return click.option("--config", "config_path", type=click.Path(dir_okay=False),
                        default=None, help="slurm-ml.yaml (default conf/slurm-ml.yaml).")(f)


def _cluster(state_dir: str | None, config_path: str | None) -> Any:
    from slurm_ml.devcluster.cluster import DevCluster
    from slurm_ml.devcluster.layout import Layout

    root = Path(state_dir or os.environ.get("SLURM_ML_DEVCLUSTER") or DEFAULT_STATE).resolve()
    cfg = _load_config(config_path or DEFAULT_CONFIG)
    path = Path(config_path or DEFAULT_CONFIG).resolve()
    return DevCluster(cfg, Layout(root), say=lambda m: click.echo(m, err=True), config_path=path)


def _devcluster_errors() -> tuple[type[BaseException], ...]:
    from slurm_ml.devcluster.platform import DevClusterError
    from slurm_ml.proc import CommandError
    from slurm_ml.slurm.errors import SlurmError
    from slurm_ml.slurm.render import TemplateError
    from slurm_ml.store.errors import StoreError

    return (DevClusterError, CommandError, SlurmError, TemplateError, StoreError,
            TimeoutError, OSError)


@devcluster.command("up")
@_state_opt
@click.option("--no-install", is_flag=True, help="Do not apt-get install missing packages.")
def devcluster_up(state_dir: str | None, config_path: str | None, no_install: bool) -> None:
    """Bring the dev cluster up (idempotent; needs root)."""
    from slurm_ml.devcluster.platform import NotRoot

    cluster = _cluster(state_dir, config_path)
    try:
        cluster.up(install_packages=not no_install)
    except NotRoot as exc:
        _fail(str(exc), EXIT_BAD_INPUT)
    except _devcluster_errors() as exc:
        _fail(f"{exc}\n(logs: {cluster.layout.log})")


@devcluster.command("down")
@_state_opt
@click.option("--destroy", is_flag=True, help="Also delete the state directory.")
@click.option("--json", "as_json", is_flag=True)
def devcluster_down(state_dir: str | None, config_path: str | None, destroy: bool,
                    as_json: bool) -> None:
    """Stop the processes `up` started (by pid), nothing else."""
    from slurm_ml.devcluster.platform import NotRoot

    cluster = _cluster(state_dir, config_path)
    try:
        stopped = cluster.down()
        if destroy:
            cluster.destroy()
    except NotRoot as exc:
        _fail(str(exc), EXIT_BAD_INPUT)
    except _devcluster_errors() as exc:
        _fail(str(exc))
    _emit({"stopped": stopped, "destroyed": destroy}, as_json,
          "stopped: " + (", ".join(stopped) if stopped else "nothing was running"))


@devcluster.command("status")
@_state_opt
@click.option("--json", "as_json", is_flag=True)
def devcluster_status(state_dir: str | None, config_path: str | None, as_json: bool) -> None:
    """Every daemon and node state. Exit 3 when something is not up."""
    st = _cluster(state_dir, config_path).status()
    if as_json:
        click.echo(json.dumps(st, indent=2, sort_keys=True))
    else:
        click.echo(f"state dir: {st['state_dir']}")
        for name, p in st["processes"].items():
            mark = f"running (pid {p['pid']})" if p["running"] else "STOPPED"
            click.echo(f"  {name:<16} {mark}")
        if st["slurm_error"]:
            click.echo(f"slurm: {st['slurm_error']}")
        for n in st["nodes"]:
            flags = "+".join(n["flags"])
            state = n["state"] + (f"+{flags}" if flags else "")
            reason = f"  reason: {n['reason']}" if n["reason"] else ""
            fault = st["health"].get(n["name"], {}).get("fault")
            injected = f"  fault: {','.join(fault)}" if fault else ""
            click.echo(f"  {n['name']:<8} {state:<18} {n['gres']:<22} "
                       f"{','.join(n['features'])}{reason}{injected}")
        for u in st["users"]:
            click.echo(f"  user {u['user']:<8} accounts {','.join(u['accounts'])}")
    sys.exit(EXIT_OK if st["up"] else EXIT_NOT_READY)


@devcluster.command("fault")
@click.argument("node")
@click.argument("capture", required=False)
@click.option("--clear", is_flag=True, help="Restore the node's healthy captures.")
@_state_opt
@click.option("--json", "as_json", is_flag=True)
def devcluster_fault(node: str, capture: str | None, *, clear: bool, state_dir: str | None,
                     config_path: str | None, as_json: bool) -> None:
    """Inject a fault on dev node NODE: CAPTURE (a path, or a file of the data kit under
    data/gpu, e.g. azhc_a100_gpu6_nvlink_status_all_inactive.txt) replaces the
    node's replayed capture of the same kind. --clear restores the healthy ones.

    The next prolog or periodic check on NODE sees it. Exit codes: 0 done; 2 unknown
    node, unknown or unusable capture.
    """
    from slurm_ml.devcluster import health as node_health
    from slurm_ml.devcluster.platform import DevClusterError

    if clear == (capture is not None):
        _fail("give either CAPTURE or --clear", EXIT_BAD_INPUT)
    cluster = _cluster(state_dir, config_path)
    try:
        if clear:
            result = node_health.clear_fault(cluster.cfg, cluster.layout, node)
        else:
            assert capture is not None
            result = node_health.inject_fault(cluster.cfg, cluster.layout, node, capture)
    except (DevClusterError, OSError) as exc:
        _fail(str(exc), EXIT_BAD_INPUT)
    if clear:
        human = (f"{node}: healthy captures restored ({', '.join(result.files)}); "
                 f"the checks say: {result.verdict}")
    else:
        replaced = f" (replaced {', '.join(result.replaced)})" if result.replaced else ""
        human = (f"{node}: now replays {', '.join(result.files)}{replaced}\n"
                 f"the checks say: {result.verdict}")
    _emit(result.as_dict(), as_json, human)


@devcluster.command("env")
@_state_opt
def devcluster_env(state_dir: str | None, config_path: str | None) -> None:
    """Print the shell exports (SLURM_CONF, SLURM_ML_DSN, ...) to use the cluster."""
    cluster = _cluster(state_dir, config_path)
    if not cluster.layout.slurm_conf.exists():
        _fail(f"no dev cluster in {cluster.layout.root}; run `slurm-ml devcluster up` first",
              EXIT_NOT_READY)
    for k, v in cluster.env_exports().items():
        click.echo(f"export {k}={v}")


@devcluster.command("demo")
@_state_opt
@click.option("--json", "as_json", is_flag=True)
def devcluster_demo(state_dir: str | None, config_path: str | None, as_json: bool) -> None:
    """Run a small GPU workload as the researcher users and show the result."""
    from dataclasses import asdict

    from slurm_ml.devcluster.demo import (
        cancel_cases,
        run_admission_cases,
        run_demo,
        run_health_demo,
        run_reconciler_demo,
        run_sim_demo,
    )
    from slurm_ml.slurm.client import CliSlurm
    from slurm_ml.slurm.parse import parse_oneliner

    cluster = _cluster(state_dir, config_path)
    slurm = CliSlurm(cluster.runner())
    say = lambda m: click.echo(m, err=True)  # noqa: E731
    try:
        cases = run_admission_cases(str(cluster.layout.jobs), cluster.slurm_env, say)
        shown = {}
        for case in cases:
            if case.job_id:
                fields = parse_oneliner(cluster.runner()(
                    ["scontrol", "-o", "show", "job", str(case.job_id)]).strip())
                shown[case.job_id] = {k: fields.get(k, "") for k in (
                    "QOS", "NumNodes", "TresPerNode", "TresPerJob", "Features",
                    "OverSubscribe", "Switches", "AdminComment")}
        cancel_cases(cases, cluster.slurm_env)
        jobs = run_demo(cluster.cfg, slurm, str(cluster.layout.jobs), say=say)
        run = cluster.runner()
        default = next(p.name for p in cluster.cfg.cluster.partitions if p.default)
        sinfo = run(["sinfo", "-N", "-p", default, "-o", "%N %T %G %f"])
        sacct = run(["sacct", "-X", "-a", "-j", ",".join(str(j.job_id) for j in jobs),
                     "-o", "JobID,JobName%28,User,Account%14,QOS,State,AllocTRES%60"])
        env = {**cluster.env_exports(), "SLURM_ML_CONFIG": str(cluster.config_path)}
        health_steps = run_health_demo(cluster.cfg, cluster.layout, env, say)
        reconciler_steps = run_reconciler_demo(env, say)
        sim_steps = run_sim_demo(env, say, str(cluster.layout.root / "sim-report"))
    except _devcluster_errors() as exc:
        _fail(str(exc))
    status = cluster.status()
    if as_json:
        click.echo(json.dumps({"admission": [dict(asdict(c), job=shown.get(c.job_id or 0))
                                             for c in cases],
                               "jobs": [asdict(j) for j in jobs],
                               "health": [asdict(st) for st in health_steps],
                               "reconciler": [asdict(st) for st in reconciler_steps],
                               "simulator": [asdict(st) for st in sim_steps],
                               "status": status},
                              indent=2, default=str))
        return
    click.echo("\n== admission: plain sbatch lines, rewritten or rejected by slurm-ml ==")
    for case in cases:
        click.echo(f"\n* {case.label}\n  $ sbatch {' '.join(case.args)}   (as {case.user})")
        click.echo("  " + (f"accepted as job {case.job_id}" if case.accepted else "REJECTED"))
        for line in case.message.splitlines():
            click.echo(f"  | {line}")
        for key, value in shown.get(case.job_id or 0, {}).items():
            if value:
                click.echo(f"    {key}={value}")
    click.echo("\n== nodes (sinfo) ==\n" + sinfo)
    click.echo("== sample jobs (sacct) ==\n" + sacct)
    click.echo("== node health: a GPU fault caught by the prolog, then repaired ==")
    for n, st in enumerate(health_steps, 1):
        click.echo(f"\n{n}. {st.title}\n  $ {st.command}")
        for line in st.output.splitlines():
            click.echo(f"  | {line}")
    for heading, steps in (("reconciler: budgets, fair share and what operators see",
                            reconciler_steps),
                           ("simulator: a policy change tried on a real trace first",
                            sim_steps)):
        click.echo(f"\n== {heading} ==")
        for n, st in enumerate(steps, 1):
            click.echo(f"\n{n}. {st.title}\n  $ {st.command}")
            for line in st.output.splitlines():
                click.echo(f"  | {line}")
    click.echo("")
    daemons = ", ".join(f"{k}={'up' if v['running'] else 'DOWN'}"
                        for k, v in status["processes"].items() if not k.startswith("slurmd-"))
    click.echo(f"daemons: {daemons}")


# ------------------------------------------------------------------- admission
_SOCKET_HELP = ("submitd's Unix socket "
                "(default $SLURM_ML_SUBMITD_SOCKET or /run/slurm-ml/submitd.sock).")


def _socket_path(value: str | None) -> Path:
    from slurm_ml.submitd.run import DEFAULT_SOCKET

    return Path(value or os.environ.get("SLURM_ML_SUBMITD_SOCKET") or DEFAULT_SOCKET)


@main.command("submitd")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="slurm-ml.yaml (default conf/slurm-ml.yaml); re-read on SIGHUP.")
@click.option("--socket", "socket_path", default=None, help=_SOCKET_HELP)
@click.option("--group", default=None,
              help="Group that owns the socket (SlurmUser's group); mode is 0660.")
@click.option("--dsn", default=None, help="PostgreSQL DSN (default store.dsn or $SLURM_ML_DSN).")
def submitd_cmd(config_path: str | None, socket_path: str | None, group: str | None,
                dsn: str | None) -> None:
    """Run the admission policy server that job_submit.lua asks (foreground).

    SIGHUP re-reads the config (a bad one is refused, the old one kept) and refreshes
    budget standing and GPU memory profiles from PostgreSQL; SIGTERM stops it.
    """
    from slurm_ml.submitd.run import run_submitd
    from slurm_ml.submitd.server import SubmitdError

    path = Path(config_path or DEFAULT_CONFIG)
    cfg = _load_config(path)
    try:
        run_submitd(cfg, path, _socket_path(socket_path), group=group, dsn=dsn)
    except (SubmitdError, OSError) as exc:
        _fail(str(exc))


@main.command("submitd-ctl")
@click.argument("action", type=click.Choice(["ping", "stats", "refresh"]))
@click.option("--socket", "socket_path", default=None, help=_SOCKET_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the reply as JSON.")
def submitd_ctl(action: str, socket_path: str | None, as_json: bool) -> None:
    """Ask a running submitd: ping, stats, or refresh its state now.

    Exit 3 when submitd does not answer.
    """
    from slurm_ml.submitd.client import SubmitdUnavailable, ask

    try:
        reply = ask(_socket_path(socket_path), {"v": 1, "op": action})
    except SubmitdUnavailable as exc:
        _fail(str(exc), EXIT_NOT_READY)
    if as_json:
        _emit(reply, True, "")
    elif action == "stats":
        click.echo("\n".join(f"{k}: {v}" for k, v in sorted(reply.get("stats", {}).items())))
    else:
        click.echo(reply.get("action", "?"))


@main.command("submit-check", context_settings={"ignore_unknown_options": True,
                                                "allow_interspersed_args": False})
@click.option("--user", default=None, help="Submit as this user (default: you).")
@click.option("--account", default=None, help="Account when the sbatch line has no -A.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="slurm-ml.yaml (default conf/slurm-ml.yaml).")
@click.option("--dsn", default=None,
              help="PostgreSQL for budgets and GPU memory profiles (default $SLURM_ML_DSN).")
@click.option("--json", "as_json", is_flag=True, help="Print the verdicts as JSON.")
@click.argument("sbatch_args", nargs=-1, type=click.UNPROCESSED)
def submit_check(*, user: str | None, account: str | None, config_path: str | None,
                 dsn: str | None, as_json: bool, sbatch_args: tuple[str, ...]) -> None:
    """What would admission do with this job?  Runs the real policy; submits nothing.

    \b
    Examples:
      slurm-ml submit-check -- --gres=gpu:a100_80g:4 --comment=gpu_mem=30G train.sh
      slurm-ml submit-check --user alice --json -- --gpus=16 --wrap 'srun python x.py'

    Exit codes: 0 the job would be accepted (possibly rewritten); 1 it would be
    rejected; 2 the sbatch options or the config are invalid.
    """
    import getpass
    import pwd

    from slurm_ml.submitd.check import check, describe
    from slurm_ml.submitd.run import open_store
    from slurm_ml.submitd.sbatch_args import SbatchParseError, script_argument
    from slurm_ml.submitd.server import PolicyServer
    from slurm_ml.submitd.state import StateRefresher

    cfg = _load_config(config_path or DEFAULT_CONFIG)
    name = user or getpass.getuser()
    try:
        uid: int | None = pwd.getpwnam(name).pw_uid
    except KeyError:
        uid = None
    script = None
    try:
        path = script_argument(sbatch_args)
    except SbatchParseError as exc:
        _fail(f"sbatch would refuse this: {exc}", EXIT_BAD_INPUT)
    try:
        if path is not None:
            script = Path(path).read_text()
        elif "--wrap" not in " ".join(sbatch_args) and not sys.stdin.isatty():
            script = sys.stdin.read()
    except (OSError, UnicodeDecodeError) as exc:
        _fail(f"cannot read the batch script: {exc}", EXIT_BAD_INPUT)
    if dsn or cfg.store.dsn or os.environ.get("SLURM_ML_DSN"):
        store = open_store(cfg, dsn)
    else:  # one plain line for a researcher, not submitd's log warning
        click.echo("slurm-ml: note: no database configured (store.dsn / $SLURM_ML_DSN); "
                   "deciding without budget standing or GPU memory profiles", err=True)
        store = None
    refresher = StateRefresher(store, cfg)
    if store is not None:
        if not refresher.refresh_once():
            click.echo(f"slurm-ml: warning: database unavailable ({refresher.last_error}); "
                       "deciding without budget standing or GPU memory profiles", err=True)
        store.close()
    server = PolicyServer(cfg, refresher)
    try:
        verdicts = check(server, sbatch_args, script, user=name, user_id=uid, account=account)
    except SbatchParseError as exc:
        _fail(f"sbatch would refuse this: {exc}", EXIT_BAD_INPUT)
    _emit([v.as_dict() for v in verdicts], as_json, describe(verdicts))
    if any(v.action == "reject" for v in verdicts):
        sys.exit(EXIT_FAILED)


# The reconciler's and the simulator's commands live in their own modules; importing
# them registers them.
from slurm_ml.cli import compose as _compose  # noqa: E402  (devcluster container ROLE)
from slurm_ml.cli import deploy as _deploy  # noqa: E402, F401  (install / uninstall)
from slurm_ml.cli import reconciler as _reconciler  # noqa: E402
from slurm_ml.cli import simulate as _simulate  # noqa: E402

__all__ = ["main"]
assert _reconciler and _simulate and _compose  # registered for their side effect
