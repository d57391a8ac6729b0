"""A what-if as one YAML file: ``slurm-ml sim --scenario FILE.yaml``.

Everything that defines a simulated run lives in one strict file so any result can be
rerun from it; CLI flags override it and the report records the resolved scenario.
The file is read by the one strict YAML reader (:mod:`slurm_ml.config.yaml_reader`, as
slurm-ml.yaml is), and every problem in it is reported at once, each as ``file:line:
what is wrong`` like the trace loaders: a duplicate key, a bad value, an unknown key (a
typo must not silently fall back to a default). A knob set by an override (``--set``, a
sweep point) is named by the override instead of a line.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from slurm_ml.config.errors import Unreadable, clip, one_line, show
from slurm_ml.config.parse import MAX_ISSUES
from slurm_ml.config.yaml_reader import (
    DataPath,
    Document,
    Spot,
    YamlError,
    read_text,
    read_yaml,
)
from slurm_ml.policy.admission.request import PARALLEL_KINDS

__all__ = [
    "Accounts",
    "DebugMix",
    "Faults",
    "Override",
    "Requests",
    "Scenario",
    "ScenarioError",
    "load_scenario",
    "parse_override",
    "parse_scenario",
]

#: ``KEY.PATH=VALUE`` read: the path of scenario keys, and the value (YAML data).
Override = tuple[tuple[str, ...], Any]


class ScenarioError(ValueError):
    """A scenario that cannot be used, with every problem found: each names file:line,
    or the override that set the knob."""

    def __init__(self, issues: str | Sequence[str]) -> None:
        self.issues: list[str] = [issues] if isinstance(issues, str) else list(issues)
        super().__init__("\n".join(self.issues))

    def __reduce__(self) -> tuple[Any, ...]:
        # Keep the issues when pickled (a sweep point fails in a worker process).
        return (type(self), (self.issues,))


@dataclasses.dataclass(frozen=True, slots=True)
class DebugMix:
    """Ai2's interactive debug jobs: sizes drawn from ``gpus`` (GPUs -> probability)."""

    rate_per_team_per_hour: float = 0.0
    gpus: Mapping[int, float] = dataclasses.field(default_factory=lambda: {1: 1.0})
    duration_s: float = 600.0
    min_runtime_s: float = 900.0


@dataclasses.dataclass(frozen=True, slots=True)
class Faults:
    """Node faults: each node fails as a Poisson process of this rate (seeded per node);
    its jobs are requeued from their last checkpoint and it is out for ``repair_hours``."""

    rate_per_node_per_day: float = 0.0
    repair_hours: float = 4.0


@dataclasses.dataclass(frozen=True, slots=True)
class Requests:
    """What each job asks for where the trace does not say, drawn per job from the seed:
    the GRES type it names (``--gres=gpu:<type>:N``) and the GPU memory it needs per
    GPU (GB), one distribution for every job or one per asked type (``by_type``). Either
    may be left out; an empty mapping draws nothing."""

    gpu_type: Mapping[str, float] = dataclasses.field(default_factory=dict)
    mem_gb: Mapping[float, float] = dataclasses.field(default_factory=dict)
    #: asked type -> its own memory-need distribution (instead of ``mem_gb``)
    mem_gb_by_type: Mapping[str, Mapping[float, float]] = dataclasses.field(
        default_factory=dict)
    #: the --time-min an allocated trace job asks for, in hours (``RUN``: its whole run);
    #: empty: every such job keeps the trace's contract (1 h)
    min_runtime_h: Mapping[float | str, float] = dataclasses.field(default_factory=dict)
    #: how a job of several GPUs spreads its work, ``data`` or ``tensor``: the
    #: ``parallel=`` its submission carries in --comment; empty: none says
    parallel: Mapping[str, float] = dataclasses.field(default_factory=dict)


#: ``requests.min_runtime_h`` key: the job protects its whole run (--time-min = --time)
RUN = "run"


@dataclasses.dataclass(frozen=True, slots=True)
class Accounts:
    """The config's own budget tree, with the trace's teams and users mapped onto its
    accounts (projects): a user's mapping wins over their team's."""

    teams: Mapping[str, str] = dataclasses.field(default_factory=dict)
    users: Mapping[str, str] = dataclasses.field(default_factory=dict)
    default: str | None = None  # the account of a job no mapping names (None: an error)


@dataclasses.dataclass(frozen=True, slots=True)
class Scenario:
    """A resolved what-if. ``None`` means "the CLI default"."""

    source: str = "<flags>"
    trace: str | None = None
    start_hours: float | None = None
    hours: float | None = None
    scale: float | None = None
    target_load: float | None = None
    nodes: int | None = None
    gpus_per_node: int | None = None
    leaf_nodes: int | None = None
    gpu_type: str | None = None
    #: the cluster in slurm-ml.yaml's own schema (raw YAML data; the config parser checks it)
    node_classes: tuple[Mapping[str, Any], ...] | None = None
    gpu_types: Mapping[str, Any] | None = None
    weights: Mapping[str, float] | None = None
    accounts: Accounts | None = None
    unallocated: float | None = None
    debug: DebugMix | None = None
    faults: Faults = Faults()
    policy: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    policies: tuple[str, ...] | None = None
    seed: int | None = None
    cycle_s: float | None = None
    partition_by_team: bool = False
    requests: Requests | None = None
    #: each submission goes through policy.admission (capability matching, shaping)
    admission: bool = False

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, everything recorded (the report's copy of the scenario)."""
        out = dataclasses.asdict(self)
        if self.debug is not None:
            out["debug"]["gpus"] = {str(k): v for k, v in self.debug.gpus.items()}
        out["policies"] = None if self.policies is None else list(self.policies)
        if self.node_classes is not None:
            out["node_classes"] = [dict(nc) for nc in self.node_classes]
        if self.requests is not None:
            rq = self.requests
            out["requests"]["mem_gb"] = {f"{k:g}": v for k, v in rq.mem_gb.items()}
            out["requests"]["mem_gb_by_type"] = {
                t: {f"{k:g}": v for k, v in d.items()} for t, d in rq.mem_gb_by_type.items()}
            out["requests"]["min_runtime_h"] = {
                k if isinstance(k, str) else f"{k:g}": v for k, v in rq.min_runtime_h.items()}
        return out


def _shown(value: object) -> str:
    """A value read from the file, for a message: as the file spells it, on one line
    and clipped (the value may be a megabyte of text)."""
    return one_line(show(value))


def _label(path: tuple[str, ...], value: object) -> str:
    """What names the values an override set, in messages."""
    shown = str(value) if isinstance(value, Unreadable) else repr(value)
    return f"override {'.'.join(path)}={clip(one_line(shown), 80)}"


def _all_known(value: object, known: Mapping[str, Any]) -> bool:
    """Whether :meth:`_Reader.mapping` kept every key of ``value`` (a problem such as
    "give exactly one of" is only worth saying when no key was unknown)."""
    return isinstance(value, dict) and len(value) == len(known)


def _dotted(path: DataPath) -> str:
    return ".".join(str(part) for part in path)


class _Reader:
    """Checks the scenario's data, gathering every problem with where it is written."""

    def __init__(self, source: str, spots: Mapping[DataPath, Spot],
                 set_by: Mapping[DataPath, str]) -> None:
        self.source = source
        self.spots = spots  # path -> where the file has it
        self.set_by = set_by  # path -> the override that set it
        self.issues: list[tuple[float, str]] = []  # (line, the problem as reported)

    def at(self, path: DataPath, *, key: bool = False) -> tuple[float, str]:
        """The line of the value at ``path`` (of the key naming it, with ``key``) and
        ``file:line``; or, where an override set it or what holds it, infinity (after
        the file's lines) and ``file: override ...``."""
        for depth in range(len(path), -1, -1):
            head = path[:depth]
            if head in self.set_by:
                return math.inf, f"{self.source}: {self.set_by[head]}"
            if head in self.spots:
                spot = self.spots[head]
                line = spot.key_line if key and head == path else spot.line
                return line, f"{self.source}:{line}"
        return math.inf, self.source

    def fail(self, path: DataPath, message: str, *, key: bool = False) -> None:
        line, where = self.at(path, key=key)
        self.issues.append((line, f"{where}: {message}"))

    def mapping(self, value: object, path: DataPath, what: str,
                keys: set[str]) -> dict[str, Any] | None:
        """The mapping's entries with known string keys (any key when ``keys`` is
        empty); None when it is no mapping. Every other key is reported."""
        if not isinstance(value, dict):
            self.fail(path, f"{what} must be a mapping")
            return None
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                self.fail((*path, k), f"{what}: keys must be strings", key=True)
            elif keys and k not in keys:
                self.fail((*path, k), f"{what}: unknown key {_shown(k)} (known: "
                          f"{', '.join(sorted(keys))})", key=True)
            else:
                out[k] = v
        return out

    def number(self, value: object, path: DataPath, *, what: str | None = None,
               low: float = 0.0, strict: bool = False, high: float = math.inf,
               key: bool = False) -> float | None:
        what = what or _dotted(path)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(
                value):
            self.fail(path, f"{what} must be a number, got {_shown(value)}", key=key)
            return None
        if value < low or (strict and value == low) or value > high:
            bound = f"> {low:g}" if strict else f">= {low:g}"
            rng = bound if high == math.inf else f"in [{low:g}, {high:g}]"
            self.fail(path, f"{what} must be {rng}, got {_shown(value)}", key=key)
            return None
        return float(value)

    def integer(self, value: object, path: DataPath, *, what: str | None = None,
                low: int = 1, key: bool = False) -> int | None:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            self.fail(path, f"{what or _dotted(path)} must be an integer >= {low}, got "
                      f"{_shown(value)}", key=key)
            return None
        return value

    def string(self, value: object, path: DataPath, *, what: str | None = None,
               key: bool = False) -> str | None:
        if not isinstance(value, str) or not value:
            self.fail(path, f"{what or _dotted(path)} must be a non-empty string, got "
                      f"{_shown(value)}", key=key)
            return None
        return value


def parse_override(text: str) -> Override:
    """``KEY.PATH=VALUE`` (VALUE read as YAML by the strict reader: ``7``, ``2.5``,
    ``fifo``, ``{1: 1.0}``)."""
    key, sep, value = text.partition("=")
    path = tuple(key.strip().split("."))
    if not sep or not all(path):
        raise ScenarioError(f"override {text!r}: expected KEY.PATH=VALUE")
    where = f"override {text!r}: value"
    try:
        document = read_yaml(value, where)
    except YamlError as exc:
        raise ScenarioError(exc.message) from None
    if document.duplicates:
        raise ScenarioError([f"{where}: {dup.problem}" for dup in document.duplicates])
    return path, document.data


def _override(root: dict[Any, Any], path: tuple[str, ...], value: Any, label: str, *,
              set_by: dict[DataPath, str], spots: dict[DataPath, Spot]) -> str | None:
    """Set ``value`` at ``path`` of ``root``, making the mappings on the way that are
    missing (and copying those there: an alias may share one); the new values are
    ``label``'s, in ``set_by``. None, or why it cannot be set."""
    if not path:
        return f"{label}: cannot override the whole scenario"
    node = root
    for depth, key in enumerate(path[:-1], start=1):
        child = node.get(key, {})
        if not isinstance(child, dict):
            return f"{label}: {'.'.join(path[:depth])} is not a mapping"
        if key not in node:
            set_by[path[:depth]] = label
        child = node[key] = dict(child)
        node = child
    node[path[-1]] = value
    set_by[path] = label
    for stale in [p for p in spots if p[:len(path)] == path]:  # what the file had there
        del spots[stale]
    return None


def load_scenario(path: str | Path, overrides: Sequence[Override] = ()) -> Scenario:
    """Read and check a scenario file (see docs/simulator.md for its keys), with
    ``overrides`` (from :func:`parse_override`) set on it first: a sweep point is the
    file with one knob changed, checked by the same rules. Raises ScenarioError with
    every problem found."""
    source = str(path)
    try:
        text = read_text(path, source, noun="a scenario")
    except YamlError as exc:
        raise ScenarioError(exc.message) from None
    return parse_scenario(text, source, overrides)


def parse_scenario(text: str, source: str = "<scenario>",
                   overrides: Sequence[Override] = ()) -> Scenario:
    """:func:`load_scenario` on the file's text."""
    try:
        document = read_yaml(text, source, spots=True)
    except YamlError as exc:
        raise ScenarioError(exc.message) from None
    return _scenario(document, overrides)


def _scenario(document: Document, overrides: Sequence[Override]) -> Scenario:
    """The scenario of ``document`` with ``overrides`` set on it; every problem is
    reported at once, the file's in line order, then the overrides'."""
    source = document.source
    data = document.data
    if data is None and not overrides:
        raise ScenarioError(f"{source}:1: empty scenario file")
    spots = dict(document.spots)
    set_by: dict[DataPath, str] = {}
    unset: list[tuple[float, str]] = []  # overrides that could not be set
    if isinstance(data, dict) or data is None:
        data = _names_as_written(dict(data or {}), spots)
        for path, value in overrides:
            why = _override(data, path, value, _label(path, value), set_by=set_by,
                            spots=spots)
            if why is not None:
                unset.append((math.inf, f"{source}: {why}"))
    r = _Reader(source, spots, set_by)
    fields = _read(r, data)
    duplicates = [(dup.line, f"{source}:{dup.line}: {dup.problem}")
                  for dup in document.duplicates]
    issues = [text for _, text in sorted([*duplicates, *r.issues, *unset],
                                         key=lambda issue: issue[0])]
    if len(issues) > MAX_ISSUES:  # a report stays readable, as the config's does
        issues[MAX_ISSUES:] = [f"{source}: {len(issues) - MAX_ISSUES} more problem(s) not "
                               f"listed (the first {MAX_ISSUES} are above)"]
    if issues:
        raise ScenarioError(issues)
    return Scenario(source=source, **fields)


#: Mappings whose keys are names (trace teams, users, GPU types): each key is the name
#: as written, so a team called 103959 or 0123 is that team, not the number YAML reads.
_NAMED = (("budgets", "weights"), ("budgets", "accounts", "teams"),
          ("budgets", "accounts", "users"), ("requests", "mem_gb"))


def _names_as_written(data: dict[Any, Any], spots: dict[DataPath, Spot]) -> dict[Any, Any]:
    """``data`` with the keys of the :data:`_NAMED` mappings as written (copied where
    changed), and ``spots`` moved with them. ``requests.mem_gb`` is named only when it
    maps GPU types to distributions; otherwise its keys are GB, numbers."""
    for path in _NAMED:
        at: Any = data
        for part in path:
            at = at.get(part) if isinstance(at, dict) else None
        if not isinstance(at, dict) or all(isinstance(k, str) for k in at):
            continue
        if path[-1] == "mem_gb" and not all(isinstance(v, dict) for v in at.values()):
            continue
        renamed: dict[Any, Any] = {}
        taken = {key for key in at if isinstance(key, str)}
        for key, value in at.items():
            spot = spots.get((*path, key))
            name = key
            # 1 beside "1" is left a number, for the reader to refuse
            if (not isinstance(key, str) and spot is not None and spot.key is not None
                    and spot.key not in taken):
                name = spot.key
                taken.add(name)
                for old in [p for p in spots if p[:len(path) + 1] == (*path, key)]:
                    spots[(*path, name, *old[len(path) + 1:])] = spots.pop(old)
            renamed[name] = value
        data = _with(data, path, renamed)
    return data


def _with(data: dict[Any, Any], path: DataPath, value: Any) -> dict[Any, Any]:
    """``data`` with ``value`` at ``path`` (whose mappings exist), each copied on the way."""
    if not path:
        return dict(value)
    return {**data, path[0]: _with(data[path[0]], path[1:], value) if len(path) > 1
            else value}


def _read(r: _Reader, data: object) -> dict[str, Any]:
    """The scenario's fields, section by section in the file's order (a field whose
    value was bad is left out: its problem is in ``r.issues``)."""
    top = r.mapping(data, (), "scenario", set(_SECTIONS))
    fields: dict[str, Any] = {}
    for name, value in (top or {}).items():
        fields.update(_SECTIONS[name](r, value))
    return {k: v for k, v in fields.items() if v is not None}


# --------------------------------------------------------------------------- sections
# Each reads one top-level key's value into Scenario fields.


def _trace(r: _Reader, value: object) -> dict[str, Any]:
    return {"trace": r.string(value, ("trace",))}


def _slice(r: _Reader, value: object) -> dict[str, Any]:
    sl = r.mapping(value, ("slice",), "slice", {"start_hours", "hours"}) or {}
    out: dict[str, Any] = {}
    if "start_hours" in sl:
        out["start_hours"] = r.number(sl["start_hours"], ("slice", "start_hours"))
    if "hours" in sl:
        out["hours"] = r.number(sl["hours"], ("slice", "hours"), strict=True)
    return out


def _arrivals(r: _Reader, value: object) -> dict[str, Any]:
    ar = r.mapping(value, ("arrivals",), "arrivals", {"scale", "target_load"})
    if ar is None:
        return {}
    if len(ar) != 1:
        if _all_known(value, ar):  # else an unknown key is the problem reported
            r.fail(("arrivals",), "arrivals: give exactly one of scale or target_load")
        return {}
    (name, knob), = ar.items()
    return {name: r.number(knob, ("arrivals", name), strict=True)}


def _engine(r: _Reader, value: object) -> dict[str, Any]:
    en = r.mapping(value, ("engine",), "engine", {"cycle_s", "partition_by_team"}) or {}
    out: dict[str, Any] = {}
    if "cycle_s" in en:
        out["cycle_s"] = r.number(en["cycle_s"], ("engine", "cycle_s"), strict=True)
    if "partition_by_team" in en:
        v = en["partition_by_team"]
        if isinstance(v, bool):
            out["partition_by_team"] = v
        else:
            r.fail(("engine", "partition_by_team"), "engine.partition_by_team must be true "
                   f"or false, got {_shown(v)}")
    return out


def _unallocated(r: _Reader, value: object) -> dict[str, Any]:
    return {"unallocated": r.number(value, ("unallocated",), high=1.0)}


def _faults(r: _Reader, value: object) -> dict[str, Any]:
    fa = r.mapping(value, ("faults",), "faults", {"rate_per_node_per_day", "repair_hours"})
    if fa is None:
        return {}
    rate = (r.number(fa["rate_per_node_per_day"], ("faults", "rate_per_node_per_day"))
            if "rate_per_node_per_day" in fa else Faults().rate_per_node_per_day)
    repair = (r.number(fa["repair_hours"], ("faults", "repair_hours"), strict=True)
              if "repair_hours" in fa else Faults().repair_hours)
    if rate is None or repair is None:
        return {}
    return {"faults": Faults(rate_per_node_per_day=rate, repair_hours=repair)}


def _policy(r: _Reader, value: object) -> dict[str, Any]:
    # knob overrides for the config: revise() checks them against --config
    return {} if r.mapping(value, ("policy",), "policy", set()) is None else {"policy": value}


def _policies(r: _Reader, value: object) -> dict[str, Any]:
    if not isinstance(value, list) or not value or not all(isinstance(p, str) for p in value):
        r.fail(("policies",), "policies must be a non-empty list of names")
        return {}
    return {"policies": tuple(value)}


def _seed(r: _Reader, value: object) -> dict[str, Any]:
    return {"seed": r.integer(value, ("seed",), low=0)}


def _admission(r: _Reader, value: object) -> dict[str, Any]:
    if isinstance(value, str) and value.lower() in ("on", "off"):
        value = value.lower() == "on"  # YAML 1.1 reads a bare on/off as true/false already
    if not isinstance(value, bool):
        r.fail(("admission",), f"admission must be on or off, got {_shown(value)}")
        return {}
    return {"admission": value}


def _distribution(r: _Reader, value: object, path: DataPath, example: str,
                  key: Callable[[object, DataPath], Any], *, outcomes: str = "outcomes",
                  strict: bool = False) -> dict[Any, float] | None:
    """A mapping of outcomes to probabilities that sum to 1; ``key`` reads an outcome
    (None: it reported why not)."""
    what = _dotted(path)
    if not isinstance(value, dict) or not value:
        r.fail(path, f"{what} must map {outcomes} to probabilities, e.g. {example}")
        return None
    out: dict[Any, float] = {}
    complete = True
    for k, v in value.items():
        name = key(k, (*path, k))
        if name is not None and name in out:
            r.fail((*path, k), f"{what}: duplicate key {_shown(name)}", key=True)
            name = None
        p = None if name is None else r.number(v, (*path, k), what=f"{what}.{name}",
                                               strict=strict, high=1.0)
        if p is None:
            complete = False
        else:
            out[name] = p
    if not complete:
        return None
    if abs(sum(out.values()) - 1) > 1e-6:
        r.fail(path, f"{what} probabilities must sum to 1, got {sum(out.values()):g}")
        return None
    return out


def _requests(r: _Reader, value: object) -> dict[str, Any]:
    path = ("requests",)
    rq = r.mapping(value, path, "requests", {"gpu_type", "mem_gb", "min_runtime_h", "parallel"})
    if rq is None:
        return {}
    if not value:
        r.fail(path, "requests: give gpu_type, mem_gb, min_runtime_h and/or parallel "
               "distributions")
        return {}
    contracts = (_distribution(r, rq["min_runtime_h"], (*path, "min_runtime_h"),
                               "{1: 0.6, 8: 0.3, run: 0.1}", lambda k, p: _hours_key(r, k, p))
                 if "min_runtime_h" in rq else {})
    parallel = (_distribution(r, rq["parallel"], (*path, "parallel"),
                              "{data: 0.5, tensor: 0.5}", lambda k, p: _parallel_key(r, k, p))
                if "parallel" in rq else {})
    asked = _types_and_memory(r, rq)
    if contracts is None or parallel is None or asked is None:
        return {}
    return {"requests": dataclasses.replace(asked, min_runtime_h=contracts, parallel=parallel)}


def _parallel_key(r: _Reader, k: object, path: DataPath) -> str | None:
    """A ``parallel`` outcome: a value admission reads from ``parallel=`` in --comment."""
    if k not in PARALLEL_KINDS:
        r.fail(path, f"requests.parallel: {_shown(k)} is not {' or '.join(PARALLEL_KINDS)} "
               "(the values of parallel= in --comment)", key=True)
        return None
    return str(k)


def _hours_key(r: _Reader, k: object, path: DataPath) -> float | str | None:
    """A ``min_runtime_h`` outcome: hours (> 0; 0 would be QOS free) or ``run``."""
    if k == RUN:
        return RUN
    return r.number(k, path, what="requests.min_runtime_h key (hours, or run)", strict=True,
                    key=True)


def _gb(r: _Reader, value: object, path: DataPath) -> dict[float, float] | None:
    what = f"{_dotted(path)} key"
    return _distribution(r, value, path, "{20: 0.3, 35: 0.7}",
                         lambda k, p: r.number(k, p, what=what, strict=True, key=True))


def _types_and_memory(r: _Reader, rq: dict[str, Any]) -> Requests | None:
    gpu_type = (_distribution(r, rq["gpu_type"], ("requests", "gpu_type"), "{a100_80g: 1.0}",
                              lambda k, p: r.string(k, p, what="requests.gpu_type key",
                                                    key=True))
                if "gpu_type" in rq else {})
    if "mem_gb" not in rq:
        return None if gpu_type is None else Requests(gpu_type=gpu_type)
    path = ("requests", "mem_gb")
    mn = rq["mem_gb"]
    per_type = isinstance(mn, dict) and bool(mn) and all(isinstance(v, dict) for v in mn.values())
    if not per_type:
        mem = _gb(r, mn, path)
        return None if gpu_type is None or mem is None else Requests(gpu_type=gpu_type,
                                                                     mem_gb=mem)
    given = r.mapping(mn, path, "requests.mem_gb", set()) or {}
    by_type = {name: _gb(r, dist, (*path, name)) for name, dist in given.items()}
    if gpu_type is None:
        return None
    for name in given:
        if name not in gpu_type:
            r.fail((*path, name), f"requests.mem_gb.{name}: {name} is not a type in "
                   "requests.gpu_type")
    missing = sorted(set(gpu_type) - set(given))
    if missing:
        r.fail(path, f"requests.mem_gb: no distribution for {', '.join(missing)}")
    if missing or set(given) - set(gpu_type) or not _all_known(mn, given):
        return None
    checked = {name: dist for name, dist in by_type.items() if dist is not None}
    return Requests(gpu_type=gpu_type, mem_gb_by_type=checked) if len(checked) == len(
        by_type) else None


_SIMPLE = ("nodes", "gpus_per_node", "leaf_nodes", "gpu_type")


def _cluster(r: _Reader, value: object) -> dict[str, Any]:
    """Either the simple layout (N nodes of one type, leaves of ``leaf_nodes``) or the
    config's own ``node_classes`` (+ optional ``gpu_types``) schema, never both."""
    path = ("cluster",)
    cl = r.mapping(value, path, "cluster", {*_SIMPLE, "node_classes", "gpu_types"}) or {}
    out: dict[str, Any] = {}
    if "node_classes" in cl:
        simple = [k for k in _SIMPLE if k in cl]
        if simple:
            r.fail((*path, simple[0]), f"cluster: {simple[0]} cannot be combined with "
                   "node_classes (give each class its gpus_per_node and leaf_switch)")
        classes = cl["node_classes"]
        if not isinstance(classes, list) or not classes or not all(
                isinstance(c, dict) for c in classes):
            r.fail((*path, "node_classes"), "cluster.node_classes must be a non-empty list "
                   "of node classes, as in slurm-ml.yaml")
        else:
            out["node_classes"] = tuple(classes)
    if "gpu_types" in cl:
        types = cl["gpu_types"]
        if not isinstance(types, dict) or not types:
            r.fail((*path, "gpu_types"), "cluster.gpu_types must map GRES type names to "
                   "their properties, as in slurm-ml.yaml")
        else:
            out["gpu_types"] = types
    for key in ("nodes", "gpus_per_node", "leaf_nodes"):
        if key in cl:
            out[key] = r.integer(cl[key], (*path, key))
    if "gpu_type" in cl:
        out["gpu_type"] = r.string(cl["gpu_type"], (*path, "gpu_type"))
    return out


def _budgets(r: _Reader, value: object) -> dict[str, Any]:
    """``weights`` per trace team (a tree of one program), or ``accounts``: the config's
    own tree with trace teams and users mapped onto its projects."""
    bu = r.mapping(value, ("budgets",), "budgets", {"weights", "accounts"})
    if bu is None:
        return {}
    if ("weights" in bu) == ("accounts" in bu):
        if _all_known(value, bu):  # else an unknown key is the problem reported
            r.fail(("budgets",), "budgets: give exactly one of weights (per trace team) or "
                   "accounts (the config's own tree, with teams/users mapped onto it)")
        return {}
    if "weights" in bu:
        return _weights(r, bu["weights"])
    return _accounts(r, bu["accounts"])


def _weights(r: _Reader, value: object) -> dict[str, Any]:
    path = ("budgets", "weights")
    wn = r.mapping(value, path, "budgets.weights", set())
    if wn is None:
        return {}
    if not value:
        r.fail(path, "budgets.weights: no teams")
        return {}
    weights = {team: r.number(w, (*path, team), strict=True) for team, w in wn.items()}
    if not _all_known(value, wn) or None in weights.values():
        return {}
    return {"weights": weights}


def _accounts(r: _Reader, value: object) -> dict[str, Any]:
    path = ("budgets", "accounts")
    ac = r.mapping(value, path, "budgets.accounts", {"teams", "users", "default"})
    if ac is None:
        return {}

    def names(key: str) -> dict[str, str] | None:
        if key not in ac:
            return {}
        given = r.mapping(ac[key], (*path, key), f"budgets.accounts.{key}", set())
        if given is None:
            return None
        out = {k: r.string(v, (*path, key, k)) for k, v in given.items()}
        checked = {k: v for k, v in out.items() if v is not None}
        return checked if len(checked) == len(out) and _all_known(ac[key], out) else None

    teams, users = names("teams"), names("users")
    default = r.string(ac["default"], (*path, "default")) if "default" in ac else None
    if teams is None or users is None or ("default" in ac and default is None):
        return {}
    if not (teams or users or default):
        r.fail(path, "budgets.accounts: map teams or users to accounts, or give a default "
               "account")
        return {}
    return {"accounts": Accounts(teams=teams, users=users, default=default)}


_RATES = ("rate_per_team_per_hour", "rate_per_team_per_day")


def _debug(r: _Reader, value: object) -> dict[str, Any]:
    path = ("debug",)
    de = r.mapping(value, path, "debug", {*_RATES, "gpus", "duration_s", "min_runtime_s"})
    if de is None:
        return {}
    rates = [k for k in _RATES if k in de]
    rate: float | None = None
    if len(rates) == 1:
        rate = r.number(de[rates[0]], (*path, rates[0]))
        if rate is not None and rates[0] == "rate_per_team_per_day":
            rate /= 24
    elif rates or _all_known(value, de):
        r.fail(path, "debug: give exactly one of rate_per_team_per_hour or "
               "rate_per_team_per_day")
    gpus = (_distribution(r, de["gpus"], (*path, "gpus"), "{1: 0.7, 2: 0.3}",
                          lambda k, p: r.integer(k, p, what="debug.gpus key", key=True),
                          outcomes="GPU counts", strict=True)
            if "gpus" in de else {1: 1.0})
    duration = (r.number(de["duration_s"], (*path, "duration_s"), strict=True)
                if "duration_s" in de else DebugMix().duration_s)
    min_runtime = (r.number(de["min_runtime_s"], (*path, "min_runtime_s"))
                   if "min_runtime_s" in de else DebugMix().min_runtime_s)
    if rate is None or gpus is None or duration is None or min_runtime is None:
        return {}
    return {"debug": DebugMix(rate_per_team_per_hour=rate, gpus=gpus, duration_s=duration,
                              min_runtime_s=min_runtime)}


_SECTIONS: dict[str, Callable[[_Reader, Any], dict[str, Any]]] = {
    "trace": _trace,
    "slice": _slice,
    "arrivals": _arrivals,
    "cluster": _cluster,
    "budgets": _budgets,
    "unallocated": _unallocated,
    "debug": _debug,
    "faults": _faults,
    "policy": _policy,
    "policies": _policies,
    "seed": _seed,
    "engine": _engine,
    "requests": _requests,
    "admission": _admission,
}
