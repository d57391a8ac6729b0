"""Argument checks shared by every ``Store``'s readers, so all of them refuse the same input.

A filter that PostgreSQL would reject (a NUL in text, an int outside bigint) or that
is easy to pass by mistake (one string where a collection of strings is meant, which
Python would happily iterate character by character) fails here with ValueError or
TypeError, before any query, in the fake exactly as in the real store.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime

_INT8_MIN = -(2**63)
_INT8_MAX = 2**63 - 1


def require_since(since: datetime) -> datetime:
    """A mandatory ``since`` bound: an aware datetime, normalised to UTC."""
    if not isinstance(since, datetime):
        raise TypeError(f"since must be a datetime, got {type(since).__name__}")
    if since.tzinfo is None or since.utcoffset() is None:
        raise ValueError("since must be timezone-aware")
    return since.astimezone(UTC)


def int_filter(name: str, values: Collection[int] | None) -> list[int] | None:
    """``values`` as a sorted list without repeats; None means "no filter"."""
    if values is None:
        return None
    if isinstance(values, str | bytes) or not isinstance(values, Collection):
        raise TypeError(f"{name} must be a collection of ints, got {type(values).__name__}")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must hold ints, got {type(v).__name__}")
        if not _INT8_MIN <= v <= _INT8_MAX:
            raise ValueError(f"{name} must hold 64-bit ints, got {v}")
    return sorted(set(values))


def text_filter(
    name: str, values: Collection[str] | None, *, optional: bool = True
) -> list[str] | None:
    """``values`` as a sorted list without repeats; None means "no filter" if ``optional``."""
    if values is None and optional:
        return None
    if isinstance(values, str | bytes) or not isinstance(values, Collection):
        raise TypeError(f"{name} must be a collection of str, got {type(values).__name__}")
    for v in values:
        if not isinstance(v, str):
            raise TypeError(f"{name} must hold str, got {type(v).__name__}")
        if "\x00" in v:
            raise ValueError(f"{name} must not contain NUL characters")
        try:
            v.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"{name} must hold valid Unicode (no lone surrogates)") from exc
    return sorted(set(values))


def check_limit(limit: int) -> None:
    """A reader's ``limit``: a non-negative int."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"limit must be a non-negative int, got {limit!r}")
