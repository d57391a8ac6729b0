"""What machine the dev cluster is on: Debian release, Slurm version, root."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from slurm_ml import proc
from slurm_ml.slurm.errors import SlurmError
from slurm_ml.slurm.version import SlurmVersion

DEBIAN_PACKAGES = (
    "munge",
    "slurmctld",
    "slurmd",
    "slurmdbd",
    "slurm-client",
    "slurm-wlm-basic-plugins",
    "mariadb-server",
    "mariadb-client",
    "postgresql",
    "lua-socket",
    "lua-cjson",
    "passwd",
    # The GPU nodes' metrics: node_exporter serves the periodic check's textfiles (its
    # Debian default directory is health.textfile_dir's default); prometheus brings
    # promtool, which runs the shipped alert rules' tests, and runs in the integration
    # test that scrapes a real daemon (tests/integration/test_prometheus_alerts.py).
    "prometheus-node-exporter",
    "prometheus",
)
# Debian 12 ships the mysql accounting plugin as its own package; 13 folds it in.
OPTIONAL_PACKAGES = ("slurm-wlm-mysql-plugin",)


class DevClusterError(Exception):
    """The dev cluster could not be brought up, with what to do about it."""


class NotRoot(DevClusterError):
    """The dev cluster manages daemons, users and devices: it needs root."""


@dataclass(frozen=True, slots=True)
class Platform:
    debian: str  # e.g. "12.11" or "13.1"
    slurm_version: tuple[int, int, int]

    @property
    def slurm(self) -> str:
        a, b, c = self.slurm_version
        return f"{a}.{b:02d}.{c}"


def require_root() -> None:
    if os.geteuid() != 0:
        raise NotRoot(
            "slurm-ml devcluster must run as root: it starts munged, MariaDB, slurmdbd, "
            "slurmctld and slurmd, creates researcher users and fake GPU device nodes. "
            "Run it with sudo, or as root in a throwaway VM/container."
        )


def debian_version() -> str:
    try:
        return Path("/etc/debian_version").read_text().strip()
    except OSError as exc:
        raise DevClusterError(
            "this is not a Debian machine (/etc/debian_version is missing); the dev cluster "
            "is built from Debian 12 or 13 packages"
        ) from exc


def slurm_version() -> tuple[int, int, int]:
    """The installed slurmctld's version, e.g. (22, 5, 8)."""
    try:
        v = SlurmVersion.parse(proc.run(["slurmctld", "-V"], timeout_s=10).stdout)
    except SlurmError as exc:
        raise DevClusterError(str(exc)) from exc
    return v.major, v.minor, v.micro


def missing_packages(names: tuple[str, ...]) -> list[str]:
    missing = []
    for name in names:
        res = proc.run(
            ["dpkg-query", "-W", "-f=${Status}", name], check=False, timeout_s=30
        )
        if "install ok installed" not in res.stdout:
            missing.append(name)
    return missing


def ensure_packages(say: object = print) -> list[str]:
    """Install whatever Debian packages the dev cluster needs and lacks."""
    missing = missing_packages(DEBIAN_PACKAGES + OPTIONAL_PACKAGES)
    if not missing:
        return []
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    assert callable(say)
    say(f"installing Debian packages: {' '.join(missing)}")
    proc.run(["apt-get", "update", "-q"], timeout_s=600, env=env)
    available = [
        n
        for n in missing
        if n not in OPTIONAL_PACKAGES
        or proc.run(["apt-cache", "show", n], check=False, timeout_s=60).returncode == 0
    ]
    proc.run(
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *available],
        timeout_s=1800,
        env=env,
    )
    return available


def detect() -> Platform:
    return Platform(debian=debian_version(), slurm_version=slurm_version())
