"""Loader for Gavel's per-VC Philly-derived ``.trace`` files (stanford-futuredata/gavel).

The files keep Philly's arrival times and GPU counts per VC but size each job in
training steps of a model type Gavel assigned; a run time needs Gavel's measured
throughputs (``simulation_throughputs.json``), as SOURCES.md explains. Those run times
do not follow Philly's, so this loader is for multi-team arrival patterns, not for
calibration against Philly's published waits (use ``load_philly`` for that).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from slurm_ml.sim.traces.base import (
    DEFAULT_GPUS_PER_NODE,
    ZERO_DURATION,
    ZERO_GPUS,
    Draft,
    Row,
    Trace,
    TraceError,
    finish,
    vc_user,
)

__all__ = ["FALLBACKS", "NO_THROUGHPUT", "load_gavel"]

#: The 7 TAB-separated fields of the 2019 layout these files use (Gavel's parse_trace
#: at the time, e.g. commit 6fb30f9), in order.
FIELDS = (
    "job_type", "command", "num_steps_arg", "needs_data_dir",
    "total_steps", "arrival_time", "scale_factor",
)
THROUGHPUTS = "simulation_throughputs.json"
#: Skip reason: no measured throughput for (job type, GPUs) on the chosen worker type.
NO_THROUGHPUT = "no_throughput"
#: "skip": drop such jobs (counted under NO_THROUGHPUT). "nearest": use the same job
#: type's throughput at the largest measured GPU count below the job's, i.e. assume
#: the extra GPUs bring no speed-up (an assumption of ours, not Gavel's data).
FALLBACKS = ("skip", "nearest")

# job type -> GPUs -> isolated steps/s
_Table = dict[str, dict[int, float]]


def load_gavel(
    path: str | Path,
    *,
    worker: str = "v100",
    fallback: str = "skip",
    throughputs: str | Path | None = None,
    rebase: bool = True,
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
) -> Trace:
    """One ``<vc>.trace`` file, or every ``*.trace`` in a directory, as one workload.

    The team is the file's VC (its name without ``.trace``), the user ``vc_<VC>``.
    Duration = ``total_steps`` / the isolated (``"null"``) throughput of
    ``(job_type, scale_factor)`` on ``worker`` (default V100: Gavel's
    ``cluster_specs.json`` is 500 V100s). Keys exist only for 1, 2, 4 and 8 GPUs, so
    ``fallback`` says what happens to the others (see FALLBACKS). Each file's times
    start at 0 (Gavel wrote them per VC), so a directory overlays the VCs on one clock.
    ``job_id`` is the row's number, counted from 1 across the files in name order.
    """
    path = Path(path)
    if fallback not in FALLBACKS:
        raise ValueError(f"fallback must be one of {', '.join(FALLBACKS)}, got {fallback!r}")
    if path.is_dir():
        files = sorted(path.glob("*.trace"))
        if not files:
            raise TraceError(f"{path}: no *.trace files in this directory")
    elif path.is_file():
        files = [path]
    else:
        raise TraceError(f"{path}: no such file or directory")
    table = _throughputs(Path(throughputs) if throughputs else _find_throughputs(path), worker)

    drafts: list[Draft] = []
    skipped: Counter[str] = Counter()
    rows = 0
    for file in files:
        vc = file.stem
        for row in _rows(file):
            rows += 1
            gpus = row.gpus("scale_factor")
            steps = row.seconds("total_steps")  # a count of steps; >= 0 like a time
            submit = row.seconds("arrival_time")
            job_type = row.text("job_type")
            if gpus == 0:
                skipped[ZERO_GPUS] += 1
                continue
            if steps == 0:
                skipped[ZERO_DURATION] += 1
                continue
            rate = _rate(table, job_type, gpus, fallback)
            if rate is None:
                skipped[NO_THROUGHPUT] += 1
                continue
            drafts.append(Draft(rows, vc, vc_user(vc), submit, gpus, steps / rate))
    where = path.name if path.is_file() else f"{path.name}/ ({len(files)} files)"
    description = (
        f"Gavel per-VC Philly-derived traces {where}: {len(drafts)} jobs; run time = "
        f"steps / isolated {worker} throughput of Gavel's assigned model types "
        f"(not Philly run times), fallback {fallback}"
    )
    return finish(drafts, source=path, description=description, rows=rows, skipped=skipped,
                  rebase=rebase, gpus_per_node=gpus_per_node)


def _rows(file: Path) -> list[Row]:
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"{file}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TraceError(f"{file}: not UTF-8 text (byte {exc.start})") from None
    out: list[Row] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != len(FIELDS):
            raise TraceError(
                f"{file}:{number}: expected {len(FIELDS)} TAB-separated fields "
                f"({', '.join(FIELDS)}), got {len(parts)}"
            )
        out.append(Row(file, number, dict(zip(FIELDS, parts, strict=True))))
    return out


def _find_throughputs(path: Path) -> Path:
    """simulation_throughputs.json in the trace's directory or up to two above it
    (the data kit has it in gavel_philly_msr/, the traces in gavel_philly_msr/seed=N/)."""
    start = path if path.is_dir() else path.parent
    for folder in (start, start.parent, start.parent.parent):
        candidate = folder / THROUGHPUTS
        if candidate.is_file():
            return candidate
    raise TraceError(f"{path}: no {THROUGHPUTS} in its directory or the two above it; "
                     "pass throughputs= (gavel:<path>?throughputs=<file>)")


def _throughputs(path: Path, worker: str) -> _Table:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TraceError(f"{path}: not readable JSON: {exc}") from None
    if not isinstance(data, dict):
        raise TraceError(f"{path}: expected a JSON object of worker types")
    if worker not in data:
        raise TraceError(f"{path}: no worker type {worker!r} (known: {', '.join(sorted(data))})")
    entries = data[worker]
    if not isinstance(entries, dict):
        raise TraceError(f"{path}: {worker}: expected an object of job keys")
    table: _Table = {}
    for key, value in entries.items():
        job_type, gpus = _key(path, worker, key)
        rate = value.get("null") if isinstance(value, Mapping) else None
        if not isinstance(rate, int | float) or isinstance(rate, bool):
            raise TraceError(f"{path}: {worker}: {key}: no numeric \"null\" throughput")
        if rate > 0:
            table.setdefault(job_type, {})[gpus] = float(rate)
    return table


def _key(path: Path, worker: str, key: str) -> tuple[str, int]:
    """"('ResNet-50 (batch size 64)', 4)" -> ("ResNet-50 (batch size 64)", 4)."""
    head, sep, tail = key.rpartition(", ")
    if not (sep and head.startswith("('") and head.endswith("'") and tail.endswith(")")):
        raise TraceError(f"{path}: {worker}: key {key!r} is not \"('<job type>', <GPUs>)\"")
    try:
        gpus = int(tail[:-1])
    except ValueError:
        raise TraceError(f"{path}: {worker}: key {key!r}: GPU count is not a number") from None
    return head[2:-1], gpus


def _rate(table: _Table, job_type: str, gpus: int, fallback: str) -> float | None:
    rates = table.get(job_type, {})
    if gpus in rates:
        return rates[gpus]
    if fallback == "nearest":
        below = [g for g in rates if g < gpus]
        if below:
            return rates[max(below)]
    return None
