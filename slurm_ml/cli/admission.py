"""``slurm-ml submitd``, ``submitd-ctl`` and ``submit-check``: the admission policy
server job_submit.lua asks, its control socket, and a dry run of admission."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from slurm_ml import assets
from slurm_ml.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_NOT_READY,
    emit,
    fail,
    load_config_or_exit,
)
from slurm_ml.envvars import env

_SOCKET_HELP = ("submitd's Unix socket "
                "(default $SLURM_ML_SUBMITD_SOCKET or /run/slurm-ml/submitd.sock).")


def submitd_socket(value: str | None) -> Path:
    """submitd's socket: ``--socket``, else $SLURM_ML_SUBMITD_SOCKET, else the default."""
    from slurm_ml.submitd.run import DEFAULT_SOCKET

    return Path(value or env("SLURM_ML_SUBMITD_SOCKET") or DEFAULT_SOCKET)


@click.command("submitd")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="slurm-ml.yaml (default $SLURM_ML_CONFIG, then the packaged "
                   "conf/slurm-ml.yaml); re-read on SIGHUP.")
@click.option("--socket", "socket_path", default=None, help=_SOCKET_HELP)
@click.option("--group", default=None,
              help="Group that owns the socket (SlurmUser's group); mode is 0660.")
@click.option("--dsn", default=None, help="PostgreSQL DSN (default $SLURM_ML_DSN, then store.dsn).")
@click.option("--key-file", default=None, type=click.Path(dir_okay=False),
              help="The reply key the job_submit shim checks, made there if absent "
                   "(default $SLURM_ML_SUBMITD_KEY_FILE; install sets "
                   "/var/lib/slurm-ml/submitd.key). Without one, replies carry no key.")
def submitd_cmd(config_path: str | None, socket_path: str | None, group: str | None,
                dsn: str | None, key_file: str | None) -> None:
    """Run the admission policy server that job_submit.lua asks (foreground).

    SIGHUP re-reads the config (a bad one is refused, the old one kept) and refreshes
    budget standing and GPU memory profiles from PostgreSQL; SIGTERM stops it.

    It refuses to listen in a directory that a user other than root or its own may
    write (whoever binds the socket there while submitd is stopped would answer the
    shim), and puts its reply key in every answer, which the shim checks.

    Exit codes: 0 stopped by SIGTERM; 1 the socket could not be made (in use, no such
    group, a directory it cannot write or others can), or the reply key cannot be
    read, made or trusted; 2 a bad config.
    """
    from slurm_ml.submitd.run import run_submitd
    from slurm_ml.submitd.server import SubmitdError

    path = assets.config_path(config_path)
    cfg = load_config_or_exit(path)
    try:
        key = key_file or env("SLURM_ML_SUBMITD_KEY_FILE")
        run_submitd(cfg, path, submitd_socket(socket_path), group=group, dsn=dsn,
                    key_file=Path(key) if key else None)
    except (SubmitdError, OSError) as exc:
        fail(str(exc))


@click.command("submitd-ctl")
@click.argument("action", type=click.Choice(["ping", "stats", "refresh"]))
@click.option("--socket", "socket_path", default=None, help=_SOCKET_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the reply as JSON.")
def submitd_ctl(action: str, socket_path: str | None, as_json: bool) -> None:
    """Ask a running submitd: ping, stats, or refresh its state now.

    While submitd's last config reload (SIGHUP) failed, ping and stats also say so on
    stderr; stats lists the errors (config_reload_errors).

    Exit codes: 0 answered; 1 submitd answered with an error (printed); 3 submitd does
    not answer.
    """
    from slurm_ml.submitd.client import SubmitdUnavailable, ask

    try:
        reply = ask(submitd_socket(socket_path), {"v": 1, "op": action})
    except SubmitdUnavailable as exc:
        fail(str(exc), EXIT_NOT_READY)
    if reply.get("action") == "error":
        if as_json:
            emit(reply, True, "")
        fail(f"submitd answered {action} with an error: {reply.get('error') or '?'}")
    if as_json:
        emit(reply, True, "")
    elif action == "stats":
        click.echo("\n".join(f"{k}: {v}" for k, v in sorted(reply.get("stats", {}).items())))
    else:
        click.echo(reply.get("action", "?"))
    stats = reply.get("stats")
    failed = reply.get("config_reload_failed") or (
        isinstance(stats, dict) and stats.get("config_reload_failed"))
    if failed and not as_json:
        # Still answered (exit 0): submitd runs on the config it had before the reload.
        click.echo("slurm-ml submitd-ctl: warning: submitd's last config reload failed; it "
                   "runs on the config it had before (submitd-ctl stats lists the errors)",
                   err=True)


@click.command("submit-check", context_settings={"ignore_unknown_options": True,
                                                "allow_interspersed_args": False})
@click.option("--user", default=None, help="Submit as this user (default: you).")
@click.option("--account", default=None, help="Account when the sbatch line has no -A.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="The site's slurm-ml.yaml (default $SLURM_ML_CONFIG, then the packaged "
                   "dev-cluster one, with a note).")
@click.option("--dsn", default=None,
              help="PostgreSQL for budgets and GPU memory profiles (default $SLURM_ML_DSN, "
                   "then the config's store.dsn).")
@click.option("--json", "as_json", is_flag=True, help="Print the verdicts as JSON.")
@click.argument("sbatch_args", nargs=-1, type=click.UNPROCESSED)
def submit_check(*, user: str | None, account: str | None, config_path: str | None,
                 dsn: str | None, as_json: bool, sbatch_args: tuple[str, ...]) -> None:
    """What would admission do with this job?  Runs the real policy; submits nothing.

    \b
    Examples:
      slurm-ml submit-check -- --gres=gpu:a100_80g:4 --comment=gpu_mem=30G train.sh
      slurm-ml submit-check --user alice --json -- --gpus=16 --wrap 'srun python x.py'

    Exit codes: 0 the job would be accepted (possibly rewritten); 1 it would be
    rejected; 2 the sbatch options or the config are invalid; 3 the policy failed on
    this job (submitd would let it through unchanged: report it with the output).
    """
    import getpass
    import pwd

    from slurm_ml.submitd.check import check, describe
    from slurm_ml.submitd.run import open_store
    from slurm_ml.submitd.sbatch_args import SbatchParseError, script_argument
    from slurm_ml.submitd.server import PolicyServer
    from slurm_ml.submitd.state import StateRefresher

    cfg = load_config_or_exit(assets.config_path(config_path))
    if not config_path and not env("SLURM_ML_CONFIG"):  # verdicts for another cluster
        click.echo(f"slurm-ml: note: checking against the packaged dev-cluster config "
                   f"({assets.DEFAULT_CONFIG}): no --config and $SLURM_ML_CONFIG is "
                   f"unset; ask your admin for the site's slurm-ml.yaml", err=True)
    name = user or getpass.getuser()
    try:
        uid: int | None = pwd.getpwnam(name).pw_uid
    except KeyError:
        uid = None
    script = None
    try:
        path = script_argument(sbatch_args)
    except SbatchParseError as exc:
        fail(f"sbatch would refuse this: {exc}", EXIT_BAD_INPUT)
    try:
        if path is not None:
            script = Path(path).read_text()
        elif "--wrap" not in " ".join(sbatch_args) and not sys.stdin.isatty():
            script = sys.stdin.read()
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read the batch script: {exc}", EXIT_BAD_INPUT)
    if cfg.store.resolve_dsn(dsn):
        store = open_store(cfg, dsn)
    else:  # one plain line for a researcher, not submitd's log warning
        click.echo("slurm-ml: note: no database configured (store.dsn / $SLURM_ML_DSN); "
                   "deciding without budget standing or GPU memory profiles", err=True)
        store = None
    refresher = StateRefresher(store, cfg)
    if store is not None:
        if not refresher.refresh_once():
            click.echo(f"slurm-ml: warning: database unavailable ({refresher.last_error}); "
                       "deciding without budget standing or GPU memory profiles", err=True)
        store.close()
    server = PolicyServer(cfg, refresher)
    try:
        verdicts = check(server, sbatch_args, script, user=name, user_id=uid, account=account)
    except SbatchParseError as exc:
        fail(f"sbatch would refuse this: {exc}", EXIT_BAD_INPUT)
    emit([v.as_dict() for v in verdicts], as_json, describe(verdicts))
    if any(v.action == "reject" for v in verdicts):
        sys.exit(EXIT_FAILED)
    if any(v.action not in ("accept", "reject") for v in verdicts):
        sys.exit(EXIT_NOT_READY)
