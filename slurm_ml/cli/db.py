"""``slurm-ml db migrate``: slurm-ml's PostgreSQL schema."""

from __future__ import annotations

import click

from slurm_ml.cli.common import emit, fail


@click.group()
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
        fail(str(exc))
    emit({"applied": applied}, as_json,
         f"applied: {', '.join(applied)}" if applied else "schema is up to date")
