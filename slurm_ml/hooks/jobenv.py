"""What a Slurm prolog/epilog learns from its environment, parsed once.

slurmd runs Prolog/Epilog with SLURMD_NODENAME, SLURM_JOB_ID, SLURM_JOB_USER,
SLURM_JOB_UID and, for jobs with GPUs bound through gres.conf ``File=``, SLURM_JOB_GPUS
(and CUDA_VISIBLE_DEVICES) as host GPU indices (docs/design.md "Prolog failure"). slurm-ml
treats those indices as NVML indices; ``Gpu.minor_number`` can tell them apart on nodes
where the two orders differ.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["JobEnv", "JobEnvError", "job_env", "parse_gpu_list"]

_RANGE = re.compile(r"^(\d+)-(\d+)$")
#: What slurmd puts in CUDA_VISIBLE_DEVICES when the job has no GPU devices.
_NO_GPUS = frozenset({"", "nodevfiles"})


class JobEnvError(ValueError):
    """The environment lacks what a hook cannot work without (the node name)."""


@dataclass(frozen=True, slots=True)
class JobEnv:
    """``gpus``: the job's GPU indices; ``()`` for a job without GPUs, ``None`` when the
    list could not be read as indices (UUIDs, MIG ids): check every GPU."""

    node: str
    job_id: int | None
    gpus: tuple[int, ...] | None
    user: str | None = None
    uid: int | None = None
    name: str | None = None
    account: str | None = None


def parse_gpu_list(text: str) -> tuple[int, ...] | None:
    """"0,1,2" → (0, 1, 2); "0-3" ranges too; "" or "NoDevFiles" → (); anything that is
    not an index (a UUID, a MIG id) → None."""
    text = text.strip()
    if text.lower() in _NO_GPUS:
        return ()
    out: set[int] = set()
    for token in (t.strip() for t in text.split(",")):
        if token.isdigit():
            out.add(int(token))
            continue
        m = _RANGE.match(token)
        if m is None or int(m.group(1)) > int(m.group(2)):
            return None
        out.update(range(int(m.group(1)), int(m.group(2)) + 1))
    return tuple(sorted(out))


def _int(env: Mapping[str, str], key: str) -> int | None:
    value = env.get(key, "").strip()
    return int(value) if value.isdigit() else None


def _text(env: Mapping[str, str], key: str) -> str | None:
    value = env.get(key, "").strip()
    return value or None


def job_env(env: Mapping[str, str]) -> JobEnv:
    """Read a prolog/epilog environment. SLURM_JOB_GPUS wins over CUDA_VISIBLE_DEVICES;
    neither (or empty) means the job has no GPUs. Raises JobEnvError without a node name."""
    node = _text(env, "SLURMD_NODENAME")
    if node is None:
        raise JobEnvError("SLURMD_NODENAME is not set: not running under slurmd?")
    raw = _text(env, "SLURM_JOB_GPUS") or _text(env, "CUDA_VISIBLE_DEVICES") or ""
    return JobEnv(node=node, job_id=_int(env, "SLURM_JOB_ID"), gpus=parse_gpu_list(raw),
                  user=_text(env, "SLURM_JOB_USER"), uid=_int(env, "SLURM_JOB_UID"),
                  name=_text(env, "SLURM_JOB_NAME"), account=_text(env, "SLURM_JOB_ACCOUNT"))
