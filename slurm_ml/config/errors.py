"""What a config check reports: :class:`ConfigIssue` (a dotted path and a message) and
:class:`ConfigError` (every issue of one file); :class:`Unreadable`, what the loader puts
in the place of a YAML scalar that is no value; and the text helpers every message goes
through, so that a value read from the file prints the way the admin wrote it, on one
line of bounded length."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ConfigError", "ConfigIssue", "Unreadable", "clip", "one_line", "show"]



@dataclass(frozen=True, slots=True)
class ConfigIssue:
    """One problem in a config: where (a dotted path) and what is wrong."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A YAML scalar that is no value: a 5,001-digit integer, a date with month 13,
    ``!!bool maybe``. The loader leaves one in the data where the value would be, so that
    the parser reports it at its config path, with every other problem of the file,
    rather than the whole file failing (or a service falling over) on one token."""

    tag: str  # the YAML tag's short name: "int", "timestamp", "bool", ...
    text: str  # what the file says, shortened to fit on a line
    problem: str  # why it is no value, as a sentence fragment

    def __str__(self) -> str:
        return f"an unreadable !!{self.tag} value ({self.problem})"


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


# --------------------------------------------------------------------------- message text

#: Integers wider than this are described by their size, never printed: they could not be
#: (Python refuses to print an int of more than 4,300 digits) and would not fit a line.
_SHOWN_INT_BITS = 200
_DIGITS_PER_BIT = 0.30103  # log10(2)


def show(value: object) -> str:
    """A value as the admin wrote it in YAML, short enough for one line."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Unreadable):
        return str(value)
    if isinstance(value, int) and value.bit_length() > _SHOWN_INT_BITS:
        # repr() of an int past sys.get_int_max_str_digits() raises ValueError.
        return f"an integer of about {int(value.bit_length() * _DIGITS_PER_BIT) + 1} digits"
    if isinstance(value, str | int | float):
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."
    return f"a {type(value).__name__}"


def one_line(text: str) -> str:
    """Escape control characters: keys and values come from the file, and an
    issue must stay on its one line of the report."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, marked with "...": a key or value from the
    file can be a megabyte long, and a report (or a log line) must stay readable."""
    return text if len(text) <= limit else text[: max(limit - 3, 0)] + "..."
