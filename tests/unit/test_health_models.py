"""The GPU model table (health.models) and the expectations a capture is judged by.

Every capture below is constructed; not a real capture: written for these tests in the
layout nvidia-smi prints, with the model's healthy counts from health/models.py.
"""

from __future__ import annotations

import pytest

from slurm_ml.health.checks import Expectations, Finding, Severity, Thresholds, check_node
from slurm_ml.health.models import model_for
from slurm_ml.health.probe_replay import build_snapshot
from slurm_ml.health.report import expectations_for_snapshot

S = Severity


@pytest.mark.parametrize(("name", "key"), [
    ("Tesla V100-SXM2-32GB", "v100-sxm2"),
    ("Tesla V100-PCIE-16GB", "v100-pcie"),
    ("NVIDIA A100-SXM4-80GB", "a100-sxm4"),
    ("NVIDIA A100-PCIE-40GB", "a100-pcie"),
    ("NVIDIA A100 80GB PCIe", "a100-pcie"),
    ("NVIDIA A800-SXM4-80GB", "a800-sxm4"),
    ("NVIDIA H100 80GB HBM3", "h100-sxm5"),
    ("NVIDIA H100 NVL", "h100-nvl"),
    ("NVIDIA H100 PCIe", "h100-pcie"),
    ("NVIDIA H800", "h800-sxm5"),
    ("NVIDIA H200", "h200-sxm"),
    ("NVIDIA H200 NVL", "h200-nvl"),
    ("NVIDIA GB200", "b200"),
    ("NVIDIA B200", "b200"),
    ("NVIDIA GeForce RTX 3090", "rtx-3090"),
    ("NVIDIA RTX A6000", "rtx-a6000"),
    ("NVIDIA A10G", "a10"),
    ("Tesla T4", "t4"),
    ("NVIDIA L40S", "l40"),
])
def test_model_for_product_names(name: str, key: str) -> None:
    model = model_for(name)
    assert model is not None and model.key == key


@pytest.mark.parametrize("name", ["NVIDIA GeForce GTX 1080", "Quadro RTX 8000", "", "   ",
                                  None, 100])
def test_model_for_unknown_is_none(name: object) -> None:
    assert model_for(name) is None


def test_every_model_cites_a_source() -> None:
    from slurm_ml.health.models import MODELS
    assert all(m.source for m in MODELS)
    assert len({m.key for m in MODELS}) == len(MODELS)


# ------------------------------------------------------------ helpers


def nvlink_s(gpus: dict[int, str], links: int, active: int) -> str:
    """``nvidia-smi nvlink -s``: ``active`` of ``links`` links up on each GPU."""
    out = []
    for i, name in gpus.items():
        out.append(f"GPU {i}: {name} (UUID: GPU-{i:08d}-0000-0000-0000-000000000000)")
        out += [f"\t Link {k}: 25 GB/s" if k < active else f"\t Link {k}: <inactive>"
                for k in range(links)]
    return "\n".join(out) + "\n"


def topo(cells: list[list[str]]) -> str:
    """``nvidia-smi topo -m`` over len(cells) GPUs."""
    n = len(cells)
    head = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\tCPU Affinity\tNUMA Affinity"
    rows = [f"GPU{i}\t" + "\t".join(row) + "\t0-31\t0" for i, row in enumerate(cells)]
    legend = ("\nLegend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe as well as the "
              "SMP interconnect\n  PHB  = Connection traversing PCIe as well as a PCIe Host "
              "Bridge\n  NV#  = Connection traversing a bonded set of # NVLinks\n")
    return "\n".join([head, *rows]) + "\n" + legend


def pair(cell: str) -> str:
    return topo([["X", cell], [cell, "X"]])


def judged(captures: list[tuple[str, str]], gpu_model: str | None = None
           ) -> tuple[list[Finding], str, Expectations]:
    snap = build_snapshot(captures, node="n1")
    exp, basis = expectations_for_snapshot(snap, gpu_model)
    return check_node(snap, exp, Thresholds()), basis, exp


def drains(findings: list[Finding], prefix: str) -> list[tuple[str, Severity, int | None]]:
    return [(f.check_id, f.severity, f.gpu) for f in findings
            if f.check_id.startswith(prefix) and f.severity.drains]


# ------------------------------------------------------------ NVLink counts by model


def test_one_a100_with_6_of_12_links_drains() -> None:
    # constructed; not a real capture
    text = nvlink_s({0: "NVIDIA A100-SXM4-80GB"}, 12, 6)
    found, basis, exp = judged([("nvlink_s.txt", text)])
    assert exp.nvlink_links_per_gpu == 12
    assert "a100-sxm4" in basis
    assert drains(found, "nvlink.active_links") == [("nvlink.active_links", S.DRAIN_NOW, 0)]
    f = next(f for f in found if f.check_id == "nvlink.active_links")
    assert (f.evidence["active"], f.evidence["expected"]) == (6, 12)


def test_eight_h100_all_equally_degraded_all_drain() -> None:
    # constructed; not a real capture
    text = nvlink_s({i: "NVIDIA H100 80GB HBM3" for i in range(8)}, 18, 12)
    found, basis, exp = judged([("nvlink_s.txt", text)])
    assert exp.nvlink_links_per_gpu == 18
    assert "second opinion" in basis
    assert drains(found, "nvlink.active_links") == [
        ("nvlink.active_links", S.DRAIN_NOW, i) for i in range(8)]


def test_eight_healthy_h100_pass() -> None:
    # constructed; not a real capture
    text = nvlink_s({i: "NVIDIA H100 80GB HBM3" for i in range(8)}, 18, 18)
    found, basis, _ = judged([("nvlink_s.txt", text)])
    assert "second opinion" not in basis
    assert drains(found, "nvlink.") == []


# ------------------------------------------------------------ bridged PCIe pairs


def test_h100_nvl_pair_with_sys_between_them_drains_both() -> None:
    # constructed; not a real capture
    found, basis, exp = judged([("topo.txt", pair("SYS"))], gpu_model="NVIDIA H100 NVL")
    assert exp.bridge_required and exp.bridge_links == 12
    assert "h100-nvl" in basis
    assert drains(found, "nvlink.bridge") == [("nvlink.bridge", S.DRAIN_NOW, 0),
                                              ("nvlink.bridge", S.DRAIN_NOW, 1)]
    f = next(f for f in found if f.check_id == "nvlink.bridge")
    assert f.evidence["expected"] == "NV12"


def test_h100_nvl_pair_with_its_bridge_passes() -> None:
    # constructed; not a real capture
    found, _, _ = judged([("topo.txt", pair("NV12"))], gpu_model="NVIDIA H100 NVL")
    assert drains(found, "nvlink.bridge") == []


def test_rtx_3090_bridge_nv3_drains_nv4_passes_phb_passes() -> None:
    # constructed; not a real capture
    model = "NVIDIA GeForce RTX 3090"
    found, _, _ = judged([("topo.txt", pair("NV3"))], gpu_model=model)
    assert drains(found, "nvlink.bridge") == [("nvlink.bridge", S.DRAIN_NOW, 0),
                                              ("nvlink.bridge", S.DRAIN_NOW, 1)]
    found, _, _ = judged([("topo.txt", pair("NV4"))], gpu_model=model)
    assert drains(found, "nvlink.") == []
    # no bridge at all: the bridge is optional on this card
    found, _, exp = judged([("topo.txt", pair("PHB"))], gpu_model=model)
    assert exp.bridge_links == 4 and not exp.bridge_required
    assert drains(found, "nvlink.") == []


def test_unknown_gpu_model_is_bad_input() -> None:
    from slurm_ml.health.report import HealthInputError
    snap = build_snapshot([("topo.txt", pair("PHB"))], node="n1")
    with pytest.raises(HealthInputError):
        expectations_for_snapshot(snap, "NVIDIA GeForce GTX 1080")


# ------------------------------------------------------------ -q sections pasted alone


FABRIC = """\
    Fabric
        State                             : {state}
        Status                            : Success
        CliqueId                          : 4000000001
        ClusterUUID                       : 0a1b2c3d-0000-0000-0000-000000000001
        Health
            Bandwidth                     : Full
            Summary                       : {summary}
"""


def test_fabric_section_alone_unhealthy_drains_fabric_health() -> None:
    # constructed; not a real capture
    text = FABRIC.format(state="Completed", summary="Unhealthy")
    found, _, _ = judged([("fabric.txt", text)])
    assert drains(found, "fabric.") == [("fabric.health", S.DRAIN_NOW, 0)]
    f = next(f for f in found if f.check_id == "fabric.health")
    assert f.evidence["health"] == "Unhealthy"


def test_fabric_section_alone_healthy_passes() -> None:
    # constructed; not a real capture
    found, _, _ = judged([("fabric.txt", FABRIC.format(state="Completed",
                                                       summary="Healthy"))])
    assert drains(found, "fabric.") == []


def test_fabric_section_alone_in_progress_drains_fabric_state() -> None:
    # constructed; not a real capture
    text = FABRIC.format(state="In Progress", summary="Healthy")
    found, _, _ = judged([("fabric.txt", text)])
    assert drains(found, "fabric.") == [("fabric.state", S.DRAIN_NOW, 0)]
    f = next(f for f in found if f.check_id == "fabric.state")
    assert f.evidence["state"] == "In Progress"


REMAP = """\
    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : 2
        Pending                           : Yes
        Remapping Failure Occurred        : No
        Bank Remap Availability Histogram
            Max                           : 638 bank(s)
            High                          : 2 bank(s)
            Partial                       : 0 bank(s)
            Low                           : 0 bank(s)
            None                          : 0 bank(s)
"""

ECC_AND_REMAP = """\
    ECC Errors
        Volatile
            SRAM Correctable              : 0
            SRAM Uncorrectable            : 0
            DRAM Correctable              : 0
            DRAM Uncorrectable            : 0
        Aggregate
            SRAM Correctable              : 0
            SRAM Uncorrectable            : 0
            DRAM Correctable              : 0
            DRAM Uncorrectable            : 2
""" + REMAP


@pytest.mark.parametrize("text", [REMAP, ECC_AND_REMAP])
def test_remapped_rows_section_alone_pending_drains_after_job(text: str) -> None:
    # constructed; not a real capture
    found, _, _ = judged([("remap.txt", text)])
    assert drains(found, "remap.") == [("remap.pending", S.DRAIN_AFTER_JOB, 0)]
    f = next(f for f in found if f.check_id == "remap.pending")
    assert f.evidence["uncorrectable"] == 2
