"""ops.jobstats and ops.efficiency over values the CLI reads."""

from __future__ import annotations

from datetime import UTC, datetime

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config
from slurm_ml.model import GpuRequest, Job, JobAccounting, JobState
from slurm_ml.ops.efficiency import efficiency, efficiency_json, efficiency_text
from slurm_ml.ops.jobstats import job_stats, jobstats_json, jobstats_text
from slurm_ml.ops.plot import plot_efficiency
from slurm_ml.store.records import JobGpuStats, UtilSample

CFG = load_config(DEFAULT_CONFIG)
T0 = 1_800_000_000
ADMITTED = 'slurm-ml {"at":1,"min_runtime":60,"qos":"alloc","v":1}'


def acct(job_id: int = 5, *, comment: str = ADMITTED, gpus: int = 8, user: str = "alice",
         account: str = "llm-pretrain", partition: str = "gpu", elapsed: int = 3600,
         cpu: float | None = None) -> JobAccounting:
    return JobAccounting(job_id=job_id, name="train", user=user, account=account,
                         partition=partition, state=JobState.COMPLETED, elapsed_s=elapsed,
                         alloc_cpus=16, alloc_gpus=gpus, nodes="gpu01", start=T0,
                         end=T0 + elapsed, admin_comment=comment, total_cpu_s=cpu,
                         req_mem_mb=64_000, max_rss_mb=None if cpu is None else 8_000,
                         gpu_type="a100_80g")


def sample(g: int, i: int, util: float, job_id: int = 5) -> UtilSample:
    return UtilSample(idempotency_key=f"{job_id}-{g}-{i}", job_id=job_id, node="gpu01",
                      gpu_index=g, sampled_at=datetime.fromtimestamp(T0 + 60 + i * 300, UTC),
                      util_pct=util, mem_used_mb=30_000)


SAMPLES = [sample(g, i, 95.0 if g < 2 else 0.0) for g in range(8) for i in range(10)]


def test_an_ended_job_from_its_samples() -> None:
    s = job_stats(5, cfg=CFG, job=None, acct=acct(cpu=16 * 3600 * 0.5), samples=SAMPLES,
                  rows=[], now=T0 + 7200)
    data = jobstats_json(s)
    assert data["source"] == "samples" and data["gpus"] == 8 and not data["running"]
    assert data["cpu"]["cpu_eff"] == 0.5
    assert data["notes"][0]["kind"] == "unused_gpus"
    text = jobstats_text(data)
    assert "did not use 6 of its 8 GPUs (gpu01 GPUs 2-7)" in text
    assert "CPU efficiency: 50% (16 CPUs)" in text


def test_a_running_job_shows_its_samples_so_far_without_cpu_figures() -> None:
    job = Job(job_id=5, name="train", user="alice", account="llm-pretrain", partition="gpu",
              qos="alloc", state=JobState.RUNNING, reason="None", nodes="gpu01", num_nodes=1,
              gpus=(GpuRequest(8, "job", None),), time_limit_min=600, time_min_min=None,
              requeue=True, site_factor=None, priority=None, submit_time=T0, start_time=T0)
    data = jobstats_json(job_stats(5, cfg=CFG, job=job, acct=None, samples=SAMPLES, rows=[],
                                   now=T0 + 3100))
    assert data["running"] and data["cpu"] is None and data["elapsed_s"] == 3100
    assert "has not used 6 of its 8 GPUs" in data["notes"][0]["text"]
    assert "--gpus=2" in data["notes"][0]["text"]  # its own flag: -G/--gpus


def test_no_samples_falls_back_to_the_summary_else_not_measured() -> None:
    bare = jobstats_json(job_stats(5, cfg=CFG, job=None, acct=acct(), samples=[], rows=[],
                                   now=T0 + 7200, store_error="no database configured"))
    assert bare["source"] == "none" and bare["gpus_not_measured"] == 8
    assert bare["notes"][-1]["kind"] == "not_measured"
    assert "not measured" in jobstats_text(bare)


def test_epilog_rows_alone_give_the_mean_and_peak_memory() -> None:
    rows = [JobGpuStats(idempotency_key=f"r{g}", job_id=5, job_name="train", user="alice",
                        account="llm-pretrain", node="gpu01", gpu_index=g, peak_mem_mb=1000,
                        mean_util_pct=50.0, ended_at=datetime.fromtimestamp(T0 + 3600, UTC))
            for g in range(8)]
    data = jobstats_json(job_stats(5, cfg=CFG, job=None, acct=acct(), samples=[], rows=rows,
                                   now=T0 + 7200))
    assert data["source"] == "samples" and data["gpu"][0]["mean_util_pct"] == 50.0
    assert data["gpu"][0]["idle_frac"] is None


def test_efficiency_per_team_and_the_worst_jobs(tmp_path: object) -> None:
    from slurm_ml.hooks.job_summary import write_summary  # the summary as the epilog writes it
    from slurm_ml.slurm.fake import FakeSlurm

    slurm = FakeSlurm()
    slurm.accounting[5] = acct()
    write_summary(5, "gpu01", cfg=CFG, slurm=slurm, snap=None, samples=SAMPLES, stats=[],
                  job=None, now=datetime.fromtimestamp(T0 + 3600, UTC), sleep=lambda _s: None)
    widened = acct(6, comment='slurm-ml {"need_gb":30,"need_src":"profile",'
                              '"types":["a100_80g","a100_40g"],"v":1}', gpus=2,
                   account="nlp", user="bob")
    cpu_only = acct(7, gpus=0)
    e = efficiency([slurm.accounting[5], widened, cpu_only], {}, cfg=CFG, start=T0,
                   end=T0 + 7200, by="team")
    data = efficiency_json(e)
    team = {g["name"]: g for g in data["groups"]}
    assert data["gpu_jobs"] == 2 and data["figures_from"]["admin_comment_summary"] == 1
    pre = team["llm-pretrain"]
    assert pre["allocated_gpu_h"] == 8.0 and pre["idle_gpu_h"] == 6.0
    assert pre["computing_gpu_h"] == 1.9 and pre["not_measured_gpu_h"] == 0.0
    assert team["nlp"]["widened_gpu_h"] == 2.0 and team["nlp"]["not_measured_gpu_h"] == 2.0
    (worst,) = data["wasters"]
    assert worst["job_id"] == 5 and "unused_gpus" in worst["how"]
    text = efficiency_text(data)
    assert "GPUs never used" in text and "llm-pretrain" in text
    by_user = efficiency_json(efficiency([slurm.accounting[5], widened], {}, cfg=CFG, start=T0,
                                         end=T0 + 7200, by="user"))
    assert {g["name"] for g in by_user["groups"]} == {"alice", "bob"}
    png = f"{tmp_path}/eff.png"
    plot_efficiency(data, png)
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
