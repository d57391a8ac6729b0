"""The one strict loader for slurm-ml's YAML configuration.

Everything else in slurm-ml trusts the :class:`Config` it gets, so this module
is where doubt ends: every key must be known, every value is type- and
range-checked, references between sections are resolved, and every problem in
the file is reported at once (an admin fixing a file should not have to rerun
the check once per typo). Paths in messages look like
``budgets.programs[1].weight: must be > 0``.

Only :func:`load_config` touches the file system; :func:`parse_config` is pure.
"""

from __future__ import annotations

import difflib
import math
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import cached_property, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml
from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetException
from ClusterShell.RangeSet import RangeSetException

from slurm_ml.model import BudgetProgram, BudgetProject, BudgetTree, GpuType, NodeClass

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "AdmissionConfig",
    "ClusterConfig",
    "Config",
    "ConfigError",
    "ConfigIssue",
    "ContractsConfig",
    "DaemonConfig",
    "FairshareConfig",
    "PartitionConfig",
    "PolicyConfig",
    "QuarantineConfig",
    "ReclaimConfig",
    "SlurmConfig",
    "StoreConfig",
    "load_config",
    "parse_config",
]

_T = TypeVar("_T")
_D = TypeVar("_D", bound="DataclassInstance")

# A check returns None when the value is fine, else the message to report.
_Check = Callable[[_T], str | None]
# A converter reports its own errors and returns None when the value is bad
# (no config value is ever legitimately None, so None is a safe sentinel).
_Conv = Callable[[object, str], Any]


# --------------------------------------------------------------------------- errors


@dataclass(frozen=True, slots=True)
class ConfigIssue:
    """One problem in a config: where (a dotted path) and what is wrong."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class ConfigError(Exception):
    """Raised with every problem found, so that one run shows them all."""

    def __init__(self, issues: Sequence[ConfigIssue], source: str = "<config>") -> None:
        self.issues: list[ConfigIssue] = list(issues)
        self.source = source
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(str(issue) for issue in self.issues)

    def __reduce__(self) -> tuple[Any, ...]:
        # Keep the issues when pickled (e.g. across a process pool).
        return (type(self), (self.issues, self.source))


# --------------------------------------------------------------------------- knobs


def _knob(default: _T, check: _Check[_T] | None = None) -> _T:
    """A defaulted, checked field; its type is the type of the default."""
    return field(default=default, metadata={"check": check})


def _gt(bound: float) -> _Check[float]:
    def check(value: float) -> str | None:
        return None if value > bound else f"must be > {bound}"

    return check


def _ge(bound: float) -> _Check[float]:
    def check(value: float) -> str | None:
        return None if value >= bound else f"must be >= {bound}"

    return check


def _fraction(value: float) -> str | None:
    return None if 0 < value <= 1 else "must be in (0, 1]"


def _percent(value: float) -> str | None:
    return None if 0 <= value <= 100 else "must be in [0, 100]"


def _margin_percent(value: float) -> str | None:
    # 100% margin would make every request unsatisfiable.
    return None if 0 <= value < 100 else "must be in [0, 100)"


def _command_line(value: str) -> str | None:
    # Split like the daemon will (never through a shell); a quoting error must fail here,
    # at load or reload time, not in the middle of a cycle.
    try:
        shlex.split(value)
    except ValueError as exc:
        return f"not a valid command line: {exc}"
    return None


def _absolute(value: Path) -> str | None:
    # The daemon's working directory is not something to depend on.
    return None if value.is_absolute() else "must be an absolute path"


@dataclass(frozen=True, slots=True)
class FairshareConfig:
    """How usage is measured and turned into job SiteFactor."""

    window_hours: float = _knob(168.0, _gt(0))  # sliding usage window fair-share looks back over
    site_factor_max: int = _knob(100_000, _gt(0))  # SiteFactor given to the most under-served job
    cycle_interval_s: float = _knob(60.0, _gt(0))  # time between reconciler cycles
    # SiteFactor between adjacent ranks; must exceed the sum of the other priority weights
    # (age, fairshare, job size, partition) so that the rank dominates them.
    site_factor_step: int = _knob(1000, _ge(1))
    # How far a user's own --nice moves a job inside its team's band (never across bands).
    nice_range: int = _knob(500, _ge(0))
    owed_bucket_s: float = _knob(3600.0, _gt(0))  # owed is capped at demand bucket by bucket
    # Short work (Ai2's debug jobs) goes first inside its team's band: a job whose
    # contract is <= short_job_min_runtime_min and whose time limit is
    # <= short_job_time_limit_min gets short_job_boost more SiteFactor (0 = off). It is
    # cheap to admit: after its short contract it may be requeued like any other job.
    short_job_boost: int = _knob(250, _ge(0))
    short_job_min_runtime_min: float = _knob(15.0, _ge(0))
    short_job_time_limit_min: float = _knob(60.0, _ge(0))


@dataclass(frozen=True, slots=True)
class ContractsConfig:
    """Limits on what the scheduler may do to a running job (requeue, preempt)."""

    min_runtime_cap_hours: float = _knob(8.0, _gt(0))  # --time-min above this is capped to it
    requeue_cooldown_s: float = _knob(3600.0, _ge(0))  # a job is requeued at most once per this
    preempt_cap_fraction: float = _knob(0.05, _fraction)  # max fraction of GPUs requeued per window
    preempt_cap_window_s: float = _knob(600.0, _gt(0))  # the window preempt_cap_fraction is over
    # A requeue needs the victim's delivered/owed to exceed the preemptor's by this much
    # (hysteresis against flapping), the victim over-served (> 1), the preemptor under (< 1).
    preempt_min_gap: float = _knob(0.2, _ge(0))
    preempt_after_wait_s: float = _knob(300.0, _ge(0))  # the starved job has pended this long


@dataclass(frozen=True, slots=True)
class ReclaimConfig:
    """When held-but-idle GPUs (zombies) and stuck COMPLETING jobs are reclaimed."""

    zombie_heartbeat_s: float = _knob(600.0, _gt(0))  # memory held and util ~0 this long = zombie
    zombie_util_pct: float = _knob(1.0, _percent)  # GPU utilisation at or below this counts as idle
    zombie_min_mem_mb: int = _knob(1024, _gt(0))  # GPU memory above this counts as held
    zombie_grace_s: float = _knob(900.0, _ge(0))  # time between the warning and the action
    completing_timeout_s: float = _knob(1800.0, _gt(0))  # COMPLETING longer than this is stuck
    exempt_qos: tuple[str, ...] = _knob(())  # jobs in these QOS are never reclaimed as zombies
    exempt_accounts: tuple[str, ...] = _knob(())  # nor jobs charged to these accounts
    exempt_interactive: bool = _knob(True)  # nor salloc/srun sessions (no batch script)
    # Run with each zombie warning, requeue or cancel as JSON on stdin; "" = none.
    notify_command: str = _knob("", _command_line)
    fix_runaway: bool = _knob(True)  # close slurmdbd's runaway jobs (sacctmgr show runawayjobs)
    orphan_lookback_s: float = _knob(3600.0, _gt(0))  # orphan-process reports this recent count


@dataclass(frozen=True, slots=True)
class AdmissionConfig:
    """Submit-time capability matching done by the job_submit Lua shim."""

    memory_margin_pct: float = _knob(10.0, _margin_percent)  # safety margin on GPU memory needs
    socket_timeout_ms: int = _knob(200, _gt(0))  # total time the Lua shim waits for an answer
    breaker_failures: int = _knob(3, _ge(1))  # consecutive shim failures that open the breaker
    breaker_cooldown_s: float = _knob(30.0, _gt(0))  # the shim skips submitd this long when open
    default_min_runtime_min: int = _knob(60, _ge(0))  # protected runtime when --time-min is unset
    leaf_switch_wait_min: float = _knob(10.0, _ge(0))  # multi-node jobs wait this long for one leaf
    profile_runs: int = _knob(20, _ge(1))  # last runs of a job name the memory p95 is taken over
    state_refresh_s: float = _knob(60.0, _gt(0))  # submitd reloads budgets/profiles this often


@dataclass(frozen=True, slots=True)
class QuarantineConfig:
    """When slurm-ml drains GPU nodes, resumes them, and stops itself (circuit breaker)."""

    resume_after_passes: int = _knob(3, _ge(1))  # consecutive clean checks before a resume
    breaker_fraction: float = _knob(0.2, _fraction)  # share of a node class drained per window
    breaker_window_min: float = _knob(30.0, _gt(0))  # the window breaker_fraction is over
    prolog_budget_s: float = _knob(5.0, _gt(0))  # the prolog's whole health check, hard limit


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """Policy knobs; every one has a default equal to conf/slurm-ml.yaml."""

    fairshare: FairshareConfig = field(default_factory=FairshareConfig)
    contracts: ContractsConfig = field(default_factory=ContractsConfig)
    reclaim: ReclaimConfig = field(default_factory=ReclaimConfig)
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)
    quarantine: QuarantineConfig = field(default_factory=QuarantineConfig)


@dataclass(frozen=True, slots=True)
class DaemonConfig:
    """How the reconciler daemon runs (not what it decides: that is ``policy``)."""

    metrics_port: int = _knob(9309, _ge(0))  # Prometheus /metrics port; 0 = off
    metrics_addr: str = _knob("127.0.0.1")  # address the metrics server binds
    backoff_max_s: float = _knob(600.0, _gt(0))  # longest wait after Slurm/DB failures
    lock_key: int = _knob(0x736C_6D6C_6461_656D, _ge(1))  # PostgreSQL advisory lock ("slmldaem")


@dataclass(frozen=True, slots=True)
class SlurmConfig:
    """How slurm-ml drives the Slurm commands."""

    command_timeout_s: float = _knob(30.0, _gt(0))  # every Slurm command is killed after this
    scontrol_batch_size: int = _knob(500, _ge(1))  # jobs per scontrol process (SiteFactor pushes)


_SPOOL_DIR = Path("/var/spool/slurm-ml")


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """Where slurm-ml keeps its state."""

    dsn: str = _knob("")  # PostgreSQL DSN; empty = the caller reads $SLURM_ML_DSN
    # Writes made while PostgreSQL is down land here first. (Path is immutable: RUF009 is moot.)
    spool_dir: Path = _knob(_SPOOL_DIR, _absolute)  # noqa: RUF009
    connect_timeout_s: float = _knob(5.0, _gt(0))  # PostgreSQL connect timeout


# --------------------------------------------------------------------------- cluster


@dataclass(frozen=True, slots=True)
class PartitionConfig:
    """A Slurm partition slurm-ml manages."""

    name: str
    nodes: str  # ClusterShell NodeSet expression, as written
    default: bool
    max_time_min: int


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """The Slurm cluster as slurm-ml manages it."""

    name: str  # Slurm ClusterName (lower case)
    partitions: tuple[PartitionConfig, ...]

    @property
    def default_partition(self) -> PartitionConfig:
        """The partition with ``default: true`` (a loaded config has exactly one)."""
        for part in self.partitions:
            if part.default:
                return part
        raise LookupError("no default partition")


@dataclass(frozen=True)
class Config:
    """The whole validated configuration. Not slotted: it caches node lookups."""

    cluster: ClusterConfig
    gpu_types: dict[str, GpuType]  # key = GpuType.name (the GRES type)
    node_classes: tuple[NodeClass, ...]
    budgets: BudgetTree
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    daemon: DaemonConfig = field(default_factory=DaemonConfig)

    @cached_property
    def _node_index(self) -> dict[str, NodeClass]:
        index: dict[str, NodeClass] = {}
        for node_class in self.node_classes:
            for node in _nodeset(node_class.nodes):
                index[str(node)] = node_class
        return index

    @cached_property
    def _all_nodes(self) -> tuple[str, ...]:
        union = _nodeset("")
        for node_class in self.node_classes:
            union.update(_nodeset(node_class.nodes))
        return tuple(str(node) for node in union)

    def all_nodes(self) -> list[str]:
        """Every node of every node class, expanded, in ClusterShell's natural
        order (gpu2 before gpu10; same as sorted() for zero-padded names)."""
        return list(self._all_nodes)

    def node_class_of(self, node: str) -> NodeClass | None:
        """The node class a node belongs to, None for a node slurm-ml does not know."""
        return self._node_index.get(node)

    def gpu_type_of_node(self, node: str) -> GpuType | None:
        node_class = self.node_class_of(node)
        return None if node_class is None else self.gpu_types.get(node_class.gpu_type)


# --------------------------------------------------------------------------- value checks

# Slurm-safe: what partitions, features, GRES types, switches and node names
# may use without quoting anywhere in slurm.conf or on a command line. A
# leading '-' or '.' is refused because it reads as an option or a hidden file.
_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
# sacctmgr lower-cases account and cluster names; a mixed-case name in the
# config would never match what slurmdbd reports back.
_LOWER_NAME_RE = re.compile(r"[a-z0-9_][a-z0-9_.-]*")
# useradd's rule, plus '.' (common in LDAP "first.last" accounts); upper case is
# refused because slurmdbd lower-cases user names unless PreserveCaseUser is set.
_USER_RE = re.compile(r"[a-z_][a-z0-9_.-]*")
_USER_MAX = 32
_CAPABILITY_RE = re.compile(r"[0-9]+\.[0-9]+")

_NAME_CHARS = "letters, digits, '_', '.', '-', not starting with '.' or '-'"


def _check_name(value: str) -> str | None:
    if not value:
        return "must not be empty"
    if _NAME_RE.fullmatch(value) is None:
        return f"invalid name {value!r}: use only {_NAME_CHARS}"
    return None


def _check_lower_name(value: str) -> str | None:
    if not value:
        return "must not be empty"
    if _LOWER_NAME_RE.fullmatch(value) is None:
        if _LOWER_NAME_RE.fullmatch(value.lower()) is not None:
            return f"invalid name {value!r}: must be lower case (Slurm lower-cases it)"
        return f"invalid name {value!r}: use only lower-case {_NAME_CHARS}"
    return None


def _check_user(value: str) -> str | None:
    if _USER_RE.fullmatch(value) is None or len(value) > _USER_MAX:
        return (
            f"invalid user name {value!r}: expected a Unix user name (lower-case letters, "
            f"digits, '_', '.', '-', not starting with a digit, '.' or '-'; "
            f"at most {_USER_MAX} characters)"
        )
    return None


def _check_capability(value: str) -> str | None:
    if _CAPABILITY_RE.fullmatch(value) is None:
        return f'must look like "8.0" (major.minor), got {value!r}'
    return None


def _nodeset(expr: str) -> NodeSet:
    # No group resolver: "@group" must not make parsing read groups.conf.
    return NodeSet(expr, resolver=RESOLVER_NOGROUP)


def _show(value: object) -> str:
    """A value as the admin wrote it in YAML, short enough for one line."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str | int | float):
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."
    return f"a {type(value).__name__}"


def _one_line(text: str) -> str:
    """Escape control characters: keys and values come from the file, and an
    issue must stay on its one line of the report."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _hint(key: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f" (known: {', '.join(sorted(known))})"


# --------------------------------------------------------------------------- parser


_SECTIONS_REQUIRED = ("cluster", "gpu_types", "node_classes", "budgets")
_SECTIONS_OPTIONAL = ("policy", "slurm", "store", "daemon")


class _Parser:
    """Walks the data once, collecting issues instead of stopping at the first."""

    def __init__(self) -> None:
        self.issues: list[ConfigIssue] = []

    def error(self, path: str, message: str) -> None:
        self.issues.append(ConfigIssue(_one_line(path), _one_line(message)))

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
            self.error(path, f"expected a mapping, got {_show(value)}")
            return None
        known = (*required, *optional)
        out: dict[str, object] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                self.error(_join(path, str(key)), f"unknown {word} {_show(key)}{_hint('', known)}")
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
            self.error(path, f"expected a list, got {_show(value)}")
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
            return self.list_of(self.string(), unique="value")
        raise TypeError(f"no converter for knob default {default!r}")  # a bug here, not in YAML

    # ---- scalars

    def checked(self, value: _T, path: str, check: _Check[_T] | None) -> _T | None:
        message = check(value) if check is not None else None
        if message is not None:
            self.error(path, message)
            return None
        return value

    def string(self, check: _Check[str] | None = None) -> _Conv:
        def conv(value: object, path: str) -> str | None:
            if not isinstance(value, str):
                self.error(path, f"expected a string, got {_show(value)}")
                return None
            return self.checked(value, path, check)

        return conv

    def integer(self, check: _Check[int] | None = None) -> _Conv:
        def conv(value: object, path: str) -> int | None:
            # bool is an int to Python, never to an admin.
            if isinstance(value, bool) or not isinstance(value, int):
                self.error(path, f"expected an integer, got {_show(value)}")
                return None
            return self.checked(value, path, check)

        return conv

    def number(self, check: _Check[float] | None = None) -> _Conv:
        def conv(value: object, path: str) -> float | None:
            if isinstance(value, bool) or not isinstance(value, int | float):
                self.error(path, f"expected a number, got {_show(value)}")
                return None
            try:
                number = float(value)
            except OverflowError:
                self.error(path, "number is too large")
                return None
            if not math.isfinite(number):
                self.error(path, f"expected a finite number, got {_show(value)}")
                return None
            return self.checked(number, path, check)

        return conv

    def boolean(self) -> _Conv:
        def conv(value: object, path: str) -> bool | None:
            if not isinstance(value, bool):
                self.error(path, f"expected true or false, got {_show(value)}")
                return None
            return value

        return conv

    def path(self, check: _Check[Path] | None = None) -> _Conv:
        def conv(value: object, path: str) -> Path | None:
            if not isinstance(value, str) or not value:
                self.error(path, f"expected a non-empty path, got {_show(value)}")
                return None
            return self.checked(Path(value), path, check)

        return conv

    def capability(self) -> _Conv:
        as_string = self.string(_check_capability)

        def conv(value: object, path: str) -> str | None:
            if isinstance(value, int | float) and not isinstance(value, bool):
                # YAML reads an unquoted 8.0 as a float and 9.0 vs 9 would be lost.
                self.error(path, f'expected a quoted string like "8.0", got {_show(value)}')
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
            try:
                nodes = _nodeset(expr)
            except (NodeSetException, RangeSetException) as exc:
                self.error(path, f"invalid node set {expr!r}: {exc}")
                return None
            if len(nodes) == 0:
                self.error(path, "node set is empty")
                return None
            bad = [str(node) for node in nodes if _NAME_RE.fullmatch(str(node)) is None]
            if bad:
                self.error(
                    path, f"invalid node name {bad[0]!r} in {expr!r}: use only {_NAME_CHARS}"
                )
                return None
            return expr

        return conv

    def list_of(self, item: _Conv, unique: str | None = None) -> _Conv:
        """A list (maybe empty) as a tuple; `unique` names the thing that must not repeat."""

        def conv(value: object, path: str) -> tuple[Any, ...] | None:
            if not isinstance(value, list):
                self.error(path, f"expected a list, got {_show(value)}")
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
            self.error(path, f"expected a mapping of GPU types, got {_show(value)}")
            return None, None
        if not value:
            self.error(path, "must define at least one GPU type")
            return None, None
        declared = {key for key in value if isinstance(key, str)}
        out: dict[str, GpuType] = {}
        complete = True
        features: dict[str, str] = {}
        convs: dict[str, _Conv] = {
            "memory_gb": self.number(_gt(0)),
            "nvlink_links": self.integer(_ge(0)),
            "compute_capability": self.capability(),
            "billing_weight": self.number(_ge(0)),
            "feature": self.string(_check_name),
        }
        for key, spec in value.items():
            if not isinstance(key, str):
                self.error(
                    _join(path, str(key)), f"GPU type name must be a string, got {_show(key)}"
                )
                complete = False
                continue
            key_path = _join(path, key)
            message = _check_name(key)
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
            "name": self.string(_check_name),
            "nodes": self.nodes(),
            "gpu_type": self.string(_check_name),
            "gpus_per_node": self.integer(_ge(1)),
            "leaf_switch": self.string(_check_name),
            "features": self.list_of(self.string(_check_name), unique="feature"),
            "cpus": self.integer(_ge(1)),
            "memory_mb": self.integer(_gt(0)),
        }
        out: list[NodeClass] = []
        complete = True
        names: dict[str, str] = {}
        union: NodeSet | None = _nodeset("")
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
            nodes = _nodeset(got["nodes"])
            for label, other in seen:
                # A node in two classes would have two GPU types and two switches.
                common = nodes.intersection(other)
                if len(common):
                    self.error(f"{item_path}.nodes", f"overlaps {label} on {common}")
                    complete = False
            seen.append((item_path + (f" ({got['name']})" if "name" in got else ""), nodes))
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
            name = self.string(_check_lower_name)(fields_in["name"], f"{path}.name")
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
            "name": self.string(_check_name),
            "nodes": self.nodes(),
            "default": self.boolean(),
            "max_time_min": self.integer(_gt(0)),
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
                missing = _nodeset(got["nodes"]).difference(known_nodes)
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
        as_lower_name = self.string(_check_lower_name)

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
                "weight": self.number(_gt(0)),
                "users": self.list_of(self.string(_check_user), unique="user"),
            },
        )
        programs = records(
            "program",
            BudgetProgram,
            {"name": account, "weight": self.number(_gt(0)), "projects": projects},
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
        wanted = ", ".join(_SECTIONS_REQUIRED)
        what = "empty configuration" if data is None else f"got {_show(data)}"
        message = f"expected a mapping with the sections {wanted}; {what}"
        raise ConfigError([ConfigIssue(_one_line(source), message)], source)
    parser = _Parser()
    sections = parser.mapping(data, "", _SECTIONS_REQUIRED, _SECTIONS_OPTIONAL, word="section")
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
    slurm = parser.knobs(sections.get("slurm"), "slurm", SlurmConfig)
    store = parser.knobs(sections.get("store"), "store", StoreConfig)
    daemon = parser.knobs(sections.get("daemon"), "daemon", DaemonConfig)

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
    ):
        issues = sorted(parser.issues, key=_section_rank(list(data)))
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
    )


def _policy(parser: _Parser, value: object) -> PolicyConfig | None:
    if value is None:
        return PolicyConfig()
    parts: dict[str, type[Any]] = {
        "fairshare": FairshareConfig,
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
    fs = got["fairshare"]
    if fs.short_job_boost + fs.nice_range >= fs.site_factor_step:
        parser.error("policy.fairshare.short_job_boost",
                     f"short_job_boost + nice_range ({fs.short_job_boost} + {fs.nice_range}) "
                     f"must stay below site_factor_step ({fs.site_factor_step}), or a short "
                     "job could overtake a higher-ranked team's work")
        return None
    return PolicyConfig(**got)


# --------------------------------------------------------------------------- file loading


class _StrictLoader(yaml.SafeLoader):
    """yaml.safe_load's loader, plus a record of duplicate keys in a mapping,
    which PyYAML otherwise resolves silently by keeping the last one."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[tuple[int, int, object]] = []  # (line, column, key), 1-based

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            # Keys brought in by a `<<` merge may legitimately be overridden.
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                key = self.construct_object(key_node)
                if key in seen:
                    mark = key_node.start_mark
                    self.duplicates.append((mark.line + 1, mark.column + 1, key))
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _file_error(message: str, source: str) -> ConfigError:
    return ConfigError([ConfigIssue("<file>", _one_line(message))], source)


def _read_yaml(text: str, source: str) -> tuple[object, list[tuple[int, int, object]]]:
    """The YAML document and its duplicate keys; any YAML failure is a ConfigError."""
    loader: _StrictLoader | None = None
    try:
        loader = _StrictLoader(text)  # the reader rejects control characters already here
        return loader.get_single_data(), loader.duplicates
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        raise _file_error(
            f"{source}: unacceptable character #x{exc.character:04x} at line {line}, "
            f"column {column}: {exc.reason}",
            source,
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = exc.problem or exc.context or "invalid YAML"
        raise _file_error(f"{source}: YAML syntax error{where}: {problem}", source) from None
    except yaml.YAMLError as exc:
        raise _file_error(f"{source}: YAML error: {exc}", source) from None
    except RecursionError:
        raise _file_error(f"{source}: YAML is nested too deeply", source) from None
    finally:
        if loader is not None:
            loader.dispose()


def load_config(path: str | Path) -> Config:
    """Read, parse and validate a config file; raise ConfigError listing every problem."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _file_error(f"{source}: no such file", source) from None
    except UnicodeDecodeError as exc:
        raise _file_error(f"{source}: not UTF-8 text (byte {exc.start})", source) from None
    except OSError as exc:
        raise _file_error(f"{source}: cannot read: {exc.strerror or exc}", source) from None

    data, found = _read_yaml(text, source)
    duplicates = [
        ConfigIssue(
            "<file>",
            _one_line(
                f"{source}: line {line}, column {column}: duplicate key {_show(key)} "
                "(YAML would silently keep only the last one)"
            ),
        )
        for line, column, key in found
    ]
    try:
        config = parse_config(data, source)
    except ConfigError as exc:
        raise ConfigError(duplicates + exc.issues, source) from None
    if duplicates:
        raise ConfigError(duplicates, source)
    return config
