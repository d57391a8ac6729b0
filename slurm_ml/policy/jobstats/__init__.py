"""Job efficiency: what a GPU job used of what it held, and what its owner should change.

``jobstats JOBID`` for the researcher and ``efficiency`` for the operator both read
through here, and the epilog writes the summary that keeps a job's figures after its
samples are gone (``summary``). Pure: samples, accounting figures and the clock come in
as values.
"""

from slurm_ml.policy.jobstats.notes import Note, job_notes
from slurm_ml.policy.jobstats.summary import (
    MAX_ADMIN_COMMENT,
    Summary,
    read_summary,
    with_summary,
)
from slurm_ml.policy.jobstats.usage import CpuUse, GpuUse, JobUse, gpu_uses

__all__ = [
    "MAX_ADMIN_COMMENT",
    "CpuUse",
    "GpuUse",
    "JobUse",
    "Note",
    "Summary",
    "gpu_uses",
    "job_notes",
    "read_summary",
    "with_summary",
]
