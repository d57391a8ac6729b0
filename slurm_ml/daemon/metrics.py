"""Prometheus metrics of the reconciler, on a registry of its own (tests make many).

The ``slurm_ml_config_*`` ones say whether the config the daemon runs on is the file on
disk: a SIGHUP whose file is refused leaves the daemon running on the config it had, and
nothing else shows it (the daemon keeps cycling, as it should).

The state gauges (owned drains, breakers, starved allocations: ``daemon.gauges``) are
what the last cycle this daemon led saw. A daemon that is not the leader clears them:
what it showed would grow old beside the leader's, and the alert rules take the
greatest value over every daemon. A series whose node, class, check or account is gone
is removed, not left at its last value."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from slurm_ml.config import Config
from slurm_ml.daemon.apply import ApplyReport
from slurm_ml.daemon.gauges import StateGauges
from slurm_ml.daemon.plan import Plan

#: A cycle's outcomes (``daemon.loop.CycleResult``).
OUTCOMES = ("acted", "dry_run", "passive", "slurm_unavailable", "store_unavailable")


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.cycle_seconds = Histogram(
            "slurm_ml_daemon_cycle_seconds", "Wall time of one observe-decide-apply cycle",
            registry=r, buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120))
        self.cycles = Counter("slurm_ml_daemon_cycles_total", "Cycles by outcome",
                              ["outcome"], registry=r)
        # every outcome from the start, at 0: increase() misses the sample that creates a
        # series, so an outage's first failed cycles would not count
        for outcome in OUTCOMES:
            self.cycles.labels(outcome)
        self.actions = Counter("slurm_ml_daemon_actions_total",
                               "Actions by kind and result (applied, already, failed, would)",
                               ["kind", "result"], registry=r)
        self.site_factor_jobs = Counter("slurm_ml_daemon_site_factor_updates_total",
                                        "Pending jobs whose SiteFactor was pushed", registry=r)
        self.leader = Gauge("slurm_ml_daemon_leader",
                            "1 while this daemon holds the leader lock", registry=r)
        self.owed = Gauge("slurm_ml_allocation_owed_gpu_hours",
                          "Owed billing GPU-hours in the window", ["account"], registry=r)
        self.delivered = Gauge("slurm_ml_allocation_delivered_gpu_hours",
                               "Delivered (allocated) billing GPU-hours in the window",
                               ["account"], registry=r)
        self.last_cycle = Gauge("slurm_ml_daemon_last_cycle_timestamp_seconds",
                                "When the last cycle finished", registry=r)
        self.wakes = Counter("slurm_ml_daemon_wakes_total",
                             "submitd's fast-lane wakes received (a cycle each, at most "
                             "one per fast_lane.wake_min_gap_s)", registry=r)
        self.woken_cycles = Counter("slurm_ml_daemon_woken_cycles_total",
                                    "Cycles run early for a wake", registry=r)
        self.config_reload_failed = Gauge(
            "slurm_ml_config_reload_failed",
            "1 while the last config reload (SIGHUP) failed and the daemon runs on the "
            "config it had before; 0 once a reload succeeds", registry=r)
        self.config_reloads = Counter("slurm_ml_config_reloads_total",
                                      "Config reloads (SIGHUP) by result: ok, failed",
                                      ["result"], registry=r)
        for result in ("ok", "failed"):
            self.config_reloads.labels(result)  # both series from the start, at 0
        self.config_loaded = Gauge(
            "slurm_ml_config_last_reload_success_timestamp_seconds",
            "When the config the daemon runs on was read (at start or the last "
            "successful reload)", registry=r)
        self.owned_drain = Gauge(
            "slurm_ml_node_owned_drain",
            "1 while Slurm shows the node drained with a reason slurm-ml owns (it starts "
            "with slurm-ml:), so slurm-ml may resume it", ["node"], registry=r)
        self.breaker_open = Gauge(
            "slurm_ml_breaker_open",
            "1 while the node class's circuit breaker would refuse the next drain there "
            "(an alarm is open, or its drains in the window spent the budget)",
            ["node_class"], registry=r)
        self.breaker_tripped = Gauge(
            "slurm_ml_breaker_tripped",
            "1 while the node class's breaker alarm is open: drains there stop until "
            "`slurm-ml quarantine reset CLASS`", ["node_class"], registry=r)
        self.check_breaker_open = Gauge(
            "slurm_ml_check_breaker_open",
            "1 while the check's circuit breaker would refuse its next drain (an alarm is "
            "open, or its drains in the window spent the fleet's budget)", ["check"],
            registry=r)
        self.check_breaker_tripped = Gauge(
            "slurm_ml_check_breaker_tripped",
            "1 while the check's breaker alarm is open: the check drains nowhere until "
            "`slurm-ml quarantine reset --check CHECK`", ["check"], registry=r)
        self.starved_wait = Gauge(
            "slurm_ml_allocation_starved_wait_seconds",
            "How long the project's longest-starved job has waited (allocated work of an "
            "under-served allocation that cannot start on the free GPUs, past "
            "preempt_after_wait_s); 0 when none is starved", ["account"], registry=r)
        self.runtime_cap = Gauge(
            "slurm_ml_contracts_min_runtime_cap_seconds",
            "policy.contracts.min_runtime_cap_min in seconds: the longest protected "
            "runtime, so the longest a starved job may wait for victims to become "
            "requeueable", registry=r)
        #: the label values each labelled state gauge shows now
        self._shown: dict[Gauge, set[str]] = {}

    def state(self, cfg: Config, gauges: StateGauges) -> None:
        """Show a led cycle's state gauges (``daemon.gauges``)."""
        self._show(self.owned_drain, {n: float(v) for n, v in gauges.owned_drains.items()})
        self._show(self.breaker_open, {c: float(s.refusing)
                                       for c, s in gauges.class_breakers.items()})
        self._show(self.breaker_tripped, {c: float(s.tripped)
                                          for c, s in gauges.class_breakers.items()})
        self._show(self.check_breaker_open, {c: float(s.refusing)
                                             for c, s in gauges.check_breakers.items()})
        self._show(self.check_breaker_tripped, {c: float(s.tripped)
                                                for c, s in gauges.check_breakers.items()})
        self._show(self.starved_wait, {a: float(w) for a, w in gauges.starved_wait_s.items()})
        self.runtime_cap.set(cfg.policy.contracts.min_runtime_cap_min * 60)

    def not_leading(self) -> None:
        """This daemon does not lead (passive, or the lock unknown): no state of its own."""
        for gauge in (self.owned_drain, self.breaker_open, self.breaker_tripped,
                      self.check_breaker_open, self.check_breaker_tripped, self.starved_wait):
            self._show(gauge, {})

    def _show(self, gauge: Gauge, values: Mapping[str, float]) -> None:
        """``gauge`` with exactly the series of ``values``: others removed."""
        for gone in self._shown.get(gauge, set()) - values.keys():
            gauge.remove(gone)
        for label, value in values.items():
            gauge.labels(label).set(value)
        self._shown[gauge] = set(values)

    def config_read(self, ok: bool, at: float) -> None:
        """A reload's outcome (``ok`` False: refused, the old config kept)."""
        self.config_reloads.labels("ok" if ok else "failed").inc()
        self.config_reload_failed.set(0 if ok else 1)
        if ok:
            self.config_loaded.set(at)

    def serve(self, port: int, addr: str) -> None:
        if port:
            start_http_server(port, addr=addr, registry=self.registry)

    def record(self, plan: Plan, report: ApplyReport) -> None:
        for result, actions in (("applied", report.applied), ("already", report.already),
                                ("would", report.would)):
            for a in actions:
                self.actions.labels(a.decision, result).inc()
        for a, _error in report.failed:
            self.actions.labels(a.decision, "failed").inc()
        if not report.dry_run:
            self.site_factor_jobs.inc(report.site_factor_jobs)
        for s in plan.fair.standings:
            if s.kind != "user":
                self.owed.labels(s.account).set(s.owed)
                self.delivered.labels(s.account).set(s.delivered)
