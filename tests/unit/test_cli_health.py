"""``slurm-ml health check --from-nvidia-smi DIR``: verdicts and exit codes on real captures.

Each test copies captures from data/gpu into a temporary directory.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from gpu_data import GPU_DATA, capture

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.cli import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = str(DEFAULT_CONFIG)


def captures(tmp: Path, *rels: str) -> str:
    d = tmp / "captures"
    d.mkdir(parents=True, exist_ok=True)
    for rel in rels:
        shutil.copy(capture(rel), d / Path(rel).name)
    return str(d)


def run(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, ["health", "check", *args])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res.exit_code, res.stdout, res.stderr


def test_healthy_h100_node_inferred(tmp_path: Path) -> None:
    d = captures(tmp_path, "smi-q/gpud_h100x8_535.183.01_q.txt",
                 "topo/mleng_h100x8_nv18_topo.txt")
    code, out, _ = run("--from-nvidia-smi", d)
    assert code == 0, out
    assert out.startswith("captures: healthy (no drain finding")
    assert ("expected: 8 GPUs, 18 NVLink links per GPU, topology NV18 (GPU model h100-sxm5 "
            "(named in the capture))") in out
    assert "drain reason" not in out


def test_remap_pending_with_class_drains_after_job(tmp_path: Path) -> None:
    d = captures(tmp_path, "ecc/mleng_a100x8_q_excerpt_remap_pending.txt",
                 "xid/mleng_xid63_row_remapper_line.log")
    code, out, _ = run("--from-nvidia-smi", d, "--class", "a100-80g", "--node", "gpu03")
    assert code == 1, out
    lines = out.splitlines()
    assert lines[0] == "gpu03: 1 drain finding(s), 3 flag(s)"
    assert ("expected: 8 GPUs, 12 NVLink links per GPU, topology NV12 (node class a100-80g, "
            "from --class)") in out
    # One line per finding: severity, check id, GPU, message.
    row = next(line for line in lines if line.startswith("drain_after_job"))
    assert row.split()[:4] == ["drain_after_job", "remap.pending", "GPU", "0"]
    assert "row remap pending" in row
    assert any(line.split()[:4] == ["flag", "xid.63", "GPU", "0"] for line in lines)
    assert lines[-1] == "drain reason: slurm-ml: remap.pending gpu0 (row remap pending)"


def test_node_class_from_config_by_node(tmp_path: Path) -> None:
    d = captures(tmp_path, "nvlink/gpud_a100x8_nvlink_status.txt",
                 "topo/mleng_a100x8_nv12_topo.txt")
    code, out, _ = run("--from-nvidia-smi", d, "--node", "gpu01", "--config", EXAMPLE,
                       "--json")
    data = json.loads(out)
    assert code == 0 and data["healthy"] is True and data["exit_code"] == 0
    assert data["expectations"] == {"gpu_count": 8, "nvlink_links_per_gpu": 12,
                                    "expected_topology_cell": "NV12", "pcie_width": None,
                                    "bridge_links": 0, "bridge_required": False}
    assert data["expectations_from"] == "node class a100-80g of node gpu01, from the config"
    assert data["node"] == "gpu01" and data["drain_reason"] is None
    assert {f["check_id"] for f in data["findings"]} == {"probe.missing"}


def test_all_links_inactive_inferred_json(tmp_path: Path) -> None:
    d = captures(tmp_path, "nvlink/azhc_a100_gpu6_nvlink_status_all_inactive.txt")
    code, out, _ = run("--from-nvidia-smi", d, "--json")
    data = json.loads(out)
    assert code == 1 and data["healthy"] is False and data["worst"] == "drain"
    drains = [(f["check_id"], f["severity"], f["gpu"]) for f in data["findings"]
              if f["severity"] != "flag"]
    assert drains == [("nvlink.active_links", "drain", 6)]
    # One GPU's capture: judged against its model (A100 SXM4: 12 links), not its peers.
    assert data["drain_reason"] == "slurm-ml: nvlink.active_links gpu6 (0/12 active)"
    assert data["expectations_from"] == "GPU model a100-sxm4 (named in the capture)"
    assert data["source"] == "replay:azhc_a100_gpu6_nvlink_status_all_inactive.txt"


def test_nvlink_xids_behind_xid_45_drain(tmp_path: Path) -> None:
    d = captures(tmp_path, "xid/ogkm1150_kernel_xid45_after_xid145_149_nvlink.log")
    code, out, _ = run("--from-nvidia-smi", d)
    assert code == 1
    assert "xid.145" in out and "xid.149" in out
    assert "reported as Xid 45 'caused by previous Xid 149'" in out


def test_healthy_cloud_card_at_x8(tmp_path: Path) -> None:
    d = captures(tmp_path, "smi-q/telegraf_tesla-t4_515.105.01_q.xml")
    code, out, _ = run("--from-nvidia-smi", d)
    assert code == 0 and "pcie.width" not in out


@pytest.mark.parametrize(("rels", "args", "message"), [
    (("smi-q/gpud_h100x8_535.183.01_q_corrupted.invalid.txt",), (),
     "gpud_h100x8_535.183.01_q_corrupted.invalid.txt: line 86"),
    (("smi-q/gpud_e2e_a10_550.127.05_q.txt",), ("--class", "h200-sxm"),
     "no node class 'h200-sxm' in the config (known: a100-80g, a100-40g, v100-pcie)"),
    (("smi-q/gpud_e2e_a10_550.127.05_q.txt",), ("--node", "login01"),
     "node 'login01' is in no node class"),
])
def test_bad_input_exits_2(tmp_path: Path, rels: tuple[str, ...], args: tuple[str, ...],
                           message: str) -> None:
    code, out, err = run("--from-nvidia-smi", captures(tmp_path, *rels), *args)
    assert code == 2 and out == ""
    assert err.startswith("slurm-ml: error: ") and message in err


def test_a_dcgmi_diag_run_is_read_as_evidence(tmp_path: Path) -> None:
    code, out, _ = run("--from-nvidia-smi",
                       captures(tmp_path, "ecc/awsome_p4de_a100x8_dcgmi_diag_r2_pass.txt"),
                       "--class", "a100-80g", "--json")
    assert code == 0, out
    report = json.loads(out)
    assert not [f for f in report["findings"] if f["check_id"].startswith("dcgm.")], out
    code, out, _ = run("--from-nvidia-smi", captures(
        tmp_path / "fail", "ecc/mleng_dcgmi_diag_r2_excerpt_gpu0_memory_fail_thermal.txt"),
        "--class", "a100-80g", "--json")
    drains = [(f["check_id"], f["gpu"]) for f in json.loads(out)["findings"]
              if f["severity"] in ("drain", "drain_after_job")]
    assert ("dcgm.memory", 0) in drains and code != 0


def test_bad_config_and_missing_directory_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: {name: x}\n")
    d = captures(tmp_path, "smi-q/gpud_e2e_a10_550.127.05_q.txt")
    code, _, err = run("--from-nvidia-smi", d, "--config", str(bad))
    assert code == 2 and "invalid configuration" in err
    code, _, err = run("--from-nvidia-smi", str(tmp_path / "nope"))
    assert code == 2 and "no such file or directory" in err
    code, _, err = run()
    assert code == 2 and "name the captures to check" in err
    code, _, err = run("--from-nvidia-smi", str(tmp_path / "captures"), "--class")
    assert code == 2


def test_files_and_directories_in_any_mix(tmp_path: Path) -> None:
    """PATH arguments: a single file, or a file beside a directory, one node's captures."""
    one = GPU_DATA / "nvlink" / "azhc_a100_gpu6_nvlink_status_all_inactive.txt"
    code, out, _ = run(str(one))
    assert code == 1 and out.startswith("azhc_a100_gpu6_nvlink_status_all_inactive: 1 drain")
    d = captures(tmp_path, "smi-q/gpud_h100x8_535.183.01_q.txt")
    code, out, _ = run(d, str(GPU_DATA / "topo" / "mleng_h100x8_nv18_topo.txt"), "--json")
    data = json.loads(out)
    assert code == 0 and data["source"] == ("replay:gpud_h100x8_535.183.01_q.txt,"
                                            "mleng_h100x8_nv18_topo.txt")


def test_gpu_model_names_the_shape_a_capture_lacks(tmp_path: Path) -> None:
    """A topo -m alone names no model: --gpu-model supplies it (a V100 SXM2 node whose
    every GPU shows 0 links is then judged against 6)."""
    d = captures(tmp_path, "topo/mleng_a100x8_nv12_topo.txt")
    code, out, _ = run(d, "--gpu-model", "NVIDIA A100-SXM4-80GB", "--json")
    data = json.loads(out)
    assert code == 0 and data["expectations"]["nvlink_links_per_gpu"] == 12
    assert data["expectations_from"] == "GPU model a100-sxm4 (from --gpu-model)"
    code, _, err = run(d, "--gpu-model", "Voodoo 3")
    assert code == 2 and "GPU model 'Voodoo 3' is not in the model table" in err


def test_help_names_the_exit_codes() -> None:
    res = CliRunner().invoke(main, ["health", "check", "--help"])
    assert res.exit_code == 0
    assert "--from-nvidia-smi DIR" in res.output and "Exit codes: 0 healthy" in res.output


def test_inference_rules() -> None:
    from dataclasses import replace

    from slurm_ml.health.probe_replay import ReplayProbe
    from slurm_ml.health.report import infer_expectations

    def infer(*rels: str) -> tuple[int, int, str | None]:
        snap = ReplayProbe.from_files([capture(r) for r in rels]).base
        e = infer_expectations(snap)
        return e.gpu_count, e.nvlink_links_per_gpu, e.expected_topology_cell

    assert infer("nvlink/gpud_a100x8_nvlink_status.txt") == (8, 12, None)
    assert infer("smi-q/llmaction_h800_q_gpu0_525.105.17.txt") == (8, 0, None)  # Attached: 8
    assert infer("topo/mleng_a100x8_nv12_topo.txt") == (8, 0, "NV12")
    assert infer("topo/missalign106_l40s_x4_pcie_nic_topo.txt") == (4, 0, None)  # no NV cell
    # Constructed: one degraded pair among 28 does not move the majority cell.
    snap = ReplayProbe.from_files([GPU_DATA / "topo/mleng_a100x8_nv12_topo.txt"]).base
    assert snap.topology is not None
    degraded = replace(snap, topology={**snap.topology, (2, 5): "NV6", (5, 2): "NV6"})
    assert infer_expectations(degraded).expected_topology_cell == "NV12"
