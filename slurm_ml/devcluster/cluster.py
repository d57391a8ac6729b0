"""A real Slurm cluster on this one machine: munge, MariaDB, slurmdbd, slurmctld,
one ``slurmd -N`` per node with fake GPU character devices, and PostgreSQL.

The dev cluster renders only the site's part of the Slurm configuration (cluster, ports,
paths, nodes, partitions, gres.conf, topology.conf, slurmdbd.conf); everything slurm-ml
adds to Slurm (job_submit.lua, the hooks, the ``slurm-ml.conf`` include, billing weights,
QOS and accounts) comes from :func:`slurm_ml.deploy.install.install`, the code behind
``slurm-ml install``, so the admin's path is the one every test runs on.

Every step checks before it acts, so ``up`` is idempotent and can be re-run
after a partial failure or after one daemon died.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_ml import proc
from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import Config
from slurm_ml.deploy import bundle
from slurm_ml.deploy import install as deploy
from slurm_ml.deploy.bundle import InstallParams
from slurm_ml.deploy.errors import BadInput, DeployError
from slurm_ml.deploy.manifest import MANIFEST_NAME
from slurm_ml.devcluster import brownfield, daemons, platform
from slurm_ml.devcluster import health as node_health
from slurm_ml.devcluster.layout import Layout, first_job_id, record_ports, recorded_ports
from slurm_ml.slurm import render
from slurm_ml.slurm.client import CliSlurm
from slurm_ml.slurm.errors import SlurmCommandError, SlurmError, SlurmTimeout
from slurm_ml.slurm.runner import SlurmRunner
from slurm_ml.submitd.client import ask

Say = Callable[[str], None]

PG_USER = "slurmml"
PG_DB = "slurmml"
MYSQL_USER = "slurm"
MYSQL_DB = "slurm_acct_db"
#: Files the dev cluster wrote itself before `slurm-ml install` did (removed once).
LEGACY_FILES = ("job_submit.lua", "slurm-ml.env")
#: AuthInfo cred_expire: a job requeued after a failed prolog may start again only after
#: this + 1 s (Slurm's default 120 s would make every health demo wait two minutes). It
#: must still exceed a prolog's worst case (slurm.conf: "long enough to ... run prolog").
CRED_EXPIRE_S = 30


#: What scontrol 24.11.5 says when slurmctld took the request but its answer never came
#: back (seen on `scontrol reconfigure`, which re-executes slurmctld).
LOST_REPLY = ("Socket timed out on send/recv operation",)


def reply_lost(exc: SlurmError) -> bool:
    """True when ``exc`` is a lost reply (a timeout of scontrol, or its socket-timeout
    error), not a refusal."""
    if isinstance(exc, SlurmTimeout):
        return True
    return isinstance(exc, SlurmCommandError) and any(m in exc.stderr for m in LOST_REPLY)


def _psql_quote(value: str) -> str:
    """``value`` inside single quotes of a psql meta-command (``\\set``)."""
    return value.replace("\\", "\\\\").replace("'", "\\'")


@dataclass(frozen=True, slots=True)
class Secrets:
    mysql_password: str
    pg_password: str


#: Reasons slurmctld gives a node it sets DOWN itself when slurmd stops answering or comes
#: back unannounced (slurmctld's node_mgr.c/ping_nodes.c); any other reason is a person's.
SLURM_DOWN_REASONS = ("Not responding", "Node unexpectedly rebooted", "Node silently failed")


def slurm_set_down(reason: str) -> bool:
    """Whether a DOWN node's reason is one slurmctld wrote itself (or none at all)."""
    return not reason or any(reason.startswith(r) for r in SLURM_DOWN_REASONS)


class DevCluster:
    """Bring the dev cluster up or down, and report on it."""

    def __init__(self, cfg: Config, layout: Layout, say: Say = print,
                 config_path: Path | None = None) -> None:
        self.cfg = cfg
        self.config_path = config_path  # submitd re-reads it on SIGHUP
        self.layout = layout
        self.say = say
        self.host = socket.gethostname()

    # ---------------------------------------------------------------- env
    @property
    def slurm_env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.layout.slurm_conf)}

    def runner(self, timeout_s: float = 30.0) -> SlurmRunner:
        return SlurmRunner(env=self.slurm_env, timeout_s=timeout_s)

    def dsn(self) -> str:
        """The role's password DSN over TCP, with require_auth=scram-sha-256: another
        user's program on the port while PostgreSQL is down gets no password. TCP rather
        than the socket with peer authentication: env.sh hands this DSN to the tests and
        the demo, whichever OS user runs them (peer needs a pg_ident.conf line per user),
        and the compose cluster, whose containers reach PostgreSQL over TCP only, shares
        the form."""
        from slurm_ml.store.dsn import tcp_dsn  # psycopg only where a DSN is made

        s = self._secrets()
        return tcp_dsn("127.0.0.1", self.layout.ports.postgres, PG_DB, PG_USER, s.pg_password)

    def service_env(self) -> dict[str, str]:
        """The environment slurm-ml's services get: the env file ``slurm-ml install``
        wrote (``<etc>/slurm-ml.env``, mode 0600, holding the DSN)."""
        path = self.layout.hook_env_file
        try:
            text = path.read_text()
        except OSError as exc:
            raise platform.DevClusterError(
                f"{path}: cannot read the installed env file ({exc.strerror}); "
                "run `slurm-ml devcluster up`") from exc
        try:
            return bundle.parse_env_text(text, str(path))
        except BadInput as exc:
            raise platform.DevClusterError(str(exc)) from exc

    def env_exports(self) -> dict[str, str]:
        return {
            "SLURM_CONF": str(self.layout.slurm_conf),
            "SLURM_ML_DSN": self.dsn(),
            "SLURM_ML_DEVCLUSTER": str(self.layout.root),
            "SLURM_ML_SPOOL_DIR": str(self.layout.spool),
            "SLURM_ML_SUBMITD_SOCKET": str(self.layout.submitd_socket),
            # What `slurm-ml health periodic|prolog|epilog` run by hand need on a dev node.
            "SLURM_ML_REPLAY_DIR": str(self.layout.health),
            "SLURM_ML_FAKE_GPU_DIR": str(self.layout.dev),
            "SLURM_ML_STATE_DIR": str(self.layout.hook_state),
            "SLURM_ML_SHM_DIR": str(self.layout.shm / "%n"),
        }

    def _secrets(self) -> Secrets:
        path = self.layout.etc / "secrets.json"
        if path.exists():
            data = json.loads(path.read_text())
            return Secrets(data["mysql_password"], data["pg_password"])
        s = Secrets(secrets.token_hex(12), secrets.token_hex(12))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"mysql_password": s.mysql_password,
                                    "pg_password": s.pg_password}))
        path.chmod(0o600)
        return s

    # ----------------------------------------------------------------- up
    def up(self, *, install_packages: bool = True) -> None:
        platform.require_root()
        self._check_ports()
        t0 = time.monotonic()
        steps: list[tuple[str, Callable[[], None]]] = []
        if install_packages:
            steps.append(("Debian packages", self._packages))
        steps += [
            ("state directory", self._dirs),
            ("researcher users", self._users),
            ("fake GPU devices", self._gpu_devices),
            ("node health replay (GPU captures per node)", self._health),
            ("Slurm configuration", self._render),
            ("munge", self._munge),
            ("MariaDB", self._mariadb),
            ("slurmdbd", self._slurmdbd),
            ("the site's own accounts, users and QOS (before slurm-ml)", self._site_accounts),
            ("slurm-ml install (shim, hooks, slurm-ml.conf, QOS and accounts)", self._install),
            ("slurmctld", self._slurmctld),
            ("slurmd nodes", self._slurmd),
            ("the site's own reservation", self._site_reservation),
            ("PostgreSQL", self._postgres),
            ("database schema", self._migrate),
            ("admission server (submitd)", self.start_submitd),
        ]
        for i, (name, step) in enumerate(steps, 1):
            self.say(f"[{i}/{len(steps)}] {name} ...")
            step()
        self._write_env()
        self.say(f"dev cluster up in {time.monotonic() - t0:.0f}s; state in {self.layout.root}")
        env_cmd = f"slurm-ml devcluster env --state-dir {self.layout.root}"
        self.say(f'use it with:  eval "$({env_cmd})"')

    def _check_ports(self) -> None:
        """Refuse to move a running cluster to other ports: its daemons would keep the old
        ones while every later command looked for the new."""
        have = recorded_ports(self.layout.root)
        if have is None or have == self.layout.ports:
            return
        if daemons.alive(self.layout.pidfile("slurmctld"), "slurmctld"):
            raise platform.DevClusterError(
                f"{self.layout.root} runs on ports offset {have.offset}, not "
                f"{self.layout.ports.offset}; `slurm-ml devcluster down` it first")

    def _packages(self) -> None:
        added = platform.ensure_packages(self.say)
        plat = platform.detect()
        note = f" (installed {' '.join(added)})" if added else ""
        self.say(f"      Debian {plat.debian}, Slurm {plat.slurm}{note}")

    def _dirs(self) -> None:
        L = self.layout
        for d in (L.etc, L.run, L.log, L.dev, L.munge, L.root / "ctld", L.root / "slurmd", L.spool,
                  L.health, L.hook_state, L.shm):
            d.mkdir(parents=True, exist_ok=True)
        for node in self.nodes():
            (L.root / "slurmd" / node).mkdir(exist_ok=True)
        L.jobs.mkdir(parents=True, exist_ok=True)
        L.jobs.chmod(0o1777)
        # Researcher jobs and PostgreSQL must be able to traverse the state dir.
        L.root.chmod(0o755)
        # Every later Layout(root) (down, env, status, the tests) reads the ports here.
        record_ports(L.root, L.ports)

    def _users(self) -> None:
        for user in [*self.cfg.budgets.user_accounts(), *brownfield.SITE_USERS]:
            try:
                pwd.getpwnam(user)
            except KeyError:
                proc.run(["useradd", "--create-home", "--shell", "/bin/bash", user], timeout_s=30)
                self.say(f"      created Unix user {user}")

    def _gpu_devices(self) -> None:
        most = max(nc.gpus_per_node for nc in self.cfg.node_classes)
        for i in range(most):
            path = self.layout.dev / f"nvidia{i}"
            if path.exists() and stat.S_ISCHR(path.stat().st_mode):
                continue
            path.unlink(missing_ok=True)
            # Character devices aliasing /dev/null: slurmd rejects regular files.
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))

    def _health(self) -> None:
        """Healthy captures for every node without an injected fault, per-node /dev/shm
        stand-ins, and the env file the Prolog/Epilog wrappers read."""
        try:
            kept = node_health.sync_healthy(self.cfg, self.layout)
        except platform.DevClusterError as exc:  # no data kit: checks flag probe.failed
            self.say(f"      warning: {exc}; the node health checks will find no captures")
            kept = []
        if kept:
            self.say(f"      injected faults kept on {', '.join(kept)} "
                     f"(`slurm-ml devcluster fault NODE --clear` removes them)")

    def site(self) -> render.SiteParams:
        L, P = self.layout, self.layout.ports
        return render.SiteParams(
            controller_host=f"{self.host}(127.0.0.1)",
            state_dir=str(L.root),
            run_dir=str(L.run),
            log_dir=str(L.log),
            gpu_dev_dir=str(L.dev),
            # explicit socket, for the daemons; cred_expire: see CRED_EXPIRE_S
            auth_info=f"socket={L.munge_socket},cred_expire={CRED_EXPIRE_S}",
            slurm_user="root",
            slurmctld_port=P.slurmctld,
            slurmd_port=P.slurmd,
            slurmdbd_port=P.slurmdbd,
            dbd_host="127.0.0.1",
            node_addr="127.0.0.1",
            node_port_base=P.node_base,
            first_job_id=first_job_id(P),
            mysql_port=P.mysql,
            mysql_user=MYSQL_USER,
            mysql_password=self._secrets().mysql_password,
            mysql_db=MYSQL_DB,
            header=f"Dev cluster in {L.root}; re-rendered by `slurm-ml devcluster up`.",
            # A job requeued after a failed prolog is started by backfill once eligible:
            # look every 5 s, not 30 (demo and tests wait for it).
            scheduler_extra="bf_interval=5",
            site_lines=brownfield.site_lines(
                controller_host=f"{self.host}(127.0.0.1)", node_addr="127.0.0.1",
                port=P.node_base + len(self.cfg.all_nodes())),
            site_switch_lines=brownfield.SITE_SWITCH_LINES,
        )

    def _render(self) -> None:
        """The site part only; `_install` adds slurm-ml's part."""
        files = render.render_all(self.cfg, self.site())
        # slurmdbd wants DbdHost to be this host's short name or localhost.
        files["slurmdbd.conf"] = files["slurmdbd.conf"].replace(
            "DbdHost=127.0.0.1", "DbdHost=localhost\nDbdAddr=127.0.0.1"
        )
        etc = self.layout.etc
        if not (etc / MANIFEST_NAME).exists():
            for name in LEGACY_FILES:  # written by the dev cluster before install existed
                (etc / name).unlink(missing_ok=True)
        for name, text in files.items():
            path = etc / name
            # slurm.conf: compared without install's edits (Include line, billing weights).
            have = deploy.site_part(path) if name == "slurm.conf" else (
                path.read_text() if path.exists() else None)
            if have != text:
                path.write_text(text)
        if platform.slurm_version() >= (23, 2):
            # 23.02+ slurmd reads cgroup.conf even with proctrack/linuxproc and task/none;
            # the dev cluster must also run where no cgroup filesystem is mounted.
            cgroup = self.layout.etc / "cgroup.conf"
            cgroup.write_text("# Dev cluster: no cgroup enforcement.\nCgroupPlugin=disabled\n")
            cgroup.chmod(0o644)
        (self.layout.etc / "slurmdbd.conf").chmod(0o600)
        for name in ("slurm.conf", "gres.conf", "topology.conf"):
            (self.layout.etc / name).chmod(0o644)

    def _munge(self) -> None:
        L = self.layout
        key = L.etc / "munge.key"
        if not key.exists():
            key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        L.munge.chmod(0o700)
        if daemons.alive(L.pidfile("munged"), "munged"):
            return
        if self._system_munge():
            self.say(f"      using the munged already serving {L.munge_socket}")
            return
        L.munge_socket.parent.mkdir(parents=True, exist_ok=True)
        L.munge_socket.unlink(missing_ok=True)
        proc.run(
            ["munged", "--force", f"--socket={L.munge_socket}", f"--key-file={key}",
             f"--pid-file={L.pidfile('munged')}", f"--log-file={L.log / 'munged.log'}",
             f"--seed-file={L.munge / 'munged.seed'}"],
            timeout_s=30,
        )
        daemons.wait_for("munged socket", L.munge_socket.exists, 15)
        L.run.chmod(0o755)

    def _system_munge(self) -> bool:
        """A munged we did not start already answers on the default socket."""
        if not self.layout.munge_socket.exists():
            return False
        return proc.run(["munge", "-n"], check=False, timeout_s=10).returncode == 0

    def _mysql(self, sql: str) -> str:
        """Run ``sql`` as MariaDB's root, on stdin: it may hold a password, and a command
        line is visible to every user in ps."""
        return proc.run(
            ["mariadb", "--no-defaults", f"--socket={self.layout.mysql_socket}", "-u", "root",
             "-N"],
            timeout_s=30, input_text=sql,
        ).stdout

    def _mariadb(self) -> None:
        L = self.layout
        if not (L.mysql / "mysql").exists():
            L.mysql.mkdir(parents=True, exist_ok=True)
            proc.run(
                ["mariadb-install-db", "--no-defaults", f"--datadir={L.mysql}", "--user=root",
                 "--auth-root-authentication-method=socket", "--skip-test-db"],
                timeout_s=300,
            )
        if not daemons.alive(L.pidfile("mariadb"), "mariadbd"):
            proc.spawn_daemon(
                ["mariadbd", "--no-defaults", f"--datadir={L.mysql}", "--user=root",
                 f"--socket={L.mysql_socket}", f"--port={L.ports.mysql}",
                 "--bind-address=127.0.0.1", f"--pid-file={L.pidfile('mariadb')}",
                 f"--log-error={L.log / 'mariadb.log'}", "--innodb-buffer-pool-size=128M",
                 "--innodb-lock-wait-timeout=900", "--innodb-log-file-size=64M"],
                log_path=str(L.log / "mariadb.out"),
            )
            daemons.wait_for("MariaDB", lambda: bool(self._mysql("SELECT 1")), 90)
        pw = self._secrets().mysql_password
        for host in ("localhost", "127.0.0.1"):
            self._mysql(
                f"CREATE USER IF NOT EXISTS '{MYSQL_USER}'@'{host}' IDENTIFIED BY '{pw}';"
                f"ALTER USER '{MYSQL_USER}'@'{host}' IDENTIFIED BY '{pw}';"
                f"GRANT ALL ON {MYSQL_DB}.* TO '{MYSQL_USER}'@'{host}';"
            )
        self._mysql(f"CREATE DATABASE IF NOT EXISTS {MYSQL_DB}")

    def _sacctmgr_ok(self) -> bool:
        self.runner(10)(["sacctmgr", "-n", "-P", "show", "cluster", "format=Cluster"])
        return True

    def _slurmdbd(self) -> None:
        L = self.layout
        if not daemons.alive(L.pidfile("slurmdbd"), "slurmdbd"):
            proc.run(["slurmdbd"], env=self.slurm_env, timeout_s=60)
        daemons.wait_for("slurmdbd", self._sacctmgr_ok, 120, interval_s=1)

    def install_params(self) -> InstallParams:
        """`slurm-ml install --slurm-conf-dir <etc> --no-systemd --health-check-interval 0`
        with the dev cluster's socket, DSN and node-health settings."""
        L = self.layout
        config = self.config_path or DEFAULT_CONFIG
        own = {"SLURM_ML_PYTHON", "SLURM_ML_CONFIG", "SLURM_ML_DSN", "SLURM_ML_HOOK_TIMEOUT"}
        extra = node_health.hook_env(L, python=sys.executable, config_path=config,
                                     dsn=self.dsn())
        return InstallParams(
            conf_dir=L.etc,
            config_path=config,
            python=sys.executable,
            systemd_dir=None,  # no systemd here; the dev cluster starts submitd itself
            submitd_socket=str(L.submitd_socket),
            submitd_key=str(L.submitd_key),
            dsn=self.dsn(),
            # HealthCheckProgram set but never run by slurmd: tests and the demo decide
            # when periodic checks run.
            health_check_interval_s=0,
            prolog_epilog_timeout_s=60,  # above the wrappers' own limit (HOOK_TIMEOUT_S)
            hook_timeout_s=node_health.HOOK_TIMEOUT_S,
            service_user="root",
            service_group="root",
            extra_env=tuple((k, v) for k, v in extra.items() if k not in own),
        )

    def _install(self) -> None:
        try:
            outcome = deploy.install(self.cfg, self.install_params(), run=self.runner(60),
                                     say=lambda m: self.say(f"      {m}"))
        except DeployError as exc:
            raise platform.DevClusterError(f"slurm-ml install: {exc}") from exc
        if outcome.changes.refusals:
            raise platform.DevClusterError(
                "slurm-ml install refused:\n" + "\n".join(outcome.changes.refusals))
        if not outcome.changed:
            self.say("      nothing to change")
        elif outcome.accounts.commands:
            self.say(f"      {len(outcome.accounts.commands)} sacctmgr command(s) run")

    def _ping(self) -> bool:
        out = self.runner(10)(["scontrol", "ping"])
        return "UP" in out

    def _slurmctld(self) -> None:
        L = self.layout
        if daemons.alive(L.pidfile("slurmctld"), "slurmctld"):
            # Pick up re-rendered configuration without losing jobs.
            self._reconfigure()
            return
        fresh = not any((L.root / "ctld").iterdir())
        argv = ["slurmctld", "-f", str(L.slurm_conf)] + (["-c"] if fresh else [])
        proc.run(argv, env=self.slurm_env, timeout_s=60)
        daemons.wait_for("slurmctld", self._ping, 60)

    def _reconfigure(self) -> None:
        """``scontrol reconfigure``; on 24.11 slurmctld re-executes itself to apply it and
        the reply can be lost ("Socket timed out on send/recv operation") although the
        reconfiguration went through: then slurmctld answering ``scontrol ping`` within
        a minute is the success. Any other failure is raised."""
        try:
            self.runner()(["scontrol", "reconfigure"])
        except SlurmError as exc:
            if not reply_lost(exc):
                raise
            self.say("      scontrol reconfigure: reply lost (slurmctld re-executes on "
                     "24.11); waiting for scontrol ping")
            daemons.wait_for("slurmctld after reconfigure", self._ping, 60)

    def nodes(self) -> list[str]:
        """Every slurmd: the config's GPU nodes and the site's own CPU node."""
        return [*self.cfg.all_nodes(), brownfield.CPU_NODE]

    def _site_accounts(self) -> None:
        brownfield.ensure_site_accounts(self.runner(60), self.cfg.cluster.name, self.say)

    def _site_reservation(self) -> None:
        brownfield.ensure_reservation(self.runner(), self.say)

    def _slurmd(self) -> None:
        L = self.layout
        for node in self.nodes():
            if daemons.alive(L.pidfile(f"slurmd-{node}"), "slurmd"):
                continue
            proc.run(["slurmd", "-f", str(L.slurm_conf), "-N", node], env=self.slurm_env,
                     timeout_s=60)
        client = CliSlurm(self.runner())
        want = set(self.nodes())

        def all_up() -> bool:
            nodes = {n.name: n for n in client.list_nodes()}
            bad = [n for n in want if n not in nodes or nodes[n].state in {"DOWN", "UNKNOWN"}
                   or "NOT_RESPONDING" in nodes[n].flags]
            return not bad

        daemons.wait_for("slurmd nodes", all_up, 120, interval_s=1)
        # A node Slurm itself set DOWN while its slurmd was away comes back; a drain stays,
        # whoever set it, as slurm-ml leaves every drain that is not its own on a real
        # cluster. slurm-ml's own drains are lifted by clean periodic checks, which the
        # dev cluster runs only when asked (`slurm-ml health periodic`); tests that drain
        # a node put it back themselves (tests/integration/node_restore.py).
        for n in client.list_nodes():
            if n.drained:
                self.say(f"      {n.name} stays drained ({n.reason or 'no reason'}): "
                         f"`scontrol update nodename={n.name} state=resume` returns it")
            elif n.state == "DOWN" and slurm_set_down(n.reason):
                client.resume_node(n.name)

    # ------------------------------------------------------------ submitd
    def submitd_pid(self) -> int | None:
        return daemons.alive(self.layout.pidfile("submitd"), "submitd")

    def _submitd_answers(self) -> bool:
        return ask(self.layout.submitd_socket, {"v": 1, "op": "ping"}, 1.0).get(
            "action") == "pong"

    def start_submitd(self) -> None:
        """Start submitd (or make a running one re-read its config) and wait for it."""
        L = self.layout
        pid = self.submitd_pid()
        if pid is not None:
            os.kill(pid, signal.SIGHUP)
            return
        argv = [sys.executable, "-m", "slurm_ml.cli", "-v", "submitd",
                "--socket", str(L.submitd_socket), "--key-file", str(L.submitd_key)]
        if self.config_path is not None:
            argv += ["--config", str(self.config_path)]
        # The DSN (with its password) comes from the env file install wrote, as a systemd
        # unit's EnvironmentFile would give it: never on a command line, where ps shows it.
        pid = proc.spawn_daemon(argv, log_path=str(L.log / "submitd.log"),
                                env=self.service_env())
        L.pidfile("submitd").write_text(f"{pid}\n")
        daemons.wait_for("submitd", self._submitd_answers, 30)

    def stop_submitd(self) -> bool:
        return daemons.stop(self.layout.pidfile("submitd"), "submitd")

    def _pg_bin(self, name: str) -> str:
        versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"),
                          key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
        if not versions:
            raise platform.DevClusterError("PostgreSQL server binaries not found under "
                                           "/usr/lib/postgresql; install package postgresql")
        return str(versions[-1] / name)

    def _as_postgres(self, argv: list[str], timeout_s: float = 60,
                     input_text: str | None = None) -> proc.Result:
        return proc.run(["runuser", "-u", "postgres", "--", *argv], timeout_s=timeout_s,
                        input_text=input_text)

    def _psql(self, sql: str, **params: str) -> str:
        """Run ``sql`` as the postgres superuser; ``:'name'`` / ``:"name"`` are quoted by psql.
        The parameters are set by ``\\set`` on stdin, not ``-v`` on the command line: one
        of them is a password."""
        L = self.layout
        argv = ["psql", "-h", str(L.pg_socket_dir), "-p", str(L.ports.postgres),
                "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-tA", "-f", "-"]
        sets = "".join(f"\\set {k} '{_psql_quote(v)}'\n" for k, v in params.items())
        return self._as_postgres(argv, input_text=sets + sql).stdout

    def _postgres(self) -> None:
        L = self.layout
        data = L.pg / "data"
        pg_uid = pwd.getpwnam("postgres").pw_uid
        if not (data / "PG_VERSION").exists():
            data.mkdir(parents=True, exist_ok=True)
            for d in (L.pg, data):
                os.chown(d, pg_uid, -1)
            data.chmod(0o700)
            self._as_postgres([self._pg_bin("initdb"), "-D", str(data), "-A", "scram-sha-256",
                               "--auth-local=peer", "-E", "UTF8", "--locale=C.UTF-8"],
                              timeout_s=300)
        self._pg_socket_dir(pg_uid)
        if not self._pg_running():
            self._as_postgres(
                [self._pg_bin("pg_ctl"), "-D", str(data), "-l", str(L.pg / "postgresql.log"),
                 "-o", f"-p {L.ports.postgres} -k {L.pg_socket_dir} "
                       "-c listen_addresses=127.0.0.1",
                 "-w", "-t", "60", "start"],
                timeout_s=90,
            )
        p = {"role": PG_USER, "db": PG_DB, "pw": self._secrets().pg_password}
        exists = self._psql("SELECT 1 FROM pg_roles WHERE rolname = :'role'", **p).strip()
        verb = "ALTER" if exists else "CREATE"
        self._psql(verb + ' ROLE :"role" LOGIN PASSWORD :\'pw\' CREATEDB', **p)
        if not self._psql("SELECT 1 FROM pg_database WHERE datname = :'db'", **p).strip():
            self._psql('CREATE DATABASE :"db" OWNER :"role"', **p)

    def _pg_socket_dir(self, pg_uid: int) -> None:
        """Give PostgreSQL a socket directory of its own. The run directory holds submitd's
        socket, which the shim trusts, so only root may write there; a server an earlier
        version started with its socket in the run directory is restarted here."""
        L = self.layout
        L.run.chmod(0o755)
        L.pg_socket_dir.mkdir(exist_ok=True)
        os.chown(L.pg_socket_dir, pg_uid, -1)
        L.pg_socket_dir.chmod(0o755)
        socket_file = L.pg_socket_dir / f".s.PGSQL.{L.ports.postgres}"
        if self._pg_running() and not socket_file.exists():
            self.say("      restarting PostgreSQL: its socket moves to " + str(L.pg_socket_dir))
            self._as_postgres([self._pg_bin("pg_ctl"), "-D", str(L.pg / "data"), "-m", "fast",
                               "-w", "-t", "60", "stop"], timeout_s=90)

    def _pg_running(self) -> bool:
        res = proc.run(["runuser", "-u", "postgres", "--", self._pg_bin("pg_ctl"), "status",
                        "-D", str(self.layout.pg / "data")], check=False, timeout_s=10)
        return res.returncode == 0

    def _migrate(self) -> None:
        from slurm_ml.store.migrate import migrate

        applied = migrate(self.dsn())
        if applied:
            self.say(f"      applied migrations {', '.join(applied)}")

    def _write_env(self) -> None:
        lines = [f"export {k}={v}" for k, v in self.env_exports().items()]
        self.layout.env_file.write_text("\n".join(lines) + "\n")
        self.layout.env_file.chmod(0o600)

    # --------------------------------------------------------------- down
    def down(self) -> list[str]:
        """Stop what ``up`` started, by pid file; return what was stopped."""
        platform.require_root()
        L = self.layout
        stopped = []
        if self.stop_submitd():
            stopped.append("submitd")
        for node in self.nodes():
            if daemons.stop(L.pidfile(f"slurmd-{node}"), "slurmd"):
                stopped.append(f"slurmd {node}")
        for name, program in (("slurmctld", "slurmctld"), ("slurmdbd", "slurmdbd"),
                              ("mariadb", "mariadbd")):
            if daemons.stop(L.pidfile(name), program):
                stopped.append(name)
        if (L.pg / "data" / "PG_VERSION").exists() and self._pg_running():
            self._as_postgres([self._pg_bin("pg_ctl"), "-D", str(L.pg / "data"), "-m", "fast",
                               "-w", "stop"])
            stopped.append("postgresql")
        users = self._other_munge_users()
        if users and daemons.alive(L.pidfile("munged"), "munged"):
            # Another dev cluster on this host reuses the munged this one started (there is
            # one socket, see Layout.munge_socket): stopping it would cut that one off.
            self.say(f"munged kept running: still used by {', '.join(users)}")
        elif daemons.stop(L.pidfile("munged"), "munged"):
            stopped.append("munged")
        return stopped

    @staticmethod
    def _other_munge_users() -> list[str]:
        """Slurm daemons still running on this host once ours are stopped (another dev
        cluster's, or the system's): they need munged."""
        out = []
        for program in ("slurmctld", "slurmdbd", "slurmd"):
            res = proc.run(["pgrep", "-x", program], check=False, timeout_s=10)
            # not a zombie: a daemon stopped a moment ago may not be reaped yet
            out += [f"{program} {pid}" for pid in res.stdout.split()
                    if not daemons.is_zombie(int(pid))]
        return out

    def destroy(self) -> None:
        """``down``, then delete the state directory."""
        self.down()
        shutil.rmtree(self.layout.root, ignore_errors=True)

    # ------------------------------------------------------------- status
    def status(self) -> dict[str, Any]:
        L = self.layout
        procs: dict[str, Any] = {}
        for name, program in (("munged", "munged"), ("mariadb", "mariadbd"),
                              ("slurmdbd", "slurmdbd"), ("slurmctld", "slurmctld")):
            pid = daemons.alive(L.pidfile(name), program)
            procs[name] = {"running": pid is not None, "pid": pid}
        if procs["munged"]["pid"] is None and self._system_munge():
            # `up` reused a munged it did not start (the system's, or another dev
            # cluster's on this host): it serves this cluster too.
            procs["munged"] = {"running": True, "pid": None, "shared": True}
        for node in self.nodes():
            pid = daemons.alive(L.pidfile(f"slurmd-{node}"), "slurmd")
            procs[f"slurmd-{node}"] = {"running": pid is not None, "pid": pid}
        submitd = self.submitd_pid()
        procs["submitd"] = {"running": submitd is not None, "pid": submitd}
        pg_pid = daemons.read_pid(L.pg / "data" / "postmaster.pid")
        pg_up = (L.pg / "data" / "PG_VERSION").exists() and self._pg_running()
        procs["postgresql"] = {"running": pg_up, "pid": pg_pid if pg_up else None}

        nodes: list[dict[str, Any]] = []
        slurm_error = None
        try:
            for n in CliSlurm(self.runner(10)).list_nodes():
                nodes.append({"name": n.name, "state": n.state, "flags": sorted(n.flags),
                              "reason": n.reason, "gres": n.gres, "gpus": n.gpus_total,
                              "gpu_type": n.gpu_type, "features": list(n.features)})
        except SlurmError as exc:
            slurm_error = str(exc)
        users = [{"user": u, "accounts": a, "default_account": a[0]}
                 for u, a in self.cfg.budgets.user_accounts().items()]
        return {
            "state_dir": str(L.root),
            "up": all(p["running"] for p in procs.values()),
            "health": node_health.node_health(self.cfg, L),
            "processes": procs,
            "nodes": nodes,
            "slurm_error": slurm_error,
            "users": users,
            "env": {k: v for k, v in self.env_exports().items() if k != "SLURM_ML_DSN"}
            if (L.etc / "secrets.json").exists() else {},
        }
