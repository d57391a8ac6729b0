"""submitd's metrics: how requests were answered (failing open counted apart), how long
the replies took against the shim's wait, whether its budget state and config are
current, and an endpoint that a second submitd on the host does without."""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from slurm_ml.assets import DEFAULT_CONFIG, asset_path
from slurm_ml.config import AdmissionConfig, Config, load_config
from slurm_ml.store import FakeStore
from slurm_ml.submitd.metrics import ACTIONS, SHIM_TIMEOUT_S, SubmitdMetrics
from slurm_ml.submitd.server import MAX_LINE, PolicyServer
from slurm_ml.submitd.state import StateRefresher

CFG = load_config(DEFAULT_CONFIG)


def server(cfg: Config = CFG, store: FakeStore | None = None, **kw: object) -> PolicyServer:
    return PolicyServer(cfg, StateRefresher(store, cfg), **kw)  # type: ignore[arg-type]


def submit(s: PolicyServer, **job: object) -> dict[str, object]:
    return s.handle_line(json.dumps({"v": 1, "op": "submit", "job": {"user_name": "bob",
                                                                      **job}}))


def value(s: PolicyServer, name: str, **labels: str) -> float | None:
    return s.metrics.registry.get_sample_value(name, labels)


def requests(s: PolicyServer) -> dict[str, float | None]:
    return {a: value(s, "slurm_ml_submitd_requests_total", action=a) for a in ACTIONS}


def test_every_action_is_a_series_from_the_start() -> None:
    assert requests(server()) == dict.fromkeys(ACTIONS, 0.0)


def test_requests_by_how_they_were_answered() -> None:
    s = server()
    submit(s)  # no GPUs: passes unchanged
    submit(s, tres_per_node="gres:gpu:1")  # routed: QOS and the record set
    submit(s, tres_per_node="gres:gpu:h100:1")  # no such GPU type here
    s.handle_line("not json")
    s.handle_line(json.dumps({"v": 1, "op": "ping"}))  # control requests are not counted
    s.handle_line(json.dumps({"v": 1, "op": "stats"}))

    assert requests(s) == {"accept": 1, "rewrite": 1, "reject": 1, "bad_request": 1,
                           "internal_error": 0}
    assert value(s, "slurm_ml_submitd_reply_seconds_count") == 4
    assert value(s, "slurm_ml_submitd_slow_replies_total") == 0


def test_an_internal_error_passes_the_job_and_is_counted() -> None:
    def broken() -> datetime:
        raise RuntimeError("a policy bug")

    s = server(clock=broken)
    reply = submit(s, tres_per_node="gres:gpu:1")

    assert reply["action"] == "error"
    assert requests(s)["internal_error"] == 1


def test_an_oversized_line_is_a_bad_request() -> None:
    s = server()
    assert s.long_line()["action"] == "error"
    assert requests(s)["bad_request"] == 1
    assert s.counts["bad_request"] == 1
    assert MAX_LINE > 0


def test_a_reply_later_than_the_shim_waits_is_counted_slow() -> None:
    def slow() -> datetime:
        time.sleep(SHIM_TIMEOUT_S + 0.05)
        return datetime.now(UTC)

    s = server(clock=slow)
    submit(s, tres_per_node="gres:gpu:1")

    assert value(s, "slurm_ml_submitd_slow_replies_total") == 1
    assert value(s, "slurm_ml_submitd_reply_seconds_bucket", le="0.2") == 0
    assert value(s, "slurm_ml_submitd_reply_seconds_bucket", le="0.5") == 1


def test_the_histogram_has_a_bucket_at_the_configured_wait() -> None:
    m = SubmitdMetrics(0.35)
    m.answered("accept", 0.3, 0.35)

    assert m.registry.get_sample_value("slurm_ml_submitd_reply_seconds_bucket",
                                       {"le": "0.35"}) == 1
    assert m.registry.get_sample_value("slurm_ml_submitd_reply_seconds_bucket",
                                       {"le": "0.2"}) == 0
    assert m.registry.get_sample_value("slurm_ml_submitd_slow_replies_total") == 0


def test_the_bucket_is_the_shims_own_wait() -> None:
    """The Lua shim's TIMEOUT_MS and the config's default are the bucket the rules ask."""
    shim = asset_path("job_submit", "job_submit.lua").read_text()
    [ms] = re.findall(r"^local TIMEOUT_MS = (\d+)$", shim, re.MULTILINE)
    assert int(ms) / 1000 == SHIM_TIMEOUT_S == AdmissionConfig().socket_timeout_ms / 1000


def test_state_gauges_say_when_routing_runs_on_an_old_standing() -> None:
    store = FakeStore()
    s = server(store=store)
    assert value(s, "slurm_ml_submitd_state_loaded_timestamp_seconds") == 0  # not read yet

    assert s.refresher.refresh_once()
    loaded = value(s, "slurm_ml_submitd_state_loaded_timestamp_seconds")
    assert loaded is not None and loaded > 0
    assert value(s, "slurm_ml_submitd_state_error") == 0

    store.set_available(False)
    assert not s.refresher.refresh_once()
    assert value(s, "slurm_ml_submitd_state_error") == 1
    assert value(s, "slurm_ml_submitd_state_loaded_timestamp_seconds") == loaded


def test_a_refused_reload_shows_until_a_good_one(tmp_path: Path) -> None:
    path = tmp_path / "slurm-ml.yaml"
    good = DEFAULT_CONFIG.read_text()
    path.write_text(good)
    s = server(config_path=path)
    assert value(s, "slurm_ml_config_reload_failed") == 0

    path.write_text("cluster: [")
    assert not s.reload()
    assert value(s, "slurm_ml_config_reload_failed") == 1

    data = yaml.safe_load(good)
    path.write_text(yaml.safe_dump(data))
    assert s.reload()
    assert value(s, "slurm_ml_config_reload_failed") == 0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_the_endpoint_serves_and_a_taken_port_is_logged_not_fatal(
        caplog: pytest.LogCaptureFixture) -> None:
    port = _free_port()
    first, second = server(), server()
    try:
        assert first.metrics.serve(port, "127.0.0.1")
        submit(first, tres_per_node="gres:gpu:1")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
        assert 'slurm_ml_submitd_requests_total{action="rewrite"} 1.0' in text

        assert not second.metrics.serve(port, "127.0.0.1")
        assert "event=metrics_unavailable" in caplog.text
        assert submit(second)["action"] == "accept"  # and it answers all the same
    finally:
        first.metrics.close()
        second.metrics.close()
    # closed: the port is free again for the next submitd
    again = server()
    try:
        assert again.metrics.serve(port, "127.0.0.1")
    finally:
        again.metrics.close()


def test_port_zero_turns_the_endpoint_off() -> None:
    assert not server().metrics.serve(0, "127.0.0.1")
