"""conf/examples/: the admin's starting point must load, must show every key slurm-ml
knows, and the files made from it must be what slurm-ml itself would make.

gres.conf, topology.conf and sacctmgr-qos.sh are golden files: when render.py or
accounts.py change what they produce, regenerate them with

    SLURM_ML_REGEN_EXAMPLES=1 .venv/bin/pytest tests/unit/test_conf_examples.py

and review the diff.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurm_ml.config import (
    Config,
    DaemonConfig,
    HealthConfig,
    PolicyConfig,
    SlurmConfig,
    StoreConfig,
    SubmitdConfig,
    load_config,
)
from slurm_ml.config.parse import SECTIONS_OPTIONAL, SECTIONS_REQUIRED
from slurm_ml.model import ALLOC_QOS, FREE_QOS
from slurm_ml.slurm import accounts, render

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "conf" / "examples"
EXAMPLE_YAML = EXAMPLES / "slurm-ml.yaml"
SCRIPT = EXAMPLES / "sacctmgr-qos.sh"
REGEN = os.environ.get("SLURM_ML_REGEN_EXAMPLES") == "1"
REGEN_HINT = "regenerate: SLURM_ML_REGEN_EXAMPLES=1 .venv/bin/pytest tests/unit/test_conf_examples.py"

# Where a real GPU node has its devices: gres.conf File=/dev/nvidia[0-7].
EXAMPLE_SITE = render.SiteParams(
    controller_host="slurmctl01",
    state_dir="/var/spool/slurmctld",
    run_dir="/run/slurm",
    log_dir="/var/log/slurm",
    gpu_dev_dir="/dev",
)


@pytest.fixture(scope="module")
def cfg() -> Config:
    return load_config(EXAMPLE_YAML)


# ----------------------------------------------------------------- generation


def expected_conf(cfg: Config, name: str) -> str:
    template = render.conf_dir() / f"{name}.tmpl"
    return render.render_text(template.read_text(), cfg, EXAMPLE_SITE, name=str(template))


def planned_commands(cfg: Config) -> list[list[str]]:
    """What `slurm-ml install` runs against an empty slurmdbd (its planner,
    accounts.plan_accounts, given nothing there yet)."""
    specs = accounts.default_qos_specs(cfg.policy.contracts.min_runtime_cap_min,
                                       cfg.policy.contracts.free_grace_s)
    return accounts.plan_accounts(accounts.AccountsState(), cfg.cluster.name, cfg.budgets,
                                  specs)


def expected_script(cfg: Config) -> str:
    specs = {s.name: " ".join(f"{k}={v}" for k, v in s.settings)
             for s in accounts.default_qos_specs(cfg.policy.contracts.min_runtime_cap_min,
                                       cfg.policy.contracts.free_grace_s)}
    steps = "\n".join(f"step {shlex.join(cmd)}" for cmd in planned_commands(cfg))
    return f"""#!/bin/bash
# slurm-ml's QOS and the account tree of conf/examples/slurm-ml.yaml, as sacctmgr
# commands for slurmdbd. Run it as a Slurm administrator where sacctmgr reaches slurmdbd.
#
# Generated from slurm-ml.yaml by slurm_ml/slurm/accounts.py (default_qos_specs,
# plan_accounts): the commands `slurm-ml install` runs against an empty slurmdbd.
# Do not edit; regenerate with
#   SLURM_ML_REGEN_EXAMPLES=1 .venv/bin/pytest tests/unit/test_conf_examples.py
#
#   cluster    ClusterName, registered in slurmdbd
#   QOS {FREE_QOS:<5}  unallocated work, uncharged and requeued: {specs[FREE_QOS]}
#   QOS {ALLOC_QOS:<5}  budgeted work, may preempt {FREE_QOS}: {specs[ALLOC_QOS]}
#                PreemptExemptTime = policy.contracts.min_runtime_cap_min
#   accounts   budgets.org > programs > projects, each allowed both QOS (default {ALLOC_QOS})
#   users      budgets...users, default account = the first project that lists them
#
# Safe to re-run: an add of something that exists is reported by sacctmgr ("Nothing
# new added") and skipped; the QOS settings are re-applied. Exit 1 if anything else failed.
set -u
failed=0

step() {{
    printf '+ %s\\n' "$*"
    local out rc
    out="$("$@" 2>&1)"
    rc=$?
    [ -n "$out" ] && printf '%s\\n' "$out"
    if [ "$rc" -ne 0 ] && ! grep -q 'Nothing new added' <<<"$out"; then
        failed=1
    fi
    return 0
}}

{steps}

exit "$failed"
"""


GENERATED = {
    "gres.conf": lambda cfg: expected_conf(cfg, "gres.conf"),
    "topology.conf": lambda cfg: expected_conf(cfg, "topology.conf"),
    "sacctmgr-qos.sh": expected_script,
}


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_generated_example_matches_what_slurm_ml_makes(cfg: Config, name: str) -> None:
    want = GENERATED[name](cfg)
    path = EXAMPLES / name
    if REGEN:
        path.write_text(want)
        if name.endswith(".sh"):
            path.chmod(0o755)
    assert path.read_text() == want, f"{path} is stale; {REGEN_HINT}"


# ----------------------------------------------------------------- the yaml


def test_example_loads_with_the_strict_loader(cfg: Config) -> None:
    assert cfg.cluster.name == "mlcluster"
    assert {gt.nvlink_links for gt in cfg.gpu_types.values()} == {0, 12, 18}
    classes = {nc.name: nc for nc in cfg.node_classes}
    assert set(classes) == {"dgx-a100", "hgx-h100", "hgx-h200", "l40s-pcie"}
    for nc in cfg.node_classes:
        # the GPU type's feature is what admission puts in --constraint
        assert cfg.gpu_types[nc.gpu_type].feature in nc.features
    assert cfg.gpu_types["l40s"].nvlink_links == 0
    assert "nvlink" not in classes["l40s-pcie"].features
    assert len(cfg.budgets.programs) >= 2
    assert all(len(p.projects) >= 2 for p in cfg.budgets.programs)


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))


def known_paths(cls: type, prefix: str = "") -> set[str]:
    """Every key path the loader accepts, from the config dataclasses: ``a.b`` for a
    field, ``a[].b`` inside a list, ``a{}.b`` inside a name-keyed mapping (whose values
    carry the key as their ``name``)."""
    out: set[str] = set()
    for f in dataclasses.fields(cls):
        path = f"{prefix}{f.name}"
        out.add(path)
        tp = _hints(cls)[f.name]
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if dataclasses.is_dataclass(tp):
            out |= known_paths(typing.cast(type, tp), path + ".")
        elif origin is tuple and args and dataclasses.is_dataclass(args[0]):
            out |= known_paths(args[0], path + "[].")
        elif origin is dict and dataclasses.is_dataclass(args[1]):
            out |= {p for p in known_paths(args[1], path + "{}.") if p != f"{path}{{}}.name"}
    return out


def present_paths(data: Any, cls: type, prefix: str = "") -> set[str]:
    out: set[str] = set()
    if not isinstance(data, dict):
        return out
    hints = _hints(cls)
    for key, value in data.items():
        path = f"{prefix}{key}"
        out.add(path)
        tp = hints.get(key)
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if dataclasses.is_dataclass(tp):
            out |= present_paths(value, typing.cast(type, tp), path + ".")
        elif origin is tuple and args and dataclasses.is_dataclass(args[0]):
            for item in value or []:
                out |= present_paths(item, args[0], path + "[].")
        elif origin is dict and dataclasses.is_dataclass(args[1]):
            for item in (value or {}).values():
                out |= present_paths(item, args[1], path + "{}.")
    return out


def test_the_walk_sees_nested_and_keyed_fields() -> None:
    paths = known_paths(Config)
    for p in ("policy.reclaim.exempt_qos", "budgets.programs[].projects[].users",
              "gpu_types{}.nvlink_links", "cluster.partitions[].max_time_min",
              "node_classes[].leaf_switch", "store.spool_dir", "daemon.lock_key"):
        assert p in paths
    assert "gpu_types{}.name" not in paths  # the mapping key is the name


def test_every_key_the_loader_knows_is_in_the_example() -> None:
    data = yaml.safe_load(EXAMPLE_YAML.read_text())
    missing = sorted(known_paths(Config) - present_paths(data, Config))
    assert not missing, (
        f"keys slurm-ml accepts but {EXAMPLE_YAML.relative_to(REPO)} does not show "
        f"(add each, with its default and units in a comment): {missing}")


def test_the_example_keys_are_all_known() -> None:
    """The reverse: the strict loader would refuse them, but say which."""
    data = yaml.safe_load(EXAMPLE_YAML.read_text())
    assert present_paths(data, Config) <= known_paths(Config)


def test_the_loader_sections_are_the_config_fields() -> None:
    # known_paths walks Config; the loader's own section lists must cover the same set.
    sections = set(SECTIONS_REQUIRED) | set(SECTIONS_OPTIONAL)
    assert sections == {f.name for f in dataclasses.fields(Config)}


def test_knobs_are_at_their_defaults(cfg: Config) -> None:
    """The example documents the defaults: deleting a knob line changes nothing."""
    assert cfg.policy == PolicyConfig()
    assert cfg.slurm == SlurmConfig()
    assert cfg.store == StoreConfig()
    assert cfg.daemon == DaemonConfig()
    assert cfg.submitd == SubmitdConfig()
    assert cfg.health == HealthConfig()


def _blocks(text: str) -> dict[str, str]:
    """Top-level YAML sections as text, and policy's subsections as ``policy.x``."""
    out: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        top = re.match(r"^([a-z_]+):", line)
        sub = re.match(r"^  ([a-z_]+):\s*(#.*)?$", line)
        if top:
            current = top.group(1)
        elif current and current.startswith("policy") and sub:
            current = f"policy.{sub.group(1)}"
        if current:
            out[current] = out.get(current, "") + line + "\n"
    return out


def test_every_knob_line_has_a_comment() -> None:
    blocks = _blocks(EXAMPLE_YAML.read_text())
    sections: dict[str, type] = {
        "slurm": SlurmConfig, "store": StoreConfig, "daemon": DaemonConfig,
        "submitd": SubmitdConfig,
        "health": HealthConfig,
        **{f"policy.{f.name}": _hints(PolicyConfig)[f.name]
           for f in dataclasses.fields(PolicyConfig)},
    }
    uncommented = []
    for section, cls in sections.items():
        for knob in dataclasses.fields(cls):
            line = re.search(rf"^\s+{knob.name}:[^\n]*$", blocks[section], re.MULTILINE)
            if line is None or "#" not in line.group(0):
                uncommented.append(f"{section}.{knob.name}")
    assert not uncommented, f"knobs without a comment (units, meaning): {uncommented}"


# ----------------------------------------------------------------- the script


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_script_parses_with_bash() -> None:
    res = subprocess.run(["bash", "-n", str(SCRIPT)], check=False, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert os.access(SCRIPT, os.X_OK)


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_script_runs_exactly_the_planned_commands(cfg: Config, tmp_path: Path) -> None:
    """Run it against a recording sacctmgr on PATH: the commands it runs are the
    planner's, in order."""
    log = tmp_path / "calls.jsonl"
    fake = tmp_path / "sacctmgr"
    fake.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                    "with open(os.environ['FAKE_SACCTMGR_LOG'], 'a') as f:\n"
                    "    f.write(json.dumps(sys.argv[1:]) + '\\n')\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ.get('PATH', '/usr/bin:/bin')}",
           "FAKE_SACCTMGR_LOG": str(log)}
    res = subprocess.run(["bash", str(SCRIPT)], check=False, capture_output=True, text=True, env=env,
                         timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    calls = [["sacctmgr", *json.loads(line)] for line in log.read_text().splitlines()]
    assert calls == planned_commands(cfg)
    assert calls[0] == ["sacctmgr", "-i", "add", "cluster", cfg.cluster.name]
    # every account and user association of the tree is created
    added = {tuple(c[3:5]) for c in calls if c[2] == "add"}
    for name, _parent in cfg.budgets.accounts():
        assert ("account", name) in added
    for user in cfg.budgets.user_accounts():
        assert ("user", user) in added


def test_script_failures_are_reported_but_existing_entities_are_not(tmp_path: Path) -> None:
    fake = tmp_path / "sacctmgr"
    fake.write_text("#!/bin/bash\n"
                    "case \"$*\" in\n"
                    "  *'add cluster'*|*'add qos'*) echo ' Nothing new added.'; exit 1 ;;\n"
                    "  *'add user frank'*) echo 'error: boom'; exit 1 ;;\n"
                    "esac\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    res = subprocess.run(["bash", str(SCRIPT)], check=False, capture_output=True, text=True, env=env,
                         timeout=60)
    assert res.returncode == 1, res.stdout  # only frank's failure counts
    assert "error: boom" in res.stdout
    assert res.stdout.count("Nothing new added") == 3  # cluster, free, alloc: re-run is fine


def test_generated_files_say_where_they_come_from() -> None:
    assert "rendered by slurm-ml from devcluster/templates/gres.conf.tmpl" in (EXAMPLES / "gres.conf").read_text()
    assert "File=/dev/nvidia[0-7]" in (EXAMPLES / "gres.conf").read_text()
    assert "SwitchName=spine" in (EXAMPLES / "topology.conf").read_text()

