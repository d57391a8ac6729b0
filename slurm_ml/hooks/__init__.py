"""Node-side runners: the Slurm prolog and epilog, the periodic health check, and the
operator's quarantine actions.

Every boundary comes in as an argument (``GpuProbe``, ``SlurmClient``, ``Store``,
``ProcessTable``, the clock ``now``); ``hooks.wiring`` builds the real ones for the CLI: a
SlurmClient with a short timeout (5 s), a ``SpoolingStore`` over PostgreSQL with a short
connect timeout (the CLI hands in the database opener), ``NvmlProbe`` (or ``ReplayProbe``
on the dev cluster) and ``ProcFs``.
"""

from slurm_ml.hooks.breaker import DrainAction, drain_via_breaker
from slurm_ml.hooks.epilog import EpilogOutcome, run_epilog
from slurm_ml.hooks.periodic import PeriodicOutcome, run_periodic
from slurm_ml.hooks.procs import ProcessTable, ProcFs, job_of
from slurm_ml.hooks.prolog import PrologOutcome, run_prolog

__all__ = [
    "DrainAction",
    "EpilogOutcome",
    "PeriodicOutcome",
    "ProcFs",
    "ProcessTable",
    "PrologOutcome",
    "drain_via_breaker",
    "job_of",
    "run_epilog",
    "run_periodic",
    "run_prolog",
]
