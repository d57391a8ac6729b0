"""The plain nvidia-smi table parser (replay.smi_table) on real captures and made-up tables.

The three files under data/gpu/smi-q named ``*nvidia-smi_table*`` are real captures (see
SOURCES.md); every value asserted on them was read off the file by hand. Every other
table below is constructed in the layout of the driver its comment names: not a real
capture. Each exercises one rule.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_ml.health.replay.errors import CaptureError
from slurm_ml.health.replay.smi_table import SOURCE, looks_like_smi_table, parse_smi_table
from slurm_ml.health.snapshot import NOT_SUPPORTED, EccCounts, Gpu, NodeSnapshot

SMI_Q = Path(__file__).resolve().parents[2] / "data" / "gpu" / "smi-q"
NS = NOT_SUPPORTED


def _real(name: str) -> str:
    return (SMI_Q / name).read_text(encoding="utf-8")


H100X8 = _real("gpud_nvidia-smi_table_550.90.07.txt")
FAN_ERR = _real("gpud_nvidia-smi_table_525.125.06.txt")
A10 = _real("gpud_e2e_a10_550.127.05_nvidia-smi_table.txt")

# Constructed in the layout of driver 535; not a real capture.
T535 = """\
+---------------------------------------------------------------------------------------+
| NVIDIA-SMI 535.104.05             Driver Version: 535.104.05   CUDA Version: 12.2     |
|-----------------------------------------+----------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |         Memory-Usage | GPU-Util  Compute M. |
|                                         |                      |               MIG M. |
|=========================================+======================+======================|
|   0  NVIDIA A100-SXM4-80GB          On  | 00000000:07:00.0 Off |                    0 |
| N/A   33C    P0              62W / 400W |      4MiB / 81920MiB |      0%      Default |
|                                         |                      |             Disabled |
+-----------------------------------------+----------------------+----------------------+
|   1  NVIDIA A100-SXM4-80GB          On  | 00000000:0F:00.0 Off |                    2 |
| N/A   31C    P0             211W / 400W |  40217MiB / 81920MiB |     87%      Default |
|                                         |                      |             Disabled |
+-----------------------------------------+----------------------+----------------------+

+---------------------------------------------------------------------------------------+
| Processes:                                                                            |
|  GPU   GI   CI        PID   Type   Process name                            GPU Memory |
|        ID   ID                                                             Usage      |
|=======================================================================================|
|    1   N/A  N/A     41733      C   python                                    40208MiB |
+---------------------------------------------------------------------------------------+
"""

# Constructed in the layout of driver 460; not a real capture.
T460 = """\
Tue Mar  2 09:14:05 2021
+-----------------------------------------------------------------------------+
| NVIDIA-SMI 460.32.03    Driver Version: 460.32.03    CUDA Version: 11.2     |
|-------------------------------+----------------------+----------------------+
| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |
|                               |                      |               MIG M. |
|===============================+======================+======================|
|   0  A100-SXM4-40GB      On   | 00000000:07:00.0 Off |                    0 |
| N/A   31C    P0    42W / 400W |      0MiB / 40536MiB |      0%      Default |
|                               |                      |             Disabled |
+-------------------------------+----------------------+----------------------+
|   1  A100-SXM4-40GB      On   | 00000000:0F:00.0 Off |                   On |
| N/A   30C    P0    44W / 400W |     13MiB / 40536MiB |     N/A      Default |
|                               |                      |              Enabled |
+-------------------------------+----------------------+----------------------+

+-----------------------------------------------------------------------------+
| MIG devices:                                                                |
+------------------+----------------------+-----------+-----------------------+
| GPU  GI  CI  MIG |         Memory-Usage |        Vol|         Shared        |
|      ID  ID  Dev |           BAR1-Usage | SM     Unc| CE  ENC  DEC  OFA  JPG|
|                  |                      |        ECC|                       |
|==================+======================+===========+=======================|
|  1    1   0   0  |     13MiB / 40536MiB | 98      0 |  7   0    5    1    1 |
|                  |      0MiB / 65535MiB |           |                       |
+------------------+----------------------+-----------+-----------------------+
"""

# Constructed in the layout of driver 375; not a real capture.
T375 = """\
+-----------------------------------------------------------------------------+
| NVIDIA-SMI 375.26                 Driver Version: 375.26                    |
|-------------------------------+----------------------+----------------------+
| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |
|===============================+======================+======================|
|   0  Tesla K80           On   | 0000:04:00.0     Off |                    0 |
| N/A   34C    P8    26W / 149W |      0MiB / 11439MiB |      0%      Default |
+-------------------------------+----------------------+----------------------+
|   1  Tesla K80           On   | 0000:05:00.0     Off |                  Off |
| N/A   29C    P8    30W / 149W |      0MiB / 11439MiB |     12%   E. Process |
+-------------------------------+----------------------+----------------------+
"""

# Constructed in the layout of driver 325; not a real capture (memory in MB, not MiB).
T325 = """\
+------------------------------------------------------+
| NVIDIA-SMI 5.325.15   Driver Version: 325.15         |
|-------------------------------+----------------------+----------------------+
| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |
|===============================+======================+======================|
|   0  Tesla K20m          Off  | 0000:02:00.0     Off |                    0 |
| N/A   31C    P0    47W / 225W |       69MB /  4799MB |      0%      Default |
+-------------------------------+----------------------+----------------------+
"""


def _535_gpu(index: int, bus: str, row1_tail: str, row2: str, row3: str | None = None) -> str:
    """Rows of one GPU in the 535 layout, separator included (constructed, not a capture)."""
    rows = [f"|   {index}  NVIDIA A100-SXM4-80GB          On  | {bus} {row1_tail}", row2]
    if row3 is not None:
        rows.append(row3)
    rows.append("+-----------------------------------------+----------------------+----------------------+")
    return "\n".join(rows) + "\n"


HEAD_535 = T535.partition("|   0  NVIDIA")[0]  # up to and with the ==== line
HEADER_ONLY_535 = T535.partition("|=====")[0]  # title and column headers, no GPU row
OK_ROW2 = "| N/A   33C    P0              62W / 400W |      4MiB / 81920MiB |      0%      Default |"
OK_ROW3 = "|                                         |                      |             Disabled |"


def _one(text: str) -> Gpu:
    snap = parse_smi_table(text)
    assert len(snap.gpus) == 1, snap.gpus
    return snap.gpus[0]


# --------------------------------------------------------------------------- healthy


def test_real_h100x8_550_healthy() -> None:
    snap = parse_smi_table(H100X8)
    assert snap.source == SOURCE == "replay:nvidia-smi-table"
    assert (snap.driver_version, snap.cuda_version) == ("550.90.07", "12.4")
    assert snap.attached_gpus is None and snap.errors == () and snap.node == ""
    assert [g.index for g in snap.gpus] == list(range(8))
    assert [g.pci_bus_id for g in snap.gpus] == [
        f"00000000:{b}:00.0" for b in ("19", "3b", "4c", "5d", "9b", "bb", "cb", "db")]
    for g in snap.gpus:
        assert g.name == "NVIDIA H100 80GB HBM3"
        assert (g.memory_used_mb, g.memory_total_mb) == (1, 81559)
        assert g.utilization_gpu_pct == 0.0 and g.errors == ()
        assert g.ecc_enabled is True and g.ecc == EccCounts(volatile_uncorrected=0)
        assert g.mig_enabled is False
        # The table does not show these: not looked at.
        assert g.uuid is None and g.nvlinks is None and g.remapped_rows is None
        assert g.processes is None and g.pcie_replay_count is None


def test_real_a10_550_healthy() -> None:
    gpu = _one(A10)
    assert gpu == Gpu(index=0, name="NVIDIA A10", pci_bus_id="00000000:06:00.0",
                      memory_used_mb=1, memory_total_mb=23028, utilization_gpu_pct=0.0,
                      ecc_enabled=True, ecc=EccCounts(volatile_uncorrected=0),
                      mig_enabled=NS)
    assert parse_smi_table(A10, node="gpu07").node == "gpu07"


def test_constructed_535_two_gpus_and_processes_box_skipped() -> None:
    snap = parse_smi_table(T535)
    assert (snap.driver_version, snap.cuda_version) == ("535.104.05", "12.2")
    g0, g1 = snap.gpus
    assert (g0.name, g0.pci_bus_id, g0.memory_used_mb, g0.memory_total_mb) == (
        "NVIDIA A100-SXM4-80GB", "00000000:07:00.0", 4, 81920)
    assert (g1.pci_bus_id, g1.memory_used_mb, g1.utilization_gpu_pct) == (
        "00000000:0f:00.0", 40217, 87.0)
    assert g1.ecc.volatile_uncorrected == 2  # the count the table shows
    assert g0.errors == g1.errors == () and g1.processes is None


def test_constructed_460_mig_row_and_mig_devices_box() -> None:
    snap = parse_smi_table(T460)
    assert (snap.driver_version, snap.cuda_version) == ("460.32.03", "11.2")
    g0, g1 = snap.gpus
    assert (g0.name, g0.mig_enabled, g0.ecc_enabled) == ("A100-SXM4-40GB", False, True)
    # MIG on: the ECC cell reads "On" (no count), utilisation N/A.
    assert (g1.mig_enabled, g1.ecc_enabled, g1.ecc.volatile_uncorrected) == (True, True, None)
    assert g1.utilization_gpu_pct is NS and g1.memory_used_mb == 13
    assert len(snap.gpus) == 2  # the MIG devices rows are not GPUs


def test_constructed_375_and_325_older_layouts() -> None:
    snap = parse_smi_table(T375)
    assert (snap.driver_version, snap.cuda_version) == ("375.26", None)
    g0, g1 = snap.gpus
    assert (g0.name, g0.pci_bus_id, g0.memory_total_mb) == (
        "Tesla K80", "00000000:04:00.0", 11439)
    assert g0.mig_enabled is None  # no MIG row in this layout: not shown
    assert (g1.ecc_enabled, g1.ecc, g1.utilization_gpu_pct) == (False, EccCounts(), 12.0)

    old = _one(T325)
    assert parse_smi_table(T325).driver_version == "325.15"
    assert (old.name, old.pci_bus_id, old.memory_used_mb, old.memory_total_mb) == (
        "Tesla K20m", "00000000:02:00.0", 69, 4799)


def test_constructed_windows_wddm_and_not_supported_memory() -> None:
    # Constructed in the layout of driver 546 on Windows; not a real capture.
    win = _one(
        "|   0  NVIDIA GeForce RTX 3080 ...  WDDM  |   00000000:01:00.0  On |                  N/A |\n"
        "|  0%   45C    P8             21W /  320W |     512MiB /  10240MiB |      3%      Default |\n"
        "|                                         |                        |                  N/A |\n")
    assert (win.name, win.pci_bus_id, win.ecc_enabled, win.ecc.volatile_uncorrected) == (
        "NVIDIA GeForce RTX 3080 ...", "00000000:01:00.0", NS, NS)
    assert (win.utilization_gpu_pct, win.errors) == (3.0, ())
    # Constructed in the layout of driver 580 on a unified-memory system; not a real capture.
    unified = _one(
        "|   0  NVIDIA GB10                    On  |   0000000F:01:00.0 Off |                  N/A |\n"
        "| N/A   37C    P8              4W /  N/A  | Not Supported          |      0%      Default |\n"
        "|                                         |                        |                  N/A |\n")
    assert (unified.memory_used_mb, unified.memory_total_mb) == (NS, NS)
    assert unified.pci_bus_id == "0000000f:01:00.0" and unified.errors == ()


# --------------------------------------------------------------------------- error cells


def test_real_525_fan_err_only() -> None:
    snap = parse_smi_table(FAN_ERR)
    assert (snap.driver_version, snap.cuda_version) == ("525.125.06", "12.0")
    gpu = _one(FAN_ERR)
    assert gpu.errors == ("ERR! (fan)",)
    assert (gpu.name, gpu.pci_bus_id) == ("NVIDIA GeForce ...", "00000000:01:00.0")
    assert (gpu.memory_used_mb, gpu.memory_total_mb, gpu.utilization_gpu_pct) == (
        2021, 23028, 0.0)


def test_err_in_temperature_power_and_memory() -> None:
    # Constructed in the layout of driver 535; not a real capture.
    text = HEAD_535 + _535_gpu(
        0, "00000000:07:00.0", "Off |                    0 |",
        "| N/A  ERR!    P0             ERR! / 400W |   ERR! /  81920MiB   |      0%      Default |",
        OK_ROW3)
    gpu = _one(text)
    assert gpu.errors == ("ERR! (temperature, power, memory)",)
    assert (gpu.memory_used_mb, gpu.memory_total_mb) == (None, None)  # not read
    assert gpu.utilization_gpu_pct == 0.0 and gpu.name == "NVIDIA A100-SXM4-80GB"


def test_err_in_temperature_and_power_only() -> None:
    # Constructed in the layout of driver 460; not a real capture.
    text = T460.replace("| N/A   31C    P0    42W / 400W |", "| N/A  ERR!    P0   ERR! / 400W |")
    g0, g1 = parse_smi_table(text).gpus
    assert g0.errors == ("ERR! (temperature, power)",) and g1.errors == ()


def test_err_in_every_cell() -> None:
    # Constructed in the layout of driver 535; not a real capture.
    text = HEAD_535 + (
        "|   3  ERR!                         ERR!  | ERR!            ERR! |                 ERR! |\n"
        "|ERR!  ERR!   ERR!           ERR! /  ERR! |   ERR!  /     ERR!   |   ERR!        ERR!   |\n"
        "|                                         |                      |                 ERR! |\n"
        "+-----------------------------------------+----------------------+----------------------+\n")
    gpu = _one(text)
    assert gpu.index == 3
    assert gpu.errors == ("ERR! (name, persistence, bus, display, ecc, fan, temperature, perf, "
                          "power, memory, utilization, compute mode, mig mode)",)
    assert gpu.name is gpu.pci_bus_id is gpu.memory_used_mb is gpu.utilization_gpu_pct is None
    assert gpu.ecc_enabled is None and gpu.mig_enabled is None


def test_other_error_strings_one_entry_per_message() -> None:
    # Constructed in the layout of driver 535; not a real capture.
    text = HEAD_535 + _535_gpu(
        0, "00000000:07:00.0", "Off |      [Unknown Error] |",
        "| N/A   33C    P0              62W / 400W |  Unknown Error       |   ERR!       Default |",
        OK_ROW3) + _535_gpu(
        1, "00000000:0F:00.0", "Off | [GPU requires reset] |", OK_ROW2,
        "|                                         |                      |       Requires reset |",
    ) + (
        "|   2  GPU is lost                    On  | 00000000:47:00.0 Off |                    0 |\n"
        + OK_ROW2 + "\n" + OK_ROW3 + "\n")
    g0, g1, g2 = parse_smi_table(text).gpus
    assert g0.errors == ("Unknown Error (ecc, memory)", "ERR! (utilization)")
    assert g1.errors == ("GPU requires reset (ecc)", "Requires reset (mig mode)")
    assert (g2.errors, g2.name, g2.pci_bus_id) == (
        ("GPU is lost (name)",), None, "00000000:47:00.0")


def test_fan_appears_only_where_the_fan_column_erred() -> None:
    others = [
        T460.replace("| N/A   31C    P0    42W / 400W |", "| N/A  ERR!    P0   ERR! / 400W |"),
        T375.replace("|                    0 |", "|                 ERR! |"),
        HEAD_535 + "|   0  NVIDIA A100-SXM4-80GB          On  | 00000000:07:00.0 Off |                 ERR! |\n"
        "| N/A   33C   ERR!             62W / 400W |      4MiB / 81920MiB |   ERR!       Default |\n",
    ]
    for text in others:
        errors = [e for g in parse_smi_table(text).gpus for e in g.errors]
        assert errors and not any("fan" in e for e in errors), errors
    fan_and_more = T375.replace("| N/A   34C    P8 ", "|ERR!   ERR!   P8 ")
    assert parse_smi_table(fan_and_more).gpus[0].errors == ("ERR! (fan, temperature)",)


# --------------------------------------------------------------------------- partial tables


def _drop_gpu(text: str, bus: str) -> str:
    """The table without the three rows of the GPU at ``bus`` (as if it were not listed)."""
    lines = text.split("\n")
    at = next(i for i, line in enumerate(lines) if bus in line)
    return "\n".join(lines[:at] + lines[at + 4:])


def test_table_missing_a_gpu() -> None:
    text = _drop_gpu(H100X8, "00000000:5D:00.0")
    snap = parse_smi_table(text)
    assert [g.index for g in snap.gpus] == [0, 1, 2, 4, 5, 6, 7]
    assert all(g.errors == () for g in snap.gpus)


def test_device_handle_line_after_a_table_missing_that_gpu() -> None:
    # The message wording is nvidia-smi's; its placement here is constructed.
    text = _drop_gpu(H100X8, "00000000:5D:00.0") + (
        "\nUnable to determine the device handle for GPU 0000:5D:00.0: Unknown Error\n")
    snap = parse_smi_table(text)
    assert [g.index for g in snap.gpus] == [0, 1, 2, 4, 5, 6, 7, 8]
    assert snap.gpus[-1] == Gpu(index=8, pci_bus_id="00000000:5d:00.0",
                                errors=("Unknown Error (device handle unavailable)",))
    assert snap.driver_version == "550.90.07"


def test_device_handle_line_before_a_table_that_lists_the_bus() -> None:
    text = ("Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.  "
            "Reboot the system to recover this GPU\n" + H100X8)
    snap = parse_smi_table(text)
    assert len(snap.gpus) == 8
    assert snap.gpus[1].errors == (
        "GPU is lost.  Reboot the system to recover this GPU (device handle unavailable)",)
    assert all(g.errors == () for g in snap.gpus if g.index != 1)


def test_device_handle_lines_alone() -> None:
    snap = parse_smi_table(
        "Unable to determine the device handle for GPU 0000:3B:00.0: Unknown Error\n"
        "Unable to determine the device handle for GPU1: 0000:86:00.0: GPU is lost\n"
        "Unable to determine the device handle for GPU 0000:AF:00.0\n")
    assert snap.gpus == (
        Gpu(index=0, pci_bus_id="00000000:3b:00.0",
            errors=("Unknown Error (device handle unavailable)",)),
        Gpu(index=1, pci_bus_id="00000000:86:00.0",
            errors=("GPU is lost (device handle unavailable)",)),
        Gpu(index=2, pci_bus_id="00000000:af:00.0",
            errors=("no reason given (device handle unavailable)",)),
    )
    assert snap.driver_version is None and snap.errors == ()


def test_inforom_warning_on_a_listed_gpu_and_on_an_absent_one() -> None:
    listed = parse_smi_table("WARNING: infoROM is corrupted at gpu 0000:06:00.0\n" + A10)
    assert listed.gpus[0].errors == ("Corrupted infoROM (nvidia-smi warning)",)
    assert listed.gpus[0].name == "NVIDIA A10"
    absent = parse_smi_table(A10 + "\nWARNING: infoROM is corrupted at gpu 0000:3B:00.0\n")
    assert absent.gpus[1] == Gpu(index=1, pci_bus_id="00000000:3b:00.0",
                                 errors=("Corrupted infoROM (nvidia-smi warning)",))
    alone = _one("WARNING: infoROM is corrupted at gpu 0000:3B:00.0\n")
    assert (alone.index, alone.errors) == (0, ("Corrupted infoROM (nvidia-smi warning)",))


def test_inforom_and_err_on_one_gpu_keep_both() -> None:
    gpu = _one("WARNING: infoROM is corrupted at gpu 0000:01:00.0\n" + FAN_ERR)
    assert gpu.errors == ("ERR! (fan)", "Corrupted infoROM (nvidia-smi warning)")


def test_fragment_without_header() -> None:
    # Constructed in the layout of driver 535 (rows pasted without the header); not a capture.
    rows = T535.removeprefix(HEAD_535).partition("\n\n")[0]
    snap = parse_smi_table(rows)
    assert snap.driver_version is None and snap.cuda_version is None
    assert [(g.index, g.pci_bus_id) for g in snap.gpus] == [
        (0, "00000000:07:00.0"), (1, "00000000:0f:00.0")]
    two_rows = _one(OK_ROW2 + "\n" + "|   5  NVIDIA A100-SXM4-80GB          On  | "
                    "00000000:87:00.0 Off |                    0 |\n" + OK_ROW2 + "\n")
    assert (two_rows.index, two_rows.memory_used_mb, two_rows.mig_enabled) == (5, 4, None)
    row_one_only = _one("|   5  NVIDIA A100-SXM4-80GB          On  | 00000000:87:00.0 Off |  "
                        "                  0 |")
    assert row_one_only.memory_used_mb is None and row_one_only.name == "NVIDIA A100-SXM4-80GB"


# --------------------------------------------------------------------------- node level, framing


@pytest.mark.parametrize("message", [
    "No devices were found",
    "Failed to initialize NVML: Driver/library version mismatch",
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.",
])
def test_node_level_failures(message: str) -> None:
    snap = parse_smi_table(f"$ nvidia-smi\n{message}\n")
    assert snap == NodeSnapshot(node="", gpus=(), source=SOURCE, errors=(f"{message} (line 2)",))


def test_crlf_prompt_and_repeated_table() -> None:
    assert parse_smi_table(H100X8.replace("\n", "\r\n")) == parse_smi_table(H100X8)
    assert parse_smi_table("user@node07:~$ nvidia-smi\r\n" + A10.replace("\n", "\r\n")) == (
        parse_smi_table(A10))
    later = A10.replace("      1MiB /  23028MiB", "  20481MiB /  23028MiB")
    assert _one(A10 + "\n" + later).memory_used_mb == 20481  # nvidia-smi -l: the last wins


def test_processes_rows_are_not_read_as_gpus_or_errors() -> None:
    text = T535.replace("python                                   40208MiB",
                        "ERR!                                         ERR! ")
    assert parse_smi_table(text) == parse_smi_table(T535)


@pytest.mark.parametrize("text", [
    "",
    "\n  \n",
    "$ nvidia-smi\nbash: nvidia-smi: command not found\n",
    _real("gpud_e2e_a10_550.127.05_q.txt"),
    HEADER_ONLY_535,
])
def test_not_a_table_raises_with_a_line(text: str) -> None:
    with pytest.raises(CaptureError, match=r"^line \d+: .*no GPU row"):
        parse_smi_table(text)


def test_capture_error_names_the_first_line() -> None:
    with pytest.raises(CaptureError, match=r"^line 2: 'bash: nvidia-smi: command not found'"):
        parse_smi_table("\nbash: nvidia-smi: command not found\n")


def test_looks_like_smi_table() -> None:
    for text in (H100X8, FAN_ERR, A10, T535, T460, T375, T325, HEADER_ONLY_535,
                 "|   0  NVIDIA A10      On  |   00000000:06:00.0 Off |       0 |"):
        assert looks_like_smi_table(text)
    for text in (_real("gpud_e2e_a10_550.127.05_q.txt"), "", "No devices were found\n",
                 "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-x)\n\t Link 0: 25 GB/s\n",
                 "    gpuId 0:\n        U U U U\n"):
        assert not looks_like_smi_table(text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(
    [*T535.splitlines(), *FAN_ERR.splitlines(), "ERR!", "| ERR! | Unknown Error | [x] |",
     "Unable to determine the device handle for GPU", "|   7  x  On  | 1:2", "+---+", ""]),
    max_size=30))
def test_any_mix_of_lines_parses_or_raises_capture_error(lines: list[str]) -> None:
    try:
        snap = parse_smi_table("\n".join(lines))
    except CaptureError:
        return
    assert len({g.index for g in snap.gpus}) == len(snap.gpus)
