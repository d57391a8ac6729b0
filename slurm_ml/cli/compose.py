"""``slurm-ml devcluster container ROLE``: the entry point of every docker-compose service
(registered on the ``devcluster`` group by ``slurm_ml.cli.devcluster``)."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import click

from slurm_ml import assets
from slurm_ml.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_NOT_READY,
    fail,
    load_config_or_exit,
)

# slurm_ml.devcluster.compose's ROLES and CONFIG_PATH, spelled out so that every
# slurm-ml start (the Prolog's among them) does not import the dev cluster's modules;
# tests/unit/test_compose_config.py checks they are equal.
ROLES = ("init", "mariadb", "postgres", "dbd", "ctld", "node", "submitd", "daemon")
CONFIG_PATH = Path("/etc/slurm-ml/slurm-ml.yaml")


@click.command("container")
@click.argument("role", type=click.Choice(ROLES))
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help=f"slurm-ml.yaml (default $SLURM_ML_CONFIG, then {CONFIG_PATH}).")
@click.option("--node", default=None,
              help="With ROLE node: the Slurm node this container is (default: its host name).")
@click.option("--check", is_flag=True,
              help="Start nothing: exit 0 when this container's service answers, 3 when not "
                   "(a compose healthcheck).")
def devcluster_container(role: str, config_path: str | None, node: str | None,
                         check: bool) -> None:
    """Run one service of the docker compose cluster (docker-compose.yml).

    \b
    ROLE is one of:
      init      one-shot: secrets, munge key, Slurm files and `slurm-ml install`
                into the shared /etc/slurm
      mariadb   MariaDB for slurmdbd          postgres  PostgreSQL for slurm-ml
      dbd       munged + slurmdbd             ctld      munged + accounts + slurmctld
      node      munged + fake GPUs + slurmd   submitd   `slurm-ml submitd`
      daemon    the reconciler `slurm-ml daemon`

    Each role prepares with the dev cluster's own steps, then execs its daemon in the
    foreground. Exit codes: 0 init done / healthy; 1 a step failed; 2 bad config or node;
    3 (--check) not healthy.
    """
    from slurm_ml.devcluster.compose import check_role, run_role
    from slurm_ml.devcluster.platform import DevClusterError
    from slurm_ml.proc import CommandError
    from slurm_ml.slurm.errors import SlurmError
    from slurm_ml.slurm.render import TemplateError
    from slurm_ml.store.errors import StoreError

    path = assets.config_path(config_path, default=CONFIG_PATH)
    cfg = load_config_or_exit(path)
    name = node or socket.gethostname().split(".")[0]
    if role == "node" and name not in cfg.all_nodes():
        fail(f"node {name!r} is not in {path} (nodes: {', '.join(cfg.all_nodes())}); "
             "pass --node", EXIT_BAD_INPUT)
    if check:
        sys.exit(0 if check_role(role, cfg, path, node=name) else EXIT_NOT_READY)
    try:
        run_role(role, cfg, path, node=name, say=lambda m: click.echo(m, err=True))
    except (DevClusterError, CommandError, SlurmError, TemplateError, StoreError,
            TimeoutError, OSError) as exc:
        fail(f"container role {role}: {exc}")
