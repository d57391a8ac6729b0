"""The shape of slurm-ml's configuration: one frozen dataclass per section.

Every knob is a :func:`knob`: a default (whose type is the knob's type) and the check
its value must pass; :mod:`slurm_ml.config.parse` reads both, so adding a knob here is
all it takes for the loader to accept, type-check and range-check it. Checks that span
several knobs are in :mod:`slurm_ml.config.rules`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TypeVar

from slurm_ml.config.checks import (
    Check,
    absolute,
    absolute_or_off,
    command_line,
    fraction,
    ge,
    gt,
    margin_percent,
    nodeset,
    percent,
    share,
    slurm_weight,
)
from slurm_ml.config.errors import show
from slurm_ml.envvars import env
from slurm_ml.model import BudgetTree, GpuType, NodeClass

__all__ = [
    "AdmissionConfig",
    "ClusterConfig",
    "Config",
    "ContractsConfig",
    "DaemonConfig",
    "FairshareConfig",
    "FastLaneConfig",
    "HealthConfig",
    "PartitionConfig",
    "PolicyConfig",
    "PriorityWeightsConfig",
    "QuarantineConfig",
    "ReclaimConfig",
    "SlurmConfig",
    "StoreConfig",
    "SubmitdConfig",
    "knob",
]

_T = TypeVar("_T")

#: policy.admission.unbudgeted: what admission does with a GPU job whose account has no
#: budget in the tree (an account the site had before slurm-ml, root's own jobs).
UNBUDGETED_MODES = ("untouched", "free")


def _unbudgeted_mode(value: str) -> str | None:
    if value in UNBUDGETED_MODES:
        return None
    return f"must be one of {', '.join(UNBUDGETED_MODES)}, not {value!r}"


def knob(default: _T, check: Check[_T] | None = None) -> _T:
    """A defaulted, checked field; its type is the type of the default."""
    return field(default=default, metadata={"check": check})


@dataclass(frozen=True, slots=True)
class FairshareConfig:
    """How usage is measured and turned into job SiteFactor."""

    window_hours: float = knob(168.0, gt(0))  # sliding usage window fair-share looks back over
    site_factor_max: int = knob(100_000, gt(0))  # SiteFactor given to the most under-served job
    cycle_interval_s: float = knob(60.0, gt(0))  # time between reconciler cycles
    # SiteFactor between adjacent ranks; must exceed nice_range + short_job_boost + the
    # other priority weights (policy.priority_weights), so that no job crosses a band
    # (slurm_ml.config.rules).
    site_factor_step: int = knob(1000, ge(1))
    # How far a user's own --nice moves a job inside its team's band (never across bands).
    nice_range: int = knob(500, ge(0))
    owed_bucket_s: float = knob(3600.0, gt(0))  # owed is capped at demand bucket by bucket
    # Short work (Ai2's debug jobs) goes first inside its team's band: a job whose
    # contract is <= short_job_min_runtime_min and whose time limit is
    # <= short_job_time_limit_min gets short_job_boost more SiteFactor (0 = off). It is
    # cheap to admit: after its short contract it may be requeued like any other job.
    short_job_boost: int = knob(250, ge(0))
    short_job_min_runtime_min: float = knob(15.0, ge(0))
    short_job_time_limit_min: float = knob(60.0, ge(0))
    # Fault refunds: a run that ended (not COMPLETED) within this many seconds of
    # slurm-ml draining one of its nodes is not charged (slurm_ml.policy.refunds).
    refund_slack_s: float = knob(300.0, ge(0))
    # Gangs first after a wait: an alloc job of at least gang_min_gpus GPUs that has
    # waited gang_first_after_min since its submission gets a SiteFactor above every
    # team's band (the fast lane's band, without its short-work boost), the oldest first
    # and at most gang_first_count at a time, so that Slurm's backfill reserves nodes for
    # it instead of a stream of small jobs from better-placed teams taking them (0 = off).
    gang_min_gpus: int = knob(16, ge(1))
    gang_first_after_min: float = knob(0.0, ge(0))
    gang_first_count: int = knob(1, ge(0))

    def top_band(self, ranks: int) -> int:
        """The SiteFactor band of rank 1 among ``ranks``: every lower rank is a step less,
        and the lowest stays at least one step (the reconciler's bands and the config's
        QOS rule both read it from here)."""
        return max(self.site_factor_max, ranks * self.site_factor_step)


@dataclass(frozen=True, slots=True)
class FastLaneConfig:
    """The fast lane for short work (Ai2's debug jobs): an alloc job whose contract and
    time limit are within ``policy.fairshare.short_job_*`` gets a SiteFactor one step
    above every team's band, so it starts ahead of all other alloc work (Slurm's
    preempt/qos then frees GPUs of free-QOS work for it at once), as long as the lane's
    GPUs stay within a cap of their own: cluster-wide and per account, running and
    queued lane jobs together. Beyond the cap short work waits in its team's band, with
    ``short_job_boost``. Its GPU-hours are charged to the account like any other. With
    ``preempt_cap_fraction`` above 0 the daemon also requeues allocated work past its
    protection for lane jobs that wait (``policy.lane_requeue``), within that cap."""

    # Fraction of the cluster's GPUs the lane may hold at once (floor; 0 = no lane).
    gpus_fraction: float = knob(0.05, share)
    team_gpus: int = knob(8, ge(0))  # lane GPUs one account may hold at once
    max_job_gpus: int = knob(8, ge(1))  # a larger job is never in the lane
    # GPUs of allocated work the daemon may requeue per contracts.preempt_cap_window_s
    # for lane jobs that wait (fraction of the cluster, floor; 0 = never): work past its
    # protected runtime, of over-served allocations, the fewest GPU-hours lost first.
    # 0.02 by default: without it the debug-job wait target (p90 <= 60 s at 2-3x demand;
    # docs/design.md, "Targets") is missed, since a cluster full of allocated work leaves
    # Slurm no free work to preempt (BENCHMARKS.md, "The fast lane's levers"); below 50
    # GPUs it floors to 0, so small clusters never use it.
    preempt_cap_fraction: float = knob(0.02, share)
    preempt_after_s: float = knob(30.0, ge(0))  # a lane job waits this long before that
    # Seconds between the checkpoint signal and the requeue for the lane's requeues (a
    # debug job waits through it; contracts.requeue_grace_s is the others' grace).
    requeue_grace_s: float = knob(20.0, ge(0))
    # submitd wakes the daemon (daemon.wake_socket) when it puts a job in the lane, for a
    # cycle at the end of the grace of the free work Slurm preempts for it (which the
    # daemon then requeues: policy.preempt_grace) and, with lane requeues on, one
    # preempt_after_s after; woken cycles come at least this far apart (0 = no wakes).
    wake_min_gap_s: float = knob(10.0, ge(0))


@dataclass(frozen=True, slots=True)
class PriorityWeightsConfig:
    """The ``PriorityWeight*`` of slurm.conf, rendered by ``slurm-ml install`` into
    slurm-ml.conf. Slurm adds each weight times its factor (in [0, 1]) to a job's
    priority; the SiteFactor bands (``policy.fairshare``) are added unweighted, so these
    must stay small against ``site_factor_step`` and ``qos`` large against the bands
    (:mod:`slurm_ml.config.rules`)."""

    age: int = knob(100, slurm_weight)  # PriorityWeightAge (full at PriorityMaxAge, 7 days)
    fairshare: int = knob(100, slurm_weight)  # PriorityWeightFairshare (Slurm's own, decayed)
    job_size: int = knob(0, slurm_weight)  # PriorityWeightJobSize
    partition: int = knob(0, slurm_weight)  # PriorityWeightPartition
    # PriorityWeightQOS: QOS alloc (Priority 100, the highest: factor 1) above every band,
    # QOS free (Priority 0) below.
    qos: int = knob(100_000_000, slurm_weight)

    def others(self) -> int:
        """The most the factors other than QOS and SiteFactor can add to a job's priority."""
        return self.age + self.fairshare + self.job_size + self.partition


#: policy.contracts.requeue_signal_target: where a checkpoint signal goes (scancel):
#: "batch" the batch shell only (--batch), "full" it and every step (--full), "steps" the
#: job steps only (no flag; what a --signal without ``B:`` does).
SIGNAL_TARGETS = ("batch", "full", "steps")


def signal_name(value: str) -> str | None:
    """A signal as scancel takes it ("USR1", "10"), from "USR1", "SIGUSR1" or "10";
    None when it is no signal."""
    import signal

    text = value.strip().upper().removeprefix("SIG")
    # ASCII digits only, and few: str.isdigit() is also true of "²", which int() refuses,
    # and int() refuses more than 4,300 digits.
    if re.fullmatch(r"[0-9]{1,3}", text):
        return text if 1 <= int(text) <= 64 else None
    return text if f"SIG{text}" in signal.Signals.__members__ else None


def _requeue_signal(value: str) -> str | None:
    if value == "" or signal_name(value) is not None:
        return None
    return f"must be a signal name such as USR1 (or a number), or \"\" for none, not {value!r}"


def _signal_target(value: str) -> str | None:
    if value in SIGNAL_TARGETS:
        return None
    return f"must be one of {', '.join(SIGNAL_TARGETS)}, not {value!r}"


@dataclass(frozen=True, slots=True)
class ContractsConfig:
    """Limits on what the scheduler may do to a running job (requeue, preempt)."""

    # Minutes; a --time-min (protected runtime) above this is capped to it, and a job with
    # no admission record is protected this long. Slurm's QOS PreemptExemptTime too.
    min_runtime_cap_min: int = knob(480, ge(1))
    requeue_cooldown_s: float = knob(3600.0, ge(0))  # a job is requeued at most once per this
    preempt_cap_fraction: float = knob(0.05, fraction)  # max fraction of GPUs requeued per window
    preempt_cap_window_s: float = knob(600.0, gt(0))  # the window preempt_cap_fraction is over
    # A requeue needs the victim's delivered/owed to exceed the preemptor's by this much
    # (hysteresis against flapping), the victim over-served (> 1), the preemptor under (< 1).
    preempt_min_gap: float = knob(0.2, ge(0))
    preempt_after_wait_s: float = knob(300.0, ge(0))  # the starved job has pended this long
    # Before a requeue the daemon signals the job so that it can checkpoint, waits
    # requeue_grace_s, then requeues: with the job's own --signal (its #SBATCH line) if it
    # has one, else requeue_signal ("" = none: such jobs are requeued at once) sent to
    # requeue_signal_target. A grace of 0 turns signalling off: plain requeues.
    requeue_signal: str = knob("USR1", _requeue_signal)
    requeue_signal_target: str = knob("batch", _signal_target)
    requeue_grace_s: float = knob(60.0, ge(0))
    # QOS free's GraceTime (rendered by install): how long free work that Slurm preempts
    # for an alloc job gets to checkpoint before it is killed, and so how long that alloc
    # job (a debug job in the fast lane) waits for its GPUs: keep it under a minute.
    free_grace_s: int = knob(30, ge(0))
    # Entitlement first (Kueue's reclaim of borrowed quota; Ai2's owed counts each hour):
    # an allocation whose alloc work running now is below its entitlement (budget share x
    # the cluster's billing GPUs) ranks ahead of every allocation at or above it, and its
    # jobs that wait preempt_after_wait_s may requeue, past their protection, jobs of an
    # allocation running above its entitlement, whatever the window ratios (the
    # loop-free rule, the cooldown and the cap still hold). false: window ratios only.
    reclaim_entitlement: bool = knob(True)


@dataclass(frozen=True, slots=True)
class ReclaimConfig:
    """When held-but-idle GPUs (zombies) and stuck COMPLETING jobs are reclaimed."""

    # Memory held and util ~0 this long = zombie; at least 3 x sample_interval_s (rules.py).
    zombie_heartbeat_s: float = knob(900.0, gt(0))
    # Seconds between GPU samples: install's HealthCheckInterval; a verdict needs samples
    # no more than twice this apart over the whole heartbeat.
    sample_interval_s: int = knob(300, gt(0))
    zombie_util_pct: float = knob(1.0, percent)  # GPU utilisation at or below this counts as idle
    zombie_min_mem_mb: int = knob(1024, gt(0))  # GPU memory above this counts as held
    zombie_grace_s: float = knob(900.0, ge(0))  # time between the warning and the action
    completing_timeout_s: float = knob(1800.0, gt(0))  # COMPLETING longer than this is stuck
    exempt_qos: tuple[str, ...] = knob(())  # jobs in these QOS are never reclaimed as zombies
    exempt_accounts: tuple[str, ...] = knob(())  # nor jobs charged to these accounts
    exempt_interactive: bool = knob(True)  # nor salloc/srun sessions (no batch script)
    # Run with each zombie warning, requeue or cancel as JSON on stdin; "" = none.
    notify_command: str = knob("", command_line)
    fix_runaway: bool = knob(True)  # close slurmdbd's runaway jobs (sacctmgr show runawayjobs)
    orphan_lookback_s: float = knob(3600.0, gt(0))  # orphan-process reports this recent count


@dataclass(frozen=True, slots=True)
class AdmissionConfig:
    """Submit-time capability matching done by the job_submit Lua shim."""

    memory_margin_pct: float = knob(10.0, margin_percent)  # safety margin on GPU memory needs
    socket_timeout_ms: int = knob(200, gt(0))  # total time the Lua shim waits for an answer
    breaker_failures: int = knob(3, ge(1))  # consecutive shim failures that open the breaker
    breaker_cooldown_s: float = knob(30.0, gt(0))  # the shim skips submitd this long when open
    # Minutes of protected runtime when --time-min is unset; at most
    # policy.contracts.min_runtime_cap_min.
    default_min_runtime_min: int = knob(60, ge(0))
    leaf_switch_wait_min: float = knob(10.0, ge(0))  # multi-node jobs wait this long for one leaf
    profile_runs: int = knob(20, ge(1))  # last runs of a job name the memory p95 is taken over
    state_refresh_s: float = knob(60.0, gt(0))  # submitd reloads budgets/profiles this often
    # Jobs of accounts outside the budget tree: "untouched" keeps the QOS Slurm gives them
    # (shaping still applies); "free" runs them in QOS free, which install grants to all.
    unbudgeted: str = knob("untouched", _unbudgeted_mode)


def _regexes(values: tuple[str, ...]) -> str | None:
    for v in values:
        if not v.strip():
            return "an empty pattern would match every drain reason"
        try:
            re.compile(v)
        except re.error as exc:
            return f"{show(v)} is not a valid regular expression: {exc}"
        except (RecursionError, OverflowError, MemoryError, ValueError) as exc:
            # re's parser recurses per group and has limits of its own: "(" x 2000 is
            # a RecursionError, "a{99999999999999999999}" an OverflowError.
            return (f"{show(v)} is not a usable regular expression: "
                    f"{type(exc).__name__}: {exc}")
    return None


@dataclass(frozen=True, slots=True)
class QuarantineConfig:
    """When slurm-ml drains GPU nodes, resumes them, and stops itself (circuit breaker)."""

    resume_after_passes: int = knob(3, ge(1))  # consecutive clean checks before a resume
    breaker_fraction: float = knob(0.2, fraction)  # share of a node class drained per window
    breaker_window_min: float = knob(30.0, gt(0))  # the window both breakers count over
    # Share of ALL managed nodes one check (Finding.check_id) may drain per window (at
    # least 2) before that check stops draining anywhere, once its drains span 2+ classes.
    breaker_check_fraction: float = knob(0.2, fraction)
    prolog_budget_s: float = knob(5.0, gt(0))  # the prolog's whole health check, hard limit
    # An admin's drain whose reason matches one of these (case-insensitive regexes; a word
    # matches as a substring) is a repair at the contract, as a drain-after-job finding is:
    # each resumable job there is requeued once its protected runtime ends. () = none.
    maintenance_reasons: tuple[str, ...] = knob(("maint", "maintenance", "repair"), _regexes)


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """Policy knobs; every one has a default equal to conf/slurm-ml.yaml."""

    fairshare: FairshareConfig = field(default_factory=FairshareConfig)
    fast_lane: FastLaneConfig = field(default_factory=FastLaneConfig)
    priority_weights: PriorityWeightsConfig = field(default_factory=PriorityWeightsConfig)
    contracts: ContractsConfig = field(default_factory=ContractsConfig)
    reclaim: ReclaimConfig = field(default_factory=ReclaimConfig)
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)
    quarantine: QuarantineConfig = field(default_factory=QuarantineConfig)


@dataclass(frozen=True, slots=True)
class DaemonConfig:
    """How the reconciler daemon runs (not what it decides: that is ``policy``)."""

    metrics_port: int = knob(9309, ge(0))  # Prometheus /metrics port; 0 = off
    metrics_addr: str = knob("127.0.0.1")  # address the metrics server binds
    backoff_max_s: float = knob(600.0, gt(0))  # longest wait after Slurm/DB failures
    lock_key: int = knob(0x736C_6D6C_6461_656D, ge(1))  # PostgreSQL advisory lock ("slmldaem")
    # Unix datagram socket the daemon listens on for submitd's wakes ("" = none):
    # policy.fast_lane.wake_min_gap_s.
    wake_socket: str = knob("/run/slurm-ml/daemon-wake.sock")


@dataclass(frozen=True, slots=True)
class SubmitdConfig:
    """How the admission server runs (what it decides is ``policy.admission``)."""

    # Prometheus /metrics port of submitd; 0 = off. A second submitd on the host finds
    # it in use and runs without one.
    metrics_port: int = knob(9310, ge(0))
    metrics_addr: str = knob("127.0.0.1")  # address submitd's metrics server binds


@dataclass(frozen=True, slots=True)
class SlurmConfig:
    """How slurm-ml drives the Slurm commands."""

    command_timeout_s: float = knob(30.0, gt(0))  # every Slurm command is killed after this
    scontrol_batch_size: int = knob(500, ge(1))  # jobs per scontrol process (SiteFactor pushes)


_SPOOL_DIR = Path("/var/spool/slurm-ml")


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """Where slurm-ml keeps its state."""

    dsn: str = knob("")  # PostgreSQL DSN; empty = the caller reads $SLURM_ML_DSN
    # Writes made while PostgreSQL is down land here first. (Path is immutable: RUF009 is moot.)
    spool_dir: Path = knob(_SPOOL_DIR, absolute)  # noqa: RUF009
    connect_timeout_s: float = knob(5.0, gt(0))  # PostgreSQL connect timeout

    def resolve_dsn(self, option: str | None = None) -> str:
        """The DSN to use: ``--dsn``, else ``$SLURM_ML_DSN`` (slurm-ml.env, which install
        writes and systemd's EnvironmentFile reads), else ``store.dsn``; "" for none."""
        return option or env("SLURM_ML_DSN") or self.dsn


#: Debian's prometheus-node-exporter reads its textfile collector from here.
_TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"


@dataclass(frozen=True, slots=True)
class HealthConfig:
    """What the node health hooks publish besides their drains and records."""

    # node_exporter's textfile collector directory: each periodic check writes its node's
    # slurm-ml-<node>.prom there (absent directory: nothing written). "" = no textfile.
    textfile_dir: str = knob(_TEXTFILE_DIR, absolute_or_off)


# --------------------------------------------------------------------------- cluster


@dataclass(frozen=True, slots=True)
class PartitionConfig:
    """A Slurm partition slurm-ml manages."""

    name: str
    nodes: str  # ClusterShell NodeSet expression, as written
    default: bool
    max_time_min: int


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """The Slurm cluster as slurm-ml manages it."""

    name: str  # Slurm ClusterName (lower case)
    partitions: tuple[PartitionConfig, ...]

    @property
    def default_partition(self) -> PartitionConfig:
        """The partition with ``default: true`` (a loaded config has exactly one)."""
        for part in self.partitions:
            if part.default:
                return part
        raise LookupError("no default partition")


@dataclass(frozen=True)
class Config:
    """The whole validated configuration. Not slotted: it caches node lookups."""

    cluster: ClusterConfig
    gpu_types: dict[str, GpuType]  # key = GpuType.name (the GRES type)
    node_classes: tuple[NodeClass, ...]
    budgets: BudgetTree
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    submitd: SubmitdConfig = field(default_factory=SubmitdConfig)
    health: HealthConfig = field(default_factory=HealthConfig)

    @cached_property
    def _node_index(self) -> dict[str, NodeClass]:
        index: dict[str, NodeClass] = {}
        for node_class in self.node_classes:
            for node in nodeset(node_class.nodes):
                index[str(node)] = node_class
        return index

    @cached_property
    def _all_nodes(self) -> tuple[str, ...]:
        union = nodeset("")
        for node_class in self.node_classes:
            union.update(nodeset(node_class.nodes))
        return tuple(str(node) for node in union)

    def all_nodes(self) -> list[str]:
        """Every node of every node class, expanded, in ClusterShell's natural
        order (gpu2 before gpu10; same as sorted() for zero-padded names)."""
        return list(self._all_nodes)

    def total_gpus(self) -> int:
        """The GPUs of every node the config lists (contracts' cap, the fast lane's)."""
        return sum(c.gpus_per_node for n in self.all_nodes() if (c := self.node_class_of(n)))

    def node_class_of(self, node: str) -> NodeClass | None:
        """The node class a node belongs to, None for a node slurm-ml does not know."""
        return self._node_index.get(node)

    def gpu_type_of_node(self, node: str) -> GpuType | None:
        node_class = self.node_class_of(node)
        return None if node_class is None else self.gpu_types.get(node_class.gpu_type)


