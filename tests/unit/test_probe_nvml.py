"""NvmlProbe driven by FakeNvml: round trips over real captures, watchdog, error mapping.

The round-trip rows are real captures in data/gpu (see SOURCES.md): each is read
with the replay parser, served by FakeNvml, read back through NvmlProbe, and must come
out equal on every field NVML produces. Faults (hangs, NVML error codes) are injected
through FakeNvml's knobs; the snapshots they act on are still the real captures, except
where a test says "constructed".
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from slurm_ml.health.checks import Expectations, Severity, Thresholds, check_node
from slurm_ml.health.fake_nvml import ANY_CALL, FakeNvml
from slurm_ml.health.field_kinds import is_mode_call
from slurm_ml.health.probe import GpuProbe
from slurm_ml.health.probe_nvml import (
    ERROR_CORRUPTED_INFOROM,
    ERROR_GPU_IS_LOST,
    ERROR_INVALID_ARGUMENT,
    ERROR_LIBRARY_NOT_FOUND,
    ERROR_NO_PERMISSION,
    ERROR_NOT_FOUND,
    ERROR_NOT_SUPPORTED,
    ERROR_RESET_REQUIRED,
    ERROR_TIMEOUT,
    ERROR_UNKNOWN,
    INIT_ERROR_PREFIX,
    SOURCE,
    WATCHDOG_PREFIX,
    NvmlProbe,
    nvml_error,
)
from slurm_ml.health.replay.nvlink import parse_nvlink_status
from slurm_ml.health.replay.smi_q import parse_smi_q
from slurm_ml.health.snapshot import (
    NOT_SUPPORTED,
    Gpu,
    GpuProcess,
    NodeSnapshot,
    NvLink,
    RemappedRows,
)

GPU_DATA = Path(__file__).resolve().parents[2] / "data" / "gpu"
NS = NOT_SUPPORTED

#: Gpu fields NvmlProbe does not read (nvidia-smi -q only, or other captures).
NOT_FROM_NVML = frozenset({"sram_threshold_exceeded", "channel_repair_pending",
                           "tpc_repair_pending", "unrepairable_memory"})
#: The NVML call behind each Gpu field: a probe error must name a call whose field the
#: capture did not show.
CALL_OF = {
    "uuid": "nvmlDeviceGetUUID", "name": "nvmlDeviceGetName",
    "minor_number": "nvmlDeviceGetMinorNumber", "pci_bus_id": "nvmlDeviceGetPciInfo",
    "memory_total_mb": "nvmlDeviceGetMemoryInfo", "memory_used_mb": "nvmlDeviceGetMemoryInfo",
    "ecc_enabled": "nvmlDeviceGetEccMode", "ecc_pending": "nvmlDeviceGetEccMode",
    "ecc": "nvmlDeviceGetTotalEccErrors", "remapped_rows": "nvmlDeviceGetRemappedRows",
    "retired_pages": "nvmlDeviceGetRetiredPages nvmlDeviceGetRetiredPagesPendingStatus",
    "reset_required": "nvmlDeviceGetFieldValues(NVML_FI_DEV_RESET_STATUS)",
    "drain_and_reset_recommended": "nvmlDeviceGetFieldValues(NVML_FI_DEV_DRAIN_AND_RESET_STATUS)",
    "recovery_action": "nvmlDeviceGetFieldValues(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)",
    "mig_enabled": "nvmlDeviceGetMigMode", "nvlinks": "nvmlDeviceGetNvLinkState",
    "fabric_state": "nvmlDeviceGetGpuFabricInfo", "fabric_health": "nvmlDeviceGetGpuFabricInfo",
    "pcie_width_current": "nvmlDeviceGetCurrPcieLinkWidth",
    "pcie_width_max": "nvmlDeviceGetMaxPcieLinkWidth",
    "pcie_gen_current": "nvmlDeviceGetCurrPcieLinkGeneration",
    "pcie_gen_max": "nvmlDeviceGetMaxPcieLinkGeneration",
    "pcie_replay_count": "nvmlDeviceGetPcieReplayCounter",
    "utilization_gpu_pct": "nvmlDeviceGetUtilizationRates",
    "utilization_memory_pct": "nvmlDeviceGetUtilizationRates",
    "clock_events_active": "nvmlDeviceGetCurrentClocksEventReasons",
    "processes": "nvmlDeviceGetComputeRunningProcesses",
}


def capture(rel: str) -> NodeSnapshot:
    return parse_smi_q((GPU_DATA / rel).read_text(), "node1")


def probe_of(snap: NodeSnapshot, *, missing: int = ERROR_NOT_FOUND,
             timeout_s: float = 4.0) -> tuple[NvmlProbe, FakeNvml]:
    """NvmlProbe on FakeNvml(snap); ``missing``: what a value the capture lacks raises."""
    fake = FakeNvml(snap, missing=missing)
    return NvmlProbe(fake, timeout_s=timeout_s), fake


def none_fields(gpu: Gpu) -> set[str]:
    """Fields (ECC counters folded into "ecc") that the capture did not show."""
    out = {f.name for f in dataclasses.fields(gpu) if getattr(gpu, f.name) is None}
    if any(getattr(gpu.ecc, f.name) is None for f in dataclasses.fields(gpu.ecc)):
        out.add("ecc")
    return out


def comparable(gpu: Gpu) -> Gpu:
    # A capture without a Fabric Health section reads None; through NVML the same GPU's
    # fabric call says NOT_SUPPORTED for all of it: the checks treat both alike.
    health = None if gpu.fabric_health is NS else gpu.fabric_health
    return dataclasses.replace(gpu, errors=(), mode_errors=(), sram_threshold_exceeded=None,
                               channel_repair_pending=None, tpc_repair_pending=None,
                               unrepairable_memory=None, fabric_health=health)


# --------------------------------------------------------------------------- round trip


@dataclass(frozen=True)
class Row:
    capture: str
    facts: dict[str, object] = field(default_factory=dict)  # "g0.attr": value, checked too


ROUND_TRIP = {
    "a100_80gb_mig_xml": Row("smi-q/telegraf_a100-sxm4-80gb_mig_535.54.03_q.xml",
                             {"g0.mig_enabled": True, "g0.remapped_rows": NS,
                              "g0.utilization_gpu_pct": NS, "attached_gpus": 4}),
    "a100_40gb_mig_xml": Row("smi-q/netdata_a100-sxm4-40gb_mig_510.47.03_q.xml",
                             {"g0.mig_enabled": True, "g0.fabric_state": None}),
    "h100x8_535_161_text": Row("smi-q/gpud_h100x8_535.161.08_q.txt",
                               {"g0.fabric_state": "Completed", "g0.fabric_status": "Success",
                                "g0.clock_events_active": ("hw_slowdown",
                                                           "hw_power_brake_slowdown"),
                                "g7.pci_bus_id": "00000000:db:00.0"}),
    "h100x8_535_183_text": Row("smi-q/gpud_h100x8_535.183.01_q.txt",
                               {"g0.reset_required": False}),
    "t4_xml": Row("smi-q/telegraf_tesla-t4_515.105.01_q.xml",
                  {"g0.remapped_rows": NS, "g0.processes": 2}),
    "p100_xml": Row("ecc/netdata_tesla-p100_510.47.03_q_aggregate_sbe3.xml",
                    {"g0.ecc.aggregate_corrected": 3, "g0.remapped_rows": NS}),
    "a10_remap_pending_text": Row("smi-q/gpud_a10_535.129.03_q_remap_pending.txt",
                                  {"g0.remapped_rows": RemappedRows(0, 4, True, False)}),
    "rtx4090x8_processes_text": Row("smi-q/gpud_rtx4090x8_535.154.05_q.txt",
                                    {"g0.processes": 1, "g0.ecc.volatile_uncorrected": NS}),
    "h800_excerpt_text": Row("smi-q/llmaction_h800_q_gpu0_525.105.17.txt",
                             {"attached_gpus": 8}),
    "rtx_pro6000_590_recovery_xml": Row(
        "smi-q/telegraf_rtxpro6000-blackwell-maxq_590.44.01_q.xml",
        {"g0.recovery_action": "None", "g0.reset_required": None}),
    "azhc_page_retirement_bad_text": Row("ecc/azhc_8gpu_q_page_retirement_bad.txt",
                                         {"g0.retired_pages.single_bit": 60}),
    "a100_remap_pending_excerpt_text": Row("ecc/mleng_a100x8_q_excerpt_remap_pending.txt",
                                           {"g0.remapped_rows.pending": True}),
}


def _fact(snap: NodeSnapshot, path: str) -> object:
    head, _, rest = path.partition(".")
    if not head.startswith("g") or not head[1:].isdigit():
        return getattr(snap, path)
    value: object = snap.gpus[int(head[1:])]
    for part in rest.split("."):
        value = getattr(value, part)
    return len(value) if part == "processes" and isinstance(value, tuple) else value


@pytest.mark.parametrize("name", sorted(ROUND_TRIP))
def test_round_trip_capture_through_nvml(name: str) -> None:
    row = ROUND_TRIP[name]
    replay = capture(row.capture)
    probe, fake = probe_of(replay)
    got = probe.snapshot("node1", gpus=[g.index for g in replay.gpus])

    assert got.source == SOURCE and got.errors == () and got.elapsed_s is not None
    for attr in ("node", "driver_version", "cuda_version", "attached_gpus"):
        assert getattr(got, attr) == getattr(replay, attr), attr
    assert len(got.gpus) == len(replay.gpus)
    for want, have in zip(replay.gpus, got.gpus, strict=True):
        assert comparable(have) == comparable(want)
        # Every error names the call of a field the capture did not show, and each such
        # field gave one (the fake answers "Not Found" for it).
        missing = none_fields(want) - NOT_FROM_NVML - {"errors", "fabric_status", "fabric_health"}
        calls = {e.split(":")[0].split(" (")[0] for e in have.errors + have.mode_errors}
        assert all(is_mode_call(e.split(":")[0]) for e in have.mode_errors)
        assert calls == {c for f in missing for c in CALL_OF[f].split()}, have.errors
    for path, value in row.facts.items():
        assert _fact(got, path) == value, path
    assert fake.init_count == fake.shutdown_count == 1 and not fake.initialized


@pytest.mark.parametrize("name", ["h100x8_535_161_text", "a10_remap_pending_text",
                                  "azhc_page_retirement_bad_text", "t4_xml"])
def test_checks_see_the_same_through_nvml_as_through_replay(name: str) -> None:
    replay = capture(ROUND_TRIP[name].capture)
    got = probe_of(replay)[0].snapshot("node1")
    exp = Expectations(gpu_count=len(replay.gpus))

    def verdicts(snap: NodeSnapshot) -> set[tuple[str, Severity, int | None]]:
        return {(f.check_id, f.severity, f.gpu) for f in check_node(snap, exp, Thresholds())
                # the fake answers "Not Found" for what the capture does not show,
                # mode queries included: flags of what was not read, not verdicts
                if f.check_id not in ("probe.gpu_error", "probe.missing",
                                      "gpu.mode_unreadable")}

    assert verdicts(got) == verdicts(replay)
    if name == "a10_remap_pending_text":
        assert ("remap.pending", Severity.DRAIN_AFTER_JOB, 0) in verdicts(got)


def test_every_parseable_capture_round_trips() -> None:
    """Beyond the named table: no capture the parser reads loses a value through NVML."""
    seen = 0
    for path in sorted(GPU_DATA.glob("*/*_q*")):
        try:
            replay = parse_smi_q(path.read_text(), "node1")
        except ValueError:
            continue  # the corrupted capture and the plain-table captures
        got = probe_of(replay)[0].snapshot("node1", gpus=[g.index for g in replay.gpus])
        assert [comparable(g) for g in got.gpus] == [comparable(g) for g in replay.gpus], path
        seen += 1
    assert seen >= 18


def test_nvml_probe_is_a_gpu_probe() -> None:
    assert isinstance(NvmlProbe(FakeNvml(capture(ROUND_TRIP["t4_xml"].capture))), GpuProbe)


def test_job_gpus_restrict_detail_not_the_count() -> None:
    replay = capture(ROUND_TRIP["h100x8_535_161_text"].capture)
    probe, fake = probe_of(replay)
    got = probe.snapshot("node1", gpus=[5, 2, 5, 9])
    assert [g.index for g in got.gpus] == [2, 5]
    assert got.attached_gpus == 8
    assert {c[1] for c in fake.calls if c[1] is not None} == {2, 5}


# --------------------------------------------------------------------------- watchdog


@pytest.fixture
def h100() -> NodeSnapshot:
    return capture(ROUND_TRIP["h100x8_535_161_text"].capture)


def quiet(snap: NodeSnapshot) -> tuple[NvmlProbe, FakeNvml]:
    """Values the capture does not show read NOT_SUPPORTED: a baseline without errors."""
    return probe_of(snap, missing=ERROR_NOT_SUPPORTED)


@pytest.fixture
def released() -> Iterator[list[FakeNvml]]:
    """Fakes whose hung calls are released after the test (their threads then end)."""
    fakes: list[FakeNvml] = []
    yield fakes
    for fake in fakes:
        fake.release()


@pytest.mark.parametrize(("call", "gpu"), [("nvmlDeviceGetRemappedRows", 3),
                                           ("nvmlInit", None),
                                           ("nvmlDeviceGetNvLinkState", 0)])
def test_watchdog_returns_probe_error_within_budget(
    h100: NodeSnapshot, released: list[FakeNvml], call: str, gpu: int | None
) -> None:
    probe, fake = probe_of(h100, timeout_s=0.3)
    released.append(fake)
    fake.hang(call, gpu=gpu)
    t0 = time.monotonic()
    snap = probe.snapshot("node1")
    took = time.monotonic() - t0

    assert took < 0.3 + 0.5
    assert snap.gpus == ()  # what was read before the hang is not trusted
    assert len(snap.errors) == 1
    assert snap.errors[0].startswith(f"{WATCHDOG_PREFIX}: NVML did not answer within 0.3s")
    assert call in snap.errors[0]
    assert snap.elapsed_s is not None and 0.3 <= snap.elapsed_s < 0.8
    findings = check_node(snap, Expectations(gpu_count=8), Thresholds())
    assert ("probe.error", Severity.DRAIN_NOW) in {(f.check_id, f.severity) for f in findings}


def test_watchdog_does_not_pile_up_threads_on_a_hung_nvml(
    h100: NodeSnapshot, released: list[FakeNvml]
) -> None:
    probe, fake = probe_of(h100, timeout_s=0.2)
    released.append(fake)
    gate = fake.hang("nvmlDeviceGetUUID", gpu=1)
    probe.snapshot("node1")
    before = threading.active_count()
    t0 = time.monotonic()
    again = probe.snapshot("node1")
    assert time.monotonic() - t0 < 0.1  # answered at once, no new thread
    assert threading.active_count() <= before
    assert "has not returned" in again.errors[0] and "nvmlDeviceGetUUID" in again.errors[0]

    gate.set()  # NVML comes back: the stuck run finishes, the next probe works
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        snap = probe.snapshot("node1")
        if not snap.errors:
            break
        time.sleep(0.05)
    assert snap.errors == () and len(snap.gpus) == 8


def test_a_bug_in_the_probe_is_raised_not_hidden(h100: NodeSnapshot) -> None:
    probe, fake = probe_of(h100)

    def broken(handle: object) -> str:
        raise KeyError("bug")

    fake.nvmlDeviceGetName = broken  # type: ignore[method-assign]
    with pytest.raises(KeyError):
        probe.snapshot("node1")


def test_timeout_must_be_positive(h100: NodeSnapshot) -> None:
    with pytest.raises(ValueError):
        NvmlProbe(FakeNvml(h100), timeout_s=0)


# --------------------------------------------------------------------------- error mapping


@dataclass(frozen=True)
class Fault:
    call: str
    code: int
    field: str  # the Gpu attribute it lands in ("" for none)
    value: object  # what that attribute reads
    error: str | None  # the Gpu.errors entry (None: no entry)
    check: str | None = None  # the check it must trigger on GPU 1, if any
    severity: Severity = Severity.DRAIN_NOW  # and the severity it must have


FAULTS = {
    "not_supported": Fault("nvmlDeviceGetRemappedRows", ERROR_NOT_SUPPORTED,
                           "remapped_rows", NS, None),
    "unknown": Fault("nvmlDeviceGetRemappedRows", ERROR_UNKNOWN, "remapped_rows", None,
                     "nvmlDeviceGetRemappedRows: Unknown Error", "gpu.error_state"),
    "timeout": Fault("nvmlDeviceGetPcieReplayCounter", ERROR_TIMEOUT, "pcie_replay_count",
                     None, "nvmlDeviceGetPcieReplayCounter: Timeout", "gpu.error_state"),
    "no_permission": Fault("nvmlDeviceGetComputeRunningProcesses", ERROR_NO_PERMISSION,
                           "processes", None,
                           "nvmlDeviceGetComputeRunningProcesses: Insufficient Permissions"),
    "gpu_lost": Fault("nvmlDeviceGetRemappedRows", ERROR_GPU_IS_LOST, "remapped_rows", None,
                      "GPU is lost (nvmlDeviceGetRemappedRows)", "gpu.lost"),
    "reset_required": Fault("nvmlDeviceGetTotalEccErrors", ERROR_RESET_REQUIRED, "ecc", None,
                            "GPU requires reset (nvmlDeviceGetTotalEccErrors)", "gpu.lost"),
    "inforom": Fault("nvmlDeviceGetTotalEccErrors", ERROR_CORRUPTED_INFOROM,
                     "ecc.volatile_uncorrected", None,
                     "nvmlDeviceGetTotalEccErrors: Corrupted infoROM", "gpu.inforom",
                     Severity.DRAIN_AFTER_JOB),
    "handle_lost": Fault("nvmlDeviceGetHandleByIndex", ERROR_GPU_IS_LOST, "uuid", None,
                         "GPU is lost (nvmlDeviceGetHandleByIndex, device handle unavailable)",
                         "gpu.lost"),
    "lost_on_a_link": Fault("nvmlDeviceGetNvLinkState", ERROR_GPU_IS_LOST, "nvlinks", None,
                            "GPU is lost (nvmlDeviceGetNvLinkState)", "gpu.lost"),
}


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_nvml_errors_map_to_readings_and_gpu_errors(h100: NodeSnapshot, name: str) -> None:
    f = FAULTS[name]
    probe, fake = quiet(h100)
    fake.fail(f.call, f.code, gpu=1)
    snap = probe.snapshot("node1")

    assert snap.errors == () and len(snap.gpus) == 8
    gpu = snap.gpus[1]
    value: object = gpu
    for part in f.field.split("."):
        value = getattr(value, part)
    if f.field == "ecc":
        assert gpu.ecc.volatile_corrected is None  # stopped at the first ECC call
    else:
        assert value == f.value
    assert gpu.errors == (() if f.error is None else (f.error,))
    assert snap.gpus[0].errors == snap.gpus[2].errors == ()  # other GPUs unaffected
    assert snap.gpus[2] == quiet(h100)[0].snapshot("node1").gpus[2]
    if f.code in (ERROR_GPU_IS_LOST, ERROR_RESET_REQUIRED):
        # a lost GPU is not asked anything more
        last = max(i for i, c in enumerate(fake.calls) if c[1] == 1)
        assert fake.calls[last][0] == f.call
    findings = check_node(snap, Expectations(gpu_count=8), Thresholds())
    on_gpu1 = {(x.check_id, x.severity) for x in findings if x.gpu == 1}
    if f.check is not None:
        assert (f.check, f.severity) in on_gpu1
    elif f.error is not None:
        assert ("probe.gpu_error", Severity.FLAG) in on_gpu1
        assert not any(sev.drains for _, sev in on_gpu1)
    else:
        assert on_gpu1 == set()


def test_every_call_failing_leaves_a_gpu_with_only_the_handle_error(h100: NodeSnapshot) -> None:
    probe, fake = quiet(h100)
    fake.fail(ANY_CALL, ERROR_UNKNOWN, gpu=4)
    snap = probe.snapshot("node1")
    assert snap.gpus[4] == Gpu(index=4, errors=(
        "Unknown Error (nvmlDeviceGetHandleByIndex, device handle unavailable)",))
    assert snap.gpus[5] == quiet(h100)[0].snapshot("node1").gpus[5]


def test_one_error_entry_per_call_and_message(h100: NodeSnapshot) -> None:
    snap = dataclasses.replace(h100, gpus=tuple(dataclasses.replace(g, nvlinks=tuple(
        NvLink(k, active=True, version=4, remote_pci_bus_id="00000000:00:01.0",
               remote_device_type="SWITCH", replay_errors=0, recovery_errors=0, crc_errors=0)
        for k in range(18))) for g in h100.gpus))  # constructed: 18 switch links per GPU
    probe, fake = quiet(snap)
    fake.fail("nvmlDeviceGetTotalEccErrors", ERROR_UNKNOWN, gpu=0)
    fake.fail("nvmlDeviceGetNvLinkErrorCounter", ERROR_UNKNOWN, gpu=0)
    gpu = probe.snapshot("node1").gpus[0]
    assert gpu.errors == ("nvmlDeviceGetTotalEccErrors: Unknown Error",
                          "nvmlDeviceGetNvLinkErrorCounter: Unknown Error (links 0-17)")
    assert gpu.ecc.volatile_uncorrected is None
    assert isinstance(gpu.nvlinks, tuple) and gpu.nvlinks[3].replay_errors is None


def test_init_failure_is_a_node_error_and_nvml_is_not_shut_down(h100: NodeSnapshot) -> None:
    probe, fake = quiet(h100)
    fake.init_error = ERROR_LIBRARY_NOT_FOUND
    snap = probe.snapshot("node1")
    assert snap.gpus == ()
    assert snap.errors == (f"{INIT_ERROR_PREFIX}: NVML Shared Library Not Found (nvmlInit)",)
    assert fake.shutdown_count == 0
    findings = check_node(snap, Expectations(gpu_count=8), Thresholds())
    assert ("probe.error", Severity.DRAIN_NOW) in {(f.check_id, f.severity) for f in findings}


def test_device_count_failure_is_a_node_error(h100: NodeSnapshot) -> None:
    probe, fake = quiet(h100)
    fake.fail("nvmlDeviceGetCount", ERROR_UNKNOWN)
    snap = probe.snapshot("node1")
    assert snap.errors == ("nvmlDeviceGetCount: Unknown Error",)
    assert snap.driver_version == "535.161.08" and fake.shutdown_count == 1


def test_driver_version_failure_is_not_a_node_error(h100: NodeSnapshot) -> None:
    probe, fake = quiet(h100)
    fake.fail("nvmlSystemGetCudaDriverVersion", ERROR_UNKNOWN)
    snap = probe.snapshot("node1")
    assert snap.errors == () and snap.cuda_version is None and len(snap.gpus) == 8


def test_field_values_errors_are_per_field(h100: NodeSnapshot) -> None:
    gpus = list(h100.gpus)
    gpus[0] = dataclasses.replace(gpus[0], recovery_action=NS, reset_required=True)
    probe, _ = probe_of(dataclasses.replace(h100, gpus=tuple(gpus)))  # constructed values
    gpu = probe.snapshot("node1").gpus[0]
    assert (gpu.reset_required, gpu.drain_and_reset_recommended, gpu.recovery_action) == (
        True, False, NS)
    findings = check_node(probe.snapshot("node1"), Expectations(gpu_count=8), Thresholds())
    assert ("gpu.reset_required", 0) in {(f.check_id, f.gpu) for f in findings}


def test_fake_refuses_calls_before_init(h100: NodeSnapshot) -> None:
    fake = FakeNvml(h100)
    with pytest.raises(type(nvml_error(1))):
        fake.nvmlDeviceGetCount()


def test_nvml_error_is_pynvmls_subclass() -> None:
    err = nvml_error(ERROR_NOT_SUPPORTED)
    assert type(err).__name__ == "NVMLError_NotSupported"
    assert str(nvml_error(ERROR_GPU_IS_LOST)) == "GPU is lost"


# --------------------------------------------------------------------------- NVLink


def _links(rel: str) -> dict[int, tuple[NvLink, ...]]:
    return parse_nvlink_status((GPU_DATA / rel).read_text())


def test_pcie_card_nvlink_loop_reads_not_supported() -> None:
    a10 = capture(ROUND_TRIP["a10_remap_pending_text"].capture)
    snap = dataclasses.replace(a10, gpus=(dataclasses.replace(a10.gpus[0], nvlinks=NS),))
    probe, fake = probe_of(snap)
    gpu = probe.snapshot("node1").gpus[0]
    assert gpu.nvlinks is NS and not [e for e in gpu.errors if "NvLink" in e]
    link_calls = [c for c in fake.calls if "NvLink" in c[0]]
    assert [c[2] for c in link_calls] == list(range(fake.nvlink_max_links))
    assert {c[0] for c in link_calls} == {"nvmlDeviceGetNvLinkState"}
    assert not [f for f in check_node(probe.snapshot("node1"), Expectations(gpu_count=1),
                                      Thresholds()) if f.check_id.startswith("nvlink")]


def test_a100_nvlink_status_capture_through_nvml() -> None:
    status = _links("nvlink/gpud_a100x8_nvlink_status.txt")
    gpus = tuple(Gpu(index=i, nvlinks=links) for i, links in sorted(status.items()))
    probe, fake = probe_of(NodeSnapshot("node1", gpus=gpus, attached_gpus=len(gpus)))
    got = probe.snapshot("node1")
    for want, have in zip(gpus, got.gpus, strict=True):
        assert isinstance(have.nvlinks, tuple) and isinstance(want.nvlinks, tuple)
        assert [(k.link, k.active) for k in have.nvlinks] == [
            (k.link, k.active) for k in want.nvlinks]
    # INVALID_ARGUMENT past link 11 ends the loop: 13 state calls per GPU, not 36
    states = [c for c in fake.calls if c[0] == "nvmlDeviceGetNvLinkState" and c[1] == 0]
    assert [c[2] for c in states] == list(range(13))
    findings = check_node(got, Expectations(gpu_count=len(gpus), nvlink_links_per_gpu=12),
                          Thresholds())
    assert not [f for f in findings if f.check_id == "nvlink.active_links"]


def test_all_links_inactive_capture_drains_through_nvml() -> None:
    status = _links("nvlink/azhc_a100_gpu6_nvlink_status_all_inactive.txt")
    assert status == {6: ()}
    # constructed from the capture: GPU 6 with 12 links all down (the capture's count is
    # unknown, 12 is the A100's), as NVML reports them
    down = tuple(NvLink(k, active=False) for k in range(12))
    probe, fake = probe_of(NodeSnapshot("node1", gpus=(Gpu(index=0, nvlinks=down),),
                                        attached_gpus=1))
    gpu = probe.snapshot("node1").gpus[0]
    assert gpu.nvlinks == down
    assert not [c for c in fake.calls if c[0] != "nvmlDeviceGetNvLinkState" and "NvLink" in c[0]]
    findings = check_node(probe.snapshot("node1"),
                          Expectations(gpu_count=1, nvlink_links_per_gpu=12), Thresholds())
    assert ("nvlink.active_links", Severity.DRAIN_NOW) in {
        (f.check_id, f.severity) for f in findings}


def test_nvlink_details_gaps_and_errors() -> None:
    # constructed: 6 links, link 2 absent (a gap: NOT_SUPPORTED), link 4 down, counters N/A
    # on link 5, the state of link 3 unreadable
    links = (
        NvLink(0, True, 4, None, "00000000:0A:00.0", "SWITCH", 1, 2, 3),
        NvLink(1, True, 4, None, "00000000:0B:00.0", "GPU", 0, 0, 0),
        NvLink(3, None),
        NvLink(4, False),
        NvLink(5, True, 4, None, "00000000:0C:00.0", "SWITCH", NS, NS, NS),
    )
    probe, _ = probe_of(NodeSnapshot("node1", gpus=(Gpu(index=0, nvlinks=links),),
                                        attached_gpus=1))
    gpu = probe.snapshot("node1").gpus[0]
    assert isinstance(gpu.nvlinks, tuple)
    assert [k.link for k in gpu.nvlinks] == [0, 1, 3, 4, 5]
    assert gpu.nvlinks[0] == NvLink(0, True, 4, None, "00000000:0a:00.0", "SWITCH", 1, 2, 3)
    assert gpu.nvlinks[1].remote_device_type == "GPU"
    assert gpu.nvlinks[2] == NvLink(3)  # unreadable state: nothing else asked
    assert gpu.nvlinks[3] == NvLink(4, active=False)
    assert gpu.nvlinks[4].crc_errors is NS
    assert "nvmlDeviceGetNvLinkState: Not Found (link 3)" in gpu.errors


def test_nvlink_loop_bounded_by_max_links() -> None:
    links = tuple(NvLink(k, True, 4, None, "00000000:0A:00.0", "SWITCH", 0, 0, 0)
                  for k in range(18))  # constructed: an H100's 18 links
    fake = FakeNvml(NodeSnapshot("node1", gpus=(Gpu(index=0, nvlinks=links),),
                                 attached_gpus=1), max_links=12)
    gpu = NvmlProbe(fake).snapshot("node1").gpus[0]
    assert isinstance(gpu.nvlinks, tuple) and len(gpu.nvlinks) == 12


def test_nvlink_previous_snapshot_delta_through_nvml() -> None:
    base = tuple(NvLink(k, True, 4, None, "00000000:0A:00.0", "SWITCH", 0, 0, 0)
                 for k in range(12))  # constructed counters, before and after
    after = tuple(dataclasses.replace(k, replay_errors=5) if k.link == 7 else k for k in base)
    exp = Expectations(gpu_count=1, nvlink_links_per_gpu=12)
    before = NvmlProbe(FakeNvml(NodeSnapshot("n", (Gpu(0, nvlinks=base),), attached_gpus=1)))
    now = NvmlProbe(FakeNvml(NodeSnapshot("n", (Gpu(0, nvlinks=after),), attached_gpus=1)))
    findings = check_node(now.snapshot("n"), exp, Thresholds(),
                          previous=before.snapshot("n"))
    assert ("nvlink.errors", 0) in {(f.check_id, f.gpu) for f in findings}


# --------------------------------------------------------------------------- MIG


def test_mig_mode_and_what_mig_hides() -> None:
    replay = capture(ROUND_TRIP["a100_80gb_mig_xml"].capture)
    gpu = probe_of(replay)[0].snapshot("node1", gpus=[0]).gpus[0]
    assert gpu.mig_enabled is True
    assert gpu.remapped_rows is NS and gpu.utilization_gpu_pct is NS
    # MIG with NVLink not readable: tolerated by the NVLink check, not drained
    snap = probe_of(dataclasses.replace(replay, gpus=(dataclasses.replace(
        replay.gpus[0], nvlinks=NS),)))[0].snapshot("node1", gpus=[0])
    findings = check_node(snap, Expectations(gpu_count=4, nvlink_links_per_gpu=12),
                          Thresholds(), gpus=[0])
    assert not [f for f in findings if f.check_id == "nvlink.active_links"]


def test_mig_disabled_and_not_supported() -> None:
    h100 = capture(ROUND_TRIP["h100x8_535_161_text"].capture)
    t4 = capture(ROUND_TRIP["t4_xml"].capture)
    assert probe_of(h100)[0].snapshot("n").gpus[0].mig_enabled is False
    assert probe_of(t4)[0].snapshot("n").gpus[0].mig_enabled is NS


# --------------------------------------------------------------------------- the real library


def test_real_pynvml_without_a_gpu_reports_init_failure() -> None:
    """On this machine there is no NVIDIA driver: the real PynvmlApi must fail cleanly."""
    snap = NvmlProbe(timeout_s=10).snapshot("here")
    if snap.gpus:  # pragma: no cover - a machine with a GPU
        assert snap.errors == () and snap.source == SOURCE
        return
    assert len(snap.errors) == 1 and snap.errors[0].startswith(INIT_ERROR_PREFIX)


def test_unsupported_link_codes_are_not_errors(h100: NodeSnapshot) -> None:
    snap = dataclasses.replace(h100, gpus=(dataclasses.replace(h100.gpus[0], nvlinks=NS),),
                               attached_gpus=1)
    probe, fake = quiet(snap)
    fake.fail("nvmlDeviceGetNvLinkState", ERROR_INVALID_ARGUMENT, gpu=0, link=0)
    gpu = probe.snapshot("n").gpus[0]
    assert gpu.nvlinks == () and gpu.errors == ()


# --------------------------------------------------------------------------- PynvmlApi


class FakeLibNvidiaMl:
    """A stand-in for libnvidia-ml.so at the C ABI: pynvml's own ctypes wrappers call these
    with the buffers and ``byref`` out-parameters they would hand the real library, so
    PynvmlApi's conversions run for real. Constructed values of one H200-like GPU: links
    0-1 active, link 2 down, no link 3; no page retirement (Hopper)."""

    OK, NOT_SUPPORTED, INVALID_ARGUMENT, INSUFFICIENT_SIZE = 0, 3, 2, 7

    def __init__(self, absent: frozenset[str] = frozenset()) -> None:
        self.absent = absent  # C functions this "driver" lacks

    def __getattr__(self, name: str) -> object:
        if name in self.absent or not hasattr(type(self), "c_" + name):
            raise AttributeError(name)
        return getattr(self, "c_" + name)

    @staticmethod
    def _set(ref: object, value: object) -> int:
        ref._obj.value = value  # type: ignore[attr-defined]
        return 0

    def c_nvmlInitWithFlags(self, flags: int) -> int:
        return 0

    def c_nvmlShutdown(self) -> int:
        return 0

    def c_nvmlSystemGetDriverVersion(self, buf: object, size: object) -> int:
        buf.value = b"570.86.15"  # type: ignore[attr-defined]
        return 0

    def c_nvmlSystemGetCudaDriverVersion(self, ref: object) -> int:
        return self._set(ref, 12080)

    def c_nvmlSystemGetProcessName(self, pid: object, buf: object, size: object) -> int:
        buf.value = b"/usr/bin/python3"  # type: ignore[attr-defined]
        return 0

    def c_nvmlDeviceGetCount_v2(self, ref: object) -> int:
        return self._set(ref, 1)

    def c_nvmlDeviceGetHandleByIndex_v2(self, index: object, ref: object) -> int:
        return 0

    def c_nvmlDeviceGetUUID(self, h: object, buf: object, size: object) -> int:
        buf.value = b"GPU-00000000-1111-2222-3333-444444444444"  # type: ignore[attr-defined]
        return 0

    def c_nvmlDeviceGetName(self, h: object, buf: object, size: object) -> int:
        buf.value = b"NVIDIA H200"  # type: ignore[attr-defined]
        return 0

    def c_nvmlDeviceGetMinorNumber(self, h: object, ref: object) -> int:
        return self._set(ref, 3)

    def c_nvmlDeviceGetPciInfo_v3(self, h: object, ref: object) -> int:
        ref._obj.busId = b"00000000:1B:00.0"  # type: ignore[attr-defined]
        return 0

    def c_nvmlDeviceGetMemoryInfo_v2(self, h: object, ref: object) -> int:
        ref._obj.total, ref._obj.used = 143771 * 2**20, 1 * 2**20  # type: ignore[attr-defined]
        return 0

    def c_nvmlDeviceGetMemoryInfo(self, h: object, ref: object) -> int:
        ref._obj.total, ref._obj.used = 143771 * 2**20, 600 * 2**20  # type: ignore[attr-defined]
        return 0

    def c_nvmlDeviceGetEccMode(self, h: object, cur: object, pending: object) -> int:
        return self._set(cur, 1) or self._set(pending, 1)

    def c_nvmlDeviceGetTotalEccErrors(self, h: object, kind: object, counter: object,
                                      ref: object) -> int:
        # corrected aggregate = 7, everything else 0
        value = 7 if (kind.value, counter.value) == (0, 1) else 0  # type: ignore[attr-defined]
        return self._set(ref, value)

    def c_nvmlDeviceGetRemappedRows(self, h: object, corr: object, unc: object,
                                    pending: object, failure: object) -> int:
        for ref, value in ((corr, 2), (unc, 0), (pending, 1), (failure, 0)):
            self._set(ref, value)
        return 0

    def c_nvmlDeviceGetRetiredPages(self, *args: object) -> int:
        return self.NOT_SUPPORTED

    def c_nvmlDeviceGetRetiredPagesPendingStatus(self, *args: object) -> int:
        return self.NOT_SUPPORTED

    def c_nvmlDeviceGetNvLinkState(self, h: object, link: int, ref: object) -> int:
        if link > 2:
            return self.INVALID_ARGUMENT
        return self._set(ref, 1 if link < 2 else 0)

    def c_nvmlDeviceGetNvLinkVersion(self, h: object, link: int, ref: object) -> int:
        return self._set(ref, 6)

    def c_nvmlDeviceGetNvLinkRemotePciInfo_v2(self, h: object, link: int, ref: object) -> int:
        ref._obj.busId = b"00000000:0A:00.0"  # type: ignore[attr-defined]
        return 0

    def c_nvmlDeviceGetNvLinkRemoteDeviceType(self, h: object, link: int, ref: object) -> int:
        return self._set(ref, 2)

    def c_nvmlDeviceGetNvLinkErrorCounter(self, h: object, link: int, counter: int,
                                          ref: object) -> int:
        if counter == 2:
            return self.NOT_SUPPORTED
        return self._set(ref, 10 * link + counter)

    def c_nvmlDeviceGetGpuFabricInfoV(self, h: object, ref: object) -> int:
        ref._obj.state, ref._obj.status = 3, 0  # type: ignore[attr-defined]
        return 0

    def c_nvmlDeviceGetGpuFabricInfo(self, h: object, ref: object) -> int:
        ref._obj.state, ref._obj.status = 2, 0  # type: ignore[attr-defined]
        return 0

    def c_nvmlDeviceGetCurrPcieLinkWidth(self, h: object, ref: object) -> int:
        return self._set(ref, 16)

    def c_nvmlDeviceGetMaxPcieLinkWidth(self, h: object, ref: object) -> int:
        return self._set(ref, 16)

    def c_nvmlDeviceGetCurrPcieLinkGeneration(self, h: object, ref: object) -> int:
        return self._set(ref, 1)

    def c_nvmlDeviceGetMaxPcieLinkGeneration(self, h: object, ref: object) -> int:
        return self._set(ref, 5)

    def c_nvmlDeviceGetPcieReplayCounter(self, h: object, ref: object) -> int:
        return self._set(ref, 0)

    def c_nvmlDeviceGetUtilizationRates(self, h: object, ref: object) -> int:
        ref._obj.gpu, ref._obj.memory = 42, 7  # type: ignore[attr-defined]
        return 0

    def c_nvmlDeviceGetMigMode(self, h: object, cur: object, pending: object) -> int:
        return self._set(cur, 0) or self._set(pending, 1)

    def _procs(self, count: object, array: object) -> int:
        if array is None:
            self._set(count, 1)
            return self.INSUFFICIENT_SIZE
        array[0].pid, array[0].usedGpuMemory = 4242, 512 * 2**20  # type: ignore[index]
        return self._set(count, 1)

    def c_nvmlDeviceGetComputeRunningProcesses_v3(self, h: object, count: object,
                                                  array: object) -> int:
        return self._procs(count, array)

    def c_nvmlDeviceGetComputeRunningProcesses_v2(self, h: object, count: object,
                                                  array: object) -> int:
        return self._procs(count, array)

    def c_nvmlDeviceGetCurrentClocksEventReasons(self, h: object, ref: object) -> int:
        return self._set(ref, 0x1 | 0x8)

    def c_nvmlDeviceGetCurrentClocksThrottleReasons(self, h: object, ref: object) -> int:
        return self._set(ref, 0x4)

    def c_nvmlDeviceGetFieldValues(self, h: object, n: object, ref: object) -> int:
        for fv in ref._obj:  # type: ignore[attr-defined]
            fv.valueType = 1  # unsigned int
            if fv.fieldId == 230:
                fv.nvmlReturn, fv.value.uiVal = 0, 3  # DRAIN_P2P
            elif fv.fieldId == 227:
                fv.nvmlReturn = self.NOT_SUPPORTED
            else:
                fv.nvmlReturn, fv.value.uiVal = 0, 0
        return 0


def _with_fake_library(monkeypatch: pytest.MonkeyPatch, lib: FakeLibNvidiaMl) -> None:
    import pynvml  # the bindings' module state: which library they loaded

    monkeypatch.setattr(pynvml, "nvmlLib", lib)
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})


def test_pynvml_api_through_pynvmls_own_wrappers(monkeypatch: pytest.MonkeyPatch) -> None:
    from slurm_ml.health.probe_nvml import PynvmlApi

    _with_fake_library(monkeypatch, FakeLibNvidiaMl())
    snap = NvmlProbe(PynvmlApi()).snapshot("h200")
    assert snap.errors == () and snap.attached_gpus == 1
    assert (snap.driver_version, snap.cuda_version) == ("570.86.15", "12.8")
    gpu = snap.gpus[0]
    assert gpu.errors == ()
    assert (gpu.uuid, gpu.name, gpu.pci_bus_id, gpu.minor_number) == (
        "GPU-00000000-1111-2222-3333-444444444444", "NVIDIA H200", "00000000:1b:00.0", 3)
    assert (gpu.memory_total_mb, gpu.memory_used_mb) == (143771, 1)
    assert (gpu.ecc_enabled, gpu.ecc_pending) == (True, True)
    assert gpu.ecc.aggregate_corrected == 7 and gpu.ecc.volatile_uncorrected == 0
    assert gpu.remapped_rows == RemappedRows(2, 0, True, False)
    assert gpu.retired_pages is NS
    assert gpu.nvlinks == (
        NvLink(0, True, 6, None, "00000000:0a:00.0", "SWITCH", 0, 1, NS),
        NvLink(1, True, 6, None, "00000000:0a:00.0", "SWITCH", 10, 11, NS),
        NvLink(2, False),
    )
    assert (gpu.fabric_state, gpu.fabric_status) == ("Completed", "Success")
    assert (gpu.pcie_width_current, gpu.pcie_width_max, gpu.pcie_gen_current,
            gpu.pcie_gen_max, gpu.pcie_replay_count) == (16, 16, 1, 5, 0)
    assert (gpu.utilization_gpu_pct, gpu.utilization_memory_pct) == (42.0, 7.0)
    assert gpu.mig_enabled is False
    assert gpu.processes == (GpuProcess(4242, 512, "/usr/bin/python3"),)
    assert gpu.clock_events_active == ("gpu_idle", "hw_slowdown")
    assert (gpu.reset_required, gpu.drain_and_reset_recommended, gpu.recovery_action) == (
        False, NS, "Drain P2P")


def test_pynvml_api_falls_back_on_older_drivers(monkeypatch: pytest.MonkeyPatch) -> None:
    from slurm_ml.health.probe_nvml import PynvmlApi

    _with_fake_library(monkeypatch, FakeLibNvidiaMl(absent=frozenset({
        "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetGpuFabricInfoV",
        "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetCurrentClocksEventReasons"})))
    gpu = NvmlProbe(PynvmlApi()).snapshot("old").gpus[0]
    assert gpu.errors == ()
    assert gpu.memory_used_mb == 600  # v1: includes the driver's reservation
    assert (gpu.fabric_state, gpu.fabric_status) == ("In Progress", NS)
    assert gpu.processes == (GpuProcess(4242, 512, "/usr/bin/python3"),)
    assert gpu.clock_events_active == ("sw_power_cap",)


def test_pynvml_api_missing_function_is_a_call_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from slurm_ml.health.probe_nvml import PynvmlApi

    _with_fake_library(monkeypatch, FakeLibNvidiaMl(
        absent=frozenset({"nvmlDeviceGetRemappedRows"})))
    gpu = NvmlProbe(PynvmlApi()).snapshot("x").gpus[0]
    assert gpu.remapped_rows is None
    assert gpu.errors == ("nvmlDeviceGetRemappedRows: Function Not Found",)


def test_fabric_health_summary_gives_the_same_verdict_through_nvml() -> None:
    """Issue 15: a live node and a capture of it get the same verdict. The -q "Fabric /
    Health / Summary: Unhealthy" and NVML's healthSummary (v3 fabric info) both drain."""
    gpu = Gpu(index=0, name="NVIDIA GB200", fabric_state="Completed", fabric_status="Success",
              fabric_health="Unhealthy")
    replay = NodeSnapshot("node1", gpus=(gpu,), attached_gpus=1)
    got = probe_of(replay)[0].snapshot("node1")
    assert got.gpus[0].fabric_health == "Unhealthy"
    exp = Expectations(gpu_count=1)

    def drains(snap: NodeSnapshot) -> set[tuple[str, Severity, int | None]]:
        return {(f.check_id, f.severity, f.gpu) for f in check_node(snap, exp, Thresholds())
                if f.severity.drains}

    assert drains(got) == drains(replay) == {("fabric.health", Severity.DRAIN_NOW, 0)}
