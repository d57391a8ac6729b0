"""``slurm-ml quarantine``: list, resume and reset slurm-ml's node drains and the
circuit breakers, per node class and per check (audited)."""

from __future__ import annotations

import os
from typing import Any

import click

from slurm_ml.cli.common import (
    EXIT_BAD_INPUT,
    SLURM_HINT,
    emit,
    fail,
    load_config_or_exit,
)
from slurm_ml.cli.hooks import hook_options, hook_settings, open_db
from slurm_ml.store.protocol import WriteOutcome


@click.group()
def quarantine() -> None:
    """slurm-ml's node drains and the circuit breakers (per node class, per check)."""


def _operator_boundaries(config_path: str | None, dsn: str | None) -> Any:
    from slurm_ml.hooks import wiring

    settings = hook_settings(config_path, dsn)
    return wiring.connect(settings, load_config_or_exit(settings.config_path), open_db=open_db)


def _operator_errors() -> tuple[type[Exception], ...]:
    from slurm_ml.ops.quarantine import QuarantineError
    from slurm_ml.slurm.errors import SlurmError
    from slurm_ml.store.errors import StoreError

    return (QuarantineError, SlurmError, StoreError)


_SPOOLED = ("the database is unreachable, so the audit entry waits in this host's spool "
            "(store.spool_dir) until a slurm-ml command here reaches the database again")


def _actor() -> str:
    import getpass

    from slurm_ml.hooks import wiring

    try:
        login = getpass.getuser()
    except (KeyError, OSError):
        login = ""
    return wiring.operator(os.environ, login)


@quarantine.command("list")
@hook_options
def quarantine_list(config_path: str | None, dsn: str | None, as_json: bool) -> None:
    """slurm-ml's drains (with their clean-check streak), open breaker alarms, and nodes
    under repair at the contract (which job each drain waits for, until when).

    Exit codes: 0 ok; 1 Slurm or the database could not be read, or no database is
    configured (what could be read is still printed, and a line on stdout, or null
    in --json with `store_error`, says what is unknown); 2 bad config.
    """
    from slurm_ml.ops import quarantine as ops_quarantine

    b = _operator_boundaries(config_path, dsn)
    try:
        view = ops_quarantine.quarantine_list(b)
    except _operator_errors() as exc:
        fail(str(exc))
    finally:
        b.close()
    lines = []
    for d in view.drains:
        streak = "?" if d.streak is None else str(d.streak)
        lines.append(f"drained  {d.node:<8} {d.node_class or '-':<10} {streak}/{d.needed} "
                     f"clean checks  {d.reason}")
    for a in view.alarms:
        what = a.node_class if a.check is None else f"check {a.check}"
        lines.append(f"ALARM    {what}: breaker tripped at {a.at.isoformat()} "
                     f"refusing {a.refused} (drained: {', '.join(a.drained) or '-'}); "
                     f"`{a.scope.reset_command}` re-arms it")
    for r in view.repairs:
        state = "drained" if r.drained else "not drained yet"
        lines.append(f"repair   {r.node:<8} {r.why} ({state}); repair at the contract:")
        lines.extend(f"           {j.text}" for j in r.jobs)
    unknown = "repairs" if view.drains_ok else "drains and repairs"
    # what the database would have told: never "none" when it could not be read
    unread = [*([] if view.store_ok else ["breaker alarms"]),
              *(["clean-check streaks"] if view.store_error and view.drains else []),
              *([] if view.repairs_ok or not view.slurm_ok else ["repairs"])]
    what = " and ".join(unread) or "part of the view"
    if not lines and view.slurm_ok and not view.store_error:
        lines.append("no slurm-ml drains, no breaker alarms, no repairs waiting")
    if not view.slurm_ok:
        lines.append(f"{unknown}: unknown (slurmctld could not be read)")
    if view.store_error:
        lines.append(f"{what}: unknown (the database could not be read: "
                     f"{view.store_error})")
    emit(view.to_json(), as_json, "\n".join(lines))
    if not view.slurm_ok:
        fail(f"slurmctld could not be read: {unknown} unknown ({'; '.join(view.errors)})"
             f"{SLURM_HINT}")
    if view.store_error:
        fail(f"the database could not be read: {what} unknown ({view.store_error})")


@quarantine.command("resume")
@click.argument("node")
@click.option("--force", is_flag=True, help="Also lift a drain slurm-ml does not own.")
@hook_options
def quarantine_resume(node: str, force: bool, config_path: str | None, dsn: str | None,
                      as_json: bool) -> None:
    """Resume NODE now (audited). Only a drain slurm-ml owns, unless --force.

    Exit codes: 0 resumed; 1 refused (not drained, drained by someone else) or failed;
    2 no such node or bad config.
    """
    from slurm_ml.hooks import wiring
    from slurm_ml.ops import quarantine as ops_quarantine
    from slurm_ml.ops.quarantine import UnknownTarget

    b = _operator_boundaries(config_path, dsn)
    try:
        result = ops_quarantine.quarantine_resume(node, b, actor=_actor(), force=force)
    except UnknownTarget as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    except _operator_errors() as exc:
        fail(str(exc))
    finally:
        b.close()
    emit(wiring.outcome_json(result), as_json,
         f"resumed {result.node} (was: {result.previous_reason})"
         + (" [forced]" if result.forced else ""))
    if result.audit == WriteOutcome.SPOOLED:
        click.echo(f"slurm-ml: warning: {_SPOOLED} (the node is resumed)", err=True)


@quarantine.command("reset")
@click.argument("node_class", metavar="[CLASS]", required=False)
@click.option("--check", "check", metavar="CHECK_ID",
              help="Reset the breaker of one check across the fleet (e.g. "
                   "nvlink.active_links, xid.79) instead of a node class's.")
@hook_options
def quarantine_reset(node_class: str | None, check: str | None, config_path: str | None,
                     dsn: str | None, as_json: bool) -> None:
    """Close the circuit-breaker alarm of node class CLASS, or of check CHECK_ID with
    --check (audited), so that slurm-ml drains there (for that check) again. Only drains
    after the reset count for that breaker from then on: a fresh window.

    Exit codes: 0 reset; 1 the reset could not be written to the database (it waits
    in this host's spool, and the breakers see it only once that is replayed), or not
    even spooled; 2 no such class, not a check id, neither or both given, or bad config.
    """
    from slurm_ml.hooks import wiring
    from slurm_ml.ops import quarantine as ops_quarantine
    from slurm_ml.ops.quarantine import UnknownTarget

    if (node_class is None) == (check is None):
        fail("name a node class (CLASS) or a check (--check CHECK_ID), one of them",
             EXIT_BAD_INPUT)
    b = _operator_boundaries(config_path, dsn)
    try:
        result = ops_quarantine.quarantine_reset(node_class, b, actor=_actor(), check=check)
    except UnknownTarget as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    except _operator_errors() as exc:
        fail(str(exc))
    finally:
        b.close()
    cleared = "unknown (database unreadable)" if result.cleared is None else result.cleared
    what = result.node_class if result.check is None else f"check {result.check}"
    if result.audit == WriteOutcome.SPOOLED:
        emit(wiring.outcome_json(result), as_json, f"reset {what}: NOT in effect yet")
        fail(f"reset {what} is not in effect yet: {_SPOOLED}; until then its breaker "
             f"stays as it was. Once the database answers, `slurm-ml quarantine list` "
             f"here replays the spool and the reset takes effect.")
    emit(wiring.outcome_json(result), as_json,
         f"reset {what}: {cleared} open alarm(s) closed; its breaker counts drains "
         f"from now on")
