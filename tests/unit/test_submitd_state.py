"""submitd's view of budgets and GPU memory profiles (StateRefresher over a FakeStore),
and config reload (PolicyServer.reload): good state and good config are never lost."""

from __future__ import annotations

import copy
import json
import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import T0, budget_snapshot, job_gpu_stats, store_with

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config, parse_config
from slurm_ml.policy.admission import recorded_min_runtime_min
from slurm_ml.policy.admission.state import AdmissionState, window_capacity_gpu_hours
from slurm_ml.store import BudgetSnapshot, FakeStore, JobGpuStats
from slurm_ml.submitd.server import PolicyServer
from slurm_ml.submitd.state import StateRefresher, build_state

EXAMPLE = DEFAULT_CONFIG
EXAMPLE_TEXT = EXAMPLE.read_text(encoding="utf-8")
CFG = load_config(EXAMPLE)
#: 2 x 8 x 1.0 + 2 x 8 x 0.8 + 2 x 4 x 0.4 billing GPUs over a 168 h window
CAPACITY = (16 * 1.0 + 16 * 0.8 + 8 * 0.4) * 168.0


def snapshot(account: str, share: float, usage: float, *, minutes: int = 0,
             site_factor: int | None = None, key: str | None = None) -> BudgetSnapshot:
    return budget_snapshot(key or f"{account}-{minutes}-{usage}", account=account,
                           minutes=minutes, parent="nlp", budget_share=share,
                           usage_gpu_hours=usage, owed_gpu_hours=0.0, site_factor=site_factor)


def run(job_id: int, peak_mb: int, *, user: str = "alice", name: str = "train",
        hours: int = 0, gpu: int = 0) -> JobGpuStats:
    return job_gpu_stats(f"{user}-{name}-{job_id}-{gpu}", job_id=job_id, hours=hours,
                         job_name=name, user=user, account="llm-pretrain", gpu_index=gpu,
                         peak_mem_mb=peak_mb)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def refresher_with(*records: BudgetSnapshot | JobGpuStats,
                   store: FakeStore | None = None) -> tuple[FakeStore, StateRefresher, Clock]:
    store = store_with(records, store)
    clock = Clock()
    return store, StateRefresher(store, CFG, clock=clock), clock


# --------------------------------------------------------------------------- standing


def test_window_capacity_of_the_example() -> None:
    assert window_capacity_gpu_hours(CFG) == CAPACITY


#: (id, budget_share, usage GPU-hours, exhausted)
STANDINGS: list[tuple[str, float, float, bool]] = [
    ("unused", 0.25, 0.0, False),
    ("just-below-share", 0.25, 0.25 * CAPACITY - 0.1, False),
    ("exactly-share-is-exhausted", 0.25, 0.25 * CAPACITY, True),
    ("over-share", 0.25, 5000.0, True),
    ("zero-share-is-exhausted", 0.0, 0.0, True),
    ("whole-cluster-share", 1.0, CAPACITY - 1, False),
]


@pytest.mark.parametrize(("share", "usage", "exhausted"), [c[1:] for c in STANDINGS],
                         ids=[c[0] for c in STANDINGS])
def test_standing_from_budget_snapshots(share: float, usage: float, exhausted: bool) -> None:
    _store, refresher, _clock = refresher_with(snapshot("llm-eval", share, usage, site_factor=42))
    assert refresher.refresh_once() is True
    standing = refresher.current.standing["llm-eval"]
    assert standing.exhausted is exhausted
    assert standing.site_factor == 42
    assert standing.usage_gpu_hours == usage
    assert standing.budget_gpu_hours == pytest.approx(share * CAPACITY)


def test_latest_snapshot_of_each_account_wins() -> None:
    _store, refresher, _clock = refresher_with(
        snapshot("llm-eval", 0.25, 5000.0, minutes=0, site_factor=1),
        snapshot("llm-eval", 0.25, 10.0, minutes=5, site_factor=2),
        snapshot("detection", 0.1, 900.0, minutes=1),
    )
    refresher.refresh_once()
    standing = refresher.current.standing
    assert set(standing) == {"llm-eval", "detection"}
    assert standing["llm-eval"].exhausted is False
    assert standing["llm-eval"].site_factor == 2
    assert standing["detection"].exhausted is True  # 900 >= 0.1 * 6720
    assert standing["detection"].site_factor is None


# --------------------------------------------------------------------------- profiles

#: (id, job GPU stats rows, (user, name) → expected p95 in GB)
PROFILES: list[tuple[str, list[JobGpuStats], dict[tuple[str, str], float]]] = [
    ("one-run", [run(1, 30 * 1024)], {("alice", "train"): 30.0}),
    ("job-peak-is-max-over-its-gpus",
     [run(1, 20 * 1024, gpu=0), run(1, 30 * 1024, gpu=1), run(1, 10 * 1024, gpu=2)],
     {("alice", "train"): 30.0}),
    ("p95-interpolated-over-20-runs",  # position 0.95 * 19 = 18.05 between 19 and 20 GB
     [run(k, k * 1024, hours=k) for k in range(1, 21)],
     {("alice", "train"): 19.05}),
    ("p95-between-two-runs",
     [run(1, 10 * 1024, hours=1), run(2, 30 * 1024, hours=2)],
     {("alice", "train"): 29.0}),
    ("only-the-newest-20-runs",
     [run(k, 80 * 1024, hours=k) for k in range(5)]
     + [run(k, 10 * 1024, hours=k) for k in range(5, 25)],
     {("alice", "train"): 10.0}),
    ("one-profile-per-user-and-name",
     [run(1, 30 * 1024), run(2, 12 * 1024, name="eval"), run(3, 5 * 1024, user="bob")],
     {("alice", "train"): 30.0, ("alice", "eval"): 12.0, ("bob", "train"): 5.0}),
    ("mb-to-gb", [run(1, 1536)], {("alice", "train"): 1.5}),
]


@pytest.mark.parametrize(("rows", "want"), [c[1:] for c in PROFILES], ids=[c[0] for c in PROFILES])
def test_profiles_are_p95_in_gb(rows: list[JobGpuStats],
                                want: dict[tuple[str, str], float]) -> None:
    _store, refresher, _clock = refresher_with(*rows)
    refresher.refresh_once()
    assert dict(refresher.current.profiles_gb) == pytest.approx(want)


def test_profile_runs_follow_the_config() -> None:
    rows = ([run(k, 80 * 1024, hours=k) for k in range(5)]
            + [run(k, 10 * 1024, hours=k) for k in range(5, 25)])
    _store, refresher, _clock = refresher_with(*rows)
    data = copy.deepcopy(yaml.safe_load(EXAMPLE_TEXT))
    data["policy"]["admission"]["profile_runs"] = 25
    refresher.set_config(parse_config(data))
    refresher.refresh_once()
    # 25 runs, 5 of them 80 GB: p95 at position 22.8 of the sorted peaks → 80 GB
    assert refresher.current.profiles_gb[("alice", "train")] == pytest.approx(80.0)


def test_build_state_directly() -> None:
    store = FakeStore()
    store.record_budget_snapshot(snapshot("llm-eval", 0.5, 10.0, site_factor=7))
    store.record_job_gpu_stats(run(1, 2048))
    state = build_state(CFG, store.latest_budget_snapshots(), store.gpu_mem_profiles(20), T0)
    assert state.loaded_at == T0
    assert state.standing["llm-eval"].budget_gpu_hours == pytest.approx(0.5 * CAPACITY)
    assert state.profiles_gb == {("alice", "train"): 2.0}


# --------------------------------------------------------------------------- refresh life cycle


def test_refresh_stamps_the_state_and_counts_generations() -> None:
    store, refresher, clock = refresher_with(snapshot("llm-eval", 0.25, 1.0))
    assert refresher.current == AdmissionState()
    assert refresher.generation == 0
    assert refresher.refresh_once() is True
    assert refresher.current.loaded_at == T0
    assert refresher.generation == 1
    clock.now = T0 + timedelta(minutes=1)
    store.record_budget_snapshot(snapshot("llm-eval", 0.25, 3000.0, minutes=1))
    assert refresher.refresh_once() is True
    assert refresher.generation == 2
    assert refresher.current.loaded_at == clock.now
    assert refresher.current.standing["llm-eval"].exhausted is True
    assert refresher.last_error is None


def test_no_store_means_no_state() -> None:
    refresher = StateRefresher(None, CFG)
    assert refresher.refresh_once() is False
    assert refresher.current == AdmissionState()
    assert refresher.generation == 0
    assert refresher.last_error is None


def test_outage_keeps_the_last_good_state_then_recovers(caplog: pytest.LogCaptureFixture) -> None:
    store, refresher, clock = refresher_with(snapshot("llm-eval", 0.25, 1.0),
                                             run(1, 30 * 1024))
    assert refresher.refresh_once()
    good = refresher.current
    store.set_available(False)
    store_error_logs = 0
    with caplog.at_level(logging.INFO, logger="slurm_ml.submitd.state"):
        for minute in (1, 2, 3):
            clock.now = T0 + timedelta(minutes=minute)
            assert refresher.refresh_once() is False
            assert refresher.current is good
            assert refresher.generation == 1
            assert refresher.last_error is not None
            assert "simulated outage" in refresher.last_error
        store_error_logs = sum(1 for r in caplog.records if r.levelno == logging.ERROR)
        assert store_error_logs == 1  # logged once per outage, not once per try
        store.set_available(True)
        store.record_budget_snapshot(snapshot("llm-eval", 0.25, 5000.0, minutes=3))
        assert refresher.refresh_once() is True
    assert refresher.last_error is None
    assert refresher.generation == 2
    assert refresher.current.loaded_at == T0 + timedelta(minutes=3)
    assert refresher.current.standing["llm-eval"].exhausted is True
    assert refresher.current.profiles_gb == {("alice", "train"): 30.0}
    assert any("works again" in r.getMessage() for r in caplog.records)


def test_outage_before_the_first_load_leaves_an_empty_state() -> None:
    store, refresher, _clock = refresher_with(snapshot("llm-eval", 0.25, 1.0))
    store.set_available(False)
    assert refresher.refresh_once() is False
    assert refresher.current == AdmissionState()
    assert refresher.current.loaded_at is None
    assert refresher.last_error is not None


def test_any_store_error_keeps_the_state() -> None:
    store, refresher, _clock = refresher_with(snapshot("llm-eval", 0.25, 1.0))
    refresher.refresh_once()
    good = refresher.current
    store.close()
    assert refresher.refresh_once() is False
    assert refresher.current is good
    assert refresher.last_error == "store is closed"


def test_background_thread_refreshes_when_poked() -> None:
    store, refresher, _clock = refresher_with(snapshot("llm-eval", 0.25, 1.0))
    refresher.start()
    try:
        assert refresher.wait_generation(0, timeout_s=5)
        store.record_budget_snapshot(snapshot("llm-eval", 0.25, 5000.0, minutes=1))
        refresher.poke()
        assert refresher.wait_generation(1, timeout_s=5)
        assert refresher.current.standing["llm-eval"].exhausted is True
    finally:
        refresher.stop()


class FlakyStore(FakeStore):
    """Raises a non-store error on its first read, as a bad row might."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def latest_budget_snapshots(self) -> list[BudgetSnapshot]:
        self.reads += 1
        if self.reads == 1:
            raise RuntimeError("bad row")
        return super().latest_budget_snapshots()


def test_background_thread_survives_a_crashing_refresh() -> None:
    store = FlakyStore()
    store.record_budget_snapshot(snapshot("llm-eval", 0.25, 1.0))
    refresher = StateRefresher(store, CFG)
    refresher.start()
    try:
        assert not refresher.wait_generation(0, timeout_s=0.2)  # first try crashed
        refresher.poke()
        assert refresher.wait_generation(0, timeout_s=5)
        assert "llm-eval" in refresher.current.standing
    finally:
        refresher.stop()


def test_state_reaches_admission_decisions() -> None:
    store, refresher, _clock = refresher_with(snapshot("llm-eval", 0.25, 1.0, site_factor=11))
    refresher.refresh_once()
    server = PolicyServer(CFG, refresher, clock=lambda: T0)
    line = json.dumps({"v": 1, "op": "submit",
                       "job": {"user_name": "carol", "tres_per_node": "gres:gpu:1"}})
    assert server.handle_line(line)["set"]["qos"] == "alloc"
    store.record_budget_snapshot(snapshot("llm-eval", 0.25, 5000.0, minutes=1, site_factor=3))
    refresher.refresh_once()
    reply = server.handle_line(line)
    assert reply["set"]["qos"] == "free"
    assert reply["set"]["site_factor"] == 3
    assert "has used its GPU-time budget" in reply["message"]


def test_stats_report_the_state_and_its_error() -> None:
    store, refresher, _clock = refresher_with(snapshot("llm-eval", 0.25, 1.0), run(1, 1024))
    refresher.refresh_once()
    server = PolicyServer(CFG, refresher)
    store.set_available(False)
    refresher.refresh_once()
    stats = server.handle_line('{"op": "stats"}')["stats"]
    assert stats["state_generation"] == 1
    assert stats["state_loaded_at"] == T0.isoformat()
    assert "simulated outage" in stats["state_error"]
    assert stats["accounts"] == 1
    assert stats["profiles"] == 1


# --------------------------------------------------------------------------- config reload


class CountingRefresher(StateRefresher):
    def __init__(self) -> None:
        super().__init__(None, CFG)
        self.pokes = 0
        self.configs: list[Any] = []

    def poke(self) -> None:
        self.pokes += 1
        super().poke()

    def set_config(self, cfg: Any) -> None:
        self.configs.append(cfg)
        super().set_config(cfg)


def write_config(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


GPUS16 = json.dumps({"op": "submit", "job": {"user_name": "bob", "tres_per_job": "gres:gpu:16"}})
IN_A100 = json.dumps({"op": "submit", "job": {"user_name": "bob", "partition": "a100",
                                              "tres_per_job": "gres:gpu:16"}})
NEW_PARTITION = """    - name: a100
      nodes: "gpu[01-04]"
      default: false
      max_time_min: 600
"""

#: (id, how the new file differs from the example, check on a reply after the reload)
ADOPTED: list[tuple[str, Callable[[str], str], Callable[[PolicyServer], None]]] = [
    ("leaf-wait-changed",
     lambda t: t.replace("leaf_switch_wait_min: 10", "leaf_switch_wait_min: 5"),
     lambda s: _assert(s.handle_line(GPUS16)["set"]["wait4switch"] == 300)),
    ("new-partition-managed",
     lambda t: t.replace("# GPU models.", NEW_PARTITION + "\n# GPU models."),
     lambda s: _assert(s.handle_line(IN_A100)["set"]["min_nodes"] == 2)),
    ("cap-changed",
     lambda t: t.replace("min_runtime_cap_min: 480", "min_runtime_cap_min: 60"),
     lambda s: _assert(recorded_min_runtime_min(s.handle_line(json.dumps(
         {"op": "submit", "job": {"user_name": "bob", "tres_per_node": "gres:gpu:1",
                                  "time_min": 600}}))["set"]["admin_comment"]) == 60)),
]


def _assert(ok: bool) -> None:
    assert ok


@pytest.mark.parametrize(("edit", "check"), [c[1:] for c in ADOPTED], ids=[c[0] for c in ADOPTED])
def test_reload_adopts_a_valid_config(tmp_path: Path, edit: Callable[[str], str],
                                      check: Callable[[PolicyServer], None]) -> None:
    path = write_config(tmp_path / "slurm-ml.yaml", EXAMPLE_TEXT)
    refresher = CountingRefresher()
    server = PolicyServer(load_config(path), refresher, config_path=path, clock=lambda: T0)
    assert server.handle_line(IN_A100)["set"] == {}  # partition a100 not managed yet
    write_config(path, edit(EXAMPLE_TEXT))
    assert server.reload() is True
    assert server.counts["reloads"] == 1
    assert refresher.configs == [server.policy.cfg]  # the state follows the new config
    assert refresher.pokes >= 1
    check(server)


def _delete(path: Path) -> None:
    path.unlink()


#: (id, how the new file breaks the config)
REFUSED: list[tuple[str, Callable[[Path], None]]] = [
    ("unknown-key", lambda p: write_config(p, EXAMPLE_TEXT + "\nbogus: 1\n")),
    ("bad-knob-value", lambda p: write_config(
        p, EXAMPLE_TEXT.replace("memory_margin_pct: 10", "memory_margin_pct: 150"))),
    ("no-default-partition", lambda p: write_config(
        p, EXAMPLE_TEXT.replace("default: true", "default: false"))),
    ("yaml-syntax-error", lambda p: write_config(p, EXAMPLE_TEXT + "\nslurm: [oops\n")),
    ("duplicate-key", lambda p: write_config(p, EXAMPLE_TEXT + "\nstore:\n  dsn: x\n")),
    ("empty-file", lambda p: write_config(p, "")),
    ("not-utf8", lambda p: p.write_bytes(b"\xff\xfe" + EXAMPLE_TEXT.encode())),
    ("file-deleted", _delete),
]


@pytest.mark.parametrize("breakage", [c[1] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_reload_refuses_a_bad_config_and_keeps_the_old_one(
        tmp_path: Path, breakage: Callable[[Path], None],
        caplog: pytest.LogCaptureFixture) -> None:
    path = write_config(tmp_path / "slurm-ml.yaml",
                        EXAMPLE_TEXT.replace("leaf_switch_wait_min: 10", "leaf_switch_wait_min: 5"))
    refresher = CountingRefresher()
    server = PolicyServer(load_config(path), refresher, config_path=path, clock=lambda: T0)
    before = server.policy
    reply_before = server.handle_line(GPUS16)
    breakage(path)
    with caplog.at_level(logging.ERROR, logger="slurm_ml.submitd.server"):
        assert server.reload() is False
    assert server.policy is before
    assert server.counts["reload_refused"] == 1
    assert server.counts["reloads"] == 0
    assert refresher.configs == []
    assert refresher.pokes == 1  # the state is still refreshed
    assert any("reload refused" in r.getMessage() for r in caplog.records)
    assert server.handle_line(GPUS16) == reply_before
    assert reply_before["set"]["wait4switch"] == 300


def test_reload_good_then_bad_keeps_the_good_one(tmp_path: Path) -> None:
    path = write_config(tmp_path / "slurm-ml.yaml", EXAMPLE_TEXT)
    server = PolicyServer(load_config(path), CountingRefresher(), config_path=path,
                          clock=lambda: T0)
    write_config(path, EXAMPLE_TEXT.replace("leaf_switch_wait_min: 10", "leaf_switch_wait_min: 2"))
    assert server.reload() is True
    write_config(path, EXAMPLE_TEXT + "\nbogus: 1\n")
    assert server.reload() is False
    assert server.handle_line(GPUS16)["set"]["wait4switch"] == 120
    assert server.counts["reloads"] == 1
    assert server.counts["reload_refused"] == 1


def test_reload_without_a_config_file_only_refreshes() -> None:
    refresher = CountingRefresher()
    server = PolicyServer(CFG, refresher)
    before = server.policy
    assert server.reload() is False
    assert server.policy is before
    assert refresher.pokes == 1
    assert "reload_refused" not in server.counts


def test_reload_is_safe_while_requests_are_served(tmp_path: Path) -> None:
    """Requests racing a reload see the old or the new policy, never a mix or an error."""
    path = write_config(tmp_path / "slurm-ml.yaml", EXAMPLE_TEXT)
    server = PolicyServer(load_config(path), CountingRefresher(), config_path=path,
                          clock=lambda: T0)
    write_config(path, EXAMPLE_TEXT.replace("leaf_switch_wait_min: 10", "leaf_switch_wait_min: 5"))
    seen: set[object] = set()
    errors: list[dict[str, Any]] = []

    def serve() -> None:
        for _ in range(200):
            reply = server.handle_line(GPUS16)
            if reply["action"] != "accept":
                errors.append(reply)
            else:
                seen.add(reply["set"]["wait4switch"])

    workers = [threading.Thread(target=serve) for _ in range(4)]
    for w in workers:
        w.start()
    for _ in range(5):
        server.reload()
    for w in workers:
        w.join()
    assert errors == []
    assert seen <= {600, 300}
    assert server.handle_line(GPUS16)["set"]["wait4switch"] == 300


def _lane_snapshot(account: str, lane_gpus: int, minutes: int) -> BudgetSnapshot:
    return budget_snapshot(f"{account}-lane-{minutes}", account=account, minutes=minutes,
                           parent="nlp", budget_share=0.25, usage_gpu_hours=1.0,
                           owed_gpu_hours=2.0, site_factor=5, lane_gpus=lane_gpus)


def _debug_job(name: str) -> str:
    """A short 1-GPU job of carol (llm-eval): fast-lane work (10-min contract, 30 min)."""
    return json.dumps({"v": 1, "op": "submit", "job": {
        "user_name": "carol", "account": "llm-eval", "name": name,
        "tres_per_node": "gres/gpu:1", "time_limit": 30, "time_min": 10}})


def test_a_burst_between_cycles_fills_the_lane_once() -> None:
    """The example cluster's lane holds floor(0.05 x 40) = 2 GPUs. The last cycle saw
    none held, so without counting its own admissions submitd would put every job of a
    burst in the lane; it puts two, then the next cycle's count replaces its own."""
    store, refresher, clock = refresher_with(_lane_snapshot("llm-eval", 0, 0))
    refresher.refresh_once()
    server = PolicyServer(CFG, refresher, clock=lambda: clock.now)
    laned = []
    for k in range(4):
        clock.now = T0 + timedelta(seconds=1 + k)
        laned.append("fast lane" in server.handle_line(_debug_job(f"d{k}"))["message"])
    assert laned == [True, True, False, False]
    assert [(e.account, e.gpus) for e in refresher.current.lane_admitted] == [
        ("llm-eval", 1), ("llm-eval", 1)]

    # The next cycle (1 min later) counts the two lane jobs itself: the entries go.
    store.record_budget_snapshot(_lane_snapshot("llm-eval", 2, 1))
    refresher.refresh_once()
    assert refresher.current.lane_admitted == ()
    clock.now = T0 + timedelta(minutes=1, seconds=5)
    assert "fast lane" not in server.handle_line(_debug_job("d4"))["message"]
    # One ended by the cycle after: room for one again.
    store.record_budget_snapshot(_lane_snapshot("llm-eval", 1, 2))
    refresher.refresh_once()
    clock.now = T0 + timedelta(minutes=2, seconds=5)
    assert "fast lane" in server.handle_line(_debug_job("d5"))["message"]
    assert "fast lane" not in server.handle_line(_debug_job("d6"))["message"]


def test_a_lane_admission_after_the_cycle_read_slurm_survives_its_snapshot() -> None:
    """A refresh keeps the admissions its snapshots cannot have counted (made after the
    cycle's time), and drops those made before it."""
    from slurm_ml.policy.admission.state import (
        LaneAdmission,
        carry_lane_admissions,
        lane_held,
        with_lane_admission,
    )

    old = build_state(CFG, [_lane_snapshot("llm-eval", 0, 0)], [], T0)
    for minutes in (0.5, 1.5):
        old = with_lane_admission(old, LaneAdmission(T0 + timedelta(minutes=minutes),
                                                     "llm-eval", 1))
    assert lane_held(old) == {"llm-eval": 2}
    new = carry_lane_admissions(old, build_state(CFG, [_lane_snapshot("llm-eval", 1, 1)],
                                                 [], T0 + timedelta(minutes=1)))
    assert [e.at for e in new.lane_admitted] == [T0 + timedelta(minutes=1.5)]
    assert lane_held(new) == {"llm-eval": 2}  # 1 counted by the cycle, 1 since
    # an account no cycle has recorded a lane for gets no lane from admission, and an
    # entry for it does not count anywhere
    stray = with_lane_admission(new, LaneAdmission(T0 + timedelta(minutes=2), "nobody", 4))
    assert lane_held(stray) == {"llm-eval": 2}


def test_a_refresh_already_reading_does_not_serve_a_request_made_meanwhile() -> None:
    """CI: a config reload's refresh was reading the store when a test wrote a snapshot
    and asked for a refresh; the generation went up with the old state and the test's
    job was routed by it. A request is served only by a refresh that began after it."""
    store, refresher, _clock = refresher_with(snapshot("llm-eval", 0.25, 1.0))
    requests: list[int] = []
    real = store.latest_budget_snapshots

    def reading() -> list[BudgetSnapshot]:  # the request arrives while this refresh reads
        if not requests:
            requests.append(refresher.request_refresh())
        return real()

    store.latest_budget_snapshots = reading  # type: ignore[method-assign]
    assert refresher.refresh_once()
    assert refresher.generation == 1 and refresher.served < requests[0]
    assert refresher.refresh_once()
    assert refresher.served >= requests[0]
    server = PolicyServer(CFG, refresher)
    reply = server.handle_line('{"op": "refresh"}')
    assert reply["request"] == requests[0] + 1
    assert server.handle_line('{"op": "stats"}')["stats"]["refresh_served"] == requests[0]


@pytest.mark.parametrize(("lane_requeues", "min_gap_s"), [(True, 10), (False, 10), (True, 0)])
def test_a_lane_admission_wakes_the_daemon_unless_wakes_are_off(
        tmp_path: Path, lane_requeues: bool, min_gap_s: int) -> None:
    """submitd sends one datagram to ``daemon.wake_socket`` per job it lanes, so that the
    daemon's cycles come when the job may get room: at the end of the grace of the free
    work Slurm preempts for it, whether or not the lane requeues too; with
    ``wake_min_gap_s`` 0 (wakes off) nothing is sent."""
    import tempfile

    from slurm_ml.wake import Wake, WakeListener

    data = copy.deepcopy(yaml.safe_load(EXAMPLE_TEXT))
    data["policy"]["fast_lane"]["preempt_cap_fraction"] = 0.25 if lane_requeues else 0.0
    data["policy"]["fast_lane"]["wake_min_gap_s"] = min_gap_s
    sends = min_gap_s > 0
    with tempfile.TemporaryDirectory(dir="/tmp") as short:  # AF_UNIX's 108-byte paths
        path = Path(short) / "wake.sock"
        data["daemon"]["wake_socket"] = str(path)
        cfg = parse_config(data)
        got: list[Wake] = []
        arrived = threading.Event()
        listener = WakeListener(path, lambda w: (got.append(w), arrived.set()))
        try:
            store = store_with([_lane_snapshot("llm-eval", 0, 0)], None)
            clock = Clock()
            refresher = StateRefresher(store, cfg, clock=clock)
            refresher.refresh_once()
            server = PolicyServer(cfg, refresher, clock=lambda: clock.now)
            clock.now = T0 + timedelta(seconds=5)
            assert "fast lane" in server.handle_line(_debug_job("dbg"))["message"]
            assert arrived.wait(5 if sends else 0.5) is sends
        finally:
            listener.close()
    if sends:
        assert got == [Wake((T0 + timedelta(seconds=5)).timestamp(), "dbg", "llm-eval")]
        assert server.stats()["counts"]["wakes_sent"] == 1
    else:
        assert got == [] and "wakes_sent" not in server.stats()["counts"]
