"""nvidia-smi -q / -q -x parsers on the real captures in data/gpu (see SOURCES.md).

One table row per capture file; every value asserted below was read off the capture by
hand. Inputs built inside a test (error values, lost GPUs, unsafe XML) are marked as
constructed: they are not captures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_ml.health.replay.errors import CaptureError
from slurm_ml.health.replay.smi_q import (
    SOURCE_TEXT,
    SOURCE_XML,
    UnsafeXmlError,
    normalise_pci_bus_id,
    parse_smi_q,
    parse_smi_q_text,
    parse_smi_q_xml,
)
from slurm_ml.health.snapshot import (
    NOT_SUPPORTED,
    EccCounts,
    GpuProcess,
    NodeSnapshot,
    RemappedRows,
    RetiredPages,
)

GPU_DATA = Path(__file__).resolve().parents[2] / "data" / "gpu"
SMI_Q = GPU_DATA / "smi-q"
ECC = GPU_DATA / "ecc"

NS = NOT_SUPPORTED
ZERO_ECC = EccCounts(0, 0, 0, 0)
NO_ECC = EccCounts(NS, NS, NS, NS)
CLEAN_REMAP = RemappedRows(0, 0, False, False)
CLEAN_PAGES = RetiredPages(0, 0, False)
H100_161_BUSES = ("19", "3b", "4c", "5d", "9b", "bb", "cb", "db")
H100_183_BUSES = ("53", "64", "75", "86", "97", "a8", "b9", "ca")
RTX4090_BUSES = ("01", "21", "41", "61", "81", "a1", "c1", "e1")


def read(rel: str) -> str:
    return (GPU_DATA / rel).read_text()


@dataclass(frozen=True)
class Row:
    """What one capture must parse to.

    ``facts`` maps a path to its expected value: ``g3.retired_pages.pending`` is
    ``snap.gpus[3].retired_pages.pending``, ``all.fabric_state`` is that attribute of every
    GPU, a bare name (``attached_gpus``) is an attribute of the snapshot.
    """

    path: str  # under data/gpu
    gpus: int
    name0: object  # product name of GPU 0 (None in excerpts without it)
    driver: str
    cuda: str
    facts: dict[str, object] = field(default_factory=dict)


ROWS = [
    Row("smi-q/gpud_a10_535.129.03_q_remap_pending.txt", 1, "NVIDIA A10", "535.129.03", "12.2", {
        "attached_gpus": 1,
        "g0.pci_bus_id": "00000000:07:00.0",
        "g0.uuid": "GPU-73d12ef7-f589-f867-4259-c7090ab44736",
        # the fault: 4 uncorrectable rows remapped, a reset pending
        "g0.remapped_rows": RemappedRows(correctable=0, uncorrectable=4, pending=True, failure=False),
        "g0.retired_pages": NS,  # Ampere: retirement replaced by remapping
        "g0.ecc": ZERO_ECC,
        "g0.ecc_enabled": True,
        "g0.ecc_pending": True,
        "g0.memory_total_mb": 23028,
        "g0.memory_used_mb": 4,
        "g0.fabric_state": NS,  # PCIe card, no NVSwitch fabric
        "g0.mig_enabled": NS,
        "g0.processes": (),
        "g0.reset_required": False,
        "g0.drain_and_reset_recommended": NS,
        "g0.pcie_gen_current": 4,
        "g0.pcie_width_max": 16,
        "g0.nvlinks": None,
        "g0.errors": (),
    }),
    Row("smi-q/gpud_e2e_a10_550.127.05_q.txt", 1, "NVIDIA A10", "550.127.05", "12.4", {
        "g0.pci_bus_id": "00000000:06:00.0",
        "g0.uuid": "GPU-51ae0086-e1ac-4a20-f062-9caa44e4df6d",
        "g0.remapped_rows": CLEAN_REMAP,
        # 550 splits SRAM uncorrectable into Parity + SEC-DED: still summed to 0
        "g0.ecc": ZERO_ECC,
        "g0.sram_threshold_exceeded": False,
        "g0.pcie_gen_current": 1,  # idle link down-trained; max is 4
        "g0.pcie_gen_max": 4,
        "g0.memory_used_mb": 1,
        "g0.drain_and_reset_recommended": False,
        "g0.clock_events_active": ("gpu_idle",),
    }),
    Row("smi-q/gpud_h100x8_535.161.08_q.txt", 8, "NVIDIA H100 80GB HBM3", "535.161.08", "12.2", {
        "attached_gpus": 8,
        **{f"g{i}.pci_bus_id": f"00000000:{b}:00.0" for i, b in enumerate(H100_161_BUSES)},
        "all.fabric_state": "Completed",
        "all.fabric_status": "Success",
        "all.ecc": ZERO_ECC,
        "all.remapped_rows": CLEAN_REMAP,
        "all.retired_pages": NS,
        "all.mig_enabled": False,
        # the SUSPECT note in SOURCES.md: power brake asserted on all eight
        "all.clock_events_active": ("hw_slowdown", "hw_power_brake_slowdown"),
        "g0.pcie_replay_count": 67,
        "g6.pcie_replay_count": 82,
        "g7.minor_number": 7,
    }),
    Row("smi-q/gpud_h100x8_535.183.01_q.txt", 8, "NVIDIA H100 80GB HBM3", "535.183.01", "12.2", {
        **{f"g{i}.pci_bus_id": f"00000000:{b}:00.0" for i, b in enumerate(H100_183_BUSES)},
        "all.fabric_state": "Completed",
        "all.remapped_rows": CLEAN_REMAP,
        "g0.uuid": "GPU-566e6f65-c38e-b12f-4824-6944218668b9",
        "g0.pcie_replay_count": 120,
        "g2.processes": (GpuProcess(pid=1002127, used_memory_mb=9212, name="/usr/bin/python"),),
        "g2.memory_used_mb": 9221,
        "g2.clock_events_active": ("sw_power_cap", "hw_power_brake_slowdown", "sw_thermal_slowdown"),
        "g3.processes": (),
        "g3.clock_events_active": ("gpu_idle",),
    }),
    Row("smi-q/gpud_rtx4090x8_535.154.05_q.txt", 8, "NVIDIA GeForce RTX 4090", "535.154.05", "12.2", {
        **{f"g{i}.pci_bus_id": f"00000000:{b}:00.0" for i, b in enumerate(RTX4090_BUSES)},
        "all.ecc": NO_ECC,  # GeForce: no ECC counters
        "all.ecc_enabled": False,
        "all.retired_pages": NS,
        "all.fabric_state": NS,
        "all.remapped_rows": CLEAN_REMAP,  # Ada reports remapping, all zero
        "g0.minor_number": 2,  # minor numbers are not in NVML index order here
        "g3.minor_number": 0,
        "g0.processes": (GpuProcess(pid=2010222, used_memory_mb=6724, name="/usr/bin/python"),),
        "g7.processes": (GpuProcess(pid=540189, used_memory_mb=15922, name="/usr/bin/python3"),),
        "g0.pcie_gen_current": 1,
        "g0.pcie_gen_max": 4,
    }),
    Row("smi-q/gpud_rtx4090x8_535.154.05_q_swpowercap.txt", 8, "NVIDIA GeForce RTX 4090", "535.154.05", "12.2", {
        "g1.pci_bus_id": "00000000:23:00.0",
        "g5.pci_bus_id": "00000000:a1:00.0",  # printed "A1"
        "g1.clock_events_active": ("sw_power_cap",),
        "g4.clock_events_active": ("sw_power_cap",),
        "g0.clock_events_active": ("gpu_idle",),
        "g1.utilization_gpu_pct": 97.0,
        "g1.utilization_memory_pct": 35.0,
        "g4.utilization_gpu_pct": 100.0,
        "g1.processes": (GpuProcess(pid=1285135, used_memory_mb=21602, name="/usr/bin/python"),),
        "g0.processes": (),
    }),
    Row("smi-q/gpud_titanv_560.35.03_q.txt", 1, "NVIDIA TITAN V", "560.35.03", "12.6", {
        "g0.pci_bus_id": "00000000:01:00.0",
        "g0.ecc_enabled": NS,
        # pre-Ampere layout (Single Bit/Double Bit with Total), every value N/A
        "g0.ecc": NO_ECC,
        "g0.remapped_rows": NS,  # printed as one value: "Remapped Rows : N/A"
        "g0.retired_pages": NS,
        "g0.memory_total_mb": 12288,
        "g0.memory_used_mb": 290,
        "g0.pcie_gen_current": 1,
        "g0.pcie_gen_max": 3,
        "g0.processes": (
            GpuProcess(pid=100607, used_memory_mb=142, name="/usr/lib/xorg/Xorg"),
            GpuProcess(pid=100838, used_memory_mb=33, name="/usr/bin/gnome-shell"),
            GpuProcess(pid=101815, used_memory_mb=111, name="/opt/test"),
        ),
    }),
    Row("smi-q/llmaction_h800_q_gpu0_525.105.17.txt", 1, "NVIDIA H800", "525.105.17", "12.0", {
        "attached_gpus": 8,  # `nvidia-smi -q -i 0` on an 8-GPU node
        "g0.pci_bus_id": "00000000:18:00.0",
        "g0.uuid": "GPU-34bf77d1-c686-6821-79a8-32d326c5039c",
        "g0.ecc_enabled": False,  # printed "Ecc Mode" by this driver; ECC off (policy finding)
        "g0.ecc_pending": False,
        "g0.ecc": NO_ECC,
        "g0.remapped_rows": CLEAN_REMAP,
        "g0.fabric_state": "Completed",
        "g0.fabric_status": "Success",
        "g0.mig_enabled": False,
        "g0.reset_required": None,  # 525 prints no "GPU Reset Status"
        "g0.clock_events_active": ("gpu_idle",),  # "Clocks Throttle Reasons" in 525
        "g0.memory_total_mb": 81559,
    }),
    Row("smi-q/netdata_a100-sxm4-40gb_mig_510.47.03_q.xml", 1, "NVIDIA A100-SXM4-40GB", "510.47.03", "11.6", {
        "g0.pci_bus_id": "00000000:00:04.0",
        "g0.mig_enabled": True,
        "g0.utilization_gpu_pct": NS,  # not reported per GPU in MIG mode
        "g0.ecc": EccCounts(NS, NS, 0, 0),  # volatile N/A, aggregate 0
        "g0.remapped_rows": NS,
        "g0.retired_pages": NS,
        "g0.fabric_state": None,  # v11 schema has no <fabric>
        "g0.memory_total_mb": 40960,
        "g0.processes": (),
    }),
    Row("smi-q/netdata_rtx4090_535.86.05_q.xml", 1, "NVIDIA GeForce RTX 4090", "535.86.05", "12.2", {
        "g0.pci_bus_id": "00000000:84:00.0",
        "g0.uuid": "GPU-71d1acc2-662d-2166-bf9f-65272d2fc437",
        "g0.ecc": NO_ECC,
        "g0.ecc_enabled": False,
        "g0.remapped_rows": CLEAN_REMAP,
        "g0.retired_pages": NS,
        "g0.fabric_state": NS,
        "g0.reset_required": False,
        "g0.memory_total_mb": 24564,
    }),
    Row("smi-q/telegraf_a100-sxm4-80gb_mig_535.54.03_q.xml", 1, "NVIDIA A100-SXM4-80GB", "535.54.03", "12.2", {
        "attached_gpus": 4,  # the file keeps only one of the four <gpu> elements
        "g0.pci_bus_id": "00000000:01:00.0",
        "g0.minor_number": 1,
        "g0.mig_enabled": True,
        "g0.ecc": ZERO_ECC,
        "g0.remapped_rows": NS,
        "g0.utilization_memory_pct": NS,
        "g0.memory_total_mb": 81920,
        "g0.memory_used_mb": 50,
        "g0.drain_and_reset_recommended": False,
        "g0.clock_events_active": (),  # every reason Not Active
    }),
    Row("smi-q/telegraf_a10g_515.105.01_q.xml", 1, "NVIDIA A10G", "515.105.01", "11.7", {
        "g0.pci_bus_id": "00000000:00:1e.0",  # printed "00000000:00:1E.0"
        "g0.pcie_width_current": 8,  # AWS A10G: x8 of a x16 link
        "g0.pcie_width_max": 16,
        "g0.remapped_rows": CLEAN_REMAP,
        "g0.ecc": ZERO_ECC,
        "g0.processes": (GpuProcess(pid=725, used_memory_mb=22, name="/usr/lib/xorg/Xorg"),),
        "g0.reset_required": None,  # v11 schema: no <gpu_reset_status>
    }),
    Row("smi-q/telegraf_rtx-a5000x2_590.44.01_q.xml", 2, "NVIDIA RTX A5000", "590.44.01", "13.1", {
        "g0.pci_bus_id": "00000000:81:00.0",
        "g1.pci_bus_id": "00000000:c1:00.0",
        "g0.minor_number": 1,
        "g1.minor_number": 0,
        "all.ecc": NO_ECC,
        "all.recovery_action": "None",  # v13: <gpu_recovery_action> replaces reset status
        "all.reset_required": None,
        "all.channel_repair_pending": False,
        "all.tpc_repair_pending": False,
        "all.unrepairable_memory": NS,
        "all.sram_threshold_exceeded": NS,
        "g0.processes": (GpuProcess(pid=100477, used_memory_mb=22430, name="/root/src/llama.cpp/build/bin/llama-server"),),
        "g1.processes": (GpuProcess(pid=100477, used_memory_mb=17246, name="/root/src/llama.cpp/build/bin/llama-server"),),
    }),
    Row("smi-q/telegraf_rtx4000-sff-ada_595.84_q.xml", 1, "NVIDIA RTX 4000 SFF Ada Generation", "595.84", "13.2", {
        "g0.pci_bus_id": "00000000:06:00.0",
        "g0.utilization_memory_pct": 37.0,
        "g0.memory_total_mb": 20475,
        "g0.memory_used_mb": 3534,
        "g0.remapped_rows": CLEAN_REMAP,
        "g0.recovery_action": "None",
        "g0.processes": (
            GpuProcess(pid=1842, used_memory_mb=410, name="cosmic-comp"),
            GpuProcess(pid=3190, used_memory_mb=451, name="/usr/bin/code"),
            GpuProcess(pid=4937, used_memory_mb=160, name="python"),
            GpuProcess(pid=34626, used_memory_mb=183, name="/usr/lib/chromium/chromium"),
        ),
    }),
    Row("smi-q/telegraf_rtxpro6000-blackwell-maxq_590.44.01_q.xml", 1,
        "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "590.44.01", "13.1", {
        "g0.pci_bus_id": "00000000:61:00.0",
        "g0.memory_total_mb": 97887,
        "g0.memory_used_mb": 65720,
        "g0.ecc": NO_ECC,
        "g0.remapped_rows": CLEAN_REMAP,
        "g0.retired_pages": NS,
        "g0.unrepairable_memory": NS,
        "g0.processes": (GpuProcess(pid=116860, used_memory_mb=65710, name="/root/src/llama.cpp/build/bin/llama-server"),),
    }),
    Row("smi-q/telegraf_tesla-t4_515.105.01_q.xml", 1, "Tesla T4", "515.105.01", "11.7", {
        "g0.pci_bus_id": "00000000:00:1e.0",
        "g0.retired_pages": CLEAN_PAGES,  # Turing: page retirement, no remapping
        "g0.remapped_rows": NS,
        "g0.ecc": ZERO_ECC,
        "g0.pcie_width_current": 8,
        "g0.processes": (
            GpuProcess(pid=675, used_memory_mb=22, name="/usr/lib/xorg/Xorg"),
            GpuProcess(pid=5762, used_memory_mb=1005, name="python"),
        ),
    }),
    Row("ecc/azhc_8gpu_q_page_retirement_bad.txt", 8, None, "535.86.10", "12.2", {
        "attached_gpus": 8,
        **{f"g{i}.pci_bus_id": f"0000000{i + 1}:00:00.0" for i in range(8)},
        "g0.retired_pages": RetiredPages(single_bit=60, double_bit=5, pending=False),
        "g1.retired_pages": RetiredPages(single_bit=2, double_bit=61, pending=True),
        "g2.retired_pages": CLEAN_PAGES,
        "g3.retired_pages": RetiredPages(single_bit=6, double_bit=0, pending=True),
        "g4.retired_pages": CLEAN_PAGES,
        "g5.retired_pages": RetiredPages(single_bit=20, double_bit=45, pending=True),
        "g6.retired_pages": CLEAN_PAGES,
        "g7.retired_pages": RetiredPages(single_bit=8, double_bit=56, pending=True),
        # excerpt: only Retired Pages is shown, everything else was not looked at
        "all.ecc": EccCounts(),
        "all.remapped_rows": None,
        "all.uuid": None,
        "all.processes": None,
    }),
    Row("ecc/azhc_8gpu_q_page_retirement_clean.txt", 8, None, "535.86.10", "12.2", {
        "g7.pci_bus_id": "00000008:00:00.0",
        "all.retired_pages": CLEAN_PAGES,
        "all.ecc": EccCounts(),
    }),
    Row("ecc/mleng_a100x8_q_excerpt_remap_pending.txt", 1, "NVIDIA A100-SXM4-80GB", "510.73.08", "11.6", {
        "attached_gpus": 8,  # excerpt: one of eight, with "[...]" elisions
        "g0.pci_bus_id": "00000000:10:1c.0",  # printed "00000000:10:1C.0"
        "g0.ecc": EccCounts(volatile_corrected=177, volatile_uncorrected=0,
                            aggregate_corrected=177, aggregate_uncorrected=0),
        "g0.remapped_rows": RemappedRows(correctable=1, uncorrectable=0, pending=True, failure=False),
        "g0.retired_pages": NS,
        "g0.uuid": None,
        "g0.memory_total_mb": None,
    }),
    Row("ecc/netdata_tesla-p100_510.47.03_q_aggregate_sbe3.xml", 1, "Tesla P100-PCIE-16GB", "510.47.03", "11.6", {
        "g0.pci_bus_id": "00000000:00:04.0",
        # old Single Bit/Double Bit layout: aggregate single-bit total 3
        "g0.ecc": EccCounts(volatile_corrected=0, volatile_uncorrected=0,
                            aggregate_corrected=3, aggregate_uncorrected=0),
        "g0.ecc_enabled": True,
        "g0.retired_pages": CLEAN_PAGES,
        "g0.remapped_rows": NS,  # Pascal: no remapping
        "g0.fabric_state": None,
        "g0.memory_total_mb": 16384,
        "g0.processes": (),
    }),
]

#: Captures in smi-q/ that are not (usable) -q output: each must be refused, saying why.
REJECTED = {
    "smi-q/gpud_h100x8_535.183.01_q_corrupted.invalid.txt": "line 86",
    "smi-q/gpud_e2e_a10_550.127.05_nvidia-smi_table.txt": "table",
    "smi-q/gpud_nvidia-smi_table_525.125.06.txt": "table",
    "smi-q/gpud_nvidia-smi_table_550.90.07.txt": "table",
}

#: ecc/ files that are DCGM diagnostics, not -q output: another parser's business.
NOT_SMI_Q = {
    "ecc/awsome_p4de_a100x8_dcgmi_diag_r2_pass.txt",
    "ecc/mleng_dcgmi_diag_r2_excerpt_gpu0_memory_fail_thermal.txt",
    "ecc/mleng_dcgmi_diag_r3_excerpt_uncorrectable_remap_pending.txt",
}


def fact(snap: NodeSnapshot, path: str) -> object:
    obj: object = snap
    for part in path.split("."):
        if part[0] == "g" and part[1:].isdigit():
            obj = snap.gpus[int(part[1:])]
        else:
            obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize("row", ROWS, ids=[Path(r.path).name for r in ROWS])
def test_capture(row: Row) -> None:
    snap = parse_smi_q(read(row.path), node="n1")
    assert snap.node == "n1"
    assert len(snap.gpus) == row.gpus
    assert [g.index for g in snap.gpus] == list(range(row.gpus))
    assert snap.gpus[0].name == row.name0
    assert (snap.driver_version, snap.cuda_version) == (row.driver, row.cuda)
    assert snap.source == (SOURCE_XML if row.path.endswith(".xml") else SOURCE_TEXT)
    assert all(g.nvlinks is None for g in snap.gpus)  # not in -q output
    assert all(g.errors == () for g in snap.gpus)  # none of these shows an NVML error
    for path, want in row.facts.items():
        if path.startswith("all."):
            got = [fact(snap, f"g{i}.{path[4:]}") for i in range(len(snap.gpus))]
            assert got == [want] * len(snap.gpus), path
        else:
            assert fact(snap, path) == want, path


@pytest.mark.parametrize("rel", sorted(REJECTED), ids=[Path(r).name for r in sorted(REJECTED)])
def test_rejected_capture(rel: str) -> None:
    with pytest.raises(CaptureError, match=REJECTED[rel]):
        parse_smi_q(read(rel))


def test_corrupted_capture_names_the_misaligned_line() -> None:
    text = read("smi-q/gpud_h100x8_535.183.01_q_corrupted.invalid.txt")
    with pytest.raises(CaptureError) as err:
        parse_smi_q_text(text)
    assert type(err.value) is CaptureError
    assert "line 86" in str(err.value) and "Invalid HW Slowdown" in str(err.value)
    assert "mis-aligned" in str(err.value)


def test_every_capture_is_in_the_table() -> None:
    """A new file in smi-q/ (or a new -q file in ecc/) must get a row or a rejection."""
    known = {r.path for r in ROWS} | set(REJECTED) | NOT_SMI_Q
    on_disk = {f"{d.name}/{p.name}" for d in (SMI_Q, ECC) for p in d.iterdir() if p.is_file()}
    assert on_disk - known == set(), "capture without a row in test_replay_smi_q.ROWS"
    assert known - on_disk == set(), "row for a capture that is gone"
    assert len({r.path for r in ROWS}) == len(ROWS)


def test_parse_smi_q_picks_the_format() -> None:
    xml = read("smi-q/telegraf_tesla-t4_515.105.01_q.xml")
    assert parse_smi_q(xml) == parse_smi_q_xml(xml)
    assert parse_smi_q("\n\n" + xml).gpus[0].name == "Tesla T4"
    text = read("smi-q/gpud_titanv_560.35.03_q.txt")
    assert parse_smi_q(text) == parse_smi_q_text(text)
    with pytest.raises(CaptureError):
        parse_smi_q_text(xml)
    with pytest.raises(CaptureError):
        parse_smi_q_xml(text)


# ------------------------------------------------- constructed inputs (not captures)

A10 = read("smi-q/gpud_a10_535.129.03_q_remap_pending.txt")


def edit(text: str, old: str, new: str) -> str:
    """The capture with one line changed in memory (the file is never touched)."""
    assert text.count(old) == 1, old
    return text.replace(old, new)


def test_error_values_go_to_gpu_errors_and_read_as_none() -> None:
    text = edit(A10, "            DRAM Uncorrectable            : 0\n        Aggregate",
                "            DRAM Uncorrectable            : [GPU requires reset]\n        Aggregate")
    text = edit(text, "Used                              : 4 MiB", "Used                              : GPU is lost")
    gpu = parse_smi_q_text(text).gpus[0]
    assert gpu.ecc.volatile_uncorrected is None  # one part unreadable: the sum is unknown
    assert gpu.ecc.volatile_corrected == 0
    assert gpu.memory_used_mb is None
    assert gpu.errors == (  # in the order of the capture
        "GPU is lost (line 95, FB Memory Usage/Used)",
        "GPU requires reset (line 129, ECC Errors/Volatile/DRAM Uncorrectable)",
    )


def test_repeated_error_is_counted_not_repeated() -> None:
    lost = "[GPU is lost]"
    text = A10
    for old in ("Product Name                          : NVIDIA A10",
                "GPU UUID                              : GPU-73d12ef7-f589-f867-4259-c7090ab44736",
                "Fan Speed                             : 0 %"):
        text = edit(text, old, old.split(" : ")[0] + " : " + lost)
    gpu = parse_smi_q_text(text).gpus[0]
    assert (gpu.name, gpu.uuid) == (None, None)
    assert gpu.errors == ("GPU is lost (line 9, Product Name, and 2 more)",)


@pytest.mark.parametrize("printed", ["N/A", "[N/A]", "Not Supported", "[Not Supported]",
                                     "  n/a "])
def test_not_supported_spellings(printed: str) -> None:
    text = edit(A10, "Gpu                               : 0 %", f"Gpu                               : {printed}")
    gpu = parse_smi_q_text(text).gpus[0]
    assert gpu.utilization_gpu_pct is NOT_SUPPORTED
    assert gpu.errors == ()


@pytest.mark.parametrize("printed", ["Unknown Error", "[Unknown Error]", "ERR!"])
def test_error_spellings_are_gpu_errors(printed: str) -> None:
    """Issue 15: ``Unknown Error`` and ``ERR!`` in place of a reading are a fault of the
    GPU (checks.device: gpu.error_state), not a missing feature."""
    text = edit(A10, "Gpu                               : 0 %", f"Gpu                               : {printed}")
    gpu = parse_smi_q_text(text).gpus[0]
    assert gpu.utilization_gpu_pct is None
    assert len(gpu.errors) == 1 and gpu.errors[0].startswith(printed.strip("[]"))


def test_old_single_double_bit_layout_uses_totals() -> None:
    titan = read("smi-q/gpud_titanv_560.35.03_q.txt")
    lines = titan.splitlines()
    totals = [i for i, line in enumerate(lines) if line.strip().startswith("Total") and "N/A" in line]
    assert len(totals) == 4  # volatile SBE, DBE, aggregate SBE, DBE
    for i, n in zip(totals, (5, 1, 7, 2), strict=True):
        lines[i] = lines[i].replace("N/A", str(n))
    lines[totals[0] - 7] = lines[totals[0] - 7].replace("N/A", "99")  # Device Memory: not summed
    gpu = parse_smi_q_text("\n".join(lines)).gpus[0]
    assert gpu.ecc == EccCounts(5, 1, 7, 2)


def test_lost_gpu_and_node_level_messages() -> None:
    # Wordings of real nvidia-smi messages; the surrounding text is constructed.
    head = A10.split("GPU 00000000:07:00.0")[0]
    text = (head + "Unable to determine the device handle for GPU0000:CB:00.0: Unknown Error\n"
            + "GPU 00000000:07:00.0" + A10.split("GPU 00000000:07:00.0")[1])
    snap = parse_smi_q_text(text)
    assert [g.pci_bus_id for g in snap.gpus] == ["00000000:cb:00.0", "00000000:07:00.0"]
    assert snap.gpus[0].errors == ("Unknown Error (line 8, device handle unavailable)",)
    assert snap.gpus[0].name is None and snap.gpus[1].name == "NVIDIA A10"

    one = parse_smi_q_text("Unable to determine the device handle for GPU1: 0000:34:00.0: "
                           "GPU is lost.  Reboot the system to recover this GPU\n")
    assert one.gpus[0].pci_bus_id == "00000000:34:00.0"
    assert one.gpus[0].errors[0].startswith("GPU is lost.  Reboot the system")

    for message in ("No devices were found",
                    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                    "Make sure that the latest NVIDIA driver is installed and running.",
                    "Failed to initialize NVML: Driver/library version mismatch"):
        snap = parse_smi_q(message + "\n")
        assert snap.gpus == () and snap.errors == (f"{message} (line 1)",)


def test_zero_attached_gpus_is_a_valid_empty_node() -> None:
    snap = parse_smi_q_text("Driver Version : 535.1\nAttached GPUs : 0\n")
    assert snap.gpus == () and snap.attached_gpus == 0


@pytest.mark.parametrize(("old", "new", "match"), [
    ("        Bus Id                            : 00000000:07:00.0",
     "        Bus Id                            : 00000000:08:00.0", "Bus Id says 00000000:08:00.0"),
    ("        Total                             : 23028 MiB",
     "        Total                             : lots", "line 93.*FB Memory Usage/Total.*'<n> MiB'"),
    ("        Pending                           : Yes",
     "        Pending                           : Perhaps", "Remapped Rows/Pending"),
    ("    Product Brand                         : NVIDIA",
     "  Product Brand" + " " * 27 + ": NVIDIA", "broken indentation"),
    ("GPU 00000000:07:00.0", "GPU zero", "PCI bus id"),
    ("GPU 00000000:07:00.0", "Something else entirely", "top level"),
    ("    Product Name                          : NVIDIA A10",
     "\tProduct Name                          : NVIDIA A10", "tab"),
])
def test_damage_is_named(old: str, new: str, match: str) -> None:
    with pytest.raises(CaptureError, match=match):
        parse_smi_q_text(edit(A10, old, new))


def test_same_gpu_twice_is_refused() -> None:
    block = "GPU 00000000:07:00.0" + A10.split("GPU 00000000:07:00.0")[1]
    with pytest.raises(CaptureError, match="appears twice"):
        parse_smi_q_text(A10 + "\n" + block)


def test_not_smi_q_at_all() -> None:
    for text in ("", "\n\n", "hello world\n", "Driver Version : 1\n", "<html></html>"):
        with pytest.raises(CaptureError):
            parse_smi_q(text)


T4 = read("smi-q/telegraf_tesla-t4_515.105.01_q.xml")


@pytest.mark.parametrize("doctype", [
    '<!DOCTYPE nvidia_smi_log [<!ENTITY a "aaaaaaaaaa">]>',
    '<!DOCTYPE nvidia_smi_log SYSTEM "x.dtd" [<!ELEMENT nvidia_smi_log ANY>]>',
    '<!DOCTYPE nvidia_smi_log SYSTEM "file:///etc/passwd" [ <!ENTITY % p SYSTEM "http://x/">%p; ]>',
    '<!doctype nvidia_smi_log>',
])
def test_unsafe_xml_is_refused_before_parsing(doctype: str) -> None:
    text = edit(T4, '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v11.dtd">', doctype)
    with pytest.raises(UnsafeXmlError, match="line 2"):
        parse_smi_q_xml(text)


def test_entity_declaration_anywhere_is_refused() -> None:
    text = edit(T4, "<timestamp>", '<!ENTITY x "y"><timestamp>')
    with pytest.raises(UnsafeXmlError, match="ENTITY"):
        parse_smi_q(text)


def test_xml_damage_is_named() -> None:
    with pytest.raises(CaptureError, match=r"line \d+, column \d+: not well-formed"):
        parse_smi_q_xml(T4[: len(T4) // 2])
    with pytest.raises(CaptureError, match="not <nvidia_smi_log>"):
        parse_smi_q_xml("<?xml version='1.0'?><other/>")
    with pytest.raises(CaptureError, match=r"gpu 00000000:00:1E.0/fb_memory_usage/total"):
        parse_smi_q_xml(edit(T4, "<total>15360 MiB</total>", "<total>15 GB</total>"))
    with pytest.raises(CaptureError, match="no <gpu>"):
        parse_smi_q_xml("<nvidia_smi_log><attached_gpus>1</attached_gpus></nvidia_smi_log>")


def test_xml_error_value_is_recorded() -> None:
    gpu = parse_smi_q_xml(edit(T4, "<remapped_rows>N/A</remapped_rows>",
                               "<remapped_rows>[GPU requires reset]</remapped_rows>")).gpus[0]
    assert gpu.remapped_rows is None
    assert gpu.errors == ("GPU requires reset (remapped_rows)",)


@pytest.mark.parametrize(("raw", "want"), [
    ("00000000:07:00.0", "00000000:07:00.0"),
    ("00000000:10:1C.0", "00000000:10:1c.0"),
    ("0000:B3:00.1", "00000000:b3:00.1"),
    (" 00000001:00:00.0 ", "00000001:00:00.0"),
    ("07:00.0", None),
    ("PCI:0000:b3:00", None),
    ("00000000:07:00.8", None),
])
def test_normalise_pci_bus_id(raw: str, want: str | None) -> None:
    assert normalise_pci_bus_id(raw) == want


# ------------------------------------------------------------------------- fuzz

REAL_LINES = sorted({line for p in ROWS if not p.path.endswith(".xml")
                     for line in read(p.path).splitlines()})
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def only_capture_error(text: str) -> None:
    try:
        snap = parse_smi_q(text)
    except CaptureError:
        return
    assert isinstance(snap, NodeSnapshot)


@FUZZ
@given(st.text())
def test_fuzz_arbitrary_text(text: str) -> None:
    only_capture_error(text)


@FUZZ
@given(st.text(alphabet=st.characters(blacklist_categories=())), st.booleans())
def test_fuzz_any_code_point(text: str, as_xml: bool) -> None:
    """Lone surrogates included (a str from a lenient decode can hold them)."""
    only_capture_error("<nvidia_smi_log>" + text if as_xml else text)


@FUZZ
@given(st.lists(st.one_of(st.sampled_from(REAL_LINES), st.text(max_size=60)), max_size=60))
def test_fuzz_shuffled_real_lines(lines: list[str]) -> None:
    only_capture_error("\n".join(lines))


@FUZZ
@given(st.sampled_from([r.path for r in ROWS]), st.integers(0, 10**6), st.text(max_size=40),
       st.integers(0, 200))
def test_fuzz_spliced_captures(rel: str, at: int, junk: str, cut: int) -> None:
    text = read(rel)
    at %= len(text) + 1
    only_capture_error(text[:at] + junk + text[at + cut:])
