"""A what-if as one YAML file: ``slurm-ml sim --scenario FILE.yaml``.

Everything that defines a simulated run lives in one strict file so any result can be
rerun from it; CLI flags override it and the report records the resolved scenario.
Bad input is reported as ``file:line: what is wrong`` like the trace loaders, and an
unknown key is an error (a typo must not silently fall back to a default).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from slurm_ml.policy.admission.request import PARALLEL_KINDS

__all__ = [
    "Accounts",
    "DebugMix",
    "Faults",
    "Requests",
    "Scenario",
    "ScenarioError",
    "load_scenario",
    "parse_override",
]


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message names file:line."""


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


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


class _Reader:
    """Reads composed YAML nodes so every error can name its line."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, node: yaml.Node, message: str) -> ScenarioError:
        name = str(node.start_mark.name)
        if name.startswith("override "):  # set by a flag or a sweep, not in the file
            return ScenarioError(f"{self.source}: {name}: {message}")
        return ScenarioError(f"{self.source}:{_line(node)}: {message}")

    def mapping(self, node: yaml.Node, what: str, keys: set[str]) -> dict[str, yaml.Node]:
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, f"{what} must be a mapping")
        out: dict[str, yaml.Node] = {}
        for k, v in node.value:
            key = k.value if isinstance(k, yaml.ScalarNode) else None
            if not isinstance(key, str):
                raise self.fail(k, f"{what}: keys must be strings")
            if key in out:
                raise self.fail(k, f"{what}: duplicate key {key!r}")
            if keys and key not in keys:
                raise self.fail(
                    k, f"{what}: unknown key {key!r} (known: {', '.join(sorted(keys))})"
                )
            out[key] = v
        return out

    def value(self, node: yaml.Node) -> Any:
        return yaml.load(yaml.serialize(node), Loader=yaml.SafeLoader)

    def number(
        self,
        node: yaml.Node,
        what: str,
        *,
        low: float = 0.0,
        strict: bool = False,
        high: float = math.inf,
    ) -> float:
        v = self.value(node)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise self.fail(node, f"{what} must be a number, got {v!r}")
        if v < low or (strict and v == low) or v > high:
            bound = f"> {low:g}" if strict else f">= {low:g}"
            rng = bound if high == math.inf else f"in [{low:g}, {high:g}]"
            raise self.fail(node, f"{what} must be {rng}, got {v!r}")
        return float(v)

    def integer(self, node: yaml.Node, what: str, *, low: int = 1) -> int:
        v = self.value(node)
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise self.fail(node, f"{what} must be an integer >= {low}, got {v!r}")
        return v

    def string(self, node: yaml.Node, what: str) -> str:
        v = self.value(node)
        if not isinstance(v, str) or not v:
            raise self.fail(node, f"{what} must be a non-empty string, got {v!r}")
        return v


_TOP = {
    "trace",
    "slice",
    "arrivals",
    "cluster",
    "budgets",
    "unallocated",
    "debug",
    "faults",
    "policy",
    "policies",
    "seed",
    "engine",
    "requests",
    "admission",
}


def parse_override(text: str) -> tuple[tuple[str, ...], Any]:
    """``KEY.PATH=VALUE`` (VALUE read as YAML: ``7``, ``2.5``, ``fifo``, ``{1: 1.0}``)."""
    key, sep, value = text.partition("=")
    path = tuple(key.strip().split("."))
    if not sep or not all(path):
        raise ScenarioError(f"override {text!r}: expected KEY.PATH=VALUE")
    try:
        return path, yaml.safe_load(value)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"override {text!r}: value is not valid YAML: {exc}") from exc


def _set(root: yaml.Node, path: tuple[str, ...], value: Any, label: str) -> yaml.Node:
    """``root`` with the node at ``path`` replaced by ``value`` (made on the way if
    missing); the new nodes carry ``label`` as their source, so an error names it."""
    mark = yaml.Mark(label, 0, -1, 0, None, 0)
    new = yaml.SafeDumper(None).represent_data(value)  # type: ignore[arg-type]
    _mark(new, mark)
    if root is None or not path:
        raise ScenarioError(f"{label}: cannot override the whole scenario")
    node = root
    for i, key in enumerate(path):
        if not isinstance(node, yaml.MappingNode):
            raise ScenarioError(f"{label}: {'.'.join(path[:i])} is not a mapping")
        hit = next((pair for pair in node.value
                    if isinstance(pair[0], yaml.ScalarNode) and pair[0].value == key), None)
        last = i == len(path) - 1
        if hit is None:
            child: yaml.Node = new if last else yaml.MappingNode(
                "tag:yaml.org,2002:map", [], start_mark=mark, end_mark=mark)
            node.value.append((yaml.ScalarNode("tag:yaml.org,2002:str", key,
                                               start_mark=mark, end_mark=mark), child))
            node = child
        elif last:
            node.value[node.value.index(hit)] = (hit[0], new)
        else:
            node = hit[1]
    return root


def _mark(node: yaml.Node, mark: yaml.Mark) -> None:
    node.start_mark = node.end_mark = mark
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            _mark(k, mark)
            _mark(v, mark)
    elif isinstance(node, yaml.SequenceNode):
        for v in node.value:
            _mark(v, mark)


def load_scenario(path: str | Path,
                  overrides: tuple[tuple[tuple[str, ...], Any], ...] = ()) -> Scenario:
    """Read and check a scenario file (see docs/simulator.md for its keys), with
    ``overrides`` (from :func:`parse_override`) set on it first: a sweep point is the
    file with one knob changed, checked by the same rules."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"{source}: cannot read: {exc.strerror}") from exc
    return parse_scenario(text, source, overrides)


def parse_scenario(text: str, source: str = "<scenario>",
                   overrides: tuple[tuple[tuple[str, ...], Any], ...] = ()) -> Scenario:
    """:func:`load_scenario` on the file's text."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ScenarioError(f"{source}{where}: not valid YAML: {exc}") from exc
    if root is None and overrides:
        root = yaml.MappingNode("tag:yaml.org,2002:map", [])
    if root is None:
        raise ScenarioError(f"{source}:1: empty scenario file")
    for key, value in overrides:
        label = f"override {'.'.join(key)}={value!r}"
        root = _set(root, key, value, label)
    r = _Reader(source)
    top = r.mapping(root, "scenario", _TOP)
    fields: dict[str, Any] = {"source": source}
    if "trace" in top:
        fields["trace"] = r.string(top["trace"], "trace")
    if "slice" in top:
        sl = r.mapping(top["slice"], "slice", {"start_hours", "hours"})
        if "start_hours" in sl:
            fields["start_hours"] = r.number(sl["start_hours"], "slice.start_hours")
        if "hours" in sl:
            fields["hours"] = r.number(sl["hours"], "slice.hours", strict=True)
    if "arrivals" in top:
        node = top["arrivals"]
        ar = r.mapping(node, "arrivals", {"scale", "target_load"})
        if len(ar) != 1:
            raise r.fail(node, "arrivals: give exactly one of scale or target_load")
        if "scale" in ar:
            fields["scale"] = r.number(ar["scale"], "arrivals.scale", strict=True)
        else:
            fields["target_load"] = r.number(ar["target_load"], "arrivals.target_load", strict=True)
    if "cluster" in top:
        fields.update(_cluster(r, top["cluster"]))
    if "budgets" in top:
        fields.update(_budgets(r, top["budgets"]))
    if "engine" in top:
        en = r.mapping(top["engine"], "engine", {"cycle_s", "partition_by_team"})
        if "cycle_s" in en:
            fields["cycle_s"] = r.number(en["cycle_s"], "engine.cycle_s", strict=True)
        if "partition_by_team" in en:
            v = r.value(en["partition_by_team"])
            if not isinstance(v, bool):
                raise r.fail(en["partition_by_team"], "engine.partition_by_team must be "
                             f"true or false, got {v!r}")
            fields["partition_by_team"] = v
    if "unallocated" in top:
        fields["unallocated"] = r.number(top["unallocated"], "unallocated", high=1.0)
    if "debug" in top:
        fields["debug"] = _debug(r, top["debug"])
    if "faults" in top:
        fa = r.mapping(top["faults"], "faults", {"rate_per_node_per_day", "repair_hours"})
        faults = Faults(
            rate_per_node_per_day=r.number(
                fa["rate_per_node_per_day"], "faults.rate_per_node_per_day"
            )
            if "rate_per_node_per_day" in fa
            else 0.0,
            repair_hours=r.number(fa["repair_hours"], "faults.repair_hours", strict=True)
            if "repair_hours" in fa
            else 4.0,
        )
        fields["faults"] = faults
    if "policy" in top:
        r.mapping(top["policy"], "policy", set())
        fields["policy"] = r.value(top["policy"])
    if "policies" in top:
        v = r.value(top["policies"])
        if not isinstance(v, list) or not v or not all(isinstance(p, str) for p in v):
            raise r.fail(top["policies"], "policies must be a non-empty list of names")
        fields["policies"] = tuple(v)
    if "seed" in top:
        fields["seed"] = r.integer(top["seed"], "seed", low=0)
    if "requests" in top:
        fields["requests"] = _requests(r, top["requests"])
    if "admission" in top:
        v = r.value(top["admission"])  # YAML 1.1 reads a bare on/off as true/false
        if isinstance(v, str) and v.lower() in ("on", "off"):
            v = v.lower() == "on"
        if not isinstance(v, bool):
            raise r.fail(top["admission"], f"admission must be on or off, got {v!r}")
        fields["admission"] = v
    return Scenario(**fields)


def _distribution(r: _Reader, node: yaml.Node, what: str, example: str,
                  key: Any) -> dict[Any, float]:
    """A mapping of outcomes to probabilities that sum to 1; ``key`` reads an outcome."""
    if not isinstance(node, yaml.MappingNode) or not node.value:
        raise r.fail(node, f"{what} must map outcomes to probabilities, e.g. {example}")
    out: dict[Any, float] = {}
    for k, v in node.value:
        name = key(k)
        if name in out:
            raise r.fail(k, f"{what}: duplicate key {name!r}")
        out[name] = r.number(v, f"{what}.{name}", high=1.0)
    if abs(sum(out.values()) - 1) > 1e-6:
        raise r.fail(node, f"{what} probabilities must sum to 1, got {sum(out.values()):g}")
    return out


def _requests(r: _Reader, node: yaml.Node) -> Requests:
    rq = r.mapping(node, "requests", {"gpu_type", "mem_gb", "min_runtime_h", "parallel"})
    if not rq:
        raise r.fail(node, "requests: give gpu_type, mem_gb, min_runtime_h and/or parallel "
                     "distributions")
    contracts = (_distribution(r, rq.pop("min_runtime_h"), "requests.min_runtime_h",
                               "{1: 0.6, 8: 0.3, run: 0.1}", lambda k: _hours_key(r, k))
                 if "min_runtime_h" in rq else {})
    parallel = (_distribution(r, rq.pop("parallel"), "requests.parallel",
                              "{data: 0.5, tensor: 0.5}", lambda k: _parallel_key(r, k))
                if "parallel" in rq else {})
    return dataclasses.replace(_types_and_memory(r, node, rq), min_runtime_h=contracts,
                               parallel=parallel)


def _parallel_key(r: _Reader, node: yaml.Node) -> str:
    """A ``parallel`` outcome: a value admission reads from ``parallel=`` in --comment."""
    v = r.value(node)
    if v not in PARALLEL_KINDS:
        raise r.fail(node, f"requests.parallel: {v!r} is not {' or '.join(PARALLEL_KINDS)} "
                     "(the values of parallel= in --comment)")
    return str(v)


def _hours_key(r: _Reader, node: yaml.Node) -> float | str:
    """A ``min_runtime_h`` outcome: hours (> 0; 0 would be QOS free) or ``run``."""
    if r.value(node) == RUN:
        return RUN
    return r.number(node, "requests.min_runtime_h key (hours, or run)", strict=True)


def _types_and_memory(r: _Reader, node: yaml.Node, rq: dict[str, yaml.Node]) -> Requests:
    gpu_type = (_distribution(r, rq["gpu_type"], "requests.gpu_type", "{a100_80g: 1.0}",
                              lambda k: r.string(k, "requests.gpu_type key"))
                if "gpu_type" in rq else {})

    def gb(node: yaml.Node, what: str) -> dict[float, float]:
        return _distribution(r, node, what, "{20: 0.3, 35: 0.7}",
                             lambda k: r.number(k, f"{what} key", strict=True))

    if "mem_gb" not in rq:
        return Requests(gpu_type=gpu_type)
    mn = rq["mem_gb"]
    per_type = isinstance(mn, yaml.MappingNode) and bool(mn.value) and all(
        isinstance(v, yaml.MappingNode) for _, v in mn.value)
    if not per_type:
        return Requests(gpu_type=gpu_type, mem_gb=gb(mn, "requests.mem_gb"))
    by_type = {}
    for name, dist in r.mapping(mn, "requests.mem_gb", set()).items():
        if name not in gpu_type:
            raise r.fail(dist, f"requests.mem_gb.{name}: {name} is not a type in "
                         "requests.gpu_type")
        by_type[name] = gb(dist, f"requests.mem_gb.{name}")
    missing = sorted(set(gpu_type) - set(by_type))
    if missing:
        raise r.fail(mn, f"requests.mem_gb: no distribution for {', '.join(missing)}")
    return Requests(gpu_type=gpu_type, mem_gb_by_type=by_type)


_SIMPLE = ("nodes", "gpus_per_node", "leaf_nodes", "gpu_type")


def _cluster(r: _Reader, node: yaml.Node) -> dict[str, Any]:
    """Either the simple layout (N nodes of one type, leaves of ``leaf_nodes``) or the
    config's own ``node_classes`` (+ optional ``gpu_types``) schema, never both."""
    cl = r.mapping(node, "cluster", {*_SIMPLE, "node_classes", "gpu_types"})
    out: dict[str, Any] = {}
    if "node_classes" in cl:
        simple = [k for k in _SIMPLE if k in cl]
        if simple:
            raise r.fail(cl[simple[0]], f"cluster: {simple[0]} cannot be combined with "
                         "node_classes (give each class its gpus_per_node and leaf_switch)")
        classes = r.value(cl["node_classes"])
        if not isinstance(classes, list) or not classes or not all(
                isinstance(c, dict) for c in classes):
            raise r.fail(cl["node_classes"], "cluster.node_classes must be a non-empty list "
                         "of node classes, as in slurm-ml.yaml")
        out["node_classes"] = tuple(classes)
    if "gpu_types" in cl:
        types = r.value(cl["gpu_types"])
        if not isinstance(types, dict) or not types:
            raise r.fail(cl["gpu_types"], "cluster.gpu_types must map GRES type names to "
                         "their properties, as in slurm-ml.yaml")
        out["gpu_types"] = types
    for key in ("nodes", "gpus_per_node", "leaf_nodes"):
        if key in cl:
            out[key] = r.integer(cl[key], f"cluster.{key}")
    if "gpu_type" in cl:
        out["gpu_type"] = r.string(cl["gpu_type"], "cluster.gpu_type")
    return out


def _budgets(r: _Reader, node: yaml.Node) -> dict[str, Any]:
    """``weights`` per trace team (a tree of one program), or ``accounts``: the config's
    own tree with trace teams and users mapped onto its projects."""
    bu = r.mapping(node, "budgets", {"weights", "accounts"})
    if ("weights" in bu) == ("accounts" in bu):
        raise r.fail(node, "budgets: give exactly one of weights (per trace team) or "
                     "accounts (the config's own tree, with teams/users mapped onto it)")
    if "weights" in bu:
        wn = r.mapping(bu["weights"], "budgets.weights", set())
        if not wn:
            raise r.fail(bu["weights"], "budgets.weights: no teams")
        return {"weights": {
            t: r.number(n, f"budgets.weights.{t}", strict=True) for t, n in wn.items()}}
    ac = r.mapping(bu["accounts"], "budgets.accounts", {"teams", "users", "default"})

    def names(key: str) -> dict[str, str]:
        if key not in ac:
            return {}
        mn = r.mapping(ac[key], f"budgets.accounts.{key}", set())
        return {k: r.string(v, f"budgets.accounts.{key}.{k}") for k, v in mn.items()}

    accounts = Accounts(teams=names("teams"), users=names("users"),
                        default=r.string(ac["default"], "budgets.accounts.default")
                        if "default" in ac else None)
    if not (accounts.teams or accounts.users or accounts.default):
        raise r.fail(bu["accounts"], "budgets.accounts: map teams or users to accounts, "
                     "or give a default account")
    return {"accounts": accounts}


def _debug(r: _Reader, node: yaml.Node) -> DebugMix:
    keys = {
        "rate_per_team_per_hour",
        "rate_per_team_per_day",
        "gpus",
        "duration_s",
        "min_runtime_s",
    }
    de = r.mapping(node, "debug", keys)
    if ("rate_per_team_per_hour" in de) == ("rate_per_team_per_day" in de):
        raise r.fail(
            node, "debug: give exactly one of rate_per_team_per_hour or rate_per_team_per_day"
        )
    rate = (
        r.number(de["rate_per_team_per_hour"], "debug.rate_per_team_per_hour")
        if "rate_per_team_per_hour" in de
        else r.number(de["rate_per_team_per_day"], "debug.rate_per_team_per_day") / 24
    )
    gpus: dict[int, float] = {1: 1.0}
    if "gpus" in de:
        gn = de["gpus"]
        if not isinstance(gn, yaml.MappingNode) or not gn.value:
            raise r.fail(
                gn, "debug.gpus must map GPU counts to probabilities, e.g. {1: 0.7, 2: 0.3}"
            )
        gpus = {}
        for k, v in gn.value:
            size = r.integer(k, "debug.gpus key")
            if size in gpus:
                raise r.fail(k, f"debug.gpus: duplicate size {size}")
            gpus[size] = r.number(v, f"debug.gpus.{size}", strict=True, high=1.0)
        if abs(sum(gpus.values()) - 1) > 1e-6:
            raise r.fail(gn, f"debug.gpus probabilities must sum to 1, got {sum(gpus.values()):g}")
    return DebugMix(
        rate_per_team_per_hour=rate,
        gpus=gpus,
        duration_s=r.number(de["duration_s"], "debug.duration_s", strict=True)
        if "duration_s" in de
        else 600.0,
        min_runtime_s=r.number(de["min_runtime_s"], "debug.min_runtime_s")
        if "min_runtime_s" in de
        else 900.0,
    )
