"""``sacct`` rows for one job or a window, with their steps' CPU and memory figures.

Read with ``-P -n`` and SLURM_TIME_FORMAT=%s, ``ACCOUNTING_FIELDS`` in that order.
AdminComment is last, so a "|" inside it stays in it.

Where Slurm gathers nothing per step (JobAcctGatherType=jobacct_gather/none, the
default), sacct prints TotalCPU 00:00:00 and an empty MaxRSS for every job (22.05.8,
dev cluster): a job with no MaxRSS on any step has its CPU time read as not measured
rather than as 0.
"""

from __future__ import annotations

import re

from slurm_ml.model import JobAccounting, JobState
from slurm_ml.slurm.errors import SlurmParseError
from slurm_ml.slurm.tres import parse_tres

ACCOUNTING_FIELDS = ("JobIDRaw", "JobName", "User", "Account", "Partition", "State", "ElapsedRaw",
                     "AllocCPUS", "AllocTRES", "NodeList", "Start", "End", "TotalCPU",
                     "ReqMem", "MaxRSS", "AdminComment")
_CPU_TIME = re.compile(r"^(?:(?:(?P<d>\d+)-)?(?P<h>\d+):)?(?P<m>\d+):(?P<s>\d+(?:\.\d+)?)$")


def cpu_seconds(text: str) -> float | None:
    """sacct's TotalCPU (``[D-][HH:]MM:SS[.mmm]``) in seconds; None when unreadable."""
    m = _CPU_TIME.match(text.strip())
    if not m:
        return None
    return (int(m["d"] or 0) * 86400 + int(m["h"] or 0) * 3600 + int(m["m"]) * 60
            + float(m["s"]))


def size_mb(text: str) -> int | None:
    """``500G``, ``1234K``, ``0`` in MB (ReqMem, MaxRSS); None for "" or unreadable."""
    text = text.strip()
    if not text:
        return None
    value = parse_tres(f"x={text.rstrip('nc')}").get("x")  # old ReqMem: 4000Mn / 4000Mc
    return None if value is None else round(value)


def _int(text: str) -> int | None:
    return int(text) if text.strip().isdigit() else None


def _gpu_type(tres: dict[str, float]) -> str | None:
    """The one GPU type an AllocTRES names (``gres/gpu:a100_80g=2``); None for none or
    several."""
    types = {k.split(":", 1)[1] for k, v in tres.items() if v > 0 and k.startswith("gres/gpu:")}
    return types.pop() if len(types) == 1 else None


def parse_accounting(text: str, *, window: tuple[int, int] | None = None) -> list[JobAccounting]:
    """One JobAccounting per job (an array task by its own id: JobIDRaw), steps folded in.

    ``window``: the (start, end) sacct was asked for, with --truncate; elapsed is then the
    time inside it, computed from the truncated Start/End as ``job_usage`` does.
    """
    base: dict[str, list[str]] = {}
    steps: dict[str, list[list[str]]] = {}
    order: list[str] = []
    n = len(ACCOUNTING_FIELDS)
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", n - 1)
        if len(parts) < n:
            raise SlurmParseError(f"sacct line has {len(parts)} fields, want {n}: {line!r}")
        jid, _, step = parts[0].partition(".")
        if step:
            steps.setdefault(jid, []).append(parts)
        elif jid.isdigit():
            if jid not in base:
                order.append(jid)
            base[jid] = parts
    out = []
    for jid in order:
        p = base[jid]
        (_, name, user, account, partition, state, elapsed, cpus, tres_text, nodes, start,
         end, total_cpu, req_mem, _max_rss, admin) = p
        tres = parse_tres(tres_text)
        rss = [v for s in steps.get(jid, []) if (v := size_mb(s[14])) is not None]
        start_s, end_s = _int(start), _int(end)
        elapsed_s = _int(elapsed) or 0
        if window is not None and start_s is not None:
            hi = min(end_s if end_s is not None else window[1], window[1])
            elapsed_s = max(0, hi - max(start_s, window[0]))
        cpu = cpu_seconds(total_cpu)
        out.append(JobAccounting(
            job_id=int(jid),
            name=name, user=user, account=account, partition=partition,
            state=JobState.parse(state), elapsed_s=elapsed_s, alloc_cpus=_int(cpus) or 0,
            alloc_gpus=int(tres.get("gres/gpu", 0)), nodes=nodes if nodes != "None assigned"
            else "", start=start_s, end=end_s, admin_comment=admin,
            total_cpu_s=cpu if rss else None, req_mem_mb=size_mb(req_mem),
            max_rss_mb=max(rss) if rss else None, gpu_type=_gpu_type(tres)))
    return out
