"""The dev cluster as Docker containers: one *role* per docker-compose service.

``docker-compose.yml`` runs every service from the one image ``devcluster/Dockerfile``
builds, whose entry point is ``slurm-ml devcluster container ROLE``. A role prepares
what its daemon needs with the same code the one-host dev cluster (:mod:`.cluster`)
and ``slurm-ml install`` use, then *replaces itself* with that daemon in the
foreground (``os.execvpe``), so Docker sees the daemon's exit and signals it directly.

Roles, in the order compose starts them:

=========  =====================================================================
init       one-shot: secrets, munge key, slurm.conf/gres.conf/topology.conf/
           slurmdbd.conf rendered by :mod:`slurm_ml.slurm.render`, then
           ``slurm-ml install --no-accounts`` (job_submit.lua, hook wrappers,
           slurm-ml.env with the dev cluster's node-health settings, the
           ``slurm-ml.conf`` include) into the shared /etc/slurm
mariadb    MariaDB for slurmdbd (datadir on a volume)
postgres   PostgreSQL for slurm-ml's store (role and database as the dev cluster's)
dbd        munged + slurmdbd
ctld       munged, researcher users, the QOS/account tree (``slurm-ml install``),
           slurmctld with the job_submit.lua shim asking submitd over the socket
           on the shared /run/slurm-ml volume
node       munged, users, fake GPU character devices, replayed GPU captures,
           ``slurmd -N NODE``
submitd    schema migration, then ``slurm-ml submitd`` on /run/slurm-ml/submitd.sock
daemon     munged, then the reconciler ``slurm-ml daemon``
=========  =====================================================================

``check(role)`` answers a compose healthcheck: does this container's service answer?

Nothing here is a second copy of the dev cluster: the per-step code is the dev
cluster's own (:class:`DevCluster` steps run on a :class:`ComposeLayout`), the files
are render.py's and the Slurm-side installation is ``slurm-ml install``'s. Only what
differs between one host and several containers lives here: host names, ports, the
shared paths, and starting each daemon in the foreground.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import socket
import sys
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from slurm_ml import proc
from slurm_ml.config import Config
from slurm_ml.deploy import install as deploy
from slurm_ml.devcluster import daemons, platform
from slurm_ml.devcluster import health as node_health
from slurm_ml.devcluster.cluster import (
    MYSQL_DB,
    MYSQL_USER,
    PG_DB,
    PG_USER,
    DevCluster,
)
from slurm_ml.devcluster.layout import Layout, Ports
from slurm_ml.slurm import render
from slurm_ml.slurm.client import CliSlurm
from slurm_ml.submitd.client import ask

log = logging.getLogger(__name__)

ROLES = ("init", "mariadb", "postgres", "dbd", "ctld", "node", "submitd", "daemon")

#: Where slurm-ml.yaml is mounted in every container (``$SLURM_ML_CONFIG``).
CONFIG_PATH = Path("/etc/slurm-ml/slurm-ml.yaml")
#: Per-container state (a volume where it must survive: ctld state, databases).
STATE_DIR = Path("/var/lib/slurm-ml")
#: The shared volume with slurm.conf & co., the munge key and the secrets.
SLURM_ETC = Path("/etc/slurm")
#: The shared volume slurmctld's job_submit.lua and submitd meet in.
SHARED_RUN = Path("/run/slurm-ml")
#: Where the data kit's GPU captures may be mounted (read-only) for the nodes to replay.
GPU_DATA = Path("/srv/slurm-ml/gpu-data")
#: Standard ports: each daemon has its own container, so nothing clashes.
PORTS = Ports(slurmctld=6817, slurmd=6818, slurmdbd=6819, node_base=0, mysql=3306,
              postgres=5432)


@dataclass(frozen=True, slots=True)
class Hosts:
    """The compose services' host names (``hostname:`` in docker-compose.yml).

    slurmctld and slurmdbd check that their own host name is the configured one.
    """

    ctld: str = "slurmctld"
    dbd: str = "slurmdbd"
    mariadb: str = "mariadb"
    postgres: str = "postgres"


HOSTS = Hosts()

#: What ``slurm-ml install`` itself writes into slurm-ml.env.
INSTALL_WRITES = ("SLURM_ML_PYTHON", "SLURM_ML_CONFIG", "SLURM_ML_DSN", "SLURM_ML_HOOK_TIMEOUT")


@dataclass(frozen=True, slots=True)
class ComposeLayout(Layout):
    """The dev cluster's :class:`Layout` with two paths moved onto shared volumes:
    the Slurm configuration directory and submitd's socket. Everything else is
    per container under ``root`` (:data:`STATE_DIR`)."""

    etc_dir: Path = SLURM_ETC
    shared_run: Path = SHARED_RUN

    @property
    def etc(self) -> Path:
        return self.etc_dir

    @property
    def submitd_socket(self) -> Path:
        return self.shared_run / "submitd.sock"


def layout() -> ComposeLayout:
    return ComposeLayout(STATE_DIR, PORTS, SLURM_ETC, SHARED_RUN)


# ----------------------------------------------------------------- what runs


def cli(*args: str) -> list[str]:
    """argv running the slurm-ml CLI of this very installation."""
    return [sys.executable, "-m", "slurm_ml.cli", *args]


def install_args(config_path: Path, lay: Layout, *, accounts: bool,
                 env: Mapping[str, str] | None = None) -> list[str]:
    """``slurm-ml install`` as a container runs it: no systemd in a container; the
    account tree only once slurmdbd answers (the ctld role); ``env``: extra lines for
    the hooks' slurm-ml.env. The DSN comes in ``$SLURM_ML_DSN`` (install's default)."""
    args = ["install", "--config", str(config_path), "--slurm-conf-dir", str(lay.etc),
            "--no-systemd", "--submitd-socket", str(lay.submitd_socket),
            "--submitd-key", str(lay.submitd_key)]
    for key, value in (env or {}).items():
        args += ["--env", f"{key}={value}"]
    return args if accounts else [*args, "--no-accounts"]


def submitd_args(config_path: Path, lay: Layout) -> list[str]:
    """submitd in the foreground; the DSN comes in ``$SLURM_ML_DSN``, not on the
    command line (``ps`` would show it)."""
    return ["-v", "submitd", "--config", str(config_path), "--socket", str(lay.submitd_socket),
            "--key-file", str(lay.submitd_key)]


def daemon_args(config_path: Path) -> list[str]:
    """The reconciler in the foreground; the DSN comes in ``$SLURM_ML_DSN``."""
    return ["-v", "daemon", "--config", str(config_path)]


# ----------------------------------------------------------------- the roles


@dataclass(frozen=True, slots=True)
class Role:
    """One container's job: prepare, then become ``argv`` (``exec``)."""

    cfg: Config
    config_path: Path
    layout: ComposeLayout
    node: str = ""
    say: Callable[[str], None] = print

    @property
    def cluster(self) -> DevCluster:
        """The dev cluster's steps, run on this container's layout."""
        return DevCluster(self.cfg, self.layout, say=self.say, config_path=self.config_path)

    @property
    def slurm_env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.layout.slurm_conf)}

    # ------------------------------------------------------------ shared steps
    def dirs(self) -> None:
        lay = self.layout
        for d in (lay.run, lay.log, lay.dev, lay.munge, lay.spool, lay.health, lay.hook_state,
                  lay.shm, lay.root / "ctld", lay.root / "slurmd"):
            d.mkdir(parents=True, exist_ok=True)
        lay.run.chmod(0o755)

    def dsn(self) -> str:
        """The dev cluster's DSN form (require_auth=scram-sha-256) at the postgres
        service: containers reach it over the compose network, where any container
        could answer at that name."""
        from slurm_ml.store.dsn import tcp_dsn  # psycopg only where a DSN is made

        s = self.cluster._secrets()
        return tcp_dsn(HOSTS.postgres, self.layout.ports.postgres, PG_DB, PG_USER,
                       s.pg_password)

    def munge(self) -> None:
        """munged with the shared key (init wrote it), like the dev cluster's."""
        if not self.munge_key.exists():
            raise platform.DevClusterError(
                f"no munge key at {self.munge_key}: the init service has not run")
        self.cluster._munge()

    @property
    def munge_key(self) -> Path:
        return self.layout.etc / "munge.key"

    def wait_tcp(self, what: str, host: str, port: int, timeout_s: float = 180) -> None:
        def answers() -> bool:
            with socket.create_connection((host, port), timeout=2):
                return True

        daemons.wait_for(f"{what} ({host}:{port})", answers, timeout_s, interval_s=1)

    def slurmctld_up(self) -> bool:
        return "UP" in proc.run(["scontrol", "ping"], env=self.slurm_env, check=False,
                                timeout_s=10).stdout

    # ------------------------------------------------------------------ init
    def site(self) -> render.SiteParams:
        """The one-host dev cluster's site parameters (:meth:`DevCluster.site`), with
        each daemon on its own compose host (``slurm-ml install`` adds slurm-ml's own
        settings through its ``slurm-ml.conf`` include)."""
        return dataclasses.replace(
            self.cluster.site(),
            controller_host=HOSTS.ctld,
            dbd_host=HOSTS.dbd,
            mysql_host=HOSTS.mariadb,
            node_addr="",  # every node is its own container on the default slurmd port
            node_port_base=0,
            site_lines="", site_switch_lines="",  # no CPU-only node container
            header="docker compose cluster; re-rendered by its init service.",
        )

    def render(self) -> dict[str, str]:
        return render.render_all(self.cfg, self.site())

    def hook_env(self) -> dict[str, str]:
        """The dev cluster's hook settings (replayed captures, fake GPU devices, per-node
        state and log) for install's slurm-ml.env; install writes the python, the config
        and the DSN there itself."""
        values = node_health.hook_env(self.layout, python=sys.executable,
                                      config_path=self.config_path, dsn="")
        return {k: v for k, v in values.items() if k not in INSTALL_WRITES}

    def install(self, *, accounts: bool) -> None:
        """``slurm-ml install`` into /etc/slurm: job_submit.lua, the hook wrappers,
        slurm-ml.env, the slurm-ml.conf include and its Include line, billing weights;
        with ``accounts``, the QOS and the account tree. Idempotent."""
        args = install_args(self.config_path, self.layout, accounts=accounts,
                            env=self.hook_env())
        proc.run(cli(*args), env={**self.slurm_env, "SLURM_ML_DSN": self.dsn()},
                 timeout_s=300)

    def init(self) -> None:
        """Everything the other services share, on the /etc/slurm volume. Re-run by
        every ``docker compose up``: a file is rewritten only when the config changed it
        (slurm.conf compared without install's edits, as the dev cluster does)."""
        self.dirs()
        lay = self.layout
        self.cluster._secrets()  # created once, kept across `docker compose up`
        if not self.munge_key.exists():
            self.munge_key.write_bytes(secrets.token_bytes(1024))
        self.munge_key.chmod(0o400)
        for name, text in self.render().items():
            path = lay.etc / name
            have = deploy.site_part(path) if name == "slurm.conf" else (
                path.read_text() if path.exists() else None)
            if have != text:
                path.write_text(text)
            path.chmod(0o600 if name == "slurmdbd.conf" else 0o644)
        self.install(accounts=False)  # slurmdbd is not up yet: the ctld role adds accounts
        self.say(f"{lay.etc}: {', '.join(sorted(p.name for p in lay.etc.iterdir()))}")

    # --------------------------------------------------------------- services
    def mariadb(self) -> list[str]:
        lay = self.layout
        self.dirs()
        if not (lay.mysql / "mysql").exists():
            lay.mysql.mkdir(parents=True, exist_ok=True)
            proc.run(["mariadb-install-db", "--no-defaults", f"--datadir={lay.mysql}",
                      "--user=root", "--auth-root-authentication-method=socket",
                      "--skip-test-db"], timeout_s=300)
        pw = self.cluster._secrets().mysql_password  # hex: safe inside quotes
        init_sql = lay.run / "mariadb-init.sql"
        lines = [f"CREATE DATABASE IF NOT EXISTS {MYSQL_DB};",
                 f"CREATE USER IF NOT EXISTS '{MYSQL_USER}'@'%' IDENTIFIED BY '{pw}';",
                 f"ALTER USER '{MYSQL_USER}'@'%' IDENTIFIED BY '{pw}';",
                 f"GRANT ALL ON {MYSQL_DB}.* TO '{MYSQL_USER}'@'%';"]
        fd = os.open(init_sql, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write("\n".join(lines) + "\n")
        return ["mariadbd", "--no-defaults", f"--datadir={lay.mysql}", "--user=root",
                f"--socket={lay.mysql_socket}", f"--port={lay.ports.mysql}",
                "--bind-address=0.0.0.0", "--skip-name-resolve", f"--init-file={init_sql}",
                "--innodb-buffer-pool-size=128M", "--innodb-lock-wait-timeout=900",
                "--innodb-log-file-size=64M"]

    def postgres(self) -> list[str]:
        """initdb, role and database by the dev cluster's own step (on a socket only),
        open it to the compose network, then run it in the foreground."""
        lay = self.layout
        self.dirs()
        cluster = self.cluster
        cluster._postgres()
        data = lay.pg / "data"
        hba = data / "pg_hba.conf"
        line = "host all all all scram-sha-256"
        if line not in hba.read_text().splitlines():
            with hba.open("a") as fh:
                fh.write(f"# docker compose: the other services connect over the network\n"
                         f"{line}\n")
        cluster._as_postgres([cluster._pg_bin("pg_ctl"), "-D", str(data), "-m", "fast", "-w",
                              "stop"])
        return ["runuser", "-u", "postgres", "--", cluster._pg_bin("postgres"), "-D", str(data),
                "-p", str(lay.ports.postgres), "-k", str(lay.pg_socket_dir),
                "-c", "listen_addresses=*"]

    def dbd(self) -> list[str]:
        self.dirs()
        self.munge()
        self.wait_tcp("MariaDB", HOSTS.mariadb, self.layout.ports.mysql)
        return ["slurmdbd", "-D"]

    def ctld(self) -> list[str]:
        lay = self.layout
        self.dirs()
        self.munge()
        cluster = self.cluster
        cluster._users()
        daemons.wait_for("slurmdbd", cluster._sacctmgr_ok, 180, interval_s=1)
        self.install(accounts=True)  # the cluster, QOS alloc/free, the account tree
        state = lay.root / "ctld"
        fresh = not any(state.iterdir())
        return ["slurmctld", "-D", "-f", str(lay.slurm_conf)] + (["-c"] if fresh else [])

    def slurmd(self) -> list[str]:
        if self.node not in self.cfg.all_nodes():
            raise platform.DevClusterError(
                f"node {self.node!r} is not in {self.config_path} "
                f"(nodes: {', '.join(self.cfg.all_nodes())})")
        lay = self.layout
        self.dirs()
        (lay.root / "slurmd" / self.node).mkdir(parents=True, exist_ok=True)
        self.munge()
        cluster = self.cluster
        cluster._users()
        cluster._gpu_devices()
        data = node_health.gpu_data_dir(GPU_DATA)
        try:
            node_health.sync_healthy(self.cfg, lay, data=data)
        except platform.DevClusterError as exc:  # no data kit: the checks flag probe.failed
            self.say(f"warning: {exc}; the node health checks will find no captures "
                     f"(mount the data kit's gpu/ directory at {GPU_DATA})")
        shm = lay.shm / self.node  # the epilog's /dev/shm stand-in (SLURM_ML_SHM_DIR)
        shm.mkdir(parents=True, exist_ok=True)
        shm.chmod(0o1777)
        return ["slurmd", "-D", "-f", str(lay.slurm_conf), "-N", self.node]

    def submitd(self) -> list[str]:
        from slurm_ml.store.migrate import migrate

        self.dirs()
        self.layout.submitd_socket.parent.mkdir(parents=True, exist_ok=True)
        dsn = self.dsn()
        self.wait_tcp("PostgreSQL", HOSTS.postgres, self.layout.ports.postgres)
        applied: list[str] = []

        def migrated() -> bool:  # PostgreSQL may accept connections before it accepts logins
            applied.extend(migrate(dsn))
            return True

        daemons.wait_for("database schema", migrated, 120, interval_s=2)
        if applied:
            self.say(f"applied migrations {', '.join(applied)}")
        return cli(*submitd_args(self.config_path, self.layout))

    def daemon(self) -> list[str]:
        self.dirs()
        self.munge()
        daemons.wait_for("slurmctld", self.slurmctld_up, 300, interval_s=2)
        return cli(*daemon_args(self.config_path))

    # ----------------------------------------------------------------- checks
    def check(self, role: str) -> bool:
        """Does this container's service answer? (a compose healthcheck)"""
        lay = self.layout

        def ok(argv: Sequence[str]) -> bool:
            return proc.run(argv, env=self.slurm_env, check=False, timeout_s=15).returncode == 0

        if role == "init":
            return lay.slurm_conf.exists() and self.munge_key.exists()
        if role == "mariadb":
            return ok(["mariadb-admin", "--no-defaults", f"--socket={lay.mysql_socket}",
                       "-u", "root", "ping"])
        if role == "postgres":
            return ok(["pg_isready", "-q", "-h", str(lay.pg_socket_dir), "-p",
                       str(lay.ports.postgres)])
        if role == "dbd":
            return ok(["sacctmgr", "-n", "-P", "show", "cluster", "format=Cluster"])
        if role == "ctld":
            return self.slurmctld_up()
        if role == "node":
            nodes = {n.name: n for n in CliSlurm(self.cluster.runner(15)).list_nodes()}
            n = nodes.get(self.node)
            return (n is not None and n.state not in {"DOWN", "UNKNOWN"}
                    and "NOT_RESPONDING" not in n.flags)
        if role == "submitd":
            return ask(lay.submitd_socket, {"v": 1, "op": "ping"}, 2.0).get("action") == "pong"
        if role == "daemon":
            port = self.cfg.daemon.metrics_port
            if port == 0:  # no /metrics to ask: the process being up is all there is
                return True
            url = f"http://127.0.0.1:{port}/metrics"
            with urllib.request.urlopen(url, timeout=5) as resp:
                return bool(resp.status == 200)
        raise ValueError(f"unknown role {role!r}")


def _exec(argv: Sequence[str], env: Mapping[str, str]) -> NoReturn:
    """Become ``argv``: the daemon is then the container's main process (Docker signals
    it and sees it exit). Not a subprocess, so not proc.run."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(argv[0], list(argv), dict(env))


def run_role(role: str, cfg: Config, config_path: Path, *, node: str = "",
             say: Callable[[str], None] = print, lay: ComposeLayout | None = None) -> None:
    """Prepare ``role`` and exec its daemon (never returns, except for ``init``)."""
    r = Role(cfg, config_path, lay or layout(), node=node, say=say)
    if role == "init":
        r.init()
        return
    steps: dict[str, Callable[[], list[str]]] = {
        "mariadb": r.mariadb, "postgres": r.postgres, "dbd": r.dbd, "ctld": r.ctld,
        "node": r.slurmd, "submitd": r.submitd, "daemon": r.daemon,
    }
    if role not in steps:
        raise ValueError(f"unknown role {role!r}")
    argv = steps[role]()
    env = {**os.environ, **r.slurm_env}
    if role in ("submitd", "daemon"):
        env["SLURM_ML_DSN"] = r.dsn()
        env["SLURM_ML_SPOOL_DIR"] = str(r.layout.spool)
    say(f"{role}: exec {' '.join(argv[:4])} ...")
    _exec(argv, env)


def check_role(role: str, cfg: Config, config_path: Path, *, node: str = "",
               lay: ComposeLayout | None = None) -> bool:
    """The healthcheck of ``role``; any error means not healthy."""
    r = Role(cfg, config_path, lay or layout(), node=node)
    try:
        return r.check(role)
    except Exception as exc:  # a healthcheck answers yes or no, with why on stderr
        print(f"{role}: not healthy: {exc}", file=sys.stderr)
        return False
