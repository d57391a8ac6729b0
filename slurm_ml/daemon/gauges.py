"""What the daemon's state gauges show, from one cycle's observation and plan (pure).

Each value is the decision slurm-ml makes elsewhere, asked again, never a copy of it: a
node's drain is slurm-ml's by ``policy.quarantine.owned`` (what every resume asks); a
breaker refuses the next drain by ``policy.quarantine.breaker_states`` over the inputs
the hooks' breakers read (``daemon.repair_view.breaker_view``); a job is starved by
``policy.contracts.is_starved`` (``daemon.plan.starved_waits``). Alert rules read these,
so that an alert and the action it is about cannot disagree.

Labels stay bounded: Slurm's nodes, the config's node classes and projects, and the check
ids that drained in the breakers' window (or have an alarm open).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime

from slurm_ml.config import Config
from slurm_ml.daemon.observe import Observation
from slurm_ml.daemon.plan import Plan
from slurm_ml.policy.quarantine import BreakerState, breaker_states, owned


@dataclass(frozen=True, slots=True)
class StateGauges:
    """One cycle's gauges. ``starved_wait_s`` has every project, 0 when none of its jobs
    is starved, so that a rule compares a number rather than asks for a series."""

    owned_drains: dict[str, bool]  # every node Slurm lists: drained with an owned reason
    class_breakers: dict[str, BreakerState]
    check_breakers: dict[str, BreakerState]
    starved_wait_s: dict[str, int]


def state_gauges(cfg: Config, obs: Observation, plan: Plan) -> StateGauges:
    """The gauges of a cycle that observed ``obs`` and planned ``plan``."""
    drains = {n.name: n.drained and owned(n.reason) for n in obs.nodes}
    classes: dict[str, BreakerState] = {}
    checks: dict[str, BreakerState] = {}
    if obs.breakers is not None:  # None: no store was read (a view, not a cycle)
        sizes = Counter(c.name for n in cfg.all_nodes()
                        if (c := cfg.node_class_of(n)) is not None)
        b = obs.breakers
        for scope, state in breaker_states(
                {c.name: sizes[c.name] for c in cfg.node_classes}, len(cfg.all_nodes()),
                history=b.history, alarms=b.alarms,
                now=_datetime(obs.now), cfg=cfg.policy.quarantine,
                resets=b.resets).items():
            (classes if scope.kind == "class" else checks)[scope.name] = state
    projects = [s.account for s in plan.fair.standings if s.kind == "project"]
    starved = {a: plan.starved.get(a, 0) for a in projects}
    return StateGauges(drains, classes, checks, starved)


def _datetime(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)
