"""Slurm version facts that change how we talk to it (see docs/design.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from slurm_ml.slurm.errors import SlurmParseError, UnsupportedSlurmVersion

OLDEST_SUPPORTED = (22, 5)


@dataclass(frozen=True, slots=True, order=True)
class SlurmVersion:
    major: int
    minor: int
    micro: int = 0

    @classmethod
    def parse(cls, text: str) -> SlurmVersion:
        """``slurm-wlm 22.05.8`` or ``slurm 24.11.5`` → SlurmVersion."""
        m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
        if not m:
            raise SlurmParseError(f"cannot read a Slurm version from {text.strip()!r}")
        v = cls(int(m[1]), int(m[2]), int(m[3] or 0))
        if (v.major, v.minor) < OLDEST_SUPPORTED:
            raise UnsupportedSlurmVersion(
                f"Slurm {v} is older than {OLDEST_SUPPORTED[0]}.{OLDEST_SUPPORTED[1]:02d}, "
                "the oldest release slurm-ml supports"
            )
        return v

    def __str__(self) -> str:
        return f"{self.major}.{self.minor:02d}.{self.micro}"

    @property
    def scontrol_json(self) -> bool:
        """scontrol and sacctmgr gained --json in 23.02."""
        return (self.major, self.minor) >= (23, 2)

    @property
    def squeue_json_filters(self) -> bool:
        """22.05's squeue --json ignores -j/-u/-t filters."""
        return (self.major, self.minor) >= (23, 2)

    @property
    def gres_tres_separator(self) -> str:
        """tres_per_* read ``gres:gpu:a100:2`` before 23.11, ``gres/gpu:a100:2`` after."""
        return "/" if (self.major, self.minor) >= (23, 11) else ":"
