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
    "NAME_CHARS",
    "NAME_RE",
    "SLURM_WEIGHT_MAX",
    "Check",
    "absolute",
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
    # No group resolver: "@group" must not make parsing read groups.conf.
    return NodeSet(expr, resolver=RESOLVER_NOGROUP)


