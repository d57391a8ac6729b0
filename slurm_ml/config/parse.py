"""Validation of already-parsed YAML data into a :class:`~slurm_ml.config.schema.Config`.

Everything else in slurm-ml trusts the Config it gets, so this is where doubt ends:
every key must be known, every value is type- and range-checked, references between
sections are resolved, and every problem in the data is reported at once (an admin
fixing a file should not have to rerun the check once per typo). Paths in messages look
like ``budgets.programs[1].weight: must be > 0``. Pure: :mod:`slurm_ml.config.load`
reads the file.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ClusterShell.NodeSet import NodeSet, NodeSetException
from ClusterShell.RangeSet import RangeSetException

from slurm_ml.config.checks import (
    INT_MAX,
    NAME_CHARS,
    NAME_RE,
    Check,
    check_capability,
    check_gpu_type,
    check_lower_name,
    check_name,
    check_user,
    ge,
    gt,
    nodeset,
    nodeset_bound,
    nodeset_problem,
)
from slurm_ml.config.errors import ConfigError, ConfigIssue, Unreadable, clip, one_line, show
from slurm_ml.config.rules import policy_issues
from slurm_ml.config.schema import (
    AdmissionConfig,
    ClusterConfig,
    Config,
    ContractsConfig,
    DaemonConfig,
    FairshareConfig,
    FastLaneConfig,
    HealthConfig,
    PartitionConfig,
    PolicyConfig,
    PriorityWeightsConfig,
    QuarantineConfig,
    ReclaimConfig,
    SlurmConfig,
    StoreConfig,
    SubmitdConfig,
)
from slurm_ml.model import BudgetProgram, BudgetProject, BudgetTree, GpuType, NodeClass

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "MAX_CONFIG_NODES",
    "MAX_ISSUES",
    "RENAMED",
    "SECTIONS_OPTIONAL",
    "SECTIONS_REQUIRED",
    "parse_config",
]

_T = TypeVar("_T")
_D = TypeVar("_D", bound="DataclassInstance")

# A converter reports its own errors and returns None when the value is bad
# (no config value is ever legitimately None, so None is a safe sentinel).
_Conv = Callable[[object, str], Any]

#: The most problems one report lists; the rest are counted. A file of a million bad
#: lines must not make a million-line report (or a reload log line that size).
MAX_ISSUES = 200
#: The most nodes all node sets of a file may name together (each is also held to
#: MAX_NODESET_NODES): every set is expanded once or twice, about a second per 100,000.
MAX_CONFIG_NODES = 500_000
# Longest key and message text an issue keeps: keys and values come from the file.
_KEY_CHARS = 80
_MESSAGE_CHARS = 400

#: The top-level sections, in the order a file usually has them.
SECTIONS_REQUIRED = ("cluster", "gpu_types", "node_classes", "budgets")
SECTIONS_OPTIONAL = ("policy", "slurm", "store", "daemon", "submitd", "health")


def _hours_to_minutes(value: object) -> str:
    minutes = "<hours x 60>"
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            if math.isfinite(value):
                minutes = f"{value * 60:g}"
        except OverflowError:  # an int too large for a float
            pass
    return ("renamed: the cap is in minutes now, like policy.admission.default_min_runtime_min; "
            f"write min_runtime_cap_min: {minutes} instead")


#: Keys that were renamed, by path: what to write instead, given the old value.
RENAMED: dict[str, Callable[[object], str]] = {
    "policy.contracts.min_runtime_cap_hours": _hours_to_minutes,
}


def _join(path: str, key: str) -> str:
    key = clip(key, _KEY_CHARS)
    return f"{path}.{key}" if path else key


def _key(key: object) -> str:
    """A key that is not a string, as a path element (str() of a huge int raises)."""
    if isinstance(key, Unreadable):
        return key.text
    if isinstance(key, int) and not isinstance(key, bool) and key.bit_length() > 64:
        return show(key)
    return str(key)


def _hint(key: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f" (known: {', '.join(sorted(known))})"



class _Parser:
    """Walks the data once, collecting issues instead of stopping at the first."""

    def __init__(self) -> None:
        self.issues: list[ConfigIssue] = []
        self.unlisted = 0  # issues beyond MAX_ISSUES, counted only
        self.nodes_left = MAX_CONFIG_NODES  # what the file's node sets may still name

    def error(self, path: str, message: str) -> None:
        if len(self.issues) >= MAX_ISSUES:
            self.unlisted += 1
            return
        self.issues.append(ConfigIssue(clip(one_line(path), _KEY_CHARS * 4),
                                       clip(one_line(message), _MESSAGE_CHARS)))

    @property
    def full(self) -> bool:
        """True once the report holds MAX_ISSUES: searching for more is wasted work."""
        return len(self.issues) >= MAX_ISSUES

    def report(self) -> list[ConfigIssue]:
        """The issues, with a last line counting those left out."""
        if not self.unlisted:
            return list(self.issues)
        return [*self.issues, ConfigIssue(
            "<config>", f"{self.unlisted} more problem(s) not listed (the first "
            f"{MAX_ISSUES} are above)")]

    # ---- generic shapes

    def mapping(
        self,
        value: object,
        path: str,
        required: Sequence[str],
        optional: Sequence[str] = (),
        *,
        word: str = "key",
    ) -> dict[str, object] | None:
        """The known keys of a mapping; unknown and missing keys are reported."""
        if not isinstance(value, dict):
            self.error(path, f"expected a mapping, got {show(value)}")
            return None
        known = (*required, *optional)
        out: dict[str, object] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                self.error(_join(path, _key(key)), f"unknown {word} {show(key)}{_hint('', known)}")
            elif _join(path, key) in RENAMED:
                self.error(_join(path, key), RENAMED[_join(path, key)](item))
            elif key not in known:
                self.error(_join(path, key), f"unknown {word}{_hint(key, known)}")
            else:
                out[key] = item
        for key in required:
            if key not in value:
                self.error(_join(path, key), f"missing required {word}")
        return out

    def items(self, value: object, path: str, noun: str) -> list[object] | None:
        """A non-empty list."""
        if not isinstance(value, list):
            self.error(path, f"expected a list, got {show(value)}")
            return None
        if not value:
            self.error(path, f"must list at least one {noun}")
            return None
        return value

    def record(
        self,
        value: object,
        path: str,
        build: Callable[..., _T],
        convs: Mapping[str, _Conv],
        defaults: Mapping[str, object] | None = None,
    ) -> tuple[dict[str, Any], _T | None]:
        """Parse a fixed-key mapping: the fields that parsed, and the object if all did."""
        defaults = defaults or {}
        required = [key for key in convs if key not in defaults]
        optional = [key for key in convs if key in defaults]
        fields_in = self.mapping(value, path, required, optional)
        if fields_in is None:
            return {}, None
        got: dict[str, Any] = {}
        complete = True
        for key, conv in convs.items():
            if key in fields_in:
                parsed = conv(fields_in[key], _join(path, key))
                if parsed is None:
                    complete = False
                else:
                    got[key] = parsed
            elif key in defaults:
                got[key] = defaults[key]
            else:
                complete = False
        return got, (build(**got) if complete else None)

    def knobs(self, value: object, path: str, cls: type[_D]) -> _D | None:
        """An optional section of defaulted knobs; null or absent = all defaults."""
        if value is None:
            return cls()
        convs: dict[str, _Conv] = {}
        defaults: dict[str, object] = {}
        for knob in fields(cls):
            convs[knob.name] = self.knob_conv(knob.default, knob.metadata.get("check"))
            defaults[knob.name] = knob.default
        return self.record(value, path, cls, convs, defaults)[1]

    def knob_conv(self, default: object, check: Any) -> _Conv:
        if isinstance(default, bool):
            return self.boolean()
        if isinstance(default, int):
            return self.integer(check)
        if isinstance(default, float):
            return self.number(check)
        if isinstance(default, Path):
            return self.path(check)
        if isinstance(default, str):
            return self.string(check)
        if isinstance(default, tuple):
            return self.checked_list(self.list_of(self.string(), unique="value"), check)
        raise TypeError(f"no converter for knob default {default!r}")  # a bug here, not in YAML

    def checked_list(self, items: _Conv, check: Any) -> _Conv:
        """A list knob whose check judges the whole list (after its items converted)."""
        if check is None:
            return items

        def conv(value: object, path: str) -> Any:
            out = items(value, path)
            return None if out is None else self.checked(out, path, check)

        return conv

    # ---- scalars

    def checked(self, value: _T, path: str, check: Check[_T] | None) -> _T | None:
        message = check(value) if check is not None else None
        if message is not None:
            self.error(path, message)
            return None
        return value

    def string(self, check: Check[str] | None = None) -> _Conv:
        def conv(value: object, path: str) -> str | None:
            if not isinstance(value, str):
                self.error(path, f"expected a string, got {show(value)}")
                return None
            return self.checked(value, path, check)

        return conv

    def integer(self, check: Check[int] | None = None) -> _Conv:
        def conv(value: object, path: str) -> int | None:
            if isinstance(value, Unreadable) and value.tag == "int":
                self.error(path, value.problem)
                return None
            # bool is an int to Python, never to an admin.
            if isinstance(value, bool) or not isinstance(value, int):
                self.error(path, f"expected an integer, got {show(value)}")
                return None
            if not -INT_MAX <= value <= INT_MAX:
                # No knob takes one; beyond 64 bits it overflows where it is used.
                self.error(path, f"{show(value)} is out of range: an integer here is at "
                           f"most {INT_MAX} (2**63 - 1) either side of 0")
                return None
            return self.checked(value, path, check)

        return conv

    def number(self, check: Check[float] | None = None) -> _Conv:
        def conv(value: object, path: str) -> float | None:
            if isinstance(value, Unreadable) and value.tag in ("int", "float"):
                self.error(path, value.problem)
                return None
            if isinstance(value, bool) or not isinstance(value, int | float):
                self.error(path, f"expected a number, got {show(value)}")
                return None
            try:
                number = float(value)
            except OverflowError:
                self.error(path, "number is too large")
                return None
            if not math.isfinite(number):
                self.error(path, f"expected a finite number, got {show(value)}")
                return None
            return self.checked(number, path, check)

        return conv

    def boolean(self) -> _Conv:
        def conv(value: object, path: str) -> bool | None:
            if not isinstance(value, bool):
                self.error(path, f"expected true or false, got {show(value)}")
                return None
            return value

        return conv

    def path(self, check: Check[Path] | None = None) -> _Conv:
        def conv(value: object, path: str) -> Path | None:
            if not isinstance(value, str) or not value:
                self.error(path, f"expected a non-empty path, got {show(value)}")
                return None
            return self.checked(Path(value), path, check)

        return conv

    def capability(self) -> _Conv:
        as_string = self.string(check_capability)

        def conv(value: object, path: str) -> str | None:
            if isinstance(value, int | float) and not isinstance(value, bool):
                # YAML reads an unquoted 8.0 as a float and 9.0 vs 9 would be lost.
                self.error(path, f'expected a quoted string like "8.0", got {show(value)}')
                return None
            result: str | None = as_string(value, path)
            return result

        return conv

    def nodes(self) -> _Conv:
        """A ClusterShell NodeSet expression naming at least one valid node."""
        as_string = self.string()

        def conv(value: object, path: str) -> str | None:
            expr: str | None = as_string(value, path)
            if expr is None:
                return None
            shown = show(expr)
            problem = nodeset_problem(expr)
            if problem is not None:
                self.error(path, f"node set {shown} {problem}")
                return None
            bound = nodeset_bound(expr)
            if bound > self.nodes_left:
                named = MAX_CONFIG_NODES - self.nodes_left
                self.error(path, f"node set {shown} names up to {bound:,} nodes, and the "
                           f"node sets before it already named {named:,}: all of a file's "
                           f"node sets together may name at most {MAX_CONFIG_NODES:,} "
                           "(refused without expanding it)")
                return None
            self.nodes_left -= bound
            try:
                nodes = nodeset(expr)
            except (NodeSetException, RangeSetException) as exc:
                self.error(path, f"invalid node set {shown}: {exc}")
                return None
            except Exception as exc:  # ClusterShell's own parser: any failure is the text's
                self.error(path, f"invalid node set {shown}: {type(exc).__name__}: {exc}")
                return None
            if len(nodes) == 0:
                self.error(path, "node set is empty")
                return None
            bad = [str(node) for node in nodes if NAME_RE.fullmatch(str(node)) is None]
            if bad:
                self.error(
                    path, f"invalid node name {show(bad[0])} in {shown}: use only {NAME_CHARS}"
                )
                return None
            return expr

        return conv

    def list_of(self, item: _Conv, unique: str | None = None) -> _Conv:
        """A list (maybe empty) as a tuple; `unique` names the thing that must not repeat."""

        def conv(value: object, path: str) -> tuple[Any, ...] | None:
            if not isinstance(value, list):
                self.error(path, f"expected a list, got {show(value)}")
                return None
            out: list[Any] = []
            seen: set[Any] = set()  # items are scalars, so hashable
            complete = True
            for index, raw in enumerate(value):
                item_path = f"{path}[{index}]"
                parsed = item(raw, item_path)
                if parsed is None:
                    complete = False
                elif unique is not None and parsed in seen:
                    self.error(item_path, f"{unique} {parsed!r} is listed twice")
                    complete = False
                else:
                    out.append(parsed)
                    seen.add(parsed)
            return tuple(out) if complete else None

        return conv

    def unique(self, seen: dict[str, str], name: str, path: str, noun: str) -> None:
        """Report `name` if an earlier path already used it."""
        if name in seen:
            self.error(path, f"duplicate {noun} {name!r} (first at {seen[name]})")
        else:
            seen[name] = path

    # ---- sections

    def gpu_types(
        self, value: object, path: str
    ) -> tuple[dict[str, GpuType] | None, set[str] | None]:
        """The GPU types, and the names declared (even those with bad fields).

        Declared names are None when the section is unusable, so that node
        classes are not also blamed for naming types that cannot exist.
        """
        if not isinstance(value, dict):
            self.error(path, f"expected a mapping of GPU types, got {show(value)}")
            return None, None
        if not value:
            self.error(path, "must define at least one GPU type")
            return None, None
        declared = {key for key in value if isinstance(key, str)}
        out: dict[str, GpuType] = {}
        complete = True
        features: dict[str, str] = {}
        convs: dict[str, _Conv] = {
            "memory_gb": self.number(gt(0)),
            "nvlink_links": self.integer(ge(0)),
            "compute_capability": self.capability(),
            "billing_weight": self.number(ge(0)),
            "feature": self.string(check_name),
        }
        for key, spec in value.items():
            if not isinstance(key, str):
                self.error(
                    _join(path, _key(key)), f"GPU type name must be a string, got {show(key)}"
                )
                complete = False
                continue
            key_path = _join(path, key)
            message = check_gpu_type(key)
            if message is not None:
                self.error(key_path, message)
                complete = False
            got, gpu = self.record(spec, key_path, partial(GpuType, key), convs)
            if "feature" in got:
                # Two types behind one feature would make --constraint ambiguous.
                self.unique(features, got["feature"], f"{key_path}.feature", "feature")
            if gpu is None:
                complete = False
            else:
                out[key] = gpu
        return (out if complete else None), declared

    def node_classes(
        self, value: object, path: str, gpu_types: set[str] | None
    ) -> tuple[tuple[NodeClass, ...] | None, NodeSet | None]:
        """The node classes, and the union of their nodes (None if any set is unknown)."""
        raw = self.items(value, path, "node class")
        if raw is None:
            return None, None
        convs: dict[str, _Conv] = {
            "name": self.string(check_name),
            "nodes": self.nodes(),
            "gpu_type": self.string(check_gpu_type),
            "gpus_per_node": self.integer(ge(1)),
            "leaf_switch": self.string(check_name),
            "features": self.list_of(self.string(check_name), unique="feature"),
            "cpus": self.integer(ge(1)),
            "memory_mb": self.integer(gt(0)),
        }
        out: list[NodeClass] = []
        complete = True
        names: dict[str, str] = {}
        union: NodeSet | None = nodeset("")
        everything = nodeset("")  # every class's nodes so far, even after one is unknown
        seen: list[tuple[str, NodeSet]] = []  # (label, nodes) of earlier classes
        for index, spec in enumerate(raw):
            item_path = f"{path}[{index}]"
            got, node_class = self.record(spec, item_path, NodeClass, convs)
            if node_class is None:
                complete = False
            else:
                out.append(node_class)
            if "name" in got:
                self.unique(names, got["name"], f"{item_path}.name", "node class name")
            if "gpu_type" in got and gpu_types is not None and got["gpu_type"] not in gpu_types:
                known = ", ".join(sorted(gpu_types)) or "none"
                self.error(
                    f"{item_path}.gpu_type",
                    f"unknown GPU type {got['gpu_type']!r} (known: {known})",
                )
                complete = False
            if "nodes" not in got:
                union = None
                continue
            nodes = nodeset(got["nodes"])
            # A node in two classes would have two GPU types and two switches. Only a
            # class that meets the union of the earlier ones is compared with each of
            # them: thousands of classes stay linear.
            if len(nodes.intersection(everything)):
                for label, other in seen:
                    if self.full:
                        break
                    common = nodes.intersection(other)
                    if len(common):
                        self.error(f"{item_path}.nodes", f"overlaps {label} on {common}")
                        complete = False
            seen.append((item_path + (f" ({got['name']})" if "name" in got else ""), nodes))
            everything.update(nodes)
            if union is not None:
                union.update(nodes)
        return (tuple(out) if complete else None), union

    def cluster(
        self, value: object, path: str, known_nodes: NodeSet | None
    ) -> ClusterConfig | None:
        fields_in = self.mapping(value, path, ["name", "partitions"])
        if fields_in is None:
            return None
        name: str | None = None
        if "name" in fields_in:
            name = self.string(check_lower_name)(fields_in["name"], f"{path}.name")
        partitions = None
        if "partitions" in fields_in:
            partitions = self.partitions(fields_in["partitions"], f"{path}.partitions", known_nodes)
        if name is None or partitions is None:
            return None
        return ClusterConfig(name=name, partitions=partitions)

    def partitions(
        self, value: object, path: str, known_nodes: NodeSet | None
    ) -> tuple[PartitionConfig, ...] | None:
        raw = self.items(value, path, "partition")
        if raw is None:
            return None
        convs: dict[str, _Conv] = {
            "name": self.string(check_name),
            "nodes": self.nodes(),
            "default": self.boolean(),
            "max_time_min": self.integer(gt(0)),
        }
        out: list[PartitionConfig] = []
        complete = True
        names: dict[str, str] = {}
        defaults: list[str] = []
        all_defaults_known = True
        for index, spec in enumerate(raw):
            item_path = f"{path}[{index}]"
            got, part = self.record(spec, item_path, PartitionConfig, convs, {"default": False})
            if part is None:
                complete = False
            else:
                out.append(part)
            if "name" in got:
                self.unique(names, got["name"], f"{item_path}.name", "partition name")
            if "default" not in got:
                all_defaults_known = False
            elif got["default"]:
                if defaults:
                    self.error(
                        f"{item_path}.default",
                        f"only one partition may be the default ({defaults[0]} already is)",
                    )
                    complete = False
                defaults.append(item_path)
            if "nodes" in got and known_nodes is not None:
                # Slurm would accept them, but slurm-ml could not say what GPUs they have.
                missing = nodeset(got["nodes"]).difference(known_nodes)
                if len(missing):
                    self.error(f"{item_path}.nodes", f"nodes not in any node class: {missing}")
                    complete = False
        if not defaults and all_defaults_known:
            self.error(path, "exactly one partition must have default: true (none has)")
            complete = False
        return tuple(out) if complete else None

    def budgets(self, value: object, path: str) -> BudgetTree | None:
        """The account tree; every account name must be unique across all of it."""
        accounts: dict[str, str] = {}
        as_lower_name = self.string(check_lower_name)

        def account(value: object, path: str) -> str | None:
            name: str | None = as_lower_name(value, path)
            if name is not None:
                # Slurm accounts are one flat namespace whatever the tree says.
                self.unique(accounts, name, path, "account name")
            return name

        def records(noun: str, build: Callable[..., _T], convs: Mapping[str, _Conv]) -> _Conv:
            def conv(value: object, path: str) -> tuple[_T, ...] | None:
                raw = self.items(value, path, noun)
                if raw is None:
                    return None
                out = [
                    self.record(spec, f"{path}[{i}]", build, convs)[1] for i, spec in enumerate(raw)
                ]
                return None if None in out else tuple(item for item in out if item is not None)

            return conv

        projects = records(
            "project",
            BudgetProject,
            {
                "name": account,
                "weight": self.number(gt(0)),
                "users": self.list_of(self.string(check_user), unique="user"),
            },
        )
        programs = records(
            "program",
            BudgetProgram,
            {"name": account, "weight": self.number(gt(0)), "projects": projects},
        )
        return self.record(value, path, BudgetTree, {"org": account, "programs": programs})[1]


def _section_rank(order: Sequence[object]) -> Callable[[ConfigIssue], int]:
    """Sort key that groups issues by section in the order the file has them."""
    ranks = {key: rank for rank, key in enumerate(order) if isinstance(key, str)}

    def rank(issue: ConfigIssue) -> int:
        head = re.split(r"[.\[]", issue.path, maxsplit=1)[0]
        return ranks.get(head, -1)

    return rank


def parse_config(data: object, source: str = "<config>") -> Config:
    """Validate already-parsed YAML data; raise ConfigError listing every problem.

    `source` names the data in messages about the document as a whole.
    """
    if not isinstance(data, dict):
        wanted = ", ".join(SECTIONS_REQUIRED)
        what = "empty configuration" if data is None else f"got {show(data)}"
        message = f"expected a mapping with the sections {wanted}; {what}"
        raise ConfigError([ConfigIssue(one_line(source), message)], source)
    parser = _Parser()
    sections = parser.mapping(data, "", SECTIONS_REQUIRED, SECTIONS_OPTIONAL, word="section")
    assert sections is not None  # data is a dict

    gpu_types: dict[str, GpuType] | None = None
    declared_types: set[str] | None = None
    if "gpu_types" in sections:
        gpu_types, declared_types = parser.gpu_types(sections["gpu_types"], "gpu_types")
    node_classes: tuple[NodeClass, ...] | None = None
    known_nodes: NodeSet | None = None
    if "node_classes" in sections:
        node_classes, known_nodes = parser.node_classes(
            sections["node_classes"], "node_classes", declared_types
        )
    cluster = None
    if "cluster" in sections:
        cluster = parser.cluster(sections["cluster"], "cluster", known_nodes)
    budgets = None
    if "budgets" in sections:
        budgets = parser.budgets(sections["budgets"], "budgets")
    policy = _policy(parser, sections.get("policy"))
    if policy is not None:
        parser.issues.extend(policy_issues(policy, budgets))
    slurm = parser.knobs(sections.get("slurm"), "slurm", SlurmConfig)
    store = parser.knobs(sections.get("store"), "store", StoreConfig)
    daemon = parser.knobs(sections.get("daemon"), "daemon", DaemonConfig)
    submitd = parser.knobs(sections.get("submitd"), "submitd", SubmitdConfig)
    health = parser.knobs(sections.get("health"), "health", HealthConfig)

    if (
        parser.issues
        or cluster is None
        or gpu_types is None
        or node_classes is None
        or budgets is None
        or policy is None
        or slurm is None
        or store is None
        or daemon is None
        or submitd is None
        or health is None
    ):
        parser.issues.sort(key=_section_rank(list(data)))
        issues = parser.report()
        raise ConfigError(issues or [ConfigIssue(source, "invalid configuration")], source)
    return Config(
        cluster=cluster,
        gpu_types=gpu_types,
        node_classes=node_classes,
        budgets=budgets,
        policy=policy,
        slurm=slurm,
        store=store,
        daemon=daemon,
        submitd=submitd,
        health=health,
    )


def _policy(parser: _Parser, value: object) -> PolicyConfig | None:
    if value is None:
        return PolicyConfig()
    parts: dict[str, type[Any]] = {
        "fairshare": FairshareConfig,
        "fast_lane": FastLaneConfig,
        "priority_weights": PriorityWeightsConfig,
        "contracts": ContractsConfig,
        "reclaim": ReclaimConfig,
        "admission": AdmissionConfig,
        "quarantine": QuarantineConfig,
    }
    sections = parser.mapping(value, "policy", (), tuple(parts))
    if sections is None:
        return None
    got: dict[str, Any] = {
        name: parser.knobs(sections.get(name), f"policy.{name}", cls) for name, cls in parts.items()
    }
    if any(part is None for part in got.values()):
        return None
    return PolicyConfig(**got)
