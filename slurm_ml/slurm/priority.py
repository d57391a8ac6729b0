"""A pending job's priority and the weighted factors Slurm adds up to it, as sprio shows them.

``slurm-ml why`` explains a job's place in the queue with these numbers. No sprio we run
prints JSON (24.11 has no ``--json``), so :data:`SPRIO_FORMAT` asks for a fixed ``-o``
layout and :func:`parse_sprio` reads columns by their header names; the same reader takes
the ``sprio -l`` tables of 22.05 and 24.11 (24.11 adds ACCOUNT and QOSNAME columns).

sprio lists only jobs whose priority it computes: pending, eligible ones. Held jobs,
jobs waiting on a dependency or a future begin time get no row, and a job pending in
several partitions gets one row per partition.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from slurm_ml.slurm.errors import SlurmParseError

__all__ = ["SPRIO_FORMAT", "PriorityParts", "parse_sprio", "pick_parts"]

#: job id, partition, priority, site, age, assoc, fairshare, job size, partition factor,
#: QOS factor, nice, TRES (sprio(1) letters, the same in 22.05 and 24.11). Without a
#: width sprio pads nothing, so "|" separates the values exactly.
SPRIO_FORMAT = "%i|%r|%Y|%S|%A|%B|%F|%J|%P|%Q|%N|%T"


@dataclass(frozen=True, slots=True)
class PriorityParts:
    """One sprio row: weighted factors (already multiplied by their PriorityWeight*)."""

    job_id: int
    partition: str
    priority: int
    site: int
    age: int = 0
    assoc: int = 0
    fairshare: int = 0
    job_size: int = 0
    partition_factor: int = 0
    qos: int = 0
    nice: int = 0
    tres: tuple[tuple[str, float], ...] = ()

    @property
    def factor_sum(self) -> int:
        """Site plus every weighted factor minus nice: what Slurm sums to ``priority``
        (sprio rounds each factor, so the two can differ by a few points)."""
        parts = (self.site + self.age + self.assoc + self.fairshare + self.job_size
                 + self.partition_factor + self.qos + sum(v for _, v in self.tres))
        return round(parts) - self.nice


# Header name -> field. PARTITION appears twice (name, then factor) and QOS is the factor
# (24.11's -l shows the QOS name as QOSNAME). Unknown columns (USER, ACCOUNT) are ignored.
_INT_FIELDS = {"PRIORITY": "priority", "SITE": "site", "AGE": "age", "ASSOC": "assoc",
               "FAIRSHARE": "fairshare", "JOBSIZE": "job_size", "QOS": "qos",
               "NICE": "nice"}


def parse_sprio(text: str, header: str | None = None) -> list[PriorityParts]:
    """Rows of ``sprio -o SPRIO_FORMAT`` or ``sprio -l`` output, in order.

    The header line names the columns; pass ``header`` for ``-h`` output. Text without a
    header (e.g. "Unable to find jobs matching user/id(s) specified") has no rows.
    """
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if header is not None:
        lines.insert(0, header)
    start = next((i for i, ln in enumerate(lines) if "JOBID" in _split(ln)), None)
    if start is None:
        return []
    columns = _columns(_split(lines[start]))
    return [_row(_split(ln), columns, ln) for ln in lines[start + 1:]]


def pick_parts(rows: Iterable[PriorityParts], job_id: int) -> PriorityParts | None:
    """``job_id``'s row; of several (one per partition) the highest priority, first wins."""
    best: PriorityParts | None = None
    for r in rows:
        if r.job_id == job_id and (best is None or r.priority > best.priority):
            best = r
    return best


def _split(line: str) -> list[str]:
    return [c.strip() for c in line.split("|")] if "|" in line else line.split()


def _columns(names: list[str]) -> dict[int, str]:
    """Column index -> PriorityParts field."""
    out: dict[int, str] = {}
    partitions = [i for i, n in enumerate(names) if n == "PARTITION"]
    for i, name in enumerate(names):
        if name == "JOBID":
            out[i] = "job_id"
        elif name == "TRES":
            out[i] = "tres"
        elif name in _INT_FIELDS:
            out[i] = _INT_FIELDS[name]
    if partitions:
        out[partitions[0]] = "partition"
    if len(partitions) > 1:
        out[partitions[1]] = "partition_factor"
    if "job_id" not in out.values() or "priority" not in out.values():
        raise SlurmParseError(f"sprio header without JOBID and PRIORITY: {names!r}")
    return out


def _row(cells: list[str], columns: dict[int, str], line: str) -> PriorityParts:
    ints: dict[str, int] = {}
    partition = ""
    tres: tuple[tuple[str, float], ...] = ()
    try:
        for i, field in columns.items():
            cell = cells[i] if i < len(cells) else ""  # -l leaves an empty TRES out
            if field == "partition":
                partition = cell
            elif field == "tres":
                tres = _tres(cell)
            elif cell or field not in ("job_id", "priority"):
                ints[field] = int(cell) if cell else 0
        return PriorityParts(
            job_id=ints["job_id"], partition=partition, priority=ints["priority"],
            site=ints.get("site", 0), age=ints.get("age", 0), assoc=ints.get("assoc", 0),
            fairshare=ints.get("fairshare", 0), job_size=ints.get("job_size", 0),
            partition_factor=ints.get("partition_factor", 0), qos=ints.get("qos", 0),
            nice=ints.get("nice", 0), tres=tres)
    except (KeyError, ValueError) as exc:
        raise SlurmParseError(f"sprio row not understood ({exc!r}): {line!r}") from exc


def _tres(cell: str) -> tuple[tuple[str, float], ...]:
    """``cpu=0,gres/gpu=250`` -> (("cpu", 0.0), ("gres/gpu", 250.0))."""
    out = []
    for item in cell.split(","):
        name, sep, value = item.partition("=")
        if sep and name:
            out.append((name.strip(), float(value)))
    return tuple(out)
