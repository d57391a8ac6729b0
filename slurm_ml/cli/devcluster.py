"""``slurm-ml devcluster``: bring the local dev cluster up and down, show it, inject
faults, print its environment and run its demo. ``devcluster container ROLE`` (the
docker compose services) lives in ``slurm_ml.cli.compose``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from slurm_ml.cli.common import (
    DEFAULT_CONFIG,
    EXIT_BAD_INPUT,
    EXIT_NOT_READY,
    EXIT_OK,
    emit,
    fail,
    load_config_or_exit,
)
from slurm_ml.cli.compose import devcluster_container
from slurm_ml.envvars import env

#: the default state directory, under the current directory (resolved when a command
#: needs it: at import, a deleted current directory would break every command)
DEFAULT_STATE = Path(".devcluster")


@click.group()
def devcluster() -> None:
    """A real local Slurm cluster (slurmctld, slurmd x6, slurmdbd, MariaDB, PostgreSQL)."""


def _state_opt(f: Any) -> Any:
    f = click.option("--state-dir", type=click.Path(file_okay=False), default=None,
                     help="Where the cluster keeps all its state (default ./.devcluster, "
                          "or $SLURM_ML_DEVCLUSTER).")(f)
    return click.option("--config", "config_path", type=click.Path(dir_okay=False),
                        default=None,
                        help="slurm-ml.yaml (default the packaged conf/slurm-ml.yaml).")(f)


def _cluster(state_dir: str | None, config_path: str | None,
             ports_offset: int | None = None) -> Any:
    """The cluster in the state directory, on the ports recorded there by `up` (or the
    defaults), unless ``ports_offset`` chooses others (`up` only)."""
    from slurm_ml.devcluster.cluster import DevCluster
    from slurm_ml.devcluster.layout import FROM_STATE, Layout, Ports

    root = Path(state_dir or env("SLURM_ML_DEVCLUSTER") or DEFAULT_STATE).resolve()
    cfg = load_config_or_exit(config_path or DEFAULT_CONFIG)
    path = Path(config_path or DEFAULT_CONFIG).resolve()
    ports = FROM_STATE if ports_offset is None else Ports.shifted(ports_offset)
    return DevCluster(cfg, Layout(root, ports), say=lambda m: click.echo(m, err=True),
                      config_path=path)


def _devcluster_errors() -> tuple[type[BaseException], ...]:
    from slurm_ml.devcluster.platform import DevClusterError
    from slurm_ml.proc import CommandError
    from slurm_ml.slurm.errors import SlurmError
    from slurm_ml.slurm.render import TemplateError
    from slurm_ml.store.errors import StoreError

    return (DevClusterError, CommandError, SlurmError, TemplateError, StoreError,
            TimeoutError, OSError)


@devcluster.command("up")
@_state_opt
@click.option("--no-install", is_flag=True, help="Do not apt-get install missing packages.")
@click.option("--ports-offset", type=click.IntRange(min=0), default=None,
              help="Move every port (slurmctld 16817, slurmd, slurmdbd, the nodes' 17001+, "
                   "MariaDB 13306, PostgreSQL 15432) up by N, and number jobs from N*10000, "
                   "for a second cluster on this host (e.g. 100). Recorded in the state "
                   "directory: later commands find it there. Default: what the state "
                   "directory recorded, else 0.")
def devcluster_up(state_dir: str | None, config_path: str | None, no_install: bool,
                  ports_offset: int | None) -> None:
    """Bring the dev cluster up (idempotent; needs root).

    Exit codes: 0 up; 1 a step failed (the message names it, the logs are in the state
    directory); 2 not root, or a bad config.
    """
    from slurm_ml.devcluster.platform import NotRoot

    cluster = _cluster(state_dir, config_path, ports_offset)
    try:
        cluster.up(install_packages=not no_install)
    except NotRoot as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    except _devcluster_errors() as exc:
        fail(f"{exc}\n(logs: {cluster.layout.log})")


@devcluster.command("down")
@_state_opt
@click.option("--destroy", is_flag=True, help="Also delete the state directory.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def devcluster_down(state_dir: str | None, config_path: str | None, destroy: bool,
                    as_json: bool) -> None:
    """Stop the processes `up` started (by pid), nothing else.

    Exit codes: 0 stopped (or nothing was running); 1 a process could not be stopped;
    2 not root, or a bad config.
    """
    from slurm_ml.devcluster.platform import NotRoot

    cluster = _cluster(state_dir, config_path)
    try:
        stopped = cluster.down()
        if destroy:
            cluster.destroy()
    except NotRoot as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    except _devcluster_errors() as exc:
        fail(str(exc))
    emit({"stopped": stopped, "destroyed": destroy}, as_json,
         "stopped: " + (", ".join(stopped) if stopped else "nothing was running"))


@devcluster.command("status")
@_state_opt
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def devcluster_status(state_dir: str | None, config_path: str | None, as_json: bool) -> None:
    """Every daemon and node state.

    Exit codes: 0 everything is up; 2 a bad config; 3 something is not up.
    """
    st = _cluster(state_dir, config_path).status()
    if as_json:
        click.echo(json.dumps(st, indent=2, sort_keys=True))
    else:
        click.echo(f"state dir: {st['state_dir']}")
        for name, p in st["processes"].items():
            mark = ("running (not started by this cluster: shared)" if p.get("shared")
                    else f"running (pid {p['pid']})" if p["running"] else "STOPPED")
            click.echo(f"  {name:<16} {mark}")
        if st["slurm_error"]:
            click.echo(f"slurm: {st['slurm_error']}")
        for n in st["nodes"]:
            flags = "+".join(n["flags"])
            state = n["state"] + (f"+{flags}" if flags else "")
            reason = f"  reason: {n['reason']}" if n["reason"] else ""
            fault = st["health"].get(n["name"], {}).get("fault")
            injected = f"  fault: {','.join(fault)}" if fault else ""
            click.echo(f"  {n['name']:<8} {state:<18} {n['gres']:<22} "
                       f"{','.join(n['features'])}{reason}{injected}")
        for u in st["users"]:
            click.echo(f"  user {u['user']:<8} accounts {','.join(u['accounts'])}")
    sys.exit(EXIT_OK if st["up"] else EXIT_NOT_READY)


@devcluster.command("fault")
@click.argument("node")
@click.argument("capture", required=False)
@click.option("--clear", is_flag=True, help="Restore the node's healthy captures.")
@_state_opt
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def devcluster_fault(node: str, capture: str | None, *, clear: bool, state_dir: str | None,
                     config_path: str | None, as_json: bool) -> None:
    """Inject a fault on dev node NODE: CAPTURE (a path, or a file of the data kit under
    data/gpu, e.g. azhc_a100_gpu6_nvlink_status_all_inactive.txt) replaces the
    node's replayed capture of the same kind. --clear restores the healthy ones.

    The next prolog or periodic check on NODE sees it. Exit codes: 0 done; 2 unknown
    node, unknown or unusable capture.
    """
    from slurm_ml.devcluster import health as node_health
    from slurm_ml.devcluster.platform import DevClusterError

    if clear == (capture is not None):
        fail("give either CAPTURE or --clear", EXIT_BAD_INPUT)
    cluster = _cluster(state_dir, config_path)
    try:
        if clear:
            result = node_health.clear_fault(cluster.cfg, cluster.layout, node)
        else:
            assert capture is not None
            result = node_health.inject_fault(cluster.cfg, cluster.layout, node, capture)
    except (DevClusterError, OSError) as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    if clear:
        human = (f"{node}: healthy captures restored ({', '.join(result.files)}); "
                 f"the checks say: {result.verdict}")
    else:
        replaced = f" (replaced {', '.join(result.replaced)})" if result.replaced else ""
        human = (f"{node}: now replays {', '.join(result.files)}{replaced}\n"
                 f"the checks say: {result.verdict}")
    emit(result.as_dict(), as_json, human)


@devcluster.command("env")
@_state_opt
def devcluster_env(state_dir: str | None, config_path: str | None) -> None:
    """Print the shell exports (SLURM_CONF, SLURM_ML_DSN, ...) to use the cluster:
    eval "$(slurm-ml devcluster env)".

    Exit codes: 0 printed; 2 a bad config; 3 no dev cluster in the state directory.
    """
    cluster = _cluster(state_dir, config_path)
    if not cluster.layout.slurm_conf.exists():
        fail(f"no dev cluster in {cluster.layout.root}; run `slurm-ml devcluster up` first",
             EXIT_NOT_READY)
    for k, v in cluster.env_exports().items():
        click.echo(f"export {k}={v}")


@devcluster.command("demo")
@_state_opt
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def devcluster_demo(state_dir: str | None, config_path: str | None, as_json: bool) -> None:
    """Run a small GPU workload as the researcher users and show the result: admission's
    rewrites and rejections, the jobs, node health, the reconciler and the simulator.

    Exit codes: 0 shown; 1 a step failed (the message names it); 2 a bad config.
    """
    from dataclasses import asdict

    from slurm_ml.devcluster.demo import (
        cancel_cases,
        run_admission_cases,
        run_demo,
        run_health_demo,
        run_reconciler_demo,
        run_sim_demo,
    )
    from slurm_ml.slurm.client import CliSlurm
    from slurm_ml.slurm.parse import parse_oneliner

    cluster = _cluster(state_dir, config_path)
    slurm = CliSlurm(cluster.runner())
    say = lambda m: click.echo(m, err=True)  # noqa: E731
    try:
        cases = run_admission_cases(str(cluster.layout.jobs), cluster.slurm_env, say)
        shown = {}
        for case in cases:
            if case.job_id:
                fields = parse_oneliner(cluster.runner()(
                    ["scontrol", "-o", "show", "job", str(case.job_id)]).strip())
                shown[case.job_id] = {k: fields.get(k, "") for k in (
                    "QOS", "NumNodes", "TresPerNode", "TresPerJob", "Features",
                    "OverSubscribe", "Switches", "AdminComment")}
        cancel_cases(cases, cluster.slurm_env)
        jobs = run_demo(cluster.cfg, slurm, str(cluster.layout.jobs), say=say)
        run = cluster.runner()
        default = next(p.name for p in cluster.cfg.cluster.partitions if p.default)
        sinfo = run(["sinfo", "-N", "-p", default, "-o", "%N %T %G %f"])
        sacct = run(["sacct", "-X", "-a", "-j", ",".join(str(j.job_id) for j in jobs),
                     "-o", "JobID,JobName%28,User,Account%14,QOS,State,AllocTRES%60"])
        env = {**cluster.env_exports(), "SLURM_ML_CONFIG": str(cluster.config_path)}
        health_steps = run_health_demo(cluster.cfg, cluster.layout, env, say)
        reconciler_steps = run_reconciler_demo(env, say)
        sim_steps = run_sim_demo(env, say, str(cluster.layout.root / "sim-report"))
    except _devcluster_errors() as exc:
        fail(str(exc))
    status = cluster.status()
    if as_json:
        click.echo(json.dumps({"admission": [dict(asdict(c), job=shown.get(c.job_id or 0))
                                             for c in cases],
                               "jobs": [asdict(j) for j in jobs],
                               "health": [asdict(st) for st in health_steps],
                               "reconciler": [asdict(st) for st in reconciler_steps],
                               "simulator": [asdict(st) for st in sim_steps],
                               "status": status},
                              indent=2, default=str))
        return
    click.echo("\n== admission: plain sbatch lines, rewritten or rejected by slurm-ml ==")
    for case in cases:
        click.echo(f"\n* {case.label}\n  $ sbatch {' '.join(case.args)}   (as {case.user})")
        click.echo("  " + (f"accepted as job {case.job_id}" if case.accepted else "REJECTED"))
        for line in case.message.splitlines():
            click.echo(f"  | {line}")
        for key, value in shown.get(case.job_id or 0, {}).items():
            if value:
                click.echo(f"    {key}={value}")
    click.echo("\n== nodes (sinfo) ==\n" + sinfo)
    click.echo("== sample jobs (sacct) ==\n" + sacct)
    click.echo("== node health: a GPU fault caught by the prolog, then repaired ==")
    for n, st in enumerate(health_steps, 1):
        click.echo(f"\n{n}. {st.title}\n  $ {st.command}")
        for line in st.output.splitlines():
            click.echo(f"  | {line}")
    for heading, steps in (("reconciler: budgets, fair share and what operators see",
                            reconciler_steps),
                           ("simulator: a policy change tried on a real trace first",
                            sim_steps)):
        click.echo(f"\n== {heading} ==")
        for n, st in enumerate(steps, 1):
            click.echo(f"\n{n}. {st.title}\n  $ {st.command}")
            for line in st.output.splitlines():
                click.echo(f"  | {line}")
    click.echo("")
    daemons = ", ".join(f"{k}={'up' if v['running'] else 'DOWN'}"
                        for k, v in status["processes"].items() if not k.startswith("slurmd-"))
    click.echo(f"daemons: {daemons}")


devcluster.add_command(devcluster_container)
