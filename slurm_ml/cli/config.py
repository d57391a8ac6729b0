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


@config.command("check")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable result.")
def config_check(file: str, as_json: bool) -> None:
    """Validate FILE. Exit 0 when valid; exit 2 with every error, `path: message` per line.

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
