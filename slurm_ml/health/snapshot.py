"""What a GPU probe sees on one node, as plain values: the input of every health check.

Two kinds of "no number" are kept apart, because checks treat them differently:
``None`` means the probe did not look (a replay capture without that section, a call
that timed out); ``NOT_SUPPORTED`` means the device says it has no such feature (no
NVLink on a PCIe card, no row remapping before Ampere). A check may tolerate the
second and must report the first as missing evidence.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Final, TypeAlias, TypeVar, Union


class _NotSupported(enum.Enum):
    NOT_SUPPORTED = "N/A"

    def __repr__(self) -> str:
        return "NOT_SUPPORTED"


NOT_SUPPORTED: Final = _NotSupported.NOT_SUPPORTED
T = TypeVar("T")
#: A reading: the value, NOT_SUPPORTED, or None (not read).
Reading: TypeAlias = Union[T, _NotSupported, None]  # noqa: UP007 (generic alias, 3.11)


@dataclass(frozen=True, slots=True)
class EccCounts:
    """ECC error counters (``nvmlDeviceGetTotalEccErrors``)."""

    volatile_corrected: Reading[int] = None
    volatile_uncorrected: Reading[int] = None
    aggregate_corrected: Reading[int] = None
    aggregate_uncorrected: Reading[int] = None


@dataclass(frozen=True, slots=True)
class RemappedRows:
    """Row remapping, Ampere and later (``nvmlDeviceGetRemappedRows``)."""

    correctable: Reading[int] = None
    uncorrectable: Reading[int] = None
    pending: Reading[bool] = None
    failure: Reading[bool] = None


@dataclass(frozen=True, slots=True)
class RetiredPages:
    """Page retirement, Volta/Turing (``nvmlDeviceGetRetiredPages``)."""

    single_bit: Reading[int] = None
    double_bit: Reading[int] = None
    pending: Reading[bool] = None


@dataclass(frozen=True, slots=True)
class NvLink:
    """One NVLink of one GPU."""

    link: int
    active: Reading[bool] = None
    version: Reading[int] = None
    speed_gbps: Reading[float] = None
    remote_pci_bus_id: Reading[str] = None
    remote_device_type: Reading[str] = None  # "GPU" | "SWITCH" | "IBMNPU" | ...
    replay_errors: Reading[int] = None
    recovery_errors: Reading[int] = None
    crc_errors: Reading[int] = None


@dataclass(frozen=True, slots=True)
class GpuProcess:
    pid: int
    used_memory_mb: Reading[int] = None
    name: str = ""


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU as the probe saw it."""

    index: int
    uuid: Reading[str] = None
    name: Reading[str] = None
    pci_bus_id: Reading[str] = None  # normalised "00000000:07:00.0"
    memory_total_mb: Reading[int] = None
    memory_used_mb: Reading[int] = None
    ecc_enabled: Reading[bool] = None
    ecc_pending: Reading[bool] = None
    ecc: EccCounts = field(default_factory=EccCounts)
    remapped_rows: RemappedRows | _NotSupported | None = None
    retired_pages: RetiredPages | _NotSupported | None = None
    nvlinks: tuple[NvLink, ...] | _NotSupported | None = None
    fabric_state: Reading[str] = None  # e.g. "Completed", "In Progress", "Not Started"
    fabric_status: Reading[str] = None  # e.g. "Success"
    #: nvidia-smi -q "Fabric > Health > Summary" (570+, multi-node NVLink): "Healthy",
    #: "Unhealthy", "Limited Capacity"; NVML nvmlDeviceGetGpuFabricInfoV healthMask.
    fabric_health: Reading[str] = None
    pcie_width_current: Reading[int] = None
    pcie_width_max: Reading[int] = None
    pcie_gen_current: Reading[int] = None
    pcie_gen_max: Reading[int] = None
    utilization_gpu_pct: Reading[float] = None
    utilization_memory_pct: Reading[float] = None
    mig_enabled: Reading[bool] = None
    processes: tuple[GpuProcess, ...] | None = None
    errors: tuple[str, ...] = ()  # what the probe could not read, e.g. "GPU is lost"
    #: Errors read in place of a mode or capability field (health.field_kinds), each
    #: "<field>: <message>" ("Addressing Mode: Unknown Error"); kept apart from ``errors``
    #: because the checks judge them across the node's GPUs.
    mode_errors: tuple[str, ...] = ()
    # Added with the nvidia-smi -q replay; a probe that does not read one leaves it None.
    minor_number: Reading[int] = None  # /dev/nvidia<N>; not the NVML index
    reset_required: Reading[bool] = None  # nvidia-smi "GPU Reset Status" section
    drain_and_reset_recommended: Reading[bool] = None
    recovery_action: Reading[str] = None  # 570+: "None", "Reset", "Reboot", "Drain P2P", …
    sram_threshold_exceeded: Reading[bool] = None  # aggregate SRAM ECC errors past the limit
    channel_repair_pending: Reading[bool] = None  # Blackwell-era memory repair state
    tpc_repair_pending: Reading[bool] = None
    unrepairable_memory: Reading[bool] = None
    pcie_replay_count: Reading[int] = None  # "Replays Since Reset": nvmlDeviceGetPcieReplayCounter
    #: Active clock event (throttle) reasons, XML names without prefix: "hw_slowdown",
    #: "hw_power_brake_slowdown", "sw_thermal_slowdown", "sw_power_cap", "gpu_idle", …
    clock_events_active: Reading[tuple[str, ...]] = None


@dataclass(frozen=True, slots=True)
class XidEvent:
    """One ``NVRM: Xid`` line from the kernel log."""

    xid: int
    pci_bus_id: str | None  # as the line names it, e.g. "PCI:0000:b3:00"
    message: str
    timestamp: float | None = None  # seconds; None when the log has no usable time
    pid: int | None = None


@dataclass(frozen=True, slots=True)
class KernelEvent:
    """A kernel message about a GPU that is not an ``Xid`` line.

    A GPU that falls off the bus, never initialises or fails the driver's probe often
    logs no Xid at all (docs/research/gpu-fault-corpus/: the held-out fault captures),
    only NVRM's own text naming its PCI address. ``kind`` is one of
    ``replay.kernel.KINDS`` ("fallen_off_bus", "init_failed", ...).
    """

    kind: str
    pci_bus_id: str | None  # as the log names it, e.g. "0000:3b:00.0", "PCI:0000:3b:00"
    message: str  # the line (or joined continuation lines) the kind was read from
    timestamp: float | None = None  # as for XidEvent


@dataclass(frozen=True, slots=True)
class DiagMessage:
    """A message ``dcgmi diag`` printed for a test: an error, a warning or an info line,
    and the GPU it belongs to (its entity row in DCGM 4.x, its result in the JSON, or
    the GPU the text names), None for a message about the run as a whole."""

    level: str  # "error" | "warning" | "info"
    text: str
    gpu: int | None = None


@dataclass(frozen=True, slots=True)
class DiagTest:
    """One ``dcgmi diag`` test as run on a node.

    ``key`` is DCGM's plugin name ("memory", "pcie", "page_retirement", ...: DCGM 3.x
    prints display names, "GPU Memory", which map to it). ``status`` is the test's own
    result (DCGM 4.x test line, JSON ``test_summary``, or a Deployment test's one result);
    ``all_gpus`` a 3.x "<result> - All"; ``gpus`` each GPU's own result. Results are
    lower case: "pass", "fail", "warn", "skip", "not run"."""

    name: str
    key: str
    category: str  # "deployment" | "integration" | "hardware" | "stress" | ""
    status: str | None = None
    all_gpus: str | None = None
    gpus: tuple[tuple[int, str], ...] = ()
    messages: tuple[DiagMessage, ...] = ()


@dataclass(frozen=True, slots=True)
class DcgmDiag:
    """What one ``dcgmi diag`` run (text table or ``-j`` JSON) reported."""

    tests: tuple[DiagTest, ...]
    version: str | None = None  # DCGM's
    driver: str | None = None
    device_ids: tuple[str, ...] = ()  # PCI device ids, as "GPU Device IDs Detected" lists
    runtime_error: str | None = None  # the run did not happen


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    """Everything one probe run saw on a node."""

    node: str
    gpus: tuple[Gpu, ...]
    driver_version: Reading[str] = None
    cuda_version: Reading[str] = None
    #: ``nvidia-smi topo -m``: (gpu index, gpu index) → "NV12", "SYS", "PIX", ...
    topology: dict[tuple[int, int], str] | None = None
    xids: tuple[XidEvent, ...] | None = None
    #: Non-Xid GPU kernel messages; None when no kernel log was read (like ``xids``).
    kernel_events: tuple[KernelEvent, ...] | None = None
    source: str = ""  # "nvml" or "replay:<files>"
    elapsed_s: float | None = None  # how long the probe took
    errors: tuple[str, ...] = ()  # probe-level failures: watchdog timeout, NVML init
    #: How many GPUs the driver reports (nvmlDeviceGetCount, "Attached GPUs"); in a replay
    #: of an excerpt or an ``nvidia-smi -q -i N`` capture it exceeds ``len(gpus)``.
    attached_gpus: Reading[int] = None
    #: A ``dcgmi diag`` run on the node (replayed captures only); None: none was read.
    dcgm_diag: DcgmDiag | None = None


_BUS = re.compile(r"^(?:PCI:)?(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})"
                  r"(?:\.[0-7])?$")


def bus_key(bus_id: object) -> tuple[int, int, int] | None:
    """(domain, bus, device) of "00000000:07:00.0", "PCI:0000:b3:00" (an Xid line) or
    "b3:00.0": the one way GPUs, Xids and NVLink peers are matched by PCI address."""
    if not isinstance(bus_id, str):
        return None
    m = _BUS.match(bus_id.strip())
    if m is None:
        return None
    domain, bus, dev = m.groups()
    return int(domain or "0", 16), int(bus, 16), int(dev, 16)


def reading_number(value: object) -> float | None:
    """The number in a reading (an int or float one); None for one not read,
    NOT_SUPPORTED, or a bool, which Python would otherwise count as 0 or 1."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
