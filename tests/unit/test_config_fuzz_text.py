"""Fuzzing the config loader over file TEXT: whatever a file holds, load_config returns
a Config or raises ConfigError (never the loader's catch-all for the unforeseen), quickly
and in bounded memory.

tests/unit/test_config.py fuzzes parsed data and short text; this starts from the real
configs (the packaged default and conf/examples/slurm-ml.yaml) and mutates them the ways a
prober did: huge integers, deep nesting, odd tags, node ranges past any cluster, aliases,
random bytes and unicode, spliced in at random lines and values.
"""

from __future__ import annotations

import resource
import time
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import Config, ConfigError, load_config
from slurm_ml.config.load import UNEXPECTED

REPO = Path(__file__).resolve().parents[2]
BASES = [DEFAULT_CONFIG.read_text(encoding="utf-8"),
         (REPO / "conf" / "examples" / "slurm-ml.yaml").read_text(encoding="utf-8")]
#: Each example may take this long: the slowest legitimate file here loads in a tenth.
MAX_SECONDS = 3.0
#: How far the process's peak memory may grow over the whole module (maxrss only grows).
MAX_GROWTH_KB = 400 * 1024


def _nest(opener: str, closer: str, depth: int, inner: str = "") -> str:
    return opener * depth + inner + closer * depth


_LAUGHS = "[" + ", ".join(["&l0 [a, a, a, a, a, a, a, a]"] + ["*l0"] * 7) + "]"

#: What a prober puts where a value goes.
HOSTILE_VALUES = st.one_of(
    st.sampled_from([
        "9" * 5001, "-" + "9" * 5001, "9" * 4300, "9" * 101, "9" * 20, str(2**63), str(-(2**63)),
        "0x" + "f" * 5000, "0b" + "1" * 200, "1_000_000_000_000_000_000_000",
        ":".join(["59"] * 3000), "1e400", "-1e400", ".nan", ".inf", "1e-400",
        _nest("[", "]", 10_000), _nest("{a: ", "}", 10_000, "1"), _nest("[", "]", 64),
        _nest("[", "]", 65), _nest("- ", "", 1),
        "!!set {a, b}", "!!binary aGVsbG8=", "!!binary '%%%'", "!!timestamp 2001-13-45",
        "2001-12-14t21:59:43.10-05:00", "2001-13-45", "!!bool maybe", "!!int abc",
        "!!float abc", "!!timestamp abc", "!!omap [a: 1, a: 2]", "!!pairs [a: 1]",
        "!!seq x", "!!map x", "!!str 5", "!!null x", "!!python/name:os.system",
        "!!python/object/apply:os.system [true]", "!foo bar", "!<tag:x> y",
        "'gpu[000000001-999999999]'", "'gpu[1-100001]'", "'a[1-1000]b[1-1000]'",
        "'gpu[1-" + "9" * 5000 + "]'", "'gpu" + "9" * 5000 + "'", "'gpu[1-3'", "'x[-8--4]'",
        "'@all'", "'gpu[01-06]!gpu03'", "'gpu[1-10/0]'", "'gpu[1-99999/99999]'",
        "&a [*a]", "&b {k: *b}", _LAUGHS, "*undefined", "<<: 1", "{<<: [1]}",
        "'²'", "'٣'", "'\\x00'", "\"\\0\"", "\"\\uD800\"", "'" + "(" * 2000 + "'",
        "'a{99999999999999999999}'", "''", "~", "[]", "{}", "? [a]\n: 1",
        "\t", "\x85", "\ufeff", "|\n  block", ">-\n  folded", "'unterminated", "[unclosed",
    ]),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.text(max_size=30),
)


@st.composite
def mutated_configs(draw: st.DrawFn) -> str:
    """A real config with one to four hostile edits: a value replaced, a line inserted,
    deleted or duplicated, text spliced in anywhere, or the file cut short."""
    lines = draw(st.sampled_from(BASES)).split("\n")
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        at = draw(st.integers(min_value=0, max_value=len(lines) - 1))
        kind = draw(st.sampled_from(["value", "value", "value", "insert", "delete",
                                     "duplicate", "splice", "truncate"]))
        line = lines[at]
        if kind == "value" and ":" in line:
            key = line.split(":", 1)[0]
            lines[at] = f"{key}: {draw(HOSTILE_VALUES)}"
        elif kind == "insert":
            indent = " " * draw(st.sampled_from([0, 2, 4, 6]))
            name = draw(st.sampled_from(["x", "nodes", "weight", "users", "<<", "policy"]))
            lines.insert(at, f"{indent}{name}: {draw(HOSTILE_VALUES)}")
        elif kind == "delete":
            del lines[at]
        elif kind == "duplicate":
            lines.insert(at, line)
        elif kind == "splice":
            cut = draw(st.integers(min_value=0, max_value=len(line)))
            lines[at] = line[:cut] + draw(st.text(max_size=8)) + line[cut:]
        elif kind == "truncate":
            lines = lines[: at + 1]
        if not lines:
            lines = [""]
    return "\n".join(lines)


def _check(path: Path, data: str | bytes) -> None:
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        # surrogates ("\ud800") cannot be UTF-8: written as the bytes Python would make
        path.write_bytes(data.encode("utf-8", "surrogatepass"))
    start = time.monotonic()
    try:
        config = load_config(path)
    except ConfigError as error:
        assert error.issues
        for issue in error.issues:
            assert issue.message
            assert UNEXPECTED not in issue.message, str(issue)
        assert str(error).count("\n") == len(error.issues) - 1
    else:
        assert isinstance(config, Config)
    elapsed = time.monotonic() - start
    assert elapsed < MAX_SECONDS, f"{elapsed:.1f} s"
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - _BASELINE_KB
    assert grown < MAX_GROWTH_KB, f"peak memory grew by {grown} KiB"


_BASELINE_KB = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
_FUZZ = settings(max_examples=120, deadline=timedelta(seconds=MAX_SECONDS * 2),
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                        HealthCheck.function_scoped_fixture])


@_FUZZ
@given(text=mutated_configs())
def test_mutated_real_configs_load_or_raise_config_error(tmp_path: Path, text: str) -> None:
    _check(tmp_path / "slurm-ml.yaml", text)


@_FUZZ
@given(text=st.one_of(
    HOSTILE_VALUES.map(lambda v: f"cluster: {v}\n"),
    st.lists(HOSTILE_VALUES, min_size=1, max_size=5).map("\n".join),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=200),
    st.text(alphabet="ab:-[]{}\n\t #&*!|>'\"%@`,0.<9?", max_size=200),
))
def test_yamlish_text_loads_or_raises_config_error(tmp_path: Path, text: str) -> None:
    _check(tmp_path / "slurm-ml.yaml", text)


@settings(max_examples=60, deadline=timedelta(seconds=MAX_SECONDS * 2),
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300), base=st.sampled_from(BASES),
       at=st.integers(min_value=0, max_value=5000))
def test_random_bytes_in_a_real_config_load_or_raise_config_error(
        tmp_path: Path, data: bytes, base: str, at: int) -> None:
    raw = base.encode()
    _check(tmp_path / "slurm-ml.yaml", raw[:at] + data + raw[at:])


@pytest.mark.parametrize("base", range(len(BASES)), ids=["default", "example"])
def test_the_real_configs_themselves_load(tmp_path: Path, base: int) -> None:
    path = tmp_path / "slurm-ml.yaml"
    path.write_text(BASES[base], encoding="utf-8")
    assert isinstance(load_config(path), Config)
