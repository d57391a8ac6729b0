"""The epilog's efficiency summary, written into the job's AdminComment in slurmdbd.

Why slurmdbd and sacctmgr: by the time the epilog runs, slurmctld refuses updates to
the job ("Job has already finished", 22.05.8) and has already sent slurmdbd its own
copy of the AdminComment, which would overwrite a value set while the job ran. What
``sacctmgr modify job`` writes then stays (dev cluster, 22.05.8: after COMPLETED and
after slurmctld purged the job).

Each node's epilog writes the rows of every GPU the job's samples cover, and its own
GPUs' rows with its final memory reading, merged into what is there
(``summary.merge_uses``). Nodes of one job end together and each read-modify-write
could undo another's: on a multi-node job the epilog reads the record back after a
pause that differs per node and writes again if its rows are missing (at most
``ATTEMPTS`` writes). A write lost anyway loses only that node's final memory reading:
the other nodes' writes carry its samples.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from slurm_ml.config import Config
from slurm_ml.health.snapshot import NodeSnapshot
from slurm_ml.hooks.stats import job_use
from slurm_ml.model import Job, JobAccounting
from slurm_ml.policy.jobstats.judge import running_job_of, to_summary
from slurm_ml.policy.jobstats.summary import read_summary, with_summary
from slurm_ml.slurm.errors import SlurmError
from slurm_ml.slurm.protocol import SlurmClient
from slurm_ml.store.records import JobGpuStats, UtilSample

__all__ = ["ATTEMPTS", "SummaryWrite", "write_summary"]

log = logging.getLogger(__name__)
ATTEMPTS = 3
SETTLE_S = 1.0  # the pause before a multi-node job's read-back, plus up to 1 s per node


@dataclass(frozen=True, slots=True)
class SummaryWrite:
    outcome: str  # written | unchanged | skipped | failed
    why: str = ""

    def __str__(self) -> str:
        return f"{self.outcome}{': ' + self.why if self.why else ''}"


def _accounted(slurm: SlurmClient, job_id: int) -> tuple[JobAccounting | None, str | None]:
    """The job as slurmdbd holds it, or why it could not be read."""
    try:
        return slurm.job_accounting(job_id), None
    except SlurmError as exc:
        return None, str(exc)


def write_summary(job_id: int, node: str, *, cfg: Config, slurm: SlurmClient,
                  snap: NodeSnapshot | None, samples: Sequence[UtilSample],
                  stats: Sequence[JobGpuStats], job: Job | None, now: datetime,
                  sleep: Callable[[float], None]) -> SummaryWrite:
    """Summarise the job's use and merge it into its AdminComment (see the module doc)."""
    acct, error = _accounted(slurm, job_id)
    if error is not None:
        return SummaryWrite("failed", f"cannot read the job from slurmdbd: {error}")
    if acct is None:
        return SummaryWrite("skipped", "slurmdbd has no record of the job")
    at = int(now.timestamp())
    rj = running_job_of(job_id, job, acct, at)
    use = job_use(rj, cfg, samples=samples, rows=stats, at=acct.end or at, running=False,
                  elapsed_s=acct.elapsed_s, request=job.gpus if job is not None else (),
                  snap=snap)
    if not use.measured:
        return SummaryWrite("skipped", "nothing measured: no samples and no epilog reading")
    summary = to_summary(use, at=at)
    idle = cfg.policy.reclaim.zombie_util_pct
    mine = {(node, u.gpu) for u in use.uses if u.node == node}
    for attempt in range(ATTEMPTS):
        text = with_summary(acct.admin_comment, summary, node=node, idle_pct=idle)
        if text is None:
            return SummaryWrite("skipped", "the AdminComment holds text slurm-ml did not "
                                           "write; it is left as it is")
        if text == acct.admin_comment:
            return SummaryWrite("unchanged")
        try:
            slurm.set_accounted_admin_comment(job_id, text)
        except SlurmError as exc:
            return SummaryWrite("failed", f"sacctmgr refused the AdminComment: {exc}")
        if rj.nodes and len(rj.nodes) <= 1:
            return SummaryWrite("written")
        sleep(SETTLE_S + (zlib.crc32(node.encode()) % 1000) / 1000)
        again, error = _accounted(slurm, job_id)
        if again is None:
            return SummaryWrite("written", f"not read back: {error or 'slurmdbd lists no job'}")
        back = read_summary(again.admin_comment)
        if back is not None and mine <= {(u.node, u.gpu) for u in back.uses}:
            return SummaryWrite("written", f"after {attempt + 1} write(s)" if attempt else "")
        acct = again
    log.warning("job %s node %s: another node's AdminComment write kept replacing this "
                "node's rows", job_id, node)
    return SummaryWrite("written", f"{ATTEMPTS} writes, this node's rows not read back")
