"""The dev cluster's replayed node health: healthy capture sets that meet each class's
expectations, fault injection and clearing, and the hook env file."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hooks_helpers import CFG

from slurm_ml.deploy.bundle import InstallParams, env_text
from slurm_ml.devcluster import health
from slurm_ml.devcluster.layout import Layout
from slurm_ml.devcluster.platform import DevClusterError
from slurm_ml.health.report import check_captures

NODES = [f"gpu0{i}" for i in range(1, 7)]
NVLINK_DOWN = "azhc_a100_gpu6_nvlink_status_all_inactive.txt"


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout(tmp_path / "dc")


def files(layout: Layout, node: str) -> list[str]:
    return sorted(p.name for p in (layout.health / node).iterdir() if not p.name.startswith("."))


def test_every_dev_node_replays_a_healthy_set_that_meets_its_class(layout: Layout) -> None:
    assert health.sync_healthy(CFG, layout) == []
    for node in NODES:
        report = check_captures(layout.health / node, node=node, config=CFG)
        assert report.drains == [], (node, report.render())
        # Only missing evidence (the -q readings no capture set has) is flagged.
        assert {f.check_id for f in report.findings} <= {"probe.missing"}
        assert (layout.shm / node).is_dir() and (layout.shm / node).stat().st_mode & 0o1777 == 0o1777
    assert files(layout, "gpu03") == ["gpud_a100x8_nvlink_status.txt", "mleng_a100x8_nv12_topo.txt"]
    assert files(layout, "gpu05") == ["missalign106_l40s_x4_pcie_nic_topo.txt"]


def test_a_shape_without_captures_is_an_error() -> None:
    nc = CFG.node_classes[0]
    with pytest.raises(DevClusterError, match="no healthy capture set for 8 GPUs with 18"):
        health.healthy_captures(nc, 18)


def test_inject_replaces_the_same_kind_and_clear_restores(layout: Layout) -> None:
    health.sync_healthy(CFG, layout)

    result = health.inject_fault(CFG, layout, "gpu03", NVLINK_DOWN)

    assert result.replaced == ("gpud_a100x8_nvlink_status.txt",)
    assert result.injected == (NVLINK_DOWN,)
    assert result.verdict == "slurm-ml: nvlink.active_links gpu6 (0/12 active)"
    assert files(layout, "gpu03") == [NVLINK_DOWN, "mleng_a100x8_nv12_topo.txt"]
    assert health.node_health(CFG, layout)["gpu03"]["fault"] == [NVLINK_DOWN]
    assert health.sync_healthy(CFG, layout) == ["gpu03"]  # `up` keeps an injected fault
    # A second fault of another kind adds to the first.
    xid = health.inject_fault(CFG, layout, "gpu03", "xid/gpud_dmesg_h100_xid119_gsp_timeout.log")
    assert xid.injected == (NVLINK_DOWN, "gpud_dmesg_h100_xid119_gsp_timeout.log")
    assert xid.verdict.startswith("slurm-ml: ")

    cleared = health.clear_fault(CFG, layout, "gpu03")

    assert cleared.verdict == "healthy" and set(cleared.replaced) == set(xid.injected)
    assert files(layout, "gpu03") == ["gpud_a100x8_nvlink_status.txt", "mleng_a100x8_nv12_topo.txt"]
    assert health.node_health(CFG, layout)["gpu03"]["fault"] == []


def test_a_capture_that_does_not_combine_is_refused_and_nothing_changes(layout: Layout) -> None:
    health.sync_healthy(CFG, layout)
    # A full H100 -q capture: its GPU UUIDs are not the A100 NVLink capture's.
    with pytest.raises(DevClusterError, match="does not combine with gpu03's other captures"):
        health.inject_fault(CFG, layout, "gpu03", "smi-q/gpud_h100x8_535.183.01_q.txt")
    assert files(layout, "gpu03") == ["gpud_a100x8_nvlink_status.txt", "mleng_a100x8_nv12_topo.txt"]
    assert health.node_health(CFG, layout)["gpu03"]["fault"] == []


def test_bad_names(layout: Layout, tmp_path: Path) -> None:
    with pytest.raises(DevClusterError, match="no dev node gpu09"):
        health.inject_fault(CFG, layout, "gpu09", NVLINK_DOWN)
    with pytest.raises(DevClusterError, match="no such capture"):
        health.inject_fault(CFG, layout, "gpu03", "nothing.txt")
    junk = tmp_path / "junk.txt"
    junk.write_text("hello\nworld\n")
    with pytest.raises(DevClusterError, match="not a capture ReplayProbe reads"):
        health.inject_fault(CFG, layout, "gpu03", str(junk))


def test_hook_env_file_is_private_and_reads_back_in_a_shell(layout: Layout) -> None:
    layout.etc.mkdir(parents=True)
    values = health.hook_env(layout, python="/venv/bin/python", config_path=Path("/c.yaml"),
                             dsn="postgresql://u:p@h:1/db?x='a b'")
    # `devcluster up` hands these to `slurm-ml install`, which writes the env file
    path = layout.etc / "slurm-ml.env"
    params = InstallParams(conf_dir=layout.etc, config_path=Path("/c.yaml"),
                           python="/venv/bin/python", extra_env=tuple(values.items()))
    path.write_text(env_text(params))
    out = subprocess.run(["bash", "-c", f'set -a; . "{path}"; env -0'], check=True,
                         capture_output=True, env={"PATH": os.environ["PATH"]}).stdout
    seen = dict(item.split("=", 1) for item in out.decode().split("\0") if "=" in item)
    assert {k: seen[k] for k in values} == values
    assert values["SLURM_ML_SHM_DIR"].endswith("/shm/%n")
    assert int(values["SLURM_ML_HOOK_TIMEOUT"]) < 60  # below PrologEpilogTimeout


def test_gpu_captures_are_the_checkouts_unless_the_variable_says(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from slurm_ml.devcluster import health as node_health
    from slurm_ml.devcluster.platform import DevClusterError

    monkeypatch.delenv("SLURM_ML_GPU_DATA", raising=False)
    repo = Path(__file__).resolve().parents[2]
    assert node_health.gpu_data_dir() == repo / "data" / "gpu"
    assert (node_health.gpu_data_dir() / "topo" / "mleng_a100x8_nv12_topo.txt").is_file()
    monkeypatch.setenv("SLURM_ML_GPU_DATA", str(tmp_path))
    assert node_health.gpu_data_dir() == tmp_path
    monkeypatch.delenv("SLURM_ML_GPU_DATA")
    monkeypatch.setattr(node_health, "checkout_root", lambda: None)  # an installed wheel
    with pytest.raises(DevClusterError, match=r"set \$SLURM_ML_GPU_DATA"):
        node_health.gpu_data_dir()
