"""What fair share counts as running now, from real sacct output (issue 18's entitlement
first). ``sacct --truncate`` ends a run that is still going at the window's end, so a
RUNNING record carries an End (the window's end) like a finished one: the footprint of
a RUNNING run must stay open, or no team would ever run anything "now"."""

from __future__ import annotations

from pathlib import Path

import pytest
from daemon_helpers import CFG

from slurm_ml.daemon import views
from slurm_ml.model import ALLOC_QOS, JobState
from slurm_ml.policy.fairshare import fair_share
from slurm_ml.slurm import parse

CAPTURE = Path(__file__).resolve().parents[1] / "fixtures/slurm/24.11/sacct_truncate_p_epoch.txt"
NOW = 1796043656  # the capture's window end: every RUNNING record ends there


def test_a_running_record_has_an_end_in_the_capture_and_an_open_footprint() -> None:
    usage = parse.parse_sacct_usage(CAPTURE.read_text(), 0, NOW)
    running = [u for u in usage if u.state == JobState.RUNNING]
    assert running and all(u.end == NOW for u in running)  # what --truncate prints

    fps = {f.job_id: f for f in views.footprints(CFG, [], usage)}
    assert all(fps[u.job_id].until is None for u in running)
    done = [u for u in usage if u.state != JobState.RUNNING and u.gpus > 0]
    assert done and all(fps[u.job_id].until == u.end for u in done)


def test_fair_share_counts_the_alloc_runs_still_going_as_running_now() -> None:
    usage = parse.parse_sacct_usage(CAPTURE.read_text(), 0, NOW)
    fps = views.footprints(CFG, [], usage)
    fs = fair_share(CFG, fps, NOW)
    pre = fs.account("llm-pretrain")
    assert pre is not None
    want = sum(views.usage_billing_gpus(CFG, u) for u in usage
               if u.state == JobState.RUNNING and u.qos == ALLOC_QOS
               and u.account == "llm-pretrain" and u.gpus > 0)
    assert want > 0
    assert pre.running_gpus == pytest.approx(want)
