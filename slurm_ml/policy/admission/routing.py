"""Budget routing: QOS ``alloc`` (charged, protected from requeue) or ``free``.

``free`` is uncharged and preemptible; a job lands there when the user asks for no
protected runtime (``--time-min=0``), or when the account has used its share of the
window. A job whose account has no budget (an account the site had before slurm-ml,
root's) lands there with ``policy.admission.unbudgeted: free``; with ``untouched`` (the
default) admission leaves its QOS to Slurm. The account is the job's ``-A``, else the
user's default account in slurmdbd (read by submitd), else the first one the budget tree
gives the user.

The protected runtime (the minimum-runtime contract) is never carried in Slurm's own
``time_min``: to Slurm, ``--time-min`` lets the backfill scheduler *lower* the job's
``--time`` limit down to it, so a job could be started with a one-hour limit and killed.
Admission records the contract in the job's AdminComment record (``min_runtime``) and
clears any ``--time-min`` the user gave on the jobs it routes.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_ml.config import Config
from slurm_ml.config.rules import associations
from slurm_ml.model import ALLOC_QOS, FREE_QOS
from slurm_ml.policy.admission.request import NO_MIN_RUNTIME, JobRequest
from slurm_ml.policy.admission.state import AdmissionState, lane_held
from slurm_ml.policy.fairshare.lane import (
    fits,
    is_short_work,
    lane_cap,
    lane_site_factor,
)

#: Slurm's "Job violates accounting/QOS policy" (slurm_errno.h), which scontrol prints
#: when admission refuses an update into QOS alloc; the reason is in slurmctld.log.
ESLURM_ACCOUNTING_POLICY = 2050


@dataclass(frozen=True, slots=True)
class Route:
    qos: str | None = None  # None = leave the job's QOS alone
    min_runtime: int | None = None  # protected minutes, for the record; None = not routed
    clear_time_min: bool = False  # clear Slurm's --time-min (job_desc.time_min = NO_VAL)
    site_factor: int | None = None
    note: str = ""
    account: str | None = None
    refuse: str = ""  # an update this refuses (ESLURM_ACCOUNTING_POLICY), and why
    lane: bool = False  # put in the fast lane for short work (its SiteFactor is the lane's)


def default_account(cfg: Config, user: str,
                    state: AdmissionState | None = None) -> str | None:
    """The account a job without -A runs under: slurmdbd's DefaultAccount when submitd
    read it, else the first account the budget tree gives the user."""
    known = state.default_accounts.get(user) if state is not None else None
    if known:
        return known
    accounts = cfg.budgets.user_accounts().get(user, ())
    return accounts[0] if accounts else None


def _account_words(req: JobRequest, account: str | None) -> str:
    if account is None:
        return "Your default account (slurm-ml could not read it)"
    return f"Account {account}" + ("" if req.account else " (your default account)")


def _unbudgeted(req: JobRequest, cfg: Config, account: str | None) -> Route | None:
    """``untouched``: the job keeps the QOS Slurm gives it; None for ``free``."""
    if cfg.policy.admission.unbudgeted != "untouched":
        return None
    qos = f"the QOS you chose ({req.qos})" if req.qos else "its association's default QOS"
    return Route(account=account, note=(
        f"{_account_words(req, account)} has no GPU-time budget in slurm-ml, so the job "
        f"keeps {qos}: it is not charged to a budget and slurm-ml protects none of its "
        f"runtime. Submit with -A <account> of a budget account to run in QOS {ALLOC_QOS}."))


def route(req: JobRequest, cfg: Config, state: AdmissionState) -> Route:
    """Pick alloc/free and the protected runtime for a GPU job."""
    if req.qos and req.qos not in (ALLOC_QOS, FREE_QOS):
        return Route(note=f"QOS {req.qos} is not routed by slurm-ml.")
    account = req.account or default_account(cfg, req.user, state)
    standing = state.standing.get(account) if account else None
    factor = standing.site_factor if standing else None
    free_note = ""
    budgeted = {name for name, _parent in cfg.budgets.accounts()}
    if account is None or account not in budgeted:
        kept = _unbudgeted(req, cfg, account)
        if kept is not None:
            return kept
        free_note = (f"{_account_words(req, account)} has no GPU-time budget, so the job "
                     f"runs in QOS {FREE_QOS}: uncharged, but preemptible. Ask your PI for "
                     f"a budget account and submit with -A <account> to get protected time.")
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
        if req.time_min_min:
            free_note += (" Its --time-min was dropped (QOS free protects no runtime) so the "
                          "scheduler cannot shorten your --time limit.")
        if req.requeue is False:
            free_note += (" With --no-requeue a preempted job is cancelled, not requeued; "
                          "drop --no-requeue if the job can restart from a checkpoint.")
        return Route(qos=FREE_QOS, min_runtime=0, clear_time_min=req.time_min_min is not None,
                     site_factor=factor, note=free_note, account=account)
    assert account is not None  # a budgeted account
    return _alloc(req, cfg, account, factor, state)


def protected_minutes(asked: int | None, time_limit_min: int | None,
                      cfg: Config) -> tuple[int, str]:
    """The minimum-runtime contract of an allocated job, in minutes, and why it is that
    (for the researcher's note): its --time-min (``asked``, > 0) or the site default,
    capped at ``policy.contracts.min_runtime_cap_min`` and at its --time limit. The
    simulator gives trace jobs their contracts by this rule too."""
    cap = cfg.policy.contracts.min_runtime_cap_min
    minutes = asked if asked is not None else cfg.policy.admission.default_min_runtime_min
    why = "" if asked is not None else " (the default; set --time-min to change it)"
    if minutes > cap:
        minutes, why = cap, f" (capped from {minutes} min, the most this cluster protects)"
    if time_limit_min is not None and minutes > time_limit_min:
        minutes, why = time_limit_min, " (your --time limit)"
    return minutes, why


def _alloc(req: JobRequest, cfg: Config, account: str, factor: int | None,
           state: AdmissionState) -> Route:
    asked = req.time_min_min  # None or > 0 here: --time-min=0 went to free
    minutes, why = protected_minutes(asked, req.time_limit_min, cfg)
    note = (f"The job runs in QOS {ALLOC_QOS}, charged to {account}, and is protected from "
            f"requeue for its first {minutes} min{why}.")
    if asked is not None:
        note += (" Slurm's --time-min was moved into this protection so the scheduler cannot "
                 "shorten your --time limit.")
    lane = lane_route(req, cfg, account, minutes, state)
    if lane is not None:
        factor, note = lane[0], f"{note} {lane[1]}"
    return Route(qos=ALLOC_QOS, min_runtime=minutes, clear_time_min=asked is not None,
                 site_factor=factor, note=note, account=account, lane=lane is not None)


def lane_route(req: JobRequest, cfg: Config, account: str, minutes: int,
               state: AdmissionState) -> tuple[int, str] | None:
    """(SiteFactor, note) for a short job the fast lane has room for, as the last
    reconciler cycle left it (``AccountStanding.lane_gpus``) less what admission has put
    in the lane since (``lane_held``); None otherwise. Without a cycle on record the lane
    is left to the daemon's next cycle."""
    lcfg, fcfg = cfg.policy.fast_lane, cfg.policy.fairshare
    gpus = req.total_gpus()
    if gpus is None or not is_short_work(minutes, req.time_limit_min, fcfg):
        return None
    held = lane_held(state)
    if account not in held:
        return None
    cap = lane_cap(cfg.total_gpus(), lcfg)
    if not fits(account, gpus, held, sum(held.values()), cap, cfg=lcfg):
        return None
    value = lane_site_factor(fcfg, associations(cfg.budgets))
    return value, (
        f"It is short work (protected {minutes} min, --time {req.time_limit_min} min), so it "
        f"goes in the fast lane: it starts ahead of other budgeted jobs, and Slurm may "
        f"preempt unallocated (QOS {FREE_QOS}) work to start it. The lane holds at most "
        f"{lcfg.team_gpus} GPUs per account and {cap} on the cluster.")


def update_route(req: JobRequest) -> Route:
    """An update (``scontrol update``) of a job slurm-ml routes may not set --time-min.

    The protected runtime was fixed at submission and lives in the AdminComment record;
    Slurm's time_min would only let the scheduler shorten the job's time limit. Setting 0
    (none) is harmless and left alone; so are jobs in QOS slurm-ml does not route.
    """
    if req.qos not in (None, ALLOC_QOS, FREE_QOS) or not req.time_min_min:
        return Route()
    return Route(clear_time_min=True,
                 note=("TimeMin not changed: the protected runtime is fixed at submission "
                       "(AdminComment), and Slurm's TimeMin would let the scheduler shorten "
                       "the job's time limit."))


def reroute_update(req: JobRequest, cfg: Config, state: AdmissionState, *,
                   asked_qos: str | None) -> Route:
    """An update that touches QOS, account or partition, judged as a submission would be.

    ``req`` is the job as it would be after the update (slurmctld's job record merged
    with the update); ``asked_qos`` is the QOS the update itself names (None: it names
    none). Slurm lets a job's owner change QOS, Account and Partition of a pending job
    (``_update_job`` in slurmctld's job_mgr.c answers ESLURM_JOB_NOT_PENDING otherwise),
    and calls job_submit's ``slurm_job_modify`` before it applies them, so this is where
    a job whose budget is spent is kept out of QOS ``alloc``:

    - the update asks for ``alloc`` and routing would not give it: refused;
    - the job is in ``alloc`` and the update moves it to an account whose budget is spent
      (or, with ``unbudgeted: free``, one without a budget): moved to ``free``, as its
      submission would have been;
    - it would stay in ``alloc`` under an account without a budget (``unbudgeted:
      untouched``, where there is no QOS for slurm-ml to give it): refused;
    - otherwise the QOS routing picks is set, as on submission.

    The protected runtime stays the one recorded at submission: a user's update may not
    write the AdminComment (slurmctld denies it to all but SlurmUser and root).
    ``--time-min`` is handled as by :func:`update_route`.
    """
    rt = route(req, cfg, state)
    if req.qos == ALLOC_QOS and rt.qos != ALLOC_QOS and (
            asked_qos == ALLOC_QOS or rt.qos != FREE_QOS):
        return Route(refuse=_alloc_refused(req, cfg, state, rt, asked=asked_qos == ALLOC_QOS),
                     account=rt.account)
    times = update_route(req)
    if rt.qos is None:
        return Route(clear_time_min=times.clear_time_min, note=times.note, account=rt.account)
    if rt.qos == ALLOC_QOS:
        note = f"The job runs in QOS {ALLOC_QOS}, charged to {rt.account}."
    else:
        note = rt.note.split(" Its --time-min was dropped")[0]
    if times.note:
        note += " " + times.note
    return Route(qos=rt.qos, clear_time_min=times.clear_time_min,
                 site_factor=rt.site_factor, note=note, account=rt.account)


def _alloc_refused(req: JobRequest, cfg: Config, state: AdmissionState, rt: Route, *,
                   asked: bool) -> str:
    """Why an update may not put (or keep) the job in QOS alloc, and what to do instead."""
    job = f"job {req.job_id}" if req.job_id is not None else "this job"
    fix = f"scontrol update JobId={req.job_id if req.job_id is not None else '<job>'}"
    head = (f"slurm-ml refused QOS {ALLOC_QOS} for {job}" if asked else
            f"slurm-ml refused this update of {job}: it would keep the job in QOS {ALLOC_QOS}")
    account = rt.account
    standing = state.standing.get(account) if account else None
    budgeted = {name for name, _parent in cfg.budgets.accounts()}
    if account is None or account not in budgeted:
        words = _account_words(req, account)
        why = f"{words[0].lower()}{words[1:]} has no GPU-time budget in slurm-ml"
        todo = (f"Run it under a budget account: {fix} Account=<account> QOS={ALLOC_QOS}"
                if asked else f"Give the QOS too: {fix} Account={account} QOS=<qos>")
    elif standing is not None and standing.exhausted:
        why = (f"account {account} has used its GPU-time budget for this window "
               f"({standing.usage_gpu_hours:.0f} of {standing.budget_gpu_hours:.0f} GPU-hours)")
        todo = (f"The job keeps its QOS; new jobs of {account} run in {ALLOC_QOS} again as "
                f"the window moves on. Or run it under a budget account with room: "
                f"{fix} Account=<account> QOS={ALLOC_QOS}")
    else:  # TimeMin=0 in the same update: no protected runtime, which is QOS free
        why = "TimeMin=0 asks for no protected runtime"
        todo = "Leave TimeMin=0 out of the update"
    return f"{head}: {why}. {todo}."
