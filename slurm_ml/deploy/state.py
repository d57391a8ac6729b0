"""Read what install plans from: templates, the conf dir's files, the manifest, the
admin's slurm.conf with the files it includes. Reading only; :mod:`.apply` writes."""

from __future__ import annotations

import grp
import os
import pwd
import stat
from collections.abc import Iterable
from pathlib import Path

from slurm_ml import assets
from slurm_ml.deploy.bundle import HOOK_SOURCE, RULES_NAME, UNITS, Sources
from slurm_ml.deploy.errors import BadInput
from slurm_ml.deploy.manifest import MANIFEST_NAME, Manifest
from slurm_ml.deploy.plan import Current
from slurm_ml.deploy.slurmconf import Setting, includes, settings
from slurm_ml.slurm import render


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise BadInput(f"{path}: cannot read: {exc.strerror}") from exc


def _asset(folder: str, *parts: str) -> Path:
    try:
        return assets.asset_path(folder, *parts)
    except assets.AssetNotFound as exc:
        raise BadInput(str(exc)) from exc


def read_sources(templates: Path | None = None) -> Sources:
    """The files shipped with slurm-ml (:mod:`slurm_ml.assets`): the include and unit
    templates of ``conf/`` (``templates`` replaces that directory), the shim, the one hook
    wrapper and the Prometheus rules."""
    conf = templates or _asset("conf")
    return Sources(
        include=_read(conf / "slurm-ml.conf.tmpl"),
        shim=_read(render.shim_source()),
        hook=_read(_asset(*HOOK_SOURCE)),
        units={name: _read(conf / "systemd" / f"{name}.tmpl") for name in UNITS},
        rules=_read(_asset("conf", "prometheus", RULES_NAME)),
    )


def current(path: Path) -> Current:
    try:
        st = path.lstat()
    except FileNotFoundError:
        return Current()
    except OSError as exc:
        raise BadInput(f"{path}: cannot stat: {exc.strerror}") from exc
    if not stat.S_ISREG(st.st_mode):
        raise BadInput(f"{path} exists and is not a regular file; slurm-ml will not touch it")
    try:
        return Current(path.read_bytes(), stat.S_IMODE(st.st_mode))
    except OSError as exc:
        raise BadInput(f"{path}: cannot read: {exc.strerror}") from exc


def read_current(paths: Iterable[Path]) -> dict[Path, Current]:
    return {p: current(p) for p in paths}


def manifest_path(conf_dir: Path) -> Path:
    return conf_dir / MANIFEST_NAME


def load_manifest(conf_dir: Path) -> Manifest | None:
    path = manifest_path(conf_dir)
    if not path.exists():
        return None
    return Manifest.from_json(_read(path), str(path))


def admin_settings(slurm_conf: Path, skip: Path) -> list[Setting]:
    """The settings of slurm.conf and of every file it includes (recursively, relative
    names next to slurm.conf, as Slurm does), except slurm-ml's own include ``skip``."""
    out: list[Setting] = []
    seen: set[Path] = set()

    def visit(path: Path) -> None:
        real = Path(os.path.realpath(path))
        if real in seen or real == Path(os.path.realpath(skip)):
            return
        seen.add(real)
        try:
            text = path.read_text()
        except OSError:
            if path != slurm_conf:
                return  # an include Slurm itself would fail on: not ours to judge
            raise
        for s in settings(text, str(path)):
            out.append(s)
        for name in includes(text):
            if "%" in name:
                continue  # %c modifiers: expanded by Slurm only
            target = Path(name) if name.startswith("/") else slurm_conf.parent / name
            visit(target)

    visit(slurm_conf)
    return out


def missing_dirs(paths: Iterable[Path]) -> list[Path]:
    """Directories (and their missing parents, outermost first) that do not exist."""
    out: list[Path] = []
    for path in paths:
        chain = []
        d = path
        while not d.exists():
            chain.append(d)
            d = d.parent
        for c in reversed(chain):
            if c not in out:
                out.append(c)
    return out


def primary_group(user: str) -> str:
    """``user``'s primary group name (the user's own name when it is unknown here)."""
    try:
        return grp.getgrgid(pwd.getpwnam(user).pw_gid).gr_name
    except KeyError:
        return user


def service_account(slurm_conf: Path) -> tuple[str, str]:
    """SlurmUser of slurm.conf (default "slurm") and its primary group: the units run as
    them so that slurmctld can reach submitd's socket."""
    user = "slurm"
    try:
        for s in admin_settings(slurm_conf, skip=slurm_conf.parent / "slurm-ml.conf"):
            if s.key.casefold() == "slurmuser":
                user = s.value
    except OSError:
        pass
    return user, primary_group(user)
