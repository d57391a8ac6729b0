"""``nvidia-smi topo -m`` and ``nvidia-smi topo -p2p <caps>`` matrices, read back as values.

Two matrix kinds share one layout: a header naming the devices (``GPU0 GPU1 … NIC0 …``,
then ``CPU Affinity``, ``NUMA Affinity``, ``GPU NUMA ID`` on a connection matrix), one row
per device, a legend. A *connection* matrix (``topo -m``) has cells ``X`` (self), ``NV<n>``
(a bonded set of n NVLinks), ``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS`` (``SOC`` on old
drivers); a *p2p* matrix (``topo -p2p r|w|a|n|p``) has ``X``, ``OK``, ``CNS``, ``GNS``,
``TNS``, ``NS``, ``U``. Only GPU-to-GPU cells are kept; NIC rows and columns are named in
``nics`` and otherwise ignored; CPU/NUMA affinity columns are not read.

What is damaged and what is unusable (decided against the captures in
``data/gpu/topo``):

* Kept, with a note in ``TopoMatrix.problems``: a GPU cell that is missing (short row) or
  is not a matrix token (a truncated affinity field slid into a device column), a diagonal
  cell other than ``X``, an off-diagonal ``X``, a GPU column without a row, a row naming a
  GPU the header lacks, a connection cell that disagrees with its mirror cell. The matrix
  is then partial: a check must treat a pair missing from ``links`` as not read, and should
  look at ``problems`` before trusting the rest.
* ``CaptureError``: no header row, a header naming one device twice, no GPU row at all,
  a GPU row given twice with different cells, a matrix mixing P2P-status and connection
  cells. These leave nothing trustworthy to read.

A paste whose NIC columns, affinity fields or legend were cut (as
``llmaction_h800x8_nv8_nic_topo_pastedamaged.txt``) still yields its full GPU matrix: the
header there names only the GPU columns, the NIC rows still name the NICs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from slurm_ml.health.replay.errors import CaptureError

__all__ = ["CONNECTION_TOKENS", "P2P_TOKENS", "TopoMatrix", "nvlink_count", "parse_topo_matrix"]

#: Cells of a ``topo -m`` matrix besides ``X`` and ``NV<n>``.
CONNECTION_TOKENS: frozenset[str] = frozenset({"SYS", "NODE", "PHB", "PXB", "PIX", "SOC"})
#: Cells of a ``topo -p2p`` matrix besides ``X``.
P2P_TOKENS: frozenset[str] = frozenset({"OK", "CNS", "GNS", "TNS", "NS", "U"})

_DEVICE = re.compile(r"(?:GPU|NIC)\d{1,4}|mlx\d{1,3}_\d{1,4}")
_GPU = re.compile(r"GPU(\d{1,4})")
_NVLINK = re.compile(r"NV(\d{1,3})")
#: Any matrix cell: X, NV<n>, or a short upper-case word (a token a newer driver may add).
_CELL = re.compile(r"X|NV\d{1,3}|[A-Z][A-Z0-9]{0,7}")
#: Words that start the non-device header columns: "CPU Affinity", "NUMA Affinity",
#: "GPU NUMA ID".
_HEADER_TAIL = frozenset({"CPU", "NUMA", "GPU"})
_P2P_LEGEND = ("Status Ok", "Chipset not supported", "GPU not supported")


@dataclass(frozen=True, slots=True)
class TopoMatrix:
    """The GPU-to-GPU part of one topology matrix."""

    #: GPU column names in header order, e.g. ("GPU0", …, "GPU7").
    gpus: tuple[str, ...]
    #: (row GPU index, column GPU index) → cell, diagonal excluded: "NV12", "SYS", "OK", …
    links: dict[tuple[int, int], str]
    #: "connection" (``topo -m``) or "p2p" (``topo -p2p``).
    kind: str
    #: NIC names from header columns and rows, in order of first appearance.
    nics: tuple[str, ...] = ()
    #: What was inconsistent and left out; empty for a clean capture.
    problems: tuple[str, ...] = ()


def nvlink_count(cell: str) -> int | None:
    """``"NV12"`` → 12; ``None`` for any cell that is not an NVLink bond."""
    match = _NVLINK.fullmatch(cell.strip())
    return int(match.group(1)) if match else None


def _gpu_index(name: str) -> int | None:
    match = _GPU.fullmatch(name)
    return int(match.group(1)) if match else None


def _header_columns(tokens: list[str]) -> list[str] | None:
    """Device columns when ``tokens`` is a header row, else None."""
    if not tokens or _gpu_index(tokens[0]) is None:
        return None
    if len(tokens) > 1 and not _DEVICE.fullmatch(tokens[1]) and tokens[1] not in _HEADER_TAIL:
        return None  # a data row: its second token is a cell
    columns: list[str] = []
    for token in tokens:
        if not _DEVICE.fullmatch(token):
            break
        columns.append(token)
    return columns


def _cell_kind(cell: str) -> str | None:
    if cell in P2P_TOKENS:
        return "p2p"
    if cell in CONNECTION_TOKENS or _NVLINK.fullmatch(cell):
        return "connection"
    return None


def parse_topo_matrix(text: str) -> TopoMatrix:
    """Read the first matrix in ``text``; raise :class:`CaptureError` when it is unusable."""
    lines = text.splitlines()
    header_at: int | None = None
    columns: list[str] = []
    for number, line in enumerate(lines):
        found = _header_columns(line.split())
        if found is not None:
            header_at, columns = number, found
            break
    if header_at is None:
        raise CaptureError("no matrix header row (a line starting with GPU0 GPU1 …) found")
    if len(set(columns)) != len(columns):
        raise CaptureError(f"line {header_at + 1}: header names a device twice: {columns}")

    gpu_columns = [(k, name) for k, name in enumerate(columns) if _gpu_index(name) is not None]
    gpus = tuple(name for _, name in gpu_columns)
    if len({_gpu_index(name) for name in gpus}) != len(gpus):
        raise CaptureError(f"line {header_at + 1}: header names one GPU index twice: {gpus}")
    nics: list[str] = [name for name in columns if _gpu_index(name) is None]
    problems: list[str] = []
    rows: dict[str, tuple[str | None, ...]] = {}

    for number in range(header_at + 1, len(lines)):
        tokens = lines[number].split()
        if not tokens or not _DEVICE.fullmatch(tokens[0]):
            continue
        if _header_columns(tokens) is not None:
            break  # a second matrix starts: read only the first
        name = tokens[0]
        if _gpu_index(name) is None:
            if name not in nics:
                nics.append(name)
            continue
        if name not in gpus:
            problems.append(f"line {number + 1}: row {name} has no column in the header")
            continue
        cells: list[str | None] = []
        for k, col in gpu_columns:
            cell = tokens[1 + k] if 1 + k < len(tokens) else None
            if cell is None:
                problems.append(f"line {number + 1}: row {name} has no cell for {col}")
            elif not _CELL.fullmatch(cell):
                problems.append(f"line {number + 1}: row {name}, column {col}: {cell!r}")
                cell = None
            cells.append(cell)
        row = tuple(cells)
        if name in rows:
            if rows[name] != row:
                raise CaptureError(f"line {number + 1}: row {name} given twice, differently")
            continue
        rows[name] = row

    if not rows:
        raise CaptureError(f"header at line {header_at + 1} is followed by no GPU row")

    links: dict[tuple[int, int], str] = {}
    kinds: set[str] = set()
    for name in gpus:
        if name not in rows:
            problems.append(f"no row for {name}")
            continue
        i = _gpu_index(name)
        assert i is not None
        for (_, col), cell in zip(gpu_columns, rows[name], strict=True):
            j = _gpu_index(col)
            assert j is not None
            if cell is None:
                continue
            if i == j:
                if cell != "X":
                    problems.append(f"{name}: diagonal cell is {cell!r}, not 'X'")
                continue
            if cell == "X":
                problems.append(f"{name}, column {col}: 'X' off the diagonal")
                continue
            links[(i, j)] = cell
            kind = _cell_kind(cell)
            if kind is not None:
                kinds.add(kind)

    if len(kinds) > 1:
        raise CaptureError("matrix mixes P2P status cells (OK, CNS, …) and connection cells")
    if kinds:
        (kind,) = kinds
    else:
        kind = "p2p" if any(word in text for word in _P2P_LEGEND) else "connection"

    if kind == "connection":
        for (i, j), cell in sorted(links.items()):
            mirror = links.get((j, i))
            if i < j and mirror is not None and mirror != cell:
                problems.append(f"GPU{i}-GPU{j} is {cell!r} but GPU{j}-GPU{i} is {mirror!r}")

    return TopoMatrix(gpus=gpus, links=links, kind=kind, nics=tuple(nics), problems=tuple(problems))
