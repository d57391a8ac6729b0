"""``slurm-ml``: the operator's command line. The only place logging is configured.

One module per command group; this root group registers them all below. Exit codes
(``slurm_ml.cli.common``): 0 ok; 1 the operation failed (Slurm, database or dev cluster
error, with a message); 2 bad input (usage or configuration errors); 3 not ready (e.g.
the dev cluster is not fully up).
"""

from __future__ import annotations

import logging
import sys

import click

from slurm_ml import __version__
from slurm_ml.cli import (
    admission,
    config,
    db,
    deploy,
    devcluster,
    efficiency,
    health,
    quarantine,
    reconciler,
    simulate,
)
from slurm_ml.cli.common import (
    DEFAULT_CONFIG,
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_NOT_READY,
    EXIT_OK,
)

__all__ = [
    "DEFAULT_CONFIG", "EXIT_BAD_INPUT", "EXIT_FAILED", "EXIT_NOT_READY", "EXIT_OK", "main",
]


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


# Every command, one module per group (slurm_ml/cli/<module>.py).
main.add_command(config.config)            # config check
main.add_command(db.db)                    # db migrate
main.add_command(health.health)            # health check / prolog / epilog / periodic
main.add_command(quarantine.quarantine)    # quarantine list / resume / reset
main.add_command(devcluster.devcluster)    # devcluster up / down / ... / container (compose)
main.add_command(admission.submitd_cmd)    # submitd
main.add_command(admission.submitd_ctl)    # submitd-ctl
main.add_command(admission.submit_check)   # submit-check
main.add_command(deploy.install_cmd)       # install
main.add_command(deploy.uninstall_cmd)     # uninstall
main.add_command(reconciler.daemon_cmd)    # daemon
main.add_command(reconciler.budget)        # budget status
main.add_command(reconciler.why_cmd)       # why
main.add_command(efficiency.jobstats_cmd)  # jobstats
main.add_command(efficiency.efficiency_cmd)  # efficiency
main.add_command(simulate.sim_cmd)         # sim
