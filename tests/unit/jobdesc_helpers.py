"""Reading job_desc field dicts in admission tests, independently of the code under test."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from slurm_ml.gres import slurm_gpu_total
from slurm_ml.submitd.wire import NO_VAL, NO_VAL16, normalize

_GPU_ITEM = re.compile(r"^(?:gres[:/])?gpu(?::(?P<type>[A-Za-z][\w.\-]*))?(?:[:=](?P<count>\d+))?$")


def gpu_items(spec: object) -> list[tuple[str | None, int]]:
    """(type, count) of each GPU item of a tres_per_* value."""
    out: list[tuple[str | None, int]] = []
    for raw in str(spec or "").split(","):
        m = _GPU_ITEM.match(raw.strip())
        if m:
            out.append((m["type"], int(m["count"]) if m["count"] else 1))
    return out


def applied(job: Mapping[str, Any], reply: Mapping[str, Any]) -> dict[str, Any]:
    """The job_desc after the shim assigns ``set`` ("" clears a string, NO_VAL a number)."""
    out = dict(normalize(job))
    for key, value in reply.get("set", {}).items():
        if value in (NO_VAL, NO_VAL16, ""):
            out.pop(key, None)
        else:
            out[key] = value
    return out


def total_gpus(job: Mapping[str, Any]) -> int | None:
    """GPUs a job_desc asks for in all, as Slurm counts them; None for per-socket requests.

    Per GPU type, the first of per job, per node (times nodes), per socket, per task
    (times tasks) that is given decides the count (Slurm's gres_select_util.c).
    """
    return slurm_gpu_total(((gtype, scope, count)
                            for scope in ("job", "node", "socket", "task")
                            for gtype, count in gpu_items(job.get(f"tres_per_{scope}"))),
                           nodes=job.get("min_nodes") or 1, tasks=job.get("num_tasks") or 1,
                           sockets_per_node=None)
