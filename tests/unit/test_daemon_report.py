"""What operators read: budget status rows and text, why JOBID, the plot, the CLI help."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from daemon_helpers import CFG, EXAMPLE, NOW, job, world

from slurm_ml.cli import main
from slurm_ml.daemon import views
from slurm_ml.daemon.observe import observe
from slurm_ml.daemon.plan import plan_cycle
from slurm_ml.model import JobState
from slurm_ml.ops import report
from slurm_ml.policy.fairshare import FairShare
from slurm_ml.slurm.fake import FakeSlurm
from slurm_ml.store.fake import FakeStore
from slurm_ml.store.records import BudgetSnapshot, JobGpuStats, ReconcilerDecision


def _fair() -> tuple[FakeSlurm, FairShare]:
    slurm = world()
    return slurm, plan_cycle(CFG, observe(CFG, slurm, FakeStore(), NOW)).fair


def test_budget_rows_cover_the_tree_and_rank_the_starved_team_first() -> None:
    _slurm, fair = _fair()
    data = report.budget_json(fair, {"llm-pretrain": 12.5})

    paths = [r["path"] for r in data["nodes"]]
    assert paths[0] == "ml" and "ml/vision/detection/dave" in paths
    rows = {r["path"]: r for r in data["nodes"]}
    nlp, vision = rows["ml/nlp"], rows["ml/vision"]
    assert nlp["budget_share"] == 0.6 and vision["budget_share"] == 0.4
    assert nlp["delivered_gpu_hours"] > 0 and vision["delivered_gpu_hours"] == 0
    assert vision["pending_gpus"] > 0
    assert rows["ml/nlp/llm-pretrain"]["mean_gpu_util_pct"] == 12.5
    assert data["ranking"][0]["account"] == "detection"
    assert [r["rank"] for r in data["ranking"]] == sorted(r["rank"] for r in data["ranking"])

    text = report.budget_text(data)
    assert "del/owed" in text and "detection" in text
    assert "note: llm-pretrain used its GPUs at 12% on average" in text


def test_budget_status_says_who_runs_below_its_entitlement_now() -> None:
    _slurm, fair = _fair()
    data = report.budget_json(fair, {})

    rows = {r["account"]: r for r in data["nodes"] if r["kind"] == "project"}
    det = rows["detection"]
    assert det["running_gpus"] < det["entitled_gpus"] and det["pending_gpus"] > 0
    assert det["entitlement_first"] and "detection" in data["entitlement_first"]
    assert det["entitled_gpus"] == pytest.approx(
        det["budget_share"] * data["capacity_billing_gpus"], abs=0.01)
    text = report.budget_text(data)
    assert (f"note: detection runs {det['running_gpus']:.1f} of its {det['entitled_gpus']:.1f} "
            "entitled billing GPUs and has work pending: it ranks ahead") in text
    off = dataclasses.replace(fair, entitlement_first=frozenset())
    assert "entitled billing GPUs" not in report.budget_text(report.budget_json(off, {}))


def _held_and_dependent(slurm: FakeSlurm) -> FakeSlurm:
    """detection's dave adds a held a100 job and two jobs waiting on a dependency."""
    slurm.add_job(job(30, "dave", "detection", gpus=8, gtype="a100_80g", reason="JobHeldUser",
                      site=None))
    for jid in (31, 32):
        slurm.add_job(job(jid, "dave", "detection", gpus=8, gtype="a100_80g",
                          reason="Dependency", site=None))
    return slurm


def test_budget_status_shows_excluded_pending_gpus_apart_per_reason() -> None:
    slurm = _held_and_dependent(world())
    obs = observe(CFG, slurm, FakeStore(), NOW)
    fair = plan_cycle(CFG, obs).fair
    before = report.budget_json(_fair()[1], {})
    data = report.budget_json(fair, {}, views.excluded_pending(CFG, obs.jobs))

    rows = {r["path"]: r for r in data["nodes"]}
    det, old = rows["ml/vision/detection"], {r["path"]: r for r in before["nodes"]}
    assert det["pending_gpus"] == old["ml/vision/detection"]["pending_gpus"]  # demand only
    assert det["ratio"] == old["ml/vision/detection"]["ratio"]
    assert det["excluded_pending"] == {"Dependency": 16.0, "JobHeldUser": 8.0}
    assert det["excluded_pending_gpus"] == 24.0
    assert rows["ml/vision"]["excluded_pending_gpus"] == 24.0  # rolled up the tree
    assert rows["ml"]["excluded_pending"] == {"Dependency": 16.0, "JobHeldUser": 8.0}
    assert rows["ml/vision/detection/dave"]["excluded_pending_gpus"] == 24.0
    assert rows["ml/nlp/llm-pretrain"]["excluded_pending_gpus"] == 0
    assert {(e["reason"], e["wait"], e["jobs"], e["gpus"]) for e in data["excluded_pending"]} \
        == {("Dependency", "dependency", 2, 16), ("JobHeldUser", "held", 1, 8)}

    text = report.budget_text(data)
    assert "not-demand" in text
    assert ("note: detection has 24 billing GPUs pending that are not demand "
            "(Dependency 16, JobHeldUser 8)") in text


def test_budget_status_cli_lists_excluded_jobs_in_json_and_text(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from slurm_ml.cli import reconciler

    slurm = _held_and_dependent(world())
    monkeypatch.setattr(reconciler, "_slurm", lambda _cfg: slurm)
    monkeypatch.setattr(reconciler, "_store", lambda _cfg, _dsn: FakeStore())
    monkeypatch.setattr(reconciler.time, "time", lambda: NOW)
    argv = ["budget", "status", "--config", str(EXAMPLE), "--dsn", "postgresql://x@h/db"]
    res = CliRunner().invoke(main, [*argv, "--json"])

    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert [(e["account"], e["user"], e["reason"], e["billing_gpus"])
            for e in data["excluded_pending"]] == [("detection", "dave", "Dependency", 16.0),
                                                    ("detection", "dave", "JobHeldUser", 8.0)]
    assert data["store_error"] is None and data["refunds"] == []
    text = CliRunner().invoke(main, argv)
    assert "Dependency 16, JobHeldUser 8" in text.stdout


def test_utilisation_is_weighted_by_run_time() -> None:
    end = datetime(2026, 1, 1, tzinfo=UTC)

    def row(util: float, hours: float, key: str) -> JobGpuStats:
        return JobGpuStats(idempotency_key=key, job_id=1, job_name="j", user="u",
                           account="a", node="n", gpu_index=0, peak_mem_mb=1,
                           mean_util_pct=util, ended_at=end,
                           started_at=end - timedelta(hours=hours))

    got = report.utilisation_by_account([row(100, 3, "k1"), row(0, 1, "k2")])
    assert got == {"a": pytest.approx(75.0)}


def test_why_explains_site_factor_admission_and_history() -> None:
    slurm, fair = _fair()
    job = slurm.jobs[20]
    decision = ReconcilerDecision(idempotency_key="k", cycle=1, job_id=20, kind="requeue",
                                  reason="requeued after its 60-min minimum runtime",
                                  decided_at=datetime.fromtimestamp(NOW, UTC), dry_run=False)
    job = dataclasses.replace(job, admin_comment='slurm-ml {"qos":"alloc","v":1}')
    data = report.why_json(20, job, {"site": 5, "age": 1}, fair, [decision])

    assert data["admission"] == {"qos": "alloc", "v": 1}
    assert data["budget"]["association"]["rank"] == 1
    text = report.why_text(data)
    assert "SiteFactor" in text and "rank 1" in text and "requeue: requeued after" in text
    acct = data["budget"]["account"]
    assert job.account == "detection" and acct["entitlement_first"]
    assert (f"Entitlement first: it runs {acct['running_gpus']:.1f} of its "
            f"{acct['entitled_gpus']:.1f} entitled billing GPUs now") in text

    unknown = report.why_text(report.why_json(999, None, None, fair, []))
    assert "not known to slurmctld" in unknown and "No requeue" in unknown


def test_why_explains_a_pending_reason_and_a_reranked_none() -> None:
    slurm, fair = _fair()
    job = dataclasses.replace(slurm.jobs[20], state=JobState.PENDING, reason="Resources",
                              site_factor=None)
    data = report.why_json(20, job, None, fair, [])
    assert data["pending"]["wait"] == "resources" and data["pending"]["note"] is None
    assert "Waiting: the GPUs or nodes it needs are in use by other jobs." in (
        report.why_text(data))

    # right after slurm-ml pushed its SiteFactor, Slurm shows None (22.05, verified)
    ranked = dataclasses.replace(job, reason="None", site_factor=2100)
    text = report.why_text(report.why_json(20, ranked, None, fair, []))
    assert "not yet reached by the scheduler" in text
    assert report.RERANKED_NONE in text
    # None on a job slurm-ml never ranked: a new job, no note about SiteFactor
    fresh = dataclasses.replace(job, reason="None")
    assert report.why_json(20, fresh, None, fair, [])["pending"]["note"] is None

    running = dataclasses.replace(job, state=JobState.RUNNING, reason="None")
    assert report.why_json(20, running, None, fair, [])["pending"] is None


def test_plot_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from slurm_ml.ops.plot import plot_budget

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    snaps = [BudgetSnapshot(idempotency_key=f"{a}{i}", taken_at=t0 + timedelta(hours=i),
                            account=a, parent=p, budget_share=0.5, usage_gpu_hours=i * 2.0,
                            owed_gpu_hours=i * 2.5)
             for i in range(5) for a, p in (("nlp", "ml"), ("llm-pretrain", "nlp"))]
    out = tmp_path / "b.png"
    plot_budget(snaps, str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv", [["daemon", "--help"], ["budget", "status", "--help"],
                                  ["why", "--help"]], ids=["daemon", "budget", "why"])
def test_operator_commands_have_help_with_exit_codes(argv: list[str]) -> None:
    res = CliRunner().invoke(main, argv)
    assert res.exit_code == 0 and "Exit codes" in res.output and "--json" in res.output


def test_bad_config_is_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "c.yaml"
    bad.write_text("cluster: 1\n")
    res = CliRunner().invoke(main, ["budget", "status", "--config", str(bad)])
    assert res.exit_code == 2 and "cluster" in res.output


@pytest.mark.parametrize(("arg", "says"), [
    ("1234_5", "squeue -j 1234_5 -h -o %A"),  # int() would read it as job 12345
    ("1234+0", "het-job component"),
    ("12a", "is not a job id"),
])
def test_why_refuses_an_id_that_is_not_one_job(arg: str, says: str) -> None:
    res = CliRunner().invoke(main, ["why", arg])
    assert res.exit_code == 2 and says in res.output, res.output


def test_why_of_an_ended_job_with_the_database_down_is_exit_1_not_unknown(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from slurm_ml.cli import reconciler
    from slurm_ml.store.errors import StoreUnavailable

    class DownStore(FakeStore):
        def decisions_for_job(self, job_id: int) -> list[ReconcilerDecision]:
            raise StoreUnavailable("connection refused", target="test")

    monkeypatch.setattr(reconciler, "_slurm", lambda cfg: world())
    monkeypatch.setattr(reconciler, "_store", lambda cfg, dsn: DownStore())
    argv = ["why", "999", "--config", str(EXAMPLE), "--dsn", "postgresql://x@h/db"]
    res = CliRunner().invoke(main, argv)
    # Slurm no longer lists job 999, and its history is unreadable: not "unknown job"
    assert res.exit_code == 1, res.output
    assert "the database could not be read" in res.stderr

    monkeypatch.setattr(reconciler, "_store", lambda cfg, dsn: FakeStore())
    assert CliRunner().invoke(main, argv).exit_code == 2  # known to neither: bad input


@pytest.mark.parametrize(("name", "says"), [("b.pdf", "name a .png file"),
                                            ("missing/b.png", "is not a writable directory")])
def test_budget_status_refuses_a_bad_plot_path_before_reading_slurm(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, says: str) -> None:
    from slurm_ml.cli import reconciler

    def never(cfg: object) -> None:
        raise AssertionError("read Slurm before checking --plot")

    monkeypatch.setattr(reconciler, "_slurm", never)
    res = CliRunner().invoke(main, ["budget", "status", "--config", str(EXAMPLE),
                                    "--plot", str(tmp_path / name)])
    assert res.exit_code == 2 and says in res.output, res.output


def test_a_malformed_dsn_is_exit_2_not_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    from slurm_ml.cli import reconciler

    monkeypatch.setattr(reconciler, "_slurm", lambda cfg: world())
    res = CliRunner().invoke(main, ["why", "20", "--config", str(EXAMPLE),
                                    "--dsn", "garbage=="])
    assert res.exit_code == 2 and "bad DSN: invalid PostgreSQL DSN" in res.stderr
