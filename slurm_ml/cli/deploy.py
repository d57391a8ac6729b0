"""``slurm-ml install`` / ``uninstall``: put slurm-ml into a Slurm configuration and take
it out again (registered on the main group by ``slurm_ml.cli``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from slurm_ml.cli.common import EXIT_BAD_INPUT, fail, load_config_or_exit
from slurm_ml.envvars import env

_EXIT_CODES = """\b
Exit codes:
  0  done, or nothing to change (also a dry run that could plan everything)
  1  refused: a file slurm-ml did not write, a file changed since install, or a
     conflicting slurm.conf setting (--force overrides; nothing was changed)
  2  bad input: options, config, templates, no slurm.conf, unknown partition
  3  Slurm unreachable: sacctmgr/slurmdbd did not answer (install changed nothing)
  4  a file could not be read or written (permissions, a full or read-only disk):
     what was done is on record; fix the cause and run the command again
"""


def _say(msg: str) -> None:
    click.echo(msg, err=True)


def _common(f: Any) -> Any:
    for opt in reversed([
        click.option("--slurm-conf-dir", type=click.Path(file_okay=False, path_type=Path),
                     default=Path("/etc/slurm"), show_default=True,
                     help="Directory holding slurm.conf."),
        click.option("--systemd-dir", type=click.Path(file_okay=False, path_type=Path),
                     default=Path("/etc/systemd/system"), show_default=True,
                     help="Where the systemd units go."),
        click.option("--no-systemd", is_flag=True,
                     help="Write no systemd units (uninstall reads the manifest instead)."),
        click.option("--dry-run", is_flag=True, help="Plan and show; change nothing."),
        click.option("--diff", "show_diff", is_flag=True,
                     help="Show every file change as a unified diff."),
        click.option("--force", is_flag=True,
                     help="Overwrite/remove files slurm-ml did not write or that changed "
                          "since (a file it did not write is kept as <name>.slurm-ml-orig "
                          "and restored by uninstall); let slurm-ml.conf win a conflicting "
                          "setting."),
        click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON."),
    ]):
        f = opt(f)
    return f


def _errors() -> tuple[type[Exception], ...]:
    from slurm_ml.deploy.errors import DeployError
    from slurm_ml.slurm.render import TemplateError

    return (DeployError, TemplateError)


def _run_or_fail(step: Any) -> Any:
    """``step()``, with each typed error (and a file the plan could not read) as a
    message and its exit code instead of a traceback."""
    from slurm_ml.deploy.errors import FileFailed

    try:
        return step()
    except _errors() as exc:
        fail(str(exc), getattr(exc, "exit_code", EXIT_BAD_INPUT))
    except OSError as exc:  # reading slurm.conf or a manifest, before anything changed
        name = f" {exc.filename}" if exc.filename else ""
        fail(f"cannot read or write{name}: {exc.strerror or exc} (run as root, or check "
             f"the path); nothing was changed", FileFailed.exit_code)


def _finish(outcome: Any, as_json: bool, show_diff: bool) -> None:
    from slurm_ml.deploy.report import unified

    if as_json:
        doc = outcome.as_dict()
        if show_diff:
            doc["diffs"] = [unified(a) for a in outcome.changes.actions]
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
    else:
        click.echo(outcome.render(diff=show_diff))
    sys.exit(outcome.exit_code)


def _env_pairs(values: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    out = []
    for v in values:
        key, sep, value = v.partition("=")
        if not sep or not key.isidentifier():
            fail(f"--env {v!r}: expected KEY=VALUE", EXIT_BAD_INPUT)
        out.append((key, value))
    return tuple(out)


def _install_dsn(option: str | None, config_dsn: str) -> str:
    """What install writes as SLURM_ML_DSN: ``--dsn``, else ``$SLURM_ML_DSN``, else
    nothing where ``store.dsn`` names a database (the config's then applies), else the
    local socket with peer authentication: no password exists to leak, where a TCP DSN
    hands one to whatever answers at its address. Says on stderr what is unsafe about
    the DSN that will be used."""
    from slurm_ml.store.dsn import dsn_warnings, local_dsn
    from slurm_ml.store.errors import InvalidDsn

    dsn = option if option is not None else env("SLURM_ML_DSN") or ""
    if option is None and not dsn and not config_dsn:
        dsn = local_dsn()
        _say(f"slurm-ml.env: SLURM_ML_DSN={dsn}: PostgreSQL on this host over its socket, "
             f"peer authentication (see docs/admin.md); pass --dsn or set $SLURM_ML_DSN "
             f"for another")
    used = dsn or config_dsn
    try:
        warnings = dsn_warnings(used) if used else []
    except InvalidDsn as exc:
        warnings = [str(exc)]
    for text in warnings:
        _say(f"slurm-ml: warning: {text}")
    return dsn


@click.command("install", epilog=_EXIT_CODES)
@click.option("--config", "config_path", required=True,
              type=click.Path(dir_okay=False, path_type=Path),
              help="slurm-ml.yaml to install (budgets, GPU types, partitions, policy).")
@_common
@click.option("--no-accounts", is_flag=True,
              help="Skip the QOS/account tree step (sacctmgr).")
@click.option("--submitd-socket", default="/run/slurm-ml/submitd.sock", show_default=True,
              help="Unix socket job_submit.lua uses to reach submitd.")
@click.option("--submitd-key", default="/var/lib/slurm-ml/submitd.key", show_default=True,
              help="submitd's reply key, which the shim checks so that nothing else "
                   "answering on the socket is applied; submitd makes it on its first "
                   "start. '' turns the check off.")
@click.option("--hook-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the Prolog/Epilog/HealthCheckProgram wrappers go "
                   "(default: --slurm-conf-dir).")
@click.option("--rules-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where slurm-ml.rules.yml, the Prometheus alerting and recording rules, "
                   "goes (default: --slurm-conf-dir); e.g. /etc/prometheus/rules on a "
                   "host that runs Prometheus.")
@click.option("--python", "python", default=None,
              help="Python with slurm-ml installed, for the hooks and units "
                   "(default: this one).")
@click.option("--dsn", default=None,
              help="PostgreSQL DSN written to slurm-ml.env (default $SLURM_ML_DSN; none: "
                   "store.dsn of the config; without either, this host's PostgreSQL over "
                   "its socket with peer authentication). Over TCP, add "
                   "require_auth=scram-sha-256. Prefer $SLURM_ML_DSN: a command line, "
                   "password included, is visible to every user in ps.")
@click.option("--health-check-interval", default=None, type=click.IntRange(min=0),
              help="HealthCheckInterval in seconds (default: policy.reclaim."
                   "sample_interval_s, which the zombie rule judges samples by; change "
                   "that knob instead); 0 sets HealthCheckProgram but never runs it.")
@click.option("--service-user", default=None,
              help="User (and its group) the units run as (default: SlurmUser of "
                   "slurm.conf).")
@click.option("--env", "extra_env", multiple=True, metavar="KEY=VALUE",
              help="Extra line for slurm-ml.env (repeatable).")
def install_cmd(*, config_path: Path, slurm_conf_dir: Path, systemd_dir: Path,
                no_systemd: bool, dry_run: bool, show_diff: bool, force: bool, as_json: bool,
                no_accounts: bool, submitd_socket: str, submitd_key: str,
                hook_dir: Path | None, rules_dir: Path | None,
                python: str | None, dsn: str | None, health_check_interval: int | None,
                service_user: str | None, extra_env: tuple[str, ...]) -> None:
    """Install slurm-ml into the Slurm configuration in --slurm-conf-dir.

    \b
    Writes (and records in <dir>/.slurm-ml-manifest.json with their sha256):
      job_submit.lua        the admission shim, settings filled in
      slurm-ml.conf         every slurm.conf setting slurm-ml needs
      slurm-ml.env          settings for the hooks and units (mode 0600)
      slurm-ml-prolog, slurm-ml-epilog, slurm-ml-healthcheck   (in --hook-dir)
      slurm-ml-submitd.service, slurm-ml-daemon.service       (in --systemd-dir)
      slurm-ml.rules.yml    Prometheus' alerting and recording rules  (in --rules-dir)
    and edits slurm.conf: appends `Include <dir>/slurm-ml.conf` and sets
    TRESBillingWeights on the partitions in the config. Then adds the QOS
    alloc/free and the account tree (sacctmgr). Re-running changes only what
    differs; a conflicting setting already in slurm.conf is refused.
    """
    from slurm_ml.deploy import state
    from slurm_ml.deploy.bundle import InstallParams
    from slurm_ml.deploy.install import install
    from slurm_ml.slurm.runner import SlurmRunner

    cfg = load_config_or_exit(config_path)
    conf_dir = slurm_conf_dir.absolute()
    user, group = state.service_account(conf_dir / "slurm.conf")
    if service_user is not None:
        user, group = service_user, state.primary_group(service_user)
    params = InstallParams(
        conf_dir=conf_dir,
        config_path=config_path.absolute(),
        python=python or sys.executable,
        systemd_dir=None if no_systemd else systemd_dir.absolute(),
        hook_dir=hook_dir.absolute() if hook_dir else None,
        rules_dir=rules_dir.absolute() if rules_dir else None,
        submitd_socket=submitd_socket,
        submitd_key=submitd_key,
        dsn=_install_dsn(dsn, cfg.store.dsn),
        health_check_interval_s=health_check_interval,
        service_user=user,
        service_group=group,
        extra_env=_env_pairs(extra_env),
        accounts=not no_accounts,
    )
    run = SlurmRunner(env={"SLURM_CONF": str(params.slurm_conf)}, timeout_s=30)
    outcome = _run_or_fail(lambda: install(cfg, params, run=run, dry_run=dry_run,
                                           force=force, say=_say))
    _finish(outcome, as_json, show_diff)


_UNINSTALL_EXIT_CODES = """\b
Exit codes:
  0  done, or nothing to take out (also a dry run that could plan everything)
  1  refused: a file changed since install (--force removes it anyway; nothing was
     changed)
  2  bad input: options, or a manifest that cannot be read
  4  a file could not be read or written (permissions, a full or read-only disk):
     what was undone is on record; fix the cause and run uninstall again
"""


@click.command("uninstall", epilog=_UNINSTALL_EXIT_CODES)
@_common
def uninstall_cmd(*, slurm_conf_dir: Path, systemd_dir: Path, no_systemd: bool,
                  dry_run: bool, show_diff: bool, force: bool, as_json: bool) -> None:
    """Remove exactly what `slurm-ml install` wrote into --slurm-conf-dir (and the
    systemd units), restore files it replaced, undo its slurm.conf edits.

    Uses <dir>/.slurm-ml-manifest.json: a file changed since install is not removed
    without --force. QOS and accounts are NOT deleted (that would drop their usage
    history); the sacctmgr commands that would are printed. --systemd-dir and
    --no-systemd are accepted for symmetry: the manifest says where the units are.
    """
    from slurm_ml.config import ConfigError, load_config
    from slurm_ml.deploy import state
    from slurm_ml.deploy.install import uninstall

    conf_dir = slurm_conf_dir.absolute()

    def step() -> Any:
        cfg = None
        manifest = state.load_manifest(conf_dir)
        if manifest is not None and manifest.config:
            try:
                cfg = load_config(manifest.config)
            except ConfigError:
                cfg = None
        return uninstall(conf_dir, cfg=cfg, dry_run=dry_run, force=force, say=_say)

    _finish(_run_or_fail(step), as_json, show_diff)
