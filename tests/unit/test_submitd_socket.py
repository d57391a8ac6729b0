"""submitd's socket under hostile input: garbage, oversized lines, slow and vanishing clients."""

from __future__ import annotations

import json
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config
from slurm_ml.submitd.client import ask
from slurm_ml.submitd.server import MAX_LINE, Listener, PolicyServer, SubmitdError
from slurm_ml.submitd.state import StateRefresher

CONFIG = DEFAULT_CONFIG
GPUS16 = {"v": 1, "op": "submit", "job": {"user_name": "bob", "tres_per_job": "gres:gpu:16"}}


@pytest.fixture(scope="module")
def listener(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Listener]:
    cfg = load_config(CONFIG)
    path = tmp_path_factory.mktemp("submitd") / "s.sock"
    lst = Listener(PolicyServer(cfg, StateRefresher(None, cfg)), path)
    lst.start()
    yield lst
    lst.close()


def _raw(path: Path, payload: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(5)
        conn.connect(str(path))
        try:
            conn.sendall(payload)
            conn.shutdown(socket.SHUT_WR)
        except BrokenPipeError:
            pass  # the server hung up on an oversized line; read what it said

        data = b""
        try:
            while chunk := conn.recv(65536):
                data += chunk
        except ConnectionResetError:
            pass  # it hung up with our unread bytes still queued
    return data


def test_socket_is_group_only(listener: Listener) -> None:
    assert stat.S_IMODE(os.stat(listener.path).st_mode) == 0o660


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(junk=st.binary(max_size=2000))
def test_garbage_lines_get_error_replies_and_the_server_keeps_answering(
        listener: Listener, junk: bytes) -> None:
    replies = _raw(listener.path, junk + b"\n").splitlines()
    assert len(replies) == (junk + b"\n").count(b"\n")  # one answer per line, even empty
    for reply in replies:
        assert "action" in json.loads(reply)
    assert ask(listener.path, GPUS16)["action"] == "accept"


def test_oversized_line_is_refused_without_eating_memory(listener: Listener) -> None:
    reply = _raw(listener.path, b"x" * (MAX_LINE * 4))
    if reply:  # best effort: the hang-up may overtake the error line
        assert json.loads(reply.splitlines()[0])["error"] == "request line too long"
    assert listener_counts(listener)["bad_request"] >= 1
    assert ask(listener.path, GPUS16)["action"] == "accept"


def listener_counts(listener: Listener) -> dict[str, int]:
    return ask(listener.path, {"v": 1, "op": "stats"})["stats"]["counts"]


def test_client_that_vanishes_mid_request_does_not_hurt(listener: Listener) -> None:
    for _ in range(20):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(str(listener.path))
            conn.sendall(json.dumps(GPUS16).encode()[:10])
    assert ask(listener.path, GPUS16)["action"] == "accept"


def test_many_requests_on_one_kept_connection(listener: Listener) -> None:
    payload = b"".join(json.dumps(GPUS16).encode() + b"\n" for _ in range(200))
    replies = _raw(listener.path, payload).splitlines()
    assert len(replies) == 200
    assert all(json.loads(r)["set"]["min_nodes"] == 2 for r in replies)


def test_second_server_on_a_live_socket_is_refused(listener: Listener) -> None:
    cfg = load_config(CONFIG)
    with pytest.raises(SubmitdError, match="already listening"):
        Listener(PolicyServer(cfg, StateRefresher(None, cfg)), listener.path)


def test_stale_socket_from_a_crash_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "stale.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))
    dead.close()  # file left behind, nobody listening
    cfg = load_config(CONFIG)
    lst = Listener(PolicyServer(cfg, StateRefresher(None, cfg)), path)
    lst.start()
    try:
        assert ask(path, {"v": 1, "op": "ping"})["action"] == "pong"
    finally:
        lst.close()
    assert not path.exists()


def test_a_regular_file_at_the_socket_path_is_not_clobbered(tmp_path: Path) -> None:
    path = tmp_path / "important"
    path.write_text("keep me")
    cfg = load_config(CONFIG)
    with pytest.raises(SubmitdError, match="not a socket"):
        Listener(PolicyServer(cfg, StateRefresher(None, cfg)), path)
    assert path.read_text() == "keep me"


def test_update_into_alloc_without_a_budget_is_refused_over_the_socket(
        listener: Listener) -> None:
    """The line the shim sends for ``scontrol update JobId=7 QOS=alloc`` (protocol v1)."""
    current = {"user_name": "alice", "user_id": 1000, "account": "physics", "qos": "normal",
               "partition": "gpu", "tres_per_node": "gres:gpu:1", "job_id": 7}
    reply = ask(listener.path, {"v": 1, "op": "modify", "uid": 1000,
                                "job": {"qos": "alloc", "user_id": 1000}, "current": current})
    assert reply["action"] == "reject"
    assert reply["code"] == 2050  # ESLURM_ACCOUNTING_POLICY: scontrol prints its text
    assert "account physics has no GPU-time budget" in reply["message"]
    # A shape-only update, as an older shim sends it, is answered as before.
    reply = ask(listener.path, {"v": 1, "op": "modify", "uid": 1000,
                                "job": {"tres_per_node": "gres:gpu:2"}, "current": current})
    assert reply == {"v": 1, "action": "accept", "set": {}, "message": ""}
