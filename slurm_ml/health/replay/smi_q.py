"""``nvidia-smi -q`` captures (text, and ``-q -x`` XML) read back as a :class:`NodeSnapshot`.

Pure functions on strings: the caller reads the file. :func:`parse_smi_q` tells the two
formats apart (XML starts with ``<``); :func:`parse_smi_q_text` and
:func:`parse_smi_q_xml` read one each. Both raise :class:`CaptureError` (and nothing else)
when the text is not ``nvidia-smi -q`` output or is damaged, with the line (text) or the
element path (XML) that is wrong.

Excerpts parse: a capture with only some GPUs, or only some sections of a GPU, gives
``None`` for every value it does not show (``None`` = "not looked at"). NVLink is not in
``-q`` output, so ``Gpu.nvlinks`` is always ``None``; topology and XIDs come from other
captures. ``NodeSnapshot.attached_gpus`` is the "Attached GPUs" line, which exceeds
``len(gpus)`` in an excerpt or an ``nvidia-smi -q -i N`` capture.

How a printed value maps (case and surrounding blanks ignored):

=======================================================  ==========================================
printed value                                            reading
=======================================================  ==========================================
``N/A``, ``[N/A]``, ``Not Supported``,                   ``NOT_SUPPORTED`` (the device has no such
``[Not Supported]``                                      feature; not recorded as a GPU error)
any other ``[...]`` (``[GPU requires reset]``,           ``None``, and the message goes to
``[Unknown Error]``, ``[Insufficient Permissions]``),    ``Gpu.errors`` once per distinct message:
and the NVML error strings ``Unknown Error``, ``ERR!``,  ``"GPU is lost (line 12, Product Name,
``GPU requires reset``, ``GPU is lost``, ``Corrupted     and 40 more)"``. Every value of the GPU's
infoROM``, ``Timeout``, ...                              block is scanned, read by us or not.
                                                         ``Unknown Error`` and ``ERR!`` are faults
                                                         of the GPU (checks.device: error state)
``Yes``/``Enabled``/``Active``                           ``True``
``No``/``Disabled``/``Not Active``                       ``False``
``12 MiB``, ``16x``, ``37 %``, ``4``                     ``12``, ``16``, ``37.0``, ``4``
=======================================================  ==========================================

An error printed in place of a mode or capability field (``Addressing Mode``, ``MIG
Mode``, ``ECC Mode``, ...: ``health.field_kinds``) goes to ``Gpu.mode_errors`` instead,
as ``"Addressing Mode: Unknown Error"``: the checks judge those across the node's GPUs.

A section printed as one value (``Remapped Rows : N/A``, ``<remapped_rows>N/A</...>``)
makes the whole reading ``NOT_SUPPORTED``; so does a Retired Pages or Remapped Rows
section whose every field is ``N/A`` (Volta has no remapping, Ampere+ no retirement).
``Processes : None`` (text) and ``<processes />`` (XML) are "no processes", ``()``.

ECC counters: newer drivers split them (``SRAM Correctable``, ``SRAM Uncorrectable`` or
``SRAM Uncorrectable Parity`` + ``SEC-DED``, ``DRAM Correctable``, ``DRAM Uncorrectable``);
corrected = sum of the correctable ones, uncorrected = sum of the uncorrectable ones
(parts that say N/A count as absent; all N/A gives NOT_SUPPORTED). The "Aggregate
Uncorrectable SRAM Sources" breakdown repeats the same errors and is not added. Older
drivers print ``Single Bit``/``Double Bit`` per memory with a ``Total``: the totals are
used.

Text captures are checked for damage: the ``" : "`` separator of every padded key sits
at one column in real output (nvidia-smi pads keys to a fixed width); a padded line with
its separator elsewhere, a broken indentation, a GPU header without a bus id, a line of
the plain ``nvidia-smi`` table or a number that is not a number raise ``CaptureError``.
The lines ``[...]`` and ``...`` (elision marks of published excerpts) are skipped.
``Unable to determine the device handle for GPU…`` lines become a GPU with only that
error; ``No devices were found``, ``NVIDIA-SMI has failed…`` and ``Failed to initialize
NVML…`` become ``NodeSnapshot.errors``.

XML is parsed with ``xml.etree.ElementTree`` after refusing (:class:`UnsafeXmlError`) any
``<!ENTITY`` declaration and any DOCTYPE other than the plain external one nvidia-smi
writes (``<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">``); the DTD itself is
never fetched.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Final, Literal, TypeVar

from slurm_ml.health.field_kinds import is_mode_key
from slurm_ml.health.replay.errors import CaptureError
from slurm_ml.health.snapshot import (
    NOT_SUPPORTED,
    EccCounts,
    Gpu,
    GpuProcess,
    NodeSnapshot,
    Reading,
    RemappedRows,
    RetiredPages,
)

__all__ = [
    "SOURCE_TEXT",
    "SOURCE_XML",
    "UnsafeXmlError",
    "normalise_pci_bus_id",
    "parse_smi_q",
    "parse_smi_q_text",
    "parse_smi_q_xml",
]

T = TypeVar("T")

SOURCE_TEXT = "replay:nvidia-smi -q"
SOURCE_XML = "replay:nvidia-smi -q -x"


class UnsafeXmlError(CaptureError):
    """XML declaring entities or carrying a DOCTYPE internal subset: refused unparsed."""


# --------------------------------------------------------------------------- values

_NOT_SUPPORTED_VALUES = frozenset(
    {"n/a", "[n/a]", "not supported", "[not supported]"}
)
#: NVML error strings nvidia-smi prints in place of a value (also seen in brackets).
_ERROR_VALUES = frozenset(
    {
        "gpu is lost",
        "gpu requires reset",
        "insufficient permissions",
        "corrupted inforom",
        "timeout",
        "driver not loaded",
        "uninitialized",
        "insufficient power",
        "insufficient external power",
        "gpu access blocked by the operating system",
        "driver/library version mismatch",
        "memory error",
        "unknown error",
        "err!",
    }
)
_TRUE = frozenset({"yes", "enabled", "active", "true"})
_FALSE = frozenset({"no", "disabled", "not active", "false"})

_Kind = Literal["value", "not_supported", "error"]


def _squash(raw: str) -> str:
    return " ".join(raw.split()).lower()


def _kind(raw: str) -> _Kind:
    v = _squash(raw)
    if v in _NOT_SUPPORTED_VALUES:
        return "not_supported"
    if len(v) >= 2 and v[0] == "[" and v[-1] == "]":
        return "error"
    if v.rstrip(".") in _ERROR_VALUES:
        return "error"
    return "value"


def _error_message(raw: str) -> str:
    v = " ".join(raw.split())
    if len(v) >= 2 and v[0] == "[" and v[-1] == "]":
        v = v[1:-1].strip()
    return v


_BUS = re.compile(r"([0-9A-Fa-f]{1,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])")


def normalise_pci_bus_id(raw: str) -> str | None:
    """``"00000000:10:1C.0"`` or ``"0000:10:1c.0"`` → ``"00000000:10:1c.0"``; None if not one."""
    m = _BUS.fullmatch(raw.strip())
    if m is None:
        return None
    return f"{int(m[1], 16):08x}:{m[2].lower()}:{m[3].lower()}.{m[4]}"


# --------------------------------------------------------------------------- tree


@dataclass(eq=False, slots=True)
class _Node:
    """One line (text) or element (XML): a value, a section, or (text only) both."""

    key: str  # normalised: snake_case of the text label, or the XML tag
    label: str  # as printed
    value: str | None  # None: a section header / an element with children
    line: int | None = None  # 1-based, text only
    indent: int = 0
    parent: _Node | None = None
    children: list[_Node] = field(default_factory=list)

    def child(self, key: str) -> _Node | None:
        for c in self.children:
            if c.key == key:
                return c
        return None

    def get(self, path: str) -> _Node | None:
        """The first node at ``path`` ("a/b"); ``"|"`` separates alternatives."""
        for alternative in path.split("|"):
            node: _Node | None = self
            for part in alternative.split("/"):
                assert node is not None
                node = node.child(part)
                if node is None:
                    break
            if node is not None:
                return node
        return None

    def walk(self) -> Iterator[_Node]:
        """Every node below this one, in document order."""
        stack = list(reversed(self.children))
        while stack:
            n = stack.pop()
            yield n
            stack.extend(reversed(n.children))

    def path(self, below: _Node | None = None) -> str:
        parts: list[str] = []
        n: _Node | None = self
        while n is not None and n.parent is not None and n is not below:
            parts.append(n.label)
            n = n.parent
        return "/".join(reversed(parts))

    def where(self, below: _Node | None = None) -> str:
        p = self.path(below)
        return f"line {self.line}, {p}" if self.line is not None else p


def _fail(node: _Node, message: str) -> CaptureError:
    return CaptureError(f"{node.where()}: {message}")


def _snake(label: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", label.lower()).strip("_")


# --------------------------------------------------------------------------- readings

Conv = Callable[[_Node, str], T]


def _read(node: _Node | None, conv: Conv[T]) -> Reading[T]:
    if node is None:
        return None
    if node.value is None:
        raise _fail(node, "expected a value, found a section")
    kind = _kind(node.value)
    if kind == "not_supported":
        return NOT_SUPPORTED
    if kind == "error":
        return None
    return conv(node, node.value)


def _number(pattern: str, what: str) -> Conv[int]:
    rx = re.compile(pattern)

    def conv(node: _Node, raw: str) -> int:
        m = rx.fullmatch(raw.strip())
        if m is None:
            raise _fail(node, f"expected {what}, got {raw.strip()[:60]!r}")
        return int(m[1])

    return conv


_int = _number(r"([0-9]{1,18})", "a whole number")
_mib = _number(r"([0-9]{1,18}) ?MiB", "'<n> MiB'")
_width = _number(r"([0-9]{1,4})x", "a link width like '16x'")
_PCT = re.compile(r"([0-9]{1,6}(?:\.[0-9]{1,6})?) ?%")


def _pct(node: _Node, raw: str) -> float:
    m = _PCT.fullmatch(raw.strip())
    if m is None:
        raise _fail(node, f"expected a percentage like '37 %', got {raw.strip()[:60]!r}")
    return float(m[1])


def _bool(node: _Node, raw: str) -> bool:
    v = _squash(raw)
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise _fail(node, f"expected Yes/No, Enabled/Disabled or Active/Not Active, got {raw[:60]!r}")


def _str(node: _Node, raw: str) -> str:
    return raw.strip()


def _bus(node: _Node, raw: str) -> str:
    bus = normalise_pci_bus_id(raw)
    if bus is None:
        raise _fail(node, f"expected a PCI bus id like '00000000:07:00.0', got {raw[:60]!r}")
    return bus


def _section(node: _Node | None) -> Reading[_Node]:
    """A section, NOT_SUPPORTED when it is printed as one N/A value, None when absent."""
    if node is None or node.children or node.value is None:
        return node
    kind = _kind(node.value)
    if kind == "not_supported":
        return NOT_SUPPORTED
    if kind == "error":
        return None
    raise _fail(node, f"expected a section, got the value {node.value[:60]!r}")


def _any_true(readings: list[Reading[bool]]) -> Reading[bool]:
    """Several fields saying one thing (XML has both pending_blacklist and _retirement)."""
    if not readings:
        return None
    if any(r is True for r in readings):
        return True
    if any(r is None for r in readings):
        return None
    if any(r is False for r in readings):
        return False
    return NOT_SUPPORTED


# --------------------------------------------------------------------------- layouts


@dataclass(frozen=True, slots=True)
class _Layout:
    """Where each value sits in one format: paths of normalised keys, "|" = alternatives."""

    uuid: str
    name: str
    minor: str
    bus_id: str
    ecc_current: str
    ecc_pending: str
    retired_sbe: str
    retired_dbe: str
    retired_pending: tuple[str, ...]
    remap_corr: str
    remap_unc: str
    remap_pending: str
    remap_failure: str
    gen_cur: str
    gen_max: str
    width_cur: str
    width_max: str
    replays: str
    util_gpu: str
    util_mem: str
    mig: str
    clock_prefixes: tuple[str, ...]
    mem_total: str = "fb_memory_usage/total"
    mem_used: str = "fb_memory_usage/used"
    ecc_errors: str = "ecc_errors"
    sram_threshold: str = "ecc_errors/aggregate/sram_threshold_exceeded"
    channel_repair: str = "ecc_errors/channel_repair_pending"
    tpc_repair: str = "ecc_errors/tpc_repair_pending"
    unrepairable: str = "ecc_errors/unrepairable_memory"
    retired: str = "retired_pages"
    remapped: str = "remapped_rows"
    fabric_state: str = "fabric/state"
    fabric_status: str = "fabric/status"
    fabric_health: str = "fabric/health/summary"
    reset_required: str = "gpu_reset_status/reset_required"
    drain_reset: str = "gpu_reset_status/drain_and_reset_recommended"
    recovery: str = "gpu_recovery_action"
    clock_events: str = "clocks_event_reasons|clocks_throttle_reasons"


_TEXT = _Layout(
    uuid="gpu_uuid",
    name="product_name",
    minor="minor_number",
    bus_id="pci/bus_id",
    ecc_current="ecc_mode/current",
    ecc_pending="ecc_mode/pending",
    retired_sbe="single_bit_ecc",
    retired_dbe="double_bit_ecc",
    retired_pending=("pending_page_blacklist", "pending_page_retirement"),
    remap_corr="correctable_error",
    remap_unc="uncorrectable_error",
    remap_pending="pending",
    remap_failure="remapping_failure_occurred",
    gen_cur="pci/gpu_link_info/pcie_generation/current",
    gen_max="pci/gpu_link_info/pcie_generation/max",
    width_cur="pci/gpu_link_info/link_width/current",
    width_max="pci/gpu_link_info/link_width/max",
    replays="pci/replays_since_reset",
    util_gpu="utilization/gpu",
    util_mem="utilization/memory",
    mig="mig_mode/current",
    clock_prefixes=(),
)

_XML = _Layout(
    uuid="uuid",
    name="product_name",
    minor="minor_number",
    bus_id="pci/pci_bus_id",
    ecc_current="ecc_mode/current_ecc",
    ecc_pending="ecc_mode/pending_ecc",
    retired_sbe="multiple_single_bit_retirement/retired_count",
    retired_dbe="double_bit_retirement/retired_count",
    retired_pending=("pending_blacklist", "pending_retirement"),
    remap_corr="remapped_row_corr",
    remap_unc="remapped_row_unc",
    remap_pending="remapped_row_pending",
    remap_failure="remapped_row_failure",
    gen_cur="pci/pci_gpu_link_info/pcie_gen/current_link_gen",
    gen_max="pci/pci_gpu_link_info/pcie_gen/max_link_gen",
    width_cur="pci/pci_gpu_link_info/link_widths/current_link_width",
    width_max="pci/pci_gpu_link_info/link_widths/max_link_width",
    replays="pci/replay_counter",
    util_gpu="utilization/gpu_util",
    util_mem="utilization/memory_util",
    mig="mig_mode/current_mig",
    clock_prefixes=("clocks_event_reason_", "clocks_throttle_reason_"),
)

#: Text labels whose snake_case differs from the XML tag suffix.
_CLOCK_ALIASES = {"idle": "gpu_idle", "display_clock_setting": "display_clocks_setting"}

_CORRECTED = frozenset({"sram_correctable", "dram_correctable"})
_UNCORRECTED = frozenset(
    {
        "sram_uncorrectable",
        "sram_uncorrectable_parity",
        "sram_uncorrectable_sec_ded",  # text "SRAM Uncorrectable SEC-DED"
        "sram_uncorrectable_secded",  # XML
        "dram_uncorrectable",
    }
)


# --------------------------------------------------------------------------- GPU fields


def _ecc_sum(side: _Node, keys: frozenset[str]) -> Reading[int]:
    parts = [_read(c, _int) for c in side.children if c.key in keys]
    if not parts or any(p is None for p in parts):
        return None
    numbers = [p for p in parts if isinstance(p, int)]
    return sum(numbers) if numbers else NOT_SUPPORTED


def _ecc_total(node: _Node | None) -> Reading[int]:
    sec = _section(node)
    if not isinstance(sec, _Node):
        return sec
    return _read(sec.child("total"), _int)


def _ecc_side(node: _Node | None) -> tuple[Reading[int], Reading[int]]:
    sec = _section(node)
    if not isinstance(sec, _Node):
        return sec, sec
    sbe, dbe = sec.child("single_bit"), sec.child("double_bit")
    if sbe is not None or dbe is not None:
        return _ecc_total(sbe), _ecc_total(dbe)
    return _ecc_sum(sec, _CORRECTED), _ecc_sum(sec, _UNCORRECTED)


def _ecc(node: _Node | None) -> EccCounts:
    sec = _section(node)
    if sec is None:
        return EccCounts()
    if not isinstance(sec, _Node):
        return EccCounts(sec, sec, sec, sec)
    vc, vu = _ecc_side(sec.child("volatile"))
    ac, au = _ecc_side(sec.child("aggregate"))
    return EccCounts(vc, vu, ac, au)


def _retired(block: _Node, lay: _Layout) -> Reading[RetiredPages]:
    sec = _section(block.get(lay.retired))
    if not isinstance(sec, _Node):
        return sec
    pending = _any_true(
        [_read(n, _bool) for p in lay.retired_pending if (n := sec.get(p)) is not None]
    )
    pages = RetiredPages(
        single_bit=_read(sec.get(lay.retired_sbe), _int),
        double_bit=_read(sec.get(lay.retired_dbe), _int),
        pending=pending,
    )
    if all(v is NOT_SUPPORTED for v in (pages.single_bit, pages.double_bit, pages.pending)):
        return NOT_SUPPORTED
    return pages


def _remapped(block: _Node, lay: _Layout) -> Reading[RemappedRows]:
    sec = _section(block.get(lay.remapped))
    if not isinstance(sec, _Node):
        return sec
    rows = RemappedRows(
        correctable=_read(sec.get(lay.remap_corr), _int),
        uncorrectable=_read(sec.get(lay.remap_unc), _int),
        pending=_read(sec.get(lay.remap_pending), _bool),
        failure=_read(sec.get(lay.remap_failure), _bool),
    )
    values = (rows.correctable, rows.uncorrectable, rows.pending, rows.failure)
    if all(v is NOT_SUPPORTED for v in values):
        return NOT_SUPPORTED
    return rows


def _clock_events(block: _Node, lay: _Layout) -> Reading[tuple[str, ...]]:
    sec = _section(block.get(lay.clock_events))
    if not isinstance(sec, _Node):
        return sec
    active: list[str] = []
    for node in sec.walk():
        if node.value is None or _read(node, _bool) is not True:
            continue
        name = node.key
        for prefix in lay.clock_prefixes:
            name = name.removeprefix(prefix)
        name = _CLOCK_ALIASES.get(name, name)
        if name not in active:
            active.append(name)
    return tuple(active)


def _top(node: _Node, block: _Node) -> _Node:
    """The field at the top of the GPU's block that ``node`` is in (or is)."""
    while node.parent is not None and node.parent is not block:
        node = node.parent
    return node


def _gpu_errors(block: _Node) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Every distinct NVML error printed in the GPU's block, with where it first shows;
    and apart, the errors printed in place of a mode field (health.field_kinds), one per
    field: "Addressing Mode: Unknown Error"."""
    seen: dict[str, list[_Node]] = {}
    modes: dict[str, None] = {}
    for node in block.walk():
        if node.value is not None and _kind(node.value) == "error":
            top = _top(node, block)
            if is_mode_key(top.key):
                modes[f"{top.label}: {_error_message(node.value)}"] = None
            else:
                seen.setdefault(_error_message(node.value), []).append(node)
    out = []
    for message, nodes in seen.items():
        more = f", and {len(nodes) - 1} more" if len(nodes) > 1 else ""
        out.append(f"{message} ({nodes[0].where(block)}{more})")
    return tuple(out), tuple(modes)


def _gpu(
    index: int,
    block: _Node,
    header_bus: str | None,
    lay: _Layout,
    processes: tuple[GpuProcess, ...] | None,
) -> Gpu:
    bus = _read(block.get(lay.bus_id), _bus)
    if header_bus is not None:
        if isinstance(bus, str) and bus != header_bus:
            raise _fail(block, f"the block is headed {header_bus} but its Bus Id says {bus}")
        bus = header_bus
    errors, mode_errors = _gpu_errors(block)
    return Gpu(
        index=index,
        uuid=_read(block.get(lay.uuid), _str),
        name=_read(block.get(lay.name), _str),
        pci_bus_id=bus,
        memory_total_mb=_read(block.get(lay.mem_total), _mib),
        memory_used_mb=_read(block.get(lay.mem_used), _mib),
        ecc_enabled=_read(block.get(lay.ecc_current), _bool),
        ecc_pending=_read(block.get(lay.ecc_pending), _bool),
        ecc=_ecc(block.get(lay.ecc_errors)),
        remapped_rows=_remapped(block, lay),
        retired_pages=_retired(block, lay),
        nvlinks=None,
        fabric_state=_read(block.get(lay.fabric_state), _str),
        fabric_status=_read(block.get(lay.fabric_status), _str),
        fabric_health=_read(block.get(lay.fabric_health), _str),
        pcie_width_current=_read(block.get(lay.width_cur), _width),
        pcie_width_max=_read(block.get(lay.width_max), _width),
        pcie_gen_current=_read(block.get(lay.gen_cur), _int),
        pcie_gen_max=_read(block.get(lay.gen_max), _int),
        utilization_gpu_pct=_read(block.get(lay.util_gpu), _pct),
        utilization_memory_pct=_read(block.get(lay.util_mem), _pct),
        mig_enabled=_read(block.get(lay.mig), _bool),
        processes=processes,
        errors=errors,
        mode_errors=mode_errors,
        minor_number=_read(block.get(lay.minor), _int),
        reset_required=_read(block.get(lay.reset_required), _bool),
        drain_and_reset_recommended=_read(block.get(lay.drain_reset), _bool),
        recovery_action=_read(block.get(lay.recovery), _str),
        sram_threshold_exceeded=_read(block.get(lay.sram_threshold), _bool),
        channel_repair_pending=_read(block.get(lay.channel_repair), _bool),
        tpc_repair_pending=_read(block.get(lay.tpc_repair), _bool),
        unrepairable_memory=_read(block.get(lay.unrepairable), _bool),
        pcie_replay_count=_read(block.get(lay.replays), _int),
        clock_events_active=_clock_events(block, lay),
    )


def _process(node: _Node, pid_node: _Node | None, name: str, memory: str) -> GpuProcess:
    pid = _read(pid_node, _int)
    if not isinstance(pid, int):
        raise _fail(pid_node or node, "a process without a usable process id")
    name_node = node.get(name)
    return GpuProcess(
        pid=pid,
        used_memory_mb=_read(node.get(memory), _mib),
        name=(name_node.value or "").strip() if name_node is not None else "",
    )


def _processes(
    block: _Node, entry: str, pid: str | None, name: str, memory: str
) -> tuple[GpuProcess, ...] | None:
    """Text: ``Process ID : n`` lines with Name/Used GPU Memory below them (``pid`` None);
    XML: ``<process_info>`` elements holding ``<pid>``."""
    sec = block.child("processes")
    if sec is None:
        return None
    if sec.value is not None and not sec.children:
        if _squash(sec.value) in ("none", ""):
            return ()
        if _kind(sec.value) != "value":
            return None
        raise _fail(sec, f"expected 'None' or a list of processes, got {sec.value[:60]!r}")
    return tuple(
        _process(c, c if pid is None else c.child(pid), name, memory)
        for c in sec.children
        if c.key == entry
    )


def _dedupe_check(gpus: list[Gpu], blocks: list[_Node]) -> None:
    first: dict[str, _Node] = {}
    for gpu, block in zip(gpus, blocks, strict=True):
        if isinstance(gpu.pci_bus_id, str):
            if gpu.pci_bus_id in first:
                raise _fail(block, f"GPU {gpu.pci_bus_id} appears twice in the capture")
            first[gpu.pci_bus_id] = block


def _top_value(seen: dict[str, Reading[str]], node: _Node) -> None:
    value = _read(node, _str)
    if node.key in seen and seen[node.key] != value:
        raise _fail(node, f"{node.label} given twice, differently")
    seen[node.key] = value


# --------------------------------------------------------------------------- text

_BANNER = re.compile(r"=+\s*NVSMI LOG\s*=+")
_KV = re.compile(r"(\S(?:.*?\S)?)( +):(?: (.*))?")
_ELISIONS = frozenset({"[...]", "...", "…", "[…]"})
_GPU_HEADER = re.compile(r"GPU\s+(\S+)")
_LOST = re.compile(r"Unable to determine the device handle for GPU\s*(.*)", re.IGNORECASE)
_NODE_ERROR = re.compile(
    r"No devices were found|NVIDIA-SMI has failed\b.*|Failed to initialize NVML\b.*",
    re.IGNORECASE,
)


def _text_tree(text: str) -> _Node:
    root = _Node(key="", label="", value=None, indent=-1)
    stack: list[_Node] = [root]
    padded: list[tuple[int, _Node]] = []  # (column of ':', node) of key-padded lines
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        content = line.lstrip(" ")
        if not content or content in _ELISIONS or _BANNER.fullmatch(content):
            continue
        if content[0].isspace():
            raise CaptureError(f"line {number}: indented with a tab or odd blank, not spaces")
        if content.startswith(("|", "+-")):
            raise CaptureError(
                f"line {number}: a table row ({content[:30]!r}): a table such as the plain "
                f"`nvidia-smi` view, not `nvidia-smi -q` output"
            )
        indent = len(line) - len(content)
        m = _KV.fullmatch(content)
        if m is not None:
            label, value = m[1], (m[3] or "").strip()
        else:
            label, value = content, None
        while stack[-1].indent >= indent:
            stack.pop()
        parent = stack[-1]
        node = _Node(_snake(label), label, value, number, indent, parent)
        if parent.children and parent.children[-1].indent != indent:
            raise _fail(
                node,
                f"indented {indent} spaces where the lines before it at this level have "
                f"{parent.children[-1].indent}: broken indentation",
            )
        if parent is root and indent != 0:
            raise _fail(node, "the first line of a section is indented: not nvidia-smi -q output")
        parent.children.append(node)
        stack.append(node)
        if m is not None and len(m[2]) >= 2:
            padded.append((indent + len(m[1]) + len(m[2]), node))
    if padded:
        column = Counter(c for c, _ in padded).most_common(1)[0][0]
        for col, node in padded:
            if col != column:
                raise _fail(
                    node,
                    f"the ' : ' separator is padded to column {col + 1}, elsewhere in the "
                    f"capture to column {column + 1}: mis-aligned, damaged output",
                )
    return root


#: A shell prompt or the command itself above pasted output ("# nvidia-smi -q",
#: "root@host:~# nvidia-smi -q | grep ..."), and grep's "--" between matches.
_PROMPT = re.compile(r"^\s*(?:\S*[#$>%]\s*)?(?:sudo\s+)?nvidia-smi\b.*$|^--$")
_TOP_LEVEL = re.compile(r"^(?:GPU\s+\S+|Unable to determine|Timestamp|Driver Version|CUDA "
                        r"Version|Attached GPUs|=+\s*NVSMI LOG|No devices were found"
                        r"|NVIDIA-SMI has failed|Failed to initialize NVML)", re.IGNORECASE)
_PADDED_KV = re.compile(r"^ *\S[^:]*? {2,}: ")
#: The header a section pasted on its own is read under: a GPU of unknown address.
FRAGMENT_HEADER: Final = "GPU (section pasted on its own)"


def _as_gpu_block(text: str) -> str:
    """Prompt lines dropped; a section pasted on its own (just "ECC Errors", "Remapped
    Rows" or "Fabric", at any indentation) re-indented under one GPU header, so that the
    parser reads it as that GPU's block. Lines deeper than the section's own level before
    its first line (the tail of a section whose header was not pasted) are dropped."""
    lines = [line for line in text.splitlines() if not _PROMPT.match(line)]
    content = [line for line in lines if line.strip()]
    padded = sum(1 for line in content if _PADDED_KV.match(line))
    if padded < 2 or any(_TOP_LEVEL.match(line) for line in content
                         if not line[:1].isspace()):
        return "\n".join(lines)
    base = min(len(line) - len(line.lstrip(" ")) for line in content)
    out = [FRAGMENT_HEADER]
    started = False
    for line in lines:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        if not started and indent > base:
            continue
        started = True
        out.append("    " + line[base:])
    return "\n".join(out)


def parse_smi_q_text(text: str, node: str = "") -> NodeSnapshot:
    """Read ``nvidia-smi -q`` text output (whole, an excerpt, or one section pasted on its
    own) into a snapshot."""
    root = _text_tree(_as_gpu_block(text))
    top: dict[str, Reading[str]] = {}
    attached: Reading[int] = None
    gpus: list[Gpu] = []
    blocks: list[_Node] = []
    node_errors: list[str] = []
    for child in root.children:
        if child.value is not None:
            if child.key in ("driver_version", "cuda_version"):
                _top_value(top, child)
            elif child.key == "attached_gpus":
                attached = _read(child, _int)
            continue
        lost = _LOST.fullmatch(child.label)
        header = _GPU_HEADER.fullmatch(child.label)
        if child.label == FRAGMENT_HEADER:
            gpus.append(_gpu(len(gpus), child, None, _TEXT, None))
            blocks.append(child)
            continue
        if lost is not None:
            m = _BUS.search(lost[1])
            reason = lost[1][m.end() :] if m else lost[1].partition(":")[2]
            reason = reason.strip(" :") or "no reason given"
            bus = normalise_pci_bus_id(m[0]) if m else None
            gpus.append(
                Gpu(
                    index=len(gpus),
                    pci_bus_id=bus,
                    errors=(f"{reason} (line {child.line}, device handle unavailable)",),
                )
            )
            blocks.append(child)
        elif header is not None:
            bus = _bus(child, header[1])
            gpus.append(
                _gpu(
                    len(gpus),
                    child,
                    bus,
                    _TEXT,
                    _processes(child, "process_id", None, "name", "used_gpu_memory"),
                )
            )
            blocks.append(child)
        elif _NODE_ERROR.fullmatch(child.label):
            node_errors.append(f"{child.label} (line {child.line})")
        else:
            raise _fail(child, "unexpected line at the top level: not nvidia-smi -q output")
    if not gpus and not node_errors and attached != 0:
        raise CaptureError("no 'GPU <bus id>' section: not nvidia-smi -q output")
    _dedupe_check(gpus, blocks)
    return NodeSnapshot(
        node=node,
        gpus=tuple(gpus),
        driver_version=top.get("driver_version"),
        cuda_version=top.get("cuda_version"),
        source=SOURCE_TEXT,
        errors=tuple(node_errors),
        attached_gpus=attached,
    )


# --------------------------------------------------------------------------- XML

_ENTITY = re.compile(r"<!ENTITY", re.IGNORECASE)
_DOCTYPE_ANY = re.compile(r"<!DOCTYPE", re.IGNORECASE)
_QUOTED = r"""(?:"[^"<>\[\]]*"|'[^'<>\[\]]*')"""
_DOCTYPE_PLAIN = re.compile(
    rf"<!DOCTYPE\s+[A-Za-z_][\w.-]*"
    rf"(?:\s+(?:SYSTEM\s+{_QUOTED}|PUBLIC\s+{_QUOTED}\s+{_QUOTED}))?\s*>"
)


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _refuse_unsafe(text: str) -> None:
    m = _ENTITY.search(text)
    if m is not None:
        raise UnsafeXmlError(
            f"line {_line_of(text, m.start())}: <!ENTITY declaration: refused (entity "
            f"expansion); nvidia-smi -q -x never declares entities"
        )
    for d in _DOCTYPE_ANY.finditer(text):
        if _DOCTYPE_PLAIN.match(text, d.start()) is None:
            raise UnsafeXmlError(
                f"line {_line_of(text, d.start())}: a DOCTYPE other than the plain external "
                f"one nvidia-smi writes (internal subset?): refused"
            )


def _xml_tree(element: ET.Element, label: str) -> _Node:
    root = _Node(key=element.tag, label=label, value=None)
    stack: list[tuple[ET.Element, _Node]] = [(element, root)]
    while stack:
        el, node = stack.pop()
        for c in el:
            value = None if len(c) else (c.text or "").strip()
            child = _Node(key=c.tag, label=c.tag, value=value, parent=node)
            node.children.append(child)
            stack.append((c, child))
    return root


def parse_smi_q_xml(text: str, node: str = "") -> NodeSnapshot:
    """Read ``nvidia-smi -q -x`` output into a snapshot."""
    body = text.lstrip("\ufeff \t\r\n")
    skipped = text.count("\n", 0, len(text) - len(body))
    _refuse_unsafe(body)
    try:
        log = ET.fromstring(body)
    except ET.ParseError as exc:
        line, column = exc.position
        why = re.sub(r": line \d+, column \d+$", "", str(exc))
        raise CaptureError(
            f"line {line + skipped}, column {column}: not well-formed XML ({why})"
        ) from exc
    except UnicodeError as exc:  # a lone surrogate in the str cannot reach expat
        raise CaptureError(f"not encodable as UTF-8: {exc}") from exc
    if log.tag != "nvidia_smi_log":
        raise CaptureError(f"root element <{log.tag}>, not <nvidia_smi_log>: not nvidia-smi -q -x")
    top = _xml_tree(log, "nvidia_smi_log")
    values: dict[str, Reading[str]] = {}
    attached: Reading[int] = None
    gpus: list[Gpu] = []
    blocks: list[_Node] = []
    for child, el in zip(top.children, log, strict=True):
        if child.key in ("driver_version", "cuda_version") and child.value is not None:
            _top_value(values, child)
        elif child.key == "attached_gpus" and child.value is not None:
            attached = _read(child, _int)
        elif child.key == "gpu":
            ident = el.get("id")
            child.label = f"gpu {ident}" if ident is not None else f"gpu[{len(gpus)}]"
            bus = _bus(child, ident) if ident is not None else None
            gpus.append(
                _gpu(
                    len(gpus),
                    child,
                    bus,
                    _XML,
                    _processes(child, "process_info", "pid", "process_name", "used_memory"),
                )
            )
            blocks.append(child)
    if not gpus and attached != 0:
        raise CaptureError("no <gpu> element: nothing to read")
    _dedupe_check(gpus, blocks)
    return NodeSnapshot(
        node=node,
        gpus=tuple(gpus),
        driver_version=values.get("driver_version"),
        cuda_version=values.get("cuda_version"),
        source=SOURCE_XML,
        attached_gpus=attached,
    )


def parse_smi_q(text: str, node: str = "") -> NodeSnapshot:
    """Read either format: XML when the first non-blank character is ``<``, else text."""
    if text.lstrip("\ufeff \t\r\n").startswith("<"):
        return parse_smi_q_xml(text, node)
    return parse_smi_q_text(text, node)
