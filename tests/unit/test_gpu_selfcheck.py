"""prolog/gpu-selfcheck, run as a subprocess (through slurm_ml.proc) the way an operator
runs it. This machine has no GPU: the real path must exit 2 with a clear message; the
cross-check itself runs with ``--fake-nvml`` (FakeNvml from a real capture) against
real captures given with ``--smi-q``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_ml import proc
from slurm_ml.health.probe_nvml import NvmlProbe

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "prolog" / "gpu-selfcheck"
SMI_Q = REPO / "data" / "gpu" / "smi-q"
H100_161 = SMI_Q / "gpud_h100x8_535.161.08_q.txt"
H100_183 = SMI_Q / "gpud_h100x8_535.183.01_q.txt"
T4_XML = SMI_Q / "telegraf_tesla-t4_515.105.01_q.xml"


def selfcheck(*args: str, python: tuple[str, ...] = (sys.executable,)) -> proc.Result:
    return proc.run([*python, str(SCRIPT), *args], timeout_s=60, check=False, cwd="/")


@pytest.fixture(scope="module")
def no_gpu() -> None:
    if NvmlProbe().snapshot("here").gpus:  # pragma: no cover - a machine with a GPU
        pytest.skip("this machine has a GPU: the no-GPU exit is not observable here")


def test_script_is_an_executable_python3_script() -> None:
    assert SCRIPT.read_text().startswith("#!/usr/bin/env python3\n")
    assert os.access(SCRIPT, os.X_OK)


def test_without_a_gpu_exits_2_with_a_clear_message(no_gpu: None) -> None:
    res = selfcheck("--runs", "5")
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stdout.startswith("no GPU/NVML: NVML init failed: NVML Shared Library Not Found")
    assert "no NVIDIA driver on this machine?" in res.stdout
    assert res.stderr == ""


def test_without_a_gpu_json(no_gpu: None, tmp_path: Path) -> None:
    res = selfcheck("--json", "--save-dir", str(tmp_path))
    assert res.returncode == 2
    out = json.loads(res.stdout)
    assert out["exit"] == 2 and out["ok"] is False
    assert out["errors"] == ["NVML init failed: NVML Shared Library Not Found (nvmlInit)"]
    assert len(out["nvml_runs_s"]) == 1  # it stops at the first failed run
    assert json.loads((tmp_path / "gpu-selfcheck.json").read_text()) == out


def test_without_nvidia_ml_py_exits_2() -> None:
    # -S: no site-packages, so neither pynvml nor the package's other dependencies
    res = selfcheck(python=(sys.executable, "-S"))
    assert res.returncode == 2
    assert res.stdout.startswith("no NVML: cannot import the probe")


def test_it_imports_the_checkouts_own_package() -> None:
    """prolog/gpu-selfcheck puts the checkout (one level up) first on sys.path: with no
    site-packages and no PYTHONPATH it gets past ``import slurm_ml`` and stops at a
    third-party import. (The wheel's copy, two levels below site-packages:
    tests/unit/test_packaging.py.)"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = subprocess.run([sys.executable, "-S", str(SCRIPT)], capture_output=True, text=True,
                         timeout=60, check=False, cwd="/", env=env)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stdout.startswith("no NVML: cannot import the probe (No module named ")
    assert "'slurm_ml" not in res.stdout


def test_fake_nvml_agrees_with_its_own_capture() -> None:
    res = selfcheck("--json", "--fake-nvml", str(H100_161), "--smi-q", str(H100_161),
                    "--node", "h100node")
    assert res.returncode == 0, res.stdout
    out = json.loads(res.stdout)
    assert out["ok"] is True and out["node"] == "h100node"
    (label, result), = out["compared"].items()
    assert label == f"file {H100_161}"
    assert result["mismatches"] == [] and result["compared"] >= 200
    assert out["attached_gpus"] == 8 and len(out["gpus"]) == 8
    assert out["gpus"][0]["fabric"] == ["Completed", "Success"]
    timing = out["nvml_s"]
    assert len(timing["runs"]) == 5 and timing["min"] <= timing["median"] <= timing["max"]
    assert timing["watchdog"] == 4.0
    assert out["nvml_errors"] == {}
    assert out["nvml_snapshot"]["source"] == "nvml"
    # the checks ran on what NVML saw, with expectations inferred from it
    assert out["expectations"]["gpu_count"] == 8
    assert not [f for f in out["findings"] if f["severity"] != "flag"]


def test_fake_nvml_xml_capture_text_output() -> None:
    res = selfcheck("--fake-nvml", str(T4_XML), "--smi-q", str(T4_XML), "--runs", "2")
    assert res.returncode == 0, res.stdout
    first = res.stdout.splitlines()[0]
    assert "NVML and nvidia-smi agree (0 mismatch(es), 0 NVML error(s))" in first
    assert "over 2 runs" in first
    assert "Tesla T4" in res.stdout


def test_disagreement_exits_1_and_names_each_mismatch() -> None:
    res = selfcheck("--json", "--fake-nvml", str(H100_161), "--smi-q", str(H100_183))
    assert res.returncode == 1
    out = json.loads(res.stdout)
    mismatches = next(iter(out["compared"].values()))["mismatches"]
    assert 'driver_version: nvml="535.161.08" nvidia-smi="535.183.01"' in mismatches
    # the two machines' GPUs sit on other buses: each side's GPUs are named
    assert any("GPU 0 (00000000:19:00.0): not in nvidia-smi output" in m for m in mismatches)
    assert any(m.startswith("00000000:53:00.0: in nvidia-smi output") for m in mismatches)


def test_moving_values_are_allowed_a_health_value_is_not(tmp_path: Path) -> None:
    # constructed: the real capture with GPU 0's utilisation (moves between reads) and its
    # remapping-failure flag (must not move) edited
    lines = H100_161.read_text().splitlines(keepends=True)
    util = next(i for i, line in enumerate(lines) if line.strip().startswith("Gpu  "))
    lines[util] = lines[util].replace(": 0 %", ": 93 %")
    fail = next(i for i, line in enumerate(lines) if "Remapping Failure Occurred" in line)
    lines[fail] = lines[fail].replace(": No", ": Yes")
    edited = tmp_path / "edited_q.txt"
    edited.write_text("".join(lines))
    res = selfcheck("--json", "--fake-nvml", str(H100_161), "--smi-q", str(edited))
    assert res.returncode == 1
    result = next(iter(json.loads(res.stdout)["compared"].values()))
    assert result["allowed_differences"] == [
        "GPU 0 utilization_gpu_pct: nvml=0.0 nvidia-smi=93.0"]
    assert len(result["mismatches"]) == 1
    assert result["mismatches"][0].startswith("GPU 0 remapped_rows: nvml=")
