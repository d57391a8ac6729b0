"""submitd's wake for the daemon (``slurm_ml.wake``): the datagram, the listener on a real
Unix socket, the pure timing rules (``policy.lane_requeue``), and the daemon's loop
bringing a cycle forward for a wake without moving its regular schedule."""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_helpers import config, daemon, world

from slurm_ml.config import FastLaneConfig
from slurm_ml.daemon.loop import Daemon
from slurm_ml.policy.lane_requeue import wake_cycle_at, wake_for, wake_times, wakes_on
from slurm_ml.store.fake import FakeStore
from slurm_ml.wake import Wake, WakeBox, WakeError, WakeListener, decode, encode, send_wake

LANE = {"preempt_cap_fraction": 0.25, "preempt_after_s": 0, "wake_min_gap_s": 0.5}


def _short_socket(tmp_path: Path) -> Path:
    """A socket path under AF_UNIX's 108-byte limit (pytest's tmp_path can exceed it)."""
    if len(str(tmp_path / "w.sock")) < 100:
        return tmp_path / "w.sock"
    d = Path("/tmp") / f"wake-{os.getpid()}-{time.monotonic_ns()}"
    d.mkdir()
    return d / "w.sock"


# --------------------------------------------------------------------------- the datagram


def test_a_wake_round_trips() -> None:
    w = Wake(1_800_000_000.5, "debug", "llm-eval")
    assert decode(encode(w)) == w


@pytest.mark.parametrize("data", [
    b"\xff\xfe", b"not json", b"[1]", json.dumps({"v": 2, "op": "lane", "at": 1}).encode(),
    json.dumps({"v": 1, "op": "stop", "at": 1}).encode(),
    json.dumps({"v": 1, "op": "lane", "at": "soon"}).encode(),
    json.dumps({"v": 1, "op": "lane", "at": True}).encode(),
    json.dumps({"v": 1, "op": "lane"}).encode(),
    b'{"v": 1, "op": "lane", "at": NaN}',
])
def test_anything_else_is_a_named_error(data: bytes) -> None:
    with pytest.raises(WakeError):
        decode(data)


# --------------------------------------------------------------------------- the socket


@pytest.fixture
def sock_path(tmp_path: Path) -> Path:
    return _short_socket(tmp_path)


@pytest.fixture
def received(sock_path: Path) -> Iterator[tuple[WakeListener, list[Wake], threading.Event]]:
    got: list[Wake] = []
    arrived = threading.Event()

    def on_wake(w: Wake) -> None:
        got.append(w)
        arrived.set()

    listener = WakeListener(sock_path, on_wake)
    yield listener, got, arrived
    listener.close()


def test_the_listener_gets_what_submitd_sends(
        sock_path: Path, received: tuple[WakeListener, list[Wake], threading.Event]) -> None:
    _listener, got, arrived = received
    assert stat.S_IMODE(sock_path.stat().st_mode) == 0o660
    assert send_wake(str(sock_path), Wake(5.0, "d", "nlp"))
    assert arrived.wait(5)
    assert got == [Wake(5.0, "d", "nlp")]


def test_a_bad_datagram_is_dropped_and_the_listener_goes_on(
        sock_path: Path, received: tuple[WakeListener, list[Wake], threading.Event]) -> None:
    listener, got, arrived = received
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.sendto(b"garbage", str(sock_path))
    assert send_wake(str(sock_path), Wake(6.0))
    assert arrived.wait(5)
    assert got == [Wake(6.0)] and listener.rejected == 1


def test_a_second_listener_does_not_steal_a_live_socket(
        sock_path: Path, received: tuple[WakeListener, list[Wake], threading.Event]) -> None:
    with pytest.raises(WakeError, match="another process listens"):
        WakeListener(sock_path, lambda w: None)
    assert send_wake(str(sock_path), Wake(7.0))  # the first one still has it
    assert received[2].wait(5)


def test_a_stale_socket_file_is_replaced_and_close_removes_it(sock_path: Path) -> None:
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    stale.bind(str(sock_path))
    stale.close()  # the file stays, nobody listens: a daemon that was killed
    assert not send_wake(str(sock_path), Wake(1.0))
    listener = WakeListener(sock_path, lambda w: None)
    assert send_wake(str(sock_path), Wake(1.0))
    listener.close()
    assert not sock_path.exists()


def test_sending_never_fails_the_caller(tmp_path: Path) -> None:
    assert not send_wake("", Wake(1.0))
    assert not send_wake(str(tmp_path / "nobody.sock"), Wake(1.0))
    assert not send_wake(str(tmp_path / "no" / "such" / "dir.sock"), Wake(1.0))


# --------------------------------------------------------------------------- timing rules


def test_the_timing_rules() -> None:
    lane = FastLaneConfig(preempt_cap_fraction=0.02, preempt_after_s=30, wake_min_gap_s=10)
    assert wakes_on(lane)
    assert wakes_on(FastLaneConfig(preempt_cap_fraction=0.0))  # Slurm's preemption's end
    assert not wakes_on(FastLaneConfig(preempt_cap_fraction=0.02, wake_min_gap_s=0))
    assert wake_for(100.0, lane) == 131.0  # waited preempt_after_s, plus a second
    # Slurm preempts free work within 2 s of the submission; its 30 s grace ends by 132
    assert wake_times(100.0, lane, free_grace_s=30, total_gpus=512) == (131.0, 133.0)
    assert wake_times(100.0, FastLaneConfig(preempt_cap_fraction=0.0), 30, 512) == (133.0,)
    assert wake_times(100.0, FastLaneConfig(preempt_cap_fraction=0.0), 0, 512) == (103.0,)
    # 2% of 49 GPUs floors to no lane requeue at all: no cycle to ask for it
    assert wake_times(100.0, lane, free_grace_s=30, total_gpus=49) == (133.0,)
    assert wake_times(100.0, lane, free_grace_s=30, total_gpus=50) == (131.0, 133.0)
    assert wake_cycle_at(131.0, None, lane) == 131.0
    assert wake_cycle_at(131.0, 100.0, lane) == 131.0
    assert wake_cycle_at(131.0, 125.0, lane) == 135.0  # no closer than the gap


def test_the_box_keeps_the_earliest_and_drops_what_a_cycle_served() -> None:
    box = WakeBox()
    for at in (30.0, 10.0, 20.0):
        box.request(at)
    assert box.next_at() == 10.0
    assert box.served(20.0) == 2
    assert box.next_at() == 30.0 and box.received == 3


# --------------------------------------------------------------------------- the loop


class _Counting(Daemon):
    """A daemon whose cycles are counted and timed (real clock, fake Slurm and store)."""

    def __init__(self, base: Daemon) -> None:
        super().__init__(base.cfg, slurm=base.slurm, store=base.store, lock=base.lock)
        self.started: list[float] = []
        self.cycled = threading.Condition()

    def cycle(self):  # type: ignore[no-untyped-def]
        result = super().cycle()
        with self.cycled:
            self.started.append(time.time())
            self.cycled.notify_all()
        return result

    def wait_cycles(self, n: int, timeout_s: float) -> bool:
        with self.cycled:
            return self.cycled.wait_for(lambda: len(self.started) >= n, timeout_s)


def _running(cfg_lane: dict[str, float], interval_s: float) -> tuple[_Counting, threading.Thread]:
    cfg = config(fast_lane=cfg_lane, fairshare={"cycle_interval_s": interval_s})
    d = _Counting(daemon(world(), FakeStore(), cfg=cfg, clock=time.time))
    t = threading.Thread(target=d.run, daemon=True)
    t.start()
    assert d.wait_cycles(1, 30)
    return d, t


def test_a_wake_brings_a_cycle_forward_and_the_regular_one_stays(sock_path: Path) -> None:
    d, t = _running(LANE, interval_s=3.0)
    listener = WakeListener(sock_path, d.wake)
    try:
        first = d.started[0]
        # a job laned a second ago (preempt_after_s 0): its cycle is due now
        assert send_wake(str(sock_path), Wake(time.time() - 1, "debug", "llm-eval"))
        assert d.wait_cycles(2, 5)
        assert d.started[1] - first < 2.5  # before the regular cycle at +3 s
        assert d.metrics.wakes._value.get() == 1
        assert d.wait_cycles(3, 10)
        # the regular cycle kept its time: 3 s after the first, not after the woken one
        assert abs(d.started[2] - (first + 3.0)) < 1.5
        assert d.metrics.woken_cycles._value.get() == 1
    finally:
        d.stop.set()
        t.join(10)
        listener.close()


def test_wakes_run_no_closer_than_the_gap() -> None:
    d, t = _running({**LANE, "wake_min_gap_s": 1.5}, interval_s=60.0)
    try:
        for _ in range(5):
            d.wake(Wake(time.time() - 1))
        assert d.wait_cycles(2, 5)
        assert d.started[1] - d.started[0] >= 1.4
        d.wake(Wake(time.time() - 1))
        assert d.wait_cycles(3, 5)
        assert d.started[2] - d.started[1] >= 1.4
        assert not d.wait_cycles(4, 2)  # the five wakes were served by the first one
    finally:
        d.stop.set()
        t.join(10)


def test_a_wake_is_ignored_while_wakes_are_off() -> None:
    d = daemon(world(), FakeStore(), cfg=config(fast_lane={"wake_min_gap_s": 0}))
    d.wake(Wake(1.0))
    assert d.wakes.next_at() is None and d.due_wake() is None


def test_without_lane_requeues_a_wake_asks_for_the_end_of_slurms_grace() -> None:
    """The lane's requeues off (cap fraction 0): Slurm still preempts free work for the laned
    job, and a cycle at the grace's end finishes that (``policy.preempt_grace``)."""
    cfg = config(fast_lane={"preempt_cap_fraction": 0.0, "wake_min_gap_s": 10},
                 contracts={"free_grace_s": 30})
    d = daemon(world(), FakeStore(), cfg=cfg)
    d.wake(Wake(1000.0))
    assert d.wakes.next_at() == 1000.0 + 2 + 30 + 1


def test_after_a_failure_the_back_off_decides_not_a_wake() -> None:
    d = daemon(world(), FakeStore(), cfg=config(fast_lane=LANE))
    d.wake(Wake(1.0))
    assert d.due_wake() == 2.0
    d.failures = 1
    assert d.due_wake() is None


def test_a_signalled_requeue_gets_a_cycle_when_its_grace_ends() -> None:
    """The requeue itself comes from the first cycle after the grace: the daemon wakes
    itself for it rather than leaving the starved job to wait up to an interval more."""
    from daemon_helpers import NOW

    cfg = config(fast_lane=LANE, contracts={"requeue_grace_s": 45.0,
                                            "requeue_signal": "USR1"})
    d = daemon(world(), FakeStore(), cfg=cfg)
    result = d.cycle()
    assert result.report is not None
    assert [a.job_id for a in result.report.signalled] == [1]
    assert d.wakes.next_at() == NOW + 45
    off = config(fast_lane={**LANE, "wake_min_gap_s": 0},
                 contracts={"requeue_grace_s": 45.0, "requeue_signal": "USR1"})
    quiet = daemon(world(), FakeStore(), cfg=off)
    quiet.cycle()
    assert quiet.wakes.next_at() is None
