"""What the node commands share (``health prolog/epilog/periodic``, run by Slurm's hooks,
and the operators' ``quarantine`` commands): their --config/--dsn/--json options, their
settings, and the database they open. Defines no command."""

from __future__ import annotations

import os
from typing import Any

import click

from slurm_ml.cli.common import DEFAULT_CONFIG


def hook_options(f: Any) -> Any:
    f = click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")(f)
    f = click.option("--dsn", default=None,
                     help="PostgreSQL DSN (default $SLURM_ML_DSN, then store.dsn; none: "
                          "records only spool).")(f)
    return click.option("--config", "config_path", type=click.Path(dir_okay=False),
                        default=None,
                        help="slurm-ml.yaml (default $SLURM_ML_CONFIG, then "
                             "the packaged conf/slurm-ml.yaml).")(f)


def open_db(dsn: str, connect_timeout_s: float) -> Any:
    from slurm_ml.store.postgres import PostgresStore

    return PostgresStore(dsn, connect_timeout_s=connect_timeout_s)


def hook_settings(config_path: str | None, dsn: str | None) -> Any:
    from slurm_ml.hooks.wiring import HookSettings

    return HookSettings.from_env(os.environ, default_config=DEFAULT_CONFIG,
                                 config=config_path, dsn=dsn)
