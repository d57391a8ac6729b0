"""The job's efficiency summary, kept in its AdminComment record so it outlives the
samples (PostgreSQL keeps those for a while; slurmdbd keeps the job).

It goes under the ``js`` key of the one slurm-ml record (``slurm-ml {json}``), beside
admission's keys, which stay as they were:

    "js": {"v": 1, "at": <epoch>, "el": <elapsed s>,
           "g": [[node, gpu, samples, mean %, peak %, sd, peak MB, total MB, idle %], ...],
           "z": [idle s, MB held],        (the zombie rule's verdict, when it gave one)
           "zw": "<why no verdict>",      (when it could not give one)
           "r": [[count, per, type], ...] (the GPU request as Slurm held it)}

Every number is rounded to an integer and a missing one is null. An AdminComment that
does not hold a slurm-ml record belongs to someone else and is never overwritten.

Size: the whole AdminComment stays under ``MAX_ADMIN_COMMENT`` characters. A job with
too many GPUs for one row each gets one row per node (``gpu`` = minus the node's GPU
count, the figures over all of them; the tenth field counts the node's unused GPUs), and
with too many nodes for that, no rows and ``"cut"``: the GPU count.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from slurm_ml.model import GpuRequest
from slurm_ml.policy.admission.decision import RECORD_PREFIX, read_record
from slurm_ml.policy.jobstats.usage import GpuUse, ZombieShape

VERSION = 1
KEY = "js"
#: slurmdbd keeps AdminComment in a TEXT column (64 KiB); sacct and squeue print it on
#: one line. 4000 characters holds one row per GPU for 64 GPUs.
MAX_ADMIN_COMMENT = 4000


@dataclass(frozen=True, slots=True)
class Summary:
    at: int
    uses: tuple[GpuUse, ...]
    elapsed_s: int | None = None
    zombie: ZombieShape | None = None
    zombie_unjudged: str | None = None
    request: tuple[GpuRequest, ...] = ()
    #: rows stand for whole nodes (``gpu`` < 0: that many GPUs), not single GPUs
    per_node: bool = False
    #: unused GPUs per node, where the rows stand for whole nodes
    unused: tuple[tuple[str, int], ...] = ()
    cut: int | None = None  # GPUs left out entirely (too many nodes to list)


def _quote_free(text: str) -> str:
    """sacctmgr turns ' as well as " into a backtick, and the reader turns backticks back
    into double quotes: a quote inside a string would end it. (JSON writes the
    replacement as an ASCII escape.)"""
    return text.replace("'", "\u2019").replace('"', "\u2019").replace("`", "\u2019")


def _r(x: float | None) -> int | None:
    return None if x is None else round(x)


def _row(u: GpuUse) -> list[Any]:
    return [u.node, u.gpu, u.samples, _r(u.mean_util_pct), _r(u.peak_util_pct),
            _r(u.util_sd), u.peak_mem_mb, u.total_mem_mb,
            None if u.idle_frac is None else round(u.idle_frac * 100)]


def _num(x: object) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def _int(x: object) -> int | None:
    n = _num(x)
    return None if n is None else int(n)


def _use(row: object) -> GpuUse | None:
    if not isinstance(row, list) or len(row) < 9 or not isinstance(row[0], str):
        return None
    gpu = _int(row[1])
    if gpu is None:
        return None
    idle = _num(row[8])
    return GpuUse(node=row[0], gpu=gpu, samples=_int(row[2]) or 0, mean_util_pct=_num(row[3]),
                  peak_util_pct=_num(row[4]), util_sd=_num(row[5]), peak_mem_mb=_int(row[6]),
                  total_mem_mb=_int(row[7]), idle_frac=None if idle is None else idle / 100)


def _encode(s: Summary, rows: list[list[Any]] | None) -> dict[str, Any]:
    out: dict[str, Any] = {"v": VERSION, "at": s.at}
    if s.elapsed_s is not None:
        out["el"] = s.elapsed_s
    if rows is not None:
        out["g"] = rows
    else:
        out["cut"] = sum(-u.gpu if u.gpu < 0 else 1 for u in s.uses)
    if s.zombie is not None:
        out["z"] = [s.zombie.idle_s, s.zombie.mem_mb]
    elif s.zombie_unjudged:
        out["zw"] = _quote_free(s.zombie_unjudged[:200])
    if s.request:
        out["r"] = [[g.count, g.per, g.gpu_type] for g in s.request]
    return out


def node_rows(uses: Sequence[GpuUse], idle_pct: float) -> tuple[list[list[Any]], dict[str, int]]:
    """One row per node over its GPUs, and its unused GPUs (peak at or below ``idle_pct``)."""
    nodes: dict[str, list[GpuUse]] = {}
    for u in uses:
        nodes.setdefault(u.node, []).append(u)
    rows, unused = [], {}
    for node, us in sorted(nodes.items()):
        count = sum(-u.gpu if u.gpu < 0 else 1 for u in us)
        means = [u.mean_util_pct for u in us if u.mean_util_pct is not None]
        idles = [u.idle_frac for u in us if u.idle_frac is not None]
        peaks = [u.peak_util_pct for u in us if u.peak_util_pct is not None]
        sds = [u.util_sd for u in us if u.util_sd is not None]
        mems = [u.peak_mem_mb for u in us if u.peak_mem_mb is not None]
        totals = [u.total_mem_mb for u in us if u.total_mem_mb is not None]
        unused[node] = sum(1 for u in us if u.gpu >= 0 and u.samples
                           and u.peak_util_pct is not None and u.peak_util_pct <= idle_pct)
        agg = GpuUse(node=node, gpu=-count, samples=sum(u.samples for u in us),
                     mean_util_pct=sum(means) / len(means) if means else None,
                     peak_util_pct=max(peaks) if peaks else None,
                     util_sd=max(sds) if sds else None,
                     peak_mem_mb=max(mems) if mems else None,
                     total_mem_mb=min(totals) if totals else None,
                     idle_frac=sum(idles) / len(idles) if idles else None)
        rows.append([*_row(agg), unused[node]])
    return rows, unused


def _text(record: dict[str, object]) -> str:
    return RECORD_PREFIX + json.dumps(record, separators=(",", ":"), sort_keys=True)


def merge_uses(old: Sequence[GpuUse], new: Sequence[GpuUse], node: str) -> tuple[GpuUse, ...]:
    """``new``'s rows for ``node`` win; elsewhere the row with more samples (ties: new).

    Each node's epilog writes the rows of every GPU the job's samples cover, and its own
    node's with the final memory reading, so a node whose write was overwritten by a
    concurrent one still has its samples' figures in the other write.
    """
    rows = {(u.node, u.gpu): u for u in old}
    for u in new:
        kept = rows.get((u.node, u.gpu))
        if u.node == node or kept is None or u.samples >= kept.samples:
            rows[(u.node, u.gpu)] = u
    return tuple(rows[k] for k in sorted(rows))


def with_summary(admin_comment: str, summary: Summary, *, node: str,
                 idle_pct: float) -> str | None:
    """The AdminComment with ``summary`` merged into its slurm-ml record (see
    :func:`merge_uses`); None when the AdminComment is not slurm-ml's to write."""
    record = read_record(admin_comment)
    if record is None and admin_comment.strip():
        return None
    record = dict(record or {})
    old = read_summary(admin_comment)
    uses = summary.uses
    if old is not None and not old.per_node and old.cut is None:
        uses = merge_uses(old.uses, summary.uses, node)
    merged = replace(summary, uses=uses)
    record[KEY] = _encode(merged, [_row(u) for u in uses])
    text = _text(record)
    if len(text) > MAX_ADMIN_COMMENT:
        record[KEY] = _encode(merged, node_rows(uses, idle_pct)[0])
        text = _text(record)
    if len(text) > MAX_ADMIN_COMMENT:
        record[KEY] = _encode(merged, None)
        text = _text(record)
    return text


def read_summary(admin_comment: str) -> Summary | None:
    """The summary in an AdminComment; None when it holds none (or one of a later version
    this code cannot read)."""
    record = read_record(admin_comment)
    js = record.get(KEY) if record is not None else None
    if not isinstance(js, dict) or js.get("v") != VERSION:
        return None
    rows = js.get("g")
    uses = tuple(u for r in rows if (u := _use(r)) is not None) if isinstance(rows, list) else ()
    per = any(u.gpu < 0 for u in uses)
    unused = tuple((r[0], int(r[9])) for r in rows or () if per and isinstance(r, list)
                   and len(r) >= 10 and isinstance(r[0], str) and _int(r[9]) is not None)
    z = js.get("z")
    zombie = (ZombieShape(int(z[0]), int(z[1])) if isinstance(z, list) and len(z) == 2
              and all(_int(x) is not None for x in z) else None)
    req = tuple(GpuRequest(int(r[0]), str(r[1]), r[2] if isinstance(r[2], str) else None)
                for r in js.get("r") or () if isinstance(r, list) and len(r) == 3
                and _int(r[0]) is not None and isinstance(r[1], str))
    zw = js.get("zw")
    return Summary(at=_int(js.get("at")) or 0, uses=uses, elapsed_s=_int(js.get("el")),
                   zombie=zombie, zombie_unjudged=zw if isinstance(zw, str) else None,
                   request=req, per_node=per, unused=unused, cut=_int(js.get("cut")))
