"""Build hook: the wheel ships conf/, job_submit/, prolog/, epilog/ and scripts/.

Those files stay at the top of the repository (the dev cluster, the tests and the docs
use those paths). ``build_py`` copies the ones listed in ``slurm_ml.assets.SHIPPED``
into ``slurm_ml/_share/`` of the build directory, modes kept, where
:func:`slurm_ml.assets.asset_path` finds them in an installed package. An editable
install skips the copy: it runs from the checkout, whose files ``asset_path`` finds.
Everything else is in pyproject.toml.
"""

from __future__ import annotations

import runpy
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
# assets.py is stdlib only, so running it here imports nothing of slurm-ml's.
_ASSETS = runpy.run_path(str(HERE / "slurm_ml" / "assets.py"))
SHIPPED: tuple[str, ...] = _ASSETS["SHIPPED"]
SHARE = Path("slurm_ml") / _ASSETS["SHARE_DIR"]


def _files() -> list[str]:
    """Every shipped file, relative to the repository root."""
    out: list[str] = []
    for rel in SHIPPED:
        src = HERE / rel
        if src.is_dir():
            out += sorted(p.relative_to(HERE).as_posix() for p in src.rglob("*")
                          if p.is_file() and "__pycache__" not in p.parts)
        elif src.is_file():
            out.append(rel)
        else:
            raise FileNotFoundError(f"setup.py: {src} (in slurm_ml.assets.SHIPPED) is missing")
    return out


class BuildPyWithAssets(build_py):
    """build_py, plus a copy of the shipped files into ``slurm_ml/_share/``."""

    def _share_outputs(self) -> list[tuple[str, str]]:
        if getattr(self, "editable_mode", False):
            return []
        return [(str(HERE / rel), str(Path(self.build_lib) / SHARE / rel)) for rel in _files()]

    def run(self) -> None:
        super().run()
        pairs = self._share_outputs()
        if pairs:
            shutil.rmtree(Path(self.build_lib) / SHARE, ignore_errors=True)  # no stale copies
        for src, dst in pairs:
            self.mkpath(str(Path(dst).parent))
            self.copy_file(src, dst, preserve_mode=True)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), *(d for _, d in self._share_outputs())]


setup(cmdclass={"build_py": BuildPyWithAssets})
