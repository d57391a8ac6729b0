"""A realistic Slurm conf dir in a tmp dir, and a snapshot of it (content and mode)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import Config, load_config
from slurm_ml.deploy.bundle import InstallParams
from slurm_ml.slurm import render

REPO = Path(__file__).resolve().parents[2]
CONFIG = DEFAULT_CONFIG


def cfg() -> Config:
    return load_config(CONFIG)


def make_conf_dir(root: Path, *, extra: str = "", no_final_newline: bool = False) -> Path:
    """An admin's /etc/slurm: site slurm.conf (+ ``extra`` lines), gres.conf, an unrelated
    file, a private slurmdbd.conf."""
    etc = root / "etc"
    etc.mkdir()
    site = render.SiteParams(controller_host="ctl", state_dir="/var/lib/slurm",
                             run_dir="/run/slurm", log_dir="/var/log/slurm",
                             gpu_dev_dir="/dev", scheduler_extra="bf_interval=30")
    files = render.render_all(cfg(), site)
    conf = files["slurm.conf"] + extra
    if no_final_newline:
        conf = conf.rstrip("\n")
    (etc / "slurm.conf").write_text(conf)
    (etc / "slurm.conf").chmod(0o640)
    (etc / "gres.conf").write_text(files["gres.conf"])
    (etc / "gres.conf").chmod(0o644)
    (etc / "slurmdbd.conf").write_text(files["slurmdbd.conf"])
    (etc / "slurmdbd.conf").chmod(0o600)
    (etc / "cgroup.conf").write_text("CgroupPlugin=autodetect\n")
    (etc / "cgroup.conf").chmod(0o644)
    (etc / "notes.txt").write_text("admin's own notes\n")
    (etc / "notes.txt").chmod(0o400)
    return etc


def params(root: Path, etc: Path, **kw: object) -> InstallParams:
    base: dict[str, object] = dict(conf_dir=etc, config_path=CONFIG, python="/opt/venv/bin/python",
                                   systemd_dir=root / "systemd", accounts=False,
                                   dsn="postgresql://u:p@db/slurmml")
    base.update(kw)
    return InstallParams(**base)  # type: ignore[arg-type]


def snapshot(*dirs: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``dirs``: relative path → (bytes, mode)."""
    out: dict[str, tuple[bytes, int]] = {}
    for d in dirs:
        if not d.exists():
            continue
        for dirpath, _dirs, names in os.walk(d):
            for n in names:
                p = Path(dirpath) / n
                out[str(p)] = (p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
    return out
