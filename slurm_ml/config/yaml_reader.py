"""The one strict YAML reader: slurm-ml.yaml (:mod:`~slurm_ml.config.load`), the
simulator's scenario files and the values of their ``--set`` overrides all go through it.

Strict: a duplicate key is recorded, not silently the last one; a tab where YAML wants
indentation, a control character, a second document or an unknown tag is an error with
its line and column. The reader stops only where YAML itself cannot go on (the text is
not YAML, or goes past a bound below): that is a :class:`YamlError`, one message that
names the file and, where there is one, the line and column. Everything else it finds
is gathered in the :class:`Document` for the caller to report with its own findings, so
one run shows every problem of a file.

Bounded, because a config is read by services that must outlive a bad one (a SIGHUP
with a broken file in place keeps the running config): before PyYAML builds anything
the file's size is bounded (:data:`MAX_FILE_BYTES`), and so is the nesting the composer
recurses into (:data:`MAX_DEPTH`); before values are built, what the document holds with
every alias expanded (:data:`MAX_VALUES`: "billion laughs"); a scalar that is no value (a
5,001-digit integer, ``!!bool maybe``) becomes an :class:`Unreadable` in its place, for
the caller to report where it is used.

The only module of slurm-ml that imports PyYAML.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from slurm_ml.config.errors import Unreadable, clip, one_line, show

__all__ = [
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "MAX_INT_CHARS",
    "MAX_VALUES",
    "DataPath",
    "Document",
    "Duplicate",
    "Spot",
    "YamlError",
    "read_text",
    "read_yaml",
]

#: The largest file read. slurm-ml's configs are a few KiB; a budget tree of 10,000
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

_INT_TAG = "tag:yaml.org,2002:int"

#: Where a value is in the data: the keys and list indexes that lead to it from the top.
DataPath = tuple[object, ...]


class YamlError(Exception):
    """Text that cannot be read as YAML at all (or not within the bounds): the message
    names the file, and the line and column where there is one."""

    def __init__(self, message: str) -> None:
        self.message = clip(one_line(message), 600)
        super().__init__(self.message)


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A key given twice in one mapping (YAML keeps only the last one); line and
    column of the repeat, 1-based."""

    line: int
    column: int
    key: object

    @property
    def problem(self) -> str:
        return one_line(f"duplicate key {show(self.key)} (YAML would silently keep only the "
                        "last one)")


class Spot(NamedTuple):
    """Where a value of a document is written (lines 1-based)."""

    key_line: int  # of the key that names it; a list item's own line
    line: int  # where the value starts
    #: the key as written (``0123`` read as the integer 83 is "0123" here); None for a
    #: list item or the document itself
    key: str | None


@dataclass(frozen=True, slots=True)
class Document:
    """One YAML document, read: its data (``None`` when empty), its duplicate keys and,
    when asked for, where each value of it is written."""

    source: str
    data: object
    duplicates: tuple[Duplicate, ...] = ()
    #: where each value is, by its path; empty unless :func:`read_yaml` was asked
    spots: Mapping[DataPath, Spot] = field(default_factory=dict)


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
        self.duplicates: list[Duplicate] = []
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
                    self.duplicates.append(Duplicate(mark.line + 1, mark.column + 1, key))
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


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


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


def _spots(root: yaml.Node, loader: _StrictLoader) -> dict[DataPath, Spot]:
    """Where each value of the constructed document is written, by its path.

    Walked after construction, when `<<` merges are flattened into their mappings, and
    iteratively: the expanded document is bounded (MAX_VALUES) but an alias may nest
    deeper than the text does. Of a key given twice the last one counts, as in the data.
    """
    out: dict[DataPath, Spot] = {(): Spot(_line(root), _line(root), None)}
    stack: list[tuple[DataPath, yaml.Node]] = [((), root)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                out[(*path, index)] = Spot(_line(item), _line(item), None)
                stack.append(((*path, index), item))
        elif isinstance(node, yaml.MappingNode):
            last: dict[object, tuple[yaml.ScalarNode, yaml.Node]] = {}
            for key_node, value in node.value:
                if isinstance(key_node, yaml.ScalarNode):
                    key = loader.construct_object(key_node)
                    try:
                        last[key] = (key_node, value)
                    except TypeError:  # unhashable: not a key of the data either
                        continue
            for key, (key_node, value) in last.items():
                out[(*path, key)] = Spot(_line(key_node), _line(value), str(key_node.value))
                stack.append(((*path, key), value))
    return out


def read_yaml(text: str, source: str, *, spots: bool = False) -> Document:
    """The one document of ``text``; with ``spots``, where each value is written.

    Raises YamlError (naming ``source``) when ``text`` is no YAML or goes past a bound.
    """
    loader: _StrictLoader | None = None
    try:
        loader = _StrictLoader(text)  # the reader rejects control characters already here
        root = loader.get_single_node()
        if root is None:
            return Document(source, None)
        values = _expanded_size(root)
        if values > MAX_VALUES:
            raise _Refused(f"the document holds more than {MAX_VALUES:,} values, counting "
                           "each alias as a copy of what it names", root.start_mark)
        data = loader.construct_document(root)
        return Document(source, data, tuple(loader.duplicates),
                        _spots(root, loader) if spots else {})
    except _Refused as exc:
        raise YamlError(f"{source}: refused{_where(exc.mark)}: {exc.message}") from None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        raise YamlError(f"{source}: unacceptable character #x{exc.character:04x} at line "
                        f"{line}, column {column}: {exc.reason}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        raise YamlError(f"{source}: YAML syntax error{_where(mark)}: {problem}") from None
    except yaml.YAMLError as exc:
        raise YamlError(f"{source}: YAML error: {exc}") from None
    except RecursionError:
        # A chain of thousands of `<<` merges: PyYAML flattens merges recursively.
        where = _where(loader.node.start_mark if loader and loader.node else None)
        raise YamlError(f"{source}: YAML is nested too deeply{where}") from None
    finally:
        if loader is not None:
            loader.dispose()


def read_text(path: str | Path, source: str, *, noun: str = "a config") -> str:
    """The file's text; never more than MAX_FILE_BYTES are read. Opened without blocking
    and refused unless a regular file: a FIFO or a device at the path would hang the
    service that reloads it, or feed it without end. ``noun`` names what the file is in
    messages. Raises YamlError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with open(fd, "rb") as stream:
            if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
                raise YamlError(f"{source}: not a regular file ({noun} is read whole, once)")
            raw = stream.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise YamlError(f"{source}: no such file") from None
    except OSError as exc:
        raise YamlError(f"{source}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise YamlError(f"{source}: larger than {MAX_FILE_BYTES:,} bytes, the most {noun} "
                        "may be (left unread)")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise YamlError(f"{source}: not UTF-8 text (byte {exc.start})") from None
