"""ReplayProbe: a ``GpuProbe`` that reads a node back from captured command output.

``ReplayProbe.from_dir(DIR)`` reads every file in ``DIR`` (not recursively; names that
start with ``.`` and sub-directories are skipped) and tells each file's kind from its
content, never its name:

====================================  ====================================================
kind                                  recognised by / what it gives the snapshot
====================================  ====================================================
``nvidia-smi -q`` (text) / ``-q -x``  ``NVSMI LOG`` banner, a ``GPU 00000000:07:00.0``
                                      section, or XML: the GPUs, driver, ``attached_gpus``
``nvidia-smi topo -m``                a ``GPU0 GPU1 …`` header row: ``topology`` (GPU-GPU
                                      cells). A ``topo -p2p`` matrix is read, not used
``nvidia-smi nvlink -s``              ``GPU n: … (UUID: …)`` + ``Link k: 25 GB/s`` /
                                      ``<inactive>``: ``Gpu.nvlinks`` by GPU index
``nvidia-smi nvlink -e`` / ``-gt``    ``Link k: <counter>: <n>``: error counters filled
                                      into the links ``nvlink -s`` lists
``nvidia-smi nvlink -c``              ``Link k, <capability>: true|false``: read, not used
                                      (H800 prints "Link is supported: false" on healthy,
                                      active links, so it says nothing about health)
kernel log (dmesg, journal)           ``NVRM: Xid``/``SXid`` lines, or mostly kernel-log
                                      lines: ``xids`` (SXids have no place in a snapshot)
``dcgmi diag`` (table or ``-j``)      its frame, section lines or result rows, or the JSON
                                      top key: ``dcgm_diag`` (``replay.dcgmi_diag``)
blank file                            nothing (what ``nvlink -s`` prints without NVLink)
====================================  ====================================================

Anything else, an unreadable or binary file, a damaged capture, or two captures that
contradict each other raise :class:`CaptureError` naming the file.

Merging: the ``nvidia-smi -q`` capture (at most one) gives the GPUs, indexed in capture
order. NVLink status and topology are attached by GPU index; a GPU they name that the
``-q`` capture lacks is added as a GPU with nothing else read, unless the ``-q`` capture
is complete (its ``Attached GPUs`` equals the GPUs it lists), in which case the captures
are from different nodes: ``CaptureError``. So is a UUID in an ``nvlink`` header that
differs from the ``-q`` capture's. Without a ``-q`` capture the GPUs are those the other
captures name. Readings no capture holds stay ``None`` (not read): the checks report them
as ``probe.missing``, never as a fault. ``source`` is ``"replay:<file>,<file>,…"``.

The parsing and merging (:func:`classify`, :func:`build_snapshot`) are pure; only
:meth:`ReplayProbe.from_dir` touches the file system.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from slurm_ml.health.replay.dcgmi_diag import looks_like_dcgmi_diag, parse_dcgmi_diag
from slurm_ml.health.replay.dcgmi_nvlink import (
    looks_like_dcgmi_link_status,
    parse_dcgmi_link_status,
)
from slurm_ml.health.replay.errors import CaptureError
from slurm_ml.health.replay.kernel import (
    looks_like_fabricmanager_log,
    parse_fabricmanager_log,
    parse_kernel_events,
)
from slurm_ml.health.replay.nvlink import (
    NvLinkCounters,
    merge_links,
    parse_nvlink_capabilities,
    parse_nvlink_counters,
    parse_nvlink_status,
)
from slurm_ml.health.replay.smi_q import parse_smi_q
from slurm_ml.health.replay.smi_table import looks_like_smi_table, parse_smi_table
from slurm_ml.health.replay.topo import parse_topo_matrix
from slurm_ml.health.replay.xid import parse_xids
from slurm_ml.health.snapshot import (
    DcgmDiag,
    Gpu,
    KernelEvent,
    NodeSnapshot,
    NvLink,
    XidEvent,
    bus_key,
)

__all__ = [
    "MAX_FILE_BYTES",
    "CaptureKind",
    "ReplayProbe",
    "build_snapshot",
    "classify",
]

CaptureKind = Literal[
    "dcgmi_diag",
    "smi_q",
    "smi_table",
    "dcgmi_nvlink",
    "fabricmanager",
    "topo",
    "nvlink_status",
    "nvlink_counters",
    "nvlink_capabilities",
    "kernel_log",
    "blank",
]

#: A capture larger than this is refused (a runaway log, or not a capture at all).
MAX_FILE_BYTES: Final = 64 * 1024 * 1024

_SMI_BANNER = re.compile(r"^=+\s*NVSMI LOG\s*=+\s*$", re.MULTILINE)
_SMI_GPU = re.compile(r"^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]\s*$",
                      re.MULTILINE)
_SMI_TOP = re.compile(r"^Attached GPUs +: ", re.MULTILINE)
_KERNEL_EVENT = re.compile(r"NVRM: |SXid \(|\bnvidia: probe of |\bnvidia [0-9a-fA-F]{4}:"
                           r"[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]: ")
#: One ``nvidia-smi -q`` section pasted on its own: its title, then padded "key : value".
_SMI_SECTION = re.compile(
    r"^\s*(?:ECC Errors|Retired Pages|Remapped Rows|Fabric|GPU Reset Status|PCI|GPU Link Info"
    r"|Inforom Version|Double Bit|Single Bit|Aggregate|Volatile|Clocks Event Reasons"
    r"|Clocks Throttle Reasons|Temperature|Power Readings|Product Name +: .*)\s*$",
    re.MULTILINE)
_SMI_KV = re.compile(r"^ *\S[^:\n]*? {2,}: ", re.MULTILINE)
#: What nvidia-smi prints instead of output when it cannot reach a GPU or the driver.
_SMI_MESSAGE = re.compile(r"Unable to determine the device handle|^\s*No devices were found"
                          r"|infoROM is corrupted at gpu|Failed to initialize NVML"
                          r"|NVIDIA-SMI has failed", re.MULTILINE | re.IGNORECASE)
_TOPO_HEADER = re.compile(r"^[ \t]*GPU0[ \t]+(?:GPU1|NIC0|mlx\d+_\d+|CPU|NUMA)\b", re.MULTILINE)
_NVLINK_HEADER = re.compile(r"^GPU (\d{1,4}): ?(.*?)\s*$", re.MULTILINE)
_NVLINK_UUID = re.compile(r"^(.*?)\s*\(UUID: ?([^()]+)\)$")
_NVLINK_STATUS = re.compile(
    r"^\s*Link \d{1,3}: *(?:\d+(?:\.\d+)? *[GM]B/s|<inactive>)\s*$|all links are inactive",
    re.MULTILINE | re.IGNORECASE,
)
_NVLINK_CAP = re.compile(r"^\s*Link \d{1,3}, [^:\n]+: *(?:true|false)\s*$",
                         re.MULTILINE | re.IGNORECASE)
_NVLINK_COUNTER = re.compile(r"^\s*Link \d{1,3}: *[^:\n]+: *\S+", re.MULTILINE)
#: The start of a kernel-log line: ``[  12.3]``, ``[Sun Feb 23 …]`` (dmesg -T),
#: ``kern  :warn  :`` (dmesg --decode), an ISO time (dmesg --time-format iso, journald),
#: ``Feb 23 16:24:18 host kernel:`` (syslog), ``kernel:`` (journalctl -k -o cat).
_KERNEL_LINE = re.compile(
    r"^\s*(?:\[\s*\+?\d+\.\d+\]|\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) |kern\s*:|"
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}\S*\s|"
    r"[A-Z][a-z]{2} +\d{1,2} \d{2}:\d{2}:\d{2} \S+ kernel:|kernel:)"
)


# ----------------------------------------------------------------------- classify


def classify(text: str) -> CaptureKind | None:
    """The kind of capture ``text`` is, None when it is none ReplayProbe reads."""
    body = text.lstrip("\ufeff \t\r\n")
    if not body.strip():
        return "blank"
    if looks_like_dcgmi_diag(text):
        return "dcgmi_diag"
    if body.startswith("<"):
        return "smi_q"
    if _KERNEL_EVENT.search(text):
        return "kernel_log"
    if _SMI_BANNER.search(text) or _SMI_GPU.search(text) or _SMI_TOP.search(text):
        return "smi_q"
    if looks_like_smi_table(text) or _SMI_MESSAGE.search(text):
        return "smi_table"
    if looks_like_dcgmi_link_status(text):
        return "dcgmi_nvlink"
    if _TOPO_HEADER.search(text):
        return "topo"
    if _SMI_SECTION.search(text) and len(_SMI_KV.findall(text)) >= 2:
        return "smi_q"
    if _NVLINK_HEADER.search(text):
        if _NVLINK_STATUS.search(text):
            return "nvlink_status"
        if _NVLINK_CAP.search(text):
            return "nvlink_capabilities"
        if _NVLINK_COUNTER.search(text):
            return "nvlink_counters"
    lines = [line for line in text.splitlines() if line.strip()]
    kernel = sum(1 for line in lines if _KERNEL_LINE.match(line))
    if lines and 2 * kernel >= len(lines):
        return "kernel_log"
    if looks_like_fabricmanager_log(text):
        return "fabricmanager"
    return None


def _unknown(name: str, text: str) -> CaptureError:
    return CaptureError(
        f"{name}: not a capture ReplayProbe reads (it reads nvidia-smi -q [-x], nvidia-smi "
        "topo -m, nvidia-smi nvlink -s/-e/-gt/-c, dcgmi diag [-j], dcgmi nvlink -s and "
        "kernel logs)"
    )


# ----------------------------------------------------------------------- merge


@dataclass
class _Parts:
    smi: tuple[str, NodeSnapshot] | None = None
    tables: list[tuple[str, NodeSnapshot]] = field(default_factory=list)
    topo: tuple[str, dict[tuple[int, int], str], tuple[int, ...]] | None = None
    status: dict[int, tuple[str, tuple[NvLink, ...]]] = field(default_factory=dict)
    counters: dict[int, dict[int, tuple[str, NvLinkCounters]]] = field(default_factory=dict)
    headers: dict[int, tuple[str, str | None, str | None]] = field(default_factory=dict)
    xids: list[XidEvent] | None = None
    kernel: list[KernelEvent] | None = None
    diag: tuple[str, DcgmDiag] | None = None


def _headers(name: str, text: str, parts: _Parts) -> None:
    """GPU name and UUID from ``GPU n: <name> (UUID: GPU-…)`` headers of an nvlink file."""
    for m in _NVLINK_HEADER.finditer(text):
        index, rest = int(m.group(1)), m.group(2)
        u = _NVLINK_UUID.match(rest)
        gpu_name, uuid = (u.group(1) or None, u.group(2).strip()) if u else (rest or None, None)
        seen = parts.headers.get(index)
        if seen is not None and uuid is not None and seen[2] is not None and seen[2] != uuid:
            raise CaptureError(f"{name}: GPU {index} has UUID {uuid}, but {seen[0]} says "
                               f"{seen[2]}: captures of different nodes")
        if seen is None or seen[2] is None:
            parts.headers[index] = (name, gpu_name, uuid)


def _add(name: str, text: str, kind: CaptureKind, parts: _Parts) -> None:
    if kind == "dcgmi_diag":
        if parts.diag is not None:
            raise CaptureError(f"{name}: a second dcgmi diag run beside {parts.diag[0]}; "
                               f"one run per node is judged")
        parts.diag = (name, parse_dcgmi_diag(text))
    elif kind == "smi_q":
        if parts.smi is not None:
            raise CaptureError(f"{name}: a second nvidia-smi -q capture beside "
                               f"{parts.smi[0]}; one node's captures go in one directory")
        parts.smi = (name, parse_smi_q(text))
    elif kind == "smi_table":
        parts.tables.append((name, parse_smi_table(text)))
    elif kind == "fabricmanager":
        parts.kernel = (parts.kernel or []) + list(parse_fabricmanager_log(text))
    elif kind == "dcgmi_nvlink":
        for gpu, links in parse_dcgmi_link_status(text).items():
            seen = parts.status.get(gpu)
            if seen is not None and seen[1] != links:
                raise CaptureError(f"{name}: GPU {gpu}'s NVLink status differs from {seen[0]}'s")
            parts.status[gpu] = (name, links)
    elif kind == "topo":
        matrix = parse_topo_matrix(text)
        if matrix.kind != "connection":
            return  # topo -p2p: P2P support, not the link layout the checks compare
        if parts.topo is not None:
            raise CaptureError(f"{name}: a second topo -m matrix beside {parts.topo[0]}")
        indices = tuple(int(g.removeprefix("GPU")) for g in matrix.gpus)
        parts.topo = (name, dict(matrix.links), indices)
    elif kind == "nvlink_status":
        _headers(name, text, parts)
        for gpu, links in parse_nvlink_status(text).items():
            seen = parts.status.get(gpu)
            if seen is not None and seen[1] != links:
                raise CaptureError(f"{name}: GPU {gpu}'s NVLink status differs from {seen[0]}'s")
            parts.status[gpu] = (name, links)
    elif kind == "nvlink_counters":
        _headers(name, text, parts)
        for gpu, per_link in parse_nvlink_counters(text).items():
            mine = parts.counters.setdefault(gpu, {})
            for k, c in per_link.items():
                seen_c = mine.get(k)
                if seen_c is None:
                    mine[k] = (name, c)
                    continue
                merged = _merge_counters(seen_c[1], c)
                if merged is None:
                    raise CaptureError(f"{name}: GPU {gpu} link {k} counters differ from "
                                       f"{seen_c[0]}'s")
                mine[k] = (seen_c[0], merged)
    elif kind == "nvlink_capabilities":
        _headers(name, text, parts)
        parse_nvlink_capabilities(text)  # validated; says nothing about health
    elif kind == "kernel_log":
        parts.xids = (parts.xids or []) + list(parse_xids(text))
        parts.kernel = (parts.kernel or []) + list(parse_kernel_events(text))


def _merge_counters(a: NvLinkCounters, b: NvLinkCounters) -> NvLinkCounters | None:
    """One link's counters from two captures (``-e`` and ``-gt r``): fields set in both
    must agree; None when they do not."""
    changes: dict[str, object] = {}
    for f in dataclasses.fields(NvLinkCounters):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name == "other":
            both = set(x) & set(y)
            if any(x[k] != y[k] for k in both):
                return None
            changes["other"] = {**x, **y}
        elif x is None:
            changes[f.name] = y
        elif y is not None and x != y:
            return None
    return dataclasses.replace(a, **changes)  # type: ignore[arg-type]


def _with_tables(smi: tuple[str, NodeSnapshot] | None,
                 tables: list[tuple[str, NodeSnapshot]]) -> tuple[str, NodeSnapshot]:
    """The ``-q`` capture with what plain tables add (their GPUs' errors, by bus id, and
    node errors); without a ``-q`` capture, the first table is the base. A table GPU the
    base lacks is added at the table's index."""
    base_name, base = smi if smi is not None else tables[0]
    rest = tables if smi is not None else tables[1:]
    gpus = list(base.gpus)
    errors = list(base.errors)
    for _, table in rest:
        errors += [e for e in table.errors if e not in errors]
        for tg in table.gpus:
            key = bus_key(tg.pci_bus_id)
            at = next((i for i, g in enumerate(gpus)
                       if key is not None and bus_key(g.pci_bus_id) == key), None)
            if at is None:
                at = next((i for i, g in enumerate(gpus) if key is None
                           and g.index == tg.index), None)
            if at is None:
                gpus.append(tg)
                continue
            extra = tuple(e for e in tg.errors if e not in gpus[at].errors)
            gpus[at] = dataclasses.replace(gpus[at], errors=gpus[at].errors + extra)
    return base_name, dataclasses.replace(base, gpus=tuple(sorted(gpus, key=lambda g: g.index)),
                                          errors=tuple(errors))


def _known_count(smi: NodeSnapshot | None) -> int | None:
    """How many GPUs the ``-q`` capture says the node has; None without one."""
    if smi is None:
        return None
    attached = smi.attached_gpus
    if isinstance(attached, int) and not isinstance(attached, bool):
        return max(attached, len(smi.gpus))
    return len(smi.gpus)


def build_snapshot(captures: Sequence[tuple[str, str]], node: str = "") -> NodeSnapshot:
    """Merge named captures (``(file name, text)``) into one snapshot. Pure."""
    parts = _Parts()
    names: list[str] = []
    for name, text in captures:
        kind = classify(text)
        if kind is None:
            raise _unknown(name, text)
        try:
            _add(name, text, kind, parts)
        except CaptureError as exc:
            msg = str(exc)
            raise CaptureError(msg if msg.startswith(f"{name}:") else f"{name}: {msg}") from exc
        names.append(name)

    from_table = parts.smi is None and bool(parts.tables)
    if parts.tables:
        parts.smi = _with_tables(parts.smi, parts.tables)
    smi_name, smi = parts.smi if parts.smi is not None else ("", None)
    # A plain table or an error line does not say how many GPUs the node has.
    known = None if from_table else _known_count(smi)
    gpus: dict[int, Gpu] = {g.index: g for g in smi.gpus} if smi is not None else {}

    def place(index: int, source: str) -> Gpu:
        if index in gpus:
            return gpus[index]
        if smi is not None and known is not None and index >= known:
            raise CaptureError(f"{source}: names GPU {index}, but {smi_name} shows {known} "
                               f"GPU(s): captures of different nodes")
        head = parts.headers.get(index)
        gpus[index] = Gpu(index=index, name=head[1] if head else None,
                          uuid=head[2] if head else None)
        return gpus[index]

    for index, (source, _, uuid) in sorted(parts.headers.items()):
        gpu = place(index, source)
        if uuid is not None and isinstance(gpu.uuid, str) and gpu.uuid != uuid:
            raise CaptureError(f"{source}: GPU {index} has UUID {uuid}, but {smi_name} says "
                               f"{gpu.uuid}: captures of different nodes or GPU order")
    status = {gpu: links for gpu, (_, links) in parts.status.items()}
    counters = {gpu: {k: c for k, (_, c) in per.items()} for gpu, per in parts.counters.items()}
    for index, links in merge_links(status, counters).items():
        gpus[index] = dataclasses.replace(place(index, parts.status[index][0]), nvlinks=links)
    topology: dict[tuple[int, int], str] | None = None
    if parts.topo is not None:
        topo_name, topology, indices = parts.topo
        for index in indices:
            place(index, topo_name)

    if parts.diag is not None:
        diag_name, diag = parts.diag
        for test in diag.tests:
            for index in {g for g, _ in test.gpus} | {m.gpu for m in test.messages
                                                      if m.gpu is not None}:
                place(index, diag_name)
    base = smi if smi is not None else NodeSnapshot(node=node, gpus=())
    if smi is None and parts.diag is not None and parts.diag[1].device_ids:
        # dcgmi diag lists the device id of every GPU it ran on: the driver's count
        base = dataclasses.replace(base, attached_gpus=len(parts.diag[1].device_ids))
    return dataclasses.replace(
        base,
        node=node,
        gpus=tuple(gpus[i] for i in sorted(gpus)),
        topology=topology,
        xids=None if parts.xids is None else tuple(parts.xids),
        kernel_events=None if parts.kernel is None else tuple(parts.kernel),
        dcgm_diag=None if parts.diag is None else parts.diag[1],
        source="replay:" + ",".join(names),
    )


# ----------------------------------------------------------------------- the probe


class ReplayProbe:
    """A ``GpuProbe`` (``slurm_ml.health.probe``) over a fixed snapshot.

    ``ReplayProbe(snapshot)`` replays a snapshot as given (tests, fakes, the dev
    cluster's fault injection); ``ReplayProbe.from_dir(path)`` builds it from captures.
    """

    def __init__(self, snapshot: NodeSnapshot) -> None:
        self._snap = snapshot

    @property
    def base(self) -> NodeSnapshot:
        """The whole snapshot, as built or given."""
        return self._snap

    @classmethod
    def from_files(cls, paths: Iterable[str | Path]) -> ReplayProbe:
        """Read these files (in this order) into one snapshot."""
        return cls(build_snapshot([(Path(p).name, _read(Path(p))) for p in paths]))

    @classmethod
    def from_dir(cls, path: str | Path) -> ReplayProbe:
        """Read every capture in directory ``path`` (sorted by name); see the module doc."""
        root = Path(path)
        files = _dir_files(root)
        if not files:
            raise CaptureError(f"{root}: no capture files in the directory")
        return cls.from_files(files)

    @classmethod
    def from_paths(cls, paths: Iterable[str | Path]) -> ReplayProbe:
        """Files and directories in any mix (one node's captures): a directory gives its
        files as :meth:`from_dir` does, in name order; files are read as given."""
        files: list[Path] = []
        for item in (Path(p) for p in paths):
            if item.is_dir():
                files += _dir_files(item)
            elif item.exists():
                files.append(item)
            else:
                raise CaptureError(f"{item}: no such file or directory")
        if not files:
            raise CaptureError("no capture files given")
        return cls.from_files(files)

    def snapshot(self, node: str, gpus: Collection[int] | None = None) -> NodeSnapshot:
        snap = dataclasses.replace(self._snap, node=node)
        if gpus is None:
            return snap
        keep = set(gpus)
        dropped = {k for g in snap.gpus if g.index not in keep
                   if (k := bus_key(g.pci_bus_id)) is not None}
        attached = snap.attached_gpus
        xids = snap.xids
        if xids is not None:
            xids = tuple(e for e in xids if bus_key(e.pci_bus_id) not in dropped)
        kernel = snap.kernel_events
        if kernel is not None:
            kernel = tuple(e for e in kernel if bus_key(e.pci_bus_id) not in dropped)
        return dataclasses.replace(
            snap,
            gpus=tuple(g for g in snap.gpus if g.index in keep),
            attached_gpus=len(snap.gpus) if attached is None else attached,
            xids=xids,
            kernel_events=kernel,
        )


def _dir_files(root: Path) -> list[Path]:
    """The capture files of a directory, in name order: dot-files and sub-directories
    skipped (see the module doc)."""
    try:
        entries = sorted(root.iterdir(), key=lambda p: p.name)
    except OSError as exc:
        raise CaptureError(f"{root}: cannot list the directory: {exc.strerror or exc}") from exc
    return [p for p in entries if not p.name.startswith(".") and not p.is_dir()]


def _read(path: Path) -> str:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise CaptureError(f"{path.name}: {size} bytes, over the {MAX_FILE_BYTES}-byte "
                               f"limit for a capture")
        data = path.read_bytes()
    except OSError as exc:
        raise CaptureError(f"{path.name}: cannot read: {exc.strerror or exc}") from exc
    if b"\x00" in data:
        raise CaptureError(f"{path.name}: binary data (a NUL byte), not a text capture")
    return data.decode("utf-8", errors="replace")
