"""The periodic check publishes its node's textfile on every run (``hooks.textfile``),
and what becomes of it never changes the check's verdict.

Over the hook tests' boundaries: FakeSlurm, FakeStore or a spool, replayed snapshots."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from hooks_helpers import (
    CFG,
    HangingProbe,
    fake_slurm,
    later,
    nvlink_down,
    probe,
    snapshot,
    with_processes,
)
from prometheus_client.parser import text_string_to_metric_families

from slurm_ml.health.textfile import NodeHealth
from slurm_ml.hooks import wiring
from slurm_ml.hooks.periodic import PeriodicOutcome, run_periodic
from slurm_ml.hooks.procs_fake import FakeProc, FakeProcessTable
from slurm_ml.hooks.textfile import publisher, spooled
from slurm_ml.hooks.wiring import Boundaries, HookSettings
from slurm_ml.model import Job
from slurm_ml.slurm.errors import SlurmCommandError
from slurm_ml.slurm.fake import FakeSlurm
from slurm_ml.slurm.protocol import SubmitRequest
from slurm_ml.store import FakeStore, OfflineStore, SpoolingStore
from slurm_ml.store.protocol import Store

GPU_DATA = Path(__file__).resolve().parents[2] / "data" / "gpu"
OWNED = "slurm-ml: nvlink.active_links gpu3 (0/12 active)"


class Published:
    """A ``Publish`` that keeps what it was handed and says ``problem``."""

    def __init__(self, problem: str | None = None) -> None:
        self.problem = problem
        self.got: list[NodeHealth] = []

    def __call__(self, health: NodeHealth) -> str | None:
        self.got.append(health)
        return self.problem


def periodic(node: str = "gpu03", *, slurm: FakeSlurm | None = None, store: Store | None = None,
             publish: object = None, **kw: object) -> PeriodicOutcome:
    kw.setdefault("probe", probe(snapshot(node)))
    return run_periodic(node, cfg=CFG, slurm=slurm or fake_slurm(),
                        store=store or FakeStore(), now=later(0),
                        publish=publish, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("case", "action", "passed"), [
    ("healthy", "pass", True),
    ("fault", "drained", False),
    ("fault_busy", "deferred", False),
    ("owned_drain", "held", True),
    ("foreign_drain", "foreign_drain", True),
    ("probe_hangs", "recorded", False),
])
def test_every_run_publishes_once_whatever_it_did(case: str, action: str, passed: bool) -> None:
    slurm = fake_slurm(**({"gpu03": OWNED} if case == "owned_drain" else
                          {"gpu03": "admin: DIMM"} if case == "foreign_drain" else {}))
    if case == "fault_busy":
        slurm.start(slurm.submit(SubmitRequest(user="alice")), "gpu03", at=0)
    snap = nvlink_down() if case.startswith("fault") else snapshot()
    hung = HangingProbe()
    got = Published()
    try:
        out = periodic(slurm=slurm, publish=got,
                       probe=hung if case == "probe_hangs" else probe(snap),
                       probe_timeout_s=0.2)
    finally:
        hung.release.set()
    assert (out.action, out.passed) == (action, passed)
    [health] = got.got
    assert (health.node, health.action, health.passed) == ("gpu03", action, passed)
    assert health.findings == out.findings  # as the check judged them, not as recorded
    assert health.slurm_node == slurm.nodes["gpu03"]  # Slurm's view once the run is over
    assert (health.snapshot is None) == (case == "probe_hangs")
    assert health.idle_util_pct == CFG.policy.reclaim.zombie_util_pct


def test_the_drain_state_published_is_the_one_the_run_left() -> None:
    """A drain or a resume is published at once, not one HealthCheckInterval later."""
    slurm = fake_slurm()
    got = Published()
    out = periodic(slurm=slurm, publish=got, probe=probe(nvlink_down()))
    assert out.action == "drained"
    assert got.got[-1].slurm_node is not None and got.got[-1].slurm_node.reason == OWNED
    assert got.got[-1].slurm_node.drained
    for m in (5, 10, 15):
        out = run_periodic("gpu03", cfg=CFG, probe=probe(snapshot()), slurm=slurm,
                           store=FakeStore(), now=later(m), publish=got)
    # Without the drain in this store's audit log the drain is held, never resumed here;
    # what matters is that a held drain is published as drained.
    assert out.action == "held"
    assert got.got[-1].slurm_node is not None and got.got[-1].slurm_node.drained


def test_a_node_in_no_class_publishes_no_verdict_and_asks_slurm_nothing() -> None:
    got = Published()
    out = periodic("login1", slurm=FakeSlurm([]), publish=got)
    assert out.action == "skipped"
    [health] = got.got
    assert (health.action, health.passed, health.slurm_node, health.snapshot) == (
        "skipped", None, None, None)


def test_gpus_mapped_to_jobs_are_published() -> None:
    slurm = fake_slurm()
    job = slurm.submit(SubmitRequest(user="alice"))
    slurm.start(job, "gpu03", at=0)
    snap = with_processes(snapshot(), g0=[(101, 2048)], g1=[(102, 2048)])
    procs = FakeProcessTable([FakeProc(p, cgroup=f"0::/slurm/uid_1000/job_{job}/step_0")
                              for p in (101, 102)])
    got = Published()
    periodic(slurm=slurm, publish=got, probe=probe(snap), procs=procs)
    assert got.got[0].gpu_jobs == {0: job, 1: job}
    # Slurm silent about the jobs: the file cannot say which GPUs are held.
    periodic(slurm=JobsUnknown(list(slurm.nodes.values())), publish=got, probe=probe(snap),
             procs=procs)
    assert got.got[1].gpu_jobs is None


class JobsUnknown(FakeSlurm):
    def list_jobs(self, **_: object) -> list[Job]:
        raise SlurmCommandError(("squeue",), 1, "Unable to contact slurm controller")


def test_a_publishing_problem_is_one_note_and_nothing_else() -> None:
    clean = periodic(probe=probe(nvlink_down()))
    noted = periodic(probe=probe(nvlink_down()), publish=Published("disk full"))
    assert noted.textfile_error == "disk full"
    assert noted.message == f"{clean.message}; textfile not written: disk full"
    assert dataclasses.replace(noted, message=clean.message, textfile_error=None) == clean


# ---------------------------------------------------------------- the real publisher


def prom(path: Path) -> dict[str, float]:
    return {s.name + ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()) if k != "node"):
            s.value for f in text_string_to_metric_families(path.read_text())
            for s in f.samples}


def test_the_publisher_writes_the_nodes_file_with_the_spool_backlog(tmp_path: Path) -> None:
    store = SpoolingStore(OfflineStore(), tmp_path / "spool")  # no database: all spools
    out = periodic(store=store, publish=publisher(tmp_path, store))
    assert out.textfile_error is None
    backlog = store.spool.pending_count()
    assert backlog > 0
    got = prom(tmp_path / "slurm-ml-gpu03.prom")
    assert got["slurm_ml_node_spool_records"] == backlog
    assert got["slurm_ml_node_health_pass"] == 1
    assert got["slurm_ml_node_drained"] == 0


def test_no_spool_no_backlog_series(tmp_path: Path) -> None:
    assert spooled(FakeStore()) is None
    periodic(publish=publisher(tmp_path, FakeStore()))
    assert "slurm_ml_node_spool_records" not in prom(tmp_path / "slurm-ml-gpu03.prom")


def test_a_missing_directory_is_said_once_and_not_made(tmp_path: Path) -> None:
    gone = tmp_path / "node-exporter"
    out = periodic(probe=probe(nvlink_down()), publish=publisher(gone, FakeStore()))
    assert out.action == "drained"
    assert out.textfile_error == f"{gone} does not exist"
    assert out.message.count("textfile") == 1
    assert not gone.exists()


def test_a_failed_write_leaves_the_verdict_alone(tmp_path: Path) -> None:
    (tmp_path / "slurm-ml-gpu03.prom").mkdir()  # the rename cannot replace a directory
    out = periodic(probe=probe(nvlink_down()), publish=publisher(tmp_path, FakeStore()))
    assert (out.action, out.passed) == ("drained", False)
    assert out.textfile_error is not None and "slurm-ml-gpu03.prom" in out.textfile_error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["slurm-ml-gpu03.prom"]


# ------------------------------------------------------------------------ the wiring


def test_the_wiring_takes_the_directory_from_the_config(tmp_path: Path) -> None:
    settings = HookSettings(Path("/c.yaml"), spool_dir=tmp_path / "spool")
    b = wiring.connect(settings, CFG, open_db=lambda dsn, t: FakeStore())
    assert b.textfile_dir == Path(CFG.health.textfile_dir)
    off = dataclasses.replace(CFG, health=dataclasses.replace(CFG.health, textfile_dir=""))
    assert wiring.connect(settings, off, open_db=lambda dsn, t: FakeStore()).textfile_dir is None


def test_every_periodic_command_writes_the_file(tmp_path: Path) -> None:
    root = tmp_path / "health" / "gpu03"
    root.mkdir(parents=True)
    for rel in ("nvlink/gpud_a100x8_nvlink_status.txt", "topo/mleng_a100x8_nv12_topo.txt"):
        shutil.copy(GPU_DATA / rel, root)
    settings = HookSettings(Path("/c.yaml"), replay_dir=tmp_path / "health")
    textfiles = tmp_path / "textfile"
    textfiles.mkdir()
    b = Boundaries(cfg=CFG, slurm=fake_slurm(), store=FakeStore(),
                   probe=lambda node, w: wiring.make_probe(settings, node, w),
                   procs=FakeProcessTable(), baseline_dir=None, shm_dir=Path,
                   textfile_dir=textfiles)

    out = wiring.periodic("gpu03", b)

    assert out.textfile_error is None
    got = prom(textfiles / "slurm-ml-gpu03.prom")
    assert got["slurm_ml_gpu_nvlink_links_activegpu=6"] == 12
    assert got[f"slurm_ml_node_health_actionaction={out.action}"] == 1
