"""The contracts' room the simulator keeps as jobs start and stop is the room
``placement.node_slots`` computes from every running job, at every cycle."""

from __future__ import annotations

import gc

import pytest
from test_sim_overload_digest import overloaded

from slurm_ml.sim.engine import Engine, simulate
from slurm_ml.sim.room import placement_nodes, placement_nodes_now


@pytest.mark.slow
def test_the_kept_room_is_the_computed_room() -> None:
    cfg, jobs = overloaded()
    engine = Engine(cfg, jobs[:1500], "budget")
    cycles = busy = 0
    for _ in engine.cycles():
        st = engine.st
        running = [t.running_job for t in st.running.values() if t.running_job is not None]
        assert placement_nodes_now(st) == placement_nodes(st, running)
        cycles += 1
        busy += any(s.held for s in placement_nodes_now(st).values())
    assert cycles > 50 and busy > 50


def test_a_run_leaves_the_collector_as_it_found_it() -> None:
    cfg, jobs = overloaded()
    before = gc.get_threshold()
    simulate(cfg, jobs[:200], "fifo")
    assert gc.get_threshold() == before
