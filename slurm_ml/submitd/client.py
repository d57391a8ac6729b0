"""Talk to a running submitd the way the Lua shim does (for CLI, tests and benchmarks)."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any


class SubmitdUnavailable(ConnectionError):
    """submitd did not answer: not running, wrong socket, or too slow."""


def ask(socket_path: str | Path, request: dict[str, Any], timeout_s: float = 2.0) -> dict[str, Any]:
    """Send one request line and return the reply object."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(timeout_s)
    try:
        conn.connect(str(socket_path))
        conn.sendall(json.dumps(request).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        raise SubmitdUnavailable(f"submitd at {socket_path}: {exc}") from None
    finally:
        conn.close()
    try:
        reply = json.loads(data)
    except ValueError:
        raise SubmitdUnavailable(f"submitd at {socket_path} sent no valid reply") from None
    if not isinstance(reply, dict):
        raise SubmitdUnavailable(f"submitd at {socket_path} sent {reply!r}")
    return reply
