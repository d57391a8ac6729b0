"""Tests for slurm_ml.config: the example loads, and every rule can fail, loudly and all at once."""

from __future__ import annotations

import copy
import dataclasses
import math
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import (
    AdmissionConfig,
    Config,
    ConfigError,
    ConfigIssue,
    ContractsConfig,
    DaemonConfig,
    FairshareConfig,
    HealthConfig,
    PriorityWeightsConfig,
    ReclaimConfig,
    SlurmConfig,
    StoreConfig,
    SubmitdConfig,
    load_config,
    parse_config,
)
from slurm_ml.model import GpuType

EXAMPLE = DEFAULT_CONFIG
EXAMPLE_TEXT = EXAMPLE.read_text(encoding="utf-8")
EXAMPLE_DATA: dict[str, Any] = yaml.safe_load(EXAMPLE_TEXT)

DELETE = object()  # mutation value meaning "remove this key"
Key = str | int

NAME_RULE = "use only letters, digits, '_', '.', '-', not starting with '.' or '-'"
LOWER_RULE = "use only lower-case " + NAME_RULE.removeprefix("use only ")
LOWER = "must be lower case (Slurm lower-cases it)"
CC = 'must look like "8.0" (major.minor), got'
KNOB_SECTIONS: dict[str, type[Any]] = {
    "policy.fairshare": FairshareConfig,
    "policy.priority_weights": PriorityWeightsConfig,
    "policy.contracts": ContractsConfig,
    "policy.reclaim": ReclaimConfig,
    "policy.admission": AdmissionConfig,
    "slurm": SlurmConfig,
    "store": StoreConfig,
    "daemon": DaemonConfig,
    "submitd": SubmitdConfig,
    "health": HealthConfig,
}


def example() -> dict[str, Any]:
    return copy.deepcopy(EXAMPLE_DATA)


def dotted(keys: tuple[Key, ...]) -> str:
    out = ""
    for key in keys:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else key)
    return out


def mutate(data: dict[str, Any], keys: tuple[Key, ...], value: object) -> dict[str, Any]:
    node: Any = data
    for key in keys[:-1]:
        node = node[key]
    if value is DELETE:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return data


def issues_of(data: object) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert info.value.issues, "ConfigError without issues"
    return [str(issue) for issue in info.value.issues]


def mapping_paths(node: object, keys: tuple[Key, ...] = ()) -> Iterator[tuple[Key, ...]]:
    """Every fixed-key mapping in the example (gpu_types itself is keyed by name)."""
    if isinstance(node, dict):
        if keys != ("gpu_types",):
            yield keys
        for key, child in node.items():
            yield from mapping_paths(child, (*keys, key))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            yield from mapping_paths(child, (*keys, index))


def write(tmp_path: Path, text: str | bytes, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- the example


def test_example_file_loads() -> None:
    config = load_config(EXAMPLE)
    assert config == parse_config(EXAMPLE_DATA)
    assert config.cluster.name == "slurmml"
    assert [(p.name, p.nodes, p.default, p.max_time_min) for p in config.cluster.partitions] == [
        ("gpu", "gpu[01-06]", True, 10080),
        ("debug", "gpu[01-06]", False, 60),
    ]
    assert config.cluster.default_partition.name == "gpu"
    assert config.gpu_types["a100_80g"] == GpuType("a100_80g", 80.0, 12, "8.0", 1.0, "a100_80g")
    assert sorted(config.gpu_types) == ["a100_40g", "a100_80g", "v100"]
    assert all(name == gpu.name for name, gpu in config.gpu_types.items())
    assert [nc.name for nc in config.node_classes] == ["a100-80g", "a100-40g", "v100-pcie"]
    assert config.node_classes[0].features == ("a100", "a100_80g", "nvlink")
    assert config.budgets.accounts() == [
        ("ml", None),
        ("nlp", "ml"),
        ("llm-pretrain", "nlp"),
        ("llm-eval", "nlp"),
        ("vision", "ml"),
        ("detection", "vision"),
    ]
    assert config.budgets.user_accounts()["alice"] == ["llm-pretrain", "detection"]
    assert config.policy.contracts.preempt_cap_fraction == 0.05
    assert config.store.spool_dir == Path("/var/spool/slurm-ml")


def test_ints_become_floats_where_floats_are_expected() -> None:
    config = load_config(EXAMPLE)
    assert type(config.gpu_types["a100_80g"].memory_gb) is float
    assert type(config.budgets.programs[0].weight) is float
    assert type(config.policy.fairshare.window_hours) is float
    assert type(config.slurm.command_timeout_s) is float
    assert type(config.slurm.scontrol_batch_size) is int


def test_defaults_equal_the_example_values() -> None:
    data = example()
    for section in ("policy", "slurm", "store", "daemon", "submitd", "health"):
        del data[section]
    assert parse_config(data) == load_config(EXAMPLE)


@pytest.mark.parametrize("section", sorted(KNOB_SECTIONS))
def test_each_knob_default_matches_the_example(section: str) -> None:
    node: Any = EXAMPLE_DATA
    for key in section.split("."):
        node = node[key]
    defaults = KNOB_SECTIONS[section]()
    assert {f.name for f in dataclasses.fields(defaults)} == set(node), "keys differ from example"
    for name, value in node.items():
        default = getattr(defaults, name)
        want = tuple(value) if isinstance(default, tuple) else value
        assert default == (Path(want) if isinstance(default, Path) else want), name


@pytest.mark.parametrize(
    "keys",
    [("policy",), ("slurm",), ("store",), ("health",), ("policy", "fairshare"),
     ("policy", "reclaim")],
    ids=dotted,
)
def test_null_optional_section_means_defaults(keys: tuple[Key, ...]) -> None:
    config = parse_config(mutate(example(), keys, None))
    assert config == load_config(EXAMPLE)


def test_each_optional_knob_may_be_left_out() -> None:
    data = example()
    for section in KNOB_SECTIONS:
        node: Any = data
        for key in section.split("."):
            node = node[key]
        node.clear()
    assert parse_config(data) == load_config(EXAMPLE)


def test_partition_default_is_optional_and_false() -> None:
    config = parse_config(mutate(example(), ("cluster", "partitions", 1, "default"), DELETE))
    assert config.cluster.partitions[1].default is False


def test_user_may_be_in_several_projects_and_projects_may_be_empty() -> None:
    data = mutate(example(), ("budgets", "programs", 0, "projects", 1, "users"), [])
    config = parse_config(data)
    assert config.budgets.programs[0].projects[1].users == ()
    assert config.budgets.user_accounts()["alice"] == ["llm-pretrain", "detection"]


@pytest.mark.parametrize(
    ("keys", "value"),
    [
        (("gpu_types", "v100", "billing_weight"), 0),
        (("gpu_types", "v100", "compute_capability"), "10.0"),
        (("policy", "contracts", "preempt_cap_fraction"), 1),
        (("policy", "contracts", "requeue_cooldown_s"), 0),
        (("policy", "reclaim", "zombie_util_pct"), 0),
        (("policy", "reclaim", "zombie_grace_s"), 0),
        (("policy", "admission", "memory_margin_pct"), 0),
        (("store", "dsn"), "postgresql://slurmml@db/slurmml"),
        (("budgets", "programs", 0, "projects", 0, "users"), ["first.last", "_svc", "a-b_1"]),
        (("node_classes", 0, "features"), []),
        (("cluster", "partitions", 1, "default"), False),
    ],
    ids=lambda v: dotted(v) if isinstance(v, tuple) else None,
)
def test_boundary_values_are_accepted(keys: tuple[Key, ...], value: object) -> None:
    parse_config(mutate(example(), keys, value))


# --------------------------------------------------------------------------- everything at once

MANY_ERRORS = """\
cluster:
  name: SlurmML
  partitions:
    - name: gpu
      nodes: "gpu[01-04"
      default: true
      max_time_min: 0
    - name: debug
      nodes: "gpu[01-09]"
      default: true
      max_time_min: 60
      extra: 1
gpu_types:
  a100:
    memory_gb: x
    nvlink_links: -1
    compute_capability: 8.0
    billing_weight: -0.5
    feature: a100
  v100:
    memory_gb: 32
    nvlink_links: 0
    compute_capability: "7"
    billing_weight: 0.4
    feature: a100
node_classes:
  - name: big
    nodes: "gpu[01-04]"
    gpu_type: h200
    gpus_per_node: 0
    leaf_switch: leaf1
    features: [a100, a100]
    cpus: true
    memory_mb: 512000
  - name: small
    nodes: "gpu[04-05]"
    gpu_type: v100
    gpus_per_node: 4
    leaf_switch: "leaf 2"
    features: []
    cpus: 32
budgets:
  org: ml
  programs:
    - name: nlp
      weight: 60
      projects:
        - name: ML
          weight: 40
          users: [alice, alice, Bob]
    - name: nlp
      weight: 0
      projects: []
policy:
  fairshare:
    window_hours: 0
  contracts:
    preempt_cap_fraction: 1.5
  admission:
    socket_timeout_ms: 2.5
slurm:
  command_timeout_s: -1
store:
  spool_dir: relative/dir
  colour: blue
"""


def test_many_errors_are_all_reported_with_exact_paths(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, MANY_ERRORS))
    got = [str(issue) for issue in info.value.issues]
    bad_user = (
        "invalid user name 'Bob': expected a Unix user name (lower-case letters, digits, "
        "'_', '.', '-', not starting with a digit, '.' or '-'; at most 32 characters)"
    )
    expected = [
        "cluster.name: invalid name 'SlurmML': must be lower case (Slurm lower-cases it)",
        "cluster.partitions[0].nodes: invalid node set 'gpu[01-04': ",  # ClusterShell's words
        "cluster.partitions[0].max_time_min: must be > 0",
        "cluster.partitions[1].extra: unknown key (known: default, max_time_min, name, nodes)",
        "cluster.partitions[1].default: only one partition may be the default "
        "(cluster.partitions[0] already is)",
        "cluster.partitions[1].nodes: nodes not in any node class: gpu[06-09]",
        "gpu_types.a100.memory_gb: expected a number, got 'x'",
        "gpu_types.a100.nvlink_links: must be >= 0",
        'gpu_types.a100.compute_capability: expected a quoted string like "8.0", got 8.0',
        "gpu_types.a100.billing_weight: must be >= 0",
        "gpu_types.v100.compute_capability: must look like \"8.0\" (major.minor), got '7'",
        "gpu_types.v100.feature: duplicate feature 'a100' (first at gpu_types.a100.feature)",
        "node_classes[0].gpus_per_node: must be >= 1",
        "node_classes[0].features[1]: feature 'a100' is listed twice",
        "node_classes[0].cpus: expected an integer, got true",
        "node_classes[0].gpu_type: unknown GPU type 'h200' (known: a100, v100)",
        "node_classes[1].memory_mb: missing required key",
        f"node_classes[1].leaf_switch: invalid name 'leaf 2': {NAME_RULE}",
        "node_classes[1].nodes: overlaps node_classes[0] (big) on gpu04",
        "budgets.programs[0].projects[0].name: invalid name 'ML': must be lower case "
        "(Slurm lower-cases it)",
        "budgets.programs[0].projects[0].users[1]: user 'alice' is listed twice",
        f"budgets.programs[0].projects[0].users[2]: {bad_user}",
        "budgets.programs[1].name: duplicate account name 'nlp' "
        "(first at budgets.programs[0].name)",
        "budgets.programs[1].weight: must be > 0",
        "budgets.programs[1].projects: must list at least one project",
        "policy.fairshare.window_hours: must be > 0",
        "policy.contracts.preempt_cap_fraction: must be in (0, 1]",
        "policy.admission.socket_timeout_ms: expected an integer, got 2.5",
        "slurm.command_timeout_s: must be > 0",
        "store.colour: unknown key (known: connect_timeout_s, dsn, spool_dir)",
        "store.spool_dir: must be an absolute path",
    ]
    assert len(got) == len(expected), "\n".join(got)
    for line, want in zip(got, expected, strict=True):
        if want.endswith(": "):
            assert line.startswith(want)
        else:
            assert line == want
    assert str(info.value) == "\n".join(got)


# --------------------------------------------------------------------------- one rule at a time

NC = ("node_classes",)
PART = ("cluster", "partitions")
PROG = ("budgets", "programs")
PROJ = (*PROG, 0, "projects")
GPU = ("gpu_types", "a100_80g")
BAD_USER = (
    "expected a Unix user name (lower-case letters, digits, '_', '.', '-', "
    "not starting with a digit, '.' or '-'; at most 32 characters)"
)
GPU_SPEC = {
    "memory_gb": 141,
    "nvlink_links": 18,
    "compute_capability": "9.0",
    "billing_weight": 2,
    "feature": "h200",
}

RULES: list[tuple[str, tuple[Key, ...], object, str]] = [
    # --- types
    ("number-from-string", (*GPU, "memory_gb"), "x", "expected a number, got 'x'"),
    ("number-from-bool", (*GPU, "memory_gb"), True, "expected a number, got true"),
    ("number-from-list", (*GPU, "memory_gb"), [80], "expected a number, got a list"),
    ("number-nan", (*GPU, "memory_gb"), math.nan, "expected a finite number, got nan"),
    ("number-inf", (*GPU, "memory_gb"), math.inf, "expected a finite number, got inf"),
    ("number-huge", (*GPU, "memory_gb"), 10**400, "number is too large"),
    ("int-from-float", (*NC, 0, "gpus_per_node"), 8.0, "expected an integer, got 8.0"),
    ("int-from-bool", (*NC, 0, "gpus_per_node"), True, "expected an integer, got true"),
    ("int-from-string", (*PART, 0, "max_time_min"), "60", "expected an integer, got '60'"),
    ("str-from-int", ("cluster", "name"), 5, "expected a string, got 5"),
    ("str-from-null", (*NC, 0, "leaf_switch"), None, "expected a string, got null"),
    ("bool-from-string", (*PART, 1, "default"), "no", "expected true or false, got 'no'"),
    ("list-from-string", (*NC, 0, "features"), "a100", "expected a list, got 'a100'"),
    ("mapping-from-list", ("cluster",), [], "expected a mapping, got a list"),
    ("mapping-from-scalar", ("policy",), "x", "expected a mapping, got 'x'"),
    ("record-from-scalar", (*NC, 0), "x", "expected a mapping, got 'x'"),
    # --- GPU types
    ("memory-zero", (*GPU, "memory_gb"), 0, "must be > 0"),
    ("memory-negative", (*GPU, "memory_gb"), -1, "must be > 0"),
    ("nvlink-negative", (*GPU, "nvlink_links"), -1, "must be >= 0"),
    ("billing-negative", (*GPU, "billing_weight"), -0.1, "must be >= 0"),
    ("cc-no-minor", (*GPU, "compute_capability"), "8", f"{CC} '8'"),
    ("cc-word", (*GPU, "compute_capability"), "sm80", f"{CC} 'sm80'"),
    (
        "cc-unquoted",
        (*GPU, "compute_capability"),
        8.0,
        'expected a quoted string like "8.0", got 8.0',
    ),
    ("feature-empty", (*GPU, "feature"), "", "must not be empty"),
    ("feature-space", (*GPU, "feature"), "a 100", f"invalid name 'a 100': {NAME_RULE}"),
    ("feature-dash", (*GPU, "feature"), "-a100", f"invalid name '-a100': {NAME_RULE}"),
    ("gpu-types-empty", ("gpu_types",), {}, "must define at least one GPU type"),
    ("gpu-types-list", ("gpu_types",), [], "expected a mapping of GPU types, got a list"),
    # --- node classes
    ("gpus-per-node-zero", (*NC, 0, "gpus_per_node"), 0, "must be >= 1"),
    ("cpus-zero", (*NC, 0, "cpus"), 0, "must be >= 1"),
    ("memory-mb-zero", (*NC, 0, "memory_mb"), 0, "must be > 0"),
    ("class-name-empty", (*NC, 0, "name"), "", "must not be empty"),
    ("class-name-slash", (*NC, 0, "name"), "a/b", f"invalid name 'a/b': {NAME_RULE}"),
    ("switch-space", (*NC, 0, "leaf_switch"), "leaf 1", f"invalid name 'leaf 1': {NAME_RULE}"),
    ("feature-not-string", (*NC, 0, "features", 0), 1, "expected a string, got 1"),
    ("feature-bad", (*NC, 0, "features", 0), "a&b", f"invalid name 'a&b': {NAME_RULE}"),
    ("nodes-empty", (*NC, 0, "nodes"), "", "node set is empty"),
    (
        "nodes-group",
        (*NC, 0, "nodes"),
        "@rack1",
        f"invalid node name '@rack1' in '@rack1': {NAME_RULE}",
    ),
    ("node-classes-empty", NC, [], "must list at least one node class"),
    ("node-classes-mapping", NC, {}, "expected a list, got a mapping"),
    # --- cluster
    ("cluster-upper", ("cluster", "name"), "SlurmML", f"invalid name 'SlurmML': {LOWER}"),
    ("cluster-empty", ("cluster", "name"), "", "must not be empty"),
    (
        "cluster-space",
        ("cluster", "name"),
        "my cluster",
        f"invalid name 'my cluster': {LOWER_RULE}",
    ),
    ("partition-name-bad", (*PART, 0, "name"), "g p u", f"invalid name 'g p u': {NAME_RULE}"),
    ("max-time-zero", (*PART, 0, "max_time_min"), 0, "must be > 0"),
    ("partitions-empty", PART, [], "must list at least one partition"),
    # --- budgets
    ("org-upper", ("budgets", "org"), "ML", f"invalid name 'ML': {LOWER}"),
    ("org-empty", ("budgets", "org"), "", "must not be empty"),
    ("program-weight-zero", (*PROG, 1, "weight"), 0, "must be > 0"),
    ("project-weight-negative", (*PROJ, 0, "weight"), -1, "must be > 0"),
    ("project-name-upper", (*PROJ, 0, "name"), "LLM", f"invalid name 'LLM': {LOWER}"),
    ("project-name-space", (*PROJ, 0, "name"), "llm pre", f"invalid name 'llm pre': {LOWER_RULE}"),
    ("programs-empty", PROG, [], "must list at least one program"),
    ("projects-empty", PROJ, [], "must list at least one project"),
    ("users-string", (*PROJ, 0, "users"), "alice", "expected a list, got 'alice'"),
    ("user-upper", (*PROJ, 0, "users", 0), "Alice", f"invalid user name 'Alice': {BAD_USER}"),
    (
        "user-digit-first",
        (*PROJ, 0, "users", 0),
        "1alice",
        f"invalid user name '1alice': {BAD_USER}",
    ),
    (
        "user-dash-first",
        (*PROJ, 0, "users", 0),
        "-alice",
        f"invalid user name '-alice': {BAD_USER}",
    ),
    ("user-space", (*PROJ, 0, "users", 0), "al ice", f"invalid user name 'al ice': {BAD_USER}"),
    ("user-empty", (*PROJ, 0, "users", 0), "", f"invalid user name '': {BAD_USER}"),
    (
        "user-too-long",
        (*PROJ, 0, "users", 0),
        "a" * 33,
        f"invalid user name '{'a' * 33}': {BAD_USER}",
    ),
    ("user-not-string", (*PROJ, 0, "users", 0), 7, "expected a string, got 7"),
    # --- knobs
    ("fraction-zero", ("policy", "contracts", "preempt_cap_fraction"), 0, "must be in (0, 1]"),
    ("check-fraction-zero", ("policy", "quarantine", "breaker_check_fraction"), 0,
     "must be in (0, 1]"),
    ("check-fraction-over-one", ("policy", "quarantine", "breaker_check_fraction"), 1.5,
     "must be in (0, 1]"),
    (
        "fraction-over-one",
        ("policy", "contracts", "preempt_cap_fraction"),
        1.01,
        "must be in (0, 1]",
    ),
    ("pct-over-100", ("policy", "reclaim", "zombie_util_pct"), 101, "must be in [0, 100]"),
    ("pct-negative", ("policy", "reclaim", "zombie_util_pct"), -1, "must be in [0, 100]"),
    ("margin-100", ("policy", "admission", "memory_margin_pct"), 100, "must be in [0, 100)"),
    ("cooldown-negative", ("policy", "contracts", "requeue_cooldown_s"), -1, "must be >= 0"),
    ("grace-negative", ("policy", "reclaim", "zombie_grace_s"), -1, "must be >= 0"),
    ("timeout-zero", ("slurm", "command_timeout_s"), 0, "must be > 0"),
    ("connect-timeout-zero", ("store", "connect_timeout_s"), 0, "must be > 0"),
    ("socket-timeout-zero", ("policy", "admission", "socket_timeout_ms"), 0, "must be > 0"),
    ("batch-zero", ("slurm", "scontrol_batch_size"), 0, "must be >= 1"),
    ("window-zero", ("policy", "fairshare", "window_hours"), 0, "must be > 0"),
    ("site-factor-zero", ("policy", "fairshare", "site_factor_max"), 0, "must be > 0"),
    ("spool-relative", ("store", "spool_dir"), "spool", "must be an absolute path"),
    ("spool-empty", ("store", "spool_dir"), "", "expected a non-empty path, got ''"),
    ("dsn-not-string", ("store", "dsn"), 5, "expected a string, got 5"),
    ("textfile-relative", ("health", "textfile_dir"), "prom", 'must be an absolute path, or "" for none'),
]


@pytest.mark.parametrize(
    ("keys", "value", "message"), [r[1:] for r in RULES], ids=[r[0] for r in RULES]
)
def test_each_rule_reports_its_path(keys: tuple[Key, ...], value: object, message: str) -> None:
    assert issues_of(mutate(example(), keys, value)) == [f"{dotted(keys)}: {message}"]


def test_invalid_nodeset_is_reported_with_its_path() -> None:
    got = issues_of(mutate(example(), (*NC, 0, "nodes"), "gpu[01-02"))
    assert len(got) == 1
    assert got[0].startswith("node_classes[0].nodes: invalid node set 'gpu[01-02': ")


def test_reversed_range_is_an_invalid_nodeset() -> None:
    got = issues_of(mutate(example(), (*PART, 0, "nodes"), "gpu[06-01]"))
    assert len(got) == 1
    assert got[0].startswith("cluster.partitions[0].nodes: invalid node set 'gpu[06-01]': ")


def test_gpu_type_name_must_be_slurm_safe() -> None:
    # Blanks, ':' and names Slurm reads as counts: test_gpu_type_names.py.
    data = mutate(example(), ("gpu_types", "h200+sxm"), GPU_SPEC)
    assert issues_of(data) == [f"gpu_types.h200+sxm: invalid name 'h200+sxm': {NAME_RULE}"]


def test_gpu_type_name_must_be_a_string() -> None:
    data = mutate(example(), ("gpu_types", 100), GPU_SPEC)
    assert issues_of(data) == ["gpu_types.100: GPU type name must be a string, got 100"]


def test_gpu_features_are_unique() -> None:
    data = mutate(example(), ("gpu_types", "a100_40g", "feature"), "a100_80g")
    assert issues_of(data) == [
        "gpu_types.a100_40g.feature: duplicate feature 'a100_80g' "
        "(first at gpu_types.a100_80g.feature)"
    ]


# --------------------------------------------------------------------------- cross checks


def test_node_class_gpu_type_must_be_known() -> None:
    assert issues_of(mutate(example(), (*NC, 0, "gpu_type"), "h200")) == [
        "node_classes[0].gpu_type: unknown GPU type 'h200' (known: a100_40g, a100_80g, v100)"
    ]


def test_node_class_naming_a_broken_gpu_type_is_not_blamed_twice() -> None:
    data = mutate(example(), (*GPU, "memory_gb"), "x")
    assert issues_of(data) == ["gpu_types.a100_80g.memory_gb: expected a number, got 'x'"]


def test_broken_gpu_types_section_does_not_cascade() -> None:
    assert issues_of(mutate(example(), ("gpu_types",), "x")) == [
        "gpu_types: expected a mapping of GPU types, got 'x'"
    ]


def test_node_classes_must_not_overlap() -> None:
    assert issues_of(mutate(example(), (*NC, 1, "nodes"), "gpu[02-04]")) == [
        "node_classes[1].nodes: overlaps node_classes[0] (a100-80g) on gpu02"
    ]


def test_overlap_is_reported_against_every_earlier_class() -> None:
    assert issues_of(mutate(example(), (*NC, 2, "nodes"), "gpu[01-06]")) == [
        "node_classes[2].nodes: overlaps node_classes[0] (a100-80g) on gpu[01-02]",
        "node_classes[2].nodes: overlaps node_classes[1] (a100-40g) on gpu[03-04]",
    ]


def test_node_class_names_are_unique() -> None:
    assert issues_of(mutate(example(), (*NC, 1, "name"), "a100-80g")) == [
        "node_classes[1].name: duplicate node class name 'a100-80g' (first at node_classes[0].name)"
    ]


def test_partition_nodes_must_be_covered_by_node_classes() -> None:
    assert issues_of(mutate(example(), (*PART, 1, "nodes"), "gpu[01-07],login1")) == [
        "cluster.partitions[1].nodes: nodes not in any node class: gpu07,login1"
    ]


def test_uncovered_check_is_skipped_when_a_node_class_set_is_unknown() -> None:
    data = mutate(example(), (*NC, 0, "nodes"), DELETE)
    assert issues_of(data) == ["node_classes[0].nodes: missing required key"]


def test_exactly_one_default_partition_none() -> None:
    assert issues_of(mutate(example(), (*PART, 0, "default"), False)) == [
        "cluster.partitions: exactly one partition must have default: true (none has)"
    ]


def test_exactly_one_default_partition_two() -> None:
    assert issues_of(mutate(example(), (*PART, 1, "default"), True)) == [
        "cluster.partitions[1].default: only one partition may be the default "
        "(cluster.partitions[0] already is)"
    ]


def test_no_default_check_waits_for_unparsed_defaults() -> None:
    data = mutate(example(), (*PART, 0, "default"), "yes")
    assert issues_of(data) == ["cluster.partitions[0].default: expected true or false, got 'yes'"]


def test_partition_names_are_unique() -> None:
    assert issues_of(mutate(example(), (*PART, 1, "name"), "gpu")) == [
        "cluster.partitions[1].name: duplicate partition name 'gpu' "
        "(first at cluster.partitions[0].name)"
    ]


@pytest.mark.parametrize(
    ("keys", "name", "first"),
    [
        ((*PROG, 0, "name"), "ml", "budgets.org"),
        ((*PROJ, 0, "name"), "ml", "budgets.org"),
        ((*PROG, 1, "name"), "llm-pretrain", "budgets.programs[0].projects[0].name"),
        ((*PROJ, 1, "name"), "llm-pretrain", "budgets.programs[0].projects[0].name"),
        ((*PROG, 1, "projects", 0, "name"), "llm-eval", "budgets.programs[0].projects[1].name"),
        ((*PROG, 1, "name"), "nlp", "budgets.programs[0].name"),
    ],
    ids=lambda v: dotted(v) if isinstance(v, tuple) else None,
)
def test_account_names_are_unique_across_the_tree(
    keys: tuple[Key, ...], name: str, first: str
) -> None:
    got = issues_of(mutate(example(), keys, name))
    assert got == [f"{dotted(keys)}: duplicate account name {name!r} (first at {first})"]


def test_user_not_twice_in_one_project() -> None:
    data = mutate(example(), (*PROJ, 0, "users"), ["alice", "bob", "alice"])
    assert issues_of(data) == [
        "budgets.programs[0].projects[0].users[2]: user 'alice' is listed twice"
    ]


def test_node_features_not_twice_in_one_class() -> None:
    data = mutate(example(), (*NC, 2, "features"), ["v100", "pcie", "v100"])
    assert issues_of(data) == ["node_classes[2].features[2]: feature 'v100' is listed twice"]


# --------------------------------------------------------------------------- unknown, missing keys

ALL_MAPPINGS = list(mapping_paths(EXAMPLE_DATA))


@pytest.mark.parametrize("keys", ALL_MAPPINGS, ids=lambda k: dotted(k) or "<root>")
def test_unknown_keys_are_errors_at_every_level(keys: tuple[Key, ...]) -> None:
    data = mutate(example(), (*keys, "bogus_knob"), 1)
    got = issues_of(data)
    word = "section" if not keys else "key"
    assert len(got) == 1
    assert got[0].startswith(f"{dotted((*keys, 'bogus_knob'))}: unknown {word} (")


def test_unknown_key_message_lists_the_known_keys() -> None:
    got = issues_of(mutate(example(), ("slurm", "bogus"), 1))
    assert got == ["slurm.bogus: unknown key (known: command_timeout_s, scontrol_batch_size)"]


def test_unknown_key_suggests_a_near_miss() -> None:
    got = issues_of(mutate(example(), ("policy", "fairshare", "window_hour"), 24))
    assert got == ["policy.fairshare.window_hour: unknown key (did you mean 'window_hours'?)"]


def test_unknown_section_suggests_a_near_miss() -> None:
    assert issues_of(mutate(example(), ("polcy",), {})) == [
        "polcy: unknown section (did you mean 'policy'?)"
    ]


def test_non_string_key_is_unknown() -> None:
    got = issues_of(mutate(example(), ("slurm", 1), 1))
    assert got == ["slurm.1: unknown key 1 (known: command_timeout_s, scontrol_batch_size)"]


@pytest.mark.parametrize("section", ["cluster", "gpu_types", "node_classes", "budgets"])
def test_missing_required_section(section: str) -> None:
    assert issues_of(mutate(example(), (section,), DELETE)) == [
        f"{section}: missing required section"
    ]


def test_all_missing_sections_are_reported() -> None:
    assert issues_of({"slurm": {}}) == [
        "cluster: missing required section",
        "gpu_types: missing required section",
        "node_classes: missing required section",
        "budgets: missing required section",
    ]


REQUIRED_KEYS = [
    (("cluster",), "name"),
    (("cluster",), "partitions"),
    ((*PART, 0), "name"),
    ((*PART, 0), "nodes"),
    ((*PART, 0), "max_time_min"),
    *[(GPU, key) for key in GPU_SPEC],
    *[
        ((*NC, 0), key)
        for key in (
            "name",
            "nodes",
            "gpu_type",
            "gpus_per_node",
            "leaf_switch",
            "features",
            "cpus",
            "memory_mb",
        )
    ],
    (("budgets",), "org"),
    (("budgets",), "programs"),
    *[((*PROG, 0), key) for key in ("name", "weight", "projects")],
    *[((*PROJ, 0), key) for key in ("name", "weight", "users")],
]


@pytest.mark.parametrize(
    ("keys", "key"), REQUIRED_KEYS, ids=[dotted((*k, name)) for k, name in REQUIRED_KEYS]
)
def test_missing_required_key(keys: tuple[Key, ...], key: str) -> None:
    got = issues_of(mutate(example(), (*keys, key), DELETE))
    assert got == [f"{dotted((*keys, key))}: missing required key"]


@pytest.mark.parametrize("section", sorted(KNOB_SECTIONS))
def test_every_knob_is_type_checked(section: str) -> None:
    data = example()
    node: Any = data
    for key in section.split("."):
        node = node[key]
    for name in node:
        node[name] = [1]
    got = issues_of(data)
    # A list knob reports the bad item ("exempt_qos[0]"), a scalar knob itself.
    assert [g.split(": ", 1)[0].split("[")[0] for g in got] == [f"{section}.{n}" for n in node]
    assert all("expected " in line and (line.endswith("got a list") or "[0]: " in line)
               for line in got)


# --------------------------------------------------------------------------- document and file


@pytest.mark.parametrize(
    ("data", "got"),
    [(None, "empty configuration"), ([], "got a list"), ("x", "got 'x'"), (3, "got 3")],
)
def test_document_must_be_a_mapping(data: object, got: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(data, source="site.yaml")
    assert [str(i) for i in info.value.issues] == [
        "site.yaml: expected a mapping with the sections cluster, gpu_types, node_classes, "
        f"budgets; {got}"
    ]


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.issues == [ConfigIssue("<file>", f"{path}: no such file")]


def test_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(str(tmp_path))  # a directory; also exercises the str argument
    assert [i.path for i in info.value.issues] == ["<file>"]
    assert info.value.issues[0].message.startswith(f"{tmp_path}: cannot read: ")


def test_non_utf8_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, b"cluster:\n  name: \xff\n"))
    assert info.value.issues[0].path == "<file>"
    assert "not UTF-8 text" in info.value.issues[0].message


def test_empty_file(tmp_path: Path) -> None:
    path = write(tmp_path, "# nothing yet\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert [i.path for i in info.value.issues] == [str(path)]
    assert info.value.issues[0].message.endswith("; empty configuration")


def test_yaml_syntax_error_gives_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "cluster:\n  name: x\n   bad: y\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.issues == [
        ConfigIssue(
            "<file>",
            f"{path}: YAML syntax error at line 3, column 7: mapping values are not allowed here",
        )
    ]


def test_unclosed_flow_list_is_a_syntax_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, "node_classes: [\n"))
    assert "YAML syntax error at line 2, column 1" in info.value.issues[0].message


def test_control_character_is_a_yaml_error_with_position(tmp_path: Path) -> None:
    path = write(tmp_path, "cluster:\n  name: a\x1fb\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.issues == [
        ConfigIssue(
            "<file>",
            f"{path}: unacceptable character #x001f at line 2, column 10: "
            "special characters are not allowed",
        )
    ]


def test_control_characters_in_keys_do_not_break_the_one_line_report() -> None:
    got = issues_of(mutate(example(), ("slurm", "a\nb"), 1))
    assert got == ["slurm.a\\nb: unknown key (known: command_timeout_s, scontrol_batch_size)"]


def test_several_documents_are_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, EXAMPLE_TEXT + "\n---\n" + EXAMPLE_TEXT))
    assert "YAML syntax error" in str(info.value)


def test_python_tags_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, "cluster: !!python/object/apply:os.system [true]\n"))
    assert info.value.issues[0].path == "<file>"


def test_duplicate_yaml_keys_are_errors(tmp_path: Path) -> None:
    text = EXAMPLE_TEXT.replace("  name: slurmml", "  name: slurmml\n  name: other", 1)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if t.startswith("  name: other"))
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.issues == [
        ConfigIssue(
            "<file>",
            f"{path}: line {line}, column 3: duplicate key 'name' "
            "(YAML would silently keep only the last one)",
        )
    ]


def test_duplicate_keys_are_reported_with_the_other_errors(tmp_path: Path) -> None:
    text = EXAMPLE_TEXT.replace("slurm:\n", "slurm:\n  bogus: 1\nslurm:\n", 1)
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text))
    messages = [str(i) for i in info.value.issues]
    assert len(messages) == 1  # the second slurm: mapping replaced the first...
    assert "duplicate key 'slurm'" in messages[0]  # ...but the duplicate is still reported
    text = EXAMPLE_TEXT.replace("  command_timeout_s: 30", "  command_timeout_s: 0\n  bogus: 1")
    text = text.replace("  name: slurmml", "  name: slurmml\n  name: slurmml", 1)
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text))
    messages = [str(i) for i in info.value.issues]
    assert len(messages) == 3
    assert "duplicate key 'name'" in messages[0]
    assert messages[1:] == [
        "slurm.bogus: unknown key (known: command_timeout_s, scontrol_batch_size)",
        "slurm.command_timeout_s: must be > 0",
    ]


def test_yaml_merge_keys_are_not_duplicates(tmp_path: Path) -> None:
    text = EXAMPLE_TEXT.replace(
        '  - name: a100-40g\n    nodes: "gpu[03-04]"\n    gpu_type: a100_40g\n'
        "    gpus_per_node: 8\n    leaf_switch: leaf2\n    features: [a100, a100_40g, nvlink]\n"
        "    cpus: 64\n    memory_mb: 512000\n",
        '  - <<: *big\n    name: a100-40g\n    nodes: "gpu[03-04]"\n    gpu_type: a100_40g\n'
        "    leaf_switch: leaf2\n    features: [a100, a100_40g, nvlink]\n",
    ).replace("  - name: a100-80g\n", "  - &big\n    name: a100-80g\n")
    assert "<<: *big" in text
    assert load_config(write(tmp_path, text)) == load_config(EXAMPLE)


# --------------------------------------------------------------------------- the error object


def test_config_issue_and_error_text() -> None:
    issues = [ConfigIssue("a.b", "must be > 0"), ConfigIssue("c[0]", "unknown key")]
    assert str(issues[0]) == "a.b: must be > 0"
    error = ConfigError(issues, "x.yaml")
    assert str(error) == "a.b: must be > 0\nc[0]: unknown key"
    assert error.issues == issues
    assert error.source == "x.yaml"
    assert isinstance(error, Exception)


def test_config_error_survives_pickling() -> None:
    error = ConfigError([ConfigIssue("a", "b")], "x.yaml")
    again = pickle.loads(pickle.dumps(error))
    assert again.issues == error.issues
    assert str(again) == "a: b"


# --------------------------------------------------------------------------- the Config object


def test_config_is_frozen() -> None:
    config = load_config(EXAMPLE)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.cluster = config.cluster  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.policy.fairshare.window_hours = 1.0  # type: ignore[misc]


def test_node_helpers() -> None:
    config = load_config(EXAMPLE)
    assert config.all_nodes() == [f"gpu0{i}" for i in range(1, 7)]
    node_class = config.node_class_of("gpu04")
    assert node_class is not None
    assert node_class.name == "a100-40g"
    gpu = config.gpu_type_of_node("gpu05")
    assert gpu is not None
    assert gpu.name == "v100"
    assert config.node_class_of("login1") is None
    assert config.gpu_type_of_node("login1") is None
    config.all_nodes().clear()  # callers get a copy
    assert len(config.all_nodes()) == 6


def test_all_nodes_is_in_natural_order() -> None:
    data = mutate(example(), (*NC, 0, "nodes"), "n[1-10]")
    for index in (0, 1):
        data = mutate(data, (*PART, index, "nodes"), "n[1-10],gpu[03-06]")
    config = parse_config(data)
    # ClusterShell orders by name pattern, then numerically: n2 before n10.
    assert config.all_nodes() == ["gpu03", "gpu04", "gpu05", "gpu06"] + [
        f"n{i}" for i in range(1, 11)
    ]


# --------------------------------------------------------------------------- only ConfigError, ever


def _all_keys(node: object) -> set[str]:
    if isinstance(node, dict):
        out = {str(k) for k in node}
        for child in node.values():
            out |= _all_keys(child)
        return out
    if isinstance(node, list):
        return set().union(*(_all_keys(child) for child in node)) if node else set()
    return set()


KEYS = sorted(_all_keys(EXAMPLE_DATA))
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(),
    st.text(max_size=12),
    st.sampled_from(["gpu[01-06]", "gpu[01-", "8.0", "a100_80g", "alice", "", "@g", "x[2-1]"]),
)
YAMLISH = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(
            st.one_of(st.sampled_from(KEYS), st.text(max_size=8), st.integers()),
            children,
            max_size=5,
        ),
    ),
    max_leaves=25,
)


def _check_outcome(data: object) -> None:
    try:
        config = parse_config(data)
    except ConfigError as error:
        assert error.issues
        for issue in error.issues:
            assert isinstance(issue.path, str)
            assert isinstance(issue.message, str)
            assert issue.message
        assert str(error).count("\n") == len(error.issues) - 1
    else:
        assert isinstance(config, Config)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(YAMLISH)
def test_arbitrary_data_only_raises_config_error(data: object) -> None:
    _check_outcome(data)


def _leaf_paths(node: object, keys: tuple[Key, ...] = ()) -> Iterator[tuple[Key, ...]]:
    if keys:
        yield keys
    if isinstance(node, dict):
        for key, child in node.items():
            yield from _leaf_paths(child, (*keys, key))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            yield from _leaf_paths(child, (*keys, index))


ALL_PATHS = list(_leaf_paths(EXAMPLE_DATA))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.sampled_from(ALL_PATHS), st.one_of(st.just(DELETE), YAMLISH)), max_size=4)
)
def test_mutated_example_only_raises_config_error(
    changes: list[tuple[tuple[Key, ...], object]],
) -> None:
    data = example()
    for keys, value in changes:
        try:
            mutate(data, keys, value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change removed or replaced the parent
    _check_outcome(data)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60) | st.text(alphabet="ab:-[]{}\n\t #&*!|>'\"%@`,0.<", max_size=60))
def test_arbitrary_text_file_only_raises_config_error(
    tmp_path_factory: pytest.TempPathFactory, text: str
) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "c.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).count("\n") == len(info.value.issues) - 1


def test_notify_command_must_split_like_a_command_line() -> None:
    data = example()
    data["policy"]["reclaim"]["notify_command"] = "mail -s 'unclosed"
    got = issues_of(data)
    assert len(got) == 1 and got[0].startswith("policy.reclaim.notify_command: not a valid")
