"""The reconciler loop: leader lock, back-off, config reload, one cycle at a time.

A cycle acts only while this process holds the PostgreSQL advisory lock; a second
daemon stays passive and takes over when the leader's session dies. Slurm or the
database being unreachable ends the cycle before it decides anything and the next try
comes after an exponential back-off (capped by ``daemon.backoff_max_s``). SIGHUP
re-reads the config, between cycles too; a bad file is logged and the old config stays
(``slurm_ml_config_reload_failed`` says so), and no failure of the reload stops the
daemon.

Between regular cycles a wake from submitd (:mod:`slurm_ml.wake`: a job entered the
fast lane) brings cycles forward to when that job may get room: the end of the grace of
the free work Slurm preempts for it, and the lane's requeues; a cycle that sees a
preemption in its grace comes back at its end. Regular cycles keep their own schedule.
"""

from __future__ import annotations

import json
import logging
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from slurm_ml import proc
from slurm_ml.config import Config, ConfigError, load_config
from slurm_ml.daemon import reasons
from slurm_ml.daemon.apply import Applier, ApplyReport
from slurm_ml.daemon.gauges import state_gauges
from slurm_ml.daemon.metrics import Metrics
from slurm_ml.daemon.observe import observe
from slurm_ml.daemon.plan import Action, Plan, plan_cycle
from slurm_ml.policy.lane_requeue import wake_cycle_at, wake_times, wakes_on
from slurm_ml.slurm.errors import SlurmError
from slurm_ml.slurm.protocol import SlurmClient
from slurm_ml.store.errors import StoreError
from slurm_ml.store.leader import LeaderLock
from slurm_ml.store.protocol import Store
from slurm_ml.wake import Wake, WakeBox

log = logging.getLogger(__name__)

#: How often a sleeping loop looks at its wakes (the listener's thread adds them) and
#: for a SIGHUP.
_WAKE_POLL_S = 0.25
#: The most issues of a refused config one log line lists (the file has them all).
_LOGGED_ISSUES = 10


@dataclass(slots=True)
class CycleResult:
    """What one cycle did. ``outcome``: acted | dry_run | passive | slurm_unavailable
    (reading Slurm failed, or an action failed) | store_unavailable."""

    cycle: int
    outcome: str
    seconds: float = 0.0
    message: str = ""
    plan: Plan | None = None
    report: ApplyReport | None = None
    leader: bool = False
    counts: dict[str, int] = field(default_factory=dict)


def notify_command(command: str) -> Callable[[Action], None] | None:
    """A warning hook: ``command`` gets the warning as JSON on stdin (never via a shell)."""
    if not command:
        return None
    try:
        argv = shlex.split(command)
    except ValueError as exc:  # the config loader refuses this; belt and braces
        log.error("event=notify_unusable command=%r error=%s", command, exc)
        return None

    def notify(action: Action) -> None:
        payload = {"job_id": action.job_id, "kind": action.decision, "reason": action.reason,
                   "details": action.details}
        try:
            proc.run(argv, input_text=json.dumps(payload) + "\n", timeout_s=10)
        except (proc.CommandError, OSError) as exc:  # OSError: e.g. a script without #!
            log.warning("event=notify_failed job=%s error=%s", action.job_id, exc)

    return notify


class Daemon:
    def __init__(self, cfg: Config, *, slurm: SlurmClient, store: Store, lock: LeaderLock,
                 config_path: Path | None = None, dry_run: bool = False,
                 metrics: Metrics | None = None, clock: Callable[[], float] = time.time,
                 after_intent: Callable[[Action], None] | None = None) -> None:
        """``after_intent`` runs after each action's intent is recorded, before the action
        (:class:`~slurm_ml.daemon.apply.Applier`): a test's hook, e.g. to kill the daemon
        between the two."""
        self.cfg = cfg
        self.slurm = slurm
        self.store = store
        self.lock = lock
        self.config_path = config_path
        self.dry_run = dry_run
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.after_intent = after_intent
        self.failures = 0
        self.reload_requested = False
        self.stop = threading.Event()
        self.wakes = WakeBox()
        self.last_cycle_at: float | None = None  # when the last cycle began (epoch)
        #: pending jobs' starving reasons from before this daemon pushed their SiteFactor
        #: (Slurm shows None until it next reaches them: ``daemon.reasons``)
        self.kept_reasons: dict[int, str] = {}
        self.metrics.config_loaded.set(self.clock())  # cfg was read just now, by the caller

    # ------------------------------------------------------------------ config

    def reload(self) -> bool:
        """Re-read the config file; keep the old config when the new one is bad.

        Never raises: SIGHUP with a broken file in place must not stop the reconciler.
        The loader reports every problem of a file as a ConfigError; anything else it
        raises (a bug) is logged with its traceback and treated the same way.
        """
        self.reload_requested = False
        if self.config_path is None:
            return False
        try:
            cfg = load_config(self.config_path)
        except ConfigError as exc:
            log.error("event=config_reload_rejected path=%s issues=%d errors=%s (keeping "
                      "the running config)", self.config_path, len(exc.issues),
                      json.dumps([str(issue) for issue in exc.issues[:_LOGGED_ISSUES]]))
            self.metrics.config_read(False, self.clock())
            return False
        except Exception as exc:
            log.exception("event=config_reload_failed path=%s error=%s (keeping the running "
                          "config)", self.config_path, json.dumps(f"{type(exc).__name__}: "
                                                                  f"{exc}"[:500]))
            self.metrics.config_read(False, self.clock())
            return False
        self.cfg = cfg
        # The log line before the metric: whoever sees the metric change finds the line.
        log.info("event=config_reloaded path=%s", self.config_path)
        self.metrics.config_read(True, self.clock())
        return True

    # ------------------------------------------------------------------ leadership

    def _leader(self) -> bool:
        if self.dry_run:
            return True  # a dry run changes nothing, so it needs no lock
        if self.lock.held():
            return True
        return self.lock.try_acquire()

    def _still_leader(self) -> bool:
        return self.dry_run or self.lock.held()

    # ------------------------------------------------------------------ one cycle

    def cycle(self) -> CycleResult:
        if self.reload_requested:
            self.reload()
        start = time.monotonic()
        began = self.clock()
        now = int(began)
        self.last_cycle_at = began
        self.wakes.served(began)  # their jobs have waited long enough by now
        try:
            leader = self._leader()
        except StoreError as exc:
            self.metrics.leader.set(0)
            self.metrics.not_leading()
            return self._end(CycleResult(now, "store_unavailable", message=str(exc)), start)
        self.metrics.leader.set(1 if leader and not self.dry_run else 0)
        if not leader:
            self.metrics.not_leading()
            return self._end(CycleResult(now, "passive", message="another daemon holds the "
                                         "leader lock"), start)
        try:
            obs = observe(self.cfg, self.slurm, self.store, now)
        except SlurmError as exc:
            return self._end(CycleResult(now, "slurm_unavailable", message=str(exc),
                                         leader=True), start)
        except StoreError as exc:
            return self._end(CycleResult(now, "store_unavailable", message=str(exc),
                                         leader=True), start)
        jobs, restored_ids = reasons.restored(obs.jobs, self.kept_reasons)
        if restored_ids:
            obs = replace(obs, jobs=jobs)
            log.info("cycle=%d event=reasons_kept jobs=%d (Slurm shows None since this "
                     "daemon pushed their SiteFactor)", now, len(restored_ids))
        plan = plan_cycle(self.cfg, obs)
        applier = Applier(self.slurm, self.store, still_leader=self._still_leader,
                          notify=notify_command(self.cfg.policy.reclaim.notify_command),
                          after_intent=self.after_intent, contracts=self.cfg.policy.contracts,
                          lane_grace_s=self.cfg.policy.fast_lane.requeue_grace_s)
        report = applier.apply(plan, dry_run=self.dry_run)
        pushed = plan.changed.keys() if report.site_factor_calls else ()
        self.kept_reasons = reasons.kept_after(obs.jobs, pushed, restored_ids)
        self._wake_at_grace_ends(plan, report, applier)
        self.metrics.record(plan, report)
        self.metrics.state(self.cfg, state_gauges(self.cfg, obs, plan))
        outcome = "dry_run" if self.dry_run else "acted"
        if report.failed:
            outcome = "slurm_unavailable"  # Slurm refused or timed out on an action
        if report.stopped.startswith("store"):
            outcome = "store_unavailable"
        return self._end(CycleResult(now, outcome, plan=plan, report=report, leader=True,
                                     message=report.stopped, counts=report.counts()), start)

    def _end(self, result: CycleResult, start: float) -> CycleResult:
        result.seconds = time.monotonic() - start
        self.metrics.cycle_seconds.observe(result.seconds)
        self.metrics.cycles.labels(result.outcome).inc()
        self.metrics.last_cycle.set(self.clock())
        bad = result.outcome in ("slurm_unavailable", "store_unavailable")
        self.failures = self.failures + 1 if bad else 0
        level = logging.WARNING if bad else logging.INFO
        log.log(level, "cycle=%d event=cycle_end outcome=%s seconds=%.2f counts=%s message=%s",
                result.cycle, result.outcome, result.seconds, json.dumps(result.counts),
                json.dumps(result.message))
        return result

    def next_wait(self) -> float:
        """Seconds until the next cycle: the interval, or a back-off after failures."""
        base = self.cfg.policy.fairshare.cycle_interval_s
        if not self.failures:
            return base
        return float(min(self.cfg.daemon.backoff_max_s, base * 2 ** (self.failures - 1)))

    def _wake_at_grace_ends(self, plan: Plan, report: ApplyReport, applier: Applier) -> None:
        """A signalled requeue is done by the first cycle after its grace, and so is a
        preemption of Slurm's (``plan.wake_at``): have that cycle when the grace ends, not
        up to a whole interval later (the job it makes room for waits through both)."""
        if self.cfg.policy.fast_lane.wake_min_gap_s <= 0:
            return
        for a in report.signalled:
            self.wakes.request(plan.now + int(applier.grace_for(a)))
        for at in plan.wake_at:
            self.wakes.request(at)

    def wake(self, wake: Wake) -> None:
        """submitd laned a job at ``wake.at``: have cycles when it may get room (the
        listener's thread calls this). Ignored while wakes are off."""
        lane = self.cfg.policy.fast_lane
        if not wakes_on(lane):
            return
        self.metrics.wakes.inc()
        for at in wake_times(wake.at, lane, self.cfg.policy.contracts.free_grace_s,
                             self.cfg.total_gpus()):
            self.wakes.request(at)
        log.info("event=wake account=%s name=%s admitted_at=%.0f", wake.account,
                 wake.job_name, wake.at)

    def due_wake(self) -> float | None:
        """When a woken cycle should run (epoch), or None: no wake, wakes are off
        (``wake_min_gap_s`` 0), or the last cycle failed (the back-off then decides)."""
        at = self.wakes.next_at()
        lane = self.cfg.policy.fast_lane
        if at is None or self.failures or lane.wake_min_gap_s <= 0:
            return None
        return wake_cycle_at(at, self.last_cycle_at, lane)

    def _sleep_until(self, regular_at: float) -> str:
        """Sleep until ``regular_at`` or a due wake: "stop", "wake" or "regular"."""
        while True:
            if self.reload_requested:
                # Now, not at the next cycle (up to cycle_interval_s away): an operator
                # who sent SIGHUP looks at the log and the metric straight after.
                self.reload()
            wake_at = self.due_wake()
            at = regular_at if wake_at is None else min(regular_at, wake_at)
            left = at - self.clock()
            if left <= 0:
                return "regular" if at == regular_at else "wake"
            if self.stop.wait(min(left, _WAKE_POLL_S)):
                return "stop"

    def run(self, *, once: bool = False) -> CycleResult:
        """Cycle until ``stop`` is set (or once); returns the last cycle's result. A
        woken cycle leaves the regular schedule as it was."""
        regular_at = 0.0
        woken = False
        while True:
            result = self.cycle()
            if once:
                return result
            if not woken or self.failures:
                regular_at = self.clock() + self.next_wait()
            why = self._sleep_until(regular_at)
            if why == "stop":
                return result
            woken = why == "wake"
            if woken:
                self.metrics.woken_cycles.inc()

    def close(self) -> None:
        self.lock.release()
