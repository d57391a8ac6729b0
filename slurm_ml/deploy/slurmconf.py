"""Read the admin's slurm.conf and plan slurm-ml's two edits to it (pure).

Facts checked on Slurm 22.05.8 (the dev cluster, ``scontrol show config`` / ``show part``):

* A key set twice keeps the **latest** value (slurmctld logs "error: <Key> specified more
  than once, latest value used"), so the ``Include`` line goes last and slurm-ml's values
  win; a different value already in slurm.conf is a *conflict* install reports.
* A second ``PartitionName=gpu ...`` line is **fatal** ("duplicate entry for partition"),
  and ``PartitionName=DEFAULT TRESBillingWeights=...`` only affects partition lines after
  it (and then every one of them). So TRESBillingWeights cannot come from an appended
  include: install edits the managed partitions' own lines, recording each line before
  and after so uninstall can put it back byte for byte.
* A relative ``Include`` is looked up next to slurm.conf (for slurmctld and scontrol);
  install writes an absolute path anyway, which does not depend on who reads it from where.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from slurm_ml.deploy.errors import BadInput

#: Settings whose value is a comma list: merged with the admin's, not replaced.
LIST_KEYS = frozenset({"schedulerparameters", "prologflags", "accountingstoragetres",
                       "jobsubmitplugins"})
#: Lines that describe a record (several key=value pairs), not one setting.
RECORD_KEYS = frozenset({"nodename", "partitionname", "downnodes", "frontendname",
                         "nodeset", "switchname"})
_PAIR = re.compile(r'([A-Za-z][A-Za-z0-9_]*)=("[^"]*"|\S*)')
_INCLUDE = re.compile(r"^\s*include\s+(\S+)\s*$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Setting:
    """One ``Key=Value`` line of a Slurm config file."""

    key: str
    value: str  # quotes stripped
    source: str  # file it came from
    line: int  # 1-based
    text: str  # the line as written

    def where(self) -> str:
        return f"{self.source}:{self.line}: {self.text.strip()}"


@dataclass(frozen=True, slots=True)
class Conflict:
    """The admin's slurm.conf sets a key slurm-ml needs to a different value."""

    key: str
    ours: str
    theirs: Setting

    def describe(self) -> str:
        return (f"{self.theirs.where()}  -- slurm-ml needs {self.key}={self.ours} "
                f"(with --force slurm-ml.conf, included last, wins)")


@dataclass(frozen=True, slots=True)
class Resolution:
    """slurm-ml's settings after merging list values with the admin's."""

    values: tuple[tuple[str, str], ...]
    conflicts: tuple[Conflict, ...]
    notes: tuple[str, ...]


def strip_comment(line: str) -> str:
    """Drop a ``#`` comment (``\\#`` is a literal hash in Slurm config files)."""
    out = re.split(r"(?<!\\)#", line, maxsplit=1)[0]
    return out.rstrip()


def pairs(line: str) -> list[tuple[str, str]]:
    """The ``key=value`` pairs of one line, quotes kept."""
    return _PAIR.findall(strip_comment(line))


def unquote(value: str) -> str:
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value


def settings(text: str, source: str) -> list[Setting]:
    """Every single-setting line of one file (records and Include lines skipped)."""
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        found = pairs(line)
        if not found or found[0][0].casefold() in RECORD_KEYS:
            continue
        key, value = found[0]
        out.append(Setting(key, unquote(value), source, i, line))
    return out


def includes(text: str) -> list[str]:
    """The file names of the ``Include`` lines, as written."""
    out = []
    for line in text.splitlines():
        m = _INCLUDE.match(strip_comment(line))
        if m:
            out.append(m.group(1))
    return out


def _same(a: str, b: str) -> bool:
    a, b = unquote(a), unquote(b)
    return a == b if a.startswith("/") or b.startswith("/") else a.casefold() == b.casefold()


def _items(value: str) -> list[str]:
    return [x for x in unquote(value).split(",") if x]


def _name(item: str) -> str:
    return item.split("=", 1)[0].casefold()


def resolve(ours: Sequence[tuple[str, str]], admin: Sequence[Setting]) -> Resolution:
    """Merge slurm-ml's settings with the admin's (``admin`` in file order).

    Scalar keys: a different admin value is a conflict; the same value is harmless (Slurm
    logs "specified more than once"). List keys: the admin's items are kept and ours are
    added; an item of ours with a different value (``max_switch_wait=600``) is a conflict.
    """
    last: dict[str, Setting] = {}
    for s in admin:
        last[s.key.casefold()] = s
    values: list[tuple[str, str]] = []
    conflicts: list[Conflict] = []
    notes: list[str] = []
    for key, value in ours:
        theirs = last.get(key.casefold())
        if theirs is None:
            values.append((key, value))
        elif key.casefold() in LIST_KEYS:
            merged = _items(theirs.value)
            names = {_name(x): i for i, x in enumerate(merged)}
            for item in _items(value):
                at = names.get(_name(item))
                if at is None:
                    merged.append(item)
                elif not _same(merged[at], item):
                    conflicts.append(Conflict(key, item, theirs))
                    merged[at] = item
            values.append((key, ",".join(merged)))
            notes.append(f"{theirs.where()}  -- kept: slurm-ml.conf sets "
                         f"{key}={','.join(merged)}")
        elif _same(theirs.value, value):
            values.append((key, value))
            notes.append(f"{theirs.where()}  -- same value as slurm-ml's (Slurm logs "
                         f"'{key} specified more than once'; you may delete the line)")
        else:
            values.append((key, value))
            conflicts.append(Conflict(key, value, theirs))
    return Resolution(tuple(values), tuple(conflicts), tuple(notes))


# ------------------------------------------------------------------ slurm.conf edits
@dataclass(frozen=True, slots=True)
class LineEdit:
    """One whole line of slurm.conf replaced (without its newline)."""

    before: str
    after: str


@dataclass(frozen=True, slots=True)
class ConfEdits:
    """What install changed in slurm.conf: recorded in the manifest, undone by uninstall."""

    include_line: str
    newline_added: bool  # slurm.conf did not end with a newline before the Include line
    partitions: tuple[LineEdit, ...] = ()


@dataclass(frozen=True, slots=True)
class PartitionPlan:
    edits: tuple[LineEdit, ...]
    conflicts: tuple[Conflict, ...]
    missing: tuple[str, ...]  # managed partitions with no line in slurm.conf


def _partition_name(line: str) -> str | None:
    found = pairs(line)
    if found and found[0][0].casefold() == "partitionname":
        return unquote(found[0][1])
    return None


def plan_partitions(text: str, source: str, names: Sequence[str], weights: str) -> PartitionPlan:
    """Set ``TRESBillingWeights="<weights>"`` on the lines of partitions ``names``."""
    edits: list[LineEdit] = []
    conflicts: list[Conflict] = []
    found: set[str] = set()
    for i, line in enumerate(text.splitlines(), 1):
        name = _partition_name(line)
        if name is None or name not in names or name in found:
            continue
        found.add(name)
        if line.rstrip().endswith("\\"):
            raise BadInput(f"{source}:{i}: PartitionName={name} continues on the next line "
                           "(a trailing backslash); put it on one line so slurm-ml can "
                           "manage its TRESBillingWeights")
        body = strip_comment(line)
        comment = line[len(body):]
        m = re.search(r'(?i)\bTRESBillingWeights=("[^"]*"|\S*)', body)
        if m is None:
            edits.append(LineEdit(line, f'{body} TRESBillingWeights="{weights}"{comment}'))
        elif not _same(m.group(1), weights):
            theirs = Setting("TRESBillingWeights", unquote(m.group(1)), source, i, line)
            conflicts.append(Conflict(f"PartitionName={name} TRESBillingWeights", weights,
                                      theirs))
            new_body = body[:m.start(1)] + f'"{weights}"' + body[m.end(1):]
            edits.append(LineEdit(line, new_body + comment))
    missing = tuple(n for n in names if n not in found)
    return PartitionPlan(tuple(edits), tuple(conflicts), missing)


def _replace_line(lines: list[str], old: str, new: str) -> bool:
    for i, line in enumerate(lines):
        if line == old:
            lines[i] = new
            return True
    return False


def apply_edits(text: str, include_line: str, partitions: Sequence[LineEdit]) -> tuple[str, bool]:
    """slurm.conf with the partition lines edited and the Include line appended;
    also whether a newline had to be added before it."""
    lines = text.split("\n")
    for e in partitions:
        _replace_line(lines, e.before, e.after)
    out = "\n".join(lines)
    newline_added = bool(out) and not out.endswith("\n")
    return out + ("\n" if newline_added else "") + include_line + "\n", newline_added


@dataclass(frozen=True, slots=True)
class Reverted:
    text: str
    not_found: tuple[str, ...]  # recorded lines no longer in the file (changed locally)


def revert_edits(text: str, edits: ConfEdits) -> Reverted:
    """Undo :func:`apply_edits` exactly; lines changed since are reported, left alone."""
    lines = text.split("\n")
    missing: list[str] = []
    for e in edits.partitions:
        # neither our line nor the original: changed since (the original alone: the edit
        # never landed, e.g. an install cut short; nothing to undo)
        if not _replace_line(lines, e.after, e.before) and e.before not in lines:
            missing.append(e.after)
    # The Include line: the last line equal to it (admins may append after it). Gone
    # (never written, or removed by the admin): nothing to undo.
    at = max((i for i, line in enumerate(lines) if line == edits.include_line), default=None)
    if at is not None:
        del lines[at]
        if edits.newline_added and at == len(lines) - 1 and lines[-1] == "":
            # "...last\nInclude x\n" → "...last" + "" : drop the newline we added.
            lines.pop()
            return Reverted("\n".join(lines), tuple(missing))
    return Reverted("\n".join(lines), tuple(missing))
