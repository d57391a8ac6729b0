"""The checks on every real capture in data/gpu: one row per capture file.

Each row replays ONE capture through ``ReplayProbe`` and ``check_node`` with the
expectations of the hardware it was taken on, and lists the EXACT findings (check id,
severity, GPU) it must give, ``probe.missing`` aside: a single capture never holds every
reading, and missing evidence is a FLAG that never drains (tested in
test_health_checks.py). Verdicts come from SOURCES.md and research/gpu-health.md:

* FAULTY  - must give at least one drain finding, for the reason in ``why``;
* FLAGGED - a fault signal that is a FLAG by design (why says which check drains instead);
* APP     - an application fault (Xid 13/43/109): no drain;
* HEALTHY - no drain finding (SUSPECT captures, per SOURCES.md, are healthy for the checks:
  no check reads clock-event reasons).

Rows whose expectations differ from the full node (a capture that shows fewer GPUs than
the node has and no "Attached GPUs" line) say so. ``NOT_JUDGED`` lists, with the reason,
every capture no check can judge; the coverage test fails when a capture is in neither.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from gpu_data import FROM_THREADS, GPU_DATA, capture

from slurm_ml.health.checks import Expectations, Finding, Severity, Thresholds, check_node
from slurm_ml.health.probe_replay import ReplayProbe
from slurm_ml.health.replay.errors import CaptureError

DRAIN, AFTER, FLAG = Severity.DRAIN_NOW, Severity.DRAIN_AFTER_JOB, Severity.FLAG
Row = tuple[str, Severity, int | None]

# Expectations by hardware (links per GPU and the topo -m cell: checks.expect.topology_cell).
A100_SXM_8 = Expectations(gpu_count=8, nvlink_links_per_gpu=12, expected_topology_cell="NV12")
A100_SXM_4 = Expectations(gpu_count=4, nvlink_links_per_gpu=12, expected_topology_cell="NV4")
H100_SXM_8 = Expectations(gpu_count=8, nvlink_links_per_gpu=18, expected_topology_cell="NV18")
H100_SXM_4 = Expectations(gpu_count=4, nvlink_links_per_gpu=18, expected_topology_cell="NV6")
H800_SXM_8 = Expectations(gpu_count=8, nvlink_links_per_gpu=8, expected_topology_cell="NV8")
# Azure NDv2 (inference, SOURCES.md): 8x V100 SXM2, 6 links each, hybrid cube mesh (the
# mixed NV1/NV2 topology is not checked).
V100_SXM_8 = Expectations(gpu_count=8, nvlink_links_per_gpu=6)


def pcie(n: int) -> Expectations:
    """n PCIe cards: no NVLink, topology not checked."""
    return Expectations(gpu_count=n)


#: A kernel log alone enumerates no GPUs: events are node-level (gpu None), count 0.
LOG_ONLY = Expectations(gpu_count=0)


@dataclass(frozen=True)
class Case:
    path: str  # under data/gpu
    exp: Expectations
    want: list[Row]  # sorted as check_node sorts: severity, GPU, check id
    verdict: str  # FAULTY | FLAGGED | APP | HEALTHY
    why: str


CASES: list[Case] = [
    # ------------------------------------------------------------ nvidia-smi -q (smi-q/)
    Case("smi-q/gpud_a10_535.129.03_q_remap_pending.txt", pcie(1),
         [("remap.pending", AFTER, 0)], "FAULTY",
         "4 uncorrectable rows remapped, Pending: Yes: drain after the job, reset"),
    Case("smi-q/gpud_e2e_a10_550.127.05_q.txt", pcie(1), [], "HEALTHY", "idle A10"),
    Case("smi-q/gpud_h100x8_535.161.08_q.txt", H100_SXM_8, [], "HEALTHY",
         "SUSPECT in SOURCES.md (HW slowdown + power brake active on all 8, counters zero); "
         "no check reads clock-event reasons, PCIe replay counts (67, 82) are not judged"),
    Case("smi-q/gpud_h100x8_535.183.01_q.txt", H100_SXM_8, [], "HEALTHY",
         "one GPU under power cap/thermal slowdown while running a job; Replays Since Reset "
         "120 on GPU 0 is not judged"),
    Case("smi-q/gpud_rtx4090x8_535.154.05_q.txt", pcie(8), [], "HEALTHY", "idle"),
    Case("smi-q/gpud_rtx4090x8_535.154.05_q_swpowercap.txt", pcie(8), [], "HEALTHY",
         "2 GPUs under SW power cap (load)"),
    Case("smi-q/gpud_titanv_560.35.03_q.txt", pcie(1), [], "HEALTHY",
         "Volta: page retirement, no remapping"),
    Case("smi-q/llmaction_h800_q_gpu0_525.105.17.txt", H800_SXM_8, [], "HEALTHY",
         "nvidia-smi -q -i 0: one GPU listed, Attached GPUs 8; ECC disabled reads N/A "
         "(tolerated), fabric Completed"),
    Case("smi-q/netdata_a100-sxm4-40gb_mig_510.47.03_q.xml", replace(A100_SXM_8, gpu_count=1),
         [], "HEALTHY", "MIG enabled; the VM has 1 GPU attached"),
    Case("smi-q/netdata_rtx4090_535.86.05_q.xml", pcie(1), [], "HEALTHY", ""),
    Case("smi-q/telegraf_a100-sxm4-80gb_mig_535.54.03_q.xml", A100_SXM_4, [], "HEALTHY",
         "MIG enabled; one GPU element, Attached GPUs 4"),
    Case("smi-q/telegraf_a10g_515.105.01_q.xml", pcie(1), [], "HEALTHY",
         "AWS A10G at PCIe x8 of x16 by design (was a false pcie.width FLAG: fixed)"),
    Case("smi-q/telegraf_rtx-a5000x2_590.44.01_q.xml", pcie(2), [], "HEALTHY", ""),
    Case("smi-q/telegraf_rtx4000-sff-ada_595.84_q.xml", pcie(1), [], "HEALTHY", ""),
    Case("smi-q/telegraf_rtxpro6000-blackwell-maxq_590.44.01_q.xml", pcie(1), [], "HEALTHY",
         "Blackwell, v13 XML schema"),
    Case("smi-q/telegraf_tesla-t4_515.105.01_q.xml", pcie(1), [], "HEALTHY",
         "AWS T4 at PCIe x8 of x16 by design (was a false pcie.width FLAG: fixed)"),
    # ------------------------------------------------------------ nvidia-smi -q (ecc/)
    Case("ecc/azhc_8gpu_q_page_retirement_bad.txt", V100_SXM_8,
         [("retired_pages.count", DRAIN, 0), ("retired_pages.count", DRAIN, 1),
          ("retired_pages.count", DRAIN, 5), ("retired_pages.count", DRAIN, 7),
          ("retired_pages.pending", AFTER, 1), ("retired_pages.pending", AFTER, 3),
          ("retired_pages.pending", AFTER, 5), ("retired_pages.pending", AFTER, 7)],
         "FAULTY",
         "SBE+DBE retired pages 65/63/65/64 on GPUs 0/1/5/7 reach the limit of 63 (the "
         "other two GPUs with retired pages stay under it); Pending Page Blacklist on 1/3/5/7"),
    Case("ecc/azhc_8gpu_q_page_retirement_clean.txt", V100_SXM_8, [], "HEALTHY",
         "same node 33 s earlier, all counters 0"),
    Case("ecc/mleng_a100x8_q_excerpt_remap_pending.txt", A100_SXM_8,
         [("remap.pending", AFTER, 0)], "FAULTY",
         "excerpt of 1 of 8 GPUs: remap pending after 177 correctable DRAM errors"),
    Case("ecc/netdata_tesla-p100_510.47.03_q_aggregate_sbe3.xml", pcie(1), [], "HEALTHY",
         "3 lifetime single-bit errors, none volatile, no retired pages: minor"),
    # ------------------------------------------------------------ dcgmi diag (ecc/)
    # Read as evidence (checks.dcgm); the model of the mleng excerpts is not shown, so no
    # NVLink is expected of them. The pass run's count is its 8 detected device ids.
    Case("ecc/awsome_p4de_a100x8_dcgmi_diag_r2_pass.txt", A100_SXM_8, [], "HEALTHY",
         "dcgmi diag -r 2 on a p4de: every test Pass"),
    Case("ecc/mleng_dcgmi_diag_r2_excerpt_gpu0_memory_fail_thermal.txt", pcie(8),
         [("dcgm.memory", DRAIN, 0)], "FAULTY",
         "GPU Memory: Fail - GPU: 0, with a thermal violation warning for GPU 0"),
    Case("ecc/mleng_dcgmi_diag_r3_excerpt_uncorrectable_remap_pending.txt", pcie(1),
         [("dcgm.deployment", AFTER, 3)], "FAULTY",
         "Deployment Error row: GPU 3 has uncorrectable memory errors and pending row "
         "remappings (as remap.pending: drain after the job)"),
    # ------------------------------------------------------------ nvlink -s (nvlink/)
    # These list only the GPUs shown and have no "Attached GPUs": the count expected is the
    # number shown; the node's count is judged on its -q capture.
    Case("nvlink/awsome_p4de_a100_gpu0_nvlink_status.txt", replace(A100_SXM_8, gpu_count=1),
         [], "HEALTHY", "GPU 0: 12 x 25 GB/s"),
    Case("nvlink/azhc_a100_gpu6_nvlink_status_all_inactive.txt",
         replace(A100_SXM_8, gpu_count=1), [("nvlink.active_links", DRAIN, 6)], "FAULTY",
         "GPU 6: 'all links are inactive', 0 of 12 active"),
    Case("nvlink/azhc_a100_gpu7_nvlink_status_good.txt", replace(A100_SXM_8, gpu_count=1),
         [], "HEALTHY", "GPU 7: 12 x 25 GB/s"),
    Case("nvlink/gpud_a100x8_nvlink_status.txt", A100_SXM_8, [], "HEALTHY",
         "8 x 12 x 25 GB/s"),
    Case("nvlink/llmaction_h800x8_nvlink_status_elided.txt", replace(H800_SXM_8, gpu_count=3),
         [], "HEALTHY", "GPUs 0, 1, 7 shown (2-6 elided by the author), 8 x 26.562 GB/s"),
    # ------------------------------------------------------------ topo -m (topo/)
    Case("topo/llmaction_a800x8_nv8_nic_topo.txt", H800_SXM_8, [], "HEALTHY", "NV8 all pairs"),
    Case("topo/llmaction_h800x8_nv8_nic_topo_pastedamaged.txt", H800_SXM_8, [], "HEALTHY",
         "damaged paste (NIC columns cut); the GPU matrix is whole, NV8"),
    Case("topo/missalign106_l40s_x4_pcie_nic_topo.txt", pcie(4), [], "HEALTHY",
         "PCIe only by design: no topology expected"),
    Case("topo/mleng_a100x8_nv12_topo.txt", A100_SXM_8, [], "HEALTHY", "NV12 all pairs"),
    Case("topo/mleng_h100x8_nv18_topo.txt", H100_SXM_8, [], "HEALTHY", "NV18 all pairs"),
    Case("topo/nccl1617_h100_x4_nv6_nic_topo_matrix.txt", H100_SXM_4, [], "HEALTHY",
         "4x H100 full mesh, NV6 per pair"),
    # ------------------------------------------------------------ kernel logs (xid/)
    Case("xid/gpud_dmesg_decode_xid13_43.log", LOG_ONLY, [], "APP",
         "629x Xid 13 + 7x Xid 43: application faults, ignored"),
    Case("xid/gpud_dmesg_h100_xid119_gsp_timeout.log", LOG_ONLY, [("xid.119", DRAIN, None)],
         "FAULTY", "5x Xid 119 GSP RPC timeout"),
    Case("xid/gpud_dmesg_xid48_63_94_dbe_rowremap.log", LOG_ONLY,
         [("xid.48", DRAIN, None), ("xid.94", AFTER, None), ("xid.63", FLAG, None)], "FAULTY",
         "Xid 48 double-bit ECC drains; 94 (contained ECC) drains after the job (NVIDIA: "
         "reset the GPU when convenient); 63 (remap recorded) flags"),
    Case("xid/gpudpr46_dmesg_ctime_xid13_xid109.log", LOG_ONLY, [("xid.109", FLAG, None)],
         "APP", "Xid 13 ignored; one Xid 109 context-switch timeout flagged (drain if repeated)"),
    Case("xid/mleng_xid63_row_remapper_line.log", LOG_ONLY, [("xid.63", FLAG, None)],
         "FLAGGED", "Xid 63 records a remap; remap.pending on the same host's -q excerpt "
         "(ecc/mleng_a100x8_q_excerpt_remap_pending.txt) is what drains"),
    Case("xid/nvtrust124_dmesg_nvswitch_sxid22013.log", LOG_ONLY,
         [("kernel.nvswitch_sxid", FLAG, None)], "FLAGGED",
         "no Xid; boot-time non-fatal SXid 22013 on NVSwitch links: flagged, node-level"),
    # ------------------------------------------------------------ Fabric Manager log
    Case("nvlink/gpud_fabricmanager_nvswitch_nonfatal_12028.log", LOG_ONLY,
         [("kernel.nvswitch_sxid", FLAG, None)], "FLAGGED",
         "Fabric Manager's 'detected NVSwitch non-fatal error 12028': flagged, no drain"),
    # ------------------------------------------------------------ plain nvidia-smi table
    Case("smi-q/gpud_e2e_a10_550.127.05_nvidia-smi_table.txt", pcie(1), [], "HEALTHY",
         "plain table of a healthy A10"),
    Case("smi-q/gpud_nvidia-smi_table_525.125.06.txt", pcie(1),
         [("gpu.error_state", AFTER, 0)], "FAULTY",
         "SOURCES.md: the fan column reads ERR!; the GPU computes, its cooling is in doubt: "
         "drain after the job"),
    Case("smi-q/gpud_nvidia-smi_table_550.90.07.txt", H100_SXM_8, [], "HEALTHY",
         "plain table of 8 idle H100s; NVLink not in a table (probe.missing only)"),
    Case("xid/ogkm1150_kernel_xid45_after_xid145_149_nvlink.log", LOG_ONLY,
         [("xid.145", DRAIN, None), ("xid.145", DRAIN, None), ("xid.145", DRAIN, None),
          ("xid.149", DRAIN, None)], "FAULTY",
         "Xid 45 on 4 GPUs 'caused by previous Xid 145/149' (NVLink errors, all links "
         "down): judged as the cause (was ignored as Xid 45: fixed); 3 GPUs by 145, one by 149"),
]

#: Captures no check can judge, and why. ``True``: ReplayProbe refuses it (CaptureError);
#: ``False``: ReplayProbe reads it, but nothing in it is a health signal.
NOT_JUDGED: dict[str, tuple[bool, str]] = {
    # The deliberately corrupted capture: a named error, never a guess.
    "smi-q/gpud_h100x8_535.183.01_q_corrupted.invalid.txt": (True, "corrupted -q output"),
    # Capabilities: H800 says "Link is supported: false" on healthy active links.
    "nvlink/llmaction_h800x8_nvlink_capabilities_elided.txt": (False, "nvlink -c flags"),
    # Traffic counters (-gt r) are not error counters.
    "nvlink/llmaction_h800x8_nvlink_gt_r_elided.txt": (False, "nvlink -gt r traffic"),
    # topo -p2p: P2P support, not the link layout; CNS on L4 is a platform limit.
    "topo/mleng_h100x8_topo_p2p_r.txt": (False, "topo -p2p r matrix"),
    "topo/mleng_l4x2_topo_p2p_r_cns.txt": (False, "topo -p2p r matrix"),
}


def judged(findings: list[Finding]) -> list[Row]:
    return [(f.check_id, f.severity, f.gpu) for f in findings if f.check_id != "probe.missing"]


def replay(rel: str) -> ReplayProbe:
    return ReplayProbe.from_files([capture(rel)])


@pytest.mark.parametrize("case", [pytest.param(c, id=Path(c.path).name) for c in CASES])
def test_capture_findings(case: Case) -> None:
    snap = replay(case.path).snapshot("node01")
    found = check_node(snap, case.exp, Thresholds())
    assert judged(found) == case.want, case.why
    drains = [r for r in case.want if r[1].drains]
    if case.verdict == "FAULTY":
        assert drains, "a faulty capture must drain"
    else:
        assert case.verdict in ("HEALTHY", "APP", "FLAGGED") and not drains
        assert case.verdict == "HEALTHY" or case.want or case.verdict == "APP"
    assert snap.source == f"replay:{Path(case.path).name}"


@pytest.mark.parametrize("rel", sorted(NOT_JUDGED))
def test_not_judged_captures(rel: str) -> None:
    refused, _ = NOT_JUDGED[rel]
    if refused:
        with pytest.raises(CaptureError, match=Path(rel).name.replace(".", r"\.")):
            replay(rel)
        return
    snap = replay(rel).snapshot("node01")
    assert all(g.nvlinks is None for g in snap.gpus) and snap.topology is None


def test_every_capture_is_in_the_table_or_not_judged() -> None:
    on_disk = {p.relative_to(GPU_DATA).as_posix() for p in GPU_DATA.rglob("*") if p.is_file()}
    listed = [c.path for c in CASES]
    assert len(listed) == len(set(listed)), "a capture is listed twice"
    assert not set(listed) & set(NOT_JUDGED)
    assert on_disk | FROM_THREADS == set(listed) | set(NOT_JUDGED)


def test_no_capture_from_an_issue_thread_is_in_the_repository() -> None:
    assert not [rel for rel in FROM_THREADS if (GPU_DATA / rel).exists()]
    sources = (GPU_DATA.parent / "SOURCES.md").read_text()
    assert not [rel for rel in FROM_THREADS if f"`{rel.split('/')[1]}`" in sources]


def test_checks_still_catch_faults_without_the_false_positive_fixes() -> None:
    """The fixes narrowed the PCIe check; a GPU narrower than its peers still flags."""
    snap = replay("smi-q/gpud_rtx4090x8_535.154.05_q.txt").base
    g3 = replace(snap.gpus[3], pcie_width_current=4)
    snap = replace(snap, gpus=(*snap.gpus[:3], g3, *snap.gpus[4:]))
    assert judged(check_node(snap, pcie(8), Thresholds())) == [("pcie.width", FLAG, 3)]


def test_same_host_captures_combine(tmp_path: Path) -> None:
    """The A100 remap-pending excerpt and the Xid 63 line are from one host (SOURCES.md):
    in one directory the Xid lands on GPU 0 by its bus id."""
    for rel in ("ecc/mleng_a100x8_q_excerpt_remap_pending.txt",
                "xid/mleng_xid63_row_remapper_line.log"):
        shutil.copy(capture(rel), tmp_path / Path(rel).name)
    snap = ReplayProbe.from_dir(tmp_path).snapshot("node01")
    assert judged(check_node(snap, A100_SXM_8, Thresholds())) == [
        ("remap.pending", AFTER, 0), ("xid.63", FLAG, 0)]
