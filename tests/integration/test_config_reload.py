"""SIGHUP with a hostile config in place, on the real processes against the dev cluster:
submitd and the daemon keep running on the config they had, keep answering, say so (the
daemon's ``slurm_ml_config_reload_failed`` metric, submitd's ping and stats) and log the
named error; a good config and another SIGHUP clear it.

The prober's two files: a 5,001-digit integer (a ValueError out of the loader killed both
on SIGHUP) and ``gpu[000000001-999999999]`` (expanded until MemoryError). Each process is
this test's own: submitd on a socket of its own (the dev cluster's submitd, which
slurmctld asks, is left alone), the daemon a dry run (it changes nothing in Slurm) on a
fresh database with a lock key of its own.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from woken_daemon import stop

from slurm_ml import proc
from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.submitd.client import SubmitdUnavailable, ask

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
SLURM_ML = str(Path(sys.executable).parent / "slurm-ml")
SENTINEL = 987_654_321  # a max_time_min written as itself, then replaced in the text


def config_text(metrics_port: int, spool: Path, *, nodes: str | None = None,
                max_time_min: str | None = None) -> str:
    """The dev cluster's config for a process of this test: metrics on ``metrics_port``,
    cycles every 2 s, a lock key and spool of its own, no wake socket; optionally with
    the first node class's ``nodes`` or the first partition's ``max_time_min`` (as
    written in the file) replaced."""
    data: dict[str, Any] = yaml.safe_load(DEFAULT_CONFIG.read_text(encoding="utf-8"))
    data["daemon"].update(metrics_port=metrics_port, wake_socket="",
                          lock_key=int(uuid.uuid4().int % (2**62)) + 1)
    data["policy"]["fairshare"]["cycle_interval_s"] = 2
    data["store"]["spool_dir"] = str(spool)
    if nodes is not None:
        data["node_classes"][0]["nodes"] = nodes
    if max_time_min is not None:
        data["cluster"]["partitions"][0]["max_time_min"] = SENTINEL
    text = yaml.safe_dump(data, sort_keys=False)
    if max_time_min is not None:
        assert text.count(str(SENTINEL)) == 1
        text = text.replace(str(SENTINEL), max_time_min)
    return text


#: (id, the file's edit, the error the log and the process's reply must name)
BREAKAGES: list[tuple[str, dict[str, str], str]] = [
    ("5001-digit-int", {"max_time_min": "9" * 5001},
     "cluster.partitions[0].max_time_min: an integer of 5,001 digits is too large to read"),
    ("billion-node-range", {"nodes": "gpu[000000001-999999999]"},
     "node_classes[0].nodes: node set 'gpu[000000001-999999999]' names up to 999,999,999 "
     "nodes, more than the 100,000 a node set may name"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def wait_for(what: str, ok: Callable[[], bool], log: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not ok():
        assert time.monotonic() < deadline, f"{what}; log:\n{log.read_text()[-3000:]}"
        time.sleep(0.2)


def alive(pid: int) -> bool:
    done, _status = os.waitpid(pid, os.WNOHANG)
    return done == 0


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A short directory (a Unix socket's path stops at 108 bytes)."""
    d = Path(tempfile.mkdtemp(prefix="slurm-ml-reload-", dir="/tmp"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


# --------------------------------------------------------------------------- submitd


def submitd_ping(sock: Path) -> dict[str, Any] | None:
    try:
        return ask(sock, {"v": 1, "op": "ping"}, 2.0)
    except SubmitdUnavailable:
        return None


def submitd_refused(sock: Path) -> int | None:
    """submitd's count of refused reloads; None while it does not answer."""
    try:
        stats = ask(sock, {"v": 1, "op": "stats"}, 2.0)["stats"]
    except SubmitdUnavailable:
        return None
    count: int = stats["counts"].get("reload_refused", 0)
    return count


def test_submitd_survives_sighup_with_a_hostile_config(workdir: Path, slurm_conf: str) -> None:
    cfg, sock, log = workdir / "slurm-ml.yaml", workdir / "submitd.sock", workdir / "submitd.log"
    good = config_text(0, workdir / "spool")
    cfg.write_text(good)
    # No database (SLURM_ML_DSN empty): this submitd answers pings and reloads, nothing
    # reads its budgets.
    pid = proc.spawn_daemon([SLURM_ML, "-v", "submitd", "--socket", str(sock),
                             "--config", str(cfg)], log_path=str(log),
                            env={"SLURM_ML_DSN": ""})
    try:
        wait_for("submitd did not answer", lambda: submitd_ping(sock) is not None, log)
        for refused, (name, edit, error) in enumerate(BREAKAGES, start=1):
            refused_before = log.read_text().count("event=config_reload_refused")
            cfg.write_text(config_text(0, workdir / "spool", **edit))
            os.kill(pid, signal.SIGHUP)
            wait_for(f"{name}: no refused reload", lambda n=refused: (
                submitd_refused(sock) == n), log)
            assert alive(pid), f"{name}: submitd died on SIGHUP"
            assert (submitd_ping(sock) or {}).get("config_reload_failed") is True
            assert log.read_text().count("event=config_reload_refused") == refused_before + 1
            line = log.read_text().split("event=config_reload_refused")[-1].split("\n")[0]
            assert error in line, line
            stats = ask(sock, {"v": 1, "op": "stats"})["stats"]
            assert stats["config_reload_failed"] is True
            assert stats["config_reload_errors"][0].startswith(error)
            ctl = proc.run([SLURM_ML, "submitd-ctl", "ping", "--socket", str(sock)],
                           check=False, timeout_s=30)
            assert (ctl.returncode, ctl.stdout) == (0, "pong\n"), ctl.stderr
            assert "submitd's last config reload failed" in ctl.stderr

        cfg.write_text(good)
        os.kill(pid, signal.SIGHUP)
        wait_for("the good config did not clear the failure", lambda: (
            (submitd_ping(sock) or {}).get("config_reload_failed") is False), log)
        stats = ask(sock, {"v": 1, "op": "stats"})["stats"]
        assert stats["config_reload_errors"] is None
        assert stats["counts"]["reloads"] == 1
        assert stats["counts"]["reload_refused"] == len(BREAKAGES)
        assert "Traceback" not in log.read_text()
    finally:
        status = stop(pid)
    assert status == 0, log.read_text()[-3000:]


# --------------------------------------------------------------------------- the daemon


def metrics(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text: str = r.read().decode()
            return text
    except OSError:
        return ""


def gauge(port: int, line: str) -> bool:
    return line in metrics(port).splitlines()


def test_daemon_survives_sighup_with_a_hostile_config(workdir: Path, slurm_conf: str,
                                                      pg_dsn: str) -> None:
    port = free_port()
    cfg, log = workdir / "slurm-ml.yaml", workdir / "daemon.log"
    good = config_text(port, workdir / "spool")
    cfg.write_text(good)
    pid = proc.spawn_daemon([SLURM_ML, "-v", "daemon", "--dry-run", "--config", str(cfg)],
                            log_path=str(log), env={"SLURM_ML_DSN": pg_dsn})
    try:
        wait_for("the daemon did not cycle", lambda: "event=cycle_end" in log.read_text()
                 and gauge(port, "slurm_ml_config_reload_failed 0.0"), log, timeout_s=120)
        for failed, (name, edit, error) in enumerate(BREAKAGES, start=1):
            text = log.read_text()
            rejected_before = text.count("event=config_reload_rejected")
            cfg.write_text(config_text(port, workdir / "spool", **edit))
            os.kill(pid, signal.SIGHUP)
            wait_for(f"{name}: no failed reload", lambda n=failed: gauge(
                port, f'slurm_ml_config_reloads_total{{result="failed"}} {n}.0'), log)
            assert gauge(port, "slurm_ml_config_reload_failed 1.0")
            assert alive(pid), f"{name}: the daemon died on SIGHUP"
            text = log.read_text()
            assert text.count("event=config_reload_rejected") == rejected_before + 1
            line = text.split("event=config_reload_rejected")[-1].split("\n")[0]
            assert error in line, line
            # Still cycling (every 2 s) on the old config.
            cycles = text.count("event=cycle_end")
            wait_for(f"{name}: no cycle after the failed reload",
                     lambda n=cycles: log.read_text().count("event=cycle_end") > n + 1, log)

        cfg.write_text(good)
        os.kill(pid, signal.SIGHUP)
        wait_for("the good config did not clear the metric", lambda: gauge(
            port, "slurm_ml_config_reload_failed 0.0"), log)
        assert 'slurm_ml_config_reloads_total{result="ok"} 1.0' in metrics(port)
        assert "event=config_reloaded" in log.read_text()
        assert "Traceback" not in log.read_text()
    finally:
        status = stop(pid)
    assert status == 0, log.read_text()[-3000:]
