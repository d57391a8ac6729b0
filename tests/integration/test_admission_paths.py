"""Every path into a managed partition goes through admission, on the real dev cluster.

Slurm may start a job in any partition of its ``--partition`` list, and a job's owner may
change Partition, QOS, Account and TimeMin of a pending job. Each of these is a way into
partition ``gpu`` (which slurm-ml manages) beside ``cpu`` (the site's own, which it does
not), so each is tried here with account ``detection``'s budget spent: the job must end up
in QOS free, or the update be refused, never in QOS alloc.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from slurm_jobs import refresh_submitd, show

from slurm_ml import proc
from slurm_ml.devcluster.cluster import DevCluster
from slurm_ml.policy.admission import read_record
from slurm_ml.store.postgres import PostgresStore
from slurm_ml.store.records import BudgetSnapshot, derive_key

pytestmark = pytest.mark.integration

SPENT_ACCOUNT, PARENT = "detection", "vision"


def _snapshot(store: PostgresStore, usage: float, at: datetime) -> None:
    store.record_budget_snapshot(BudgetSnapshot(
        idempotency_key=derive_key("test-admission-paths", uuid.uuid4().hex),
        taken_at=at, account=SPENT_ACCOUNT, parent=PARENT, budget_share=0.2,
        usage_gpu_hours=usage, owed_gpu_hours=0.0, site_factor=None))


def _next_snapshot_time(store: PostgresStore) -> datetime:
    """A time after the account's newest snapshot: submitd routes by the newest, and
    other modules date the snapshot that restores a budget a second ahead."""
    newest = [s.taken_at for s in store.latest_budget_snapshots()
              if s.account == SPENT_ACCOUNT]
    now = datetime.now(UTC)
    return max([now, *(t + timedelta(milliseconds=1) for t in newest)])


@pytest.fixture
def spent(cluster: DevCluster, admin_dsn: str) -> Iterator[None]:
    """``detection`` has used its budget for this window, as submitd sees it."""
    cluster.start_submitd()
    with PostgresStore(admin_dsn) as store:
        _snapshot(store, 1e9, _next_snapshot_time(store))
    refresh_submitd(cluster.layout.submitd_socket)
    try:
        yield
    finally:
        with PostgresStore(admin_dsn) as store:  # back to a budget in good standing
            _snapshot(store, 0.0, _next_snapshot_time(store))
        refresh_submitd(cluster.layout.submitd_socket)


def submit(jobs: list[int], *args: str, user: str = "alice") -> proc.Result:
    """``sbatch --hold ARGS`` as ``user``; an accepted job's id goes into ``jobs``."""
    workdir = os.path.join(os.environ["SLURM_ML_DEVCLUSTER"], "jobs")
    res = proc.run(["runuser", "-u", user, "--", "sbatch", "--parsable", "--hold",
                    f"--chdir={workdir}", "--output=/dev/null", *args, "--wrap", "true"],
                   check=False, timeout_s=30)
    if res.returncode == 0:
        jobs.append(int(res.stdout.strip().split(";")[0]))
    return res


def update(job_id: int, *args: str, user: str = "alice") -> proc.Result:
    """``scontrol update JobId=N ARGS`` as the job's owner."""
    return proc.run(["runuser", "-u", user, "--", "scontrol", "update", f"JobId={job_id}",
                     *args], check=False, timeout_s=30)


def ctld_log(cluster: DevCluster) -> str:
    return (cluster.layout.log / "slurmctld.log").read_text(errors="replace")


@pytest.mark.parametrize("partitions", [["-p", "gpu,cpu"], ["-p", "cpu,gpu"],
                                        ["--partition=cpu,debug"], []],
                         ids=["gpu,cpu", "cpu,gpu", "cpu,debug", "default-partition"])
def test_a_spent_budget_holds_for_every_partition_list(
        spent: None, jobs: list[int], partitions: list[str]) -> None:
    res = submit(jobs, *partitions, "-A", SPENT_ACCOUNT, "--qos=alloc", "--gres=gpu:1")

    assert res.returncode == 0, res.stderr
    job = show(jobs[-1])
    assert job["QOS"] == "free", (res.stderr, job)
    assert "has used its GPU-time budget" in res.stderr
    record = read_record(job["AdminComment"])
    assert record is not None and record["qos"] == "free" and record["min_runtime"] == 0


def test_a_partition_list_is_shaped_as_one_request(cluster: DevCluster,
                                                   jobs: list[int]) -> None:
    """16 GPUs with cpu in the list are shaped into whole gpu nodes as without it."""
    cluster.start_submitd()
    res = submit(jobs, "-p", "cpu,gpu", "-A", "llm-pretrain", "--gpus=16", user="alice")

    assert res.returncode == 0, res.stderr
    job = show(jobs[-1])
    assert job["NumNodes"].startswith("2") and job["TresPerNode"].endswith("gpu:8"), job
    assert job["QOS"] == "alloc"
    assert read_record(job["AdminComment"]) is not None


def test_a_partition_list_rejection_says_where_it_was_judged(cluster: DevCluster,
                                                             jobs: list[int]) -> None:
    cluster.start_submitd()
    res = submit(jobs, "-p", "gpu,cpu", "--gpus=6", "-N", "2")

    assert res.returncode != 0
    assert "slurm-ml rejected this job for partition gpu" in res.stderr, res.stderr
    assert "not cpu" in res.stderr


#: (update, refused): each alone and together, on a job routed to free by the spent budget
UPDATES = [
    (["QOS=alloc"], True),
    (["Partition=cpu,gpu"], False),
    (["Partition=cpu,gpu", "QOS=alloc"], True),
    (["Account=detection", "QOS=alloc"], True),
    (["TimeMin=30"], False),
    (["Partition=gpu,cpu", "Account=detection", "QOS=alloc", "TimeMin=30"], True),
    (["QOS="], False),
]


@pytest.mark.parametrize(("args", "refused"), UPDATES,
                         ids=["+".join(a) for a, _ in UPDATES])
def test_an_update_cannot_move_a_spent_job_into_alloc(
        cluster: DevCluster, spent: None, jobs: list[int], args: list[str],
        refused: bool) -> None:
    assert submit(jobs, "-A", SPENT_ACCOUNT, "--gres=gpu:1").returncode == 0
    assert show(jobs[-1])["QOS"] == "free"

    res = update(jobs[-1], *args)

    job = show(jobs[-1])
    assert job["QOS"] == "free", (args, res.stderr, job)
    if refused:
        assert res.returncode != 0 and "accounting/QOS policy" in res.stderr, res.stderr
        assert f"refused QOS alloc for job {jobs[-1]}" in ctld_log(cluster)
    else:
        assert res.returncode == 0, res.stderr
        assert job["TimeMin"] == "N/A"  # the protected runtime lives in the record
    if "Partition=cpu,gpu" in args and not refused:
        assert job["Partition"] == "cpu,gpu"


def test_a_job_from_an_unmanaged_partition_enters_gpu_only_in_qos_free(
        cluster: DevCluster, jobs: list[int]) -> None:
    """A job submitted to cpu alone was never admitted and carries no record; an update
    cannot write one, so it may move into gpu in QOS free, not in alloc."""
    cluster.start_submitd()
    assert submit(jobs, "-p", "cpu", "-A", "llm-pretrain").returncode == 0
    before = show(jobs[-1])
    assert read_record(before.get("AdminComment", "")) is None

    into_alloc = update(jobs[-1], "Partition=gpu", "Gres=gpu:1", "QOS=alloc")

    assert into_alloc.returncode != 0, into_alloc.stderr
    assert f"refused moving job {jobs[-1]} into partition gpu in QOS alloc" in ctld_log(
        cluster)
    assert show(jobs[-1])["Partition"] == "cpu"
    into_free = update(jobs[-1], "Partition=gpu", "Gres=gpu:1", "QOS=free")
    assert into_free.returncode == 0, into_free.stderr
    job = show(jobs[-1])
    assert (job["Partition"], job["QOS"]) == ("gpu", "free")
    # In gpu now, still without a record: QOS alloc in a second step is refused too.
    second = update(jobs[-1], "QOS=alloc")
    assert second.returncode != 0, second.stderr
    assert f"refused QOS alloc for job {jobs[-1]}: it has no admission record" in ctld_log(
        cluster)
    assert show(jobs[-1])["QOS"] == "free"
