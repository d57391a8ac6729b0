"""The DSN ``slurm-ml install`` writes by default (this host's PostgreSQL over its Unix
socket, peer authentication, role slurmml) logs in as root with exactly the
pg_ident.conf and pg_hba.conf lines docs/admin.md gives, and a user the map does not
name is refused. A scratch PostgreSQL of its own (initdb like the dev cluster's, no
TCP listener): the shared one is left alone."""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_ml import proc
from slurm_ml.store.dsn import dsn_warnings, local_dsn
from slurm_ml.store.errors import StoreUnavailable
from slurm_ml.store.migrate import migrate
from slurm_ml.store.postgres import PostgresStore

pytestmark = pytest.mark.integration

#: the lines docs/admin.md (step 5) tells the admin to add
IDENT = "slurmml   root    slurmml\nslurmml   slurm   slurmml\n"
HBA = "local   slurmml   slurmml   peer map=slurmml\n"


def _bin(name: str) -> str:
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"),
                      key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    if not versions:
        pytest.fail("no PostgreSQL server binaries under /usr/lib/postgresql")
    return str(versions[-1] / name)


def _as_postgres(*argv: str) -> proc.Result:
    return proc.run(["runuser", "-u", "postgres", "--", *argv], timeout_s=120)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def peer_server() -> Iterator[tuple[Path, int]]:
    """(socket directory, port) of a scratch server set up as docs/admin.md says."""
    root = Path(tempfile.mkdtemp(prefix="slurm-ml-peer-", dir="/tmp"))
    shutil.chown(root, "postgres")
    data, sock, port = root / "data", root / "sock", _free_port()
    _as_postgres("mkdir", str(sock))
    _as_postgres(_bin("initdb"), "-D", str(data), "-A", "scram-sha-256",
                 "--auth-local=peer", "-E", "UTF8", "--locale=C.UTF-8")
    (data / "pg_ident.conf").write_text((data / "pg_ident.conf").read_text() + IDENT)
    hba = (data / "pg_hba.conf").read_text()
    first_local = hba.index("\nlocal ") + 1  # above the `local all all peer` line
    (data / "pg_hba.conf").write_text(hba[:first_local] + HBA + hba[first_local:])
    _as_postgres(_bin("pg_ctl"), "-D", str(data), "-l", str(root / "log"), "-o",
                 f"-p {port} -k {sock} -c listen_addresses=''", "-w", "-t", "60", "start")
    try:
        _as_postgres("psql", "-h", str(sock), "-p", str(port), "-d", "postgres",
                     "-c", "CREATE ROLE slurmml LOGIN",
                     "-c", "CREATE DATABASE slurmml OWNER slurmml")
        yield sock, port
    finally:
        _as_postgres(_bin("pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")
        shutil.rmtree(root)


def test_the_default_dsn_logs_in_as_root_through_the_map(
        peer_server: tuple[Path, int]) -> None:
    sock, port = peer_server
    dsn = local_dsn(socket_dir=str(sock), port=port)
    assert "password" not in dsn and dsn_warnings(dsn) == []

    migrate(dsn)
    with PostgresStore(dsn, connect_timeout_s=5) as store:
        assert store.audit_entries() == []


def test_a_user_the_map_does_not_name_is_refused(peer_server: tuple[Path, int]) -> None:
    sock, port = peer_server
    # root asking for the role postgres: peer checks the OS user against the role
    dsn = local_dsn(dbname="slurmml", user="postgres", socket_dir=str(sock), port=port)
    with PostgresStore(dsn, connect_timeout_s=5) as store, \
            pytest.raises(StoreUnavailable) as got:
        store.audit_entries()
    assert "Peer authentication failed" in str(got.value)
