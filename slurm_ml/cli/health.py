"""``slurm-ml health``: check a node from its captures (``check``), and the commands
Slurm's Prolog, Epilog and HealthCheckProgram run (``prolog``, ``epilog``, ``periodic``)."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, NoReturn

import click

from slurm_ml.cli.common import (
    DEFAULT_CONFIG,
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_OK,
    emit,
    fail,
    load_config_or_exit,
)
from slurm_ml.cli.hooks import hook_options, hook_settings, open_db


@click.group()
def health() -> None:
    """GPU node health checks."""


@health.command("check")
@click.argument("paths", nargs=-1, metavar="[PATH]...", type=click.Path())
@click.option("--from-nvidia-smi", "capture_dir", default=None, metavar="DIR",
              type=click.Path(file_okay=False),
              help="A directory of captures (the same as giving it as PATH).")
@click.option("--node", default=None, help="Node name; its class comes from the config.")
@click.option("--class", "node_class", default=None, metavar="NODECLASS",
              help="Node class whose expectations apply (wins over --node).")
@click.option("--gpu-model", default=None, metavar="NAME",
              help="The GPU model (e.g. 'H100 NVL') when the captures do not name it; its "
                   "healthy shape comes from the model table.")
@click.option("--gpus", type=click.IntRange(min=0), default=None, metavar="N",
              help="GPUs the node should have, when no --class says so (a GPU missing "
                   "from every capture is then found).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="slurm-ml.yaml for --class/--node (default the packaged conf/slurm-ml.yaml).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def health_check(*, paths: tuple[str, ...], capture_dir: str | None, node: str | None,
                 node_class: str | None, gpu_model: str | None, gpus: int | None,
                 config_path: str | None, as_json: bool) -> None:
    """Check one node from its captures, without NVML.

    PATH: capture files and directories of them, in any mix: nvidia-smi -q [-x], the
    plain nvidia-smi table, nvidia-smi topo -m, nvidia-smi nvlink -s/-e/-c, dcgmi diag
    [-j] (-r 1/2/3), dcgmi nvlink -s, kernel logs (dmesg, journalctl, syslog).

    Without --class or --node the expectations come from the GPU model (named in the
    captures, or by --gpu-model): NVLink links and bridged pairs; an unknown model is
    judged against its peers, which only catches a GPU unlike the others.

    Exit codes: 0 healthy (no drain finding); 1 a drain finding; 2 bad input
    (unreadable capture, unknown class, node or model, invalid config).
    """
    from slurm_ml.health.replay.errors import CaptureError
    from slurm_ml.health.report import HealthInputError, check_captures

    items = list(paths) + ([capture_dir] if capture_dir is not None else [])
    if not items:
        fail("name the captures to check: slurm-ml health check PATH... "
             "(files or directories)", EXIT_BAD_INPUT)
    cfg = None
    if config_path is not None or node_class is not None or node is not None:
        cfg = load_config_or_exit(config_path or DEFAULT_CONFIG)
    try:
        report = check_captures(items, node=node, node_class=node_class, config=cfg,
                                gpu_model=gpu_model, gpus=gpus)
    except (CaptureError, HealthInputError) as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    emit(report.as_dict(), as_json, report.render())
    sys.exit(report.exit_code)


def _hook(name: str, config_path: str | None, dsn: str | None, as_json: bool, *,
          run: Any, fallback_code: int) -> NoReturn:
    """Run a Slurm hook: a broken config or an unexpected error exits ``fallback_code``
    (never a code that makes Slurm drain the node on slurm-ml's behalf)."""
    from slurm_ml.config import ConfigError
    from slurm_ml.hooks import wiring

    settings = hook_settings(config_path, dsn)
    try:
        cfg = wiring.load(settings)
    except ConfigError as exc:
        click.echo(f"slurm-ml {name}: not run: invalid configuration "
                   f"{settings.config_path}:\n{exc}", err=True)
        sys.exit(fallback_code)
    b = wiring.connect(settings, cfg, open_db=open_db)
    try:
        outcome = run(b)
    except Exception:  # a bug in slurm-ml must not take the node out of service
        logging.getLogger("slurm_ml.cli").exception("slurm-ml %s failed", name)
        sys.exit(fallback_code)
    finally:
        b.close()
    emit(wiring.outcome_json(outcome), as_json,
         f"slurm-ml {name}: {outcome.action}: {outcome.message}")
    sys.exit(getattr(outcome, "exit_code", EXIT_OK))


@health.command("prolog")
@hook_options
def health_prolog(config_path: str | None, dsn: str | None, as_json: bool) -> None:
    """Slurm Prolog: check the job's GPUs before it starts (reads Slurm's environment).

    On a drain-now finding the node is drained (reason `slurm-ml: <check> gpu<N> ...`,
    through the circuit breaker) and the job is requeued elsewhere.

    Exit codes: 0 the job may start (also whenever slurm-ml did not take the node out of
    service, e.g. a bad config or the breaker refused the drain); 1 the node is out of
    service: Slurm requeues the job.
    """
    from slurm_ml.hooks import wiring

    env = dict(os.environ)
    _hook("prolog", config_path, dsn, as_json, run=lambda b: wiring.prolog(env, b),
          fallback_code=EXIT_OK)


@health.command("epilog")
@hook_options
def health_epilog(config_path: str | None, dsn: str | None, as_json: bool) -> None:
    """Slurm Epilog: kill the job's leftover GPU processes, clean /dev/shm, record the
    job's GPU stats, re-check its GPUs (reads Slurm's environment).

    Always exits 0: a failing epilog makes Slurm drain the node itself, past the circuit
    breaker; every drain slurm-ml wants it makes explicitly.
    """
    from slurm_ml.hooks import wiring

    env = dict(os.environ)
    _hook("epilog", config_path, dsn, as_json, run=lambda b: wiring.epilog(env, b),
          fallback_code=EXIT_OK)


@health.command("periodic")
@click.option("--node", default=None,
              help="Node to check (default $SLURMD_NODENAME, then the short host name).")
@hook_options
def health_periodic(node: str | None, config_path: str | None, dsn: str | None,
                    as_json: bool) -> None:
    """Full health check of this node, for Slurm's HealthCheckProgram.

    Drains the node (through the circuit breaker) on a drain finding when it is idle,
    resumes a drain slurm-ml owns after policy.quarantine.resume_after_passes clean runs
    in a row, never touches anyone else's drain, and records per-job GPU utilisation.

    Exit codes: 0 it ran (whatever it found); 1 it could not run at all (bad config).
    """
    import socket

    from slurm_ml.hooks import wiring

    target = node or wiring.default_node(os.environ, socket.gethostname())
    _hook("periodic", config_path, dsn, as_json, run=lambda b: wiring.periodic(target, b),
          fallback_code=EXIT_FAILED)
