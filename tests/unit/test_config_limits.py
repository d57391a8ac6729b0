"""Hostile config files: each failure a prober found, or one of its kind, is a named
ConfigError at its config path (or at the file's line and column), within bounded time
and memory. Never a ValueError traceback, never a process eating memory until it dies.
tests/unit/test_config_fuzz_text.py throws generated text at the same loader."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.cli import main
from slurm_ml.config import ConfigError, load_config, parse
from slurm_ml.config import load as load_module
from slurm_ml.config.checks import MAX_NODESET_NODES, nodeset_bound, nodeset_problem
from slurm_ml.config.load import UNEXPECTED
from slurm_ml.config.parse import MAX_ISSUES, parse_config
from slurm_ml.config.yaml_reader import MAX_DEPTH, MAX_FILE_BYTES, MAX_VALUES

TEXT = DEFAULT_CONFIG.read_text(encoding="utf-8")
HUGE = "9" * 5001  # past Python's 4,300-digit int() limit
PARTITION_LIMIT = "max_time_min: 10080"  # cluster.partitions[0] in the default config


def edit(old: str, new: str, text: str = TEXT) -> str:
    assert text.count(old) >= 1, old
    return text.replace(old, new, 1)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "slurm-ml.yaml"


def refused(path: Path, text: str | bytes, within_s: float = 5.0) -> list[str]:
    """The issues of loading ``text``, which must be refused quickly with a ConfigError."""
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    start = time.monotonic()
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert time.monotonic() - start < within_s
    issues = [str(issue) for issue in info.value.issues]
    assert issues and not any(UNEXPECTED in issue for issue in issues), issues
    return issues


def one(issues: list[str], prefix: str) -> str:
    """The one issue that starts with ``prefix``."""
    hits = [issue for issue in issues if issue.startswith(prefix)]
    assert len(hits) == 1, issues
    return hits[0]


# --------------------------------------------------------------------------- integers


def test_a_5001_digit_integer_is_an_error_at_its_path(path: Path) -> None:
    issues = refused(path, edit(PARTITION_LIMIT, f"max_time_min: {HUGE}"))
    assert issues == [
        "cluster.partitions[0].max_time_min: an integer of 5,001 digits is too large to read "
        "(at most 100 characters; no setting takes more than 19 digits)"
    ]


def test_a_5001_digit_integer_where_a_number_or_a_string_goes(path: Path) -> None:
    text = edit("window_hours: 168", f"window_hours: {HUGE}")
    issues = refused(path, edit("name: slurmml", f"name: {HUGE}", text))
    assert one(issues, "policy.fairshare.window_hours: ").endswith("5,001 digits is too large "
                                                                   "to read (at most 100 "
                                                                   "characters; no setting "
                                                                   "takes more than 19 digits)")
    assert one(issues, "cluster.name: ").startswith(
        "cluster.name: expected a string, got an unreadable !!int value (an integer of 5,001")


def test_a_sexagesimal_integer_of_thousands_of_places_is_too_large(path: Path) -> None:
    # YAML 1.1 reads 1:30 as 90: 3,000 places make a 5,000-digit int without int(str).
    issues = refused(path, edit(PARTITION_LIMIT, "max_time_min: " + ":".join(["59"] * 3000)))
    assert issues[0].startswith("cluster.partitions[0].max_time_min: an integer of 8,999 "
                                "characters is too large to read")


def test_a_huge_int_in_parsed_data_is_out_of_range_not_a_traceback() -> None:
    import yaml

    data = yaml.safe_load(TEXT)
    data["cluster"]["partitions"][0]["max_time_min"] = 10**5000  # repr() of it raises
    data["slurm"] = {10**5000: 1}
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    got = [str(issue) for issue in info.value.issues]
    assert "cluster.partitions[0].max_time_min: an integer of about 5001 digits is out of " \
           "range: an integer here is at most 9223372036854775807 (2**63 - 1) either side " \
           "of 0" in got
    assert any(issue.startswith("slurm.an integer of about 5001 digits: unknown key")
               for issue in got), got


@pytest.mark.parametrize("value", [2**63, -(2**63), 10**30])
def test_an_integer_beyond_64_bits_is_out_of_range(path: Path, value: int) -> None:
    issues = refused(path, edit("  age: 100", f"  age: {value}"))
    assert one(issues, "policy.priority_weights.age: ").endswith(
        "is out of range: an integer here is at most 9223372036854775807 (2**63 - 1) either "
        "side of 0")


def test_a_renamed_knob_with_a_huge_value_still_says_what_to_write(path: Path) -> None:
    value = ":".join(["59"] * 3000)  # an int too large for a float (hours x 60)
    issues = refused(path, edit("min_runtime_cap_min: 480", f"min_runtime_cap_hours: {value}"))
    assert one(issues, "policy.contracts.min_runtime_cap_hours: renamed:")


# --------------------------------------------------------------------------- node sets


def test_a_billion_node_range_is_refused_before_it_is_expanded(path: Path) -> None:
    issues = refused(path, edit('nodes: "gpu[01-02]"', 'nodes: "gpu[000000001-999999999]"'),
                     within_s=2.0)
    assert issues == [
        "node_classes[0].nodes: node set 'gpu[000000001-999999999]' names up to 999,999,999 "
        "nodes, more than the 100,000 a node set may name (refused without expanding it)"
    ]


def test_a_node_index_past_int_limits_is_refused(path: Path) -> None:
    issues = refused(path, edit('nodes: "gpu[01-02]"', f'nodes: "gpu[1-{HUGE}]"'))
    assert issues[0].startswith("node_classes[0].nodes: node set 'gpu[1-999")
    assert issues[0].endswith("a node index of 5001 digits is too long to read (at most 18 "
                              "digits)")


def test_a_partition_range_is_refused_too(path: Path) -> None:
    issues = refused(path, edit('nodes: "gpu[01-06]"', 'nodes: "a[1-1000]b[1-1000]"'))
    assert one(issues, "cluster.partitions[0].nodes: node set 'a[1-1000]b[1-1000]' names up "
                       "to 1,000,000 nodes")


def test_node_sets_of_a_file_share_one_budget(path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # The real budget (500,000) takes seconds of expanding to reach; the rule is the same.
    monkeypatch.setattr(parse, "MAX_CONFIG_NODES", 12)
    # The node classes name 2 + 2 + 2 nodes, the partitions 6 each: the second is over.
    assert refused(path, TEXT) == [
        "cluster.partitions[1].nodes: node set 'gpu[01-06]' names up to 6 nodes, and the "
        "node sets before it already named 12: all of a file's node sets together may name "
        "at most 12 (refused without expanding it)"
    ]


@pytest.mark.parametrize(("expr", "bound"), [
    ("gpu[01-06]", 6),
    ("gpu[1-5],gpu[7-9]!gpu3", 9),  # an upper bound: the difference names 7
    ("gpu[1-10/3]", 4),
    ("a[1-300]b[1-300]", 90_000),
    ("n[-8--4]", 5),
    ("x[1, 3 - 5]", 4),
    ("gpu01", 1),
    ("gpu[1-3", 3),  # ClusterShell refuses it; counted all the same
])
def test_nodeset_bound_is_never_below_what_clustershell_names(expr: str, bound: int) -> None:
    assert nodeset_bound(expr) == bound


def test_nodeset_problem_allows_exactly_the_limit() -> None:
    assert nodeset_problem(f"gpu[1-{MAX_NODESET_NODES}]") is None
    assert nodeset_problem(f"gpu[0-{MAX_NODESET_NODES}]") is not None


# --------------------------------------------------------------------------- YAML shapes


@pytest.mark.parametrize(("opener", "nesting"), [
    ("[", "[" * 10_000 + "]" * 10_000),
    ("{a: ", "{a: " * 10_000 + "1" + "}" * 10_000),
])
def test_10000_deep_nesting_is_refused_before_pyyaml_recurses(path: Path, opener: str,
                                                              nesting: str) -> None:
    line = TEXT.count("\n") + 1
    # The document's mapping is level 1: the opener that makes level MAX_DEPTH + 1.
    column = len("zz: ") + (MAX_DEPTH - 1) * len(opener) + 1
    issues = refused(path, TEXT + f"zz: {nesting}\n")
    assert issues == [f"<file>: {path}: refused at line {line}, column {column}: lists and "
                      f"mappings nest more than {MAX_DEPTH} deep"]


def test_nesting_just_past_the_bound_is_refused_and_at_it_is_not(path: Path) -> None:
    at = "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)  # plus the document's mapping
    assert refused(path, TEXT + f"zz: {at}\n")[0].startswith("zz: unknown section")
    past = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert "nest more than" in refused(path, TEXT + f"zz: {past}\n")[0]


def test_aliases_that_expand_past_the_bound_are_refused(path: Path) -> None:
    # "Billion laughs": 10**10 values in a few hundred bytes, walked where budgets go.
    laughs = "".join(f"x{i}: &x{i} [" + ", ".join([f"*x{i - 1}"] * 10) + "]\n"
                     for i in range(1, 10))
    text = "x0: &x0 [a, b, c, d, e, f, g, h, i, j]\n" + laughs
    issues = refused(path, text + edit("users: [alice, bob]", "users: *x9"))
    assert issues == [f"<file>: {path}: refused at line 1, column 1: the document holds more "
                      f"than {MAX_VALUES:,} values, counting each alias as a copy of what it "
                      "names"]


def test_a_list_that_contains_itself_is_refused(path: Path) -> None:
    issues = refused(path, edit("users: [alice, bob]", "users: &me [alice, *me]"))
    assert len(issues) == 1
    assert issues[0].endswith("a list or mapping contains itself through an alias")


def test_a_file_past_the_size_bound_is_not_read(path: Path) -> None:
    issues = refused(path, TEXT + "#" * MAX_FILE_BYTES)
    assert issues == [f"<file>: {path}: larger than {MAX_FILE_BYTES:,} bytes, the most a "
                      "config may be (left unread)"]


ODD_SCALARS = [
    # (YAML, the issue), each of which raised something other than ConfigError
    ("name: 2001-13-45", "cluster.name: expected a string, got an unreadable !!timestamp "
                         "value ('2001-13-45' is not a date or time: month must be in 1..12)"),
    ("name: !!timestamp abc", "cluster.name: expected a string, got an unreadable "
                              "!!timestamp value ('abc' is not a date or time: "),
    ("name: !!bool maybe", "cluster.name: expected a string, got an unreadable !!bool value "
                           "('maybe' is not true or false: 'maybe')"),
    ("name: !!float abc", "cluster.name: expected a string, got an unreadable !!float value "
                          "('abc' is not a number: "),
    ("name: !!binary aGk=", "cluster.name: expected a string, got a bytes"),
    ("name: !!set {a, b}", "cluster.name: expected a string, got a set"),
    ("name: 2001-12-14", "cluster.name: expected a string, got a date"),
]


@pytest.mark.parametrize(("yaml_value", "issue"), ODD_SCALARS,
                         ids=[s for s, _ in ODD_SCALARS])
def test_odd_yaml_types_are_errors_at_their_path(path: Path, yaml_value: str,
                                                 issue: str) -> None:
    issues = refused(path, edit("name: slurmml", yaml_value))
    assert one(issues, "cluster.name: ").startswith(issue)


def test_an_unreadable_int_is_named_where_an_int_goes(path: Path) -> None:
    issues = refused(path, edit(PARTITION_LIMIT, "max_time_min: !!int abc"))
    assert issues == ["cluster.partitions[0].max_time_min: 'abc' is not an integer: invalid "
                      "literal for int() with base 10: 'abc'"]


def test_an_unreadable_key_is_an_unknown_key(path: Path) -> None:
    issues = refused(path, TEXT + "2001-13-45: 1\n")
    assert issues[0].startswith("'2001-13-45': unknown section an unreadable !!timestamp")


@pytest.mark.parametrize("tag", ["!!map", "!!set", "!!omap", "!!pairs", "!!seq"])
def test_a_collection_tag_on_a_scalar_is_a_yaml_error(path: Path, tag: str) -> None:
    issues = refused(path, edit("name: slurmml", f"name: {tag} x"))
    assert issues[0].startswith(f"<file>: {path}: YAML syntax error at line ")


def test_an_unhashable_key_is_a_yaml_error(path: Path) -> None:
    issues = refused(path, TEXT + "? !!seq x\n: 1\n")
    assert issues[0].endswith("found unhashable key")


# --------------------------------------------------------------------------- knob values


@pytest.mark.parametrize("signal", ["'²'", f"'{HUGE}'"], ids=["superscript", "5001-digits"])
def test_a_requeue_signal_that_int_cannot_read_is_an_error(path: Path, signal: str) -> None:
    issues = refused(path, edit("requeue_signal: USR1", f"requeue_signal: {signal}"))
    assert one(issues, "policy.contracts.requeue_signal: must be a signal name")


@pytest.mark.parametrize(("pattern", "error"), [
    ("(" * 2000 + ")" * 2000, "RecursionError"),
    ("a{99999999999999999999}", "OverflowError"),
])
def test_a_regex_that_re_cannot_compile_is_an_error(path: Path, pattern: str,
                                                    error: str) -> None:
    issues = refused(path, edit("maintenance_reasons: [maint, maintenance, repair]",
                                f"maintenance_reasons: ['{pattern}']"))
    assert "is not a usable regular expression: " + error in one(
        issues, "policy.quarantine.maintenance_reasons: ")


# --------------------------------------------------------------------------- reports


def test_a_report_lists_at_most_max_issues_and_counts_the_rest(path: Path) -> None:
    extra = "".join(f"  bogus_{i}: 1\n" for i in range(MAX_ISSUES + 50))
    issues = refused(path, edit("\nslurm:\n", "\nslurm:\n" + extra))
    assert len(issues) == MAX_ISSUES + 1
    assert issues[-1] == (f"<config>: 50 more problem(s) not listed (the first {MAX_ISSUES} "
                          "are above)")


def test_a_long_key_is_clipped_in_the_report(path: Path) -> None:
    issues = refused(path, edit("\nslurm:\n", "\nslurm:\n  " + "k" * 900 + ": 1\n"))
    assert len(one(issues, "slurm.kkk").split(":")[0]) <= 6 + 80


def test_an_unforeseen_failure_is_a_config_error_that_says_so(
        path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(data: object, source: str = "") -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(load_module, "parse_config", broken)
    path.write_text(TEXT, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert [str(i) for i in info.value.issues] == [
        f"<file>: {path}: {UNEXPECTED}: RuntimeError: a bug (a slurm-ml bug: please report "
        "it with the file)"]


def test_running_out_of_memory_is_a_config_error(path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    def exhausted(data: object, source: str = "") -> None:
        raise MemoryError

    monkeypatch.setattr(load_module, "parse_config", exhausted)
    path.write_text(TEXT, encoding="utf-8")
    with pytest.raises(ConfigError, match="out of memory"):
        load_config(path)


# --------------------------------------------------------------------------- the commands


@pytest.fixture
def huge(path: Path) -> Iterator[Path]:
    path.write_text(edit(PARTITION_LIMIT, f"max_time_min: {HUGE}"), encoding="utf-8")
    yield path


def test_config_check_names_the_error_and_exits_2(huge: Path) -> None:
    res = CliRunner().invoke(main, ["config", "check", str(huge)])
    assert res.exit_code == 2, res.output
    assert isinstance(res.exception, SystemExit)
    assert "cluster.partitions[0].max_time_min: an integer of 5,001 digits" in res.output
    assert "Traceback" not in res.output


def test_daemon_once_names_the_error_and_exits_2(huge: Path) -> None:
    res = CliRunner().invoke(main, ["daemon", "--once", "--config", str(huge)])
    assert res.exit_code == 2, res.output
    assert isinstance(res.exception, SystemExit)
    assert "cluster.partitions[0].max_time_min: an integer of 5,001 digits" in res.output


def test_a_fifo_at_the_config_path_is_refused_without_blocking(tmp_path: Path) -> None:
    """A service reloading on SIGHUP must not hang on a named pipe nobody writes."""
    fifo = tmp_path / "slurm-ml.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        load_config(fifo)
