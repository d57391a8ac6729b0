"""Admission in the simulator (issue 17 item 6): every simulated submission goes through
``policy.admission.decide``, the code submitd runs, on the scenario's node classes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.cli import main
from slurm_ml.config import Config, load_config
from slurm_ml.policy.admission import decide
from slurm_ml.policy.admission.cluster_view import cluster_view
from slurm_ml.policy.admission.state import AdmissionState
from slurm_ml.sim.admit import EPOCH, admit_jobs, draw_requests, job_request
from slurm_ml.sim.cluster import Cluster
from slurm_ml.sim.prepare import prepare
from slurm_ml.sim.scenario_file import Requests, ScenarioError, parse_scenario
from slurm_ml.sim.state import new_task
from slurm_ml.sim.workload import SimJob
from slurm_ml.submitd.sbatch_args import parse_sbatch
from slurm_ml.submitd.wire import normalize, to_request

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sim" / "example-1.4.yaml"


@pytest.fixture(scope="module")
def cfg() -> Config:
    """The Example 1.4 cluster (the shipped config's three GPU types)."""
    prep = prepare(parse_scenario(_short(admission=False), "ex.yaml"),
                   load_config(DEFAULT_CONFIG))
    return prep.cfg


def _short(*, admission: bool, hours: float = 24) -> str:
    """Example 1.4 on a day of the trace at the week's arrival scale, admission on or
    off (a day alone cannot reach the week's offered load)."""
    text = EXAMPLE.read_text()
    text = text.replace("slice: {start_hours: 720, hours: 168}",
                        f"slice: {{start_hours: 720, hours: {hours:g}}}")
    assert "arrivals: {target_load: 0.9}" in text
    text = text.replace("arrivals: {target_load: 0.9}", "arrivals: {scale: 3.16}")
    text = text.replace("policies: [fifo, budget]", "policies: [fifo]")
    assert "admission: on" in text
    return text.replace("admission: on", f"admission: {'on' if admission else 'off'}")


def _job(gpus: int, gpu_type: str | None, mem_gb: float | None, job_id: int = 1,
         parallel: str | None = None) -> SimJob:
    return SimJob(job_id=job_id, team="t1", user="u1", submit_s=0.0, gpus=gpus,
                  duration_s=3600.0, gpu_type=gpu_type, mem_gb=mem_gb, parallel=parallel)


def _types(cfg: Config, job: SimJob, *, on: bool) -> tuple[str, ...]:
    (out,), _ = admit_jobs([job], cfg, on=on)
    task = new_task(cfg, Cluster(cfg), out)
    names = Cluster(cfg).type_names
    return tuple(names[t] for t in task.types)


@pytest.mark.parametrize("argv,job", [
    (["--gres=gpu:a100_80g:4", "-A", "t1", "--comment=gpu_mem=35G", "--wrap=x"],
     _job(4, "a100_80g", 35.0)),
    (["-N", "2", "--gres=gpu:a100_80g:8", "-A", "t1", "--comment=gpu_mem=35G", "--wrap=x"],
     _job(16, "a100_80g", 35.0)),
    (["--gpus=a100_80g:12", "-A", "t1", "--comment=gpu_mem=20G", "--wrap=x"],
     _job(12, "a100_80g", 20.0)),
    (["--gres=gpu:a100_40g:1", "-A", "t1", "--wrap=x"], _job(1, "a100_40g", None)),
    (["--gres=gpu:a100_80g:4", "-A", "t1", "--comment=gpu_mem=20G parallel=data", "--wrap=x"],
     _job(4, "a100_80g", 20.0, parallel="data")),
    (["--gres=gpu:a100_80g:2", "-A", "t1", "--comment=parallel=tensor", "--wrap=x"],
     _job(2, "a100_80g", None, parallel="tensor")),
])
def test_the_request_is_what_submitd_builds_from_the_sbatch_line(argv: list[str],
                                                                 job: SimJob) -> None:
    (fields,) = parse_sbatch(argv, user="u1")
    assert job_request(job, gpus_per_node=8) == to_request(normalize(fields))


def test_on_widens_a_35gb_a100_80g_request_to_a100_40g_not_v100(cfg: Config) -> None:
    job = _job(4, "a100_80g", 35.0)
    real = decide(job_request(job, gpus_per_node=8), cfg, cluster_view(cfg),
                  AdmissionState(), EPOCH)
    assert real.accept and real.record["types"] == ["a100_80g", "a100_40g"]
    assert _types(cfg, job, on=True) == ("a100_80g", "a100_40g")


def test_on_a_20gb_one_gpu_request_may_land_on_v100(cfg: Config) -> None:
    assert _types(cfg, _job(1, "a100_80g", 20.0), on=True) == ("a100_80g", "a100_40g", "v100")
    # several GPUs on NVLink: a PCIe V100 node cannot give them that
    assert "v100" not in _types(cfg, _job(4, "a100_80g", 20.0), on=True)


def test_on_a_data_parallel_job_of_up_to_4_gpus_may_land_on_v100(cfg: Config) -> None:
    """parallel=data reaches decide as it would from sbatch: PCIe V100 nodes join where
    the need fits 32 GB with the margin and the GPUs fit one 4-GPU node."""
    assert "v100" in _types(cfg, _job(4, "a100_80g", 20.0, parallel="data"), on=True)
    assert "v100" not in _types(cfg, _job(4, "a100_80g", 20.0, parallel="tensor"), on=True)
    assert "v100" not in _types(cfg, _job(4, "a100_80g", 35.0, parallel="data"), on=True)
    # one node of 8 GPUs: no V100 node holds it
    assert "v100" not in _types(cfg, _job(8, "a100_80g", 20.0, parallel="data"), on=True)
    assert _types(cfg, _job(4, "a100_80g", 20.0, parallel="data"), on=False) == ("a100_80g",)


def test_off_pins_to_the_asked_type(cfg: Config) -> None:
    assert _types(cfg, _job(1, "a100_80g", 20.0), on=False) == ("a100_80g",)
    assert _types(cfg, _job(16, "a100_80g", 35.0), on=False) == ("a100_80g",)


def test_on_keeps_a_need_only_the_asked_type_meets(cfg: Config) -> None:
    assert _types(cfg, _job(8, "a100_80g", 60.0), on=True) == ("a100_80g",)
    assert _types(cfg, _job(8, "a100_80g", None), on=True) == ("a100_80g",)


def test_the_synthetic_draw_is_deterministic_and_marked() -> None:
    jobs = [_job(1, None, None, job_id=i) for i in range(1, 400)]
    req = Requests(gpu_type={"a100_80g": 0.7, "a100_40g": 0.3},
                   mem_gb_by_type={"a100_80g": {16: 0.5, 35: 0.5}, "a100_40g": {24: 1.0}})
    types = ("a100_80g", "a100_40g", "v100")
    one, info = draw_requests(jobs, req, seed=3, gpu_types=types)
    two, _ = draw_requests(jobs, req, seed=3, gpu_types=types)
    other, _ = draw_requests(jobs, req, seed=4, gpu_types=types)
    assert one == two and one != other
    assert info["synthetic"] is True and info["drawn_jobs"] == {"gpu_type": 399, "mem_gb": 399,
                                                               "parallel": 0}
    assert {j.gpu_type for j in one} == {"a100_80g", "a100_40g"}
    assert {j.mem_gb for j in one if j.gpu_type == "a100_40g"} == {24.0}
    assert 0.6 < sum(j.gpu_type == "a100_80g" for j in one) / len(one) < 0.8
    # what a trace already says is kept, and not counted as drawn
    kept, info = draw_requests([_job(1, "v100", 8.0)], req, seed=3, gpu_types=types)
    assert (kept[0].gpu_type, kept[0].mem_gb) == ("v100", 8.0)
    assert info["synthetic"] is False
    with pytest.raises(ScenarioError, match="h100"):
        draw_requests(jobs, Requests(gpu_type={"h100": 1.0}), seed=0, gpu_types=types)


def test_parallelism_is_drawn_for_multi_gpu_jobs_on_its_own_stream() -> None:
    jobs = [_job(1 + i % 4, None, None, job_id=i) for i in range(1, 400)]
    types = ("a100_80g", "a100_40g", "v100")
    base = Requests(gpu_type={"a100_80g": 0.7, "a100_40g": 0.3}, mem_gb={16: 0.5, 35: 0.5})
    plain, _ = draw_requests(jobs, base, seed=3, gpu_types=types)
    mixed, info = draw_requests(
        jobs, dataclasses.replace(base, parallel={"data": 0.5, "tensor": 0.5}), seed=3,
        gpu_types=types)
    # the type and memory draws do not move: admission off runs the same jobs
    assert [(j.gpu_type, j.mem_gb) for j in mixed] == [(j.gpu_type, j.mem_gb) for j in plain]
    assert all(j.parallel is None for j in plain)
    assert all(j.parallel is None for j in mixed if j.gpus == 1)
    multi = [j for j in mixed if j.gpus > 1]
    assert {j.parallel for j in multi} == {"data", "tensor"}
    assert 0.35 < sum(j.parallel == "data" for j in multi) / len(multi) < 0.65
    assert info["drawn_jobs"]["parallel"] == len(multi)
    assert info["parallel"] == {"data": 0.5, "tensor": 0.5}
    # what a trace already says is kept
    (kept,), _ = draw_requests([_job(2, "a100_80g", 8.0, parallel="tensor")],
                               Requests(parallel={"data": 1.0}), seed=3, gpu_types=types)
    assert kept.parallel == "tensor"


def test_the_scenario_keys_are_strict() -> None:
    ok = parse_scenario("requests: {gpu_type: {a100_80g: 1.0}, mem_gb: {35: 1}}\n"
                        "admission: off\n")
    assert ok.requests == Requests(gpu_type={"a100_80g": 1.0}, mem_gb={35.0: 1.0})
    assert ok.admission is False
    assert parse_scenario("requests: {parallel: {data: 0.3, tensor: 0.7}}\n").requests == \
        Requests(parallel={"data": 0.3, "tensor": 0.7})
    for bad, why in [("admission: sometimes", "on or off"),
                     ("requests: {mem_gb: {35: 0.5}}", "sum to 1"),
                     ("requests: {gpu_type: {a100_80g: 1}, mem_gb: {v100: {8: 1}}}",
                      "not a type in requests.gpu_type"),
                     ("requests: {typo: 1}", "unknown key"),
                     ("requests: {parallel: {data: 0.5, pipeline: 0.5}}",
                      "'pipeline' is not data or tensor"),
                     ("requests: {parallel: {data: 0.5}}", "sum to 1")]:
        with pytest.raises(ScenarioError, match=why):
            parse_scenario(bad, "s.yaml")


def _run(tmp_path: Path, *, admission: bool) -> dict[str, Any]:
    path = tmp_path / f"ex-{admission}.yaml"
    path.write_text(_short(admission=admission))
    res = CliRunner().invoke(main, ["sim", "--scenario", str(path), "--json"])
    assert res.exit_code == 0, res.output
    out: dict[str, Any] = json.loads(res.stdout)
    return out


@pytest.mark.slow
def test_example_1_4_short_run_admission_on_beats_off(tmp_path: Path) -> None:
    off, on = _run(tmp_path, admission=False), _run(tmp_path, admission=True)
    assert on["scenario"]["admission"]["requests"]["synthetic"] is True
    assert on["scenario"]["admission"]["admission"] == "on"
    assert on["scenario"]["admission"]["widened"] > 0
    assert off["scenario"]["admission"]["admission"] == "off"
    (p_off,), (p_on,) = off["policies"], on["policies"]
    assert p_on["steady_occupancy"] > p_off["steady_occupancy"]
    assert p_off["type_occupancy"]["v100"] == 0.0  # nobody asks for a V100
    assert p_on["type_occupancy"]["v100"] > 0.0
    assert set(p_on["type_occupancy"]) == {"a100_80g", "a100_40g", "v100"}


def test_type_occupancy_is_each_pools_busy_time_over_its_size() -> None:
    from slurm_ml.sim.metrics import intervals, type_occupancy
    from slurm_ml.sim.result import CycleSample

    def at(t: float, busy80: int, busy100: int) -> CycleSample:
        return CycleSample(t_s=t, busy_gpus={}, pending_gpus={}, free_gpus=0,
                           fragmented_gpus=0,
                           busy_by_type={"a100_80g": busy80, "v100": busy100},
                           free_by_type={"a100_80g": 8 - busy80, "v100": 4 - busy100})

    spans = intervals([at(0, 8, 0), at(10, 4, 4)], 0, 20)
    assert type_occupancy(spans) == {"a100_80g": 0.75, "v100": 0.5}


def test_a_bad_parallel_outcome_names_its_line() -> None:
    text = "requests:\n  parallel:\n    data: 0.5\n    dp: 0.5\n"
    with pytest.raises(ScenarioError, match=r"^s\.yaml:4: requests\.parallel: 'dp'"):
        parse_scenario(text, "s.yaml")


def test_example_1_4_states_the_seeds_workload_words() -> None:
    """The file holds the seed's Table 4 cluster and the workload its words give: jobs
    name A100-80GB most, nobody names a V100, 35 GB needs, and multi-GPU jobs either
    data parallel (PCIe will do) or tensor parallel (NVLink)."""
    sc = parse_scenario(EXAMPLE.read_text(), str(EXAMPLE))
    assert sc.node_classes is not None and sc.requests is not None
    gpus = {nc["gpu_type"]: (nc["gpus_per_node"], nc["features"]) for nc in sc.node_classes}
    assert gpus["a100_80g"][0] == gpus["a100_40g"][0] == 8 and gpus["v100"][0] == 4
    assert "nvlink" in gpus["a100_80g"][1] and "pcie" in gpus["v100"][1]
    rq = sc.requests
    assert max(rq.gpu_type, key=lambda t: rq.gpu_type[t]) == "a100_80g"
    assert "v100" not in rq.gpu_type
    assert all(35.0 in dist for dist in rq.mem_gb_by_type.values())
    assert set(rq.parallel) == {"data", "tensor"}
    assert sc.admission is True
