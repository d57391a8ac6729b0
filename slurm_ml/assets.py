"""Where slurm-ml's non-Python files are.

* What ``slurm-ml install`` deploys and every command can fall back on, in three
  top-level folders of the checkout (:data:`FOLDERS`), which the wheel maps into the
  package under the same names (``slurm_ml/job_submit/``, ...: pyproject.toml's
  ``[tool.setuptools.package-dir]``), so that a path relative to them is the same in a
  checkout and in an installed package:

  - ``job_submit/job_submit.lua``: the Lua shim slurmctld's job_submit/lua plugin runs;
  - ``prolog/slurm-ml-hook``: the one wrapper slurmd runs as Prolog, Epilog and
    HealthCheckProgram (installed as slurm-ml-prolog, -epilog and -healthcheck), and
    ``prolog/gpu-selfcheck``, the node-side NVML self check;
  - ``conf/``: the ``slurm-ml.conf`` include and ``systemd/`` unit templates,
    ``slurm-ml.yaml``, the configuration a command uses when it is given none (the dev
    cluster's six nodes), and ``prometheus/``: the alert and recording rules with their
    promtool tests.

  :func:`asset_path` finds them: in a checkout (:func:`checkout_root`) the top-level
  folders themselves, else the installed package's copies.
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

#: The folders of deployed files: top-level in a checkout, inside the package in a wheel.
FOLDERS = ("job_submit", "prolog", "conf")
#: The installed package's directory, which holds :data:`FOLDERS` in a wheel.
PACKAGE = Path(__file__).resolve().parent
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


#: Where :data:`FOLDERS` are: the checkout's top level, else the installed package.
ROOT = checkout_root() or PACKAGE
#: The configuration commands read when given no ``--config`` and no ``$SLURM_ML_CONFIG``.
DEFAULT_CONFIG = ROOT / "conf" / "slurm-ml.yaml"


def asset_path(folder: str, *parts: str, strict: bool = True) -> Path:
    """The shipped file (or directory) ``<folder>/<parts>``, ``folder`` one of
    :data:`FOLDERS`, e.g. ``asset_path("job_submit", "job_submit.lua")``: under
    :data:`ROOT`.

    ``strict`` (default): raise :class:`AssetNotFound` when it is missing. Not strict: the
    path whether or not it exists (for defaults computed at import time, whose absence is
    reported when they are read)."""
    if folder not in FOLDERS:
        raise ValueError(f"asset_path: {folder!r} is not a folder slurm-ml ships "
                         f"(one of {', '.join(FOLDERS)})")
    rel = Path(folder, *parts)
    if rel.is_absolute() or ".." in rel.parts:
        raise ValueError(f"asset_path: not a relative path inside {folder}/: {parts!r}")
    path = ROOT / rel
    if strict and not path.exists():
        raise AssetNotFound(rel.as_posix(), [path],
                            f"reinstall slurm-ml (a wheel ships it in slurm_ml/{folder}/, "
                            f"a checkout in {folder}/)")
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
