"""Prometheus metrics of the reconciler, on a registry of its own (tests make many).

The ``slurm_ml_config_*`` ones say whether the config the daemon runs on is the file on
disk: a SIGHUP whose file is refused leaves the daemon running on the config it had, and
nothing else shows it (the daemon keeps cycling, as it should)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from slurm_ml.daemon.apply import ApplyReport
from slurm_ml.daemon.plan import Plan


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.cycle_seconds = Histogram(
            "slurm_ml_daemon_cycle_seconds", "Wall time of one observe-decide-apply cycle",
            registry=r, buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120))
        self.cycles = Counter("slurm_ml_daemon_cycles_total", "Cycles by outcome",
                              ["outcome"], registry=r)
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
