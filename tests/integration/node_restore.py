"""Put the dev cluster's nodes back around a test that drains one, shared by the modules
that inject GPU faults (test_health, test_breaker, test_repairs, ...).

A test starts from the same state whatever ran before it (``make demo``, an earlier run
of the suite inside the breaker window, a test killed mid-way): :func:`restored` restores
the nodes and starts every breaker window afresh before the test as well as after it."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from slurm_ml import proc
from slurm_ml.config import load_config
from slurm_ml.devcluster.cluster import DevCluster
from slurm_ml.model import Node
from slurm_ml.ops.quarantine import reset_breaker
from slurm_ml.slurm.client import CliSlurm
from slurm_ml.store.audit_log import drain_events
from slurm_ml.store.postgres import PostgresStore

#: What Slurm itself writes when a prolog fails without slurm-ml having drained the node
#: (only if a test is interrupted mid-prolog).
PROLOG_ERROR = "Prolog error"


def slurm_ml_cli(cluster: DevCluster, config: Path, *args: str) -> proc.Result:
    """``slurm-ml ARGS`` as an operator on the dev cluster runs it (not checked)."""
    env = {**cluster.env_exports(), "SLURM_ML_CONFIG": str(config)}
    return proc.run([sys.executable, "-m", "slurm_ml.cli", *args], check=False, env=env,
                    timeout_s=60)


def fresh_breaker_windows(cluster: DevCluster, config: Path) -> None:
    """Reset the breaker of every node class, and of every check that drained a node in
    the window: the drains of the test that just ran no longer count for any breaker, so
    the next test (or the next run of the suite within the window) starts afresh. On the
    dev cluster one check may drain only 2 nodes per window (6 nodes, at least 2), which
    the modules' NVLink faults on gpu01 and gpu03 reach."""
    cfg = load_config(config)
    now = datetime.now(UTC)
    since = now - timedelta(minutes=cfg.policy.quarantine.breaker_window_min)
    with PostgresStore(cluster.dsn()) as store:
        entries = store.audit_entries()
        checks = {c for e in drain_events(entries, cfg, since) for c in e.checks}
        for cls in cfg.node_classes:
            reset_breaker(cls.name, cfg=cfg, store=store, now=now, actor="test/restore")
        for check in sorted(checks):
            reset_breaker(None, check=check, cfg=cfg, store=store, now=now,
                          actor="test/restore")


def node_map(cluster: DevCluster) -> dict[str, Node]:
    return {n.name: n for n in CliSlurm(cluster.runner()).list_nodes()}


def cancel_until_gone(jobs: Sequence[int], timeout_s: float = 60) -> None:
    """Cancel ``jobs`` until squeue lists none of them. One scancel is not enough: a job
    cancelled while its prolog is still running comes back when that prolog fails, since
    slurmctld then requeues it (seen on 22.05: ``REQUEST_KILL_JOB JobId=2``, then
    ``Requeuing JobId=2`` a second later, and the job ran again on the next test's node).
    So every job still listed is cancelled again, until none is left."""
    if not jobs:
        return
    ids = ",".join(map(str, jobs))
    deadline = time.monotonic() + timeout_s
    while True:
        left = proc.run(["squeue", "-h", "-j", ids, "-o", "%i"], check=False).stdout.split()
        if not left:
            return
        assert time.monotonic() < deadline, f"jobs {left} still listed after scancel"
        proc.run(["scancel", *left], check=False)
        time.sleep(1)


def restore_nodes(cluster: DevCluster, config: Path, jobs: Sequence[int], *,
                  reasons: Iterable[str] = (), timeout_s: float = 60) -> None:
    """Cancel ``jobs`` and wait until their prologs and epilogs are over (a prolog still
    running could drain a node after it was resumed), clear every injected fault, resume
    nodes drained by slurm-ml, by a failed prolog or for one of ``reasons``, reset the
    quarantine alarms and start every breaker's window afresh (``fresh_breaker_windows``),
    and wait until none of those drains is left."""
    cancel_until_gone(jobs)
    for node, info in cluster.status()["health"].items():
        if info["fault"]:
            slurm_ml_cli(cluster, config, "devcluster", "fault", node, "--clear")
    alarms = json.loads(slurm_ml_cli(cluster, config, "quarantine", "list", "--json").stdout
                        or '{"alarms": []}')
    for args in {("--check", a["check"]) if a.get("check") else (a["node_class"],)
                 for a in alarms["alarms"] or []}:  # null: unreadable
        slurm_ml_cli(cluster, config, "quarantine", "reset", *args)
    fresh_breaker_windows(cluster, config)
    ours = {PROLOG_ERROR, *reasons}
    deadline = time.monotonic() + timeout_s
    while True:
        left = [name for name, n in node_map(cluster).items()
                if n.drained and (n.reason.startswith("slurm-ml:") or n.reason in ours)]
        if not left:
            return
        assert time.monotonic() < deadline, f"nodes {left} stay drained"
        for name in left:
            proc.run(["scontrol", "update", f"nodename={name}", "state=resume"], check=False)
        time.sleep(1)


def restored(cluster: DevCluster, config: Path, *, reasons: Iterable[str] = ()
             ) -> Iterator[list[int]]:
    """The body of a fixture: ``yield from restored(...)`` yields the list the test puts
    its job ids in; :func:`restore_nodes` runs before the test and after it."""
    reasons = tuple(reasons)
    restore_nodes(cluster, config, [], reasons=reasons)
    jobs: list[int] = []
    yield jobs
    restore_nodes(cluster, config, jobs, reasons=reasons)
