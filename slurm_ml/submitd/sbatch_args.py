"""``sbatch`` command line (+ batch script) → the ``job_desc`` fields the Lua shim sends.

``slurm-ml submit-check -- <sbatch args>`` runs the same admission policy as a real
submission, so it needs the same input: one dict per het component, keyed by Slurm's
``job_desc`` names exactly as ``job_submit.lua`` forwards them (``wire.JOB_FIELDS``,
including ``gres``, which 22.05's Lua API reports as a copy of tres_per_node), with a
key left out wherever slurmctld would see NO_VAL. This module redoes what ``sbatch``
22.05 does on the client side; every rule was checked against sbatch 22.05.8 submitting
to a slurmctld whose job_submit.lua dumped job_desc:

* Parsing is getopt_long's with a leading ``+``: options stop at the first non-option
  (the script path; the rest are script arguments), ``--`` ends options, long options may
  be abbreviated to a unique prefix, short flags may be bundled (``-Hp gpu``), and an
  optional argument must be attached (``--nice=5``, ``-koff``).
* ``#SBATCH`` (and the old ``#SLURM``) lines are read up to the first line that is neither
  blank nor a comment; words are split like sbatch does (quotes, backslash, ``#`` starts
  a comment). A line whose first word is ``hetjob``/``packjob`` starts the next component;
  ``:`` on the command line does the same. Command-line options win over the script's.
* Het components: a component starts from the previous one's options minus those sbatch
  resets on every component (partition, nodes, tasks, GPUs, --exclusive, --constraint,
  ...), so --account, --qos, --time, --time-min, --job-name, --comment, --requeue,
  --array and --hint carry over. Component 0 also starts from every command-line option
  of every component but --hint (sbatch's first pass), so ``-q a : -A b`` gives both
  components account b. A command line with fewer components than the script reapplies
  its last one.
* Derived values: ``-N 2 --ntasks-per-node=4`` sends num_tasks 8, ``-n`` below the node
  count shrinks the node range, ``-B``/``--sockets-per-node``/``--cores-per-socket``/
  ``--threads-per-core``/``--hint`` with a fixed node count set num_tasks, ``-w`` sets
  min_nodes to its host count, and sbatch's GRES check adds num_tasks (--gpus with
  --gpus-per-task, --ntasks-per-gpu), min/max_nodes (--gpus against -N, --gpus with
  --gpus-per-node) and ntasks_per_node (--gpus-per-node with --gpus-per-task).

Everything sbatch refuses before it contacts slurmctld raises ``SbatchParseError``, except
that values of options no field depends on (--mem, --mail-type, --begin, ...) go unchecked.
What this module cannot see: files (``-w``/``--nodefile`` host files, ``--export-file``),
environment variables (``SBATCH_*``), cli_filter plugins, and the cluster's GresTypes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from slurm_ml.gres import parse_count
from slurm_ml.submitd.wire import INFINITE, JOB_FIELDS, JOB_SHARED_NONE

__all__ = ["SbatchParseError", "parse_sbatch", "parse_time_minutes"]

JOB_SHARED_OK = 1  # --oversubscribe
JOB_SHARED_USER = 2  # --exclusive=user
JOB_SHARED_MCS = 3  # --exclusive=mcs
_INT_MAX = 2**31 - 1


class SbatchParseError(ValueError):
    """sbatch would refuse this command line or script before submitting anything."""


# ------------------------------------------------------------------------ option table

_NO, _REQ, _OPT = 0, 1, 2  # getopt has_arg


@dataclass(frozen=True, slots=True)
class _Spec:
    name: str  # long name
    has_arg: int
    short: str | None = None
    slot: str | None = None  # where the value lands; None = accepted and ignored
    reset: bool = False  # sbatch resets it on every het component (reset_each_pass)


def _specs() -> dict[str, _Spec]:
    table: list[_Spec] = [
        # --- options that reach the fields slurm-ml reads, or sbatch's checks of them
        _Spec("account", _REQ, "A", "account"),
        _Spec("array", _REQ, "a", "array"),
        _Spec("comment", _REQ, None, "comment"),
        _Spec("constraint", _REQ, "C", "constraint", reset=True),
        _Spec("cores-per-socket", _REQ, None, "cores", reset=True),
        _Spec("cpus-per-gpu", _REQ, None, "cpus_per_gpu", reset=True),
        _Spec("cpus-per-task", _REQ, "c", "cpus_per_task", reset=True),
        _Spec("distribution", _REQ, "m", "distribution", reset=True),
        _Spec("exclusive", _OPT, None, "shared", reset=True),
        _Spec("extra-node-info", _REQ, "B", "extra", reset=True),
        _Spec("gpus", _REQ, "G", "gpus", reset=True),
        _Spec("gpus-per-node", _REQ, None, "gpus_per_node", reset=True),
        _Spec("gpus-per-socket", _REQ, None, "gpus_per_socket", reset=True),
        _Spec("gpus-per-task", _REQ, None, "gpus_per_task", reset=True),
        _Spec("gres", _REQ, None, "gres", reset=True),
        _Spec("hint", _REQ, None, "hint"),  # carries on to later components only
        _Spec("job-name", _REQ, "J", "job_name"),
        _Spec("mem", _REQ, None, "mem"),  # --mem* in MB; also for the exclusion checks
        _Spec("mem-per-cpu", _REQ, None, "mem_per_cpu", reset=True),
        _Spec("mem-per-gpu", _REQ, None, "mem_per_gpu", reset=True),
        _Spec("mincpus", _REQ, None, "mincpus", reset=True),
        _Spec("no-requeue", _NO, None, "requeue"),
        _Spec("nodefile", _REQ, "F", "nodelist", reset=True),
        _Spec("nodelist", _REQ, "w", "nodelist", reset=True),
        _Spec("nodes", _REQ, "N", "nodes", reset=True),
        _Spec("ntasks", _REQ, "n", "ntasks", reset=True),
        _Spec("ntasks-per-core", _REQ, None, "ntasks_per_core", reset=True),
        _Spec("ntasks-per-gpu", _REQ, None, "ntasks_per_gpu", reset=True),
        _Spec("ntasks-per-node", _REQ, None, "ntasks_per_node", reset=True),
        _Spec("ntasks-per-tres", _REQ, None, "ntasks_per_tres", reset=True),
        _Spec("oversubscribe", _NO, "s", "shared", reset=True),
        _Spec("partition", _REQ, "p", "partition", reset=True),
        _Spec("qos", _REQ, "q", "qos"),
        _Spec("quiet", _NO, "Q", "quiet"),
        _Spec("requeue", _NO, None, "requeue"),
        _Spec("sockets-per-node", _REQ, None, "sockets", reset=True),
        _Spec("switches", _REQ, None, "switches", reset=True),
        _Spec("tasks-per-node", _REQ, None, "ntasks_per_node", reset=True),  # old spelling
        _Spec("threads-per-core", _REQ, None, "threads", reset=True),
        _Spec("time", _REQ, "t", "time"),
        _Spec("time-min", _REQ, None, "time_min"),
        _Spec("verbose", _NO, "v", "verbose"),
        _Spec("wrap", _REQ, None, "wrap"),
        # --- options that print something and exit: no job is submitted
        _Spec("autocomplete", _REQ, None, "exit"),
        _Spec("help", _NO, "h", "exit"),
        _Spec("usage", _NO, None, "exit"),
        _Spec("version", _NO, "V", "exit"),
    ]
    ignored_with_value = (
        ("acctg-freq", None), ("batch", None), ("bb", None), ("bbf", None),
        ("begin", "b"), ("chdir", "D"), ("cluster", None), ("clusters", "M"),
        ("cluster-constraint", None), ("container", None), ("context", None),
        ("core-spec", "S"), ("cpu-freq", None), ("deadline", None),
        ("delay-boot", None), ("dependency", "d"), ("error", "e"), ("exclude", "x"),
        ("export", None), ("export-file", None), ("gid", None), ("gpu-bind", None),
        ("gpu-freq", None), ("gres-flags", None), ("input", "i"),
        ("kill-on-invalid-dep", None), ("licenses", "L"), ("mail-type", None),
        ("mail-user", None), ("mcs-label", None), ("mem-bind", None),
        ("network", None), ("ntasks-per-socket", None), ("open-mode", None),
        ("output", "o"), ("power", None), ("prefer", None), ("priority", None),
        ("profile", None), ("reservation", None), ("signal", None), ("thread-spec", None),
        ("tmp", None), ("uid", None), ("wait-all-nodes", None), ("wckey", None),
    )
    ignored_flags = (
        ("contiguous", None), ("hold", "H"), ("ignore-pbs", None), ("overcommit", "O"),
        ("parsable", None), ("reboot", None), ("spread-job", None),
        ("test-only", None), ("use-min-nodes", None), ("wait", "W"),
    )
    ignored_optional = (("get-user-env", None), ("nice", None), ("no-kill", "k"),
                        ("propagate", None))
    table += [_Spec(n, _REQ, s) for n, s in ignored_with_value]
    table += [_Spec(n, _NO, s) for n, s in ignored_flags]
    table += [_Spec(n, _OPT, s) for n, s in ignored_optional]
    return {spec.name: spec for spec in table}


_SPECS = _specs()
_SHORT = {spec.short: spec for spec in _SPECS.values() if spec.short}
#: slots cleared at the start of every het component (sbatch's reset_each_pass)
_RESET_SLOTS = frozenset(s.slot for s in _SPECS.values() if s.reset and s.slot) | {
    "sockets", "cores", "threads"}


@dataclass(frozen=True, slots=True)
class _Event:
    spec: _Spec
    value: str | None
    shown: str  # the option as written, for messages ("-t", "--time")


# ------------------------------------------------------------------------ getopt

def _lookup_long(name: str, shown: str) -> _Spec:
    if name in _SPECS:
        return _SPECS[name]
    matches = sorted(n for n in _SPECS if n.startswith(name))
    targets = {(_SPECS[n].slot, _SPECS[n].has_arg) if _SPECS[n].slot else n for n in matches}
    if len(matches) == 1 or (matches and len(targets) == 1):
        return _SPECS[matches[0]]
    if matches:
        choices = " ".join(f"'--{n}'" for n in matches)
        raise SbatchParseError(f"option '{shown}' is ambiguous; possibilities: {choices}")
    raise SbatchParseError(f"unrecognized option '{shown}'")


def _getopt(args: Sequence[str], start: int) -> tuple[list[_Event], int]:
    """getopt_long("+...") over ``args[start:]``: the options and the first non-option."""
    events: list[_Event] = []
    i = start
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return events, i + 1
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            spec = _lookup_long(name, "--" + name)
            shown = "--" + spec.name
            i += 1
            if spec.has_arg == _NO:
                if eq:
                    raise SbatchParseError(f"option '{shown}' doesn't allow an argument")
                events.append(_Event(spec, None, shown))
            elif spec.has_arg == _OPT:
                events.append(_Event(spec, value or None, shown))  # "--opt=" is bare --opt
            elif eq:
                events.append(_Event(spec, value, shown))
            elif i < len(args):
                events.append(_Event(spec, args[i], shown))
                i += 1
            else:
                raise SbatchParseError(f"option '{shown}' requires an argument")
            continue
        if len(arg) < 2 or not arg.startswith("-"):
            break  # the script path (or a het separator, handled by the caller)
        i += 1
        for j, char in enumerate(arg[1:], start=1):
            spec_or_none = _SHORT.get(char)
            if spec_or_none is None:
                raise SbatchParseError(f"invalid option -- '{char}'")
            spec, shown, rest = spec_or_none, "-" + char, arg[j + 1:]
            if spec.has_arg == _NO:
                events.append(_Event(spec, None, shown))
                continue
            if spec.has_arg == _OPT or rest:
                events.append(_Event(spec, rest or None, shown))
            elif i < len(args):
                events.append(_Event(spec, args[i], shown))
                i += 1
            else:
                raise SbatchParseError(f"option '{shown}' requires an argument")
            break
    return events, i


# ------------------------------------------------------------------------ value parsers

_TIME_DHMS = re.compile(r"(\d+)-(?:(\d+)(?::(\d+)(?::(\d+))?)?)?")
_TIME_HMS = re.compile(r"(\d+)(?::(\d+)(?::(\d+))?)?")


def _time_seconds(text: str) -> int | None:
    """Slurm's time_str2secs: seconds, INFINITE, or None when malformed."""
    if text.lower() in {"-1", "infinite", "unlimited"}:
        return INFINITE
    if m := _TIME_DHMS.fullmatch(text):
        d, h, mi, s = (int(g) if g else 0 for g in m.groups())
        return ((d * 24 + h) * 60 + mi) * 60 + s
    if m := _TIME_HMS.fullmatch(text):
        parts = [int(g) for g in m.groups() if g is not None]
        if len(parts) == 3:
            return (parts[0] * 60 + parts[1]) * 60 + parts[2]
        return parts[0] * 60 + (parts[1] if len(parts) == 2 else 0)
    return None


def parse_time_minutes(text: str) -> int | None:
    """A --time/--time-min value in minutes as sbatch sends it, None when malformed.

    Seconds round up to a whole minute; "0" (or anything that rounds to 0), "-1",
    "infinite" and "unlimited" all mean INFINITE, which is what slurmctld sees.
    """
    secs = _time_seconds(text)
    if secs is None or (secs != INFINITE and secs > _INT_MAX):
        return None
    if secs == INFINITE:
        return INFINITE
    return (secs + 59) // 60 or INFINITE


def _time_arg(event: _Event) -> int:
    value = event.value or ""
    minutes = parse_time_minutes(value)
    if minutes is None:
        raise SbatchParseError(
            f"{event.shown}: invalid time {value!r}; use minutes, MM:SS, HH:MM:SS, D-HH, "
            "D-HH:MM or D-HH:MM:SS")
    return minutes


def _int_arg(event: _Event, text: str | None = None, *, positive: bool = True) -> int:
    """Slurm's parse_int(): a whole decimal number, greater than 0 when ``positive``."""
    value = event.value if text is None else text
    m = re.fullmatch(r"\s*\+?(\d+)", value or "")
    number = int(m[1]) if m else -1
    if number < 0 or (positive and number == 0) or number > _INT_MAX:
        need = "a whole number above 0" if positive else "a whole number"
        raise SbatchParseError(f"{event.shown}: invalid number {value!r}; need {need}")
    return number


_NODE_COUNT = re.compile(r"(\d+)([kKmM]?)\s*")


def _node_count(event: _Event, text: str) -> int:
    m = _NODE_COUNT.fullmatch(text)
    if not m:
        raise SbatchParseError(f"{event.shown}: {text!r} is not a valid node count")
    scale = {"": 1, "k": 1024, "m": 1024 * 1024}[m[2].lower()]
    return int(m[1]) * scale


def _nodes_arg(event: _Event) -> tuple[int, int]:
    """-N N or -N MIN-MAX → (min_nodes, max_nodes); N means MIN = MAX = N."""
    value = event.value or ""
    low, dash, high = value.partition("-")
    first = _node_count(event, low)
    last = _node_count(event, high) if dash else first
    if last < first:
        raise SbatchParseError(
            f"{event.shown}: maximum node count {last} is less than minimum {first}")
    return first, last


_MBYTES = re.compile(r"^(?P<num>\d+)(?P<unit>[KMGT]?)B?$", re.IGNORECASE)
_MB_PER = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 * 1024}


def _mem_arg(event: _Event) -> int:
    """--mem, --mem-per-cpu, --mem-per-gpu → MB (sbatch's str_to_mbytes: K, M (the
    default), G or T; 0 for --mem means all of each node's memory)."""
    m = _MBYTES.match((event.value or "").strip())
    if not m:
        raise SbatchParseError(f"{event.shown}: invalid memory constraint {event.value!r}")
    return math.ceil(int(m["num"]) * _MB_PER[m["unit"].upper()])


def _exclusive_arg(event: _Event) -> int:
    if event.spec.name == "oversubscribe":
        return JOB_SHARED_OK
    choices = {None: JOB_SHARED_NONE, "exclusive": JOB_SHARED_NONE,
               "oversubscribe": JOB_SHARED_OK, "user": JOB_SHARED_USER,
               "mcs": JOB_SHARED_MCS}
    key = event.value.lower() if event.value is not None else None
    if key not in choices:
        raise SbatchParseError(
            f"{event.shown}: invalid value {event.value!r}; use --exclusive, "
            "--exclusive=user or --exclusive=mcs")
    return choices[key]


def _switches_arg(event: _Event) -> tuple[int, int | None]:
    """--switches=COUNT[@MAX-TIME] → (req_switch, wait4switch seconds or None).

    sbatch drops a wait time it cannot read (and INFINITE) without a word, so do we.
    """
    count, at, wait = (event.value or "").partition("@")
    seconds = _time_seconds(wait) if at else None
    if seconds == INFINITE or (seconds is not None and seconds > _INT_MAX):
        seconds = None
    return _int_arg(event, count), seconds


def _extra_node_info_arg(event: _Event) -> dict[str, int | None]:
    """-B S[:C[:T]] (each "*", N or N-M; the minimum counts) → sockets, cores, threads.

    It sets all three: a part left out or given as "*" clears an earlier value.
    """
    parts = (event.value or "").split(":")
    if len(parts) > 3:
        raise SbatchParseError(f"{event.shown}: use SOCKETS[:CORES[:THREADS]]")
    parts += ["*"] * (3 - len(parts))
    out: dict[str, int | None] = {}
    for key, part in zip(("sockets", "cores", "threads"), parts, strict=True):
        m = re.fullmatch(r"(\d+)(?:-\d*)?", part)
        if part == "*":
            out[key] = None
        elif m:
            out[key] = int(m[1])
        else:
            raise SbatchParseError(f"{event.shown}: invalid number {part!r} in {event.value!r}")
    return out


def _no_kill_check(event: _Event) -> None:
    if event.value is not None and event.value.lower() not in {"set", "off", "no"}:
        raise SbatchParseError(f"{event.shown}: invalid value {event.value!r}; use off")


# ------------------------------------------------------------------------ state

def _apply(state: dict[str, Any], events: Iterable[_Event]) -> None:
    """Set options in order, as sbatch's option handlers would (last one wins)."""
    for event in events:
        spec, value, slot = event.spec, event.value, event.spec.slot
        if spec.name == "no-kill":
            _no_kill_check(event)
        if slot is None:
            continue
        if slot == "exit":
            raise SbatchParseError(f"{event.shown} only prints information; no job is submitted")
        if slot in {"time", "time_min"}:
            state[slot] = _time_arg(event)
        elif slot == "nodes":
            state[slot] = _nodes_arg(event)
        elif slot in {"ntasks", "ntasks_per_node", "ntasks_per_core", "ntasks_per_gpu",
                      "ntasks_per_tres", "sockets", "cores", "threads", "cpus_per_task",
                      "cpus_per_gpu", "mincpus"}:
            state[slot] = _int_arg(event)
        elif slot in {"mem", "mem_per_cpu", "mem_per_gpu"}:
            state[slot] = _mem_arg(event)
        elif slot == "shared":
            state[slot] = _exclusive_arg(event)
        elif slot == "requeue":
            state[slot] = 1 if spec.name == "requeue" else 0
        elif slot == "switches":
            state[slot] = _switches_arg(event)
        elif slot == "extra":
            for key, number in _extra_node_info_arg(event).items():
                if number is None:
                    state.pop(key, None)
                else:
                    state[key] = number
            state[slot] = True
        elif slot == "nodelist":
            state[slot] = ("file" if spec.name == "nodefile" else "list", value or "")
        else:
            state[slot] = value if value is not None else ""


def _hint_tokens(shown: str, text: str) -> list[str]:
    """Slurm's verify_hint() tokenising: a comma not followed by a digit separates."""
    tokens = re.split(r",(?!\d)", text)
    known = {"compute_bound", "memory_bound", "multithread", "nomultithread"}
    for token in tokens:
        if token.lower() not in known:
            raise SbatchParseError(
                f"{shown}: unrecognized hint {token!r}; use compute_bound, memory_bound, "
                "multithread or nomultithread")
    return [t.lower() for t in tokens]


# ------------------------------------------------------------------------ batch script

_HET_WORD = re.compile(r"(?:hetjob|packjob)(?=\s|$)", re.IGNORECASE)


def _script_words(line: str, lineno: int) -> Iterator[str]:
    """Words of one #SBATCH line, split the way sbatch's get_argument() splits them."""
    pos = 0
    while True:
        while pos < len(line) and line[pos].isspace():
            pos += 1
        if _HET_WORD.match(line, pos):
            return  # sbatch blanks a hetjob/packjob word and stops reading the line there
        if pos < len(line) and line[pos] == ":":
            raise SbatchParseError(f"batch script line {lineno}: unexpected ':' in {line!r}")
        if pos >= len(line):
            return
        word: list[str] = []
        quote = ""
        escaped = False
        while pos < len(line) and (quote or not line[pos].isspace()):
            char = line[pos]
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
                pos += 1
                continue
            elif quote:
                if char == quote:
                    quote = ""
                    pos += 1
                    continue
            elif char in "\"'":
                quote = char
                pos += 1
                continue
            elif char == "#":
                break  # the rest of the line is a comment
            word.append(char)
            pos += 1
        if quote:
            raise SbatchParseError(
                f"batch script line {lineno}: unmatched {quote} in {line!r}")
        if not word:
            return  # sbatch stops reading a line at an empty word ("" or a comment)
        yield "".join(word)


def _check_script(script: str) -> None:
    if not script:
        raise SbatchParseError("the batch script is empty")
    if not script.strip():
        raise SbatchParseError("the batch script contains only whitespace")
    if not script.startswith("#!"):
        raise SbatchParseError(
            "this does not look like a batch script: the first line must start with #! "
            "followed by the path to an interpreter, e.g. #!/bin/sh")
    if "\0" in script:
        raise SbatchParseError("the batch script contains a NUL character")
    if "\r\n" in script:
        raise SbatchParseError(
            "the batch script contains DOS line breaks (\\r\\n) instead of UNIX ones (\\n)")


def _script_components(script: str) -> list[list[_Event]]:
    """Options of the leading #SBATCH block, one list per het component."""
    components: list[list[tuple[str, int]]] = [[]]
    for lineno, line in enumerate(script.split("\n"), start=1):
        if line.startswith("#SBATCH"):
            rest = line[len("#SBATCH"):]
        elif line.startswith("#SLURM"):
            rest = line[len("#SLURM"):]
        else:
            stripped = line.lstrip()
            if stripped and not stripped.startswith("#"):
                break  # the first command ends the option block
            continue
        if _HET_WORD.match(rest.lstrip()):
            components.append([])
        components[-1].extend((word, lineno) for word in _script_words(rest, lineno))
    out: list[list[_Event]] = []
    for words in components:
        args = [w for w, _ in words]
        try:
            events, stop = _getopt(args, 0)
        except SbatchParseError as exc:
            raise SbatchParseError(f"batch script: {exc}") from None
        if stop < len(args):
            raise SbatchParseError(
                f"batch script line {words[stop][1]}: invalid directive {args[stop]!r} "
                "(not an sbatch option)")
        out.append(events)
    return out


# ------------------------------------------------------------------------ hostlists

def _hostlist_count(expr: str) -> int | None:
    """Distinct hosts in a Slurm hostlist ("n[1-3,5],gpu01"); None when unreadable."""
    hosts: set[str] = set()
    for item in re.findall(r"(?:[^,\[\s]|\[[^\]]*\])+", expr):
        names = [""]
        for piece in re.findall(r"\[[^\]]*\]|[^\[]+", item):
            if not piece.startswith("["):
                names = [n + piece for n in names]
                continue
            expanded: list[str] = []
            for part in piece[1:-1].split(","):
                m = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip())
                if not m:
                    return None
                lo, hi = int(m[1]), int(m[2] or m[1])
                if hi < lo or (hi - lo) * len(names) > 1_000_000:
                    return None
                expanded += [str(k).zfill(len(m[1])) for k in range(lo, hi + 1)]
            names = [n + e for n in names for e in expanded]
        hosts.update(names)
    return len(hosts) or None


# ------------------------------------------------------------------------ GRES

def _prefixed(prefix: str, text: str) -> str | None:
    """sbatch's xfmt_tres(): "a100:2,v100:1" → "gres:gpu:a100:2,gres:gpu:v100:1"."""
    items = [item for item in text.split(",") if item]
    return ",".join(f"{prefix}:{item}" for item in items) or None


def _gres_prepend(text: str) -> str:
    """sbatch's gres_prepend_tres_type(): every item gets "gres:" (never twice)."""
    return ("gres:" + text).replace(",", ",gres:").replace("gres:gres:", "gres:")


_OPTION_OF = {"job": "--gpus", "node": "--gres/--gpus-per-node",
              "socket": "--gpus-per-socket", "task": "--gpus-per-task"}


def _gres_items(spec: str, per: str) -> Iterator[tuple[str, str | None, int]]:
    """(name, type, count) for each item of a tres_per_* string, as sbatch validates it."""
    for raw in spec.split(","):
        item = raw[5:] if raw.startswith("gres:") else raw
        if not item:
            continue
        parts = item.split(":")
        # A count as Slurm reads one (slurm_ml.gres): "2", "2k"; "3g.40gb" is a type.
        number = parse_count(parts[-1]) if len(parts) > 1 else None
        ok = bool(re.fullmatch(r"\w+", parts[0])) and all(parts) and (
            len(parts) <= 2 or (len(parts) == 3 and number is not None))
        if not ok:
            raise SbatchParseError(
                f"{_OPTION_OF[per]}: invalid generic resource (gres) specification {raw!r}; "
                "use NAME[:TYPE][:COUNT]")
        count = 1 if number is None else number
        gtype = parts[1] if len(parts) == 3 or (len(parts) == 2 and number is None) else None
        yield parts[0], gtype, count


@dataclass(slots=True)
class _Shape:
    """The numbers sbatch's _opt_verify() and GRES check work on."""

    nodes_set: bool
    min_nodes: int
    max_nodes: int
    ntasks_set: bool
    ntasks: int
    ntasks_known: bool  # what the GRES check treats as a given task count
    ntasks_per_node: int | None
    sockets: int | None


def _check_gres(tres: dict[str, str], shape: _Shape, ntasks_per_tres: int | None) -> None:
    """sbatch's client-side GRES check, which also fills in tasks and nodes."""
    records: dict[tuple[str, str | None], dict[str, int]] = {}
    for per in ("job", "node", "socket", "task"):
        if per in tres:
            for name, gtype, count in _gres_items(tres[per], per):
                if count:  # "gpu:0" asks for nothing and takes no part in the checks
                    records.setdefault((name, gtype), {})[per] = count
    for (name, _gtype), rec in records.items():
        job, node = rec.get("job", 0), rec.get("node", 0)
        sock, task = rec.get("socket", 0), rec.get("task", 0)
        flag = f"--{name}s" if name == "gpu" else f"--gres={name}"
        if (job and ((node and node > job) or (sock and sock > job))) or (
                node and sock and sock > node):
            raise SbatchParseError(
                f"{flag} must be >= its per-node count >= its per-socket count")
        if task and ((job and task > job) or (node and task > node)):
            raise SbatchParseError(f"{flag} per task is more than per job or per node")
        if sock and shape.sockets is None:
            raise SbatchParseError(
                f"--{name}s-per-socket needs --sockets-per-node")
        if job and shape.nodes_set:
            if job < shape.min_nodes:
                raise SbatchParseError(
                    f"{flag}={job} is less than the {shape.min_nodes} nodes asked for")
            shape.max_nodes = min(shape.max_nodes, job)  # no use for more nodes than GPUs
        if job and node:
            if job % node:
                raise SbatchParseError(f"{flag} is not a multiple of its per-node count")
            need = job // node
            if (shape.nodes_set and need < shape.min_nodes) or (
                    shape.nodes_set and shape.max_nodes and need > shape.max_nodes):
                raise SbatchParseError(
                    f"{flag} and its per-node count need {need} nodes, outside the "
                    f"requested {shape.min_nodes}-{shape.max_nodes or shape.min_nodes}")
            shape.nodes_set, shape.min_nodes, shape.max_nodes = True, need, need
        if node and sock:
            if node % sock:
                raise SbatchParseError(f"{flag}: per-node count not a multiple of per-socket")
            if shape.sockets is None:
                shape.sockets = node // sock
            elif shape.sockets != node // sock:
                raise SbatchParseError(
                    f"{flag}: per-node and per-socket counts need {node // sock} sockets, "
                    f"not --sockets-per-node={shape.sockets}")
        if task:
            if job:
                if job % task:
                    raise SbatchParseError(f"{flag} is not a multiple of its per-task count")
                if shape.ntasks_known and shape.ntasks != job // task:
                    raise SbatchParseError(
                        f"{flag} and its per-task count mean {job // task} tasks, "
                        f"not {shape.ntasks}")
                shape.ntasks = job // task
            elif not shape.ntasks_known:
                raise SbatchParseError(
                    f"--{name}s-per-task needs {flag} or -n/--ntasks (or a fixed node count)")
            shape.ntasks_set = shape.ntasks_known = True
        if node and task:
            if node % task:
                raise SbatchParseError(f"{flag}: per-node count not a multiple of per-task")
            if not shape.ntasks_per_node:
                shape.ntasks_per_node = node // task
            elif shape.ntasks_per_node != node // task:
                raise SbatchParseError(
                    f"{flag}: per-node and per-task counts mean {node // task} tasks per "
                    f"node, not --ntasks-per-node={shape.ntasks_per_node}")
    names = {n for n, _ in records}
    if "gpu" in names and names & {"shard", "mps"}:
        shared = "/".join(sorted(names & {"shard", "mps"}))
        raise SbatchParseError(
            f"GPUs and {shared} (slices of GPUs) cannot be asked for in one job")
    for name in names:
        types = {t for n, t in records if n == name}
        if None in types and len(types) > 1:
            raise SbatchParseError(
                f"invalid GRES specification: {name} both with and without a type")
    if ntasks_per_tres is None:
        return
    gpu = [rec for (name, _), rec in records.items() if name == "gpu"]
    if gpu:
        count = sum(rec.get("job", 0) for rec in gpu) or sum(
            rec.get("node", 0) for rec in gpu) * (shape.min_nodes if shape.nodes_set else 1)
        if not count:
            raise SbatchParseError("--ntasks-per-gpu with no GPUs to count tasks from")
        shape.ntasks = ntasks_per_tres * count
    elif shape.ntasks_set:  # the GPU count follows from the tasks (none below one)
        gpus = shape.ntasks // ntasks_per_tres
        if gpus and shape.ntasks % ntasks_per_tres:
            raise SbatchParseError("-n/--ntasks must be a multiple of --ntasks-per-gpu")
        if gpus and shape.nodes_set and gpus < shape.min_nodes:
            raise SbatchParseError(
                f"-n/--ntasks and --ntasks-per-gpu mean {gpus} GPUs, fewer than the "
                f"{shape.min_nodes} nodes asked for")
    elif shape.nodes_set and shape.max_nodes == shape.min_nodes > 0:  # one GPU per node
        shape.ntasks = shape.min_nodes * ntasks_per_tres
    else:
        raise SbatchParseError(
            "--ntasks-per-gpu needs --gpus/--gpus-per-node, -n/--ntasks or a fixed -N")
    shape.ntasks_set = True


def _check_exclusions(given: frozenset[str]) -> None:
    """Pairs sbatch refuses when both were given anywhere, in any het component."""
    mem = sorted(given & {"mem", "mem_per_cpu", "mem_per_gpu"})
    if len(mem) > 1:
        options = " and ".join("--" + m.replace("_", "-") for m in mem)
        raise SbatchParseError(f"{options} exclude each other")
    if {"verbose", "quiet"} <= given:
        raise SbatchParseError("-v/--verbose and -Q/--quiet exclude each other")


def _ntasks_per_gpu(state: dict[str, Any], given: frozenset[str]) -> int | None:
    """--ntasks-per-gpu (= --ntasks-per-tres) after sbatch's consistency checks.

    ``given`` holds every option slot set so far in any component: sbatch tests these
    exclusions on "was it given", which never resets between het components.
    """
    per_gpu, per_tres = state.get("ntasks_per_gpu"), state.get("ntasks_per_tres")
    if per_gpu is not None and per_tres is not None and per_gpu != per_tres:
        raise SbatchParseError(
            f"--ntasks-per-gpu={per_gpu} and --ntasks-per-tres={per_tres} disagree")
    if given & {"ntasks_per_gpu", "ntasks_per_tres"}:
        for slot, option in (("gpus_per_task", "--gpus-per-task"),
                             ("gpus_per_socket", "--gpus-per-socket"),
                             ("ntasks_per_node", "--ntasks-per-node")):
            if slot in given:
                raise SbatchParseError(f"{option} and --ntasks-per-gpu exclude each other")
    return per_gpu if per_gpu is not None else per_tres


# ------------------------------------------------------------------------ one component

def _component(state: dict[str, Any], given: frozenset[str],
               own: frozenset[str]) -> dict[str, Any]:
    """job_desc fields of one component from its options (sbatch's _opt_verify).

    ``given``: option slots set in any component so far; ``own``: set in this one.
    """
    _check_exclusions(given)
    nodes = state.get("nodes")
    shape = _Shape(
        nodes_set=nodes is not None, min_nodes=nodes[0] if nodes else 1,
        max_nodes=nodes[1] if nodes else 0, ntasks_set="ntasks" in state,
        ntasks=state.get("ntasks", 1), ntasks_known=False,
        ntasks_per_node=state.get("ntasks_per_node"), sockets=state.get("sockets"))
    cores, threads = state.get("cores"), state.get("threads")
    if "hint" in state and state.keys() & {"ntasks_per_core", "threads", "extra"}:
        del state["hint"]  # sbatch drops a --hint that clashes, for later components too
    elif "hint" in state:
        if "hint" in own:  # a hint given here replaces this component's socket/core layout
            shape.sockets = cores = None
        for token in _hint_tokens("--hint", state["hint"]):
            if token == "compute_bound":
                shape.sockets, cores, threads = None, None, 1
            elif token == "memory_bound":
                cores, threads = 1, 1
            else:
                threads = None if token == "multithread" else 1
    nodelist = state.get("nodelist")
    hosts = None  # a host file (--nodefile, or -w with a "/") cannot be read here
    if nodelist is not None and nodelist[0] == "list" and "/" not in nodelist[1]:
        hosts = _hostlist_count(nodelist[1])
    if hosts is not None:
        shape.min_nodes = max(hosts, shape.min_nodes) if shape.nodes_set else hosts
        shape.nodes_set = True
    if shape.ntasks_per_node is not None and not shape.ntasks_set and (
            shape.max_nodes in (0, shape.min_nodes)):
        shape.ntasks, shape.ntasks_set = shape.min_nodes * shape.ntasks_per_node, True
    if shape.max_nodes and shape.min_nodes > shape.max_nodes:
        raise SbatchParseError(
            f"invalid number of nodes (-N {shape.min_nodes}-{shape.max_nodes}): the node "
            "list has more hosts than --nodes allows")
    if (shape.nodes_set or state.get("extra")) and not shape.ntasks_set and (
            shape.max_nodes in (0, shape.min_nodes)):
        shape.ntasks = max(shape.min_nodes, 1)
        # with a fixed node count (and no -c) the GRES check counts one task per node
        shape.ntasks_known = (shape.nodes_set and shape.max_nodes == shape.min_nodes > 0
                              and "cpus_per_task" not in state)
        for factor in (shape.sockets, cores, threads):
            if factor is not None:
                shape.ntasks *= factor
                shape.ntasks_set = True
    elif shape.nodes_set and shape.ntasks_set:
        shape.max_nodes = min(shape.max_nodes, shape.ntasks)
        if shape.ntasks < shape.min_nodes:
            shape.min_nodes = shape.max_nodes = shape.ntasks
    if re.match(r"arbitrary(?:$|[:,])", state.get("distribution", ""), re.IGNORECASE):
        if nodelist is None:
            raise SbatchParseError(
                "-m arbitrary needs a node list (-w) to lay the tasks out on")
        if hosts is not None and not shape.ntasks_set:
            shape.ntasks, shape.ntasks_set = hosts, True
    shape.ntasks_known = shape.ntasks_known or shape.ntasks_set

    out: dict[str, Any] = {}
    tres: dict[str, str] = {}
    per_node = [s for s in (_prefixed("gres:gpu", state.get("gpus_per_node", "")),) if s]
    gres = state.get("gres")
    if gres is not None and gres.lower() != "none":
        per_node.append(_gres_prepend(gres))
    for per, spec in (("node", ",".join(per_node) or None),
                      ("job", _prefixed("gres:gpu", state.get("gpus", ""))),
                      ("task", _prefixed("gres:gpu", state.get("gpus_per_task", ""))),
                      ("socket", _prefixed("gres:gpu", state.get("gpus_per_socket", "")))):
        if spec:
            tres[per] = out[f"tres_per_{per}"] = spec
    _check_gres(tres, shape, _ntasks_per_gpu(state, given))

    for slot, key in (("account", "account"), ("partition", "partition"), ("qos", "qos"),
                      ("constraint", "features"), ("comment", "comment"),
                      ("array", "array_inx"), ("time", "time_limit"),
                      ("time_min", "time_min"), ("requeue", "requeue"),
                      ("shared", "shared")):
        if slot in state:
            out[key] = state[slot]
    if "tres_per_node" in out:
        out["gres"] = out["tres_per_node"]  # 22.05's job_desc.gres reads tres_per_node
    if shape.nodes_set:
        out["min_nodes"] = shape.min_nodes
        if shape.max_nodes:
            out["max_nodes"] = shape.max_nodes
    if shape.ntasks_set:
        out["num_tasks"] = shape.ntasks
    if shape.ntasks_per_node is not None:
        out["ntasks_per_node"] = shape.ntasks_per_node
    # CPUs and memory, as sbatch puts them in job_desc (22.05 spellings; the Lua
    # job_desc shows pn_min_memory as min_mem_per_node, or min_mem_per_cpu when the
    # MEM_PER_CPU flag is set)
    if "cpus_per_task" in state:
        out["cpus_per_task"] = state["cpus_per_task"]
    if "cpus_per_gpu" in state:
        out["cpus_per_tres"] = f"gres:gpu:{state['cpus_per_gpu']}"
    if "mincpus" in state:
        out["pn_min_cpus"] = state["mincpus"]
    if "mem" in state:
        out["min_mem_per_node"] = state["mem"]
    if "mem_per_cpu" in state:
        out["min_mem_per_cpu"] = state["mem_per_cpu"]
    if "mem_per_gpu" in state:
        out["mem_per_tres"] = f"gres:gpu:{state['mem_per_gpu']}"
    if "switches" in state:
        out["req_switch"], wait = state["switches"]
        if wait is not None:
            out["wait4switch"] = wait
    return out


# ------------------------------------------------------------------------ entry point

def parse_sbatch(argv: Sequence[str], script: str | None = None, *, user: str,
                 user_id: int | None = None) -> list[dict[str, Any]]:
    """The job_desc field dicts the job_submit shim would send for this ``sbatch`` call.

    ``argv`` is what follows ``sbatch`` on its command line; ``script`` is the text of
    the batch script (the file named by the first non-option argument, or what sbatch
    would read from stdin), or None when it is not available. One dict per het
    component, keys as in ``wire.JOB_FIELDS``; raises SbatchParseError where sbatch
    itself would refuse to submit.
    """
    return [job for job, _option in _parse(argv, script, user=user, user_id=user_id)]


def per_node_gpu_options(argv: Sequence[str], script: str | None = None, *,
                         user: str) -> list[str | None]:
    """For each het component, the option that gave its GPUs per node as written:
    ``--gpus-per-node`` or ``--gres`` (the last one sbatch reads, command line after the
    script's #SBATCH lines), None when neither did. Both land in job_desc's tres_per_node,
    so only the command line tells them apart; admission names the same one in advice."""
    return [option for _job, option in _parse(argv, script, user=user)]


def _parse(argv: Sequence[str], script: str | None = None, *, user: str,
           user_id: int | None = None) -> list[tuple[dict[str, Any], str | None]]:
    """``parse_sbatch``'s dicts, each with its ``per_node_gpu_options`` entry."""
    args = list(argv)
    segments: list[list[_Event]] = []
    pos = 0
    while True:
        events, pos = _getopt(args, pos)
        segments.append(events)
        if pos < len(args) and args[pos] == ":":
            pos += 1
            continue
        break
    script_path = args[pos] if pos < len(args) else None

    first_pass: dict[str, Any] = {}  # sbatch reads every component's options first
    _apply(first_pass, (e for segment in segments for e in segment))
    wrap = first_pass.get("wrap")
    if wrap is not None and script_path is not None:
        raise SbatchParseError(
            f"--wrap and a script ({script_path!r}) exclude each other: sbatch "
            "does not take script arguments with --wrap")
    script_parts: list[list[_Event]] = []
    if wrap is None and script is not None:
        _check_script(script)
        script_parts = _script_components(script)

    if wrap is not None:
        default_name = "wrap"
    elif script_path is not None:
        default_name = script_path.rsplit("/", 1)[-1]
    else:
        default_name = "sbatch"

    count = max(len(segments), len(script_parts))
    jobs: list[tuple[dict[str, Any], str | None]] = []
    given = {e.spec.slot for segment in segments for e in segment if e.spec.slot}
    state = {k: v for k, v in first_pass.items() if k not in _RESET_SLOTS and k != "hint"}
    for index in range(count):
        state = {k: v for k, v in state.items() if k not in _RESET_SLOTS}
        events = script_parts[index] if index < len(script_parts) else []
        events = [*events, *segments[min(index, len(segments) - 1)]]
        _apply(state, events)
        option = next((e.shown for e in reversed(events)
                       if e.spec.slot in ("gpus_per_node", "gres")),
                      None)
        own = frozenset(e.spec.slot for e in events if e.spec.slot)
        given.update(own)
        state.setdefault("job_name", default_name)
        fields = _component(state, frozenset(given), own)
        fields["user_name"] = user
        if user_id is not None:
            fields["user_id"] = user_id
        fields["name"] = state["job_name"]
        if count > 1:
            fields["het_job_offset"] = index
        jobs.append(({key: fields[key] for key in JOB_FIELDS if key in fields}, option))
    return jobs


def script_argument(argv: Sequence[str]) -> str | None:
    """The batch script path on an sbatch command line (the first non-option), if any."""
    args = list(argv)
    pos = 0
    while True:
        _events, pos = _getopt(args, pos)
        if pos < len(args) and args[pos] == ":":
            pos += 1
            continue
        return args[pos] if pos < len(args) else None
