"""``slurm-ml config check``: validate a configuration file."""

from __future__ import annotations

import json
import sys

import click

from slurm_ml.cli.common import EXIT_BAD_INPUT, emit


@click.group()
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
    emit(summary, as_json, f"{file}: OK ({summary['nodes']} nodes, "
         f"{summary['node_classes']} node classes, {summary['programs']} programs)")
