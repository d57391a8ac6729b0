"""A reload that fails keeps the running config, says so in the log and in a metric
(the daemon) or its ping and stats (submitd), and never stops the service: the prober's
5,001-digit integer once killed both on SIGHUP. tests/integration/test_config_reload.py
sends the real signal to the real processes."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from daemon_helpers import EXAMPLE, daemon, world

from slurm_ml.cli import main
from slurm_ml.config import load_config
from slurm_ml.daemon import loop
from slurm_ml.daemon.loop import Daemon
from slurm_ml.store.fake import FakeStore
from slurm_ml.submitd import server as server_module
from slurm_ml.submitd.client import ask
from slurm_ml.submitd.server import Listener, PolicyServer
from slurm_ml.submitd.state import StateRefresher

TEXT = EXAMPLE.read_text(encoding="utf-8")
HUGE_INT = TEXT.replace("max_time_min: 10080", "max_time_min: " + "9" * 5001, 1)
HUGE_RANGE = TEXT.replace('nodes: "gpu[01-02]"', 'nodes: "gpu[000000001-999999999]"', 1)
NAMED = {HUGE_INT: "cluster.partitions[0].max_time_min: an integer of 5,001 digits",
         HUGE_RANGE: "node_classes[0].nodes: node set 'gpu[000000001-999999999]' names up "
                     "to 999,999,999 nodes"}
BAD = [HUGE_INT, HUGE_RANGE]
BAD_IDS = ["5001-digit-int", "billion-node-range"]


def good(interval_s: int) -> str:
    """The example config with its own cycle interval, to tell configs apart."""
    assert "cycle_interval_s: 60 " in TEXT
    return TEXT.replace("cycle_interval_s: 60 ", f"cycle_interval_s: {interval_s} ", 1)


def sample(d: Daemon, name: str, **labels: str) -> float | None:
    value: float | None = d.metrics.registry.get_sample_value(name, labels)
    return value


# --------------------------------------------------------------------------- the daemon


@pytest.mark.parametrize("bad", BAD, ids=BAD_IDS)
def test_daemon_keeps_its_config_and_sets_the_metric_when_a_reload_fails(
        tmp_path: Path, bad: str, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "slurm-ml.yaml"
    path.write_text(good(61))
    d = daemon(world(), FakeStore(), cfg=load_config(path), config_path=path,
               clock=lambda: 1000.0)
    before = d.cfg
    assert sample(d, "slurm_ml_config_reload_failed") == 0
    assert sample(d, "slurm_ml_config_last_reload_success_timestamp_seconds") == 1000.0

    path.write_text(bad)
    with caplog.at_level(logging.ERROR, logger="slurm_ml.daemon.loop"):
        assert d.reload() is False
    assert d.cfg is before
    assert sample(d, "slurm_ml_config_reload_failed") == 1
    assert sample(d, "slurm_ml_config_reloads_total", result="failed") == 1
    assert sample(d, "slurm_ml_config_reloads_total", result="ok") == 0
    line = next(r.getMessage() for r in caplog.records
                if "event=config_reload_rejected" in r.getMessage())
    assert NAMED[bad] in line
    assert d.cycle().outcome == "acted"  # still cycling, on the old config

    d.clock = lambda: 2000.0
    path.write_text(good(62))
    assert d.reload() is True
    assert d.cfg.policy.fairshare.cycle_interval_s == 62
    assert sample(d, "slurm_ml_config_reload_failed") == 0
    assert sample(d, "slurm_ml_config_reloads_total", result="ok") == 1
    assert sample(d, "slurm_ml_config_last_reload_success_timestamp_seconds") == 2000.0


def test_daemon_survives_a_loader_that_raises_anything(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "slurm-ml.yaml"
    path.write_text(TEXT)
    d = daemon(world(), FakeStore(), config_path=path)
    before = d.cfg

    def broken(_path: object) -> None:
        raise RuntimeError("a loader bug")

    monkeypatch.setattr(loop, "load_config", broken)  # fault injection: no file does this
    with caplog.at_level(logging.ERROR, logger="slurm_ml.daemon.loop"):
        assert d.reload() is False
    assert d.cfg is before
    assert sample(d, "slurm_ml_config_reload_failed") == 1
    record = next(r for r in caplog.records if "event=config_reload_failed" in r.getMessage())
    assert record.exc_info is not None  # logged with its traceback
    assert "RuntimeError: a loader bug" in record.getMessage()


def test_daemon_reloads_on_sighup_while_it_sleeps_between_cycles(tmp_path: Path) -> None:
    """The reload comes within a poll, not at the next cycle (60 s here), so an operator
    who sends SIGHUP sees the metric straight away."""
    path = tmp_path / "slurm-ml.yaml"
    path.write_text(TEXT)
    d = daemon(world(), FakeStore(), config_path=path, clock=time.time)
    runner = threading.Thread(target=d.run, daemon=True)
    runner.start()
    try:
        deadline = time.monotonic() + 10
        while d.last_cycle_at is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        path.write_text(HUGE_INT)
        d.reload_requested = True  # what the SIGHUP handler does
        while sample(d, "slurm_ml_config_reload_failed") != 1:
            assert time.monotonic() < deadline, "no reload before the next cycle"
            time.sleep(0.05)
        assert runner.is_alive()
        assert sample(d, "slurm_ml_daemon_cycles_total", outcome="acted") == 1  # no cycle ran
    finally:
        d.stop.set()
        runner.join(10)
    assert not runner.is_alive()


# --------------------------------------------------------------------------- submitd


def policy_server(path: Path) -> PolicyServer:
    cfg = load_config(path)
    return PolicyServer(cfg, StateRefresher(None, cfg), config_path=path)


@pytest.mark.parametrize("bad", BAD, ids=BAD_IDS)
def test_submitd_keeps_its_config_and_says_so_when_a_reload_fails(
        tmp_path: Path, bad: str, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "slurm-ml.yaml"
    path.write_text(TEXT)
    server = policy_server(path)
    before = server.policy
    assert server.handle_line('{"op": "ping"}')["config_reload_failed"] is False

    path.write_text(bad)
    with caplog.at_level(logging.ERROR, logger="slurm_ml.submitd.server"):
        assert server.reload() is False
    assert server.policy is before
    assert server.handle_line('{"op": "ping"}') == {"v": 1, "action": "pong",
                                                    "config_reload_failed": True}
    stats = server.handle_line('{"op": "stats"}')["stats"]
    assert stats["config_reload_failed"] is True
    assert stats["config_reload_errors"][0].startswith(NAMED[bad])
    assert stats["counts"]["reload_refused"] == 1
    line = next(r.getMessage() for r in caplog.records
                if "event=config_reload_refused" in r.getMessage())
    assert NAMED[bad] in line

    path.write_text(TEXT)
    assert server.reload() is True
    assert server.handle_line('{"op": "ping"}')["config_reload_failed"] is False
    stats = server.handle_line('{"op": "stats"}')["stats"]
    assert stats["config_reload_failed"] is False and stats["config_reload_errors"] is None


def test_submitd_survives_a_loader_that_raises_anything(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "slurm-ml.yaml"
    path.write_text(TEXT)
    server = policy_server(path)
    before = server.policy

    def broken(_path: object) -> None:
        raise MemoryError

    monkeypatch.setattr(server_module, "load_config", broken)  # fault injection
    assert server.reload() is False
    assert server.policy is before
    errors = server.stats()["config_reload_errors"]
    assert errors == [f"{path}: could not be read: MemoryError: "]


def test_submitd_ctl_ping_warns_while_the_last_reload_failed(tmp_path: Path) -> None:
    path = tmp_path / "slurm-ml.yaml"
    path.write_text(TEXT)
    server = policy_server(path)
    sock = tmp_path / "s.sock"
    listener = Listener(server, sock)
    listener.start()
    try:
        path.write_text(HUGE_INT)
        server.reload()
        res = CliRunner().invoke(main, ["submitd-ctl", "ping", "--socket", str(sock)])
        assert res.exit_code == 0
        assert res.stdout == "pong\n"
        assert "submitd's last config reload failed" in res.stderr
        assert ask(sock, {"v": 1, "op": "ping"})["config_reload_failed"] is True
    finally:
        listener.close()
