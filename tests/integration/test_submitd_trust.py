"""The job_submit shim applies answers from submitd only, on the real dev cluster.

The attack: while submitd is stopped, a researcher binds its socket path and answers the
shim herself, turning another user's ``--qos=free`` job into QOS alloc with a forged
AdminComment record. Two things stop it: the socket's directory is writable by root
alone, and the shim drops any answer without submitd's reply key (the job is then
accepted unchanged, as when submitd is down).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_jobs import show

from slurm_ml import proc
from slurm_ml.devcluster.cluster import DevCluster

pytestmark = pytest.mark.integration

SQUATTER = "bob"
#: The squatter's server: stdlib only, run as the researcher with the system python.
FORGER = r'''
import json, os, socket, sys
path, log = sys.argv[1], sys.argv[2]
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(path)
os.chmod(path, 0o777)
srv.listen(8)
with open(log, "a") as out:
    out.write("listening\n"); out.flush()
    while True:
        conn, _ = srv.accept()
        f = conn.makefile("rwb")
        for line in f:
            out.write(line.decode()); out.flush()
            f.write(json.dumps({"v": 1, "action": "accept", "message": "forged", "set": {
                "qos": "alloc", "comment": "forged",
                "admin_comment": 'slurm-ml {"min_runtime":480,"qos":"alloc","v":1}'}
            }).encode() + b"\n")
            f.flush()
'''


@pytest.fixture
def squatter_dir() -> Iterator[Path]:
    """A directory the squatter can read her script from and write her log to."""
    d = Path(tempfile.mkdtemp(prefix="slurm-ml-squat-"))
    d.chmod(0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _as_squatter(*argv: str) -> proc.Result:
    return proc.run(["runuser", "-u", SQUATTER, "--", *argv], check=False, timeout_s=30)


def test_a_researcher_cannot_bind_the_socket_path_while_submitd_is_stopped(
        cluster: DevCluster, squatter_dir: Path) -> None:
    script = squatter_dir / "forger.py"
    script.write_text(FORGER)
    sock = cluster.layout.submitd_socket
    assert cluster.stop_submitd()
    try:
        res = proc.run(["runuser", "-u", SQUATTER, "--", "timeout", "3", "python3",
                        str(script), str(sock), str(squatter_dir / "requests.log")],
                       check=False, timeout_s=30)
        assert res.returncode != 0
        assert "PermissionError" in res.stderr, res.stderr
        assert not sock.exists()
    finally:
        cluster.start_submitd()


def test_a_forged_answer_is_never_applied_even_where_the_directory_is_open(
        cluster: DevCluster, squatter_dir: Path) -> None:
    """The directory opened up as the dev cluster had it (mode 1777): the squatter binds
    the path, and the shim still applies nothing she answers."""
    script = squatter_dir / "forger.py"
    script.write_text(FORGER)
    requests = squatter_dir / "requests.log"
    run_dir = cluster.layout.run
    sock = cluster.layout.submitd_socket
    log = cluster.layout.log / "slurmctld.log"
    assert cluster.stop_submitd()
    run_dir.chmod(0o1777)
    forger = None
    job_id = None
    try:
        forger = proc.spawn_daemon(["runuser", "-u", SQUATTER, "--", "python3", str(script),
                                    str(sock), str(requests)],
                                   log_path=str(squatter_dir / "forger.out"))
        deadline = time.monotonic() + 15
        while not (requests.exists() and "listening" in requests.read_text()):
            assert time.monotonic() < deadline, (squatter_dir / "forger.out").read_text()
            time.sleep(0.2)
        seen = log.stat().st_size
        workdir = os.path.join(os.environ["SLURM_ML_DEVCLUSTER"], "jobs")
        res = proc.run(["runuser", "-u", "alice", "--", "sbatch", "--parsable", "--hold",
                        f"--chdir={workdir}", "--output=/dev/null", "--qos=free",
                        "--comment=mine", "--gres=gpu:1", "--wrap", "true"],
                       check=False, timeout_s=30)
        assert res.returncode == 0, res.stderr
        job_id = int(res.stdout.strip().split(";")[0])

        assert '"op":"submit"' in requests.read_text()  # she was asked...
        job = show(job_id)
        assert job["QOS"] == "free"  # ...and nothing she answered was applied
        assert job.get("Comment") == "mine"
        assert "AdminComment" not in job, job
        assert "forged" not in res.stderr
        ctld = log.read_bytes()[seen:].decode(errors="replace")
        assert "does not carry submitd's reply key" in ctld, ctld
        assert "accepted unchanged" in ctld
    finally:
        if job_id is not None:
            proc.run(["scancel", str(job_id)], check=False)
        if forger is not None:
            proc.run(["pkill", "-u", SQUATTER, "-f", str(script)], check=False)
        run_dir.chmod(0o755)
        sock.unlink(missing_ok=True)
        cluster.start_submitd()
