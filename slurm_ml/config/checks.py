"""Value checks: each returns None when a value is fine, else the message to report.

Range checks for the knobs (:func:`gt`, :func:`ge`, ...) and the naming rules of the
things slurm-ml writes into slurm.conf and sacctmgr (:func:`check_name`, ...). Pure.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet

from slurm_ml.gres import gpu_type_problem

__all__ = [
    "INT_MAX",
    "MAX_INDEX_DIGITS",
    "MAX_NODESET_NODES",
    "NAME_CHARS",
    "NAME_RE",
    "SLURM_WEIGHT_MAX",
    "Check",
    "absolute",
    "absolute_or_off",
    "check_capability",
    "check_gpu_type",
    "check_lower_name",
    "check_name",
    "check_user",
    "command_line",
    "fraction",
    "ge",
    "gt",
    "margin_percent",
    "nodeset",
    "nodeset_bound",
    "nodeset_problem",
    "percent",
    "share",
    "slurm_weight",
]

_T = TypeVar("_T")

# A check returns None when the value is fine, else the message to report.
Check = Callable[[_T], str | None]


# --------------------------------------------------------------------------- knob ranges


def gt(bound: float) -> Check[float]:
    def check(value: float) -> str | None:
        return None if value > bound else f"must be > {bound}"

    return check


def ge(bound: float) -> Check[float]:
    def check(value: float) -> str | None:
        return None if value >= bound else f"must be >= {bound}"

    return check


def fraction(value: float) -> str | None:
    return None if 0 < value <= 1 else "must be in (0, 1]"


def share(value: float) -> str | None:
    """A fraction that may be 0 (off)."""
    return None if 0 <= value <= 1 else "must be in [0, 1]"


def percent(value: float) -> str | None:
    return None if 0 <= value <= 100 else "must be in [0, 100]"


def margin_percent(value: float) -> str | None:
    # 100% margin would make every request unsatisfiable.
    return None if 0 <= value < 100 else "must be in [0, 100)"


#: Slurm reads every PriorityWeight* as a 32-bit unsigned integer.
SLURM_WEIGHT_MAX = 4_294_967_295


def slurm_weight(value: int) -> str | None:
    return None if 0 <= value <= SLURM_WEIGHT_MAX else f"must be in [0, {SLURM_WEIGHT_MAX}]"


def command_line(value: str) -> str | None:
    # Split like the daemon will (never through a shell); a quoting error must fail here,
    # at load or reload time, not in the middle of a cycle.
    try:
        shlex.split(value)
    except ValueError as exc:
        return f"not a valid command line: {exc}"
    return None


def absolute(value: Path) -> str | None:
    # The daemon's working directory is not something to depend on.
    return None if value.is_absolute() else "must be an absolute path"


def absolute_or_off(value: str) -> str | None:
    # A directory knob that "" turns off: a path-typed knob would read "" as ".", the
    # working directory of whoever runs the hook.
    if not value or Path(value).is_absolute():
        return None
    return 'must be an absolute path, or "" for none'



# --------------------------------------------------------------------------- names

# Slurm-safe: what partitions, features, GRES types, switches and node names
# may use without quoting anywhere in slurm.conf or on a command line. A
# leading '-' or '.' is refused because it reads as an option or a hidden file.
NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
# sacctmgr lower-cases account and cluster names; a mixed-case name in the
# config would never match what slurmdbd reports back.
LOWER_NAME_RE = re.compile(r"[a-z0-9_][a-z0-9_.-]*")
# useradd's rule, plus '.' (common in LDAP "first.last" accounts); upper case is
# refused because slurmdbd lower-cases user names unless PreserveCaseUser is set.
USER_RE = re.compile(r"[a-z_][a-z0-9_.-]*")
USER_MAX = 32
CAPABILITY_RE = re.compile(r"[0-9]+\.[0-9]+")

NAME_CHARS = "letters, digits, '_', '.', '-', not starting with '.' or '-'"


def check_name(value: str) -> str | None:
    if not value:
        return "must not be empty"
    if NAME_RE.fullmatch(value) is None:
        return f"invalid name {value!r}: use only {NAME_CHARS}"
    return None


def check_gpu_type(value: str) -> str | None:
    """A GPU type (the GRES type): exactly the names slurm_ml.gres reads back from every
    GRES spelling (so MIG profiles such as ``3g.40gb`` pass, and ``80gb``, which Slurm
    reads as a count, does not), within the Slurm-safe characters of :func:`check_name`."""
    return gpu_type_problem(value) or check_name(value)


def check_lower_name(value: str) -> str | None:
    if not value:
        return "must not be empty"
    if LOWER_NAME_RE.fullmatch(value) is None:
        if LOWER_NAME_RE.fullmatch(value.lower()) is not None:
            return f"invalid name {value!r}: must be lower case (Slurm lower-cases it)"
        return f"invalid name {value!r}: use only lower-case {NAME_CHARS}"
    return None


def check_user(value: str) -> str | None:
    if USER_RE.fullmatch(value) is None or len(value) > USER_MAX:
        return (
            f"invalid user name {value!r}: expected a Unix user name (lower-case letters, "
            f"digits, '_', '.', '-', not starting with a digit, '.' or '-'; "
            f"at most {USER_MAX} characters)"
        )
    return None


def check_capability(value: str) -> str | None:
    if CAPABILITY_RE.fullmatch(value) is None:
        return f'must look like "8.0" (major.minor), got {value!r}'
    return None


def nodeset(expr: str) -> NodeSet:
    # No group resolver: "@group" must not make parsing read groups.conf. Expands the
    # whole set: config values pass nodeset_problem first.
    return NodeSet(expr, resolver=RESOLVER_NOGROUP)


# --------------------------------------------------------------------------- sizes

#: The widest integer any knob takes: PostgreSQL's bigint (daemon.lock_key is one).
#: Beyond it a value is a typo, and it would overflow where it is used.
INT_MAX = 2**63 - 1

#: The most nodes one node set may name. ClusterShell expands a set into one string per
#: node (100,000 take about a second and 20 MB), so ``gpu[000000001-999999999]`` would
#: eat memory until the process dies; the largest GPU clusters have some 10,000 nodes.
MAX_NODESET_NODES = 100_000
#: The longest run of digits a node set may hold: ClusterShell reads each with int(),
#: which refuses more than 4,300 digits with a ValueError; 18 reach a quintillion.
MAX_INDEX_DIGITS = 18

_OPERATORS = frozenset(",!&^")  # ClusterShell's set operators, between terms
# One item of a bracket, as ClusterShell's RangeSet reads it: "5", "1-8", "1-8/2",
# "-3" or "-8--4" (negative indices), blanks allowed around each number.
_RANGE_ITEM = re.compile(
    r"\s*(-?)\s*(\d+)\s*(?:-\s*(-?)\s*(\d+)\s*)?(?:/\s*\+?(\d+)\s*)?")


def _bracket_bound(inside: str) -> int:
    """How many indices the inside of one ``[...]`` can give, read the way RangeSet reads
    it. An item it does not read here gets the sum of its numbers plus one, which no
    range of those numbers exceeds: unreadable items are ClusterShell's to refuse."""
    total = 0
    for item in inside.split(","):
        match = _RANGE_ITEM.fullmatch(item)
        numbers = [int(n) for n in re.findall(r"\d+", item)]
        if match is None:
            total += sum(numbers) + 1
            continue
        sign_a, a, sign_b, b, step = match.groups()
        first = -int(a) if sign_a else int(a)
        last = first if b is None else (-int(b) if sign_b else int(b))
        stride = int(step) if step and int(step) > 0 else 1
        total += abs(last - first) // stride + 1
    return total


def nodeset_bound(expr: str) -> int:
    """At least as many nodes as ``expr`` names, counted without expanding it.

    Each term between the set operators (``,`` ``!`` ``&`` ``^``) names at most the
    product of its brackets' sizes (``a[1-4]b[1-2]`` is 8 nodes); the set names at most
    the sum over its terms (a difference or an intersection names fewer, never more).
    Call :func:`nodeset_problem` first where digits may be long: this reads every
    number with int().
    """
    total = 0
    term = 1
    inside: list[str] | None = None  # the characters of an open bracket
    for char in expr:
        if inside is not None:
            if char == "]":
                term *= _bracket_bound("".join(inside))
                inside = None
            else:
                inside.append(char)
        elif char == "[":
            inside = []
        elif char in _OPERATORS:
            total += term
            term = 1
    if inside is not None:  # an unclosed bracket: ClusterShell refuses it, count it anyway
        term *= _bracket_bound("".join(inside))
    return total + term


def nodeset_problem(expr: str, limit: int = MAX_NODESET_NODES) -> str | None:
    """Why ``expr`` must not be expanded (None when it may be): a number too long to
    read, or more than ``limit`` nodes. Decided on the text alone, before ClusterShell
    builds anything."""
    longest = max((len(run) for run in re.findall(r"\d+", expr)), default=0)
    if longest > MAX_INDEX_DIGITS:
        return (f"a node index of {longest} digits is too long to read (at most "
                f"{MAX_INDEX_DIGITS} digits)")
    bound = nodeset_bound(expr)
    if bound > limit:
        return (f"names up to {bound:,} nodes, more than the {limit:,} a node set may "
                "name (refused without expanding it)")
    return None


