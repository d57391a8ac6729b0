"""The plain ``nvidia-smi`` table (the ``+----+`` box) read back as a :class:`NodeSnapshot`.

Pure functions on strings: the caller reads the file. The table is what operators paste
into tickets and what many health scripts capture, so it is often the only evidence of a
node's state; it shows far less than ``nvidia-smi -q`` (no UUID, no remapping, no clock
events), and every value it does not show stays ``None`` ("not looked at").

Layouts read: the 3xx/4xx box (``| GPU  Name        Persistence-M| Bus-Id  Disp.A |``),
the 5xx box with or without the ``MIG M.`` row, and Windows tables (``TCC``/``WDDM``
instead of the persistence mode). Each GPU is two or three box rows, found by their
shape (a GPU index then a name, a bus id in the second cell), not by column offsets,
so a fragment of rows without the header parses too (``driver_version`` is then None).
The ``Processes:`` and ``MIG devices:`` boxes are skipped. A GPU printed twice (an
``nvidia-smi -l`` capture) keeps its last reading; so does the header.

What a GPU row gives: ``index``, ``name`` (as printed, perhaps truncated with ``...``),
``pci_bus_id`` (normalised as in :mod:`.smi_q`), memory used/total, GPU utilisation,
ECC mode and the volatile uncorrected ECC count, MIG mode. ``N/A`` and ``Not Supported``
read as ``NOT_SUPPORTED``.

Errors: every cell reading ``ERR!``, ``Unknown Error``, ``GPU is lost``, ``GPU requires
reset``, ``Requires reset`` or another ``[...]`` message adds to ``Gpu.errors`` one entry
per distinct message, naming the columns it stood in, in table order:
``"ERR! (temperature, power, memory)"``. Column names: name, persistence, bus, display,
ecc, fan, temperature, perf, power, memory, utilization, compute mode, mig mode, extra.
A fan-only fault is exactly ``"ERR! (fan)"``: the word "fan" appears only where the fan
column erred, so a check can tolerate a dead fan (a fanless passively cooled card reads
N/A, a broken fan sensor ERR!) and still see every other fault.

Lines outside the box: ``Unable to determine the device handle for GPU <bus>: <reason>``
adds ``"<reason> (device handle unavailable)"`` to the GPU the table lists at that bus,
or to a new GPU with the next index after the table's; ``WARNING: infoROM is corrupted
at gpu <bus>`` adds ``"Corrupted infoROM (nvidia-smi warning)"`` the same way;
``No devices were found``, ``Failed to initialize NVML…`` and ``NVIDIA-SMI has failed…``
go to ``NodeSnapshot.errors`` as ``"<line> (line N)"`` like :mod:`.smi_q`. Other lines
(a shell prompt, the date line) are skipped. :class:`CaptureError` is raised only when
the text has neither a GPU row nor one of these lines: it is not this table.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from slurm_ml.health.replay.errors import CaptureError
from slurm_ml.health.replay.smi_q import _NOT_SUPPORTED_VALUES, _squash, normalise_pci_bus_id
from slurm_ml.health.snapshot import NOT_SUPPORTED, EccCounts, Gpu, NodeSnapshot, Reading, bus_key

__all__ = ["SOURCE", "looks_like_smi_table", "parse_smi_table"]

SOURCE = "replay:nvidia-smi-table"

_BUS_TEXT = r"(?:[0-9A-Fa-f]{1,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]"
_BUS = re.compile(_BUS_TEXT)
_HEADER = re.compile(r"\|\s*NVIDIA-SMI\s+\S")
_DRIVER = re.compile(r"Driver Version:\s*(\S+)")
_CUDA = re.compile(r"CUDA Version:\s*(\S+)")
_GPU_ROW_SHAPE = re.compile(
    rf"^[ \t]*\|[ \t]*\d{{1,4}}[ \t]+[^|\n]*\|[ \t]*{_BUS_TEXT}[^|\n]*\|[^|\n]*\|",
    re.MULTILINE,
)
#: What nvidia-smi prints in a cell it could not fill; any other ``[...]`` is one too
#: (as in ``-q`` output), except the not-supported spellings.
_ERROR_PHRASE = re.compile(
    r"\[(?!\s*(?:N/A|Not Supported)\s*\])[^\[\]|]{1,60}\]"
    r"|ERR!|Unknown Error|GPU is lost|GPU requires reset|Requires reset",
    re.IGNORECASE,
)
_MARK = "\x00"  # brackets a placeholder for an error phrase inside a cell
_NOT_SUPPORTED = _NOT_SUPPORTED_VALUES  # the spellings nvidia-smi -q prints too
_PERSISTENCE = frozenset({"on", "off", "n/a", "tcc", "wddm", "mcdm"})
_INDEX = re.compile(r"\s*(\d{1,4})\s+(\S.*?)\s*")
_MEMORY = re.compile(
    r"(\d{1,12})\s*(KiB|MiB|GiB|MB|GB)\s*/\s*(\d{1,12})\s*(KiB|MiB|GiB|MB|GB)", re.IGNORECASE
)
_PERCENT = re.compile(r"(\d{1,3}(?:\.\d{1,3})?)\s*%")
_MIB_PER_UNIT = {"kib": 1 / 1024, "mib": 1, "mb": 1, "gib": 1024, "gb": 1024}
_SEPARATOR = frozenset("|+-= ")

_LOST = re.compile(r"Unable to determine the device handle for GPU\s*(.*)", re.IGNORECASE)
_INFOROM = re.compile(rf"infoROM is corrupted at gpu\s*({_BUS_TEXT})", re.IGNORECASE)
_NODE_ERROR = re.compile(
    r"No devices were found|NVIDIA-SMI has failed\b.*|Failed to initialize NVML\b.*",
    re.IGNORECASE,
)
_INFOROM_ERROR = "Corrupted infoROM (nvidia-smi warning)"

#: Column names per (row of a GPU block, cell): positional; the last name takes the rest.
_COLUMNS: dict[tuple[int, int], tuple[str, ...]] = {
    (0, 1): ("bus", "display"),
    (0, 2): ("ecc",),
    (1, 0): ("fan", "temperature", "perf", "power"),
    (1, 1): ("memory",),
    (1, 2): ("utilization", "compute mode"),
    (2, 0): ("extra",),
    (2, 1): ("extra",),
    (2, 2): ("mig mode",),
}


def looks_like_smi_table(text: str) -> bool:
    """True for the NVIDIA-SMI header or a GPU row with a bus id: cheap, to pick a parser."""
    return _HEADER.search(text) is not None or _GPU_ROW_SHAPE.search(text) is not None


# --------------------------------------------------------------------------- cells


@dataclass(frozen=True, slots=True)
class _Cell:
    """A cell's whitespace tokens, each error phrase one token, and the phrases."""

    text: str  # the cell with each error phrase replaced by a placeholder
    tokens: tuple[str, ...]
    messages: tuple[str, ...]  # index k is the phrase behind placeholder k

    def errors_in(self, token: str) -> list[str]:
        parts = token.split(_MARK)
        return [self.messages[int(parts[i])] for i in range(1, len(parts), 2)]


def _cell(raw: str) -> _Cell:
    messages: list[str] = []

    def mark(m: re.Match[str]) -> str:
        text = " ".join(m.group(0).strip("[]").split())
        messages.append(text)
        return f"{_MARK}{len(messages) - 1}{_MARK}"

    text = _ERROR_PHRASE.sub(mark, raw)
    return _Cell(text, tuple(text.split()), tuple(messages))


def _is_error(token: str) -> bool:
    return _MARK in token


def _plain(tokens: Sequence[str]) -> str | None:
    """The tokens as one value; None if any is an error placeholder."""
    if not tokens or any(_is_error(t) for t in tokens):
        return None
    return " ".join(tokens)


@dataclass(slots=True)
class _Errors:
    """Messages in first-seen order, each with its columns in first-seen order."""

    by_key: dict[str, tuple[str, list[str]]] = field(default_factory=dict)

    def add(self, message: str, column: str) -> None:
        _, columns = self.by_key.setdefault(message.lower(), (message, []))
        if column not in columns:
            columns.append(column)

    def scan(self, cell: _Cell, names: Sequence[str]) -> None:
        for i, token in enumerate(cell.tokens):
            for message in cell.errors_in(token):
                self.add(message, names[min(i, len(names) - 1)])

    def entries(self) -> tuple[str, ...]:
        return tuple(f"{msg} ({', '.join(cols)})" for msg, cols in self.by_key.values())


# --------------------------------------------------------------------------- values


def _bus_id(raw: str) -> str:
    """Normalised like ``-q`` captures; a bus id without a domain gets domain 0."""
    if len(raw.split(":")) == 2:
        raw = "0:" + raw
    return normalise_pci_bus_id(raw) or raw.lower()


def _memory(raw: str) -> tuple[Reading[int], Reading[int]]:
    if _squash(raw) in _NOT_SUPPORTED:
        return NOT_SUPPORTED, NOT_SUPPORTED
    m = _MEMORY.search(raw)
    if m is None or _ERROR_PHRASE.search(raw):
        return None, None
    used = int(int(m[1]) * _MIB_PER_UNIT[m[2].lower()])
    total = int(int(m[3]) * _MIB_PER_UNIT[m[4].lower()])
    return used, total


def _percent(token: str | None) -> Reading[float]:
    if token is None:
        return None
    if token.lower() in _NOT_SUPPORTED:
        return NOT_SUPPORTED
    m = _PERCENT.fullmatch(token)
    return float(m[1]) if m else None


def _ecc(token: str | None) -> tuple[Reading[bool], EccCounts]:
    """The Volatile Uncorr. ECC cell: a count only when ECC is on; "On" under MIG."""
    if token is None:
        return None, EccCounts()
    low = token.lower()
    if low in _NOT_SUPPORTED:
        return NOT_SUPPORTED, EccCounts(volatile_uncorrected=NOT_SUPPORTED)
    if low == "off":
        return False, EccCounts()
    if low == "on":
        return True, EccCounts()
    if token.isdigit():
        return True, EccCounts(volatile_uncorrected=int(token))
    return None, EccCounts()


def _mig(token: str | None) -> Reading[bool]:
    low = (token or "").lower()
    if low in _NOT_SUPPORTED:
        return NOT_SUPPORTED
    return {"enabled": True, "disabled": False}.get(low)


# --------------------------------------------------------------------------- GPU rows


def _gpu_row_start(cells: Sequence[str]) -> bool:
    """The first row of a GPU: index and name, then a bus id (or an error) first in cell 2."""
    if len(cells) != 3 or _INDEX.fullmatch(cells[0]) is None:
        return False
    first = cells[1].split()
    if not first:
        return False
    return _BUS.fullmatch(first[0]) is not None or _ERROR_PHRASE.match(cells[1].strip()) is not None


def _gpu(rows: Sequence[Sequence[str]]) -> Gpu:
    """One GPU from its two or three box rows (each three cells)."""
    errors = _Errors()
    head = _cell(rows[0][0])
    index = int(head.tokens[0])
    rest = list(head.tokens[1:])
    if len(rest) >= 2 and (rest[-1].lower() in _PERSISTENCE or _is_error(rest[-1])):
        persistence: list[str] = [rest.pop()]
    elif len(rest) == 1 and rest[0].lower() in _PERSISTENCE:
        persistence, rest = rest, []
    else:
        persistence = []
    errors.scan(_Cell("", tuple(rest), head.messages), ("name",))
    errors.scan(_Cell("", tuple(persistence), head.messages), ("persistence",))
    name = _plain(rest)
    if name is not None:  # as printed, inner blanks kept
        m = _INDEX.fullmatch(head.text)
        assert m is not None
        printed = m[2]
        name = printed[: printed.rfind(persistence[0])].rstrip() if persistence else printed

    cells = {(r, c): _cell(rows[r][c]) for r in range(len(rows)) for c in range(3)}
    for (r, c), cell in cells.items():
        if (r, c) != (0, 0):
            errors.scan(cell, _COLUMNS[(r, c)])

    def token(r: int, c: int, i: int) -> str | None:
        cell = cells.get((r, c))
        if cell is None or len(cell.tokens) <= i or _is_error(cell.tokens[i]):
            return None
        return cell.tokens[i]

    bus = token(0, 1, 0)
    used, total = _memory(rows[1][1]) if len(rows) > 1 else (None, None)
    ecc_enabled, ecc = _ecc(token(0, 2, 0))
    return Gpu(
        index=index,
        name=name,
        pci_bus_id=_bus_id(bus) if bus is not None else None,
        memory_used_mb=used,
        memory_total_mb=total,
        ecc_enabled=ecc_enabled,
        ecc=ecc,
        utilization_gpu_pct=_percent(token(1, 2, 0)),
        mig_enabled=_mig(token(2, 2, 0)) if len(rows) > 2 else None,
        errors=errors.entries(),
    )


# --------------------------------------------------------------------------- text


@dataclass(slots=True)
class _Read:
    """What the lines gave, before the lines outside the box are attached to GPUs."""

    gpus: dict[int, Gpu] = field(default_factory=dict)
    driver: Reading[str] = None
    cuda: Reading[str] = None
    events: list[tuple[str | None, str]] = field(default_factory=list)  # (bus, error)
    node_errors: list[str] = field(default_factory=list)


def _version(pattern: re.Pattern[str], line: str) -> Reading[str]:
    m = pattern.search(line)
    if m is None:
        return None
    value = m[1].strip("|")
    return NOT_SUPPORTED if value.lower() in _NOT_SUPPORTED else value or None


def _outside(line: str, number: int, out: _Read) -> None:
    """A line outside the box: a lost GPU, an infoROM warning, a node-level failure."""
    lost = _LOST.search(line)
    if lost is not None:
        m = _BUS.search(lost[1])
        reason = lost[1][m.end() :] if m else lost[1].partition(":")[2]
        reason = reason.strip(" :") or "no reason given"
        out.events.append((_bus_id(m[0]) if m else None, f"{reason} (device handle unavailable)"))
        return
    inforom = _INFOROM.search(line)
    if inforom is not None:
        out.events.append((_bus_id(inforom[1]), _INFOROM_ERROR))
        return
    node = _NODE_ERROR.search(line)
    if node is not None:
        out.node_errors.append(f"{node[0].strip()} (line {number})")


def _read_lines(text: str) -> _Read:
    out = _Read()
    block: list[list[str]] = []
    in_gpus = True  # False inside the Processes / MIG devices boxes

    def close() -> None:
        if block:
            gpu = _gpu(block)
            out.gpus[gpu.index] = gpu
            block.clear()

    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip().lstrip("\ufeff")
        if not line:
            continue
        if not line.startswith(("|", "+")):
            close()
            _outside(line, number, out)
            continue
        if set(line) <= _SEPARATOR:
            close()
            continue
        inner = line.strip("|").strip()
        if _HEADER.match(line):
            close()
            in_gpus = True
            out.driver, out.cuda = _version(_DRIVER, line), _version(_CUDA, line)
            continue
        if inner.startswith(("Processes:", "MIG devices:")):
            close()
            in_gpus = False
            continue
        if not in_gpus or not line.startswith("|"):
            continue
        cells = line.strip().removeprefix("|").removesuffix("|").split("|")
        if _gpu_row_start(cells):
            close()
            block.append(cells)
        elif block and len(block) < 3 and len(cells) == 3:
            block.append(cells)
        else:
            close()
    close()
    return out


def _attach(gpus: dict[int, Gpu], bus: str | None, error: str) -> None:
    """Add ``error`` to the GPU at ``bus``, or to a new GPU after every index so far."""
    key = bus_key(bus)
    for index, gpu in gpus.items():
        if key is not None and bus_key(gpu.pci_bus_id) == key:
            if error not in gpu.errors:
                gpus[index] = _with_error(gpu, error)
            return
    index = max(gpus, default=-1) + 1
    gpus[index] = Gpu(index=index, pci_bus_id=bus, errors=(error,))


def _with_error(gpu: Gpu, error: str) -> Gpu:
    return replace(gpu, errors=(*gpu.errors, error))


def parse_smi_table(text: str, node: str = "") -> NodeSnapshot:
    """Read a plain ``nvidia-smi`` table (whole, or some of its GPU rows) into a snapshot."""
    out = _read_lines(text)
    if not out.gpus and not out.events and not out.node_errors:
        lines = text.splitlines()
        number = next((i for i, ln in enumerate(lines, 1) if ln.strip()), 1)
        first = lines[number - 1].strip()[:40] if lines else ""
        raise CaptureError(
            f"line {number}: {first!r}: no GPU row (`|   0  <name> ... | <bus id> ...`) and "
            f"no nvidia-smi error line: not the plain nvidia-smi table"
        )
    gpus = dict(out.gpus)
    for bus, error in out.events:
        _attach(gpus, bus, error)
    return NodeSnapshot(
        node=node,
        gpus=tuple(gpus[i] for i in sorted(gpus)),
        driver_version=out.driver,
        cuda_version=out.cuda,
        source=SOURCE,
        errors=tuple(out.node_errors),
        attached_gpus=None,
    )
