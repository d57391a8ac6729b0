"""A program that answers at PostgreSQL's address (say, a user's, while PostgreSQL is
down) and asks for the password in clear or as MD5 gets nothing from slurm-ml's DSN
forms; a plain password DSN hands it over, which shows that the fake server would
notice.

The fake server speaks just enough of the v3 protocol: it declines TLS and GSS
encryption, reads the StartupMessage, asks for a cleartext (or MD5) password and
records every byte that comes back."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from slurm_ml.store import dsn as dsns
from slurm_ml.store.errors import AuthMethodRefused, StoreError
from slurm_ml.store.postgres import PostgresStore

PASSWORD = "impostor-bait-7f3a9c"
SSL_REQUEST, GSSENC_REQUEST = 80877103, 80877104
CLEARTEXT = struct.pack("!cii", b"R", 8, 3)  # AuthenticationCleartextPassword
MD5 = struct.pack("!cii4s", b"R", 12, 5, b"salt")  # AuthenticationMD5Password


@dataclass
class FakePostgres:
    """One listening socket; each connection is asked for ``auth`` and recorded."""

    auth: bytes
    sock: socket.socket = field(default_factory=socket.socket)
    #: per connection, what came back after the auth request (b"": nothing)
    received: list[bytes] = field(default_factory=list)
    startups: int = 0

    def __post_init__(self) -> None:
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._done = threading.Condition()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(3)
                self._one(conn)

    def _read_exact(self, conn: socket.socket, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    def _one(self, conn: socket.socket) -> None:
        got = b""
        try:
            while True:  # TLS and GSS requests first, each declined with "N"
                (length,) = struct.unpack("!i", self._read_exact(conn, 4))
                body = self._read_exact(conn, length - 4)
                (code,) = struct.unpack("!i", body[:4])
                if code in (SSL_REQUEST, GSSENC_REQUEST):
                    conn.sendall(b"N")
                    continue
                self.startups += 1
                break
            conn.sendall(self.auth)
            # the answer: one message (type, length, body), or libpq hanging up
            got = self._read_exact(conn, 5)
            got += self._read_exact(conn, struct.unpack("!i", got[1:5])[0] - 4)
        except (ConnectionError, TimeoutError, OSError):
            pass
        finally:
            with self._done:
                self.received.append(got)
                self._done.notify_all()

    def wait(self, connections: int = 1, timeout_s: float = 10) -> None:
        """Until ``connections`` connections have been answered and recorded."""
        with self._done:
            assert self._done.wait_for(lambda: len(self.received) >= connections, timeout_s)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()

    @property
    def password_messages(self) -> list[bytes]:
        """The PasswordMessages ('p') that arrived."""
        return [r for r in self.received if r[:1] == b"p"]


@pytest.fixture(params=[CLEARTEXT, MD5], ids=["cleartext", "md5"])
def fake(request: pytest.FixtureRequest) -> Iterator[FakePostgres]:
    server = FakePostgres(request.param)
    yield server
    server.close()


def _read_history(dsn: str) -> StoreError:
    """What the store raises when ``why`` reads a job's history through ``dsn``."""
    store = PostgresStore(dsn, connect_timeout_s=3)
    try:
        with pytest.raises(StoreError) as got:
            store.decisions_for_job(1)
    finally:
        store.close()
    return got.value


def test_the_tcp_dsn_slurm_ml_writes_gives_an_impostor_no_password(
        fake: FakePostgres) -> None:
    dsn = dsns.tcp_dsn("127.0.0.1", fake.port, "slurmml", "slurmml", PASSWORD)

    err = _read_history(dsn)
    fake.wait()

    assert fake.startups >= 1, "libpq never reached the fake server"
    assert fake.password_messages == []
    assert all(PASSWORD.encode() not in r for r in fake.received)
    assert isinstance(err, AuthMethodRefused), err
    assert "authentication method requirement" in str(err)
    assert f"127.0.0.1:{fake.port}/slurmml" in str(err)
    assert PASSWORD not in str(err)


def test_a_plain_password_dsn_gives_the_impostor_the_password(fake: FakePostgres) -> None:
    # the negative control: the same fake server, the DSN without require_auth
    dsn = f"postgresql://slurmml:{PASSWORD}@127.0.0.1:{fake.port}/slurmml"

    err = _read_history(dsn)
    fake.wait()

    assert len(fake.password_messages) >= 1
    if fake.auth == CLEARTEXT:
        assert PASSWORD.encode() in fake.password_messages[0]
    else:  # a salted MD5 hash: as good as the password for guessing it offline
        assert fake.password_messages[0][5:8] == b"md5"
    assert not isinstance(err, AuthMethodRefused)
    assert PASSWORD not in str(err)


def test_the_tls_form_adds_channel_binding() -> None:
    dsn = dsns.tcp_dsn("db1", 5432, "slurmml", "slurmml", PASSWORD, sslmode="verify-full")
    params = dict(p.split("=") for p in dsn.split("?", 1)[1].split("&"))
    assert params == {"require_auth": "scram-sha-256", "sslmode": "verify-full",
                      "channel_binding": "require"}
    assert dsns.dsn_warnings(dsn) == []
    prefer = dsns.tcp_dsn("db1", 5432, "slurmml", "slurmml", PASSWORD, sslmode="prefer")
    assert "channel_binding" not in prefer  # prefer may fall back to no TLS at all
