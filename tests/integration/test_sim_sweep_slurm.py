"""``slurm-ml sim sweep --on-slurm`` on the real dev cluster (issue 17 item 3).

The sweep's points run as one job array on the ``debug`` partition; each task is
``python -m slurm_ml.cli sim sweep-point`` with this venv's python (the dev cluster's
slurmd nodes run on this machine). The sweep waits for the array, gathers the point
files and writes its table and chart; a rerun submits nothing; a point that fails in
its task is exit 1, named, with the others gathered.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from slurm_ml import proc

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TINY = (Path(__file__).resolve().parents[1] / "fixtures" / "sim" / "tiny-sweep.yaml").read_text()


def _sweep(tmp_path: Path, vary: str) -> proc.Result:
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(TINY)
    return proc.run([sys.executable, "-m", "slurm_ml.cli", "sim", "sweep",
                     "--scenario", str(scenario), "--vary", vary, "--out",
                     str(tmp_path / "out"), "--on-slurm", "--partition", "debug",
                     "--time-limit", "10", "--poll-s", "1"], timeout_s=240, check=False)


def _array_id(stderr: str) -> int:
    m = re.search(r"submitted array job (\d+) \((\d+) tasks\) to partition debug", stderr)
    assert m, stderr
    return int(m[1])


def test_a_sweep_runs_as_a_job_array_and_is_gathered(slurm_conf: str, tmp_path: Path) -> None:
    res = _sweep(tmp_path, "engine.cycle_s=60,300,600")
    assert res.returncode == 0, res.stderr
    job = _array_id(res.stderr)
    assert "array: 3/3 tasks done" in res.stderr
    out = tmp_path / "out"
    data = json.loads((out / "sweep.json").read_text())
    assert [p["status"] for p in data["points"]] == ["ok", "ok", "ok"]
    assert [p["scenario"]["cycle_s"] for p in data["points"]] == [60, 300, 600]
    assert (out / "sweep.png").stat().st_size > 0
    assert "| 300 | fifo |" in (out / "sweep.md").read_text()
    logs = sorted(p.name for p in (out / "logs").iterdir())
    assert logs == [f"{job}_{i}.out" for i in range(3)]
    # what Slurm ran: three array tasks, all completed
    acct = proc.run(["sacct", "-j", str(job), "-X", "-n", "-P", "--format=JobID,State"],
                    timeout_s=30).stdout
    assert f"{job}_0|COMPLETED" in acct or "COMPLETED" in acct, acct

    again = _sweep(tmp_path, "engine.cycle_s=60,300,600")
    assert again.returncode == 0, again.stderr
    assert "3 done already, 0 to run" in again.stderr
    assert "submitted array job" not in again.stderr


def test_a_point_failing_in_its_task_is_named(slurm_conf: str, tmp_path: Path) -> None:
    # six hours of Philly cannot reach an offered load of 50 on 32 GPUs
    res = _sweep(tmp_path, "arrivals.target_load=0.5,50")
    assert res.returncode == 1, res.stderr
    job = _array_id(res.stderr)
    assert "1 of 2 points failed: arrivals.target_load=50" in res.stderr
    assert f"array task {job}_1 FAILED" in res.stderr
    data = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert [p["status"] for p in data["points"]] == ["ok", "failed"]
    assert "could not reach offered load" in data["points"][1]["error"]
