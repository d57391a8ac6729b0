"""Budget routing: QOS ``alloc`` (charged, protected for --time-min) or ``free``.

``free`` is uncharged and preemptible; a job lands there when the user asks for no
protected runtime (``--time-min=0``), when its account has no budget, or when the
account has used its share of the window.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_ml.config import Config
from slurm_ml.model import ALLOC_QOS, FREE_QOS
from slurm_ml.policy.admission_state import AdmissionState
from slurm_ml.policy.request import NO_MIN_RUNTIME, JobRequest


@dataclass(frozen=True, slots=True)
class Route:
    qos: str | None = None  # None = leave the job's QOS alone
    time_min: int | None = None  # new --time-min in minutes; None = unchanged
    clear_time_min: bool = False  # drop --time-min (free jobs with --time-min=0)
    site_factor: int | None = None
    note: str = ""
    account: str | None = None


def default_account(cfg: Config, user: str) -> str | None:
    accounts = cfg.budgets.user_accounts().get(user, ())
    return accounts[0] if accounts else None


def route(req: JobRequest, cfg: Config, state: AdmissionState) -> Route:
    """Pick alloc/free and the protected runtime for a GPU job."""
    if req.qos and req.qos not in (ALLOC_QOS, FREE_QOS):
        return Route(note=f"QOS {req.qos} is not routed by slurm-ml.")
    account = req.account or default_account(cfg, req.user)
    standing = state.standing.get(account) if account else None
    factor = standing.site_factor if standing else None
    clear = req.time_min_min == NO_MIN_RUNTIME
    free_note = ""
    budgeted = {name for name, _parent in cfg.budgets.accounts()}
    if account is None or account not in budgeted:
        free_note = (f"Account {account or '(none)'} has no GPU-time budget, so the job runs "
                     f"in QOS {FREE_QOS}: uncharged, but preemptible. Ask your PI for a "
                     f"budget account and submit with -A <account> to get protected time.")
    elif req.time_min_min == NO_MIN_RUNTIME:
        free_note = (f"--time-min=0 asks for no protected runtime, so the job runs in QOS "
                     f"{FREE_QOS}: uncharged, but it may be preempted (requeued) at any time.")
    elif req.qos == FREE_QOS:
        free_note = f"You chose QOS {FREE_QOS}: uncharged, but it may be preempted at any time."
    elif standing is not None and standing.exhausted:
        free_note = (f"Account {account} has used its GPU-time budget for this window "
                     f"({standing.usage_gpu_hours:.0f} of {standing.budget_gpu_hours:.0f} "
                     f"GPU-hours), so the job runs in QOS {FREE_QOS}: uncharged, but "
                     f"preemptible. It returns to {ALLOC_QOS} as the window moves on.")
    if free_note:
        if req.requeue is False:
            free_note += (" With --no-requeue a preempted job is cancelled, not requeued; "
                          "drop --no-requeue if the job can restart from a checkpoint.")
        return Route(qos=FREE_QOS, clear_time_min=clear, site_factor=factor, note=free_note,
                     account=account)
    assert account is not None  # a budgeted account
    return _alloc(req, cfg, account, factor)


def _alloc(req: JobRequest, cfg: Config, account: str, factor: int | None) -> Route:
    cap = int(cfg.policy.contracts.min_runtime_cap_hours * 60)
    asked = req.time_min_min
    minutes = asked if asked is not None else cfg.policy.admission.default_min_runtime_min
    why = "" if asked is not None else " (the default; set --time-min to change it)"
    if minutes > cap:
        minutes, why = cap, f" (capped from {minutes} min, the most this cluster protects)"
    if req.time_limit_min is not None and minutes > req.time_limit_min:
        minutes, why = req.time_limit_min, " (your --time limit)"
    note = (f"The job runs in QOS {ALLOC_QOS}, charged to {account}, and is protected from "
            f"preemption for its first {minutes} min{why}.")
    return Route(qos=ALLOC_QOS, time_min=minutes if minutes != asked else None,
                 site_factor=factor, note=note, account=account)
