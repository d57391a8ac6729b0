"""ReplayProbe: captures recognised by content, read, merged into one NodeSnapshot.

Directories are built in tmp_path from the real captures in data/gpu; inputs
written inside a test are marked as constructed.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from gpu_data import capture

from slurm_ml.health.checks import Expectations, Severity, Thresholds, check_node
from slurm_ml.health.probe import GpuProbe
from slurm_ml.health.probe_replay import ReplayProbe, build_snapshot, classify
from slurm_ml.health.replay.errors import CaptureError
from slurm_ml.health.snapshot import Gpu, NodeSnapshot, XidEvent

H800 = ("smi-q/llmaction_h800_q_gpu0_525.105.17.txt",
        "nvlink/llmaction_h800x8_nvlink_status_elided.txt",
        "topo/llmaction_h800x8_nv8_nic_topo_pastedamaged.txt",
        "nvlink/llmaction_h800x8_nvlink_capabilities_elided.txt",
        "nvlink/llmaction_h800x8_nvlink_gt_r_elided.txt")


def put(tmp: Path, *rels: str, as_names: tuple[str, ...] = ()) -> Path:
    """Copy captures into tmp; ``as_names`` renames them (kind comes from content)."""
    for k, rel in enumerate(rels):
        name = as_names[k] if k < len(as_names) else Path(rel).name
        shutil.copy(capture(rel), tmp / name)
    return tmp


def text(rel: str) -> str:
    return (capture(rel)).read_text()


@pytest.mark.parametrize(("rel", "kind"), [
    ("smi-q/gpud_h100x8_535.183.01_q.txt", "smi_q"),
    ("smi-q/telegraf_tesla-t4_515.105.01_q.xml", "smi_q"),
    ("ecc/azhc_8gpu_q_page_retirement_clean.txt", "smi_q"),
    ("ecc/mleng_a100x8_q_excerpt_remap_pending.txt", "smi_q"),
    ("smi-q/gpud_h100x8_535.183.01_q_corrupted.invalid.txt", "smi_q"),
    ("topo/mleng_a100x8_nv12_topo.txt", "topo"),
    ("topo/llmaction_h800x8_nv8_nic_topo_pastedamaged.txt", "topo"),
    ("topo/mleng_l4x2_topo_p2p_r_cns.txt", "topo"),
    ("nvlink/gpud_a100x8_nvlink_status.txt", "nvlink_status"),
    ("nvlink/azhc_a100_gpu6_nvlink_status_all_inactive.txt", "nvlink_status"),
    ("nvlink/llmaction_h800x8_nvlink_capabilities_elided.txt", "nvlink_capabilities"),
    ("nvlink/llmaction_h800x8_nvlink_gt_r_elided.txt", "nvlink_counters"),
    ("xid/gpud_dmesg_decode_xid13_43.log", "kernel_log"),
    ("xid/mleng_xid63_row_remapper_line.log", "kernel_log"),
    ("xid/nvtrust124_dmesg_nvswitch_sxid22013.log", "kernel_log"),
    ("xid/ogkm1150_kernel_xid45_after_xid145_149_nvlink.log", "kernel_log"),
    ("ecc/awsome_p4de_a100x8_dcgmi_diag_r2_pass.txt", "dcgmi_diag"),
    ("ecc/mleng_dcgmi_diag_r2_excerpt_gpu0_memory_fail_thermal.txt", "dcgmi_diag"),
    ("smi-q/gpud_nvidia-smi_table_550.90.07.txt", "smi_table"),
    ("nvlink/gpud_fabricmanager_nvswitch_nonfatal_12028.log", "fabricmanager"),
])
def test_classify_by_content(rel: str, kind: str | None) -> None:
    assert classify(text(rel)) == kind


@pytest.mark.parametrize(("body", "kind"), [  # constructed
    ("", "blank"), ("\n  \n", "blank"),
    ("[    1.000000] Linux version 6.8\n[    2.5] usb 1-1: new device\n", "kernel_log"),
    ("GPU 0: NVIDIA A100 (UUID: GPU-x)\n  Link 0: Replay Errors: 0\n", "nvlink_counters"),
    ("hello world\n", None),
])
def test_classify_constructed(body: str, kind: str | None) -> None:
    assert classify(body) == kind


def test_h800_directory_merges_every_capture(tmp_path: Path) -> None:
    # File names carry no meaning: renamed, the captures are still recognised.
    d = put(tmp_path, *H800, as_names=("a", "b", "c", "d", "e"))
    probe = ReplayProbe.from_dir(d)
    snap = probe.snapshot("gpu07")
    assert isinstance(probe, GpuProbe)
    assert snap.node == "gpu07" and snap.source == "replay:a,b,c,d,e"
    assert snap.attached_gpus == 8 and [g.index for g in snap.gpus] == list(range(8))
    g0 = snap.gpus[0]
    assert g0.uuid == "GPU-34bf77d1-c686-6821-79a8-32d326c5039c" and g0.fabric_state == "Completed"
    assert isinstance(g0.nvlinks, tuple) and len(g0.nvlinks) == 8
    assert all(link.active is True and link.speed_gbps == 26.562 for link in g0.nvlinks)
    # GPUs 1 and 7 from nvlink -s only (name and UUID from the header), 2-6 elided there.
    assert snap.gpus[7].uuid == "GPU-474d838c-171f-d249-4f45-bbc01a8eb74a"
    assert snap.gpus[7].name == "NVIDIA H800" and snap.gpus[7].ecc_enabled is None
    assert [g.index for g in snap.gpus if g.nvlinks is not None] == [0, 1, 7]
    assert snap.topology is not None and snap.topology[(3, 5)] == "NV8"
    assert len(snap.topology) == 8 * 7
    assert snap.xids is None  # no kernel log: Xids not read
    found = check_node(snap, Expectations(8, 8, "NV8"), Thresholds())
    assert {f.check_id for f in found} == {"probe.missing"}


def test_kernel_log_xids_land_on_their_gpu(tmp_path: Path) -> None:
    put(tmp_path, "ecc/mleng_a100x8_q_excerpt_remap_pending.txt",
        "xid/mleng_xid63_row_remapper_line.log", "xid/gpud_dmesg_h100_xid119_gsp_timeout.log")
    snap = ReplayProbe.from_dir(tmp_path).snapshot("n")
    assert snap.xids is not None and [e.xid for e in snap.xids] == [119] * 5 + [63]
    found = [(f.check_id, f.severity, f.gpu) for f in
             check_node(snap, Expectations(8, 12, "NV12"), Thresholds())
             if f.check_id != "probe.missing"]
    # 63 is on GPU 0's bus (10:1c); 119 on a bus this excerpt does not list.
    assert found == [("xid.119", Severity.DRAIN_NOW, None),
                     ("remap.pending", Severity.DRAIN_AFTER_JOB, 0),
                     ("xid.63", Severity.FLAG, 0)]


def test_nvlink_status_of_two_gpus_in_two_files(tmp_path: Path) -> None:
    put(tmp_path, "nvlink/azhc_a100_gpu6_nvlink_status_all_inactive.txt",
        "nvlink/azhc_a100_gpu7_nvlink_status_good.txt")
    snap = ReplayProbe.from_dir(tmp_path).snapshot("n")
    assert [g.index for g in snap.gpus] == [6, 7]
    assert snap.gpus[0].nvlinks == ()
    assert isinstance(snap.gpus[1].nvlinks, tuple) and len(snap.gpus[1].nvlinks) == 12


def test_error_counters_fill_status_links(tmp_path: Path) -> None:
    put(tmp_path, "nvlink/awsome_p4de_a100_gpu0_nvlink_status.txt")
    (tmp_path / "errors.txt").write_text(  # constructed: nvidia-smi nvlink -e layout
        "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-370ec676-e407-3115-836a-8ebcb3c4f62a)\n"
        "         Link 3: Replay Errors: 7\n"
        "         Link 3: Recovery Errors: 1\n"
        "         Link 3: CRC Errors: 0\n")
    (g0,) = ReplayProbe.from_dir(tmp_path).base.gpus
    assert isinstance(g0.nvlinks, tuple)
    assert (g0.nvlinks[3].replay_errors, g0.nvlinks[3].recovery_errors) == (7, 1)
    assert g0.nvlinks[3].active is True and g0.nvlinks[2].replay_errors is None


def test_blank_and_hidden_files_and_subdirectories_are_skipped(tmp_path: Path) -> None:
    put(tmp_path, "smi-q/gpud_e2e_a10_550.127.05_q.txt")
    (tmp_path / "nvlink-s.txt").write_text("")  # what nvlink -s prints on an A10
    (tmp_path / ".DS_Store").write_bytes(b"\x00\x01junk")
    (tmp_path / "old").mkdir()
    snap = ReplayProbe.from_dir(tmp_path).base
    assert snap.source == "replay:gpud_e2e_a10_550.127.05_q.txt,nvlink-s.txt"
    assert len(snap.gpus) == 1 and snap.gpus[0].nvlinks is None


@pytest.mark.parametrize(("rels", "match"), [
    (("smi-q/gpud_h100x8_535.183.01_q_corrupted.invalid.txt",),
     r"gpud_h100x8_535\.183\.01_q_corrupted\.invalid\.txt: line 86"),
    (("ecc/mleng_dcgmi_diag_r2_excerpt_gpu0_memory_fail_thermal.txt",
      "ecc/awsome_p4de_a100x8_dcgmi_diag_r2_pass.txt"), "a second dcgmi diag run"),
    # A diag run that names GPUs 0-7 beside a -q capture of a 1-GPU node.
    (("smi-q/gpud_e2e_a10_550.127.05_q.txt",
      "ecc/mleng_dcgmi_diag_r2_excerpt_gpu0_memory_fail_thermal.txt"), "names GPU 1, but"),
    (("smi-q/gpud_e2e_a10_550.127.05_q.txt", "smi-q/gpud_titanv_560.35.03_q.txt"),
     "a second nvidia-smi -q capture"),
    (("topo/mleng_a100x8_nv12_topo.txt", "topo/mleng_h100x8_nv18_topo.txt"),
     "a second topo -m matrix"),
    # One GPU on the node, and an nvlink capture of GPU 6: not the same node.
    (("smi-q/gpud_e2e_a10_550.127.05_q.txt",
      "nvlink/azhc_a100_gpu6_nvlink_status_all_inactive.txt"), "names GPU 6, but"),
    # Two A100 nodes: GPU 7's UUID differs.
    (("nvlink/azhc_a100_gpu7_nvlink_status_good.txt", "nvlink/gpud_a100x8_nvlink_status.txt"),
     "captures of different nodes"),
    # The H800's GPU 0 under an A100 capture's GPU 0.
    (("smi-q/llmaction_h800_q_gpu0_525.105.17.txt",
      "nvlink/awsome_p4de_a100_gpu0_nvlink_status.txt"), "GPU 0 has UUID GPU-370ec676"),
])
def test_bad_input_raises_a_named_capture_error(tmp_path: Path, rels: tuple[str, ...],
                                                match: str) -> None:
    with pytest.raises(CaptureError, match=match):
        ReplayProbe.from_dir(put(tmp_path, *rels))


def test_unreadable_inputs(tmp_path: Path) -> None:
    with pytest.raises(CaptureError, match="no capture files"):
        ReplayProbe.from_dir(tmp_path)
    with pytest.raises(CaptureError, match="cannot list"):
        ReplayProbe.from_dir(tmp_path / "absent")
    (tmp_path / "blob").write_bytes(b"GPU 0\x00\x01")  # constructed
    with pytest.raises(CaptureError, match="blob: binary data"):
        ReplayProbe.from_dir(tmp_path)


def test_build_snapshot_is_pure_and_names_files() -> None:
    snap = build_snapshot([("q.xml", text("smi-q/telegraf_tesla-t4_515.105.01_q.xml"))],
                          node="t4")
    assert snap.node == "t4" and snap.source == "replay:q.xml" and len(snap.gpus) == 1
    with pytest.raises(CaptureError, match=r"^x\.txt: not a capture"):
        build_snapshot([("x.txt", "hello\n")])


def _node(n: int) -> NodeSnapshot:
    gpus = tuple(Gpu(index=i, pci_bus_id=f"00000000:{0x10 + i:02x}:00.0") for i in range(n))
    xids = (*(XidEvent(79, f"PCI:0000:{0x10 + i:02x}:00", "x") for i in range(n)),
            XidEvent(79, "PCI:0000:ff:00", "fell off the bus"))
    return NodeSnapshot(node="", gpus=gpus, xids=xids, source="test")


def test_given_snapshot_and_gpu_restriction() -> None:
    probe = ReplayProbe(_node(4))
    assert probe.snapshot("gpu01") == replace(_node(4), node="gpu01")
    snap = probe.snapshot("gpu01", gpus=[1, 2])
    assert [g.index for g in snap.gpus] == [1, 2] and snap.attached_gpus == 4
    # Xids of GPUs left out are dropped; one on an unknown bus stays (a lost GPU).
    assert snap.xids is not None
    assert [e.pci_bus_id for e in snap.xids] == ["PCI:0000:11:00", "PCI:0000:12:00",
                                                 "PCI:0000:ff:00"]
    kept = replace(_node(4), attached_gpus=8)
    assert ReplayProbe(kept).snapshot("n", gpus=[0]).attached_gpus == 8


def test_error_and_traffic_counters_merge_and_conflicts_raise(tmp_path: Path) -> None:
    put(tmp_path, "nvlink/awsome_p4de_a100_gpu0_nvlink_status.txt")
    head = "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-370ec676-e407-3115-836a-8ebcb3c4f62a)\n"
    # constructed: nvlink -e and nvlink -gt r of the same GPU, then a contradicting -e
    (tmp_path / "e.txt").write_text(head + "  Link 1: Replay Errors: 2\n")
    (tmp_path / "gt.txt").write_text(head + "  Link 1: Raw Tx: 10 KiB\n  Link 1: Raw Rx: 5 KiB\n")
    (g0,) = ReplayProbe.from_dir(tmp_path).base.gpus
    assert isinstance(g0.nvlinks, tuple) and g0.nvlinks[1].replay_errors == 2
    (tmp_path / "f.txt").write_text(head + "  Link 1: Replay Errors: 3\n")
    with pytest.raises(CaptureError, match=r"f\.txt: GPU 0 link 1 counters differ from e\.txt"):
        ReplayProbe.from_dir(tmp_path)
