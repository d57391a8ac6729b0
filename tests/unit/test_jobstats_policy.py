"""policy.jobstats: figures per GPU, the notes, and the AdminComment summary."""

from __future__ import annotations

import json

import pytest
from builders import running_job

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config
from slurm_ml.model import GpuRequest
from slurm_ml.policy.admission.decision import RECORD_PREFIX, read_record
from slurm_ml.policy.jobstats.judge import from_summary, judge, to_summary
from slurm_ml.policy.jobstats.notes import gpu_flag, gpu_list, job_notes
from slurm_ml.policy.jobstats.summary import MAX_ADMIN_COMMENT, Summary, read_summary, with_summary
from slurm_ml.policy.jobstats.usage import CpuUse, GpuUse, JobUse, gpu_uses
from slurm_ml.policy.reclaim import GpuSample

CFG = load_config(DEFAULT_CONFIG)
RC = CFG.policy.reclaim
IDLE = RC.zombie_util_pct
T0 = 1_800_000_000
ADMITTED = RECORD_PREFIX + json.dumps({"at": T0, "min_runtime": 60, "qos": "alloc", "v": 1},
                                      separators=(",", ":"), sort_keys=True)


def samples(job: int, node: str, gpus: range, util: list[float], *, mem: int = 30_000,
            start: int = T0, step: int = 300) -> list[GpuSample]:
    return [GpuSample(job, node, g, start + i * step, u, mem) for g in gpus
            for i, u in enumerate(util)]


def notes(use: JobUse) -> dict[str, str]:
    return {n.kind: n.text for n in job_notes(use, idle_pct=IDLE, heartbeat_s=RC.zombie_heartbeat_s,
                                              gpu_types=CFG.gpu_types, margin_pct=10.0)}


def two_of_eight(**kw: object) -> JobUse:
    rows = (samples(7, "gpu01", range(2), [90, 95, 88, 92])
            + samples(7, "gpu01", range(2, 8), [0, 0, 0, 0], mem=400))
    job = running_job(7, start=T0 - 10, gpus=8, nodes=("gpu01",))
    return judge(job, rows, RC, at=T0 + 1200, running=False, elapsed_s=1210,
                 total_mem_mb={("gpu01", g): 81920 for g in range(8)},
                 request=(GpuRequest(8, "node", None),), **kw)  # type: ignore[arg-type]


def test_a_job_that_used_two_of_eight_gpus_is_told_the_six_idle_ones_in_its_flag() -> None:
    text = notes(two_of_eight())["unused_gpus"]
    assert "did not use 6 of its 8 GPUs (gpu01 GPUs 2-7)" in text
    assert "Ask for 2: --gres=gpu:2 (or --gpus-per-node=2)" in text


def test_figures_per_gpu() -> None:
    use = two_of_eight()
    busy, idle = use.uses[0], use.uses[7]
    assert (busy.samples, busy.mean_util_pct, busy.peak_util_pct, busy.idle_frac) == (
        4, pytest.approx(91.25), 95, 0.0)
    assert (idle.peak_util_pct, idle.idle_frac, idle.peak_mem_mb) == (0, 1.0, 400)
    assert idle.idle_s(1210) == 1210 and use.unmeasured_gpus == 0


def test_an_unsampled_gpu_is_not_measured_never_idle() -> None:
    rows = samples(8, "gpu01", range(2), [90, 90, 90])
    job = running_job(8, start=T0 - 10, gpus=4, nodes=("gpu01",))
    use = judge(job, rows, RC, at=T0 + 900, running=False, elapsed_s=910)
    got = notes(use)
    assert "unused_gpus" not in got
    assert got["not_measured"].startswith("2 of its 4 GPUs: not measured")


def test_a_job_with_no_samples_says_not_measured() -> None:
    job = running_job(9, start=T0, gpus=2, nodes=("gpu01",))
    use = judge(job, [], RC, at=T0 + 60, running=True, elapsed_s=60)
    assert use.source == "none" and not use.measured
    (only,) = job_notes(use, idle_pct=IDLE, heartbeat_s=900, gpu_types=CFG.gpu_types,
                        margin_pct=10)
    assert only.kind == "not_measured" and "not measured" in only.text


def test_memory_held_with_no_compute_is_the_zombie_note() -> None:
    job = running_job(10, start=T0 - 5, gpus=2, nodes=("gpu01",))
    rows = samples(10, "gpu01", range(2), [0.0] * 5, mem=20_000)  # 0..1200 s, every 300 s
    use = judge(job, rows, RC, at=T0 + 1200, running=True, elapsed_s=1205)
    assert use.zombie is not None and use.zombie.mem_mb == 20_000
    text = notes(use)["zombie"]
    assert "holds 20000 MB of memory with no compute for 20 min" in text
    assert "scancel 10" in text


def test_gappy_samples_give_no_zombie_verdict_and_say_why() -> None:
    job = running_job(11, start=T0 - 5, gpus=1, nodes=("gpu01",))
    rows = [GpuSample(11, "gpu01", 0, T0, 0.0, 20_000), GpuSample(11, "gpu01", 0, T0 + 1200,
                                                                    0.0, 20_000)]
    use = judge(job, rows, RC, at=T0 + 1200, running=True, elapsed_s=1205)
    assert use.zombie is None and use.zombie_unjudged and "no zombie verdict" in use.zombie_unjudged
    assert "zombie" not in notes(use)


def test_samples_of_an_earlier_run_are_not_this_runs() -> None:
    job = running_job(12, start=T0 + 1000, gpus=1, nodes=("gpu01",))
    use = judge(job, samples(12, "gpu01", range(1), [0, 0, 0]), RC, at=T0 + 1100, running=True,
                elapsed_s=100)
    assert not use.measured


def test_memory_far_below_the_gpu_suggests_gpu_mem_and_the_smaller_types() -> None:
    text = notes(two_of_eight())["gpu_memory"]
    assert "peaked at 29.3 GB of 80 GB" in text and "--comment gpu_mem=33G" in text
    assert "a100_40g" in text


def test_sawing_utilisation_is_data_starvation() -> None:
    rows = samples(13, "gpu01", range(1), [100, 0] * 6)
    job = running_job(13, start=T0 - 5, gpus=1, nodes=("gpu01",))
    use = judge(job, rows, RC, at=T0 + 3300, running=False, elapsed_s=3305)
    assert "Utilisation swings between busy and idle on 1 GPU (gpu01 GPU 0)" in notes(use)[
        "data_starved"]
    steady = judge(job, samples(13, "gpu01", range(1), [50] * 12), RC, at=T0 + 3300,
                   running=False, elapsed_s=3305)
    assert "data_starved" not in notes(steady)


def test_cpu_and_memory_efficiency_notes() -> None:
    use = JobUse(job_id=1, gpus=0, running=False, elapsed_s=3600, uses=(),
                 cpu=CpuUse(elapsed_s=3600, cpus=16, total_cpu_s=3600.0, req_mem_mb=64_000,
                            max_rss_mb=2_000))
    got = notes(use)
    assert got["cpu"].startswith("CPU efficiency 6% of 16 CPUs: about 2 would do")
    assert "--mem=3G" in got["memory"]
    unmeasured = CpuUse(elapsed_s=3600, cpus=16, total_cpu_s=None, req_mem_mb=64_000,
                        max_rss_mb=None)
    assert unmeasured.cpu_eff is None and unmeasured.mem_eff is None


@pytest.mark.parametrize(("request_", "gpus", "nodes", "flag"), [
    ((GpuRequest(8, "node", "a100_80g"),), 2, 1, "--gres=gpu:a100_80g:2"),
    ((GpuRequest(8, "node", None),), 4, 2, "--gres=gpu:2 (or --gpus-per-node=2) per node"),
    ((GpuRequest(8, "job", None),), 3, 1, "--gpus=3"),
    ((GpuRequest(1, "task", None),), 3, 1, "fewer tasks (-n) or --gpus-per-task"),
    ((), 2, 1, "--gres=gpu:2"),
])
def test_the_flag_follows_the_request(request_: tuple[GpuRequest, ...], gpus: int, nodes: int,
                                      flag: str) -> None:
    assert gpu_flag(request_, gpus, nodes).startswith(flag)


def test_gpu_list_folds_per_node() -> None:
    uses = [GpuUse("n2", 0, 1, 0, 0, None, 1, None, 1.0)] + [
        GpuUse("n1", g, 1, 0, 0, None, 1, None, 1.0) for g in (0, 1, 2, 5)]
    assert gpu_list(uses) == "n1 GPUs 0-2, 5, n2 GPU 0"


# ------------------------------------------------------------------ the summary

def test_the_summary_joins_admissions_record_and_reads_back_through_sacctmgrs_backticks() -> None:
    use = two_of_eight()
    text = with_summary(ADMITTED, to_summary(use, at=T0 + 1300), node="gpu01", idle_pct=IDLE)
    assert text is not None and text.startswith(RECORD_PREFIX) and len(text) < 800
    record = read_record(text)
    assert record is not None and record["min_runtime"] == 60 and record["qos"] == "alloc"
    stored = text.replace('"', "`")  # what sacct shows after sacctmgr wrote it
    back = read_summary(stored)
    assert back is not None and len(back.uses) == 8 and back.request == use.request
    again = from_summary(back, job_id=7, gpus=8, running=False)
    assert notes(again)["unused_gpus"] == notes(use)["unused_gpus"]


def test_someone_elses_admin_comment_is_never_overwritten() -> None:
    summary = to_summary(two_of_eight(), at=T0)
    assert with_summary("JS1:H4sIAAAA", summary, node="gpu01", idle_pct=IDLE) is None
    assert with_summary("", summary, node="gpu01", idle_pct=IDLE) is not None


def test_each_nodes_write_keeps_the_other_nodes_rows() -> None:
    a = GpuUse("n1", 0, 3, 50, 90, 10, 1000, 8000, 0.1)
    b = GpuUse("n2", 0, 3, 60, 90, 10, 1000, 8000, 0.1)
    b_fewer = GpuUse("n2", 0, 1, 0, 0, 0, 500, 8000, 1.0)
    first = with_summary(ADMITTED, Summary(at=T0, uses=(a, b)), node="n1", idle_pct=IDLE)
    assert first is not None
    second = with_summary(first, Summary(at=T0, uses=(a, b_fewer)), node="n1", idle_pct=IDLE)
    assert second is not None
    back = read_summary(second)
    assert back is not None and back.uses == (a, b)  # n2's row with more samples kept


def test_a_job_too_big_for_a_row_per_gpu_keeps_one_row_per_node() -> None:
    uses = tuple(GpuUse(f"node{n:03d}", g, 12, 50, 100, 30, 40_000, 81_920, 0.2 if g else 1.0)
                 for n in range(32) for g in range(8))
    text = with_summary(ADMITTED, Summary(at=T0, uses=uses), node="node000", idle_pct=50.0)
    assert text is not None and len(text) <= MAX_ADMIN_COMMENT
    back = read_summary(text)
    assert back is not None and back.per_node and len(back.uses) == 32
    assert back.uses[0].gpu == -8
    folded = from_summary(back, job_id=1, gpus=256, running=False)
    assert folded.unmeasured_gpus == 0
    huge = tuple(GpuUse(f"n{n:05d}", 0, 1, 1, 1, 1, 1, 1, 0.0) for n in range(2000))
    cut = with_summary("", Summary(at=T0, uses=huge), node="n00000", idle_pct=IDLE)
    assert cut is not None and len(cut) <= MAX_ADMIN_COMMENT
    assert (s := read_summary(cut)) is not None and s.cut == 2000


def test_a_summary_of_another_version_is_not_read() -> None:
    assert read_summary(RECORD_PREFIX + '{"js":{"v":2,"g":[]}}') is None
    assert read_summary(RECORD_PREFIX + '{"js":1}') is None
    assert read_summary("garbage") is None


def test_gpu_uses_takes_the_epilog_reading_where_no_sample_exists() -> None:
    (u,) = gpu_uses([], [("n1", 3)], idle_pct=IDLE, epilog={("n1", 3): (1234, 42.0)})
    assert (u.samples, u.mean_util_pct, u.peak_mem_mb, u.idle_frac) == (0, 42.0, 1234, None)


def test_a_quote_in_a_why_survives_sacctmgr() -> None:
    summary = Summary(at=T0, uses=two_of_eight().uses,
                      zombie_unjudged="no zombie verdict: gpu01 GPU 0's samples cover \"5 min\"")
    text = with_summary(ADMITTED, summary, node="gpu01", idle_pct=IDLE)
    assert text is not None
    stored = text.replace('"', "`").replace("'", "`")  # sacctmgr turns both into backticks
    back = read_summary(stored)
    assert back is not None and back.zombie_unjudged == (
        "no zombie verdict: gpu01 GPU 0\u2019s samples cover \u20195 min\u2019")
