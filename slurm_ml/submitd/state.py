"""Keep admission's view of budgets and GPU memory profiles fresh, off the request path.

A background thread reads PostgreSQL every ``state_refresh_s`` (or when poked) and swaps
in a new immutable AdmissionState. If the database is down the last good state stays in
use and the failure is logged once per outage: admission degrades, it never blocks. The
same pass reads users' default accounts from slurmdbd (``sacctmgr show user``), so a
job without ``-A`` is routed, and named, by the account Slurm will charge it to; if
sacctmgr fails the last ones read stay.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from slurm_ml.config import Config
from slurm_ml.policy.admission.state import (
    AdmissionState,
    LaneAdmission,
    account_standing,
    carry_lane_admissions,
    window_capacity_gpu_hours,
    with_lane_admission,
)
from slurm_ml.slurm.errors import SlurmError
from slurm_ml.slurm.protocol import SlurmClient
from slurm_ml.store.errors import StoreError
from slurm_ml.store.protocol import Store
from slurm_ml.store.records import BudgetSnapshot, GpuMemProfile

log = logging.getLogger(__name__)


def build_state(cfg: Config, snapshots: Sequence[BudgetSnapshot],
                profiles: Sequence[GpuMemProfile], now: datetime) -> AdmissionState:
    """Store rows → the AdmissionState policy reads."""
    capacity = window_capacity_gpu_hours(cfg)
    standing = {
        s.account: account_standing(s.account, s.budget_share, s.usage_gpu_hours,
                                    s.site_factor, capacity, lane_gpus=s.lane_gpus,
                                    lane_at=s.taken_at)
        for s in snapshots
    }
    gb = {(p.user, p.job_name): p.p95_mem_mb / 1024 for p in profiles}
    return AdmissionState(standing=standing, profiles_gb=gb, loaded_at=now)


class StateRefresher:
    """Owns the current AdmissionState; ``current`` is safe to read from any thread."""

    def __init__(self, store: Store | None, cfg: Config,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC), *,
                 slurm: SlurmClient | None = None) -> None:
        self._store = store
        self._slurm = slurm
        self.slurm_error: str | None = None
        self._cfg = cfg
        self._clock = clock
        self.current = AdmissionState()
        self.generation = 0
        # refresh requests (``request_refresh``) and the latest one a finished refresh
        # read the store after: a refresh already under way when a request came may have
        # read the store before what the requester wrote
        self.requested = 0
        self.served = 0
        self.last_error: str | None = None
        self._swap = threading.Lock()  # ``current`` is replaced by refreshes and lane notes
        self._poke = threading.Event()
        self._stop = threading.Event()
        self._done = threading.Condition()
        self._thread: threading.Thread | None = None

    def set_config(self, cfg: Config) -> None:
        self._cfg = cfg
        self.poke()

    def refresh_once(self) -> bool:
        """Load from the store (and slurmdbd's default accounts) now; False (store state
        kept) when there is no store or it failed."""
        defaults = self._default_accounts()
        if defaults is not None and defaults != self.current.default_accounts:
            with self._swap:
                self.current = replace(self.current, default_accounts=defaults)
        if self._store is None:
            return False
        with self._done:
            wanted = self.requested
        try:
            snapshots = self._store.latest_budget_snapshots()
            profiles = self._store.gpu_mem_profiles(self._cfg.policy.admission.profile_runs)
        except StoreError as exc:
            if self.last_error is None:
                log.error("state refresh failed, keeping the state from %s: %s",
                          self.current.loaded_at, exc)
            self.last_error = str(exc)
            return False
        fresh = build_state(self._cfg, snapshots, profiles, self._clock())
        with self._swap:
            self.current = replace(carry_lane_admissions(self.current, fresh),
                                   default_accounts=self.current.default_accounts)
        if self.last_error is not None:
            log.warning("state refresh works again")
        self.last_error = None
        with self._done:
            self.generation += 1
            self.served = max(self.served, wanted)
            self._done.notify_all()
        log.info("state refreshed generation=%d accounts=%d profiles=%d", self.generation,
                 len(self.current.standing), len(self.current.profiles_gb))
        return True

    def note_lane(self, entry: LaneAdmission) -> None:
        """Admission just put a job in the fast lane: count it until a cycle does."""
        with self._swap:
            self.current = with_lane_admission(self.current, entry)

    def _default_accounts(self) -> Mapping[str, str] | None:
        if self._slurm is None:
            return None
        try:
            got = self._slurm.default_accounts()
        except SlurmError as exc:
            if self.slurm_error is None:
                log.error("default accounts unreadable (sacctmgr), keeping the last: %s", exc)
            self.slurm_error = str(exc)
            return None
        if self.slurm_error is not None:
            log.warning("default accounts readable again")
        self.slurm_error = None
        return got

    def poke(self) -> None:
        self._poke.set()

    def request_refresh(self) -> int:
        """Ask for a refresh that reads the store after now; its number, which ``served``
        reaches once such a refresh has finished (a writer then knows submitd saw it)."""
        with self._done:
            self.requested += 1
            number = self.requested
        self.poke()
        return number

    def wait_generation(self, after: int, timeout_s: float) -> bool:
        with self._done:
            return self._done.wait_for(lambda: self.generation > after, timeout_s)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="state-refresh", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._poke.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.refresh_once()
            except Exception:  # keep refreshing; a bad row must not freeze the state forever
                log.exception("state refresh crashed; keeping the last good state")
            self._poke.wait(self._cfg.policy.admission.state_refresh_s)
            self._poke.clear()
