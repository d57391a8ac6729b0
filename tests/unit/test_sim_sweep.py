"""``slurm-ml sim sweep``: points from --vary, one file per point, skipped on a rerun,
gathered into sweep.json / sweep.md / sweep.png; --on-slurm against the fake Slurm."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.cli import main
from slurm_ml.sim import sweep as sw
from slurm_ml.slurm.client import CliSlurm, array_spec, parse_array_tasks
from slurm_ml.slurm.fake import FakeSlurm
from slurm_ml.slurm.protocol import ArrayRequest

TINY = (Path(__file__).resolve().parents[1] / "fixtures" / "sim" / "tiny-sweep.yaml").read_text()
VARY = "engine.cycle_s=60,300,600"


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    return path


def _sweep(scenario: Path, out: Path, *extra: str, vary: str = VARY) -> Any:
    return CliRunner().invoke(main, ["sim", "sweep", "--scenario", str(scenario),
                                     "--vary", vary, "--out", str(out), *extra])


def _mtimes(out: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in (out / "points").glob("*.json")}


@pytest.mark.slow
def test_three_values_of_one_knob_give_the_table_chart_and_json(
        scenario: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = _sweep(scenario, out, "--jobs", "2", "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["knob"] == "engine.cycle_s"
    assert [p["value"] for p in data["points"]] == [60, 300, 600]
    assert all(p["status"] == "ok" for p in data["points"])
    assert data["policies"] == ["fifo"]
    for p in data["points"]:
        assert p["scenario"]["cycle_s"] == p["value"]  # the knob reached the engine
        assert set(p["measures"]["fifo"]) == {k for k, _, _ in sw.MEASURES}
        assert 0 < p["measures"]["fifo"]["occupancy"] <= 1
    assert json.loads((out / "sweep.json").read_text())["knob"] == "engine.cycle_s"
    table = (out / "sweep.md").read_text()
    rows = [ln for ln in table.splitlines() if ln.startswith("| ") and "fifo" in ln]
    assert [r.split("|")[1].strip() for r in rows] == ["60", "300", "600"]
    assert "worst enough-demand team delivered/owed" in table
    assert (out / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(list((out / "points").glob("*.json"))) == 3


@pytest.mark.slow
@pytest.mark.timeout(120)  # runs the sweep twice in worker processes: ~13 s on a quiet VM
def test_a_rerun_skips_every_point_already_done(
        scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    assert _sweep(scenario, out, "--jobs", "1").exit_code == 0
    before = _mtimes(out)
    from slurm_ml.sim import prepare

    ran: list[str] = []
    real = prepare.run_policy
    monkeypatch.setattr(prepare, "run_policy",
                        lambda prep, name, **kw: ran.append(name) or real(prep, name, **kw))
    res = _sweep(scenario, out, "--jobs", "1")
    assert res.exit_code == 0, res.output
    assert "3 done already, 0 to run" in res.stderr
    assert ran == [] and _mtimes(out) == before
    # one more value: only it runs
    res = _sweep(scenario, out, "--jobs", "1", vary=VARY + ",900")
    assert res.exit_code == 0, res.output
    assert ran == ["fifo"] and {k: v for k, v in _mtimes(out).items() if k in before} == before


def test_a_changed_scenario_changes_the_points_keys(scenario: Path, tmp_path: Path) -> None:
    a = sw.plan(scenario, VARY, tmp_path, config_path=DEFAULT_CONFIG)
    scenario.write_text(TINY.replace("seed: 0", "seed: 1"))
    b = sw.plan(scenario, VARY, tmp_path, config_path=DEFAULT_CONFIG)
    assert [p.key for p in a.points] != [p.key for p in b.points]
    assert len({p.key for p in a.points}) == 3


@pytest.mark.parametrize(("vary", "message"), [
    ("engine.cycle_s", "expected KNOB.PATH=V1,V2"),
    ("engine.cycle_s=60,,600", "empty value"),
    ("engine.cycle_s=60,60", "given twice: 60"),
    ("engine.cycle_s=60,0", "override engine.cycle_s=0: engine.cycle_s must be > 0"),
    ("engine.nope=1,2", "unknown key 'nope'"),
    ("policy.fairshare.window_hourz=72,168", "window_hourz"),
])
def test_a_bad_vary_is_bad_input_and_runs_nothing(scenario: Path, tmp_path: Path, vary: str,
                                                   message: str) -> None:
    res = _sweep(scenario, tmp_path / "out", vary=vary)
    assert res.exit_code == 2, res.output
    assert message in res.stderr
    assert not (tmp_path / "out" / "points").exists()


def test_policy_and_arrival_knobs_resolve_through_the_loaders(scenario: Path,
                                                              tmp_path: Path) -> None:
    from slurm_ml.config import load_config

    base = load_config(DEFAULT_CONFIG)
    s = sw.plan(scenario, "policy.contracts.min_runtime_cap_min=120,240,480", tmp_path,
                config_path=DEFAULT_CONFIG, base=base)
    assert [p.scenario.policy for p in s.points] == [
        {"contracts": {"min_runtime_cap_min": v}} for v in (120, 240, 480)]
    s = sw.plan(scenario, "arrivals.target_load=2,2.5,3", tmp_path, config_path=DEFAULT_CONFIG)
    assert [p.scenario.target_load for p in s.points] == [2.0, 2.5, 3.0]
    s = sw.plan(scenario, "policy.fairshare.window_hours=72,168,336", tmp_path,
                config_path=DEFAULT_CONFIG, base=base)
    assert len({p.name for p in s.points}) == 3


def test_on_slurm_flags_go_together(scenario: Path, tmp_path: Path) -> None:
    res = _sweep(scenario, tmp_path / "out", "--on-slurm")
    assert res.exit_code == 2 and "--partition" in res.stderr
    res = _sweep(scenario, tmp_path / "out", "--partition", "cpu")
    assert res.exit_code == 2 and "--on-slurm" in res.stderr


def _fake_slurm(monkeypatch: pytest.MonkeyPatch, fail: set[int]) -> FakeSlurm:
    """A FakeSlurm whose array tasks run in this process at the first poll (the ones in
    ``fail`` end FAILED without a result, as a task killed by Slurm would)."""
    fake = FakeSlurm()

    def run_tasks(f: FakeSlurm, job_id: int) -> None:
        req, tasks = f.arrays[job_id]
        manifest = req.command.split("--manifest ")[1].split()[0]
        sweep = sw.load_manifest(manifest)
        for i in tasks:
            if tasks[i] != "PENDING":
                continue
            if i in fail:
                f.finish_task(job_id, i, "FAILED")
            else:
                sw.run_point(sweep, i)
                f.finish_task(job_id, i)

    fake.on_poll = run_tasks
    monkeypatch.setattr("slurm_ml.slurm.client.CliSlurm", lambda *a, **k: fake)
    return fake


@pytest.mark.slow
@pytest.mark.timeout(120)  # a sweep gathered from worker processes: ~12 s on a quiet VM
def test_on_slurm_submits_one_array_and_gathers_it(
        scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    fake = _fake_slurm(monkeypatch, fail={1})
    res = _sweep(scenario, out, "--on-slurm", "--partition", "sweeps", "--time-limit", "30")
    assert res.exit_code == 1, res.output
    assert "submitted array job 1 (3 tasks) to partition sweeps" in res.stderr
    assert "1 of 3 points failed: engine.cycle_s=300" in res.stderr
    assert "array task 1_1 FAILED" in res.stderr
    (req, _), = fake.arrays.values()
    assert req.indices == (0, 1, 2) and req.partition == "sweeps" and req.time_limit == "30"
    assert " -m slurm_ml.cli sim sweep-point --manifest " in req.command
    assert req.command.endswith("--index $SLURM_ARRAY_TASK_ID")
    assert req.output.endswith("logs/%A_%a.out")
    manifest = json.loads((out / "manifest.json").read_text())
    assert [p["label"] for p in manifest["points"]] == ["60", "300", "600"]
    data = json.loads((out / "sweep.json").read_text())
    assert [p["status"] for p in data["points"]] == ["ok", "failed", "ok"]
    assert "FAILED: " in (out / "sweep.md").read_text()

    # the rerun submits only the missing point
    fake = _fake_slurm(monkeypatch, fail=set())
    res = _sweep(scenario, out, "--on-slurm", "--partition", "sweeps")
    assert res.exit_code == 0, res.output
    (req, _), = fake.arrays.values()
    assert req.indices == (1,)
    data = json.loads((out / "sweep.json").read_text())
    assert [p["status"] for p in data["points"]] == ["ok", "ok", "ok"]

    # all done: nothing is submitted at all
    fake = _fake_slurm(monkeypatch, fail=set())
    assert _sweep(scenario, out, "--on-slurm", "--partition", "sweeps").exit_code == 0
    assert fake.arrays == {}


def test_sweep_point_runs_one_point_of_a_manifest(scenario: Path, tmp_path: Path) -> None:
    s = sw.plan(scenario, VARY, tmp_path, config_path=DEFAULT_CONFIG)
    manifest = sw.write_manifest(s)
    res = CliRunner().invoke(main, ["sim", "sweep-point", "--manifest", str(manifest),
                                    "--index", "2"])
    assert res.exit_code == 0, res.output
    assert [p.index for p in s.done()] == [2]
    res = CliRunner().invoke(main, ["sim", "sweep-point", "--manifest", str(manifest),
                                    "--index", "3"])
    assert res.exit_code == 2 and "points 0..2" in res.stderr
    scenario.write_text(TINY.replace("seed: 0", "seed: 5"))  # changed under the manifest
    res = CliRunner().invoke(main, ["sim", "sweep-point", "--manifest", str(manifest),
                                    "--index", "0"])
    assert res.exit_code == 2 and "changed since" in res.stderr


@pytest.mark.slow
def test_a_failing_point_is_exit_1_and_the_others_are_written(
        scenario: Path, tmp_path: Path) -> None:
    # 6 hours cannot reach an offered load of 50 on 32 GPUs: that point fails to prepare
    res = _sweep(scenario, tmp_path / "out", "--jobs", "1",
                 vary="arrivals.target_load=0.5,50")
    assert res.exit_code == 1, res.output
    assert "1 of 2 points failed: arrivals.target_load=50" in res.stderr
    assert len(list((tmp_path / "out" / "points").glob("*.json"))) == 1
    assert list((tmp_path / "out" / "points").glob("*.err"))


def test_sim_without_a_subcommand_still_simulates(scenario: Path) -> None:
    res = CliRunner().invoke(main, ["sim", "--scenario", str(scenario), "--json"])
    assert res.exit_code == 0, res.output
    assert [p["policy"] for p in json.loads(res.stdout)["policies"]] == ["fifo"]


# ---------------------------------------------------------- the Slurm boundary

class _Recorder:
    timeout_s = 30.0

    def __init__(self, reply: str) -> None:
        self.env: dict[str, str] = {}
        self.reply, self.argv = reply, None

    def __call__(self, argv: list[str], **_: Any) -> str:
        self.argv = argv
        return self.reply


def test_cli_slurm_submits_an_array_with_sbatch() -> None:
    rec = _Recorder("4242;slurmml\n")
    jid = CliSlurm(rec).submit_array(ArrayRequest(  # type: ignore[arg-type]
        indices=(0, 1, 2, 5), command="python -m x --index $SLURM_ARRAY_TASK_ID",
        partition="sweeps", time_limit="30", output="/o/%A_%a.out", workdir="/o"))
    assert jid == 4242
    assert rec.argv == ["sbatch", "--parsable", "--array=0-2,5", "--job-name=array",
                        "--output=/o/%A_%a.out", "--partition=sweeps", "--time=30",
                        "--chdir=/o", "--wrap", "python -m x --index $SLURM_ARRAY_TASK_ID"]


def test_array_tasks_are_read_from_squeue() -> None:
    text = "77_0|COMPLETED\n77_1|RUNNING\n77_[2-3,5%2]|PENDING\n78_0|RUNNING\n"
    assert parse_array_tasks(text, 77) == {0: "COMPLETED", 1: "RUNNING", 2: "PENDING",
                                          3: "PENDING", 5: "PENDING"}
    rec = _Recorder("77_4|FAILED\n")
    assert CliSlurm(rec).array_tasks(77) == {4: "FAILED"}  # type: ignore[arg-type]
    assert rec.argv is not None and "-r" in rec.argv and "--jobs=77" in rec.argv
    assert array_spec([3, 1, 2, 7]) == "1-3,7"


def test_fake_slurm_arrays_pend_until_finished() -> None:
    fake = FakeSlurm()
    jid = fake.submit_array(ArrayRequest(indices=(0, 1), command="true"))
    assert fake.array_tasks(jid) == {0: "PENDING", 1: "PENDING"}
    fake.finish_task(jid, 1, "FAILED")
    assert fake.array_tasks(jid) == {0: "PENDING", 1: "FAILED"}
    assert fake.array_tasks(jid + 99) == {}
    with pytest.raises(ValueError):
        fake.submit_array(ArrayRequest(indices=(), command="true"))


def test_sim_options_before_the_subcommand_are_refused(scenario: Path, tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["sim", "--hours", "5", "sweep", "--scenario",
                                    str(scenario), "--vary", VARY, "--out", str(tmp_path)])
    assert res.exit_code == 2 and "put --hours after sweep" in res.stderr


def test_a_knob_of_words_is_charted_by_category(tmp_path: Path) -> None:
    ms = {k: 0.5 for k, _, _ in sw.MEASURES}
    data = {"knob": "trace", "scenario": "s.yaml", "hours": None, "policies": ["fifo"],
            "measures": [{"key": k, "title": t, "unit": u} for k, t, u in sw.MEASURES],
            "points": [{"index": 0, "label": "philly", "value": "philly", "status": "ok",
                        "measures": {"fifo": ms}},
                       {"index": 1, "label": "gavel", "value": "gavel", "status": "failed",
                        "error": "boom"},
                       {"index": 2, "label": "$x", "value": "$x", "status": "ok",
                        "measures": {"fifo": {**ms, "debug_p90_s": None}}}]}
    assert sw.write_chart(data, tmp_path / "c.png").stat().st_size > 0
    table = sw.render_table(data)
    assert "| gavel | FAILED: boom |" in table and "| philly | fifo | 50.0% |" in table


def test_interrupting_the_wait_cancels_the_array(
        scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeSlurm()
    fake.on_poll = lambda f, job_id: (_ for _ in ()).throw(KeyboardInterrupt)
    monkeypatch.setattr("slurm_ml.slurm.client.CliSlurm", lambda *a, **k: fake)
    res = _sweep(scenario, tmp_path / "out", "--on-slurm", "--partition", "sweeps")
    assert res.exit_code == 1 and "the array was cancelled" in res.stderr
    assert ("scancel", "1") in fake.calls
    (_, tasks), = fake.arrays.values()
    assert set(tasks.values()) == {"CANCELLED"}
