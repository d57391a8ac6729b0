"""What a config check reports: :class:`ConfigIssue` (a dotted path and a message) and
:class:`ConfigError` (every issue of one file), plus the two text helpers every message
goes through, so that a value read from the file prints the way the admin wrote it, on
one line."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ConfigError", "ConfigIssue", "one_line", "show"]



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


# --------------------------------------------------------------------------- message text


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
