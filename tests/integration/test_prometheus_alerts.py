"""The shipped alert rules in a real Prometheus, scraping a real ``slurm-ml daemon`` and
submitd on the dev cluster and a real node_exporter reading a textfile directory: the
targets are up, the daemon's series are there, a node drained with a reason slurm-ml owns
raises SlurmMlNodeDrainedBySlurmMl within seconds and its resume clears it, and a node
whose health check stopped raises SlurmMlNodeHealthCheckStale from the textfile.

Prometheus loads conf/prometheus/slurm-ml.rules.yml itself, unchanged; scrapes
and rule evaluations come every second. The drain alert has no ``for``, so nothing in the
rules is shortened for the test. gpu06's textfile is written by a real ``slurm-ml health
periodic`` of the dev cluster's node; gpu05's, an hour old, by the same renderer and
writer. Every process the test starts is stopped at the end, whatever happened.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from node_restore import node_map, restored, slurm_ml_cli
from slurm_jobs import daemon_config
from woken_daemon import stop

from slurm_ml import proc
from slurm_ml.assets import DEFAULT_CONFIG, asset_path
from slurm_ml.devcluster.cluster import DevCluster
from slurm_ml.health.textfile import NodeHealth, render
from slurm_ml.health.textfile_write import write_textfile
from slurm_ml.store.migrate import migrate

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
SLURM_ML = str(Path(sys.executable).parent / "slurm-ml")
PROMETHEUS = Path("/usr/bin/prometheus")
NODE_EXPORTER = Path("/usr/bin/prometheus-node-exporter")
RULES = asset_path("conf", "prometheus", "slurm-ml.rules.yml")
#: A drain reason slurm-ml owns that no repair or maintenance rule matches.
REASON = "slurm-ml: test.prometheus gpu0 (alert test)"
CYCLE_S = 2


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 90,
             logs: tuple[Path, ...] = ()) -> Any:
    """``check()`` until it returns something true; fail naming ``what`` (and the logs'
    tails) at the deadline."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            last = check()
            if last:
                return last
        time.sleep(0.5)
    tails = "\n".join(f"--- {p}\n{p.read_text()[-2000:]}" for p in logs if p.exists())
    pytest.fail(f"{what}: not within {timeout_s} s (last: {last!r})\n{tails}")


@dataclass
class Stack:
    """The running processes' addresses and logs."""

    prometheus: str  # http://127.0.0.1:PORT
    textfiles: Path
    logs: tuple[Path, ...]

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.prometheus}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api("query", query=expr)["result"]
        return result

    def firing(self, alertname: str) -> list[dict[str, str]]:
        return [a["labels"] for a in self.api("alerts")["alerts"]
                if a["labels"]["alertname"] == alertname and a["state"] == "firing"]


@pytest.fixture(scope="module")
def dsn(pg_module_dsn: str) -> str:
    migrate(pg_module_dsn)
    return pg_module_dsn


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, dsn: str, slurm_conf: str,
          cluster: DevCluster) -> Iterator[Stack]:
    """The daemon (a cycle every 2 s), submitd, node_exporter and Prometheus, on free
    ports, stopped at the end whatever happened."""
    if not (PROMETHEUS.exists() and NODE_EXPORTER.exists()):
        pytest.fail("Prometheus or node_exporter is missing: `slurm-ml devcluster up` "
                    "installs the Debian packages prometheus and prometheus-node-exporter")
    base = tmp_path_factory.mktemp("prometheus")
    ports = {name: free_port() for name in ("daemon", "submitd", "node", "prometheus")}
    cfg = daemon_config(base / "slurm-ml.yaml", fairshare={"cycle_interval_s": CYCLE_S},
                        reclaim={"fix_runaway": False},
                        contracts={"preempt_cap_fraction": 0.01})  # 40 GPUs: no requeues
    data = yaml.safe_load(cfg.read_text())
    data["daemon"].update(metrics_port=ports["daemon"], metrics_addr="127.0.0.1")
    data["submitd"] = {"metrics_port": ports["submitd"], "metrics_addr": "127.0.0.1"}
    textfiles = base / "textfile"
    textfiles.mkdir()
    data["health"] = {"textfile_dir": str(textfiles)}
    cfg.write_text(yaml.safe_dump(data))
    # gpu05's last check ran an hour ago (the real renderer and writer, an old verdict);
    # gpu06's file is written by a real periodic health check of the dev cluster's node
    stale = NodeHealth("gpu05", datetime.now(UTC) - timedelta(hours=1), "pass", True, 1.0)
    write_textfile(textfiles, "gpu05", render(stale))
    res = slurm_ml_cli(cluster, cfg, "health", "periodic", "--node", "gpu06", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    assert (textfiles / "slurm-ml-gpu06.prom").exists(), res.stdout
    (base / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{ports[key]}"]}]}
            for job, key in (("slurm-ml-daemon", "daemon"), ("slurm-ml-submitd", "submitd"),
                             ("node", "node"))]}))
    logs = {name: base / f"{name}.log" for name in ports}
    sock_dir = Path(tempfile.mkdtemp(prefix="slurm-ml-submitd-", dir="/tmp"))
    env = {"SLURM_ML_DSN": dsn, "SLURM_CONF": slurm_conf}
    argvs = {
        "daemon": [SLURM_ML, "daemon", "--config", str(cfg)],
        "submitd": [SLURM_ML, "submitd", "--config", str(cfg), "--socket",
                    str(sock_dir / "submitd.sock")],
        "node": [str(NODE_EXPORTER), f"--web.listen-address=127.0.0.1:{ports['node']}",
                 "--collector.disable-defaults", "--collector.textfile",
                 f"--collector.textfile.directory={textfiles}"],
        "prometheus": [str(PROMETHEUS), f"--config.file={base / 'prometheus.yml'}",
                       f"--storage.tsdb.path={base / 'tsdb'}",
                       f"--web.listen-address=127.0.0.1:{ports['prometheus']}"],
    }
    pids: list[int] = []
    try:
        for name, argv in argvs.items():
            pids.append(proc.spawn_daemon(argv, log_path=str(logs[name]), env=env))
        yield Stack(f"http://127.0.0.1:{ports['prometheus']}", textfiles,
                    tuple(logs.values()))
    finally:
        for pid in reversed(pids):
            stop(pid)
        with contextlib.suppress(OSError):
            (sock_dir / "submitd.sock").unlink()
        with contextlib.suppress(OSError):
            sock_dir.rmdir()


@pytest.fixture
def cluster_restored(cluster: DevCluster) -> Iterator[list[int]]:
    """The dev cluster's nodes as they were, before the test and after it (a drain the
    test leaves is lifted whatever happened)."""
    yield from restored(cluster, DEFAULT_CONFIG)


def test_targets_are_up_and_the_daemons_series_are_there(stack: Stack) -> None:
    def all_up() -> dict[str, str]:
        targets = stack.api("targets")["activeTargets"]
        health = {t["labels"]["job"]: t["health"] for t in targets}
        return health if set(health.values()) == {"up"} and len(health) == 3 else {}

    wait_for("every target up", all_up, logs=stack.logs)
    leader = wait_for("the daemon leading", lambda: stack.query(
        'slurm_ml_daemon_leader{job="slurm-ml-daemon"} == 1'), logs=stack.logs)
    assert len(leader) == 1
    drains = wait_for("owned drains per node", lambda: stack.query(
        "slurm_ml_node_owned_drain"), logs=stack.logs)
    assert {s["metric"]["node"] for s in drains} >= {f"gpu0{i}" for i in range(1, 7)}
    breakers = stack.query("slurm_ml_breaker_open")
    assert {s["metric"]["node_class"] for s in breakers} == {"a100-80g", "a100-40g",
                                                              "v100-pcie"}
    assert stack.query("slurm_ml_allocation_starved_wait_seconds")
    assert stack.query('slurm_ml_submitd_requests_total{action="internal_error"}')
    textfile = stack.query('slurm_ml_node_health_pass{job="node"}')
    assert {s["metric"]["node"] for s in textfile} == {"gpu05", "gpu06"}


def test_a_node_whose_health_check_stopped_alerts_from_the_textfile(stack: Stack) -> None:
    firing = wait_for("SlurmMlNodeHealthCheckStale", lambda: stack.firing(
        "SlurmMlNodeHealthCheckStale"), logs=stack.logs)
    assert [a["node"] for a in firing] == ["gpu05"]
    assert firing[0]["severity"] == "warning"


def test_a_drain_slurm_ml_owns_alerts_at_once_and_its_resume_clears_it(
        stack: Stack, cluster: DevCluster, cluster_restored: list[int]) -> None:
    nodes = node_map(cluster)
    node = next(name for name in ("gpu06", "gpu05", "gpu04", "gpu03")
                if not nodes[name].drained)
    assert not [a for a in stack.firing("SlurmMlNodeDrainedBySlurmMl") if a["node"] == node]

    proc.run(["scontrol", "update", f"nodename={node}", "state=drain", f"reason={REASON}"])
    drained_at = time.monotonic()
    firing = wait_for(f"SlurmMlNodeDrainedBySlurmMl for {node}", lambda: [
        a for a in stack.firing("SlurmMlNodeDrainedBySlurmMl") if a["node"] == node],
        timeout_s=60, logs=stack.logs)
    # a daemon cycle, a scrape and an evaluation: seconds, not minutes
    assert time.monotonic() - drained_at < 30
    assert firing[0]["severity"] == "warning"
    alert = next(a for a in stack.api("alerts")["alerts"]
                 if a["labels"]["alertname"] == "SlurmMlNodeDrainedBySlurmMl"
                 and a["labels"]["node"] == node)
    assert f"sinfo -R -n {node}" in alert["annotations"]["description"]
    assert alert["annotations"]["runbook"] == "docs/operator.md#slurmmlnodedrainedbyslurmml"

    proc.run(["scontrol", "update", f"nodename={node}", "state=resume"])
    wait_for(f"SlurmMlNodeDrainedBySlurmMl for {node} resolved", lambda: not [
        a for a in stack.firing("SlurmMlNodeDrainedBySlurmMl") if a["node"] == node],
        timeout_s=60, logs=stack.logs)

