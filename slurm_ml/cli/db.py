"""``slurm-ml db migrate``: slurm-ml's PostgreSQL schema."""

from __future__ import annotations

import click

from slurm_ml.cli.common import emit, fail
from slurm_ml.envvars import env


@click.group()
def db() -> None:
    """Manage slurm-ml's PostgreSQL database."""


@db.command("migrate")
@click.option("--dsn", default=None,
              help="PostgreSQL DSN (default: $SLURM_ML_DSN; prefer it: a command line shows "
                   "the password to every user in ps).")
@click.option("--json", "as_json", is_flag=True)
def db_migrate(dsn: str | None, as_json: bool) -> None:
    """Apply pending schema migrations (idempotent)."""
    dsn = dsn or env("SLURM_ML_DSN")
    if not dsn:
        raise click.UsageError("no database: pass --dsn or set $SLURM_ML_DSN")
    from slurm_ml.store.errors import StoreError
    from slurm_ml.store.migrate import migrate

    try:
        applied = migrate(dsn)
    except StoreError as exc:
        fail(str(exc))
    emit({"applied": applied}, as_json,
         f"applied: {', '.join(applied)}" if applied else "schema is up to date")
