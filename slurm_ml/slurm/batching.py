"""Group per-job updates into few scontrol calls (pure)."""

from __future__ import annotations

from collections.abc import Mapping


def site_factor_batches(factors: Mapping[int, int], batch_size: int) -> list[tuple[int, list[int]]]:
    """{job: factor} → [(factor, [jobs...])], jobs sharing a value in one call of ≤ batch_size.

    ``scontrol update jobid=a,b,c SiteFactor=N`` sets one value for many jobs,
    so jobs are grouped by value first. Values are sorted for stable output.
    """
    by_value: dict[int, list[int]] = {}
    for job, value in factors.items():
        by_value.setdefault(value, []).append(job)
    out: list[tuple[int, list[int]]] = []
    for value in sorted(by_value):
        jobs = sorted(by_value[value])
        for i in range(0, len(jobs), batch_size):
            out.append((value, jobs[i:i + batch_size]))
    return out


def site_factor_scripts(factors: Mapping[int, int], batch_size: int) -> list[list[str]]:
    """The scontrol stdin scripts that set ``factors``: one list of lines per process.

    Each line is ``update JobId=a,b,c SiteFactor=N``; one process gets lines for at
    most ``batch_size`` jobs.
    """
    scripts: list[list[str]] = []
    in_chunk = 0
    for value, jobs in site_factor_batches(factors, batch_size):
        if not scripts or in_chunk + len(jobs) > batch_size:
            scripts.append([])
            in_chunk = 0
        scripts[-1].append(f"update JobId={','.join(map(str, jobs))} SiteFactor={value}")
        in_chunk += len(jobs)
    return scripts
