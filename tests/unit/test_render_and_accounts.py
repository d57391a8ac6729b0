"""Config → slurm.conf/gres.conf/topology.conf, and the sacctmgr plan (both pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config
from slurm_ml.slurm import accounts, render

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def files() -> dict[str, str]:
    cfg = load_config(DEFAULT_CONFIG)
    site = render.SiteParams(controller_host="ctl", state_dir="/s", run_dir="/s/run",
                             log_dir="/s/log", gpu_dev_dir="/s/dev", node_addr="127.0.0.1",
                             node_port_base=17001)
    return render.render_all(cfg, site)


def test_slurm_conf_has_every_node_with_gpus_and_features(files: dict[str, str]) -> None:
    conf = files["slurm.conf"]
    assert "NodeName=gpu01 NodeHostname=ctl NodeAddr=127.0.0.1 Port=17001" in conf
    assert "Port=17006" in conf and "Port=17007" not in conf
    assert "Gres=gpu:a100_80g:8 Features=a100,a100_80g,nvlink" in conf
    assert "NodeName=gpu05" in conf and "Gres=gpu:v100:4 Features=v100,pcie" in conf
    assert "PartitionName=gpu Nodes=gpu[01-06] Default=YES" in conf
    assert "PartitionName=debug Nodes=gpu[01-06] Default=NO MaxTime=60" in conf
    assert "TopologyPlugin=topology/tree" in conf and "GresTypes=gpu" in conf
    assert "${" not in conf


def test_site_slurm_conf_leaves_slurm_mls_settings_to_install(files: dict[str, str]) -> None:
    """slurm-ml's own settings live in the slurm-ml.conf include `slurm-ml install` writes
    (tests/unit/test_deploy_*.py); the site file must not set them too (a second value
    of a key is a conflict install refuses)."""
    conf = files["slurm.conf"]
    for key in ("JobSubmitPlugins", "Prolog=", "Epilog=", "PriorityType", "PreemptType",
                "TRESBillingWeights", "AccountingStorageTRES", "HealthCheckProgram"):
        assert not any(line.startswith(key) for line in conf.splitlines()), key
    assert "#SchedulerParameters=" in conf  # no site SchedulerParameters given


def test_billing_weights_and_tres_for_the_include() -> None:
    cfg = load_config(DEFAULT_CONFIG)
    assert render.accounting_tres(cfg) == \
        "gres/gpu,gres/gpu:a100_40g,gres/gpu:a100_80g,gres/gpu:v100"
    assert render.billing_weights(cfg) == \
        "CPU=0,Mem=0,GRES/gpu:a100_40g=80,GRES/gpu:a100_80g=100,GRES/gpu:v100=40"


def test_gres_and_topology(files: dict[str, str]) -> None:
    assert "NodeName=gpu[01-02] Name=gpu Type=a100_80g File=/s/dev/nvidia[0-7]" in files["gres.conf"]
    assert "NodeName=gpu[05-06] Name=gpu Type=v100 File=/s/dev/nvidia[0-3]" in files["gres.conf"]
    topo = files["topology.conf"]
    assert "SwitchName=leaf1 Nodes=gpu[01-02]" in topo
    assert "SwitchName=leaf3 Nodes=gpu[05-06]" in topo
    assert "SwitchName=spine Switches=leaf1,leaf2,leaf3" in topo


def test_unknown_placeholder_is_a_named_error(tmp_path: Path) -> None:
    cfg = load_config(DEFAULT_CONFIG)
    site = render.SiteParams(controller_host="c", state_dir="/s", run_dir="/r", log_dir="/l",
                             gpu_dev_dir="/d")
    with pytest.raises(render.TemplateError, match="nope"):
        render.render_text("X=${nope}", cfg, site, name="t")
    with pytest.raises(render.TemplateError, match="cannot read template"):
        render.render_all(cfg, site, templates=tmp_path)


def test_account_plan_adds_only_what_is_missing() -> None:
    cfg = load_config(DEFAULT_CONFIG)
    plan = accounts.plan_tree("c", cfg.budgets, [])
    adds = [(c[3], c[4]) for c in plan]
    assert adds[0] == ("account", "ml")
    assert ("account", "llm-pretrain") in adds and ("user", "alice") in adds
    alice = [c for c in plan if c[3:5] == ["user", "alice"]]
    assert len(alice) == 2 and "defaultaccount=llm-pretrain" in alice[0]
    assert not any(a.startswith("defaultaccount") for a in alice[1])
    existing = accounts.parse_assocs(
        "ml|root|\nnlp|ml|\nllm-pretrain|nlp|\nllm-pretrain|nlp|alice\n"
        "llm-pretrain|nlp|bob\nllm-eval|nlp|\nllm-eval|nlp|carol\nvision|ml|\n"
        "detection|vision|\ndetection|vision|dave\ndetection|vision|alice\n"
    )
    assert accounts.plan_tree("c", cfg.budgets, existing) == []


def test_qos_plan() -> None:
    specs = accounts.default_qos_specs(480)
    cmds = accounts.plan_qos(["normal", "free"], specs)
    assert ["sacctmgr", "-i", "add", "qos", "alloc"] in cmds
    assert ["sacctmgr", "-i", "add", "qos", "free"] not in cmds
    alloc_mod = next(c for c in cmds if "name=alloc" in c)
    assert "PreemptExemptTime=08:00:00" in alloc_mod and "Preempt=free" in alloc_mod


def _lua_list(name: str) -> set[str]:
    import re

    lua = (Path(__file__).resolve().parents[2] / "job_submit" / "job_submit.lua").read_text()
    body = lua.split(f"local {name} = {{", 1)[1].split("}", 1)[0]
    return set(re.findall(r'"([a-z0-9_]+)"', body))


def test_the_shim_sends_and_rechecks_the_fields_submitd_expects() -> None:
    from slurm_ml.submitd.wire import JOB_FIELDS, ROUTE_FIELDS, SHAPE_FIELDS

    assert _lua_list("JOB_FIELDS") == set(JOB_FIELDS)
    assert _lua_list("SHAPE_FIELDS") == set(SHAPE_FIELDS)
    assert _lua_list("ROUTE_FIELDS") == set(ROUTE_FIELDS)
    assert set(JOB_FIELDS) >= ROUTE_FIELDS  # read from both job_desc and job_rec
