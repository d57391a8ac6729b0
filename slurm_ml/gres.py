"""Slurm's GRES item grammar, ``[gres/|gres:]name[:type][:count|=count]``: pure, stdlib only.

Every place slurm-ml reads a GPU out of a string goes through here: admission (the
shim's ``tres_per_*``, submit-check's sbatch options), the daemon (``TresPer*`` and
``tres_per_*`` from scontrol/squeue, a node's ``Gres=``, AllocTRES keys from sacct and
scontrol) and ``config check``, whose rule for a GPU type name is that this grammar reads
it back (:func:`gpu_type_problem`). A leaf below the model, so that config may use it.

What Slurm does, and so what this does (``slurm_get_next_tres()`` in
src/common/slurm_protocol_defs.c, which sbatch's option checks in src/common/slurm_opt.c
and slurmctld's ``_get_next_gres()`` in src/interfaces/gres.c both call):

- an item runs to the next ``,``; ``gres/`` (23.11+) or ``gres:`` (22.05, and sbatch's
  ``gres_prepend_tres_type()``) before it names the TRES type;
- the part after the last ``=``, else after the last ``:``, is the count when it is a
  number (``_is_valid_number()``: a digit first, digits, then nothing or one of
  ``suffix_mult()``'s suffixes k/kib/kb, m/mib/mb, g/gib/gb, t/tib/tb, p/pib/pb in any
  case: ``2``, ``2k``, ``1gb``); any other last part is the type with a count of 1 after a
  ``:``, and makes the item invalid after an ``=``;
- the rest is ``name`` or ``name:type``, split at its first ``:``; a type there when the
  last part was already taken as the type is invalid (``gpu:a:b``).
- A count of 0 is kept here (Slurm drops the item); callers read 0 as "no GPUs".

gres.conf(5) calls ``Type=`` "an optional arbitrary string", and a MIG type is a
substring of the MIG profile NVML reports (doc/html/gres.shtml, "MIG Management":
``gres=gpu:a100:1,gpu:a100_3g.20gb:2``; src/plugins/gpu/nvml/gpu_nvml.c prints the
profile as ``%ug.%lugb``). So a type may start with a digit and hold ``.``, ``_`` and
``-`` (``3g.40gb``, ``a100_3g.40gb``). What it may not hold is what the grammar splits on
(``,``, ``:``, ``=``, blanks), and it may not read as a count: ``--gpus=80gb`` asks Slurm
for 80,000,000,000 GPUs, not for one GPU of type ``80gb``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

GPU = "gpu"

#: suffix_mult() in src/common/slurm_protocol_defs.c; matched case-insensitively.
_SUFFIX_MULT = {
    "": 1,
    "k": 1024, "kib": 1024, "kb": 1000,
    "m": 1024**2, "mib": 1024**2, "mb": 1000**2,
    "g": 1024**3, "gib": 1024**3, "gb": 1000**3,
    "t": 1024**4, "tib": 1024**4, "tb": 1000**4,
    "p": 1024**5, "pib": 1024**5, "pb": 1000**5,
}
_NUMBER = re.compile(r"([0-9]+)([A-Za-z]*)")
_ULLONG_MAX = 2**64 - 1  # strtoull()'s overflow value, which Slurm refuses as a number
_PREFIXES = ("gres/", "gres:")
#: What splits an item (',' ends it, ':' and '=' split it) or ends it on a command line.
_SEPARATORS = re.compile(r"[,:=\s]")


@dataclass(frozen=True, slots=True)
class GresItem:
    """One item of a GRES/TRES list: ``gres/gpu:a100_80g=2`` → ("gres/", "gpu", "a100_80g", 2,
    "=")."""

    prefix: str  # "", "gres/" or "gres:"
    name: str
    type: str | None
    count: int
    count_sep: str = ":"  # what came before an explicit count; ":" when none was written


def parse_count(text: str) -> int | None:
    """Slurm's reading of a count (``_is_valid_number()``): ``2`` → 2, ``2k`` → 2048,
    ``3g.40gb`` → None (not a number, so a type)."""
    m = _NUMBER.fullmatch(text)
    if m is None:
        return None
    mult = _SUFFIX_MULT.get(m[2].lower())
    value = int(m[1])
    if mult is None or value >= _ULLONG_MAX:
        return None
    return value * mult


def parse_item(item: str) -> GresItem | None:
    """One item as Slurm reads it; None when Slurm would refuse it or it names nothing
    (``""``, ``gpu:``, ``gpu=a100``, ``gpu:a:b``, a bare count)."""
    text = item.strip()
    prefix = next((p for p in _PREFIXES if text.startswith(p)), "")
    body = text[len(prefix):]
    if not body or "," in body:
        return None
    gtype: str | None = None
    count = 1
    count_sep = ":"
    cut = body.rfind("=")
    if cut < 0:
        cut = body.rfind(":")
    if cut >= 0:
        last, body, sep = body[cut + 1:], body[:cut], body[cut]
        if not last:
            return None
        number = parse_count(last)
        if number is not None:
            count, count_sep = number, sep
        elif sep == "=":
            return None
        else:
            gtype = last
    elif parse_count(body) is not None:
        return None  # a count with no name
    name, colon, rest = body.partition(":")
    if colon:
        if gtype is not None:
            return None
        gtype = rest
    if not name or gtype == "":
        return None
    return GresItem(prefix, name, gtype, count, count_sep)


def gpu_items(spec: str) -> list[GresItem]:
    """The GPU items of a GRES/TRES list (``tres_per_*``, ``--gres``, a node's ``Gres=``
    with its ``(S:0)`` already removed); other GRES and items Slurm refuses are left out."""
    out = []
    for raw in (spec or "").split(","):
        got = parse_item(raw) if GPU in raw else None
        if got is not None and got.name == GPU:
            out.append(got)
    return out


def untyped(item: GresItem) -> str:
    """The item without its type, in its own spelling: ``gres:gpu:a100:2`` → ``gres:gpu:2``,
    ``gres/gpu:3g.40gb=2`` → ``gres/gpu=2``."""
    return f"{item.prefix}{item.name}{item.count_sep}{item.count}"


def tres_gpu_type(key: str) -> str | None:
    """The GPU type of an accounting TRES name: ``gres/gpu:3g.40gb`` → ``3g.40gb``;
    None for ``gres/gpu`` and for any other TRES (``gres/gpumem``, ``cpu``)."""
    head, colon, gtype = key.partition(":")
    return gtype if colon and head == f"gres/{GPU}" and gtype else None


def gpu_type_problem(name: str) -> str | None:
    """Why ``name`` cannot be a GPU type that every GRES spelling carries, or None.

    None exactly when each way slurm-ml and Slurm write a typed GPU request (``gpu:T``,
    ``gpu:T:2``, ``gres:gpu:T:2``, ``gres/gpu:T:2``, ``gres/gpu:T=2``) reads back as
    that type (the accounting name ``gres/gpu:T`` then does too: it holds no ':').
    """
    if not name:
        return "must not be empty"
    bad = _SEPARATORS.search(name)
    if bad is not None:
        if bad[0].isspace():
            why = "a blank, which ends a gres.conf value and a word on a command line"
        else:
            why = (f"{bad[0]!r}, which Slurm's GRES syntax (gpu:TYPE:COUNT, "
                   f"gres/gpu:TYPE=COUNT) splits on")
        return (f"invalid GPU type {name!r}: it holds {why}; pick a name without ',', ':', "
                f"'=' or blanks")
    number = parse_count(name)
    if number is not None:
        return (f"invalid GPU type {name!r}: Slurm reads it as a count, so --gpus={name} "
                f"asks for {number} GPUs rather than one {name}; add a letter that makes it "
                f"a name (e.g. a100_{name}, mig_{name})")
    spellings = (f"{GPU}:{name}", f"{GPU}:{name}:2", f"gres:{GPU}:{name}:2",
                 f"gres/{GPU}:{name}:2", f"gres/{GPU}:{name}=2")
    for spelling in spellings:
        got = parse_item(spelling)
        if got is None or got.name != GPU or got.type != name:
            return (f"invalid GPU type {name!r}: Slurm's GRES syntax does not read "
                    f"{spelling!r} as a GPU of that type")
    return None


def slurm_gpu_total(requests: Iterable[tuple[str | None, str, int]], *, nodes: int,
                    tasks: int, sockets_per_node: int | None) -> int | None:
    """GPUs a job asks for in all, as Slurm counts them (src/interfaces/gres_select_util.c,
    22.05 and 24.11): ``requests`` are (GPU type, scope, count) with scope "job", "node",
    "socket" or "task"; the scopes of one type form one record, and the first of per
    job, per node (x ``nodes``), per socket (x ``sockets_per_node`` x ``nodes``), per task
    (x ``tasks``) that is set decides it. Types add up. None when a per-socket count
    meets unknown sockets (``sockets_per_node`` None)."""
    records: dict[str | None, dict[str, int]] = {}
    for gpu_type, per, count in requests:
        rec = records.setdefault(gpu_type, {})
        rec[per] = rec.get(per, 0) + count
    total = 0
    for rec in records.values():
        if rec.get("job"):
            total += rec["job"]
        elif rec.get("node"):
            total += rec["node"] * nodes
        elif rec.get("socket"):
            if sockets_per_node is None:
                return None
            total += rec["socket"] * sockets_per_node * nodes
        elif rec.get("task"):
            total += rec["task"] * tasks
    return total
