"""Typed errors of the Slurm boundary.

Callers catch these, never ``subprocess`` exceptions: ``SlurmNotFound`` (the
command is not installed), ``SlurmTimeout`` (it hung and was killed) and
``SlurmCommandError`` (Slurm said no, with its stderr).
"""

from __future__ import annotations

from collections.abc import Sequence


class SlurmError(Exception):
    """Anything that went wrong talking to Slurm."""


class SlurmNotFound(SlurmError):
    """A Slurm command is not installed or not on PATH."""


class SlurmTimeout(SlurmError):
    """A Slurm command did not answer in time (slurmctld down or overloaded)."""


class SlurmCommandError(SlurmError):
    """A Slurm command exited non-zero; ``stderr`` holds what Slurm said."""

    def __init__(self, argv: Sequence[str], returncode: int, stderr: str) -> None:
        self.argv = tuple(argv)
        self.returncode = returncode
        self.stderr = stderr.strip()
        super().__init__(f"{' '.join(self.argv[:4])}: exit {returncode}: {self.stderr}")


class SlurmParseError(SlurmError):
    """Slurm's output did not have the shape we expect for this version."""


class UnsupportedSlurmVersion(SlurmError):
    """The installed Slurm is older than the oldest version slurm-ml supports."""
