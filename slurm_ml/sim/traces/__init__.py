"""Real GPU-cluster traces as simulator workloads, and the ``--trace SPEC`` that names one.

The loaders live in this package's modules, one per file family (:mod:`.csv_jobs`,
:mod:`.gavel`, :mod:`.calibration`, sharing :mod:`.base`); this module is the one place
callers import from. A spec is ``KIND[:PATH][?KEY=VALUE&...]``, e.g. ``philly``,
``philly:/data/philly.csv``, ``gavel:/data/seed=1?fallback=nearest``,
``pollux?duration_s=3600``. Without a PATH the kind's file in the traces shipped with
the package is used (see :func:`default_data_dir`). ``slurmdb?start=2026-11-01&end=
2026-12-01`` (or ``?days=30``, up to now) reads the site's own slurmdbd instead: a shadow
run of last month (:mod:`.slurmdb`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from slurm_ml.envvars import env
from slurm_ml.sim.traces.base import (
    DEFAULT_GPUS_PER_NODE,
    ZERO_DURATION,
    ZERO_GPUS,
    Trace,
    TraceError,
    kind_of,
    vc_user,
)
from slurm_ml.sim.traces.calibration import ClusterFigures, load_calibration, load_vc_nodes
from slurm_ml.sim.traces.csv_jobs import (
    DurationModel,
    load_chronus,
    load_philly,
    load_pollux_workload,
    load_tiresias,
)
from slurm_ml.sim.traces.gavel import FALLBACKS, NO_THROUGHPUT, load_gavel
from slurm_ml.sim.traces.slurmdb import load_slurmdb
from slurm_ml.slurm.protocol import SlurmClient

__all__ = [
    "CALIBRATION",
    "DEFAULT_GPUS_PER_NODE",
    "DEFAULT_PATHS",
    "FALLBACKS",
    "NO_THROUGHPUT",
    "VC_NODES",
    "ZERO_DURATION",
    "ZERO_GPUS",
    "ClusterFigures",
    "DurationModel",
    "Trace",
    "TraceError",
    "default_calibration",
    "default_data_dir",
    "default_vc_nodes",
    "kind_of",
    "load_calibration",
    "load_chronus",
    "load_gavel",
    "load_philly",
    "load_pollux_workload",
    "load_slurmdb",
    "load_tiresias",
    "load_trace",
    "load_vc_nodes",
    "parse_spec",
    "vc_user",
]

#: Each kind's default file or directory, relative to the data dir.
DEFAULT_PATHS: Mapping[str, str] = {
    "philly": "traces/pollux_philly/philly.csv",
    "gavel": "traces/gavel_philly_msr/seed=0",
    "chronus": "traces/chronus_philly/trace_job_Philly_MIX1.csv",
    "tiresias": "traces/tiresias/60_job.csv",
    "pollux": "traces/pollux_workloads/workload-1.csv",
}
_N = TypeVar("_N", int, float)

CALIBRATION = "traces/acme_calib/cluster_summary.csv"
VC_NODES = "traces/helios_calib/philly_vc.csv"

# Options each kind accepts in a spec, besides gpus_per_node (all kinds).
_OPTIONS: Mapping[str, tuple[str, ...]] = {
    "philly": (),
    "gavel": ("worker", "fallback", "throughputs"),
    "chronus": (),
    "tiresias": ("team",),
    "pollux": ("duration_s", "team"),
    "slurmdb": ("start", "end", "days"),
}
#: Kinds read from a live system, not a file: no PATH.
LIVE_KINDS = ("slurmdb",)


#: The traces the package ships (``slurm_ml/data/``, origins in its SOURCES.md).
PACKAGED_DATA = Path(__file__).resolve().parents[2] / "data"


def default_data_dir() -> Path:
    """``$SLURM_ML_DATA_DIR`` if set, else the traces shipped inside the package
    (:data:`PACKAGED_DATA`), so an installed slurm-ml simulates without a checkout."""
    value = env("SLURM_ML_DATA_DIR")
    return Path(value) if value else PACKAGED_DATA


def default_vc_nodes() -> dict[str, int]:
    """Nodes per Philly VC from the data kit's ``philly_vc.csv``."""
    return load_vc_nodes(default_data_dir() / VC_NODES)


def default_calibration() -> dict[str, ClusterFigures]:
    """The published per-trace figures from the data kit's ``cluster_summary.csv``."""
    return load_calibration(default_data_dir() / CALIBRATION)


def parse_spec(spec: str) -> tuple[str, Path, dict[str, str]]:
    """``KIND[:PATH][?KEY=VALUE&...]`` -> (kind, path, options); no file is read."""
    head, _, query = spec.strip().partition("?")
    kind, sep, raw_path = head.partition(":")
    kind = kind.strip().lower()
    if kind in LIVE_KINDS and sep:
        raise TraceError(f"trace spec {spec!r}: {kind} reads slurmdbd, not a file: "
                         f"drop ':{raw_path}' (give ?start=...&end=... or ?days=N)")
    if kind not in DEFAULT_PATHS and kind not in LIVE_KINDS:
        known = ", ".join((*DEFAULT_PATHS, *LIVE_KINDS))
        raise TraceError(f"trace spec {spec!r}: unknown kind {kind!r} (known: {known})")
    if sep and not raw_path.strip():
        raise TraceError(f"trace spec {spec!r}: empty path after '{kind}:'")
    if kind in LIVE_KINDS:
        path = Path()
    else:
        path = Path(raw_path.strip()) if sep else default_data_dir() / DEFAULT_PATHS[kind]
    options: dict[str, str] = {}
    allowed = ("gpus_per_node", *_OPTIONS[kind])
    for item in filter(None, query.split("&")):
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise TraceError(f"trace spec {spec!r}: option {item!r} is not KEY=VALUE")
        if key not in allowed:
            raise TraceError(
                f"trace spec {spec!r}: unknown option {key!r} for {kind} "
                f"(known: {', '.join(allowed)})"
            )
        options[key] = value
    return kind, path, options


def load_trace(spec: str, *, slurm: SlurmClient | None = None,
               now: float | None = None) -> Trace:
    """Load the trace a ``--trace`` spec names (see the module docstring). ``slurm`` and
    ``now`` serve ``slurmdb`` (default: the local Slurm commands, the wall clock)."""
    kind, path, options = parse_spec(spec)
    gpn = _number(spec, options, "gpus_per_node", int, DEFAULT_GPUS_PER_NODE)
    if kind == "slurmdb":
        start, end = _window(spec, options, time.time() if now is None else now)
        if slurm is None:
            from slurm_ml.slurm.client import CliSlurm

            slurm = CliSlurm()
        return load_slurmdb(slurm, start, end, gpus_per_node=gpn)
    if kind == "philly":
        return load_philly(path, gpus_per_node=gpn)
    if kind == "chronus":
        return load_chronus(path, gpus_per_node=gpn)
    if kind == "gavel":
        return load_gavel(
            path,
            worker=options.get("worker", "v100"),
            fallback=_choice(spec, options, "fallback", FALLBACKS),
            throughputs=options.get("throughputs") or None,
            gpus_per_node=gpn,
        )
    if kind == "tiresias":
        return load_tiresias(path, team=options.get("team", "tiresias"), gpus_per_node=gpn)
    # pollux: the file has no run times and no real source gives them (see
    # load_pollux_workload), so the spec must choose one.
    if "duration_s" not in options:
        raise TraceError(
            f"trace spec {spec!r}: Pollux workloads have no run-time column; "
            "say how long every job runs, e.g. pollux?duration_s=3600"
        )
    duration = _number(spec, options, "duration_s", float, 0.0)
    return load_pollux_workload(
        path, duration, team=options.get("team", "pollux"), gpus_per_node=gpn
    )


def _number(
    spec: str, options: Mapping[str, str], key: str, kind: Callable[[str], _N], default: _N
) -> _N:
    if key not in options:
        return default
    try:
        value = kind(options[key])
    except ValueError:
        raise TraceError(f"trace spec {spec!r}: {key}={options[key]!r} is not a number") from None
    if not value > 0:
        raise TraceError(f"trace spec {spec!r}: {key} must be > 0, got {options[key]!r}")
    return value


def _choice(spec: str, options: Mapping[str, str], key: str, allowed: tuple[str, ...]) -> str:
    value = options.get(key, allowed[0])
    if value not in allowed:
        raise TraceError(
            f"trace spec {spec!r}: {key}={value!r} (known: {', '.join(allowed)})"
        )
    return value


def _instant(spec: str, key: str, value: str) -> int:
    """Epoch seconds, or an ISO date/time (UTC unless it names its zone)."""
    if value.isdigit():
        return int(value)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise TraceError(f"trace spec {spec!r}: {key}={value!r} is neither epoch seconds "
                         "nor an ISO date such as 2026-11-01 or 2026-11-01T08:00") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp())


def _window(spec: str, options: Mapping[str, str], now: float) -> tuple[int, int]:
    """The slurmdb window: start and end, or the last ``days`` up to now."""
    end = _instant(spec, "end", options["end"]) if "end" in options else int(now)
    if "days" in options:
        if "start" in options:
            raise TraceError(f"trace spec {spec!r}: give start or days, not both")
        start = end - int(_number(spec, options, "days", float, 0.0) * 86400)
    elif "start" in options:
        start = _instant(spec, "start", options["start"])
    else:
        raise TraceError(f"trace spec {spec!r}: say which history to replay: "
                         "?start=2026-11-01&end=2026-12-01, or ?days=30")
    if not start < end:
        raise TraceError(f"trace spec {spec!r}: the window ends before it starts")
    return start, end
