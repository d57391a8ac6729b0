"""FakeNvml: a stateful :class:`~slurm_ml.health.probe_nvml.NvmlApi` that answers from a
:class:`NodeSnapshot`, so that real captures (read by the replay parsers) drive NvmlProbe.

Each reading of the snapshot becomes what NVML would answer: a value is returned,
``NOT_SUPPORTED`` raises ``NVMLError_NotSupported``, ``None`` (the capture did not show
it) raises ``missing`` (default ``NVML_ERROR_NOT_FOUND``: "not read", which the checks
flag as the probe's gap; ``UNKNOWN`` would be a fault of the GPU; ``GPU_IS_LOST`` /
``RESET_REQUIRED`` for a GPU whose ``errors`` say so). NVLink: the links of
``Gpu.nvlinks`` answer, a gap between them is NOT_SUPPORTED, past the last one is
INVALID_ARGUMENT (as on hardware); ``nvlinks=()`` makes link 0 INVALID_ARGUMENT. The
exceptions are pynvml's own (``pynvml.NVMLError(code)``).

What a snapshot cannot say is approximated: every process is a compute process,
``ecc_pending`` is the pending ECC mode, MIG's pending mode equals its current one, and
the retired-page "addresses" are 0..n-1.

Knobs: :meth:`FakeNvml.fail` (one call, or ``"*"`` for every call, raises an NVML error
code, optionally for one GPU or link), :meth:`FakeNvml.hang` (a call blocks until the
returned event is set), :attr:`FakeNvml.init_error`. :attr:`FakeNvml.calls` records every
call as ``(name, gpu index or None, link or None)``; ``init_count``/``shutdown_count``
the library's life cycle.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TypeVar

from slurm_ml.health.probe_nvml import (
    CLOCK_EVENT_BITS,
    ECC_AGGREGATE,
    ECC_CORRECTED,
    ECC_UNCORRECTED,
    ECC_VOLATILE,
    ERROR_GPU_IS_LOST,
    ERROR_INVALID_ARGUMENT,
    ERROR_NOT_FOUND,
    ERROR_NOT_SUPPORTED,
    ERROR_RESET_REQUIRED,
    ERROR_UNINITIALIZED,
    ERROR_UNKNOWN,
    FABRIC_HEALTH,
    FABRIC_STATES,
    FIELD_DRAIN_AND_RESET_STATUS,
    FIELD_RECOVERY_ACTION,
    FIELD_RESET_STATUS,
    MIB,
    NVLINK_CRC_FLIT,
    NVLINK_MAX_LINKS,
    NVLINK_RECOVERY,
    NVLINK_REPLAY,
    RECOVERY_ACTIONS,
    REMOTE_DEVICE_TYPES,
    RETIRED_DBE,
    RETIRED_SBE,
    SUCCESS,
    FabricInfo,
    FieldValue,
    MemoryInfo,
    NvmlApi,
    PciInfo,
    ProcessInfo,
    Utilization,
    nvml_error,
)
from slurm_ml.health.snapshot import (
    NOT_SUPPORTED,
    Gpu,
    NodeSnapshot,
    NvLink,
    Reading,
    RemappedRows,
    RetiredPages,
)

__all__ = ["ANY_CALL", "FakeHandle", "FakeNvml"]

T = TypeVar("T")
ANY_CALL: Final = "*"
_LOST = re.compile(r"gpu is lost", re.IGNORECASE)
_RESET = re.compile(r"requires? (a )?reset|reset required", re.IGNORECASE)
_FABRIC_CODES: Final = {text.lower(): code for code, text in FABRIC_STATES.items()}
_FABRIC_HEALTH_CODES: Final = {text.lower(): code for code, text in FABRIC_HEALTH.items()}
_REMOTE_CODES: Final = {text: code for code, text in REMOTE_DEVICE_TYPES.items()}
_RECOVERY_CODES: Final = {text.lower(): code for code, text in RECOVERY_ACTIONS.items()}
_CLOCK_BITS: Final = dict(CLOCK_EVENT_BITS)


@dataclass(frozen=True, slots=True)
class FakeHandle:
    index: int


class FakeNvml:
    """See the module docstring."""

    def __init__(
        self,
        snapshot: NodeSnapshot,
        *,
        missing: int = ERROR_NOT_FOUND,
        max_links: int = NVLINK_MAX_LINKS,
        hang_limit_s: float = 60.0,
    ) -> None:
        self.snapshot = snapshot
        self.missing = missing
        self.max_links = max_links
        self.hang_limit_s = hang_limit_s
        self.init_error: int | None = None
        self.init_count = 0
        self.shutdown_count = 0
        self.calls: list[tuple[str, int | None, int | None]] = []
        self._refs = 0
        self._faults: dict[tuple[str, int | None, int | None], int] = {}
        self._hangs: dict[tuple[str, int | None], threading.Event] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ knobs

    def fail(self, call: str, code: int, *, gpu: int | None = None,
             link: int | None = None) -> None:
        """``call`` (or :data:`ANY_CALL`) raises NVML error ``code`` (on ``gpu``/``link``
        only, when given)."""
        self._faults[(call, gpu, link)] = code

    def hang(self, call: str, *, gpu: int | None = None) -> threading.Event:
        """``call`` blocks until the returned event is set (or ``hang_limit_s`` passes)."""
        event = threading.Event()
        self._hangs[(call, gpu)] = event
        return event

    def release(self) -> None:
        """Unblock every hung call."""
        for event in self._hangs.values():
            event.set()

    @property
    def initialized(self) -> bool:
        return self._refs > 0

    # ------------------------------------------------------------------ plumbing

    def _enter(self, name: str, handle: object = None, link: int | None = None) -> Gpu | None:
        gpu_index = handle.index if isinstance(handle, FakeHandle) else None
        with self._lock:
            self.calls.append((name, gpu_index, link))
        for key in ((name, gpu_index), (name, None)):
            event = self._hangs.get(key)
            if event is not None:
                event.wait(self.hang_limit_s)
        if name != "nvmlInit" and not self.initialized:
            raise nvml_error(ERROR_UNINITIALIZED)
        for call in (name, ANY_CALL):
            for g in (gpu_index, None):
                for k in (link, None):
                    code = self._faults.get((call, g, k))
                    if code is not None:
                        raise nvml_error(code)
        if gpu_index is None:
            return None
        return self._gpu(gpu_index)

    def _gpu(self, index: int) -> Gpu:
        for gpu in self.snapshot.gpus:
            if gpu.index == index:
                return gpu
        raise nvml_error(ERROR_NOT_FOUND)

    def _missing(self, gpu: Gpu | None) -> int:
        errors = " ".join(gpu.errors) if gpu is not None else ""
        if _LOST.search(errors):
            return ERROR_GPU_IS_LOST
        if _RESET.search(errors):
            return ERROR_RESET_REQUIRED
        return self.missing

    def _val(self, reading: Reading[T], gpu: Gpu | None) -> T:
        if reading is NOT_SUPPORTED:
            raise nvml_error(ERROR_NOT_SUPPORTED)
        if reading is None:
            raise nvml_error(self._missing(gpu))
        return reading

    def _all(self, readings: Sequence[object], gpu: Gpu) -> None:
        """One NVML call answering several readings: NOT_SUPPORTED if any is, the
        missing error if any was not shown."""
        if any(r is NOT_SUPPORTED for r in readings):
            raise nvml_error(ERROR_NOT_SUPPORTED)
        if any(r is None for r in readings):
            raise nvml_error(self._missing(gpu))

    def _link(self, handle: object, link: int, name: str) -> tuple[Gpu, NvLink]:
        gpu = self._enter(name, handle, link)
        assert gpu is not None
        links = self._val(gpu.nvlinks, gpu)
        by_link = {nl.link: nl for nl in links}
        if link in by_link:
            return gpu, by_link[link]
        if not by_link or link > max(by_link) or link >= self.max_links:
            raise nvml_error(ERROR_INVALID_ARGUMENT)
        raise nvml_error(ERROR_NOT_SUPPORTED)

    # ------------------------------------------------------------------ system

    @property
    def nvlink_max_links(self) -> int:
        return self.max_links

    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        self.init_count += 1
        if self.init_error is not None:
            raise nvml_error(self.init_error)
        self._refs += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.shutdown_count += 1
        self._refs -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self._val(self.snapshot.driver_version, None)

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion")
        text = self._val(self.snapshot.cuda_version, None)
        major, _, minor = text.partition(".")
        return int(major) * 1000 + int(minor or 0) * 10

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        self._enter("nvmlSystemGetProcessName")
        for gpu in self.snapshot.gpus:
            for p in gpu.processes or ():
                if p.pid == pid:
                    return p.name
        raise nvml_error(ERROR_NOT_FOUND)

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        attached = self.snapshot.attached_gpus
        return attached if isinstance(attached, int) else len(self.snapshot.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> object:
        self._enter("nvmlDeviceGetHandleByIndex", FakeHandle(index))
        return FakeHandle(index)

    # ------------------------------------------------------------------ device

    def _device(self, name: str, handle: object) -> Gpu:
        gpu = self._enter(name, handle)
        assert gpu is not None
        return gpu

    def nvmlDeviceGetUUID(self, handle: object) -> str:
        gpu = self._device("nvmlDeviceGetUUID", handle)
        return self._val(gpu.uuid, gpu)

    def nvmlDeviceGetName(self, handle: object) -> str:
        gpu = self._device("nvmlDeviceGetName", handle)
        return self._val(gpu.name, gpu)

    def nvmlDeviceGetMinorNumber(self, handle: object) -> int:
        gpu = self._device("nvmlDeviceGetMinorNumber", handle)
        return self._val(gpu.minor_number, gpu)

    def nvmlDeviceGetPciInfo(self, handle: object) -> PciInfo:
        gpu = self._device("nvmlDeviceGetPciInfo", handle)
        return PciInfo(self._val(gpu.pci_bus_id, gpu).upper())  # NVML prints upper case

    def nvmlDeviceGetMemoryInfo(self, handle: object) -> MemoryInfo:
        gpu = self._device("nvmlDeviceGetMemoryInfo", handle)
        self._all((gpu.memory_total_mb, gpu.memory_used_mb), gpu)
        total, used = self._val(gpu.memory_total_mb, gpu), self._val(gpu.memory_used_mb, gpu)
        return MemoryInfo(total * MIB, used * MIB)

    def nvmlDeviceGetEccMode(self, handle: object) -> Sequence[int]:
        gpu = self._device("nvmlDeviceGetEccMode", handle)
        self._all((gpu.ecc_enabled, gpu.ecc_pending), gpu)
        return [int(bool(gpu.ecc_enabled)), int(bool(gpu.ecc_pending))]

    def nvmlDeviceGetTotalEccErrors(
        self, handle: object, error_type: int, counter_type: int
    ) -> int:
        gpu = self._device("nvmlDeviceGetTotalEccErrors", handle)
        e = gpu.ecc
        table = {
            (ECC_CORRECTED, ECC_VOLATILE): e.volatile_corrected,
            (ECC_UNCORRECTED, ECC_VOLATILE): e.volatile_uncorrected,
            (ECC_CORRECTED, ECC_AGGREGATE): e.aggregate_corrected,
            (ECC_UNCORRECTED, ECC_AGGREGATE): e.aggregate_uncorrected,
        }
        if (error_type, counter_type) not in table:
            raise nvml_error(ERROR_INVALID_ARGUMENT)
        return self._val(table[(error_type, counter_type)], gpu)

    def nvmlDeviceGetRemappedRows(self, handle: object) -> tuple[int, int, int, int]:
        gpu = self._device("nvmlDeviceGetRemappedRows", handle)
        rows = self._val(gpu.remapped_rows, gpu)
        assert isinstance(rows, RemappedRows)
        values = (rows.correctable, rows.uncorrectable, rows.pending, rows.failure)
        self._all(values, gpu)
        return (self._val(rows.correctable, gpu), self._val(rows.uncorrectable, gpu),
                int(bool(rows.pending)), int(bool(rows.failure)))

    def _pages(self, gpu: Gpu) -> RetiredPages:
        pages = self._val(gpu.retired_pages, gpu)
        assert isinstance(pages, RetiredPages)
        return pages

    def nvmlDeviceGetRetiredPages(self, handle: object, cause: int) -> Sequence[int]:
        gpu = self._device("nvmlDeviceGetRetiredPages", handle)
        pages = self._pages(gpu)
        if cause == RETIRED_SBE:
            return list(range(self._val(pages.single_bit, gpu)))
        if cause == RETIRED_DBE:
            return list(range(self._val(pages.double_bit, gpu)))
        raise nvml_error(ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: object) -> int:
        gpu = self._device("nvmlDeviceGetRetiredPagesPendingStatus", handle)
        return int(self._val(self._pages(gpu).pending, gpu))

    def nvmlDeviceGetNvLinkState(self, handle: object, link: int) -> int:
        gpu, nl = self._link(handle, link, "nvmlDeviceGetNvLinkState")
        return int(self._val(nl.active, gpu))

    def nvmlDeviceGetNvLinkVersion(self, handle: object, link: int) -> int:
        gpu, nl = self._link(handle, link, "nvmlDeviceGetNvLinkVersion")
        return self._val(nl.version, gpu)

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: object, link: int) -> PciInfo:
        gpu, nl = self._link(handle, link, "nvmlDeviceGetNvLinkRemotePciInfo")
        return PciInfo(self._val(nl.remote_pci_bus_id, gpu).upper())

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: object, link: int) -> int:
        gpu, nl = self._link(handle, link, "nvmlDeviceGetNvLinkRemoteDeviceType")
        return _REMOTE_CODES.get(self._val(nl.remote_device_type, gpu).upper(), 0xFF)

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: object, link: int, counter: int) -> int:
        gpu, nl = self._link(handle, link, "nvmlDeviceGetNvLinkErrorCounter")
        table = {NVLINK_REPLAY: nl.replay_errors, NVLINK_RECOVERY: nl.recovery_errors,
                 NVLINK_CRC_FLIT: nl.crc_errors}
        if counter not in table:
            raise nvml_error(ERROR_NOT_SUPPORTED)
        return self._val(table[counter], gpu)

    def nvmlDeviceGetGpuFabricInfo(self, handle: object) -> FabricInfo:
        gpu = self._device("nvmlDeviceGetGpuFabricInfo", handle)
        state = self._val(gpu.fabric_state, gpu)
        code = _FABRIC_CODES.get(state.strip().lower())
        if code is None:
            raise nvml_error(self._missing(gpu))
        status = gpu.fabric_status
        ok = not isinstance(status, str) or status.strip().lower() == "success"
        health = gpu.fabric_health
        summary = (None if health is None else 0 if not isinstance(health, str)
                   else _FABRIC_HEALTH_CODES.get(health.strip().lower(), 0))
        return FabricInfo(code, SUCCESS if ok else ERROR_UNKNOWN, summary)

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: object) -> int:
        gpu = self._device("nvmlDeviceGetCurrPcieLinkWidth", handle)
        return self._val(gpu.pcie_width_current, gpu)

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: object) -> int:
        gpu = self._device("nvmlDeviceGetMaxPcieLinkWidth", handle)
        return self._val(gpu.pcie_width_max, gpu)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: object) -> int:
        gpu = self._device("nvmlDeviceGetCurrPcieLinkGeneration", handle)
        return self._val(gpu.pcie_gen_current, gpu)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: object) -> int:
        gpu = self._device("nvmlDeviceGetMaxPcieLinkGeneration", handle)
        return self._val(gpu.pcie_gen_max, gpu)

    def nvmlDeviceGetPcieReplayCounter(self, handle: object) -> int:
        gpu = self._device("nvmlDeviceGetPcieReplayCounter", handle)
        return self._val(gpu.pcie_replay_count, gpu)

    def nvmlDeviceGetUtilizationRates(self, handle: object) -> Utilization:
        gpu = self._device("nvmlDeviceGetUtilizationRates", handle)
        self._all((gpu.utilization_gpu_pct, gpu.utilization_memory_pct), gpu)
        return Utilization(int(self._val(gpu.utilization_gpu_pct, gpu)),
                           int(self._val(gpu.utilization_memory_pct, gpu)))

    def nvmlDeviceGetMigMode(self, handle: object) -> Sequence[int]:
        gpu = self._device("nvmlDeviceGetMigMode", handle)
        mode = int(self._val(gpu.mig_enabled, gpu))
        return [mode, mode]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: object) -> Sequence[ProcessInfo]:
        gpu = self._device("nvmlDeviceGetComputeRunningProcesses", handle)
        if gpu.processes is None:
            raise nvml_error(self._missing(gpu))
        return [ProcessInfo(p.pid, p.used_memory_mb * MIB
                            if isinstance(p.used_memory_mb, int) else None)
                for p in gpu.processes]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: object) -> int:
        gpu = self._device("nvmlDeviceGetCurrentClocksEventReasons", handle)
        mask = 0
        for name in self._val(gpu.clock_events_active, gpu):
            mask |= _CLOCK_BITS.get(name, 0)
        return mask

    def nvmlDeviceGetFieldValues(
        self, handle: object, field_ids: Sequence[int]
    ) -> Sequence[FieldValue]:
        gpu = self._device("nvmlDeviceGetFieldValues", handle)
        out = []
        for fid in field_ids:
            reading: Reading[int]
            if fid == FIELD_RESET_STATUS:
                reading = _as_int(gpu.reset_required)
            elif fid == FIELD_DRAIN_AND_RESET_STATUS:
                reading = _as_int(gpu.drain_and_reset_recommended)
            elif fid == FIELD_RECOVERY_ACTION:
                action = gpu.recovery_action
                reading = (_RECOVERY_CODES.get(action.strip().lower())
                           if isinstance(action, str) else action)
            else:
                out.append(FieldValue(fid, ERROR_INVALID_ARGUMENT, 0))
                continue
            if reading is NOT_SUPPORTED:
                out.append(FieldValue(fid, ERROR_NOT_SUPPORTED, 0))
            elif reading is None:
                out.append(FieldValue(fid, self._missing(gpu), 0))
            else:
                out.append(FieldValue(fid, SUCCESS, int(reading)))
        return out


def _as_int(reading: Reading[bool]) -> Reading[int]:
    return int(reading) if isinstance(reading, bool) else reading


if TYPE_CHECKING:  # mypy proves the fake fits the Protocol

    def _is_api(fake: FakeNvml) -> NvmlApi:
        return fake
