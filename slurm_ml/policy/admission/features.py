"""Read and rewrite ``--constraint`` expressions without losing the user's own terms.

Only the simple shape ``a&b&(x|y)`` is taken apart: top-level ``&`` terms, where a term
is a feature or an OR group of features. Anything richer (counts ``*``, matching OR
``[...]`` with other operators, ``!``) is kept verbatim and left alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")


@dataclass(frozen=True, slots=True)
class Constraint:
    """A parsed constraint: AND of terms, each an OR of one or more feature names."""

    terms: tuple[tuple[str, ...], ...]

    def names(self) -> frozenset[str]:
        return frozenset(n for term in self.terms for n in term)


def parse_constraint(expr: str) -> Constraint | None:
    """``a&(b|c)`` → ((a,), (b, c)); None when the expression is not that simple shape."""
    text = (expr or "").strip()
    if not text:
        return Constraint(())
    terms: list[tuple[str, ...]] = []
    for raw in _split_top(text, "&"):
        part = raw.strip()
        if len(part) >= 2 and part[0] + part[-1] in ("()", "[]"):
            part = part[1:-1]
        names = tuple(n.strip() for n in part.split("|"))
        if not all(_NAME.match(n) for n in names):
            return None
        terms.append(names)
    return Constraint(tuple(terms))


def _split_top(text: str, sep: str) -> list[str]:
    depth, start, out = 0, 0, []
    for i, ch in enumerate(text):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == sep and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return out


def gpu_type_terms(constraint: Constraint, feature_to_type: dict[str, str]) -> frozenset[str]:
    """GPU types a constraint names: terms made only of GPU-type features."""
    named: set[str] = set()
    for term in constraint.terms:
        if all(n in feature_to_type for n in term):
            named.update(feature_to_type[n] for n in term)
    return frozenset(named)


def without_gpu_terms(constraint: Constraint, feature_to_type: dict[str, str]) -> Constraint:
    return Constraint(tuple(t for t in constraint.terms
                            if not all(n in feature_to_type for n in t)))


def render(constraint: Constraint, any_of: tuple[str, ...] = (), *, matching: bool = False) -> str:
    """Back to Slurm syntax, with ``any_of`` ANDed as ``(x|y)`` or matching-OR ``[x|y]``.

    Matching OR makes every node of a multi-node job carry the same one of the features.
    """
    parts = [t[0] if len(t) == 1 else "(" + "|".join(t) + ")" for t in constraint.terms]
    if any_of:
        if len(any_of) == 1:
            parts.append(any_of[0])
        else:
            open_, close = ("[", "]") if matching else ("(", ")")
            parts.append(open_ + "|".join(any_of) + close)
    return "&".join(parts)
