"""Where the dev cluster keeps its state, and which ports it uses.

Everything lives under one directory so that ``rm -rf`` of it after
``devcluster down`` leaves the machine as it was; the ports are not Slurm's,
MariaDB's or PostgreSQL's defaults so that a system install never clashes.

Two dev clusters can run on one host (``make test`` runs the integration suite in two
shards, one per cluster): each has its own state directory and a port offset that
``devcluster up --ports-offset N`` records in the state directory's ``state.json``, so
that every later ``Layout(root)`` (``down``, ``env``, ``status``, the tests) finds the
same ports without being told again.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Job ids per step of the port offset: the cluster at offset N numbers its jobs from
#: N * JOB_IDS_PER_OFFSET (offset 0: Slurm's default, 1), so that two clusters on one host
#: never hand out the same job id (the hooks find a job's processes by SLURM_JOB_ID, and
#: logs and test failures name job ids).
JOB_IDS_PER_OFFSET = 10_000
#: The state directory's record of what ``up`` chose (:attr:`Layout.state_file`).
STATE_FILE = "state.json"


@dataclass(frozen=True, slots=True)
class Ports:
    slurmctld: int = 16817
    slurmd: int = 16818
    slurmdbd: int = 16819
    node_base: int = 17001
    mysql: int = 13306
    postgres: int = 15432

    @classmethod
    def shifted(cls, offset: int) -> Ports:
        """The default ports, each moved up by ``offset``."""
        if offset < 0:
            raise ValueError(f"port offset {offset}: must be 0 or more")
        base = cls()
        return cls(**{f.name: getattr(base, f.name) + offset for f in dataclasses.fields(cls)})

    @property
    def offset(self) -> int:
        """How far these ports are from the defaults (by slurmctld's)."""
        return self.slurmctld - Ports().slurmctld


def first_job_id(ports: Ports) -> int:
    """FirstJobId for the cluster on ``ports`` (see JOB_IDS_PER_OFFSET); 0 means Slurm's
    default (no line in slurm.conf)."""
    return ports.offset * JOB_IDS_PER_OFFSET if ports.offset > 0 else 0


def recorded_ports(root: Path) -> Ports | None:
    """The ports ``devcluster up`` recorded in ``root/state.json``; None if none were (a
    state directory from before the record existed, or none at all: the defaults)."""
    try:
        data: Any = json.loads((root / STATE_FILE).read_text())
        ports = Ports(**data["ports"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not all(type(v) is int and 0 < v < 65536 for v in dataclasses.astuple(ports)):
        return None
    return ports


def record_ports(root: Path, ports: Ports) -> None:
    """Write ``ports`` into ``root/state.json`` (other keys kept)."""
    path = root / STATE_FILE
    try:
        data: Any = json.loads(path.read_text())
        if not isinstance(data, dict):
            data = {}
    except (OSError, ValueError):
        data = {}
    data["ports"] = dataclasses.asdict(ports)
    data["ports_offset"] = ports.offset
    data["first_job_id"] = first_job_id(ports)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


#: ``Layout(root)`` without ports: those recorded in the state directory, else the defaults.
FROM_STATE = Ports(-1, -1, -1, -1, -1, -1)


@dataclass(frozen=True, slots=True)
class Layout:
    root: Path
    ports: Ports = FROM_STATE

    def __post_init__(self) -> None:
        if self.ports is FROM_STATE:
            object.__setattr__(self, "ports", recorded_ports(self.root) or Ports())

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
        return self.root / STATE_FILE

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
