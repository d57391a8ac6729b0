"""Normalise GPU requests and TRES strings across Slurm versions.

22.05 writes ``gres:gpu:a100:2`` in tres_per_*; 23.11+ writes
``gres/gpu:a100:2``; users and old tools write ``gpu:a100:2``. AllocTRES
strings look like ``billing=8,cpu=2,gres/gpu:a100_80g=2,gres/gpu=2,node=1``.
"""

from __future__ import annotations

import re

from slurm_ml.gres import gpu_items
from slurm_ml.model import GpuRequest


def parse_gpu_spec(text: str, per: str) -> list[GpuRequest]:
    """GPU requests in one ``tres_per_*`` value; non-GPU GRES are ignored.

    ``None``/"" → []. A bare ``gpu`` counts as one GPU, as Slurm does. The grammar,
    type names that start with a digit (MIG profiles such as ``3g.40gb``) included, is
    Slurm's own: see :mod:`slurm_ml.gres`.
    """
    return [GpuRequest(count=item.count, per=per, gpu_type=item.type)
            for item in gpu_items(text)]


def parse_tres(text: str) -> dict[str, float]:
    """``cpu=2,mem=1G,gres/gpu=2`` → {"cpu": 2, "mem": 1024 (MB), "gres/gpu": 2}."""
    out: dict[str, float] = {}
    for item in (text or "").split(","):
        if "=" not in item:
            continue
        key, _, value = item.partition("=")
        out[key.strip()] = _number(value.strip())
    return out


_UNITS = {"K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2, "P": 1024.0**3}


def _number(value: str) -> float:
    if value and value[-1].upper() in _UNITS and value[:-1].replace(".", "", 1).isdigit():
        return float(value[:-1]) * _UNITS[value[-1].upper()]
    try:
        return float(value)
    except ValueError:
        return 0.0


def gpu_type_of_gres(gres: str) -> tuple[str | None, int]:
    """A node's ``Gres=gpu:a100_80g:8(S:0)`` → ("a100_80g", 8)."""
    for raw in (gres or "").split(","):
        reqs = parse_gpu_spec(re.sub(r"\(.*?\)", "", raw).strip(), "node")
        if reqs:
            return reqs[0].gpu_type, reqs[0].count
    return None, 0


def gpus_in_tres(text: str) -> int | None:
    """GPUs in a TRES string (``AllocTRES``/``tres_alloc_str``): its ``gres/gpu`` count,
    else the sum of its typed ``gres/gpu:<type>`` counts; None when it names no GPUs, as
    on a cluster whose AccountingStorageTRES leaves gres/gpu out."""
    tres = parse_tres(text)
    if "gres/gpu" in tres:
        return int(tres["gres/gpu"])
    typed = [v for k, v in tres.items() if k.startswith("gres/gpu:")]
    return int(sum(typed)) if typed else None
