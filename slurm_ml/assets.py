"""Where slurm-ml's non-Python files are: templates, the job_submit shim, the hook scripts.

They live at the top of the source checkout (``conf/``, ``job_submit/``, ``prolog/``,
``epilog/``, ``scripts/``), next to the ``slurm_ml`` package. A wheel cannot ship files
outside its packages, so the build copies them into ``slurm_ml/_share/`` (see
``setup.py``), under the same relative paths. :func:`asset_path` returns the checkout's
file when running from a checkout (a plain or editable install of it), else the copy
shipped in the installed package.

A leaf: stdlib only, importable from every layer.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

#: What a wheel ships under ``slurm_ml/_share/`` (directories: everything under them).
SHIPPED = (
    "conf",
    "job_submit/job_submit.lua",
    "prolog/slurm-ml-prolog",
    "epilog/slurm-ml-epilog",
    "scripts/slurm-ml-healthcheck",
    "scripts/gpu-selfcheck",
)
SHARE_DIR = "_share"
CONF_DIR_ENV = "SLURM_ML_CONF_DIR"


class AssetNotFound(FileNotFoundError):
    """A file slurm-ml ships is neither in the source checkout nor in the installed package."""

    def __init__(self, name: str, tried: list[Path]) -> None:
        self.name = name
        self.tried = tried
        where = " nor ".join(str(p) for p in tried) or "nowhere (no location known)"
        super().__init__(f"slurm-ml asset {name!r} not found: looked for {where}; "
                         "reinstall slurm-ml (a wheel ships it under slurm_ml/_share/)")


def checkout_root() -> Path | None:
    """The source checkout this package runs from, or None for an installed package."""
    root = Path(__file__).resolve().parents[1]
    if (root / "pyproject.toml").is_file() and (root / "job_submit" / "job_submit.lua").is_file():
        return root
    return None


def share_root() -> Path | None:
    """``slurm_ml/_share`` of the imported package, or None where it is not on a file
    system (a zip import)."""
    root = resources.files(__package__ or "slurm_ml") / SHARE_DIR
    return root if isinstance(root, Path) else None


def _candidates(rel: Path) -> list[Path]:
    roots = [checkout_root(), share_root()]
    return [r / rel for r in roots if r is not None]


def asset_path(*parts: str, strict: bool = True) -> Path:
    """The shipped file (or directory) ``parts``, e.g. ``asset_path("conf", "slurm.conf.tmpl")``:
    the checkout's if running from one, else the installed package's copy.

    ``strict`` (default): raise :class:`AssetNotFound` naming every path tried when it is
    in neither. Not strict: the first place it would be, existing or not (for defaults
    computed at import time, whose absence is reported when they are read)."""
    rel = Path(*parts)
    if not parts or rel.is_absolute() or ".." in rel.parts:
        raise ValueError(f"asset_path: not a relative path inside the package: {parts!r}")
    tried = _candidates(rel)
    for path in tried:
        if path.exists():
            return path
    if strict or not tried:
        raise AssetNotFound(rel.as_posix(), tried)
    return tried[0]


def conf_dir() -> Path:
    """The directory of the templates: ``$SLURM_ML_CONF_DIR`` if set, else the shipped
    ``conf/``."""
    env = os.environ.get(CONF_DIR_ENV)
    if env:
        return Path(env)
    return asset_path("conf")
