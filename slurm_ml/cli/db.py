"""``slurm-ml db migrate``: slurm-ml's PostgreSQL schema."""

from __future__ import annotations

import click

from slurm_ml.cli.common import EXIT_BAD_INPUT, emit, fail, load_config_or_exit
from slurm_ml.envvars import env


@click.group()
def db() -> None:
    """Manage slurm-ml's PostgreSQL database."""


@db.command("migrate")
@click.option("--dsn", default=None,
              help="PostgreSQL DSN (default: $SLURM_ML_DSN, then the config's store.dsn; "
                   "prefer those: a command line shows the password to every user in ps).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="slurm-ml.yaml for store.dsn (default $SLURM_ML_CONFIG, then the "
                   "packaged one).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def db_migrate(dsn: str | None, config_path: str | None, as_json: bool) -> None:
    """Apply pending schema migrations (idempotent; concurrent runs wait for each other,
    and say so).

    Exit codes: 0 applied, or the schema is up to date; 1 the database is unreachable,
    or a migration failed (it was rolled back; earlier ones stay applied); 2 no DSN, a
    malformed DSN, or a bad config.
    """
    from slurm_ml import assets
    from slurm_ml.store.errors import InvalidDsn, StoreError
    from slurm_ml.store.migrate import migrate

    dsn = dsn or env("SLURM_ML_DSN")
    if not dsn:  # only then is the config read: a DSN given needs no config at all
        dsn = load_config_or_exit(assets.config_path(config_path)).store.dsn
    if not dsn:
        fail("no database: pass --dsn, set $SLURM_ML_DSN, or store.dsn in the config",
             EXIT_BAD_INPUT)
    try:
        applied = migrate(dsn, say=lambda m: click.echo(m, err=True))
    except InvalidDsn as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    except StoreError as exc:
        fail(str(exc))
    emit({"applied": applied}, as_json,
         f"applied: {', '.join(applied)}" if applied else "schema is up to date")
