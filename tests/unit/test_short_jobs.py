"""Short work (Ai2's debug jobs) goes first inside its team's SiteFactor band, never across.

The rule lives in ``policy.fairshare`` (is_short_job, job_site_factor); the daemon reads
a job's contract from its AdminComment record and its --time, the simulator from the
trace. Both must agree, which test_sim_same_code checks cycle by cycle.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import yaml
from daemon_helpers import EXAMPLE, job
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_ml.config import ConfigError, FairshareConfig, parse_config
from slurm_ml.daemon.views import pending_jobs
from slurm_ml.policy.fairshare import band, is_short_job, job_site_factor

FS = FairshareConfig()

SHORT = [
    ("debug-job", 15, 10, FS, True),
    ("contract-too-long", 16, 10, FS, False),
    ("time-limit-too-long", 10, 61, FS, False),
    ("limit-at-the-bound", 15, 60, FS, True),
    ("free-qos-short", 0, 30, FS, True),
    ("unknown-contract", None, 10, FS, False),
    ("unknown-limit", 10, None, FS, False),
    ("no-limit-is-not-short", 10, 0, FS, False),
    ("boost-off", 10, 10, FairshareConfig(short_job_boost=0), False),
]


@pytest.mark.parametrize(("contract", "limit", "cfg", "want"), [c[1:] for c in SHORT],
                         ids=[c[0] for c in SHORT])
def test_is_short_job(contract: float | None, limit: float | None, cfg: FairshareConfig,
                      want: bool) -> None:
    assert is_short_job(contract, limit, cfg) is want


def test_short_job_gets_the_boost_on_top_of_its_band_and_nice() -> None:
    assert job_site_factor(50_000, 0, FS, short=True) == 50_250
    assert job_site_factor(50_000, 100, FS, short=True) == 50_250  # Slurm then takes 100 off
    assert job_site_factor(50_000, -300, FS, short=True) == 50_250  # admin boost left alone
    assert job_site_factor(50_000, 0, FS) == 50_000


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.tuples(st.integers(1, 40), st.integers(0, 10**5), st.booleans()),
       st.tuples(st.integers(1, 40), st.integers(0, 10**5), st.booleans()),
       st.integers(2, 5000), st.data())
def test_a_short_job_never_overtakes_a_higher_band(
        job1: tuple[int, int, bool], job2: tuple[int, int, bool], step: int,
        data: st.DataObject) -> None:
    (r1, nice1, short1), (r2, nice2, short2) = job1, job2
    nice_range = data.draw(st.integers(0, step - 2))
    boost = data.draw(st.integers(0, step - 1 - nice_range))
    cfg = FairshareConfig(site_factor_step=step, nice_range=nice_range, short_job_boost=boost)
    ranks = max(r1, r2) + 1

    def net(rank: int, nice: int, short: bool) -> int:
        return job_site_factor(band(rank, ranks, cfg), nice, cfg, short) - nice

    if r1 < r2:
        assert net(r1, nice1, short1) > net(r2, nice2, short2)
    if r1 == r2 and nice1 == nice2 and short1 and not short2 and boost:
        assert net(r1, nice1, short1) > net(r2, nice2, short2)


def test_config_refuses_a_boost_that_could_cross_bands() -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["policy"]["fairshare"].update(site_factor_step=1000, nice_range=500,
                                       short_job_boost=500)
    with pytest.raises(ConfigError) as info:
        parse_config(copy.deepcopy(data))
    text = str(info.value)
    assert "policy.fairshare.short_job_boost" in text and "site_factor_step" in text


def test_daemon_reads_short_from_the_admission_record_and_time_limit() -> None:
    record = 'slurm-ml {"min_runtime":15,"qos":"alloc"}'
    debug = dataclasses.replace(job(1, "alice", "llm-pretrain", time_min=None),
                                admin_comment=record, time_limit_min=30)
    long_limit = dataclasses.replace(debug, job_id=2, time_limit_min=600)
    long_contract = dataclasses.replace(
        debug, job_id=3, admin_comment='slurm-ml {"min_runtime":60,"qos":"alloc"}')
    old_timemin = dataclasses.replace(debug, job_id=4, admin_comment="", time_min_min=10)
    unknown = dataclasses.replace(debug, job_id=5, admin_comment="", time_min_min=None)
    got = {p.job_id: p.short for p in pending_jobs(
        [debug, long_limit, long_contract, old_timemin, unknown], FS)}
    assert got == {1: True, 2: False, 3: False, 4: True, 5: False}
