"""NvmlProbe: the live GPUs of this node, read through nvidia-ml-py (``pynvml``).

The only module of slurm-ml that imports ``pynvml`` (an import-linter contract says so).
Three layers, so that everything but the last few lines runs without a GPU:

* :class:`NvmlApi`, a Protocol of the NVML calls the probe makes, named as in pynvml.
  Where pynvml hands back a ctypes structure or fills an out-parameter, the Protocol
  returns a small frozen value instead (:class:`PciInfo`, :class:`MemoryInfo`, ...).
  Errors are pynvml's own exceptions (``pynvml.NVMLError(code)`` builds the subclass).
* :class:`PynvmlApi`, the real implementation: forwards to pynvml, converting structures,
  and falls back to an older entry point where a driver lacks the newer one.
* :class:`NvmlProbe`, a :class:`~slurm_ml.health.probe.GpuProbe`: every call guarded, the
  whole run under a watchdog. ``slurm_ml.health.fake_nvml.FakeNvml`` is the stateful fake
  tests pass in (built from a replayed capture).

Guarding, per call (docs/design.md "GPU health", research §2.2):

====================================  =====================================================
NVML answers                          reading / record
====================================  =====================================================
a value                               the value
``NVML_ERROR_NOT_SUPPORTED``          ``NOT_SUPPORTED`` (the device lacks the feature)
``NVML_ERROR_GPU_IS_LOST``            ``Gpu.errors`` gets ``"GPU is lost (<call>)"``; the
                                      GPU is not queried further
``NVML_ERROR_RESET_REQUIRED``         ``"GPU requires reset (<call>)"``, likewise
any other ``NVMLError``               ``None`` and ``"<call>: <NVML message>"`` in
                                      ``Gpu.errors`` (once per call and message), or in
                                      ``Gpu.mode_errors`` for a call that reads a mode
====================================  =====================================================

(``health.checks.device.lost`` matches "GPU is lost" / "requires reset" and drains.)
NVLink links are enumerated 0..``NVML_NVLINK_MAX_LINKS``-1: ``INVALID_ARGUMENT`` on a
link's state ends the links, ``NOT_SUPPORTED`` skips that link; no link at all and some
NOT_SUPPORTED gives ``nvlinks=NOT_SUPPORTED`` (a PCIe card). Only an active link is asked
for its version, remote end and error counters. Per-field errors of
``nvmlDeviceGetFieldValues`` count like call errors; a field the driver does not know
(``INVALID_ARGUMENT``) reads NOT_SUPPORTED.

Watchdog: NVML runs in a daemon thread. If it has not finished within ``timeout_s`` the
snapshot has no GPUs (what was read so far is not trusted) and one ``errors`` entry
``"probe watchdog: NVML did not answer within …"`` naming the call it is stuck in; the
checks turn that into ``probe.error`` (drain): a hung NVML is a finding. The stuck thread
cannot be killed; until it returns, later snapshots of the same probe answer at once with
the same kind of error instead of piling up threads.

Not read here: ``topology`` and ``xids`` (``nvidia-smi topo -m`` and the kernel log, see
the replay parsers), NVLink ``speed_gbps``, and the nvidia-smi-only memory states
(``sram_threshold_exceeded``, ``channel_repair_pending``, ``tpc_repair_pending``,
``unrepairable_memory``): they stay None.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

import pynvml

from slurm_ml.health.field_kinds import is_mode_call
from slurm_ml.health.probe import GpuProbe
from slurm_ml.health.replay.smi_q import normalise_pci_bus_id
from slurm_ml.health.snapshot import (
    NOT_SUPPORTED,
    EccCounts,
    Gpu,
    GpuProcess,
    NodeSnapshot,
    NvLink,
    Reading,
    RemappedRows,
    RetiredPages,
)

__all__ = [
    "CLOCK_EVENT_BITS",
    "DEFAULT_TIMEOUT_S",
    "INIT_ERROR_PREFIX",
    "NVML_FIELDS",
    "RECOVERY_ACTIONS",
    "REMOTE_DEVICE_TYPES",
    "SOURCE",
    "WATCHDOG_PREFIX",
    "FabricInfo",
    "FieldValue",
    "MemoryInfo",
    "NvmlApi",
    "NvmlProbe",
    "PciInfo",
    "ProcessInfo",
    "PynvmlApi",
    "Utilization",
    "nvml_error",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

SOURCE: Final = "nvml"
DEFAULT_TIMEOUT_S: Final = 4.0
WATCHDOG_PREFIX: Final = "probe watchdog"
INIT_ERROR_PREFIX: Final = "NVML init failed"
MIB: Final = 1024 * 1024

# NVML constants, re-exported so that the fake and the tests need not import pynvml.
ERROR_INVALID_ARGUMENT: Final[int] = pynvml.NVML_ERROR_INVALID_ARGUMENT
ERROR_NOT_SUPPORTED: Final[int] = pynvml.NVML_ERROR_NOT_SUPPORTED
ERROR_NOT_FOUND: Final[int] = pynvml.NVML_ERROR_NOT_FOUND
ERROR_UNINITIALIZED: Final[int] = pynvml.NVML_ERROR_UNINITIALIZED
ERROR_TIMEOUT: Final[int] = pynvml.NVML_ERROR_TIMEOUT
ERROR_LIBRARY_NOT_FOUND: Final[int] = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
ERROR_DRIVER_NOT_LOADED: Final[int] = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
ERROR_FUNCTION_NOT_FOUND: Final[int] = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
ERROR_CORRUPTED_INFOROM: Final[int] = pynvml.NVML_ERROR_CORRUPTED_INFOROM
ERROR_GPU_IS_LOST: Final[int] = pynvml.NVML_ERROR_GPU_IS_LOST
ERROR_RESET_REQUIRED: Final[int] = pynvml.NVML_ERROR_RESET_REQUIRED
ERROR_NO_PERMISSION: Final[int] = pynvml.NVML_ERROR_NO_PERMISSION
ERROR_UNKNOWN: Final[int] = pynvml.NVML_ERROR_UNKNOWN
SUCCESS: Final[int] = pynvml.NVML_SUCCESS
#: A driver that lacks a function, or a struct version: fall back to the older entry point.
_TOO_OLD: Final = (ERROR_FUNCTION_NOT_FOUND,
                   getattr(pynvml, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", 25))

ECC_CORRECTED: Final[int] = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
ECC_UNCORRECTED: Final[int] = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
ECC_VOLATILE: Final[int] = pynvml.NVML_VOLATILE_ECC
ECC_AGGREGATE: Final[int] = pynvml.NVML_AGGREGATE_ECC
RETIRED_SBE: Final[int] = pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
RETIRED_DBE: Final[int] = pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
NVLINK_REPLAY: Final[int] = pynvml.NVML_NVLINK_ERROR_DL_REPLAY
NVLINK_RECOVERY: Final[int] = pynvml.NVML_NVLINK_ERROR_DL_RECOVERY
NVLINK_CRC_FLIT: Final[int] = pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT
NVLINK_MAX_LINKS: Final[int] = pynvml.NVML_NVLINK_MAX_LINKS
FIELD_RESET_STATUS: Final = 226  # NVML_FI_DEV_RESET_STATUS (deprecated by 230, still read)
FIELD_DRAIN_AND_RESET_STATUS: Final = 227  # NVML_FI_DEV_DRAIN_AND_RESET_STATUS
FIELD_RECOVERY_ACTION: Final = 230  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (driver 570+)
#: The fields read in one nvmlDeviceGetFieldValues call, in that order.
NVML_FIELDS: Final = (FIELD_RESET_STATUS, FIELD_DRAIN_AND_RESET_STATUS, FIELD_RECOVERY_ACTION)
_FIELD_NAMES: Final = {
    FIELD_RESET_STATUS: "NVML_FI_DEV_RESET_STATUS",
    FIELD_DRAIN_AND_RESET_STATUS: "NVML_FI_DEV_DRAIN_AND_RESET_STATUS",
    FIELD_RECOVERY_ACTION: "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION",
}

#: ``nvmlGpuFabricState_t`` → nvidia-smi's "Fabric / State" text (0 = not supported).
FABRIC_STATES: Final = {1: "Not Started", 2: "In Progress", 3: "Completed"}
FABRIC_COMPLETED: Final = 3
#: ``NVML_GPU_FABRIC_HEALTH_SUMMARY_*`` → nvidia-smi's "Fabric / Health / Summary" text
#: (0 = not supported).
FABRIC_HEALTH: Final = {1: "Healthy", 2: "Unhealthy", 3: "Limited Capacity"}
#: ``nvmlNvLinkDeviceType_t`` → ``NvLink.remote_device_type``.
REMOTE_DEVICE_TYPES: Final = {0: "GPU", 1: "IBMNPU", 2: "SWITCH", 0xFF: "UNKNOWN"}
#: ``NVML_GPU_RECOVERY_ACTION_*`` → ``Gpu.recovery_action`` (nvidia-smi prints "None" for 0;
#: the other spellings are ours, chosen to match ``health.checks.device``).
RECOVERY_ACTIONS: Final = {
    0: "None",
    1: "GPU Reset",
    2: "Node Reboot",
    3: "Drain P2P",
    4: "Drain and Reset",
    5: "Recover IMEX Domain",
    6: "Bus Reset",
    7: "System Reboot",
}
#: ``nvmlClocksEventReason*`` bits → the names the replay parser gives, in nvidia-smi's
#: print order (so a bitmask and a capture give the same tuple).
CLOCK_EVENT_BITS: Final = (
    ("gpu_idle", 0x1),
    ("applications_clocks_setting", 0x2),
    ("sw_power_cap", 0x4),
    ("hw_slowdown", 0x8),
    ("hw_thermal_slowdown", 0x40),
    ("hw_power_brake_slowdown", 0x80),
    ("sync_boost", 0x10),
    ("sw_thermal_slowdown", 0x20),
    ("display_clocks_setting", 0x100),
)


def nvml_error(code: int) -> Exception:
    """pynvml's exception for an NVML return code (the ``NVMLError_<Name>`` subclass)."""
    err: Exception = pynvml.NVMLError(code)
    return err


def _code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def _message(exc: BaseException) -> str:
    try:
        return str(exc) or type(exc).__name__
    except Exception:  # pynvml's __str__ asks the library, which may be gone
        return f"NVML error {_code(exc)}"


# --------------------------------------------------------------------------- the API


@dataclass(frozen=True, slots=True)
class PciInfo:
    bus_id: str  # as NVML prints it, e.g. "00000000:07:00.0"


@dataclass(frozen=True, slots=True)
class MemoryInfo:
    total: int  # bytes
    used: int  # bytes; nvmlMemory_v2 semantics (excludes driver-reserved memory)


@dataclass(frozen=True, slots=True)
class Utilization:
    gpu: int  # percent
    memory: int


@dataclass(frozen=True, slots=True)
class FabricInfo:
    state: int  # nvmlGpuFabricState_t
    status: int  # an nvmlReturn_t; meaningful only when state is COMPLETED
    #: NVML_GPU_FABRIC_HEALTH_SUMMARY_* (nvmlGpuFabricInfo_v3+, drivers 570+); None when
    #: the driver or pynvml has no such field.
    health_summary: int | None = None


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    pid: int
    used_gpu_memory: int | None  # bytes; None where NVML cannot tell


@dataclass(frozen=True, slots=True)
class FieldValue:
    field_id: int
    nvml_return: int  # per-field result: NVML_SUCCESS or an error code
    value: int


class NvmlApi(Protocol):
    """The NVML calls NvmlProbe makes, named as in pynvml; each raises pynvml.NVMLError."""

    @property
    def nvlink_max_links(self) -> int:
        """``NVML_NVLINK_MAX_LINKS`` of these bindings: the links to enumerate."""
        ...

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str: ...
    def nvmlSystemGetCudaDriverVersion(self) -> int: ...
    def nvmlSystemGetProcessName(self, pid: int) -> str: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> object: ...
    def nvmlDeviceGetUUID(self, handle: object) -> str: ...
    def nvmlDeviceGetName(self, handle: object) -> str: ...
    def nvmlDeviceGetMinorNumber(self, handle: object) -> int: ...
    def nvmlDeviceGetPciInfo(self, handle: object) -> PciInfo: ...
    def nvmlDeviceGetMemoryInfo(self, handle: object) -> MemoryInfo: ...
    def nvmlDeviceGetEccMode(self, handle: object) -> Sequence[int]:
        """[current, pending], ``NVML_FEATURE_ENABLED`` = 1."""
        ...

    def nvmlDeviceGetTotalEccErrors(
        self, handle: object, error_type: int, counter_type: int
    ) -> int: ...
    def nvmlDeviceGetRemappedRows(self, handle: object) -> tuple[int, int, int, int]:
        """(correctable rows, uncorrectable rows, pending, failure occurred)."""
        ...

    def nvmlDeviceGetRetiredPages(self, handle: object, cause: int) -> Sequence[int]: ...
    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: object) -> int: ...
    def nvmlDeviceGetNvLinkState(self, handle: object, link: int) -> int: ...
    def nvmlDeviceGetNvLinkVersion(self, handle: object, link: int) -> int: ...
    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: object, link: int) -> PciInfo: ...
    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: object, link: int) -> int: ...
    def nvmlDeviceGetNvLinkErrorCounter(self, handle: object, link: int, counter: int) -> int: ...
    def nvmlDeviceGetGpuFabricInfo(self, handle: object) -> FabricInfo: ...
    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: object) -> int: ...
    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: object) -> int: ...
    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: object) -> int: ...
    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: object) -> int: ...
    def nvmlDeviceGetPcieReplayCounter(self, handle: object) -> int: ...
    def nvmlDeviceGetUtilizationRates(self, handle: object) -> Utilization: ...
    def nvmlDeviceGetMigMode(self, handle: object) -> Sequence[int]:
        """[current, pending], ``NVML_DEVICE_MIG_ENABLE`` = 1."""
        ...

    def nvmlDeviceGetComputeRunningProcesses(self, handle: object) -> Sequence[ProcessInfo]: ...
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: object) -> int: ...
    def nvmlDeviceGetFieldValues(
        self, handle: object, field_ids: Sequence[int]
    ) -> Sequence[FieldValue]: ...


def _text(raw: object) -> str:
    return raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)


def _is(exc: BaseException, *codes: int) -> bool:
    return isinstance(exc, pynvml.NVMLError) and _code(exc) in codes


class PynvmlApi:
    """:class:`NvmlApi` on the real library, through nvidia-ml-py."""

    @property
    def nvlink_max_links(self) -> int:
        return int(NVLINK_MAX_LINKS)

    def nvmlInit(self) -> None:
        pynvml.nvmlInit()

    def nvmlShutdown(self) -> None:
        pynvml.nvmlShutdown()

    def nvmlSystemGetDriverVersion(self) -> str:
        return _text(pynvml.nvmlSystemGetDriverVersion())

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return int(pynvml.nvmlSystemGetCudaDriverVersion())

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        return _text(pynvml.nvmlSystemGetProcessName(pid))

    def nvmlDeviceGetCount(self) -> int:
        return int(pynvml.nvmlDeviceGetCount())

    def nvmlDeviceGetHandleByIndex(self, index: int) -> object:
        handle: object = pynvml.nvmlDeviceGetHandleByIndex(index)
        return handle

    def nvmlDeviceGetUUID(self, handle: object) -> str:
        return _text(pynvml.nvmlDeviceGetUUID(handle))

    def nvmlDeviceGetName(self, handle: object) -> str:
        return _text(pynvml.nvmlDeviceGetName(handle))

    def nvmlDeviceGetMinorNumber(self, handle: object) -> int:
        return int(pynvml.nvmlDeviceGetMinorNumber(handle))

    def nvmlDeviceGetPciInfo(self, handle: object) -> PciInfo:
        return PciInfo(_text(pynvml.nvmlDeviceGetPciInfo(handle).busId))

    def nvmlDeviceGetMemoryInfo(self, handle: object) -> MemoryInfo:
        try:  # v2: "used" without the driver's reservation, as nvidia-smi prints it
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        except (pynvml.NVMLError, AttributeError) as exc:
            if not isinstance(exc, AttributeError) and not _is(exc, *_TOO_OLD):
                raise
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
        return MemoryInfo(int(mem.total), int(mem.used))

    def nvmlDeviceGetEccMode(self, handle: object) -> Sequence[int]:
        return [int(v) for v in pynvml.nvmlDeviceGetEccMode(handle)]

    def nvmlDeviceGetTotalEccErrors(
        self, handle: object, error_type: int, counter_type: int
    ) -> int:
        return int(pynvml.nvmlDeviceGetTotalEccErrors(handle, error_type, counter_type))

    def nvmlDeviceGetRemappedRows(self, handle: object) -> tuple[int, int, int, int]:
        corr, unc, pending, failure = pynvml.nvmlDeviceGetRemappedRows(handle)
        return int(corr), int(unc), int(pending), int(failure)

    def nvmlDeviceGetRetiredPages(self, handle: object, cause: int) -> Sequence[int]:
        return [int(p) for p in pynvml.nvmlDeviceGetRetiredPages(handle, cause)]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: object) -> int:
        return int(pynvml.nvmlDeviceGetRetiredPagesPendingStatus(handle))

    def nvmlDeviceGetNvLinkState(self, handle: object, link: int) -> int:
        return int(pynvml.nvmlDeviceGetNvLinkState(handle, link))

    def nvmlDeviceGetNvLinkVersion(self, handle: object, link: int) -> int:
        return int(pynvml.nvmlDeviceGetNvLinkVersion(handle, link))

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: object, link: int) -> PciInfo:
        return PciInfo(_text(pynvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId))

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: object, link: int) -> int:
        return int(pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link))

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: object, link: int, counter: int) -> int:
        return int(pynvml.nvmlDeviceGetNvLinkErrorCounter(handle, link, counter))

    def nvmlDeviceGetGpuFabricInfo(self, handle: object) -> FabricInfo:
        # v3 carries the health summary nvidia-smi prints (570+); older drivers refuse
        # its version with ARGUMENT_VERSION_MISMATCH, then v2 / the unversioned call.
        for name in ("c_nvmlGpuFabricInfo_v3_t", "c_nvmlGpuFabricInfoV_t"):
            versioned = getattr(pynvml, name, None)
            if versioned is None or not hasattr(pynvml, "nvmlDeviceGetGpuFabricInfoV"):
                continue
            info = versioned()
            try:
                pynvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
                summary = getattr(info, "healthSummary", None)
                return FabricInfo(int(info.state), int(info.status),
                                  None if summary is None else int(summary))
            except pynvml.NVMLError as exc:  # a driver before this version
                if not _is(exc, *_TOO_OLD):
                    raise
        info = pynvml.c_nvmlGpuFabricInfo_t()
        pynvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
        return FabricInfo(int(info.state), int(info.status))

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: object) -> int:
        return int(pynvml.nvmlDeviceGetCurrPcieLinkWidth(handle))

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: object) -> int:
        return int(pynvml.nvmlDeviceGetMaxPcieLinkWidth(handle))

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: object) -> int:
        return int(pynvml.nvmlDeviceGetCurrPcieLinkGeneration(handle))

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: object) -> int:
        return int(pynvml.nvmlDeviceGetMaxPcieLinkGeneration(handle))

    def nvmlDeviceGetPcieReplayCounter(self, handle: object) -> int:
        return int(pynvml.nvmlDeviceGetPcieReplayCounter(handle))

    def nvmlDeviceGetUtilizationRates(self, handle: object) -> Utilization:
        u = pynvml.nvmlDeviceGetUtilizationRates(handle)
        return Utilization(int(u.gpu), int(u.memory))

    def nvmlDeviceGetMigMode(self, handle: object) -> Sequence[int]:
        return [int(v) for v in pynvml.nvmlDeviceGetMigMode(handle)]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: object) -> Sequence[ProcessInfo]:
        try:
            procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)  # _v3
        except pynvml.NVMLLibraryMismatchError:  # a driver without _v3
            procs = pynvml.nvmlDeviceGetComputeRunningProcesses_v2(handle)
        out = []
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            out.append(ProcessInfo(int(p.pid), None if used is None else int(used)))
        return out

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: object) -> int:
        fn = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if fn is not None:
            try:
                return int(fn(handle))
            except pynvml.NVMLError as exc:
                if not _is(exc, *_TOO_OLD):
                    raise
        return int(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))

    def nvmlDeviceGetFieldValues(
        self, handle: object, field_ids: Sequence[int]
    ) -> Sequence[FieldValue]:
        out = []
        for fv in pynvml.nvmlDeviceGetFieldValues(handle, list(field_ids)):
            kind = int(fv.valueType)
            value = (
                fv.value.ullVal
                if kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
                else fv.value.sllVal
                if kind == pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG
                else fv.value.uiVal
            )
            out.append(FieldValue(int(fv.fieldId), int(fv.nvmlReturn), int(value)))
        return out


# --------------------------------------------------------------------------- the probe


class _GpuGone(Exception):
    """GPU_IS_LOST / RESET_REQUIRED: stop asking this GPU anything."""


#: The words ``health.checks.device.lost`` matches (NVML's own text for RESET_REQUIRED,
#: "GPU requires restart", would not match).
_GONE: Final = {ERROR_GPU_IS_LOST: "GPU is lost", ERROR_RESET_REQUIRED: "GPU requires reset"}


def _gone(errs: _Errors, code: int, call: str) -> _GpuGone:
    errs.gone = f"{_GONE[code]} ({call})"
    return _GpuGone(errs.gone)


class _Run:
    """One probe run's state, shared between the worker thread and the watchdog."""

    def __init__(self) -> None:
        self.doing = "nvmlInit"  # the call in progress, for the watchdog's message
        self.done = threading.Event()
        self.snapshot: NodeSnapshot | None = None
        self.crash: BaseException | None = None


@dataclass
class _Errors:
    """Per-GPU error records: one entry per (call, message), links gathered."""

    entries: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    gone: str | None = None

    def add(self, call: str, message: str, link: int | None = None) -> None:
        links = self.entries.setdefault((call, message), [])
        if link is not None:
            links.append(link)

    def render(self) -> tuple[str, ...]:
        out = [] if self.gone is None else [self.gone]
        for (call, message), links in self.entries.items():
            if is_mode_call(call):
                continue
            where = f" (link{'s' if len(links) > 1 else ''} {_ranges(links)})" if links else ""
            out.append(f"{call}: {message}{where}")
        return tuple(out)

    def modes(self) -> tuple[str, ...]:
        """The errors of the calls that read a mode (``Gpu.mode_errors``)."""
        return tuple(f"{call}: {message}" for call, message in self.entries
                     if is_mode_call(call))


def _ranges(numbers: list[int]) -> str:
    """[0, 1, 2, 5] → "0-2, 5"."""
    parts: list[str] = []
    for n in sorted(set(numbers)):
        if parts and parts[-1].split("-")[-1] == str(n - 1):
            parts[-1] = f"{parts[-1].split('-')[0]}-{n}"
        else:
            parts.append(str(n))
    return ", ".join(parts)


def _bool(value: int) -> bool:
    return value != 0


def _cuda(version: int) -> str:
    """12020 → "12.2", as nvidia-smi prints "CUDA Version"."""
    return f"{version // 1000}.{version % 1000 // 10}"


def _clock_events(mask: int) -> tuple[str, ...]:
    return tuple(name for name, bit in CLOCK_EVENT_BITS if mask & bit)


class NvmlProbe:
    """:class:`~slurm_ml.health.probe.GpuProbe` on NVML; see the module docstring."""

    def __init__(
        self,
        api: NvmlApi | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.api: NvmlApi = api if api is not None else PynvmlApi()
        self.timeout_s = timeout_s
        self._clock = clock
        self._stuck: tuple[_Run, threading.Thread, float] | None = None

    # ------------------------------------------------------------------ watchdog

    def snapshot(self, node: str, gpus: Collection[int] | None = None) -> NodeSnapshot:
        start = self._clock()
        if self._stuck is not None:
            run, thread, since = self._stuck
            if thread.is_alive():
                return self._failed(
                    node, start,
                    f"{WATCHDOG_PREFIX}: a previous NVML call ({run.doing}) has not returned "
                    f"for {start - since:.1f}s; NVML is hung, not probing again",
                )
            self._stuck = None
        run = _Run()
        wanted = None if gpus is None else sorted(set(gpus))
        thread = threading.Thread(
            target=self._work, args=(run, node, wanted), name=f"nvml-probe-{node}", daemon=True
        )
        thread.start()
        finished = run.done.wait(self.timeout_s)
        if not finished:
            self._stuck = (run, thread, start)
            return self._failed(
                node, start,
                f"{WATCHDOG_PREFIX}: NVML did not answer within {self.timeout_s:g}s (stuck in "
                f"{run.doing}); a hung driver usually means a wedged GPU: check dmesg for Xids",
            )
        if run.crash is not None:
            raise run.crash
        assert run.snapshot is not None
        return _with_elapsed(run.snapshot, self._clock() - start)

    def _failed(self, node: str, start: float, message: str) -> NodeSnapshot:
        return NodeSnapshot(
            node=node, gpus=(), source=SOURCE, elapsed_s=self._clock() - start, errors=(message,)
        )

    def _work(self, run: _Run, node: str, wanted: list[int] | None) -> None:
        try:
            run.snapshot = _Reader(self.api, run).node(node, wanted)
        except BaseException as exc:  # re-raised in the caller's thread
            run.crash = exc
        finally:
            run.done.set()


def _with_elapsed(snap: NodeSnapshot, elapsed: float) -> NodeSnapshot:
    return NodeSnapshot(
        node=snap.node, gpus=snap.gpus, driver_version=snap.driver_version,
        cuda_version=snap.cuda_version, topology=snap.topology, xids=snap.xids,
        source=snap.source, elapsed_s=elapsed, errors=snap.errors,
        attached_gpus=snap.attached_gpus,
    )


class _Reader:
    """The NVML work of one run (runs in the worker thread)."""

    def __init__(self, api: NvmlApi, run: _Run) -> None:
        self.api = api
        self.run = run

    def _call(
        self, errs: _Errors | None, name: str, fn: Callable[..., T], *args: object,
        link: int | None = None,
    ) -> Reading[T]:
        """``fn(*args)`` guarded: the value, NOT_SUPPORTED, or None with an error noted.
        With ``errs`` None (node-level calls), errors are logged only."""
        self.run.doing = name if link is None else f"{name} (link {link})"
        try:
            return fn(*args)
        except pynvml.NVMLError as exc:
            code = _code(exc)
            if code == ERROR_NOT_SUPPORTED:
                return NOT_SUPPORTED
            if errs is not None and code in (ERROR_GPU_IS_LOST, ERROR_RESET_REQUIRED):
                raise _gone(errs, code, name) from exc
            if errs is not None:
                errs.add(name, _message(exc), link)
            else:
                log.warning("nvml call=%s error=%s", name, _message(exc))
            return None

    # ------------------------------------------------------------------ node

    def node(self, node: str, wanted: list[int] | None) -> NodeSnapshot:
        api = self.api
        try:
            api.nvmlInit()
        except pynvml.NVMLError as exc:
            return NodeSnapshot(
                node=node, gpus=(), source=SOURCE,
                errors=(f"{INIT_ERROR_PREFIX}: {_message(exc)} (nvmlInit)",),
            )
        try:
            driver = self._call(None, "nvmlSystemGetDriverVersion", api.nvmlSystemGetDriverVersion)
            cuda = self._call(
                None, "nvmlSystemGetCudaDriverVersion", api.nvmlSystemGetCudaDriverVersion
            )
            self.run.doing = "nvmlDeviceGetCount"
            try:
                count = api.nvmlDeviceGetCount()
            except pynvml.NVMLError as exc:
                return NodeSnapshot(
                    node=node, gpus=(), source=SOURCE,
                    driver_version=driver, cuda_version=_cuda(cuda) if isinstance(cuda, int)
                    else cuda, errors=(f"nvmlDeviceGetCount: {_message(exc)}",),
                )
            indices = range(count) if wanted is None else [i for i in wanted if 0 <= i < count]
            gpus = tuple(self.gpu(i) for i in indices)
        finally:
            self.run.doing = "nvmlShutdown"
            try:
                api.nvmlShutdown()
            except pynvml.NVMLError as exc:
                log.warning("nvml call=nvmlShutdown error=%s", _message(exc))
        return NodeSnapshot(
            node=node, gpus=gpus, source=SOURCE, driver_version=driver,
            cuda_version=_cuda(cuda) if isinstance(cuda, int) else cuda, attached_gpus=count,
        )

    # ------------------------------------------------------------------ one GPU

    def gpu(self, index: int) -> Gpu:
        errs = _Errors()
        values: dict[str, Any] = {}
        self.run.doing = f"nvmlDeviceGetHandleByIndex({index})"
        try:
            handle = self.api.nvmlDeviceGetHandleByIndex(index)
        except pynvml.NVMLError as exc:
            what = _GONE.get(_code(exc) or 0, _message(exc))
            return Gpu(index=index, errors=(
                f"{what} (nvmlDeviceGetHandleByIndex, device handle unavailable)",))
        with contextlib.suppress(_GpuGone):
            self._read(handle, values, errs)
        return Gpu(index=index, errors=errs.render(), mode_errors=errs.modes(), **values)

    def _read(self, h: object, v: dict[str, Any], errs: _Errors) -> None:
        api, call = self.api, self._call
        v["uuid"] = call(errs, "nvmlDeviceGetUUID", api.nvmlDeviceGetUUID, h)
        pci = call(errs, "nvmlDeviceGetPciInfo", api.nvmlDeviceGetPciInfo, h)
        v["pci_bus_id"] = _bus(pci, errs, "nvmlDeviceGetPciInfo")
        v["name"] = call(errs, "nvmlDeviceGetName", api.nvmlDeviceGetName, h)
        v["minor_number"] = call(errs, "nvmlDeviceGetMinorNumber", api.nvmlDeviceGetMinorNumber, h)
        mem = call(errs, "nvmlDeviceGetMemoryInfo", api.nvmlDeviceGetMemoryInfo, h)
        v["memory_total_mb"] = mem.total // MIB if isinstance(mem, MemoryInfo) else mem
        v["memory_used_mb"] = mem.used // MIB if isinstance(mem, MemoryInfo) else mem
        mode = call(errs, "nvmlDeviceGetEccMode", api.nvmlDeviceGetEccMode, h)
        v["ecc_enabled"], v["ecc_pending"] = _pair(mode)
        v["ecc"] = self._ecc(h, errs)
        v["remapped_rows"] = self._remapped(h, errs)
        v["retired_pages"] = self._retired(h, errs)
        self._fields(h, v, errs)
        mig = call(errs, "nvmlDeviceGetMigMode", api.nvmlDeviceGetMigMode, h)
        v["mig_enabled"] = _pair(mig)[0]
        v["nvlinks"] = self._nvlinks(h, errs)
        fabric = call(errs, "nvmlDeviceGetGpuFabricInfo", api.nvmlDeviceGetGpuFabricInfo, h)
        v["fabric_state"], v["fabric_status"] = _fabric(fabric)
        v["fabric_health"] = _fabric_health(fabric)
        for key, name, fn in (
            ("pcie_width_current", "nvmlDeviceGetCurrPcieLinkWidth",
             api.nvmlDeviceGetCurrPcieLinkWidth),
            ("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth", api.nvmlDeviceGetMaxPcieLinkWidth),
            ("pcie_gen_current", "nvmlDeviceGetCurrPcieLinkGeneration",
             api.nvmlDeviceGetCurrPcieLinkGeneration),
            ("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration",
             api.nvmlDeviceGetMaxPcieLinkGeneration),
            ("pcie_replay_count", "nvmlDeviceGetPcieReplayCounter",
             api.nvmlDeviceGetPcieReplayCounter),
        ):
            v[key] = call(errs, name, fn, h)
        util = call(errs, "nvmlDeviceGetUtilizationRates", api.nvmlDeviceGetUtilizationRates, h)
        v["utilization_gpu_pct"] = float(util.gpu) if isinstance(util, Utilization) else util
        v["utilization_memory_pct"] = float(util.memory) if isinstance(util, Utilization) else util
        events = call(errs, "nvmlDeviceGetCurrentClocksEventReasons",
                      api.nvmlDeviceGetCurrentClocksEventReasons, h)
        v["clock_events_active"] = _clock_events(events) if isinstance(events, int) else events
        v["processes"] = self._processes(h, errs)

    def _ecc(self, h: object, errs: _Errors) -> EccCounts:
        def count(error_type: int, counter: int) -> Reading[int]:
            value: Reading[int] = self._call(
                errs, "nvmlDeviceGetTotalEccErrors", self.api.nvmlDeviceGetTotalEccErrors,
                h, error_type, counter)
            return value

        return EccCounts(
            volatile_corrected=count(ECC_CORRECTED, ECC_VOLATILE),
            volatile_uncorrected=count(ECC_UNCORRECTED, ECC_VOLATILE),
            aggregate_corrected=count(ECC_CORRECTED, ECC_AGGREGATE),
            aggregate_uncorrected=count(ECC_UNCORRECTED, ECC_AGGREGATE),
        )

    def _remapped(self, h: object, errs: _Errors) -> Reading[RemappedRows]:
        rows = self._call(errs, "nvmlDeviceGetRemappedRows", self.api.nvmlDeviceGetRemappedRows, h)
        if not isinstance(rows, tuple):
            return rows
        corr, unc, pending, failure = rows
        return RemappedRows(corr, unc, _bool(pending), _bool(failure))

    def _retired(self, h: object, errs: _Errors) -> Reading[RetiredPages]:
        api = self.api
        sbe = self._call(errs, "nvmlDeviceGetRetiredPages", api.nvmlDeviceGetRetiredPages, h,
                         RETIRED_SBE)
        dbe = self._call(errs, "nvmlDeviceGetRetiredPages", api.nvmlDeviceGetRetiredPages, h,
                         RETIRED_DBE)
        pending = self._call(errs, "nvmlDeviceGetRetiredPagesPendingStatus",
                             api.nvmlDeviceGetRetiredPagesPendingStatus, h)
        if sbe is NOT_SUPPORTED and dbe is NOT_SUPPORTED and pending is NOT_SUPPORTED:
            return NOT_SUPPORTED
        pages: RetiredPages = RetiredPages(
            single_bit=len(sbe) if isinstance(sbe, Sequence) else sbe,
            double_bit=len(dbe) if isinstance(dbe, Sequence) else dbe,
            pending=_bool(pending) if isinstance(pending, int) else pending,
        )
        return pages

    def _fields(self, h: object, v: dict[str, Any], errs: _Errors) -> None:
        """Reset status and recovery action, one nvmlDeviceGetFieldValues call."""
        got = self._call(errs, "nvmlDeviceGetFieldValues", self.api.nvmlDeviceGetFieldValues,
                         h, NVML_FIELDS)
        by_id: dict[int, Reading[int]] = {}
        for fid in NVML_FIELDS:
            if not isinstance(got, Sequence):
                by_id[fid] = got
                continue
            fv = next((f for f in got if f.field_id == fid), None)
            name = f"nvmlDeviceGetFieldValues({_FIELD_NAMES[fid]})"
            if fv is None:
                errs.add(name, "field not returned")
                by_id[fid] = None
            elif fv.nvml_return == SUCCESS:
                by_id[fid] = fv.value
            elif fv.nvml_return in (ERROR_NOT_SUPPORTED, ERROR_INVALID_ARGUMENT):
                by_id[fid] = NOT_SUPPORTED
            elif fv.nvml_return in (ERROR_GPU_IS_LOST, ERROR_RESET_REQUIRED):
                raise _gone(errs, fv.nvml_return, name)
            else:
                errs.add(name, _message(nvml_error(fv.nvml_return)))
                by_id[fid] = None
        reset, drain = by_id[FIELD_RESET_STATUS], by_id[FIELD_DRAIN_AND_RESET_STATUS]
        action = by_id[FIELD_RECOVERY_ACTION]
        v["reset_required"] = _bool(reset) if isinstance(reset, int) else reset
        v["drain_and_reset_recommended"] = _bool(drain) if isinstance(drain, int) else drain
        v["recovery_action"] = (RECOVERY_ACTIONS.get(action, f"Unknown ({action})")
                                if isinstance(action, int) else action)

    def _nvlinks(self, h: object, errs: _Errors) -> tuple[NvLink, ...] | Any:
        api, call = self.api, self._call
        links: list[NvLink] = []
        unsupported = failed = 0
        for k in range(api.nvlink_max_links):
            self.run.doing = f"nvmlDeviceGetNvLinkState (link {k})"
            try:
                state = api.nvmlDeviceGetNvLinkState(h, k)
            except pynvml.NVMLError as exc:
                code = _code(exc)
                if code == ERROR_INVALID_ARGUMENT:
                    break  # past this GPU's last link
                if code == ERROR_NOT_SUPPORTED:
                    unsupported += 1
                    continue
                if code in (ERROR_GPU_IS_LOST, ERROR_RESET_REQUIRED):
                    raise _gone(errs, code, "nvmlDeviceGetNvLinkState") from exc
                errs.add("nvmlDeviceGetNvLinkState", _message(exc), k)
                failed += 1
                links.append(NvLink(link=k))
                continue
            if not state:
                links.append(NvLink(link=k, active=False))
                continue
            remote = call(errs, "nvmlDeviceGetNvLinkRemotePciInfo",
                          api.nvmlDeviceGetNvLinkRemotePciInfo, h, k, link=k)
            kind = call(errs, "nvmlDeviceGetNvLinkRemoteDeviceType",
                        api.nvmlDeviceGetNvLinkRemoteDeviceType, h, k, link=k)

            def counter(c: int, k: int = k) -> Reading[int]:
                value: Reading[int] = call(errs, "nvmlDeviceGetNvLinkErrorCounter",
                                           api.nvmlDeviceGetNvLinkErrorCounter, h, k, c, link=k)
                return value

            links.append(NvLink(
                link=k,
                active=True,
                version=call(errs, "nvmlDeviceGetNvLinkVersion", api.nvmlDeviceGetNvLinkVersion,
                             h, k, link=k),
                remote_pci_bus_id=_bus(remote, errs, "nvmlDeviceGetNvLinkRemotePciInfo", k),
                remote_device_type=(REMOTE_DEVICE_TYPES.get(kind, f"UNKNOWN ({kind})")
                                    if isinstance(kind, int) else kind),
                replay_errors=counter(NVLINK_REPLAY),
                recovery_errors=counter(NVLINK_RECOVERY),
                crc_errors=counter(NVLINK_CRC_FLIT),
            ))
        if failed and failed == len(links):
            return None  # not one link state read: NVLink not looked at
        if not links and unsupported:
            return NOT_SUPPORTED
        return tuple(links)

    def _processes(self, h: object, errs: _Errors) -> tuple[GpuProcess, ...] | None:
        procs = self._call(errs, "nvmlDeviceGetComputeRunningProcesses",
                           self.api.nvmlDeviceGetComputeRunningProcesses, h)
        if procs is NOT_SUPPORTED:
            return None  # the snapshot has no NOT_SUPPORTED for processes
        if not isinstance(procs, Sequence):
            return None
        out = []
        for p in procs:
            self.run.doing = f"nvmlSystemGetProcessName({p.pid})"
            try:
                name = self.api.nvmlSystemGetProcessName(p.pid)
            except pynvml.NVMLError:  # the process exited meanwhile: a name is cosmetic
                name = ""
            used = None if p.used_gpu_memory is None else p.used_gpu_memory // MIB
            out.append(GpuProcess(pid=p.pid, used_memory_mb=used, name=name))
        return tuple(out)


def _pair(value: Reading[Sequence[int]]) -> tuple[Reading[bool], Reading[bool]]:
    """[current, pending] of an enable state."""
    if value is None or value is NOT_SUPPORTED:
        return value, value
    assert not isinstance(value, type(NOT_SUPPORTED))
    return _bool(value[0]), _bool(value[1])


def _bus(pci: object, errs: _Errors, call: str, link: int | None = None) -> Reading[str]:
    if not isinstance(pci, PciInfo):
        return pci  # type: ignore[return-value]
    bus = normalise_pci_bus_id(pci.bus_id)
    if bus is None:
        errs.add(call, f"unreadable bus id {pci.bus_id!r}", link)
    return bus


def _fabric(info: object) -> tuple[Reading[str], Reading[str]]:
    if not isinstance(info, FabricInfo):
        return info, info  # type: ignore[return-value]
    state = FABRIC_STATES.get(info.state)
    if state is None:  # NVML_GPU_FABRIC_STATE_NOT_SUPPORTED (0), or a value we do not know
        return (NOT_SUPPORTED, NOT_SUPPORTED) if info.state == 0 else (
            f"Unknown ({info.state})", NOT_SUPPORTED)
    if info.state != FABRIC_COMPLETED:
        return state, NOT_SUPPORTED  # "status must be checked only if state is complete"
    status = "Success" if info.status == SUCCESS else _message(nvml_error(info.status))
    return state, status


def _fabric_health(info: object) -> Reading[str]:
    """The health summary as nvidia-smi prints it; NOT_SUPPORTED for 0, None (not read)
    when the driver answered an older struct without the field."""
    if not isinstance(info, FabricInfo):
        return info  # type: ignore[return-value]
    if info.health_summary is None:
        return None
    if info.health_summary == 0:
        return NOT_SUPPORTED
    return FABRIC_HEALTH.get(info.health_summary, f"Unknown ({info.health_summary})")


if TYPE_CHECKING:  # mypy proves the implementations fit their Protocols

    def _is_probe(probe: NvmlProbe) -> GpuProbe:
        return probe

    def _is_api(api: PynvmlApi) -> NvmlApi:
        return api
