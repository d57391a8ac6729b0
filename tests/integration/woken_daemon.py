"""A real daemon loop listening on a wake socket, with the dev cluster's submitd
restarted on the same config and database so that its lane admissions wake it: shared
by the fast-lane modules."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import yaml

from slurm_ml import proc
from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config
from slurm_ml.devcluster.cluster import DevCluster
from slurm_ml.devcluster.layout import Layout

SLURM_ML = str(Path(sys.executable).parent / "slurm-ml")


class SubmitdOnDsn(DevCluster):
    """The dev cluster's submitd on a config and a database of the test's own (the
    daemon writes its lane room there); the socket slurmctld asks is the same."""

    dsn = ""

    def service_env(self) -> dict[str, str]:
        return {**super().service_env(), "SLURM_ML_DSN": self.dsn}


@contextlib.contextmanager
def short_dir() -> Iterator[Path]:
    """A short directory for the wake socket (AF_UNIX paths stop at 108 bytes)."""
    d = Path(tempfile.mkdtemp(prefix="slurm-ml-wake-", dir="/tmp"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def woken_daemon(cfg: Path, dsn: str, log: Path) -> Iterator[Path]:
    """``slurm-ml daemon`` on ``cfg`` (its wake socket set here) and ``dsn``, logging to
    ``log``, from its first cycle on; submitd on the same until the end, when the daemon
    stops and submitd runs the dev cluster's config again. Yields ``cfg``.

    ``dsn`` should be the test's own, empty database (``pg_dsn``): submitd starts on it
    and routes by the budget snapshots there, so that the test's first jobs go where a
    site's first jobs go, whatever an earlier test's snapshots said (with a 3-minute
    window, one that filled the cluster as the same account leaves it over budget, and
    those jobs would go to QOS free). The test refreshes submitd once it wants the
    daemon's first snapshots read (``slurm_jobs.refresh_submitd``)."""
    with short_dir() as wake_dir:
        data = yaml.safe_load(cfg.read_text())
        data["daemon"]["wake_socket"] = str(wake_dir / "wake.sock")
        cfg.write_text(yaml.safe_dump(data))
        cfg.chmod(0o644)
        root = Path(os.environ["SLURM_ML_DEVCLUSTER"])
        default = DevCluster(load_config(DEFAULT_CONFIG), Layout(root), say=lambda _m: None,
                             config_path=DEFAULT_CONFIG)
        mine = SubmitdOnDsn(load_config(cfg), Layout(root), say=lambda _m: None,
                            config_path=cfg)
        mine.dsn = dsn
        pid = None
        try:
            default.stop_submitd()
            mine.start_submitd()
            pid = proc.spawn_daemon([SLURM_ML, "-v", "daemon", "--config", str(cfg)],
                                    log_path=str(log), env={"SLURM_ML_DSN": dsn})
            deadline = time.monotonic() + 120
            while not ((wake_dir / "wake.sock").exists()
                       and "event=cycle_end" in log.read_text()):
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.5)
            yield cfg
        finally:
            if pid is not None:
                stop(pid)
            mine.stop_submitd()
            default.start_submitd()


def stop(pid: int) -> int:
    """SIGTERM, then SIGKILL after 30 s; the exit status."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)
    _done, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)
