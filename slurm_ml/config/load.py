"""Reading a config file: strict YAML (duplicate keys are errors, not silently the last
one), every file and YAML failure as a :class:`ConfigError`, then :func:`parse_config`.
The only part of :mod:`slurm_ml.config` that touches the file system.

A config is read by services that must outlive a bad one (a SIGHUP with a broken file in
place keeps the running config), so nothing in the file may make this raise anything but
:class:`ConfigError` or take unbounded memory or time. Before PyYAML builds anything the
file's size is bounded (:data:`MAX_FILE_BYTES`), and so is the nesting the composer
recurses into (:data:`MAX_DEPTH`); before values are built, what the document holds with
every alias expanded (:data:`MAX_VALUES`: "billion laughs"); a scalar that is no value (a
5,001-digit integer, ``!!bool maybe``) becomes an :class:`Unreadable` that the parser
reports at its path; node sets are bounded in :mod:`~slurm_ml.config.parse`. Whatever
still escapes is caught at the end and reported as a ConfigError that says so.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml

from slurm_ml.config.errors import ConfigError, ConfigIssue, Unreadable, clip, one_line, show
from slurm_ml.config.parse import parse_config
from slurm_ml.config.schema import Config

__all__ = [
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "MAX_INT_CHARS",
    "MAX_VALUES",
    "UNEXPECTED",
    "load_config",
]

#: The largest config file read. slurm-ml's own are a few KiB; a budget tree of 10,000
#: users is some 200 KiB. The file is never read past this.
MAX_FILE_BYTES = 512 * 1024
#: The deepest nesting of lists and mappings: a config nests 6 deep
#: (``budgets.programs[].projects[].users[]``); PyYAML's composer recurses per level
#: and would hit Python's recursion limit near 1,000.
MAX_DEPTH = 64
#: The most values (scalars, lists, mappings) a document may hold, each alias counted
#: as a copy of what it names: ten nested aliases of ten items each are 10**10 values
#: to the parser that walks them while the file is a few hundred bytes.
MAX_VALUES = 200_000
#: The longest integer literal read (sign, digits, ``0x`` and ``_`` counted). Python
#: refuses to read more than 4,300 decimal digits (a ValueError) and reads fewer in
#: quadratic time; no knob takes more than 19 digits.
MAX_INT_CHARS = 100
#: What an issue says when the loader itself failed on a file: a slurm-ml bug.
UNEXPECTED = "could not be checked"

_INT_TAG = "tag:yaml.org,2002:int"


class _Refused(Exception):
    """The document goes past one of the bounds above (message, and where)."""

    def __init__(self, message: str, mark: yaml.Mark | None) -> None:
        super().__init__(message)
        self.message = message
        self.mark = mark


#: What a scalar of a YAML tag should have been, for messages.
_NOUNS = {"int": "an integer", "float": "a number", "bool": "true or false",
          "timestamp": "a date or time", "binary": "base64 data", "null": "null"}


def _tag_name(tag: str) -> str:
    return tag.removeprefix("tag:yaml.org,2002:")


class _StrictLoader(yaml.SafeLoader):
    """yaml.safe_load's loader, plus a record of duplicate keys in a mapping (which PyYAML
    otherwise resolves silently by keeping the last one), a bound on nesting, and scalars
    that are no value kept as :class:`Unreadable` in their place."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[tuple[int, int, object]] = []  # (line, column, key), 1-based
        self.depth = 0
        self.node: yaml.Node | None = None  # the node being built, for a failure's mark

    # ---- composing (the one recursive stage of PyYAML's pure-Python loader)

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            start = self.peek_event()  # type: ignore[no-untyped-call]  # stubs lack it
            raise _Refused(f"lists and mappings nest more than {MAX_DEPTH} deep",
                           start.start_mark)

    # The anchor is the name, a str or None; the stubs call it a dict.
    def compose_sequence_node(self, anchor: Any) -> yaml.SequenceNode:
        self._enter()
        try:
            return super().compose_sequence_node(anchor)
        finally:
            self.depth -= 1

    def compose_mapping_node(self, anchor: Any) -> yaml.MappingNode:
        self._enter()
        try:
            return super().compose_mapping_node(anchor)
        finally:
            self.depth -= 1

    # ---- constructing

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        self.node = node
        if not isinstance(node, yaml.ScalarNode):
            return super().construct_object(node, deep=deep)
        if node in self.constructed_objects:
            return self.constructed_objects[node]
        text = str(node.value)
        if node.tag == _INT_TAG and len(text) > MAX_INT_CHARS:
            unit = "digits" if text.lstrip("+-").isdigit() else "characters"
            return self._unreadable(node, f"an integer of {len(text):,} {unit} is too large to "
                                          f"read (at most {MAX_INT_CHARS} characters; no "
                                          "setting takes more than 19 digits)")
        was_deep = self.deep_construct
        try:
            return super().construct_object(node, deep=deep)
        except yaml.YAMLError:
            raise  # an unknown tag, say: the file's own fault, reported with its mark
        except Exception as exc:  # int("abc"), a 13th month, !!bool maybe, ...
            self.deep_construct = was_deep
            noun = _NOUNS.get(_tag_name(node.tag), f"a !!{_tag_name(node.tag)} value")
            return self._unreadable(node, f"{show(clip(text, 40))} is not {noun}: {exc}")

    def _unreadable(self, node: yaml.ScalarNode, problem: str) -> Unreadable:
        value = Unreadable(_tag_name(node.tag), show(clip(str(node.value), 40)),
                           clip(one_line(problem), 200))
        # Built once, even when aliases name it again; and no longer "under construction".
        self.constructed_objects[node] = value
        self.recursive_objects.pop(node, None)
        return value

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if not isinstance(node, yaml.MappingNode):  # ``!!map x``: PyYAML refuses it
            return super().construct_mapping(node, deep=deep)
        seen: set[object] = set()
        for key_node, _ in node.value:
            # Keys brought in by a `<<` merge may legitimately be overridden.
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                key = self.construct_object(key_node)
                try:
                    repeated = key in seen
                except TypeError:
                    continue  # unhashable (``? !!seq x``): PyYAML refuses it just below
                if repeated:
                    mark = key_node.start_mark
                    self.duplicates.append((mark.line + 1, mark.column + 1, key))
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _file_error(message: str, source: str) -> ConfigError:
    return ConfigError([ConfigIssue("<file>", clip(one_line(message), 600))], source)


def _where(mark: yaml.Mark | None) -> str:
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""


def _expanded_size(root: yaml.Node) -> int:
    """How many values ``root`` holds with every alias expanded, up to MAX_VALUES + 1.

    Iterative (an alias may nest a node far deeper than the text does) and memoised by
    node (aliases share nodes), so linear in the file. A node that contains itself
    through an alias is infinite: refused.
    """
    size: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_nodes.discard(key)
            total = 1 + sum(size[id(child)] for child in _children(node))
            size[key] = min(total, MAX_VALUES + 1)
            continue
        if key in size:
            continue
        if key in open_nodes:
            raise _Refused("a list or mapping contains itself through an alias",
                           node.start_mark)
        open_nodes.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) in open_nodes:
                raise _Refused("a list or mapping contains itself through an alias",
                               child.start_mark)
            if id(child) not in size:
                stack.append((child, False))
    return size[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _read_yaml(text: str, source: str) -> tuple[object, list[tuple[int, int, object]]]:
    """The YAML document and its duplicate keys; any YAML failure is a ConfigError."""
    loader: _StrictLoader | None = None
    try:
        loader = _StrictLoader(text)  # the reader rejects control characters already here
        root = loader.get_single_node()
        if root is None:
            return None, []
        values = _expanded_size(root)
        if values > MAX_VALUES:
            raise _Refused(f"the document holds more than {MAX_VALUES:,} values, counting "
                           "each alias as a copy of what it names", root.start_mark)
        return loader.construct_document(root), loader.duplicates
    except _Refused as exc:
        raise _file_error(f"{source}: refused{_where(exc.mark)}: {exc.message}",
                          source) from None
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
        problem = exc.problem or exc.context or "invalid YAML"
        raise _file_error(f"{source}: YAML syntax error{_where(mark)}: {problem}",
                          source) from None
    except yaml.YAMLError as exc:
        raise _file_error(f"{source}: YAML error: {exc}", source) from None
    except RecursionError:
        # A chain of thousands of `<<` merges: PyYAML flattens merges recursively.
        where = _where(loader.node.start_mark if loader and loader.node else None)
        raise _file_error(f"{source}: YAML is nested too deeply{where}", source) from None
    finally:
        if loader is not None:
            loader.dispose()


def _read_text(path: str | Path, source: str) -> str:
    """The file's text; never more than MAX_FILE_BYTES are read. Opened without blocking
    and refused unless a regular file: a FIFO or a device at the path would hang the
    service that reloads it, or feed it without end."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with open(fd, "rb") as stream:
            if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
                raise _file_error(f"{source}: not a regular file (a config is read whole, "
                                  "once)", source)
            raw = stream.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise _file_error(f"{source}: no such file", source) from None
    except OSError as exc:
        raise _file_error(f"{source}: cannot read: {exc.strerror or exc}", source) from None
    if len(raw) > MAX_FILE_BYTES:
        raise _file_error(f"{source}: larger than {MAX_FILE_BYTES:,} bytes, the most a config "
                          "may be (left unread)", source)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _file_error(f"{source}: not UTF-8 text (byte {exc.start})", source) from None


def _load(path: str | Path, source: str) -> Config:
    text = _read_text(path, source)
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


def load_config(path: str | Path) -> Config:
    """Read, parse and validate a config file; raise ConfigError listing every problem.

    Never anything else: a failure the checks above did not foresee (a bug of slurm-ml's
    or of a library's) is a ConfigError too, saying that the file could not be checked,
    so that a service reloading on SIGHUP keeps running on its old config.
    """
    source = str(path)
    try:
        return _load(path, source)
    except ConfigError:
        raise
    except MemoryError:
        raise _file_error(f"{source}: {UNEXPECTED}: out of memory while reading it",
                          source) from None
    except RecursionError:
        raise _file_error(f"{source}: {UNEXPECTED}: nested too deeply to check",
                          source) from None
    except Exception as exc:
        raise _file_error(f"{source}: {UNEXPECTED}: {type(exc).__name__}: {exc} (a slurm-ml "
                          "bug: please report it with the file)", source) from exc
