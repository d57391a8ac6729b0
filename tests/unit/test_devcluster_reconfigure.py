"""The dev cluster's second `up` on Slurm 24.11: `scontrol reconfigure` re-executes
slurmctld and its reply can be lost although the reconfiguration went through."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from slurm_ml.devcluster.cluster import DevCluster, reply_lost
from slurm_ml.slurm.errors import SlurmCommandError, SlurmTimeout

# What scontrol 24.11.5 printed on the second `devcluster up` (Debian 13 container).
LOST = "slurm_reconfigure error: Socket timed out on send/recv operation"


def lost() -> SlurmCommandError:
    return SlurmCommandError(["scontrol", "reconfigure"], 1, LOST)


def test_a_socket_timeout_or_a_timeout_is_a_lost_reply() -> None:
    assert reply_lost(lost())
    assert reply_lost(SlurmTimeout("scontrol reconfigure: timed out after 30s"))
    refused = SlurmCommandError(["scontrol", "reconfigure"], 1,
                                "slurm_reconfigure error: Access/permission denied")
    assert not reply_lost(refused)


def cluster(fail: Exception | None, pings: list[bool]) -> tuple[DevCluster, list[str]]:
    calls: list[str] = []
    dc = DevCluster.__new__(DevCluster)

    def run(argv: Sequence[str], **_: object) -> str:
        calls.append(" ".join(argv))
        if fail is not None:
            raise fail
        return ""

    def ping() -> bool:
        calls.append("ping")
        return pings.pop(0)

    dc.runner = lambda timeout_s=30.0: run  # type: ignore[assignment,method-assign,misc]
    dc._ping = ping  # type: ignore[method-assign]
    dc.say = lambda _m: None
    return dc, calls


def test_a_lost_reply_then_a_ping_is_success() -> None:
    dc, calls = cluster(lost(), [False, True])
    dc._reconfigure()
    assert calls == ["scontrol reconfigure", "ping", "ping"]


def test_an_answered_reconfigure_needs_no_ping() -> None:
    dc, calls = cluster(None, [])
    dc._reconfigure()
    assert calls == ["scontrol reconfigure"]


def test_a_refusal_is_raised() -> None:
    refused = SlurmCommandError(["scontrol", "reconfigure"], 1, "Access/permission denied")
    dc, calls = cluster(refused, [])
    with pytest.raises(SlurmCommandError):
        dc._reconfigure()
    assert calls == ["scontrol reconfigure"]
