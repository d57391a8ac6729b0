"""``why``, ``budget status`` and ``quarantine list`` when the database cannot be read:
each says so on stdout (null plus ``store_error`` in --json), exits 1, and never says
that nothing happened. The database is a ``FakeStore`` that is down or fails its reads,
handed in where the CLI would open PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from daemon_helpers import EXAMPLE, NOW, world
from hooks_helpers import CFG as HOOK_CFG

from slurm_ml.cli import main
from slurm_ml.store.errors import StoreError
from slurm_ml.store.fake import FakeStore
from slurm_ml.store.records import ReconcilerDecision

DSN = "postgresql://x@h/db"  # never opened: the FakeStore stands in
NOTHING_HAPPENED = "No requeue, cancel or warning by slurm-ml."


def _requeued_job_store() -> FakeStore:
    """Job 1 was signalled, then requeued, by slurm-ml (what the prober's job had)."""
    store = FakeStore()
    at = datetime.fromtimestamp(NOW - 600, UTC)
    for n, kind in enumerate(("requeue_signal", "requeue")):
        store.record_decision(ReconcilerDecision(
            idempotency_key=f"k{n}", cycle=n, job_id=1, kind=kind,
            reason="past its minimum runtime", decided_at=at, dry_run=False))
    return store


def _down(store: FakeStore) -> FakeStore:
    store.set_available(False)
    return store


def _failing_reads(store: FakeStore) -> FakeStore:
    store.fail_next_reads(StoreError("schema at fake:0/fake is missing or outdated"), n=99)
    return store


@pytest.fixture
def reconciler_with(monkeypatch: pytest.MonkeyPatch) -> Any:
    from slurm_ml.cli import reconciler

    monkeypatch.setattr(reconciler, "_slurm", lambda _cfg: world())
    monkeypatch.setattr(reconciler.time, "time", lambda: NOW)

    def use(store: FakeStore) -> None:
        monkeypatch.setattr(reconciler, "_store", lambda _cfg, _dsn: store)

    return use


def _run(*argv: str, dsn: str | None = DSN) -> tuple[int, str, str]:
    env = {"SLURM_ML_DSN": dsn, "SLURM_ML_CONFIG": str(EXAMPLE)}
    res = CliRunner().invoke(main, list(argv), env=env)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res.exit_code, res.stdout, res.stderr


# ------------------------------------------------------------------------------ why


@pytest.mark.parametrize("fault", [_down, _failing_reads], ids=["down", "reads-fail"])
def test_why_with_the_database_unreadable_says_the_history_is_unknown(
        reconciler_with: Any, fault: Any) -> None:
    reconciler_with(fault(_requeued_job_store()))

    code, out, err = _run("why", "1")

    assert code == 1, err
    assert NOTHING_HAPPENED not in out
    assert "History unknown: the database could not be read" in out
    assert "could not be read: the job's history is unknown" in err
    code, out, _ = _run("why", "1", "--json")
    data = json.loads(out)
    assert code == 1 and data["found"] is True  # what Slurm says is still there
    assert data["history"] is None and data["made_room"] is None and data["repair"] is None
    assert data["store_error"]


def test_why_with_the_database_up_shows_the_requeue(reconciler_with: Any) -> None:
    reconciler_with(_requeued_job_store())
    code, out, _ = _run("why", "1", "--json")
    data = json.loads(out)
    assert code == 0 and data["store_error"] is None
    assert [h["kind"] for h in data["history"]] == ["requeue_signal", "requeue"]


def test_why_without_a_database_does_not_claim_nothing_happened(
        reconciler_with: Any) -> None:
    code, out, _ = _run("why", "1", dsn=None)
    assert code == 1 and NOTHING_HAPPENED not in out
    assert "History unknown" in out and "no database configured" in out
    data = json.loads(_run("why", "1", "--json", dsn=None)[1])
    assert data["history"] is None and data["store_error"].startswith("no database configured")


# --------------------------------------------------------------------- budget status


def test_budget_status_with_the_database_down_says_what_is_unknown(
        reconciler_with: Any) -> None:
    reconciler_with(_down(FakeStore()))

    code, out, err = _run("budget", "status")

    assert code == 1, err
    assert "Database not read (cannot connect to PostgreSQL at fake:0/fake" in out
    assert "GPU utilisation and refunds are unknown" in out
    assert "GPU utilisation and refunds unknown" in err
    code, out, _ = _run("budget", "status", "--json")
    data = json.loads(out)
    assert code == 1 and data["refunds"] is None and data["store_error"]
    assert data["nodes"] and all(r["mean_gpu_util_pct"] is None
                                 and r["refunded_gpu_hours"] is None for r in data["nodes"])


def test_budget_status_with_the_database_up_has_empty_refunds_not_null(
        reconciler_with: Any) -> None:
    reconciler_with(FakeStore())
    code, out, _ = _run("budget", "status", "--json")
    data = json.loads(out)
    assert code == 0 and data["refunds"] == [] and data["store_error"] is None


def test_budget_status_plot_with_the_database_down_names_it(
        reconciler_with: Any, tmp_path: Path) -> None:
    reconciler_with(_down(FakeStore()))
    code, _, err = _run("budget", "status", "--plot", str(tmp_path / "b.png"))
    assert code == 1 and "nothing to plot: the database could not be read" in err


# -------------------------------------------------------------------- quarantine list


@pytest.fixture
def quarantine_with(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    from hooks_helpers import fake_slurm

    from slurm_ml.cli import quarantine
    from slurm_ml.hooks.wiring import Boundaries

    def use(store: Callable[[], FakeStore], **drains: str) -> None:
        """Each command gets its own store from ``store()``: a command closes its store."""
        def boundaries(_config: str | None, _dsn: str | None) -> Boundaries:
            return Boundaries(cfg=HOOK_CFG, slurm=fake_slurm(**drains), store=store(),
                              probe=lambda node, w: pytest.fail("no probe here"),
                              procs=None,  # type: ignore[arg-type]
                              baseline_dir=None, shm_dir=lambda node: tmp_path)

        monkeypatch.setattr(quarantine, "_operator_boundaries", boundaries)

    return use


@pytest.mark.parametrize("fault", [_down, _failing_reads], ids=["down", "reads-fail"])
def test_quarantine_list_with_the_database_unreadable_claims_no_empty_view(
        quarantine_with: Any, fault: Any) -> None:
    quarantine_with(lambda: fault(FakeStore()))

    code, out, err = _run("quarantine", "list")

    assert code == 1, err
    assert "no breaker alarms" not in out
    assert "breaker alarms and repairs: unknown (the database could not be read" in out
    code, out, _ = _run("quarantine", "list", "--json")
    data = json.loads(out)
    assert code == 1 and data["alarms"] is None and data["repairs"] is None
    assert data["drains"] == [] and data["store_error"]  # Slurm was read: no drains


def test_quarantine_list_streaks_unknown_with_a_drain(quarantine_with: Any) -> None:
    quarantine_with(lambda: _down(FakeStore()), gpu03="slurm-ml: nvlink.active_links")
    code, out, _ = _run("quarantine", "list")
    assert code == 1 and "drained  gpu03" in out and "?/3 clean checks" in out
    assert "breaker alarms and clean-check streaks and repairs: unknown" in out


def test_quarantine_list_with_the_database_up_and_nothing_to_show(
        quarantine_with: Any) -> None:
    quarantine_with(FakeStore)
    code, out, _ = _run("quarantine", "list")
    assert code == 0 and out.strip() == (
        "no slurm-ml drains, no breaker alarms, no repairs waiting")
    code, out, _ = _run("quarantine", "list", "--json")
    data = json.loads(out)
    assert code == 0 and data["alarms"] == [] and data["repairs"] == []
    assert data["store_error"] is None
