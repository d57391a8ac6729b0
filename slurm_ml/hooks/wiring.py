"""The real boundaries of the node hooks, and one function per command.

``slurm-ml health prolog|epilog|periodic`` and ``slurm-ml quarantine list|resume|reset``
parse their options in ``cli/health.py`` and ``cli/quarantine.py`` and call
:func:`connect` and the function of the same name here; everything between the command
line and the runners is in this module.

Where each boundary comes from (first one set wins):

==================  ========================================================  ===========
boundary            from                                                      else
==================  ========================================================  ===========
config              ``--config``, ``$SLURM_ML_CONFIG``                        the CLI's
                                                                              default
database            ``--dsn``, ``$SLURM_ML_DSN``, ``store.dsn``               spool only
spool directory     ``$SLURM_ML_SPOOL_DIR``, ``store.spool_dir``
GPU probe           ``$SLURM_ML_REPLAY_DIR``: ReplayProbe over the captures   NvmlProbe
                    in ``<dir>/<node>/`` (or ``<dir>`` itself when there is
                    no such sub-directory), read afresh on every snapshot
GPU processes       ``$SLURM_ML_FAKE_GPU_DIR``: the live holders of the fake  the probe's
                    device files (``health.probe_devfiles``; dev cluster)
job baselines       ``$SLURM_ML_STATE_DIR``                                   /run/slurm-ml
/dev/shm            ``$SLURM_ML_SHM_DIR`` (``%n`` becomes the node name)      /dev/shm
textfile directory  ``health.textfile_dir`` (periodic only; "" for none)
==================  ========================================================  ===========

Every boundary is bounded in time, so that no hook can hang slurmd: Slurm commands run
with a 5 s timeout (:data:`SLURM_TIMEOUT_S`), PostgreSQL connects within at most 2 s
(:data:`CONNECT_TIMEOUT_S`) behind a ``SpoolingStore`` (an unreachable or unconfigured
database only spools), the probe runs under ``policy.quarantine.prolog_budget_s``.

The spool is drained at the start of every periodic run and operator command (never in
the prolog or epilog: a long spool would eat their budget). So the periodic check, which
``HealthCheckProgram`` runs on every node, is what brings spooled hook records, such as
the audit entry of a drain, into the database, before it reads the history it resumes by.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from slurm_ml import assets, envvars
from slurm_ml.config import Config, load_config
from slurm_ml.health.probe import GpuProbe
from slurm_ml.health.probe_devfiles import DeviceFileProcesses
from slurm_ml.health.probe_kernel_log import KernelLogXids
from slurm_ml.health.probe_replay import ReplayProbe
from slurm_ml.health.snapshot import NodeSnapshot
from slurm_ml.hooks.epilog import EpilogOutcome, run_epilog
from slurm_ml.hooks.periodic import PeriodicOutcome, run_periodic
from slurm_ml.hooks.procs import ProcessTable, ProcFs
from slurm_ml.hooks.prolog import PrologOutcome, run_prolog
from slurm_ml.hooks.record import finding_dict, jsonable
from slurm_ml.hooks.textfile import publisher
from slurm_ml.hooks.xidmark import read_mark, write_mark
from slurm_ml.slurm.client import CliSlurm
from slurm_ml.slurm.protocol import SlurmClient
from slurm_ml.slurm.runner import SlurmRunner
from slurm_ml.store.errors import StoreError
from slurm_ml.store.offline import OfflineStore
from slurm_ml.store.protocol import Store
from slurm_ml.store.spool import SpoolingStore

__all__ = [
    "CONNECT_TIMEOUT_S",
    "SLURM_TIMEOUT_S",
    "Boundaries",
    "HookSettings",
    "OpenDatabase",
    "connect",
    "drain_spool",
    "epilog",
    "outcome_json",
    "periodic",
    "prolog",
]

log = logging.getLogger(__name__)

#: Every Slurm command a hook runs is killed after this (docs/design.md: "any scontrol call
#: from a prolog must have a short timeout").
SLURM_TIMEOUT_S = 5.0
#: The longest a hook waits for PostgreSQL to accept a connection (store.connect_timeout_s
#: when that is shorter).
CONNECT_TIMEOUT_S = 2.0
#: NvmlProbe's own watchdog as a share of the prolog budget: it must fire (a hung NVML is a
#: ``probe.error`` finding) before the hook's outer deadline does (a ``probe.timeout`` flag).
_WATCHDOG_SHARE = 0.8
DEFAULT_STATE_DIR = Path("/run/slurm-ml")
DEFAULT_SHM_DIR = "/dev/shm"


@dataclass(frozen=True, slots=True)
class HookSettings:
    """What the environment and the options say; the config fills the rest (``connect``)."""

    config_path: Path
    dsn: str | None = None
    spool_dir: Path | None = None
    replay_dir: Path | None = None
    fake_gpu_dir: Path | None = None
    state_dir: Path = DEFAULT_STATE_DIR
    shm_dir: str = DEFAULT_SHM_DIR

    @classmethod
    def from_env(cls, env: Mapping[str, str], *, default_config: Path,
                 config: str | None = None, dsn: str | None = None) -> HookSettings:
        def path(key: str) -> Path | None:
            value = envvars.env(key, env)
            return Path(value) if value else None

        return cls(
            config_path=assets.config_path(config, default=default_config, environ=env),
            dsn=dsn or envvars.env("SLURM_ML_DSN", env),
            spool_dir=path("SLURM_ML_SPOOL_DIR"),
            replay_dir=path("SLURM_ML_REPLAY_DIR"),
            fake_gpu_dir=path("SLURM_ML_FAKE_GPU_DIR"),
            state_dir=path("SLURM_ML_STATE_DIR") or DEFAULT_STATE_DIR,
            shm_dir=envvars.env("SLURM_ML_SHM_DIR", env) or DEFAULT_SHM_DIR,
        )


@dataclass
class Boundaries:
    """Everything a hook runner takes besides its own arguments. ``probe(node, timeout_s)``
    builds the node's probe (the watchdog a real NVML probe should use)."""

    cfg: Config
    slurm: SlurmClient
    store: Store
    probe: Callable[[str, float], GpuProbe]
    procs: ProcessTable
    baseline_dir: Path | None
    shm_dir: Callable[[str], Path]
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    #: where the kernel-log mark lives (live nodes); None with replayed captures, whose
    #: Xids are as old as the capture and are judged whole every time
    xid_mark_dir: Path | None = None
    #: where the periodic check writes its node_exporter textfile; None: nowhere
    textfile_dir: Path | None = None

    def close(self) -> None:
        try:
            self.store.close()
        except StoreError as exc:
            log.debug("closing the store: %s", exc)


class _ReplayDir:
    """ReplayProbe over a directory, read at every snapshot: a capture replaced meanwhile
    (``slurm-ml devcluster fault``) counts, and an unreadable one raises ``CaptureError``
    inside the hook's deadline (a ``probe.failed`` flag), never while wiring."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def snapshot(self, node: str, gpus: Collection[int] | None = None) -> NodeSnapshot:
        return ReplayProbe.from_dir(self.directory).snapshot(node, gpus)


def replay_dir_for(root: Path, node: str) -> Path:
    """``root/<node>`` when that directory exists (and ``node`` is a plain name), else
    ``root``."""
    plain = node and "/" not in node and not node.startswith(".")
    sub = root / node
    return sub if plain and sub.is_dir() else root


def make_probe(settings: HookSettings, node: str, watchdog_s: float) -> GpuProbe:
    """The node's GPU probe (see the module doc)."""
    probe: GpuProbe
    if settings.replay_dir is not None:
        probe = _ReplayDir(replay_dir_for(settings.replay_dir, node))
    else:
        from slurm_ml.health.probe_nvml import NvmlProbe  # loads NVML only where it is used

        probe = KernelLogXids(NvmlProbe(timeout_s=watchdog_s))
    if settings.fake_gpu_dir is not None:
        probe = DeviceFileProcesses(probe, settings.fake_gpu_dir)
    return probe


#: Opens the database: ``(dsn, connect_timeout_s) -> Store``. The CLI passes
#: ``PostgresStore`` (hooks never import the database driver themselves).
OpenDatabase = Callable[[str, float], Store]


def make_store(settings: HookSettings, cfg: Config, open_db: OpenDatabase) -> SpoolingStore:
    """The database behind a spool; a spool alone when no database is configured."""
    dsn = settings.dsn or cfg.store.dsn or None
    spool = settings.spool_dir or cfg.store.spool_dir
    inner: Store
    if dsn is None:
        inner = OfflineStore()
    else:
        try:
            inner = open_db(dsn, min(cfg.store.connect_timeout_s, CONNECT_TIMEOUT_S))
        except (StoreError, ValueError) as exc:  # an unusable DSN: keep every record locally
            log.error("database DSN unusable, spooling only: %s", exc)
            inner = OfflineStore(f"database DSN unusable: {exc}")
    return SpoolingStore(inner, spool)


def load(settings: HookSettings) -> Config:
    """The config (``ConfigError`` propagates: each command decides its exit code)."""
    return load_config(settings.config_path)


def connect(settings: HookSettings, cfg: Config, *, open_db: OpenDatabase) -> Boundaries:
    """The real boundaries; nothing here touches the network or NVML yet."""
    shm = settings.shm_dir
    return Boundaries(
        cfg=cfg,
        slurm=CliSlurm(SlurmRunner(timeout_s=SLURM_TIMEOUT_S),
                       batch_size=cfg.slurm.scontrol_batch_size),
        store=make_store(settings, cfg, open_db),
        probe=lambda node, watchdog_s: make_probe(settings, node, watchdog_s),
        procs=ProcFs(),
        baseline_dir=settings.state_dir,
        shm_dir=lambda node: Path(shm.replace("%n", node)),
        xid_mark_dir=settings.state_dir if settings.replay_dir is None else None,
        textfile_dir=Path(cfg.health.textfile_dir) if cfg.health.textfile_dir else None,
    )


def drain_spool(store: Store) -> str | None:
    """Replay spooled records into the database, best effort; what went wrong, if
    anything."""
    if not isinstance(store, SpoolingStore):
        return None
    try:
        result = store.drain()
    except StoreError as exc:
        log.warning("spool not drained: %s", exc)
        return str(exc)
    if result.remaining:
        return f"{result.remaining} record(s) still spooled"
    return None


def _watchdog(cfg: Config) -> float:
    return max(0.5, cfg.policy.quarantine.prolog_budget_s * _WATCHDOG_SHARE)


# ------------------------------------------------------------------------- hooks


_T = TypeVar("_T")


def _marked(b: Boundaries, node: str, run: Callable[[datetime, float | None], _T]) -> _T:
    """Run a hook judging only Xids logged since this node's previous hook run, then move
    the mark to now (see ``xidmark``)."""
    now = b.clock()
    out = run(now, read_mark(b.xid_mark_dir, node))
    write_mark(b.xid_mark_dir, node, now.timestamp())
    return out


def prolog(env: Mapping[str, str], b: Boundaries) -> PrologOutcome:
    """``run_prolog`` on Slurm's environment."""
    node = env.get("SLURMD_NODENAME", "")
    return _marked(b, node, lambda now, since: run_prolog(
        env, cfg=b.cfg, probe=b.probe(node, _watchdog(b.cfg)), slurm=b.slurm, store=b.store,
        now=now, baseline_dir=b.baseline_dir, xid_since=since))


def epilog(env: Mapping[str, str], b: Boundaries) -> EpilogOutcome:
    """``run_epilog`` on Slurm's environment (always exit 0, see its module doc)."""
    node = env.get("SLURMD_NODENAME", "")
    return _marked(b, node, lambda now, since: run_epilog(
        env, cfg=b.cfg, probe=b.probe(node, _watchdog(b.cfg)), slurm=b.slurm, store=b.store,
        procs=b.procs, now=now, shm_dir=b.shm_dir(node or "unknown"),
        baseline_dir=b.baseline_dir, xid_since=since))


def periodic(node: str, b: Boundaries) -> PeriodicOutcome:
    """Drain the spool, then one ``run_periodic`` of ``node``, publishing its textfile."""
    drain_spool(b.store)
    publish = None if b.textfile_dir is None else publisher(b.textfile_dir, b.store)
    return _marked(b, node, lambda now, since: run_periodic(
        node, cfg=b.cfg, probe=b.probe(node, _watchdog(b.cfg)), slurm=b.slurm, store=b.store,
        now=now, procs=b.procs, xid_since=since, publish=publish))


def default_node(env: Mapping[str, str], hostname: str) -> str:
    """$SLURMD_NODENAME, else the short host name."""
    return env.get("SLURMD_NODENAME", "").strip() or hostname.split(".", maxsplit=1)[0]


def operator(env: Mapping[str, str], login: str) -> str:
    """The audit actor of an operator command: ``operator/<who>`` (the sudo user if any)."""
    who = env.get("SUDO_USER", "").strip() or login
    return f"operator/{who}" if who else "operator"


# ----------------------------------------------------------------------- output


def outcome_json(outcome: Any) -> dict[str, Any]:
    """A hook outcome or operator result as JSON-ready data (findings as in the audit)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(outcome):
        value = getattr(outcome, f.name)
        if f.name == "findings":
            value = [finding_dict(x) for x in value]
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = dataclasses.asdict(value)
        out[f.name] = value
    return jsonable(out)
