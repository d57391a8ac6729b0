"""hooks.wiring: settings from the environment, the probe and store it builds, and the hook
commands over injected boundaries (FakeSlurm, FakeStore, replayed real captures)."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hooks_helpers import CFG, NOW, env, fake_slurm, later

from slurm_ml.health.probe_devfiles import DeviceFileProcesses
from slurm_ml.health.probe_kernel_log import KernelLogXids
from slurm_ml.health.probe_nvml import NvmlProbe
from slurm_ml.health.replay.errors import CaptureError
from slurm_ml.hooks import wiring
from slurm_ml.hooks.procs_fake import FakeProcessTable
from slurm_ml.hooks.wiring import Boundaries, HookSettings
from slurm_ml.ops import quarantine
from slurm_ml.store import AuditEntry, FakeStore, HealthEvent, OfflineStore, SpoolingStore
from slurm_ml.store.errors import StoreUnavailable
from slurm_ml.store.protocol import Store, WriteOutcome
from slurm_ml.store.records import derive_key

GPU_DATA = Path(__file__).resolve().parents[2] / "data" / "gpu"
A100 = ("nvlink/gpud_a100x8_nvlink_status.txt", "topo/mleng_a100x8_nv12_topo.txt")
NVLINK_DOWN = "nvlink/azhc_a100_gpu6_nvlink_status_all_inactive.txt"
DEFAULT = Path("/repo/conf/slurm-ml.yaml")


def replay_root(tmp: Path, **nodes: tuple[str, ...]) -> Path:
    root = tmp / "health"
    for node, rels in nodes.items():
        (root / node).mkdir(parents=True)
        for rel in rels:
            shutil.copy(GPU_DATA / rel, root / node / Path(rel).name)
    return root


def test_settings_options_win_over_the_environment_then_defaults() -> None:
    e = {"SLURM_ML_CONFIG": "/etc/x.yaml", "SLURM_ML_DSN": "postgresql://env",
         "SLURM_ML_REPLAY_DIR": "/r", "SLURM_ML_SHM_DIR": "/s/%n", "SLURM_ML_SPOOL_DIR": " "}
    s = HookSettings.from_env(e, default_config=DEFAULT, config="/opt/c.yaml", dsn="postgresql://opt")
    assert (s.config_path, s.dsn) == (Path("/opt/c.yaml"), "postgresql://opt")
    s = HookSettings.from_env(e, default_config=DEFAULT)
    assert (s.config_path, s.dsn, s.replay_dir, s.shm_dir) == (
        Path("/etc/x.yaml"), "postgresql://env", Path("/r"), "/s/%n")
    assert s.spool_dir is None  # blank means unset: store.spool_dir
    s = HookSettings.from_env({}, default_config=DEFAULT)
    assert (s.config_path, s.dsn, s.replay_dir, s.fake_gpu_dir) == (DEFAULT, None, None, None)
    assert (s.state_dir, s.shm_dir) == (Path("/run/slurm-ml"), "/dev/shm")


def test_replay_dir_per_node_when_it_exists(tmp_path: Path) -> None:
    root = replay_root(tmp_path, gpu03=A100)
    assert wiring.replay_dir_for(root, "gpu03") == root / "gpu03"
    assert wiring.replay_dir_for(root, "gpu04") == root
    assert wiring.replay_dir_for(root, "../gpu03") == root
    assert wiring.replay_dir_for(root, "") == root


def test_replay_probe_reads_the_captures_afresh_at_every_snapshot(tmp_path: Path) -> None:
    root = replay_root(tmp_path, gpu03=A100)
    probe = wiring.make_probe(HookSettings(DEFAULT, replay_dir=root), "gpu03", 4.0)
    before = probe.snapshot("gpu03")
    assert len(before.gpus) == 8 and all(len(g.nvlinks or ()) == 12 for g in before.gpus)

    (root / "gpu03" / "gpud_a100x8_nvlink_status.txt").unlink()
    shutil.copy(GPU_DATA / NVLINK_DOWN, root / "gpu03")
    after = probe.snapshot("gpu03")
    assert [g.index for g in after.gpus if g.nvlinks is not None] == [6]

    for p in (root / "gpu03").iterdir():
        p.unlink()
    with pytest.raises(CaptureError):  # inside the hook's deadline: a probe.failed flag
        probe.snapshot("gpu03")


def test_probe_kinds(tmp_path: Path) -> None:
    live = wiring.make_probe(HookSettings(DEFAULT), "gpu03", 3.0)
    assert isinstance(live, KernelLogXids)  # Xids come from dmesg, the rest from NVML
    nvml = live.inner
    assert isinstance(nvml, NvmlProbe) and nvml.timeout_s == 3.0  # NVML not called yet
    dev = wiring.make_probe(HookSettings(DEFAULT, replay_dir=tmp_path, fake_gpu_dir=tmp_path),
                            "gpu03", 3.0)
    assert isinstance(dev, DeviceFileProcesses)


def test_store_spools_when_no_database_is_configured(tmp_path: Path) -> None:
    calls: list[tuple[str, float]] = []

    def open_db(dsn: str, timeout: float) -> Store:
        calls.append((dsn, timeout))
        return FakeStore()

    store = wiring.make_store(HookSettings(DEFAULT, spool_dir=tmp_path / "spool"), CFG, open_db)
    assert isinstance(store.inner, OfflineStore) and calls == []
    event = HealthEvent(idempotency_key=derive_key("t", 1), node="gpu03", check_id="x",
                        severity="flag", message="m", observed_at=NOW)
    assert store.record_health_event(event) is WriteOutcome.SPOOLED
    assert store.spool.pending_count() == 1
    with pytest.raises(StoreUnavailable):
        store.audit_entries()

    store = wiring.make_store(HookSettings(DEFAULT, dsn="postgresql://db", spool_dir=tmp_path),
                              CFG, open_db)
    assert isinstance(store.inner, FakeStore)
    assert calls == [("postgresql://db", 2.0)]  # store.connect_timeout_s 5, capped

    def bad(dsn: str, timeout: float) -> Store:
        raise ValueError("invalid DSN")

    store = wiring.make_store(HookSettings(DEFAULT, dsn="nonsense", spool_dir=tmp_path), CFG, bad)
    assert isinstance(store.inner, OfflineStore) and "invalid DSN" in store.inner.why


def boundaries(tmp: Path, root: Path, store: Store, **drains: str) -> Boundaries:
    settings = HookSettings(DEFAULT, replay_dir=root, state_dir=tmp / "state")
    clock = iter([later(m) for m in range(100)])
    return Boundaries(cfg=CFG, slurm=fake_slurm(**drains), store=store,
                      probe=lambda node, w: wiring.make_probe(settings, node, w),
                      procs=FakeProcessTable(), baseline_dir=settings.state_dir,
                      shm_dir=lambda node: tmp / "shm" / node, clock=lambda: next(clock))


def test_prolog_on_a_replayed_nvlink_fault_drains_and_asks_for_a_requeue(tmp_path: Path) -> None:
    root = replay_root(tmp_path, gpu03=(NVLINK_DOWN, A100[1]), gpu04=A100)
    store = FakeStore()
    b = boundaries(tmp_path, root, store)

    healthy = wiring.prolog(env("gpu04", 1, gpus="0,1"), b)
    faulty = wiring.prolog(env("gpu03", 2, gpus="0-7"), b)

    assert (healthy.exit_code, healthy.action) == (0, "recorded")  # probe.missing flags only
    assert (faulty.exit_code, faulty.action) == (1, "drained")
    assert b.slurm.nodes["gpu03"].reason == "slurm-ml: nvlink.active_links gpu6 (0/12 active)"  # type: ignore[attr-defined]
    assert (tmp_path / "state" / "baseline-1.json").exists()
    doc = wiring.outcome_json(faulty)
    assert json.loads(json.dumps(doc)) == doc
    assert doc["drain"]["outcome"] == "drained"
    assert doc["findings"][0]["check_id"] == "nvlink.active_links"


def test_epilog_uses_the_nodes_shm_dir_and_always_exits_0(tmp_path: Path) -> None:
    root = replay_root(tmp_path, gpu04=A100)
    (tmp_path / "shm" / "gpu04").mkdir(parents=True)
    out = wiring.epilog(env("gpu04", 3, gpus="0"), boundaries(tmp_path, root, FakeStore()))
    assert out.exit_code == 0
    assert out.shm is not None and out.shm.ran  # cleaned tmp/shm/gpu04, not /dev/shm


def test_periodic_drains_the_spool_before_it_reads_the_history(tmp_path: Path) -> None:
    root = replay_root(tmp_path, gpu03=A100)
    db = FakeStore()
    store = SpoolingStore(db, tmp_path / "spool")
    db.set_available(False)
    drain = AuditEntry(idempotency_key=derive_key("t", "drain"), actor="slurm-ml/prolog",
                       action="drain", target="gpu03", at=NOW,
                       details={"node_class": "a100-40g", "reason": "slurm-ml: x"})
    assert store.audit(drain) is WriteOutcome.SPOOLED
    db.set_available(True)
    b = boundaries(tmp_path, root, store, gpu03="slurm-ml: x")

    runs = [wiring.periodic("gpu03", b) for _ in range(CFG.policy.quarantine.resume_after_passes)]

    assert not store.has_pending() and drain in db.rows(AuditEntry)
    assert [r.action for r in runs] == ["held", "held", "resumed"]


def test_operator_commands_and_names() -> None:
    store = FakeStore()
    b = Boundaries(cfg=CFG, slurm=fake_slurm(gpu03="slurm-ml: x", gpu05="admin: y"),
                   store=store, probe=lambda n, w: wiring.make_probe(HookSettings(DEFAULT), n, w),
                   procs=FakeProcessTable(), baseline_dir=None, shm_dir=Path,
                   clock=lambda: datetime(2026, 1, 1, tzinfo=UTC))
    assert [d.node for d in quarantine.quarantine_list(b).drains] == ["gpu03"]
    assert quarantine.quarantine_resume("gpu03", b, actor="operator/root", force=False).node == "gpu03"
    assert quarantine.quarantine_reset("a100-40g", b, actor="operator/root").cleared == 0
    assert [(a.actor, a.action) for a in store.rows(AuditEntry)] == [
        ("operator/root", "resume"), ("operator/root", "breaker.reset")]
    assert wiring.default_node({"SLURMD_NODENAME": "gpu04"}, "host.example") == "gpu04"
    assert wiring.default_node({}, "gpu07.cluster.example") == "gpu07"
    assert wiring.operator({"SUDO_USER": "ann"}, "root") == "operator/ann"
    assert wiring.operator({}, "root") == "operator/root"
