"""Where the dev cluster keeps its state, and which ports it uses.

Everything lives under one directory so that ``rm -rf`` of it after
``devcluster down`` leaves the machine as it was; the ports are not Slurm's,
MariaDB's or PostgreSQL's defaults so that a system install never clashes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Ports:
    slurmctld: int = 16817
    slurmd: int = 16818
    slurmdbd: int = 16819
    node_base: int = 17001
    mysql: int = 13306
    postgres: int = 15432


@dataclass(frozen=True, slots=True)
class Layout:
    root: Path
    ports: Ports = Ports()

    @property
    def etc(self) -> Path:
        return self.root / "etc"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def log(self) -> Path:
        return self.root / "log"

    @property
    def dev(self) -> Path:
        return self.root / "dev"

    @property
    def munge(self) -> Path:
        return self.root / "munge"

    @property
    def mysql(self) -> Path:
        return self.root / "mysql"

    @property
    def pg(self) -> Path:
        return self.root / "pg"

    @property
    def jobs(self) -> Path:
        """World-writable scratch directory where researcher jobs write output."""
        return self.root / "jobs"

    @property
    def spool(self) -> Path:
        return self.root / "spool"

    @property
    def health(self) -> Path:
        """Replayed GPU captures, one directory per node (``devcluster fault`` edits them)."""
        return self.root / "health"

    @property
    def hook_state(self) -> Path:
        """Node-local state of the Prolog/Epilog (job-start GPU counters)."""
        return self.root / "hookstate"

    @property
    def shm(self) -> Path:
        """Per-node stand-ins for /dev/shm: the dev nodes share this host's real one."""
        return self.root / "shm"

    @property
    def hook_env_file(self) -> Path:
        """Settings the Prolog/Epilog wrappers source (they find it next to slurm.conf)."""
        return self.etc / "slurm-ml.env"

    @property
    def slurm_conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        """Slurm 22.05's sacctmgr ignores AuthInfo=socket=, so munged uses the default path."""
        return Path("/run/munge/munge.socket.2")

    @property
    def mysql_socket(self) -> Path:
        return self.run / "mysql.sock"

    @property
    def pg_socket_dir(self) -> Path:
        """PostgreSQL's socket and lock file: a directory of its own, owned by postgres, so
        the run directory (submitd's socket) stays writable by root alone."""
        return self.run / "pg"

    @property
    def env_file(self) -> Path:
        return self.root / "env.sh"

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    @property
    def submitd_socket(self) -> Path:
        return self.run / "submitd.sock"

    @property
    def submitd_key(self) -> Path:
        """submitd's reply key, which the shim checks: beside slurm.conf (root's, and on a
        volume slurmctld's and submitd's containers share in the compose cluster), apart
        from the socket's directory."""
        return self.etc / "slurm-ml-submitd.key"

    def pidfile(self, name: str) -> Path:
        return self.run / f"{name}.pid"
