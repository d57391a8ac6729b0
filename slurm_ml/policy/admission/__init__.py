"""Admission: what submitd decides for each job as it is submitted or updated.

``decision.decide`` is the one entry point (submitd, ``submit-check`` and the
simulator's admission call it); the modules beside it are its rules: budget routing,
gang and topology shaping, GPU capability matching, constraint rewriting, and the
request and cluster values they read. Admission reads fair share's lane and capacity
rules (``policy.fairshare``) and never the reconcile cycle (``policy.reconcile``): an
import contract keeps the two independent.
"""

from slurm_ml.policy.admission.decision import (
    RECORD_PREFIX,
    AdmissionDecision,
    Before,
    contract_min_runtime_s,
    decide,
    read_record,
    recorded_min_runtime_min,
)

__all__ = [
    "RECORD_PREFIX",
    "AdmissionDecision",
    "Before",
    "contract_min_runtime_s",
    "decide",
    "read_record",
    "recorded_min_runtime_min",
]
