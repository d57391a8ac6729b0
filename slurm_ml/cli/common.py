"""What every ``slurm-ml`` command module shares: the exit codes, the default config,
and how a command fails, prints its result and loads its config.

Exit codes: 0 ok; 1 the operation failed (Slurm, database or dev cluster error, with a
message); 2 bad input (usage or configuration errors); 3 not ready (e.g. the dev cluster
is not fully up). ``install``/``uninstall`` add 4: a file could not be read or written.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from slurm_ml import assets

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_NOT_READY = 0, 1, 2, 3
# conf/slurm-ml.yaml (slurm_ml.assets): the checkout's, or the wheel's slurm_ml/conf/.
DEFAULT_CONFIG = assets.DEFAULT_CONFIG
#: appended to an error reading Slurm: what the operator checks next
SLURM_HINT = ("; check that SLURM_CONF names the cluster's slurm.conf (or run this on a "
              "host that has one) and that slurmctld answers: scontrol ping")


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    """Print ``slurm-ml: error: MESSAGE`` on stderr and exit ``code``."""
    click.echo(f"slurm-ml: error: {message}", err=True)
    sys.exit(code)


def emit(data: Any, as_json: bool, human: str) -> None:
    """Print a command's result: ``data`` as JSON with --json, else the ``human`` text."""
    click.echo(json.dumps(data, indent=2, sort_keys=True) if as_json else human)


def load_config_or_exit(path: str | Path) -> Any:
    """The config at ``path``; an invalid one exits 2 with every error."""
    from slurm_ml.config import ConfigError, load_config

    try:
        return load_config(path)
    except ConfigError as exc:
        fail(f"invalid configuration {path}:\n{exc}", EXIT_BAD_INPUT)
