"""Admission end to end: plain sbatch lines, run as the researcher users, through the real
slurmctld → job_submit.lua → submitd path, checked with ``scontrol show job`` and sacct.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from slurm_jobs import refresh_submitd, show, wait_state

from slurm_ml import proc
from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config
from slurm_ml.devcluster.cluster import DevCluster
from slurm_ml.devcluster.layout import Layout
from slurm_ml.policy.admission import recorded_min_runtime_min
from slurm_ml.store.postgres import PostgresStore
from slurm_ml.store.records import BudgetSnapshot, JobGpuStats, derive_key
from slurm_ml.submitd.client import ask

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
CONFIG = DEFAULT_CONFIG


@pytest.fixture(scope="module")
def cluster(slurm_conf: str) -> DevCluster:
    root = Path(os.environ["SLURM_ML_DEVCLUSTER"])
    return DevCluster(load_config(CONFIG), Layout(root), say=lambda _m: None, config_path=CONFIG)


@pytest.fixture
def submitd(cluster: DevCluster) -> Iterator[DevCluster]:
    """submitd running before and after the test (tests may stop it)."""
    cluster.start_submitd()
    yield cluster
    if cluster.submitd_pid() is None:
        cluster.start_submitd()


@pytest.fixture
def jobs(slurm_conf: str) -> Iterator[list[int]]:
    """Job ids a test submitted; cancelled afterwards."""
    ids: list[int] = []
    yield ids
    if ids:
        proc.run(["scancel", *map(str, ids)], check=False, env={"SLURM_CONF": slurm_conf})


def sbatch(user: str, *args: str, jobs: list[int] | None = None) -> proc.Result:
    workdir = os.path.join(os.environ["SLURM_ML_DEVCLUSTER"], "jobs")
    res = proc.run(["runuser", "-u", user, "--", "sbatch", "--parsable", f"--chdir={workdir}",
                    "--output=/dev/null", *args], check=False, timeout_s=30)
    if res.returncode == 0 and jobs is not None:
        jobs.append(int(res.stdout.strip().split(";")[0]))
    return res




def refresh(cluster: DevCluster) -> None:
    refresh_submitd(cluster.layout.submitd_socket)


def test_typed_request_with_30gb_profile_widens_to_both_a100_types(
        submitd: DevCluster, admin_dsn: str, jobs: list[int]) -> None:
    name = f"train-{uuid.uuid4().hex[:8]}"
    end = datetime.now(UTC)
    with PostgresStore(admin_dsn) as store:
        for i, peak_gb in enumerate((28, 29, 30, 30)):
            store.record_job_gpu_stats(JobGpuStats(
                job_id=900000 + i, job_name=name, user="alice", account="llm-pretrain",
                node="gpu01", gpu_index=0, gpu_type="a100_80g", peak_mem_mb=peak_gb * 1024,
                mean_util_pct=80.0, started_at=end - timedelta(hours=1), ended_at=end,
                idempotency_key=derive_key("test-admission", name, i)))
    refresh(submitd)

    res = sbatch("alice", "--hold", f"--job-name={name}", "--gres=gpu:a100_80g:4",
                 "--wrap", "true", jobs=jobs)

    assert res.returncode == 0, res.stderr
    job = show(jobs[0])
    assert job["Features"] == "(a100_80g|a100_40g)"
    assert job["TresPerNode"] in ("gres:gpu:4", "gres/gpu:4")
    assert "widened from a100_80g to a100_80g|a100_40g" in res.stderr
    assert '"need_src":"profile"' in job["AdminComment"]


def test_sixteen_gpus_become_two_whole_nodes_under_one_leaf(submitd: DevCluster,
                                                            jobs: list[int]) -> None:
    res = sbatch("bob", "--gpus=16", "-t", "2", "--wrap", "sleep 3", jobs=jobs)

    assert res.returncode == 0, res.stderr
    job = show(jobs[0])
    assert job["NumNodes"].split("-")[0] == "2"
    assert job["TresPerNode"].endswith("gpu:8")
    assert "TresPerJob" not in job
    assert job["OverSubscribe"] == "NO"
    assert job["Switches"] == "1@00:10:00"
    ran = wait_state(jobs[0], {"RUNNING", "COMPLETED"})
    nodes = ran["NodeList"]
    cfg = load_config(CONFIG)
    leaves = {cfg.node_class_of(n).leaf_switch  # type: ignore[union-attr]
              for n in proc.run(["scontrol", "show", "hostnames", nodes]).stdout.split()}
    assert len(leaves) == 1, f"{nodes} spans leaves {leaves}"


def test_six_gpus_on_two_nodes_is_rejected_with_the_reason(submitd: DevCluster,
                                                           jobs: list[int]) -> None:
    res = sbatch("carol", "--hold", "--gres=gpu:6", "-N2", "--wrap", "true", jobs=jobs)

    assert res.returncode != 0
    assert "would strand GPUs" in res.stderr
    # The advice keeps the script's own GPUs per node (issue 14: never rewrite what it
    # pinned) and changes only its node count ...
    assert "Nearest valid requests: --nodes=1 (6 GPUs)" in res.stderr
    assert "allow_fragment" in res.stderr
    # ... and, followed, gives a job admission accepts and Slurm places.
    ok = sbatch("carol", "--hold", "--gres=gpu:6", "-N1", "--wrap", "true", jobs=jobs)
    assert ok.returncode == 0, ok.stderr


def test_sixty_four_gpus_are_rejected_as_infeasible(submitd: DevCluster,
                                                    jobs: list[int]) -> None:
    res = sbatch("dave", "--hold", "--gpus=64", "--wrap", "true", jobs=jobs)

    assert res.returncode != 0
    # Slurm could give an untyped request GPUs of every type at once (40 here); slurm-ml
    # keeps a multi-node job on whole nodes of one type (16), and says both.
    assert "the most any job can get here is 40 (16 on whole nodes of one GPU type)" \
        in res.stderr
    assert "--gpus=16 (2 nodes x 8 GPUs)" in res.stderr
    assert "Requested node configuration is not available" in res.stderr


def test_time_min_zero_runs_in_qos_free(submitd: DevCluster, jobs: list[int]) -> None:
    res = sbatch("alice", "--time-min=0", "-t", "2", "--gres=gpu:1", "--wrap", "true",
                 jobs=jobs)

    assert res.returncode == 0, res.stderr  # without the shim 22.05 rejects --time-min=0
    assert "QOS free" in res.stderr
    job = show(jobs[0])
    assert job["QOS"] == "free"
    assert job["TimeMin"] == "N/A"
    assert recorded_min_runtime_min(job["AdminComment"]) == 0
    wait_state(jobs[0], {"COMPLETED"})
    deadline = time.monotonic() + 30
    while True:
        out = proc.run(["sacct", "-X", "-n", "-P", "-j", str(jobs[0]), "-o", "QOS,State"]).stdout
        if out.strip() and not out.startswith("Unknown"):  # the QOS name lags the record
            break
        assert time.monotonic() < deadline, f"job never reached slurmdbd: {out!r}"
        time.sleep(1)
    assert out.strip().splitlines()[0].split("|") == ["free", "COMPLETED"]


#: (sbatch time options, the protected minutes recorded, TimeLimit Slurm keeps)
PROTECTED = [
    (("--time-min=30", "--time=120"), 30, "02:00:00"),
    (("--time=15", "--time-min=1"), 1, "00:15:00"),  # the job backfill cut to 1 min, killed
    (("--time=120",), 60, "02:00:00"),  # policy.admission.default_min_runtime_min
    (("--time-min=600", "--time=720"), 480, "12:00:00"),  # contracts.min_runtime_cap_min
]


@pytest.mark.parametrize(("args", "minutes", "limit"), PROTECTED,
                         ids=["time-min-30", "incident-15-1", "default", "capped"])
def test_time_min_becomes_the_recorded_protection_and_slurms_is_cleared(
        submitd: DevCluster, jobs: list[int], args: tuple[str, ...], minutes: int,
        limit: str) -> None:
    """Slurm's --time-min lets backfill lower the --time limit to it: it must stay unset
    (22.05 prints TimeMin=N/A), the protection lives in the AdminComment record."""
    res = sbatch("alice", "--hold", "-A", "llm-pretrain", "--gres=gpu:1", *args,
                 "--wrap", "true", jobs=jobs)

    assert res.returncode == 0, res.stderr
    assert f"protected from requeue for its first {minutes} min" in res.stderr
    moved = "Slurm's --time-min was moved into this protection" in res.stderr
    assert moved == any(a.startswith("--time-min") for a in args), res.stderr
    job = show(jobs[0])
    assert job["QOS"] == "alloc"
    assert job["TimeMin"] == "N/A"
    assert job["TimeLimit"] == limit
    assert f'"min_runtime":{minutes}' in job["AdminComment"]
    assert recorded_min_runtime_min(job["AdminComment"]) == minutes


def test_update_cannot_set_time_min_on_a_routed_job(submitd: DevCluster,
                                                    jobs: list[int]) -> None:
    sbatch("bob", "--hold", "-A", "llm-pretrain", "--gres=gpu:2", "--time=120", "--wrap",
           "true", jobs=jobs)

    res = proc.run(["runuser", "-u", "bob", "--", "scontrol", "update", f"job={jobs[0]}",
                    "Gres=gpu:4", "TimeMin=10"], check=False)

    assert res.returncode == 0, res.stderr
    job = show(jobs[0])
    assert job["TresPerNode"].endswith("gpu:4")  # the rest of the update applies
    assert job["TimeMin"] == "N/A"
    assert recorded_min_runtime_min(job["AdminComment"]) == 60  # the submission's record


def test_time_min_only_update_is_cleared(submitd: DevCluster, jobs: list[int]) -> None:
    sbatch("bob", "--hold", "-A", "llm-pretrain", "--gres=gpu:2", "--time=120", "--wrap",
           "true", jobs=jobs)

    res = proc.run(["runuser", "-u", "bob", "--", "scontrol", "update", f"job={jobs[0]}",
                    "TimeMin=10"], check=False)

    assert res.returncode == 0, res.stderr
    assert show(jobs[0])["TimeMin"] == "N/A"


def test_cpu_only_job_is_untouched(submitd: DevCluster, jobs: list[int]) -> None:
    res = sbatch("bob", "--hold", "--wrap", "true", jobs=jobs)

    assert res.returncode == 0
    assert res.stderr == ""
    assert show(jobs[0]).get("AdminComment", "") == ""


def test_update_that_strands_gpus_is_refused(submitd: DevCluster, jobs: list[int]) -> None:
    sbatch("carol", "--hold", "--gres=gpu:2", "--wrap", "true", jobs=jobs)

    bad = proc.run(["runuser", "-u", "carol", "--", "scontrol", "update", f"job={jobs[0]}",
                    "NumNodes=2", "Gres=gpu:6"], check=False)
    good = proc.run(["runuser", "-u", "carol", "--", "scontrol", "update", f"job={jobs[0]}",
                     "Gres=gpu:4"], check=False)

    assert bad.returncode != 0
    assert good.returncode == 0, good.stderr
    assert show(jobs[0])["TresPerNode"].endswith("gpu:4")


def test_submitd_stopped_jobs_pass_unchanged_fast_and_rewriting_resumes(
        submitd: DevCluster, jobs: list[int]) -> None:
    assert submitd.stop_submitd()
    t0 = time.monotonic()
    res = sbatch("bob", "--hold", "--gpus=16", "--wrap", "true", jobs=jobs)
    elapsed = time.monotonic() - t0

    assert res.returncode == 0, res.stderr
    assert elapsed < 1.0
    assert show(jobs[0])["TresPerJob"].endswith("gpu:16")  # unchanged

    submitd.start_submitd()  # slurmctld is not restarted
    res = sbatch("bob", "--hold", "--gpus=16", "--wrap", "true", jobs=jobs)
    assert res.returncode == 0
    assert show(jobs[1])["TresPerNode"].endswith("gpu:8")


def _hung_server(path: Path, stop: threading.Event) -> None:
    """Accepts connections and never answers: a wedged submitd."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    os.chmod(path, 0o666)
    srv.listen(16)
    srv.settimeout(0.2)
    held = []
    while not stop.is_set():
        try:
            held.append(srv.accept()[0])
        except TimeoutError:
            continue
    for conn in held:
        conn.close()
    srv.close()
    path.unlink()


def test_hung_submitd_costs_at_most_the_timeout_then_the_breaker_skips_it(
        submitd: DevCluster, jobs: list[int]) -> None:
    log_path = submitd.layout.log / "slurmctld.log"
    log_start = log_path.stat().st_size
    submitd.stop_submitd()
    stop = threading.Event()
    hung = threading.Thread(target=_hung_server, args=(submitd.layout.submitd_socket, stop))
    hung.start()
    try:
        time.sleep(0.3)
        times = []
        for _ in range(4):
            t0 = time.monotonic()
            res = sbatch("dave", "--hold", "--gpus=16", "--wrap", "true", jobs=jobs)
            times.append(time.monotonic() - t0)
            assert res.returncode == 0, res.stderr
    finally:
        stop.set()
        hung.join()
    assert all(t < 1.0 for t in times), times
    assert all(show(j)["TresPerJob"].endswith("gpu:16") for j in jobs)
    with log_path.open() as f:
        f.seek(log_start)
        log = f.read()
    assert "no answer within 200 ms" in log
    assert "submitd skipped for" in log  # the 4th submission did not even try

    # submitd comes back; once the 30 s cooldown is over the shim asks it again,
    # without slurmctld being restarted or reconfigured.
    submitd.start_submitd()
    deadline = time.monotonic() + 45
    while True:
        res = sbatch("dave", "--hold", "--gpus=16", "--wrap", "true", jobs=jobs)
        if show(jobs[-1]).get("TresPerNode", "").endswith("gpu:8"):
            break
        assert time.monotonic() < deadline, "rewriting did not resume after the cooldown"
        time.sleep(3)


def test_sighup_reloads_config_without_dropping_requests(submitd: DevCluster) -> None:
    sock = submitd.layout.submitd_socket
    pid = submitd.submitd_pid()
    assert pid is not None
    before = ask(sock, {"v": 1, "op": "stats"})["stats"]["counts"].get("reloads", 0)
    os.kill(pid, 1)  # SIGHUP
    deadline = time.monotonic() + 10
    while ask(sock, {"v": 1, "op": "stats"})["stats"]["counts"].get("reloads", 0) <= before:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert submitd.submitd_pid() == pid


def test_het_job_components_are_shaped_each_on_their_own(submitd: DevCluster,
                                                         jobs: list[int]) -> None:
    res = sbatch("bob", "--hold", "--gres=gpu:2", ":", "--gpus=16", "--wrap", "true",
                 jobs=jobs)

    assert res.returncode == 0, res.stderr
    small = show(jobs[0])  # the het leader is component 0
    big = show(jobs[0] + 1)
    assert small["TresPerNode"].endswith("gpu:2") and small["NumNodes"].startswith("1")
    assert big["HetJobOffset"] == "1"
    assert big["TresPerNode"].endswith("gpu:8") and big["NumNodes"].startswith("2")
    assert big["OverSubscribe"] == "NO"


def test_array_elements_share_the_shaped_request(submitd: DevCluster,
                                                 jobs: list[int]) -> None:
    res = sbatch("bob", "--hold", "--array=1-3", "--gpus=16", "--wrap", "true", jobs=jobs)

    assert res.returncode == 0, res.stderr
    job = show(jobs[0])
    assert job["ArrayTaskId"] == "1-3"
    assert job["TresPerNode"].endswith("gpu:8")
    assert job["Switches"] == "1@00:10:00"


def _snapshot(store: PostgresStore, *, usage: float, site_factor: int | None,
              at: datetime, account: str = "llm-eval", parent: str = "nlp") -> None:
    store.record_budget_snapshot(BudgetSnapshot(
        idempotency_key=derive_key("test-admission-budget", uuid.uuid4().hex),
        taken_at=at, account=account, parent=parent, budget_share=0.2,
        usage_gpu_hours=usage, owed_gpu_hours=0.0, site_factor=site_factor))


def test_exhausted_budget_routes_to_free_with_the_cached_site_factor(
        submitd: DevCluster, admin_dsn: str, jobs: list[int]) -> None:
    now = datetime.now(UTC)
    with PostgresStore(admin_dsn) as store:
        _snapshot(store, usage=1e9, site_factor=4321, at=now)
    try:
        refresh(submitd)
        res = sbatch("carol", "--hold", "-A", "llm-eval", "--gres=gpu:1", "--wrap", "true",
                     jobs=jobs)
        assert res.returncode == 0, res.stderr
        assert "has used its GPU-time budget" in res.stderr
        job = show(jobs[0])
        assert job["QOS"] == "free"
        assert '"site_factor":4321' in job["AdminComment"]
        # The SiteFactor itself: sprio lists a job once it is released and pending.
        proc.run(["scontrol", "update", f"job={jobs[0]}", "nodelist=gpu06"], check=False)
        proc.run(["scontrol", "update", "nodename=gpu06", "state=drain",
                  "reason=slurm-ml: test hold-back"])
        try:
            proc.run(["scontrol", "release", str(jobs[0])])
            deadline = time.monotonic() + 20
            while True:  # sprio lists the job after slurmctld's next priority pass
                out = proc.run(["sprio", "-h", "-j", str(jobs[0]), "-o", "%i %S"],
                               check=False).stdout.split()
                if (out and out[0] == str(jobs[0])) or time.monotonic() > deadline:
                    break
                time.sleep(1)
            assert out == [str(jobs[0]), "4321"]
        finally:
            proc.run(["scancel", str(jobs[0])], check=False)
            proc.run(["scontrol", "update", "nodename=gpu06", "state=resume"], check=False)
    finally:
        with PostgresStore(admin_dsn) as store:  # back to a budget in good standing
            _snapshot(store, usage=0.0, site_factor=None, at=now + timedelta(seconds=1))
        refresh(submitd)


def test_update_to_whole_nodes_is_shaped_and_allowed(submitd: DevCluster,
                                                     jobs: list[int]) -> None:
    sbatch("carol", "--hold", "--gres=gpu:2", "--wrap", "true", jobs=jobs)

    res = proc.run(["runuser", "-u", "carol", "--", "scontrol", "update", f"job={jobs[0]}",
                    "NumNodes=2", "Gres=gpu:8"], check=False)

    assert res.returncode == 0, res.stderr  # no "Attempt to change sharing" denial
    job = show(jobs[0])
    assert job["NumNodes"].startswith("2")
    assert job["TresPerNode"].endswith("gpu:8")
    assert job["Switches"] == "1@00:10:00"


def test_update_cannot_move_a_spent_accounts_job_into_alloc(
        submitd: DevCluster, admin_dsn: str, jobs: list[int]) -> None:
    """Issue 14: ``scontrol update JobId=N QOS=alloc`` by the owner of a job routed to
    free because its account's budget is spent. slurmctld calls slurm_job_modify before
    it applies the QOS, and the refusal makes scontrol fail (22.05 drops log_user() in
    slurm_job_modify, so the reason is in slurmctld.log)."""
    now = datetime.now(UTC)
    with PostgresStore(admin_dsn) as store:
        _snapshot(store, usage=1e9, site_factor=None, at=now)
    try:
        refresh(submitd)
        res = sbatch("carol", "--hold", "-A", "llm-eval", "--gres=gpu:1", "--wrap", "true",
                     jobs=jobs)
        assert res.returncode == 0, res.stderr
        assert show(jobs[0])["QOS"] == "free"

        def update(*args: str) -> proc.Result:
            return proc.run(["runuser", "-u", "carol", "--", "scontrol", "update",
                             f"JobId={jobs[0]}", *args], check=False)

        asked = update("QOS=alloc")
        assert asked.returncode != 0
        assert "accounting/QOS policy" in asked.stderr, asked.stderr
        assert show(jobs[0])["QOS"] == "free"
        log = (submitd.layout.log / "slurmctld.log").read_text(errors="replace")
        assert f"refused QOS alloc for job {jobs[0]}: account llm-eval has used" in log
        # QOS= asks slurmctld for the association's default (alloc): routed like a submission
        reset = update("QOS=")
        assert reset.returncode == 0, reset.stderr
        assert show(jobs[0])["QOS"] == "free"
        # root's updates stay untouched
        proc.run(["scontrol", "update", f"JobId={jobs[0]}", "QOS=alloc"])
        assert show(jobs[0])["QOS"] == "alloc"
    finally:
        with PostgresStore(admin_dsn) as store:  # back to a budget in good standing
            _snapshot(store, usage=0.0, site_factor=None, at=now + timedelta(seconds=1))
        refresh(submitd)


def test_update_of_account_to_a_spent_budget_is_routed_to_free(
        submitd: DevCluster, admin_dsn: str, jobs: list[int]) -> None:
    now = datetime.now(UTC)
    res = sbatch("alice", "--hold", "-A", "llm-pretrain", "--gres=gpu:1", "--wrap", "true",
                 jobs=jobs)
    assert res.returncode == 0, res.stderr
    assert show(jobs[0])["QOS"] == "alloc"
    spent = {"account": "detection", "parent": "vision"}
    with PostgresStore(admin_dsn) as store:
        _snapshot(store, usage=1e9, site_factor=None, at=now, **spent)
    try:
        refresh(submitd)
        moved = proc.run(["runuser", "-u", "alice", "--", "scontrol", "update",
                          f"JobId={jobs[0]}", "Account=detection"], check=False)
        assert moved.returncode == 0, moved.stderr
        job = show(jobs[0])
        assert (job["Account"], job["QOS"]) == ("detection", "free")
    finally:
        with PostgresStore(admin_dsn) as store:
            _snapshot(store, usage=0.0, site_factor=None, at=now + timedelta(seconds=1),
                      **spent)
        refresh(submitd)
