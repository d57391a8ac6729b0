"""Prolog cost: wall time and peak memory of one health prolog on an 8-GPU node.

The probe is a ReplayProbe over the real 8x H100 ``nvidia-smi -q`` capture and the
8x H100 ``topo -m`` matrix from data/gpu (re-read and re-parsed on every run,
as a node without Python NVML would), Slurm and PostgreSQL are the stateful fakes: this
measures slurm-ml's own work, not slurmctld's or the database's. The example config is
used with gpu01's GPU type given 18 NVLinks, so that the H100 capture is a healthy node
of its class and the run takes the common path (checks pass, events recorded, exit 0).

Two figures: ``in_process`` times ``run_prolog`` after imports (what a resident agent
would pay); ``process`` runs a fresh Python per prolog (what slurmd pays today: interpreter
start, imports, parse, checks, records) and reads its peak RSS.

A third figure, ``kernel_log``, times what a live prolog adds on a node: reading Xids
and the other GPU kernel messages out of a full 1 MiB kernel ring buffer (the lines of
every real kernel-log capture in data/gpu/xid, repeated until the buffer is full: real
lines, a made-up mix).

Usage: python benchmarks/bench_prolog.py [RUNS] [--json]
Targets (issue 4): prolog wall time p99 <= 1 s, peak RSS <= 80 MB.
"""

from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GPU = REPO / "data" / "gpu"
CAPTURES = [GPU / "smi-q" / "gpud_h100x8_535.183.01_q.txt",
            GPU / "topo" / "mleng_h100x8_nv18_topo.txt"]

BENCH_CONFIG = Path("/tmp/slurm-ml-bench-prolog.yaml")

ONE_PROLOG = f"""
import logging, sys
from datetime import UTC, datetime
logging.disable(logging.CRITICAL)
sys.path.insert(0, {str(REPO)!r})
from slurm_ml.config import load_config
from slurm_ml.health.probe_replay import ReplayProbe
from slurm_ml.hooks.prolog import run_prolog
from slurm_ml.slurm.fake import FakeSlurm
from slurm_ml.store.fake import FakeStore
cfg = load_config({str(BENCH_CONFIG)!r})
probe = ReplayProbe.from_files({[str(c) for c in CAPTURES]!r})
env = {{"SLURMD_NODENAME": "gpu01", "SLURM_JOB_ID": "4242", "SLURM_JOB_GPUS": "0,1,2,3,4,5,6,7",
        "SLURM_JOB_USER": "alice"}}
out = run_prolog(env, cfg=cfg, probe=probe, slurm=FakeSlurm(), store=FakeStore(),
                 now=datetime.now(UTC))
print(out.exit_code, out.action, len(out.findings))
"""


def in_process(runs: int) -> dict[str, object]:
    from datetime import UTC, datetime

    from slurm_ml.config import load_config
    from slurm_ml.health.probe_replay import ReplayProbe
    from slurm_ml.hooks.prolog import run_prolog
    from slurm_ml.slurm.fake import FakeSlurm
    from slurm_ml.store.fake import FakeStore

    cfg = load_config(BENCH_CONFIG)
    env = {"SLURMD_NODENAME": "gpu01", "SLURM_JOB_ID": "4242",
           "SLURM_JOB_GPUS": "0,1,2,3,4,5,6,7", "SLURM_JOB_USER": "alice"}
    times = []
    for i in range(runs):
        t0 = time.perf_counter()
        probe = ReplayProbe.from_files(CAPTURES)  # parse every time, like a fresh prolog
        run_prolog({**env, "SLURM_JOB_ID": str(4242 + i)}, cfg=cfg, probe=probe,
                   slurm=FakeSlurm(), store=FakeStore(), now=datetime.now(UTC))
        times.append(time.perf_counter() - t0)
    times.sort()
    return {"runs": runs, "p50_s": round(times[len(times) // 2], 4),
            "p99_s": round(times[min(len(times) - 1, int(len(times) * 0.99))], 4),
            "max_s": round(times[-1], 4)}


def process(runs: int) -> dict[str, object]:
    times = []
    last = ""
    for _ in range(runs):
        t0 = time.perf_counter()
        res = subprocess.run([sys.executable, "-c", ONE_PROLOG], capture_output=True,
                             text=True, check=True, timeout=60)
        times.append(time.perf_counter() - t0)
        last = res.stdout.strip()
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    times.sort()
    return {"runs": runs, "p50_s": round(times[len(times) // 2], 3),
            "p99_s": round(times[min(len(times) - 1, int(len(times) * 0.99))], 3),
            "max_s": round(times[-1], 3), "mean_s": round(statistics.mean(times), 3),
            "peak_rss_mb": round(peak_kb / 1024, 1), "outcome": last}


def kernel_log(runs: int, size: int = 1 << 20) -> dict[str, object]:
    from slurm_ml.health.replay.kernel import parse_kernel_events
    from slurm_ml.health.replay.xid import parse_xids

    lines = [line for f in sorted((GPU / "xid").iterdir())
             for line in f.read_text(errors="replace").splitlines()]
    text, i = [], 0
    total = 0
    while total < size:
        text.append(lines[i % len(lines)])
        total += len(text[-1]) + 1
        i += 1
    log = "\n".join(text)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        xids, events = parse_xids(log), parse_kernel_events(log)
        times.append(time.perf_counter() - t)
    times.sort()
    return {"bytes": len(log), "lines": len(text), "runs": runs, "xids": len(xids),
            "events": len(events), "p50_s": round(statistics.median(times), 4),
            "max_s": round(times[-1], 4)}


def write_config() -> None:
    text = (REPO / "conf" / "slurm-ml.yaml").read_text()
    head, tail = text.split("  a100_80g:", 1)
    tail = tail.replace("nvlink_links: 12", "nvlink_links: 18", 1)
    BENCH_CONFIG.write_text(head + "  a100_80g:" + tail)


def main(runs: int, as_json: bool) -> None:
    import logging

    logging.disable(logging.CRITICAL)
    write_config()
    out = {"captures": [c.name for c in CAPTURES], "process": process(runs),
           "in_process": in_process(runs * 5), "kernel_log": kernel_log(max(5, runs // 4))}
    print(json.dumps(out, indent=2) if as_json else out)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--json"]
    main(int(args[0]) if args else 40, "--json" in sys.argv)
