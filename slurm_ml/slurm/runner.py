"""Run Slurm commands through :func:`slurm_ml.proc.run`, with Slurm's typed errors."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from slurm_ml import proc
from slurm_ml.slurm.errors import SlurmCommandError, SlurmNotFound, SlurmTimeout


@dataclass(frozen=True, slots=True)
class SlurmRunner:
    """Runs Slurm CLIs with a fixed environment (e.g. SLURM_CONF) and timeout."""

    env: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 30.0

    def __call__(
        self, argv: Sequence[str], *, timeout_s: float | None = None, input_text: str | None = None
    ) -> str:
        """Run ``argv`` and return stdout; raise a :class:`SlurmError` subclass on failure."""
        try:
            res = proc.run(
                argv,
                timeout_s=timeout_s if timeout_s is not None else self.timeout_s,
                env=self.env,
                input_text=input_text,
            )
        except proc.CommandNotFound as exc:
            raise SlurmNotFound(str(exc)) from exc
        except proc.CommandTimeout as exc:
            raise SlurmTimeout(str(exc)) from exc
        except proc.CommandFailed as exc:
            raise SlurmCommandError(argv, exc.returncode, exc.stderr or exc.stdout) from exc
        return res.stdout
