"""The one run(): timeouts kill the whole process group; failures are typed."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from slurm_ml import proc
from slurm_ml.slurm.errors import SlurmCommandError, SlurmNotFound, SlurmTimeout
from slurm_ml.slurm.runner import SlurmRunner


def test_ok_returns_output() -> None:
    res = proc.run(["sh", "-c", "echo out; echo err >&2"])
    assert (res.returncode, res.stdout, res.stderr) == (0, "out\n", "err\n")


def test_not_found() -> None:
    with pytest.raises(proc.CommandNotFound, match="no-such-cmd"):
        proc.run(["no-such-cmd-xyz"])


def test_failure_carries_stderr() -> None:
    with pytest.raises(proc.CommandFailed) as info:
        proc.run(["sh", "-c", "echo boom >&2; exit 3"])
    assert info.value.returncode == 3 and "boom" in info.value.stderr
    assert proc.run(["false"], check=False).returncode == 1


def test_timeout_kills_the_process_group(tmp_path: object) -> None:
    marker = os.path.join(str(tmp_path), "child.pid")
    t0 = time.monotonic()
    with pytest.raises(proc.CommandTimeout, match=r"timed out after 0\.5s"):
        # the grandchild would outlive a plain kill of the shell
        proc.run(["sh", "-c", f"sleep 30 & echo $! > {marker}; wait"], timeout_s=0.5)
    assert time.monotonic() - t0 < 5
    pid = int(Path(marker).read_text())
    time.sleep(0.2)
    try:  # gone, or a zombie waiting for init to reap it
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        state = "gone"
    assert state in {"gone", "Z"}


def test_input_and_env() -> None:
    res = proc.run(["sh", "-c", "cat; echo $FOO"], input_text="in\n", env={"FOO": "bar"})
    assert res.stdout == "in\nbar\n"


def test_slurm_runner_maps_errors() -> None:
    run = SlurmRunner(timeout_s=0.3)
    with pytest.raises(SlurmNotFound):
        run(["no-such-slurm-cmd"])
    with pytest.raises(SlurmTimeout):
        run(["sleep", "5"])
    with pytest.raises(SlurmCommandError) as info:
        run(["sh", "-c", "echo 'Invalid job id specified' >&2; exit 1"])
    assert info.value.stderr == "Invalid job id specified" and info.value.returncode == 1


def test_spawn_daemon_detaches_logs_and_warns_nothing(tmp_path: Path) -> None:
    import warnings

    log = tmp_path / "d.log"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a dropped Popen of a live child would warn here
        pid = proc.spawn_daemon(["sh", "-c", "echo out; echo err >&2; echo $X"],
                                log_path=str(log), env={"X": "from-env"})
        assert os.getsid(pid) == pid  # its own session
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert log.read_text().split() == ["out", "err", "from-env"]
    with pytest.raises(proc.CommandNotFound):
        proc.spawn_daemon(["no-such-command-slurm-ml"], log_path=str(log))
