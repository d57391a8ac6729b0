"""What every trace loader shares: the Trace value, TraceError, and strict field readers.

Loaders read third-party files whose quirks we do not control, so every value is
checked where it is read and a bad one is reported as ``file:line: what is wrong``;
an admin fixing a file should not have to guess which row broke the simulator.
Rows that are well formed but cannot be a job (0 GPUs, zero run time) are skipped and
counted by reason instead, since real traces legitimately contain them.
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from slurm_ml.sim.workload import LARGE, SMALL, SimJob

__all__ = [
    "DEFAULT_GPUS_PER_NODE",
    "ZERO_DURATION",
    "ZERO_GPUS",
    "Draft",
    "Row",
    "Trace",
    "TraceError",
    "csv_rows",
    "finish",
    "kind_of",
    "vc_user",
]

#: GPUs per node assumed for Philly-derived traces when splitting small from large
#: (multi-node) jobs: HeliosArtifact's QSSF simulator, which owns philly_vc.csv, runs
#: with ``--num_gpus_per_node 8`` by default (framework/QSSF Service/simulator.py).
DEFAULT_GPUS_PER_NODE = 8

#: Skip reasons, as counted in Trace.skipped.
ZERO_GPUS = "zero_gpus"
ZERO_DURATION = "zero_duration"


class TraceError(ValueError):
    """A trace file that cannot be read as the format says; the message names file:line."""


@dataclass(frozen=True, slots=True)
class Trace:
    """A loaded workload: its jobs sorted by submit time, and where they came from.

    ``rows`` counts the data rows read; ``skipped`` maps a reason to the rows left out
    for it (rows + skipped never hides a row: ``rows == len(jobs) + sum(skipped)``
    holds for a loader's output). ``epoch_s`` is the trace's own clock reading (epoch
    seconds for dated traces, else seconds from its start) at ``submit_s == 0``.
    """

    jobs: tuple[SimJob, ...]
    source: str
    description: str
    rows: int = 0
    skipped: Mapping[str, int] = field(default_factory=dict)
    epoch_s: float = 0.0

    @property
    def teams(self) -> tuple[str, ...]:
        """Every team with a job, sorted."""
        return tuple(sorted({job.team for job in self.jobs}))

    @property
    def span_s(self) -> float:
        """Seconds from the first to the last submission (0 for an empty trace)."""
        return self.jobs[-1].submit_s - self.jobs[0].submit_s if self.jobs else 0.0

    def gpu_seconds(self) -> dict[str, float]:
        """GPU-seconds each team's jobs ask for (GPUs x uninterrupted duration)."""
        out: dict[str, float] = {}
        for job in self.jobs:
            out[job.team] = out.get(job.team, 0.0) + job.gpus * job.duration_s
        return out

    def team_users(self) -> dict[str, str]:
        """Each team's main user: the one with most jobs (ties: alphabetically first)."""
        counts: dict[str, Counter[str]] = {}
        for job in self.jobs:
            counts.setdefault(job.team, Counter())[job.user] += 1
        return {
            team: min(users, key=lambda user: (-users[user], user))
            for team, users in sorted(counts.items())
        }


def vc_user(vc: str) -> str:
    """The user name of a Philly VC's jobs. The traces have no user column, and a VC id
    such as ``6214e9`` is not a valid Slurm user name (it must start with a letter);
    the Chronus trace already names VC users ``vc_<id>``, so we do the same."""
    return f"vc_{vc}"


def kind_of(gpus: int, gpus_per_node: int) -> str:
    """SMALL, or LARGE for a gang of more GPUs than one node holds."""
    return LARGE if gpus > gpus_per_node else SMALL


# --------------------------------------------------------------------------- rows


class Row(NamedTuple):
    """One data row of a table, able to read its fields strictly. (A NamedTuple, not a
    frozen dataclass: there is one per row, and it is built 4x faster.)"""

    path: Path
    line: int
    values: Mapping[str, str]

    @property
    def where(self) -> str:
        """``file:line``, the prefix of every message about this row."""
        return f"{self.path}:{self.line}"

    def error(self, what: str) -> TraceError:
        return TraceError(f"{self.where}: {what}")

    def text(self, column: str) -> str:
        value = self.values[column].strip()
        if not value:
            raise self.error(f"{column} is empty")
        return value

    def number(self, column: str) -> float:
        """A finite number."""
        raw = self.values[column]
        try:
            value = float(raw)  # the fast path: float() itself ignores surrounding blanks
        except ValueError:
            raise self.error(f"{column} is not a number: {self.text(column)!r}") from None
        if not math.isfinite(value):
            raise self.error(f"{column} is not a finite number: {raw.strip()!r}")
        return value

    def seconds(self, column: str) -> float:
        """A finite number >= 0 (a time or a duration)."""
        value = self.number(column)
        if value < 0:
            raise self.error(f"{column} must be >= 0, got {self.values[column].strip()!r}")
        return value

    def count(self, column: str, noun: str = "count") -> int:
        """A whole number >= 0 ("4" or "4.0"; not "2.5", not "-1")."""
        value = self.number(column)
        raw = self.values[column].strip()
        if value < 0:
            raise self.error(f"negative {noun} in {column}: {raw!r}")
        if value != int(value):
            raise self.error(f"{column} must be a whole number, got {raw!r}")
        return int(value)

    def gpus(self, column: str) -> int:
        return self.count(column, "GPU count")


def csv_rows(path: Path, required: Sequence[str]) -> Iterator[Row]:
    """The data rows of a CSV file with a header, after checking the header has every
    required column. Blank lines are ignored; a row with the wrong number of fields is
    an error."""
    try:
        handle = path.open(newline="", encoding="utf-8")
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    with handle:
        reader = csv.reader(handle)
        try:
            header = [name.strip() for name in next(reader)]
        except StopIteration:
            raise TraceError(f"{path}:1: empty file, expected a header row") from None
        except (UnicodeDecodeError, csv.Error) as exc:
            raise TraceError(f"{path}:1: unreadable header: {exc}") from None
        missing = [name for name in required if name not in header]
        if missing:
            raise TraceError(
                f"{path}:1: missing column(s) {', '.join(missing)} "
                f"(header has: {', '.join(header)})"
            )
        width = len(header)
        while True:
            try:
                fields = next(reader)
            except StopIteration:
                return
            except (UnicodeDecodeError, csv.Error) as exc:
                raise TraceError(f"{path}:{reader.line_num + 1}: unreadable row: {exc}") from None
            if len(fields) != width:
                if not fields or (len(fields) == 1 and not fields[0].strip()):
                    continue
                raise TraceError(
                    f"{path}:{reader.line_num}: expected {width} fields, got {len(fields)}"
                )
            yield Row(path, reader.line_num, dict(zip(header, fields, strict=True)))


class Draft(NamedTuple):
    """A job as read, before sorting and rebasing make it a SimJob. (A NamedTuple for
    the same reason as Row.)"""

    job_id: int
    team: str
    user: str
    submit_s: float  # on the trace's own clock
    gpus: int
    duration_s: float


def finish(
    drafts: list[Draft],
    *,
    source: Path | str,
    description: str,
    rows: int,
    skipped: Counter[str],
    rebase: bool,
    gpus_per_node: int,
    epoch_s: float = 0.0,
) -> Trace:
    """Sort by (submit, id), optionally rebase so the first submission is at 0, set
    each job's kind (SMALL or LARGE by ``gpus_per_node``), and wrap it all in a Trace.
    ``epoch_s`` is the trace clock at submit 0 before rebasing."""
    if gpus_per_node < 1:
        raise ValueError(f"gpus_per_node must be >= 1, got {gpus_per_node}")
    ids = Counter(draft.job_id for draft in drafts)
    if len(ids) != len(drafts):
        dup = next(job_id for job_id, n in ids.items() if n > 1)
        raise TraceError(f"{source}: job id {dup} appears more than once")
    drafts.sort(key=lambda draft: (draft.submit_s, draft.job_id))
    offset = drafts[0].submit_s if (rebase and drafts) else 0.0
    jobs = tuple(
        SimJob(
            job_id=d.job_id,
            team=d.team,
            user=d.user,
            submit_s=d.submit_s - offset,
            gpus=d.gpus,
            duration_s=d.duration_s,
            kind=kind_of(d.gpus, gpus_per_node),
        )
        for d in drafts
    )
    return Trace(
        jobs=jobs,
        source=str(source),
        description=description,
        rows=rows,
        skipped=dict(sorted(skipped.items())),
        epoch_s=epoch_s + offset,
    )
