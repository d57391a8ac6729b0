"""The rules that span several knobs (slurm_ml.config.rules): the SiteFactor bands against
the other priority weights, the QOS weight against the bands, the minimum-runtime default
against its cap, the zombie heartbeat against the sampling interval; and the renamed cap
key. Each rule at its accepted boundary and just past it, and the band rules against a
brute force over the real band and SiteFactor functions."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import (
    ConfigError,
    FairshareConfig,
    PolicyConfig,
    PriorityWeightsConfig,
    load_config,
    parse_config,
)
from slurm_ml.config.rules import associations, policy_issues
from slurm_ml.model import BudgetProgram, BudgetProject, BudgetTree
from slurm_ml.policy.fairshare import band, job_site_factor

REPO = Path(__file__).resolve().parents[2]
SHIPPED = DEFAULT_CONFIG
SHIPPED_DATA: dict[str, Any] = yaml.safe_load(SHIPPED.read_text(encoding="utf-8"))
#: Every slurm-ml.yaml the repository ships, each for its own purpose.
YAMLS = [SHIPPED, REPO / "conf" / "examples" / "slurm-ml.yaml",
         REPO / "devcluster" / "compose" / "slurm-ml.yaml"]

STEP = "policy.fairshare.site_factor_step"
QOS = "policy.priority_weights.qos"
BOOST = "policy.fairshare.short_job_boost"
DEFAULT_MIN = "policy.admission.default_min_runtime_min"
HEARTBEAT = "policy.reclaim.zombie_heartbeat_s"


def with_policy(**sections: dict[str, Any]) -> dict[str, Any]:
    data = copy.deepcopy(SHIPPED_DATA)
    for name, knobs in sections.items():
        data["policy"].setdefault(name, {}).update(knobs)
    return data


def issues(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    return [str(issue) for issue in info.value.issues]


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_shipped_yaml_passes(path: Path) -> None:
    cfg = load_config(path)
    assert policy_issues(cfg.policy, cfg.budgets) == []


def test_the_shipped_weights_are_the_ones_install_always_rendered() -> None:
    assert load_config(SHIPPED).policy.priority_weights == PriorityWeightsConfig(
        age=100, fairshare=100, job_size=0, partition=0, qos=100_000_000)


# --------------------------------------------------------------------------- the bands

# The shipped config: nice_range 500 + short_job_boost 250 + age 100 + fairshare 100 = 950.


def test_a_step_just_above_what_a_job_can_move_is_accepted() -> None:
    parse_config(with_policy(fairshare={"site_factor_step": 951}))


def test_a_step_that_age_and_fair_share_can_overturn_is_refused() -> None:
    assert issues(with_policy(fairshare={"site_factor_step": 950})) == [
        f"{STEP}: 950 lets age and fair share reorder the bands: a job moves up to "
        "nice_range + short_job_boost + the priority_weights age, fairshare, job_size and "
        "partition (500 + 250 + 100 + 100 + 0 + 0 = 950) inside its band, so the step must "
        "be above 950; raise site_factor_step or lower those"]


def test_step_150_without_nice_or_boost_is_refused_for_age_plus_fair_share() -> None:
    # The case of issue 13: nothing else moves a job, yet age + fair share reach 200.
    got = issues(with_policy(fairshare={"site_factor_step": 150, "nice_range": 0,
                                        "short_job_boost": 0}))
    assert len(got) == 1 and got[0].startswith(f"{STEP}: 150 lets age and fair share")
    assert "(0 + 0 + 100 + 100 + 0 + 0 = 200)" in got[0]
    parse_config(with_policy(fairshare={"site_factor_step": 201, "nice_range": 0,
                                        "short_job_boost": 0}))


def test_larger_weights_need_a_larger_step() -> None:
    got = issues(with_policy(priority_weights={"age": 150, "job_size": 50, "partition": 1}))
    assert len(got) == 1 and "(500 + 250 + 150 + 100 + 50 + 1 = 1051)" in got[0]
    parse_config(with_policy(priority_weights={"age": 150, "job_size": 50, "partition": 1},
                             fairshare={"site_factor_step": 1052}))


def test_a_short_job_that_could_overtake_is_reported_once_on_its_own_path() -> None:
    got = issues(with_policy(fairshare={"site_factor_step": 750}))
    assert got == [f"{BOOST}: short_job_boost + nice_range (250 + 500) must stay below "
                   "site_factor_step (750), or a short job could overtake a higher-ranked "
                   "team's work"]


# --------------------------------------------------------------------------- the QOS weight

# The shipped tree has 5 associations: llm-pretrain {alice, bob}, llm-eval {carol},
# detection {dave, alice}. Highest free job: max(100000, 5 x 1000) + 250 + 200 = 100450.


def test_the_shipped_tree_has_five_associations() -> None:
    assert associations(load_config(SHIPPED).budgets) == 5


def test_a_qos_weight_just_above_the_highest_free_job_is_accepted() -> None:
    parse_config(with_policy(priority_weights={"qos": 100_451}))


def test_a_qos_weight_a_free_job_can_reach_is_refused() -> None:
    assert issues(with_policy(priority_weights={"qos": 100_450})) == [
        f"{QOS}: 100450 does not keep QOS alloc above every band: a free job can reach "
        "max(site_factor_max 100000, 5 associations in budgets x site_factor_step 1000) + "
        "short_job_boost 250 + age, fairshare, job_size and partition weights 200 = 100450 "
        "before QOS, an alloc job with no SiteFactor yet only qos; raise qos above 100450 "
        "or lower site_factor_step or site_factor_max"]


def test_band_count_times_step_reaching_the_qos_weight_is_refused() -> None:
    # 5 bands x 40000 = 200000 > site_factor_max: the top band is 200000.
    data = with_policy(fairshare={"site_factor_step": 40_000},
                       priority_weights={"qos": 200_000})
    got = issues(data)
    assert len(got) == 1 and got[0].startswith(f"{QOS}: 200000 does not keep")
    assert "5 associations in budgets x site_factor_step 40000) + short_job_boost 250" in got[0]
    data["policy"]["priority_weights"]["qos"] = 200_451
    parse_config(data)


def test_more_associations_need_a_larger_qos_weight() -> None:
    data = with_policy(priority_weights={"qos": 202_451}, fairshare={"site_factor_max": 1})
    data["budgets"]["programs"][0]["projects"][0]["users"] = [f"u{i}" for i in range(199)]
    parse_config(data)  # 199 + 3 = 202 associations: top 202000, highest 202450
    got = issues(with_policy(priority_weights={"qos": 202_450}, fairshare={"site_factor_max": 1})
                 | {"budgets": data["budgets"]})
    assert len(got) == 1 and "202 associations" in got[0] and "= 202450" in got[0]


def test_weights_are_slurm_32_bit_integers() -> None:
    got = issues(with_policy(priority_weights={"qos": 4_294_967_296, "age": -1}))
    assert f"{QOS}: must be in [0, 4294967295]" in got
    assert "policy.priority_weights.age: must be in [0, 4294967295]" in got


# --------------------------------------------------------------------------- minimum runtime


def test_default_min_runtime_at_the_cap_is_accepted() -> None:
    parse_config(with_policy(admission={"default_min_runtime_min": 480}))
    parse_config(with_policy(admission={"default_min_runtime_min": 30},
                             contracts={"min_runtime_cap_min": 30}))


def test_default_min_runtime_above_the_cap_is_refused() -> None:
    assert issues(with_policy(admission={"default_min_runtime_min": 481})) == [
        f"{DEFAULT_MIN}: 481 min is above policy.contracts.min_runtime_cap_min (480 min), so "
        "every job would be cut to the cap; lower the default or raise the cap"]


def test_the_old_cap_in_hours_says_what_to_write_instead() -> None:
    data = copy.deepcopy(SHIPPED_DATA)
    del data["policy"]["contracts"]["min_runtime_cap_min"]
    data["policy"]["contracts"]["min_runtime_cap_hours"] = 8.5
    assert issues(data) == [
        "policy.contracts.min_runtime_cap_hours: renamed: the cap is in minutes now, like "
        "policy.admission.default_min_runtime_min; write min_runtime_cap_min: 510 instead"]


# --------------------------------------------------------------------------- zombie heartbeat


def test_a_heartbeat_of_three_sample_intervals_is_accepted() -> None:
    cfg = parse_config(SHIPPED_DATA)
    assert (cfg.policy.reclaim.zombie_heartbeat_s, cfg.policy.reclaim.sample_interval_s) == (
        900, 300)
    parse_config(with_policy(reclaim={"zombie_heartbeat_s": 600, "sample_interval_s": 200}))
    parse_config(with_policy(reclaim={"zombie_heartbeat_s": 60, "sample_interval_s": 20}))


def test_a_heartbeat_shorter_than_three_sample_intervals_is_refused() -> None:
    """Issue 16: a 10-minute heartbeat at the 300 s interval rests on 2-4 readings."""
    assert issues(with_policy(reclaim={"zombie_heartbeat_s": 600})) == [
        f"{HEARTBEAT}: 600 s is shorter than three sample intervals (3 x "
        "policy.reclaim.sample_interval_s 300 s = 900 s), so a zombie verdict would rest on "
        "two or three GPU readings; raise zombie_heartbeat_s or sample more often (lower "
        "sample_interval_s and reinstall, which sets HealthCheckInterval)"]
    assert [line.split(":", 1)[0] for line in issues(with_policy(
        reclaim={"zombie_heartbeat_s": 900, "sample_interval_s": 301}))] == [HEARTBEAT]


def test_every_rule_is_reported_at_once() -> None:
    got = issues(with_policy(fairshare={"site_factor_step": 900},
                             priority_weights={"qos": 1000},
                             admission={"default_min_runtime_min": 600},
                             reclaim={"zombie_heartbeat_s": 60}))
    assert [line.split(":", 1)[0] for line in got] == [STEP, QOS, DEFAULT_MIN, HEARTBEAT]


# --------------------------------------------------------------------------- brute force


def _tree(users: int) -> BudgetTree:
    project = BudgetProject("p", 1.0, tuple(f"u{i}" for i in range(users)))
    return BudgetTree("org", (BudgetProgram("g", 1.0, (project,)),))


@settings(max_examples=400, deadline=None)
@given(step=st.integers(1, 3000), nice_range=st.integers(0, 1500),
       boost=st.integers(0, 1500), age=st.integers(0, 800), fairshare=st.integers(0, 800),
       job_size=st.integers(0, 200), partition=st.integers(0, 200),
       site_factor_max=st.integers(1, 50_000), qos=st.integers(1, 200_000),
       users=st.integers(1, 40))
def test_the_rules_refuse_exactly_the_configs_whose_order_breaks(
        *, step: int, nice_range: int, boost: int, age: int, fairshare: int, job_size: int,
        partition: int, site_factor_max: int, qos: int, users: int) -> None:
    """Build the extreme jobs with the reconciler's own band() and job_site_factor() and
    Slurm's sum (each factor at 0 or 1): the rules must agree with what they find."""
    fs = FairshareConfig(site_factor_step=step, nice_range=nice_range, short_job_boost=boost,
                         site_factor_max=site_factor_max)
    w = PriorityWeightsConfig(age=age, fairshare=fairshare, job_size=job_size,
                              partition=partition, qos=qos)
    others = age + fairshare + job_size + partition
    paths = {i.path for i in policy_issues(PolicyConfig(fairshare=fs, priority_weights=w),
                                           _tree(users))}
    far = 10 * (nice_range + step)  # a --nice beyond what the band absorbs

    def lowest(b: int) -> int:  # a long job, no age or fair share, the largest nice
        return job_site_factor(b, far, fs) - far

    def highest(b: int) -> int:  # a short job, nice 0, every other factor in full
        return job_site_factor(b, 0, fs, short=True) + others

    n = users  # every association has a pending job: the most bands
    crossed = any(lowest(band(k, n, fs)) <= highest(band(k + 1, n, fs)) for k in range(1, n))
    if BOOST not in paths and STEP not in paths:
        assert not crossed
    if boost + nice_range < step and n > 1:
        assert (STEP in paths) == crossed
    free_top = highest(band(1, n, fs))
    alloc_bottom = qos + 0  # QOS factor 1, no SiteFactor pushed yet, nice 0, no other factor
    assert (QOS in paths) == (alloc_bottom <= free_top)


# --------------------------------------------------------------------------- install


def test_install_renders_the_weights_of_the_config(tmp_path: Path) -> None:
    from slurm_ml.deploy import bundle, state

    data = with_policy(priority_weights={"age": 10, "fairshare": 20, "job_size": 30,
                                         "partition": 40, "qos": 123_456_789})
    cfg = parse_config(data)
    params = bundle.InstallParams(conf_dir=tmp_path, config_path=SHIPPED, python="python3")
    own = dict(bundle.own_settings(cfg, params, state.read_sources()))
    assert {k: v for k, v in own.items() if k.startswith("PriorityWeight")} == {
        "PriorityWeightFairshare": "20", "PriorityWeightAge": "10",
        "PriorityWeightQOS": "123456789", "PriorityWeightJobSize": "30",
        "PriorityWeightPartition": "40"}


def test_install_samples_at_the_configured_interval(tmp_path: Path) -> None:
    """HealthCheckInterval is what the zombie rule judges gaps by: the knob, unless a test
    cluster asks for 0 (never run by slurmd)."""
    from slurm_ml.deploy import bundle, state

    cfg = parse_config(with_policy(reclaim={"zombie_heartbeat_s": 600,
                                            "sample_interval_s": 120}))
    params = bundle.InstallParams(conf_dir=tmp_path, config_path=SHIPPED, python="python3")
    own = dict(bundle.own_settings(cfg, params, state.read_sources()))
    assert own["HealthCheckInterval"] == "120"
    shipped = dict(bundle.own_settings(parse_config(SHIPPED_DATA), params, state.read_sources()))
    assert shipped["HealthCheckInterval"] == "300"
    never = bundle.InstallParams(conf_dir=tmp_path, config_path=SHIPPED, python="python3",
                                 health_check_interval_s=0)
    assert dict(bundle.own_settings(cfg, never, state.read_sources()))[
        "HealthCheckInterval"] == "0"
