"""Where slurm-ml's non-Python files are.

* ``slurm_ml/share/``: what ``slurm-ml install`` deploys and every command can fall back
  on. Package data, so an installed wheel and a checkout have the same files in the same
  place: the job_submit.lua shim, ``slurm-ml-hook`` (the one wrapper slurmd runs as
  Prolog, Epilog and HealthCheckProgram), the ``slurm-ml.conf`` include and systemd unit
  templates, ``gpu-selfcheck``, ``slurm-ml.yaml``, the configuration a command uses
  when it is given none (the dev cluster's six nodes), and ``prometheus/``: the alert and
  recording rules with their promtool tests.
* ``devcluster/templates/`` of the source checkout: the dev and compose cluster's own
  ``slurm.conf``, ``gres.conf``, ``topology.conf`` and ``slurmdbd.conf`` templates. A site
  keeps its own files, so the wheel does not ship these; ``$SLURM_ML_CONF_DIR`` names
  another directory holding them (the compose image sets it).

A leaf: stdlib and :mod:`slurm_ml.envvars` only, importable from every layer.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from slurm_ml.envvars import env

#: The package data directory (``slurm_ml/share``).
SHARE = Path(__file__).resolve().parent / "share"
#: The configuration commands read when given no ``--config`` and no ``$SLURM_ML_CONFIG``.
DEFAULT_CONFIG = SHARE / "slurm-ml.yaml"
CONF_DIR_ENV = "SLURM_ML_CONF_DIR"


class AssetNotFound(FileNotFoundError):
    """A file slurm-ml ships is missing from the package, or a checkout-only file is asked
    for outside a checkout."""

    def __init__(self, name: str, tried: list[Path], hint: str) -> None:
        self.name = name
        self.tried = tried
        where = " nor ".join(str(p) for p in tried) or "nowhere (no location known)"
        super().__init__(f"slurm-ml file {name!r} not found: looked for {where}; {hint}")


def checkout_root() -> Path | None:
    """The source checkout this package runs from, or None for an installed package."""
    root = Path(__file__).resolve().parents[1]
    if (root / "pyproject.toml").is_file() and (root / "devcluster").is_dir():
        return root
    return None


def asset_path(*parts: str, strict: bool = True) -> Path:
    """The shipped file (or directory) ``slurm_ml/share/<parts>``, e.g.
    ``asset_path("job_submit.lua")``.

    ``strict`` (default): raise :class:`AssetNotFound` when it is missing. Not strict: the
    path whether or not it exists (for defaults computed at import time, whose absence is
    reported when they are read)."""
    rel = Path(*parts)
    if not parts or rel.is_absolute() or ".." in rel.parts:
        raise ValueError(f"asset_path: not a relative path inside the package: {parts!r}")
    path = SHARE / rel
    if strict and not path.exists():
        raise AssetNotFound(rel.as_posix(), [path],
                            "reinstall slurm-ml (the package ships it in slurm_ml/share/)")
    return path


def config_path(option: str | Path | None, *, default: Path = DEFAULT_CONFIG,
                environ: Mapping[str, str] | None = None) -> Path:
    """The slurm-ml.yaml a command or hook reads: ``option`` (``--config``), else
    ``$SLURM_ML_CONFIG``, else ``default``."""
    return Path(option or env("SLURM_ML_CONFIG", environ) or default)


def conf_dir() -> Path:
    """The dev cluster's Slurm templates: ``$SLURM_ML_CONF_DIR`` if set, else the
    checkout's ``devcluster/templates``."""
    override = env(CONF_DIR_ENV)
    if override:
        return Path(override)
    root = checkout_root()
    if root is None:
        raise AssetNotFound("devcluster/templates", [],
                            "the dev cluster's Slurm templates come with a source checkout "
                            f"of slurm-ml; set ${CONF_DIR_ENV} to a directory holding them")
    return root / "devcluster" / "templates"
