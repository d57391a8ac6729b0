"""Which pending jobs wait for GPUs: the only pending work that is demand (pure).

A pending job counts as demand (owed hours, pending GPUs, starvation) only while freeing
GPUs or gaining priority can start it. A job that is held, waits on a dependency or a
begin time, is blocked by its own association's, QOS's or array's limit, or needs nodes
that are down, drained or reserved would not start if every GPU were free. Counting it
would let anyone raise their owed hours, and so get others' jobs requeued, by queueing
work that cannot run (20 ``Dependency`` jobs queued for one team moved its ratio from
0.91 to 0.50 and got another team's running job requeued).

The reasons are Slurm's codes (``squeue --json`` ``state_reason``, or scontrol's
``Reason=``, whose text after a comma is detail), as ``src/common/job_state_reason.c``
names them in 22.05 and 24.11. A code not listed is not demand: a new Slurm reason is
looked at before it counts.
"""

from __future__ import annotations

import enum
import functools
import re
from dataclasses import dataclass


class Wait(enum.StrEnum):
    """What a pending job waits for, as reports group it."""

    RESOURCES = "resources"  # demand: the GPUs or nodes it needs are in use
    PRIORITY = "priority"  # demand: jobs ahead of it go first
    UNEVALUATED = "unevaluated"  # demand: the scheduler has not reached it yet
    HELD = "held"
    DEPENDENCY = "dependency"
    BEGIN_TIME = "begin_time"
    LIMIT = "limit"  # its association's, QOS's, account's or array's own limit
    NODES = "nodes"  # required nodes down, drained or reserved; a reservation; partition down
    REQUEST = "request"  # the request does not fit the partition, account or QOS at all
    OTHER = "other"  # licences, burst buffers, power, a prolog, a failed launch, unknown


#: Waits that count as demand in fair share and pending-GPU counts.
DEMAND_WAITS = frozenset({Wait.RESOURCES, Wait.PRIORITY, Wait.UNEVALUATED})
#: Waits that make a job starved (contracts): Slurm must have said it waits for GPUs or
#: priority; a job it has not evaluated yet is demand but no reason to requeue anyone.
STARVING_WAITS = frozenset({Wait.RESOURCES, Wait.PRIORITY})


@dataclass(frozen=True, slots=True)
class Reason:
    """One entry of the list: a Slurm code (``*`` matches any text) and why it is there."""

    code: str
    wait: Wait
    why: str


R, W = Reason, Wait
#: Every pending reason of Slurm 22.05 and 24.11, first match wins.
REASONS: tuple[Reason, ...] = (
    # --- demand: would start if GPUs were free or its priority were higher
    R("Resources", W.RESOURCES, "the GPUs or nodes it needs are in use by other jobs"),
    R("Priority", W.PRIORITY, "higher-priority jobs of its partition go first"),
    R("None", W.UNEVALUATED, "not yet reached by the scheduler (new, or deep in a long "
                             "queue): it waits its turn"),
    R("", W.UNEVALUATED, "no reason recorded: as None"),
    R("SchedDefer", W.UNEVALUATED, "SchedulerParameters=defer: left to the next pass"),
    # --- held: a person must release it
    R("JobHeldUser", W.HELD, "held by its owner (--hold, scontrol hold)"),
    R("JobHeldAdmin", W.HELD, "held by an administrator"),
    R("JobHoldMaxRequeue", W.HELD, "held after requeueing MaxBatchRequeue times"),
    # --- dependency and time
    R("Dependency", W.DEPENDENCY, "waits for another job (--dependency), not for GPUs"),
    R("DependencyNeverSatisfied", W.DEPENDENCY, "its dependency can never be met"),
    R("BeginTime", W.BEGIN_TIME, "--begin not reached, or a requeued job's restart delay"),
    # --- its own limits: other teams' GPUs freeing does not lift them
    R("AssocGrp*", W.LIMIT, "its association reached an aggregate limit (GrpTRES, ...)"),
    R("AssocMax*", W.LIMIT, "it exceeds a per-job or per-node limit of its association"),
    R("Association*Limit", W.LIMIT, "its association reached a job, resource or time limit"),
    R("QOSGrp*", W.LIMIT, "its QOS reached an aggregate limit"),
    R("QOSMax*", W.LIMIT, "it exceeds a per-job, per-node or per-user limit of its QOS"),
    R("QOSMin*", W.LIMIT, "it asks for less than its QOS's minimum"),
    R("QOS*Limit", W.LIMIT, "its QOS reached a job, resource or time limit"),
    R("QOSUsageThreshold", W.LIMIT, "its QOS's usage threshold is breached"),
    R("Max*PerAccount", W.LIMIT, "it exceeds its QOS's per-account limit"),
    R("AccountingPolicy", W.LIMIT, "an accounting limit (Slurm's fallback limit reason)"),
    R("JobArrayTaskLimit", W.LIMIT, "its array's own throttle (--array=...%N)"),
    # --- nodes it needs are not there: freeing GPUs elsewhere does not help
    R("ReqNodeNotAvail", W.NODES, "required nodes are down, drained or reserved (even "
                                  "if all GPUs were free it could not start)"),
    R("Nodes required for job are DOWN*", W.NODES, "scontrol's long form of "
                                                   "ReqNodeNotAvail"),
    R("NodeDown", W.NODES, "a node it needs is down"),
    R("Reservation", W.NODES, "waits for its advanced reservation"),
    R("Reservation*", W.NODES, "its reservation was deleted or is invalid"),
    R("PartitionDown", W.NODES, "its partition is DOWN"),
    R("PartitionInactive", W.NODES, "its partition is INACTIVE"),
    R("FrontEndDown", W.NODES, "no front-end node is up"),
    # --- the request itself does not fit: it needs a change, not GPUs
    R("PartitionNodeLimit", W.REQUEST, "its node count is outside the partition's limits"),
    R("PartitionTimeLimit", W.REQUEST, "its --time exceeds the partition's MaxTime"),
    R("PartitionConfig", W.REQUEST, "the partition's configuration refuses the request"),
    R("BadConstraints", W.REQUEST, "its constraints cannot be satisfied"),
    R("Constraints", W.REQUEST, "its constraints cannot be satisfied now"),
    R("MaxMemPerLimit", W.REQUEST, "its memory per CPU or node exceeds the limit"),
    R("InvalidAccount", W.REQUEST, "its account is invalid"),
    R("InvalidQOS", W.REQUEST, "its QOS is invalid"),
    R("AccountNotAllowed", W.REQUEST, "its account may not use the partition"),
    R("QOSNotAllowed", W.REQUEST, "its QOS may not use the partition"),
    # --- other resources and states
    R("Licenses", W.OTHER, "waits for a licence, not a GPU"),
    R("BurstBuffer*", W.OTHER, "waits for burst buffer space or staging"),
    R("Power*", W.OTHER, "waits for power (capping or powered-down nodes)"),
    R("Prolog", W.OTHER, "already allocated: its PrologSlurmctld runs"),
    R("Cleaning", W.OTHER, "requeued, its previous run still cleaning up"),
    R("FedJobLock", W.OTHER, "waits for a federation lock"),
    R("Block*", W.OTHER, "BlueGene block states (BlockMaxError, BlockFreeAction): unused"),
    # a failed run's code stays on a job that pends again (requeued or held after it)
    R("JobLaunchFailure", W.OTHER, "its launch failed; it is held or requeued"),
    R("SystemFailure", W.OTHER, "a system failure ended its last run"),
    R("NonZeroExitCode", W.OTHER, "its last run exited non-zero"),
    R("RaisedSignal", W.OTHER, "its last run was killed by a signal"),
    R("TimeLimit", W.OTHER, "its last run reached its time limit"),
    R("InactiveLimit", W.OTHER, "its last run reached InactiveLimit"),
    R("OutOfMemory", W.OTHER, "its last run ran out of memory"),
    R("DeadLine", W.OTHER, "its --deadline passed"),
    R("*", W.OTHER, "not a reason this list knows (a launch failure, a newer Slurm): "
                    "not demand until it is looked at"),
)
del R, W


def _pattern(code: str) -> re.Pattern[str]:
    return re.compile("".join(".*" if part == "*" else re.escape(part)
                              for part in re.split(r"(\*)", code)) + r"\Z")


_EXACT = {r.code: r for r in reversed(REASONS) if "*" not in r.code}
_GLOBS = tuple((_pattern(r.code), r) for r in REASONS if "*" in r.code)


def code_of(reason: str) -> str:
    """Slurm's code in a reason as printed: the text before a comma or a colon, without
    squeue's parentheses; scontrol's underscores are spaces
    ("Nodes_required_for_job_are_DOWN,"). 24.11 prints a requeued run's end as
    "RaisedSignal:10(User defined signal 1)"."""
    head = reason.strip().strip("()").split(",", 1)[0].split(":", 1)[0]
    return head.replace("_", " ").strip()


@functools.lru_cache(maxsize=1024)
def reason_entry(reason: str) -> Reason:
    """The list entry a pending reason falls under (the catch-all for unknown codes).
    Cached: a queue of 50,000 jobs has a handful of distinct reasons."""
    code = code_of(reason)
    if "maintenance" in reason.lower():  # "ReqNodeNotAvail, Reserved for maintenance"
        return _EXACT["ReqNodeNotAvail"]
    exact = _EXACT.get(code)
    if exact is not None:
        return exact
    return next(r for pat, r in _GLOBS if pat.match(code))


def wait_of(reason: str) -> Wait:
    """What a job pending for ``reason`` waits for."""
    return reason_entry(reason).wait


def waits_for_gpus(reason: str) -> bool:
    """Whether a job pending for ``reason`` is demand: freeing GPUs or priority can
    start it."""
    return reason_entry(reason).wait in DEMAND_WAITS


def starving(reason: str) -> bool:
    """Whether Slurm says the job waits for resources or priority (contracts' starvation)."""
    return reason_entry(reason).wait in STARVING_WAITS


@dataclass(frozen=True, slots=True)
class ExcludedPending:
    """Pending work of one association that is not demand, for one reason code."""

    account: str
    user: str
    reason: str  # Slurm's code
    wait: Wait
    jobs: int
    gpus: int
    billing_gpus: float
