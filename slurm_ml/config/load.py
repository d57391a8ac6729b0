"""Reading a config file: strict YAML (duplicate keys are errors, not silently the last
one), every file and YAML failure as a :class:`ConfigError`, then :func:`parse_config`.
The only part of :mod:`slurm_ml.config` that touches the file system."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from slurm_ml.config.errors import ConfigError, ConfigIssue, one_line, show
from slurm_ml.config.parse import parse_config
from slurm_ml.config.schema import Config

__all__ = ["load_config"]


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
    return ConfigError([ConfigIssue("<file>", one_line(message))], source)


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
            one_line(
                f"{source}: line {line}, column {column}: duplicate key {show(key)} "
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
