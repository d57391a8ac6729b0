"""Loaders for the CSV job traces: Philly (Pollux's extract), Chronus, Tiresias, Pollux.

Each reads only the columns it needs, checks them strictly (base.Row) and turns
a row into one job. Columns and units are the ones ``slurm_ml/data/SOURCES.md``
documents for each file; nothing is filled in that the file does not say, except
where a docstring below names the assumption.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path

from slurm_ml.sim.traces.base import (
    DEFAULT_GPUS_PER_NODE,
    ZERO_DURATION,
    ZERO_GPUS,
    Draft,
    Row,
    Trace,
    csv_rows,
    finish,
    vc_user,
)

__all__ = [
    "DurationModel",
    "load_chronus",
    "load_philly",
    "load_pollux_workload",
    "load_tiresias",
]

_STAMP_LEN = len("2017-09-04 10:30:41")
_EPOCH = datetime(1970, 1, 1)  # naive, like the trace's stamps: seconds on a UTC clock


def _stamp(row: Row, column: str) -> float:
    """``YYYY-MM-DD HH:MM:SS`` (no zone) as seconds on a UTC clock. The trace has no
    zone; any fixed zone gives the same gaps, and UTC has no DST jumps to add."""
    raw = row.text(column)
    try:
        if len(raw) != _STAMP_LEN or raw[10] != " ":
            raise ValueError
        stamp = datetime.fromisoformat(raw)
    except ValueError:
        raise row.error(f"{column} is not a 'YYYY-MM-DD HH:MM:SS' time: {raw!r}") from None
    return (stamp - _EPOCH).total_seconds()


def _shown(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _job_id(row: Row, seen: dict[int, str]) -> int:
    """The row's ``job_id``, which no earlier row may have."""
    job_id = row.count("job_id", "job id")
    if job_id in seen:
        raise row.error(f"job id {job_id} already used on line {seen[job_id]}")
    seen[job_id] = str(row.line)
    return job_id


def _usable(gpus: int, duration_s: float, skipped: Counter[str]) -> bool:
    if gpus == 0:
        skipped[ZERO_GPUS] += 1
        return False
    if duration_s == 0:
        skipped[ZERO_DURATION] += 1
        return False
    return True


def load_philly(
    path: str | Path, *, rebase: bool = True, gpus_per_node: int = DEFAULT_GPUS_PER_NODE
) -> Trace:
    """``traces/pollux_philly/philly.csv``: real Philly jobs, one team per VC.

    Columns ``timestamp`` (submission, no zone), ``duration`` (s), ``num_gpus``,
    ``gpu_time`` (must equal duration x num_gpus: a check that the columns are what
    we think) and ``cluster`` (the VC = team; its user is ``vc_<VC>``). The file has
    no job id: ``job_id`` is the data row's number (1 = first row after the header).
    """
    path = Path(path)
    drafts: list[Draft] = []
    skipped: Counter[str] = Counter()
    rows = 0
    for row in csv_rows(path, ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")):
        rows += 1
        submit = _stamp(row, "timestamp")
        duration = row.seconds("duration")
        gpus = row.gpus("num_gpus")
        gpu_time = row.seconds("gpu_time")
        if abs(gpu_time - duration * gpus) > 1e-6 * max(1.0, gpu_time):
            raise row.error(
                f"gpu_time {gpu_time:g} != duration {duration:g} x num_gpus {gpus}"
            )
        vc = row.text("cluster")
        if _usable(gpus, duration, skipped):
            drafts.append(Draft(rows, vc, vc_user(vc), submit, gpus, duration))
    first = min((d.submit_s for d in drafts), default=0.0)
    last = max((d.submit_s for d in drafts), default=0.0)
    teams = len({d.team for d in drafts})
    description = (
        f"Philly (Pollux extract) {path.name}: {len(drafts)} jobs, {teams} VCs, "
        f"submitted {_shown(first)} .. {_shown(last)}"
    )
    return finish(drafts, source=path, description=description, rows=rows, skipped=skipped,
                  rebase=rebase, gpus_per_node=gpus_per_node)


def load_chronus(
    path: str | Path, *, rebase: bool = True, gpus_per_node: int = DEFAULT_GPUS_PER_NODE
) -> Trace:
    """``traces/chronus_philly/trace_job_Philly_MIX1.csv``: Chronus' derived Philly mix.

    Reads ``job_id``, ``user`` (``vc_<VC>``; the team is the VC id without the prefix),
    ``num_gpu``, ``submit_time`` (s) and ``duration`` (s). Its synthetic columns
    (model, iterations, deadlines) are ignored. SOURCES.md: arrival pattern and per-VC
    mix are NOT Philly's; 184 rows have 0 GPUs and are skipped.
    """
    path = Path(path)
    drafts: list[Draft] = []
    skipped: Counter[str] = Counter()
    rows = 0
    seen: dict[int, str] = {}
    for row in csv_rows(path, ("job_id", "user", "num_gpu", "submit_time", "duration")):
        rows += 1
        job_id = _job_id(row, seen)
        user = row.text("user")
        team = user.removeprefix("vc_") or user
        submit = row.seconds("submit_time")
        gpus = row.gpus("num_gpu")
        duration = row.seconds("duration")
        if _usable(gpus, duration, skipped):
            drafts.append(Draft(job_id, team, user, submit, gpus, duration))
    description = f"Chronus Philly-derived mix {path.name} (synthetic arrivals): {len(drafts)} jobs"
    return finish(drafts, source=path, description=description, rows=rows, skipped=skipped,
                  rebase=rebase, gpus_per_node=gpus_per_node)


def load_tiresias(
    path: str | Path,
    *,
    team: str = "tiresias",
    rebase: bool = True,
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
) -> Trace:
    """``traces/tiresias/60_job.csv``: Tiresias' example trace (likely synthetic).

    Reads ``job_id``, ``num_gpu``, ``submit_time`` (s) and ``duration`` (s). It has no
    user or team column: every job belongs to ``team`` (user = team).
    """
    path = Path(path)
    drafts: list[Draft] = []
    skipped: Counter[str] = Counter()
    rows = 0
    seen: dict[int, str] = {}
    for row in csv_rows(path, ("job_id", "num_gpu", "submit_time", "duration")):
        rows += 1
        job_id = _job_id(row, seen)
        submit = row.seconds("submit_time")
        gpus = row.gpus("num_gpu")
        duration = row.seconds("duration")
        if _usable(gpus, duration, skipped):
            drafts.append(Draft(job_id, team, team, submit, gpus, duration))
    description = f"Tiresias example {path.name} (synthetic, one team): {len(drafts)} jobs"
    return finish(drafts, source=path, description=description, rows=rows, skipped=skipped,
                  rebase=rebase, gpus_per_node=gpus_per_node)


#: How a Pollux workload row gets its run time: seconds for every job, seconds per
#: application, or a function of (application, GPUs, batch size).
DurationModel = float | Mapping[str, float] | Callable[[str, int, int], float]


def load_pollux_workload(
    path: str | Path,
    durations: DurationModel,
    *,
    team: str = "pollux",
    rebase: bool = True,
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
) -> Trace:
    """``traces/pollux_workloads/workload-N.csv``: a Pollux evaluation workload.

    Reads ``time`` (submission, s), ``application`` and ``num_replicas`` (GPUs), plus
    ``batch_size`` when ``durations`` is a function. The file has NO run time: Pollux
    derives it from per-application throughput models that are not in our data kit, so
    no real source gives durations here and the caller must say how long jobs run
    (``durations``: one number, a per-application table, or a function). Every job
    belongs to ``team`` (user = team); ``job_id`` is the data row's number.
    """
    path = Path(path)
    duration_of = _duration_model(durations)
    drafts: list[Draft] = []
    skipped: Counter[str] = Counter()
    rows = 0
    for row in csv_rows(path, ("time", "application", "num_replicas", "batch_size")):
        rows += 1
        submit = row.seconds("time")
        app = row.text("application")
        gpus = row.gpus("num_replicas")
        batch = row.count("batch_size", "batch size")
        try:
            duration = duration_of(app, gpus, batch)
        except KeyError:
            raise row.error(f"no duration given for application {app!r}") from None
        if not duration >= 0:  # also refuses NaN
            raise row.error(f"duration model gave {duration!r} s for {app!r}")
        if _usable(gpus, duration, skipped):
            drafts.append(Draft(rows, team, team, submit, gpus, duration))
    description = (
        f"Pollux workload {path.name} (synthetic; durations given by the caller): "
        f"{len(drafts)} jobs"
    )
    return finish(drafts, source=path, description=description, rows=rows, skipped=skipped,
                  rebase=rebase, gpus_per_node=gpus_per_node)


def _duration_model(model: DurationModel) -> Callable[[str, int, int], float]:
    if isinstance(model, int | float):
        seconds = float(model)
        return lambda _app, _gpus, _batch: seconds
    if isinstance(model, Mapping):
        table = {str(app): float(s) for app, s in model.items()}
        return lambda app, _gpus, _batch: table[app]
    if callable(model):
        return lambda app, gpus, batch: float(model(app, gpus, batch))
    raise TypeError(f"durations must be seconds, a per-application table or a function, "
                    f"got {model!r}")

