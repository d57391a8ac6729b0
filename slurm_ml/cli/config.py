"""``slurm-ml config check``: validate a configuration file."""

from __future__ import annotations

import json
import sys

import click

from slurm_ml.cli.common import EXIT_BAD_INPUT, emit


@click.group()
def config() -> None:
    """Validate slurm-ml configuration files."""


def _dsn_warnings(config_dsn: str) -> list[str]:
    """What is unsafe about the DSN slurm-ml would use here ($SLURM_ML_DSN, else
    store.dsn), each message led by where the DSN came from; never the password."""
    from slurm_ml.envvars import env
    from slurm_ml.store.dsn import dsn_warnings
    from slurm_ml.store.errors import InvalidDsn

    source, dsn = ("$SLURM_ML_DSN", env("SLURM_ML_DSN")) if env("SLURM_ML_DSN") else (
        "store.dsn", config_dsn)
    if not dsn:
        return []
    try:
        return [f"{source}: {text}" for text in dsn_warnings(dsn)]
    except InvalidDsn as exc:
        return [f"{source}: {exc}"]


def _socket_errors(socket: str | None, user: str) -> list[str]:
    """What would let someone other than submitd answer the job_submit shim: a socket
    directory others may write (submitd refuses to start there too), judged for
    submitd's ``user`` (root alone when no such user exists here)."""
    import pwd

    from slurm_ml.cli.admission import submitd_socket
    from slurm_ml.submitd.auth import socket_dir_problem

    try:
        account = pwd.getpwnam(user)
        uid, gid = account.pw_uid, account.pw_gid
    except KeyError:
        uid = gid = 0
    problem = socket_dir_problem(submitd_socket(socket), user_uid=uid, user_gid=gid)
    return [] if problem is None else [problem]


@config.command("check")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable result.")
@click.option("--submitd-socket", default=None,
              help="submitd's socket to check the directory of (default "
                   "$SLURM_ML_SUBMITD_SOCKET, then /run/slurm-ml/submitd.sock).")
@click.option("--submitd-user", default="slurm", show_default=True,
              help="The user submitd runs as (install: SlurmUser), who may own that "
                   "directory besides root.")
def config_check(file: str, as_json: bool, submitd_socket: str | None,
                 submitd_user: str) -> None:
    """Validate FILE. Exit 0 when valid; exit 2 with every error, `path: message` per line.

    Refuses (exit 2) a submitd socket whose directory a user other than root or
    submitd's may write: whoever binds the socket there while submitd is stopped would
    answer the job_submit shim. A directory that does not exist yet is not judged.

    Also warns (on stderr; `dsn_warnings` with --json; the exit code stays 0) about the
    DSN slurm-ml would use ($SLURM_ML_DSN, else store.dsn) where it would give the
    password to an impostor: over TCP without require_auth=scram-sha-256, or with TLS
    but without channel_binding=require.
    """
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
    socket_errors = _socket_errors(submitd_socket, submitd_user)
    if socket_errors:
        if as_json:
            click.echo(json.dumps({"valid": False, "file": file, "errors": [
                {"path": "submitd socket", "message": m} for m in socket_errors]}, indent=2))
        else:
            for text in socket_errors:
                click.echo(f"submitd socket: {text}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    summary = {
        "valid": True, "file": file, "gpu_types": len(cfg.gpu_types),
        "node_classes": len(cfg.node_classes), "nodes": len(cfg.all_nodes()),
        "programs": len(cfg.budgets.programs),
    }
    warnings = _dsn_warnings(cfg.store.dsn)
    summary["dsn_warnings"] = warnings
    for text in warnings:
        click.echo(f"slurm-ml: warning: {text}", err=True)
    emit(summary, as_json, f"{file}: OK ({summary['nodes']} nodes, "
         f"{summary['node_classes']} node classes, {summary['programs']} programs)")
