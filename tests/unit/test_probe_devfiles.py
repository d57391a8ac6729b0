"""DeviceFileProcesses: the holders of the dev cluster's fake GPU device files are the GPUs'
processes, per node by SLURMD_NODENAME; a capture's own process list is dropped."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from hooks_helpers import snapshot, with_processes

from slurm_ml.health.probe_devfiles import DeviceFileProcesses, device_holders
from slurm_ml.health.probe_replay import ReplayProbe


def devices(tmp: Path, n: int = 4) -> Path:
    d = tmp / "dev"
    d.mkdir()
    for i in range(n):
        (d / f"nvidia{i}").write_text("")
    (d / "nvidiactl").write_text("")  # not a GPU
    return d


def fake_proc(root: Path, pid: int, *, fds: dict[int, str], env: dict[str, str],
              comm: str = "python") -> None:
    p = root / str(pid)
    (p / "fd").mkdir(parents=True)
    for fd, target in fds.items():
        os.symlink(target, p / "fd" / str(fd))
    (p / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))
    (p / "comm").write_text(comm + "\n")


def test_holders_by_device_and_node(tmp_path: Path) -> None:
    dev = devices(tmp_path)
    proc = tmp_path / "proc"
    fake_proc(proc, 100, fds={3: str(dev / "nvidia2"), 4: "/dev/null"},
              env={"SLURMD_NODENAME": "gpu03", "SLURM_JOB_ID": "7"})
    fake_proc(proc, 101, fds={3: str(dev / "nvidia2")}, env={"SLURMD_NODENAME": "gpu04"})
    fake_proc(proc, 102, fds={3: str(dev / "nvidia0"), 5: str(dev / "nvidia1")}, env={})
    fake_proc(proc, 103, fds={3: str(dev / "nvidia0"), 5: str(dev / "nvidia1")},
              env={"SLURMD_NODENAME": "gpu03"}, comm="torchrun")
    fake_proc(proc, 104, fds={3: str(dev / "nvidiactl")}, env={"SLURMD_NODENAME": "gpu03"})
    (proc / "self").mkdir()  # not a pid

    assert device_holders(dev, "gpu03", proc_root=proc) == {
        0: {103: "torchrun"}, 1: {103: "torchrun"}, 2: {100: "python"}}
    assert device_holders(dev, "gpu04", proc_root=proc) == {2: {101: "python"}}
    assert device_holders(tmp_path / "missing", "gpu03", proc_root=proc) == {}


def test_snapshot_replaces_every_gpus_processes(tmp_path: Path) -> None:
    dev = devices(tmp_path, 8)
    proc = tmp_path / "proc"
    fake_proc(proc, 4242, fds={3: str(dev / "nvidia5")}, env={"SLURMD_NODENAME": "gpu03"})
    captured = with_processes(snapshot("gpu03"), g0=[(1002127, 9212)])  # another machine's pid

    snap = DeviceFileProcesses(ReplayProbe(captured), dev, proc_root=proc).snapshot("gpu03")

    procs = {g.index: [(p.pid, p.used_memory_mb) for p in g.processes or ()] for g in snap.gpus}
    assert procs == {i: ([(4242, None)] if i == 5 else []) for i in range(8)}
    assert snap.gpus[0].memory_used_mb == 9212  # other readings are the inner probe's
    assert replace(snap, gpus=()) == replace(captured, gpus=())


def test_a_live_process_holding_a_device_file(tmp_path: Path) -> None:
    dev = devices(tmp_path)
    child = subprocess.Popen(
        [sys.executable, "-c", f"import time; f = open({str(dev / 'nvidia3')!r}); "
                               "print('ready', flush=True); time.sleep(30)"],
        env={**os.environ, "SLURMD_NODENAME": "gpu05"}, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        held = device_holders(dev, "gpu05")
        assert held.get(3, {}).keys() == {child.pid}
        assert device_holders(dev, "gpu06") == {}
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    deadline = time.monotonic() + 5
    while device_holders(dev, "gpu05") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert device_holders(dev, "gpu05") == {}
