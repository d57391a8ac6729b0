"""slurm-ml install/uninstall on a realistic conf dir in a tmp dir (no Slurm, no root needed)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from deploy_helpers import cfg, make_conf_dir, params, snapshot

from slurm_ml.assets import asset_path
from slurm_ml.config import SubmitdConfig
from slurm_ml.deploy.errors import BadInput
from slurm_ml.deploy.install import install, site_part, uninstall
from slurm_ml.deploy.manifest import MANIFEST_NAME
from slurm_ml.deploy.plan import Kind
from slurm_ml.slurm import render

WEIGHTS = render.billing_weights(cfg())


def test_dry_run_shows_the_full_change_set_and_changes_nothing(tmp_path: Path) -> None:
    etc = make_conf_dir(tmp_path)
    before = snapshot(tmp_path)
    out = install(cfg(), params(tmp_path, etc), dry_run=True)
    assert snapshot(tmp_path) == before
    kinds = {(a.kind, a.path.name) for a in out.changes.actions}
    for name in ("job_submit.lua", "slurm-ml.conf", "slurm-ml.env", "slurm-ml-prolog",
                 "slurm-ml-epilog", "slurm-ml-healthcheck", "slurm-ml-submitd.service",
                 "slurm-ml-daemon.service", "slurm-ml.rules.yml"):
        assert (Kind.CREATE, name) in kinds, name
    assert (Kind.EDIT, "slurm.conf") in kinds and (Kind.MKDIR, "systemd") in kinds
    text = out.render(diff=True)
    assert f"+Include {etc}/slurm-ml.conf" in text
    assert f'TRESBillingWeights="{WEIGHTS}"' in text
    assert "+PriorityWeightQOS=100000000" in text and "+JobSubmitPlugins=lua" in text
    assert out.exit_code == 0 and not out.applied


def test_install_then_uninstall_leaves_the_dirs_byte_identical(tmp_path: Path) -> None:
    etc = make_conf_dir(tmp_path, no_final_newline=True)
    before = snapshot(tmp_path)
    out = install(cfg(), params(tmp_path, etc))
    assert out.applied and out.exit_code == 0
    conf = (etc / "slurm.conf").read_text()
    assert conf.endswith(f"\nInclude {etc}/slurm-ml.conf\n")
    assert conf.count(f'TRESBillingWeights="{WEIGHTS}"') == 2
    assert (etc / "slurm-ml.env").stat().st_mode & 0o777 == 0o600
    assert (etc / "slurm-ml-healthcheck").stat().st_mode & 0o777 == 0o755
    assert (etc / "slurm.conf").stat().st_mode & 0o777 == 0o640  # the admin's mode kept
    manifest = json.loads((etc / MANIFEST_NAME).read_text())
    assert set(manifest["files"]) >= {"job_submit.lua", "slurm-ml.conf", "slurm-ml.rules.yml",
                                      str(tmp_path / "systemd" / "slurm-ml-daemon.service")}
    assert manifest["slurm_conf"]["newline_added"] is True
    assert len(manifest["slurm_conf"]["partition_lines"]) == 2
    assert site_part(etc / "slurm.conf") == before[str(etc / "slurm.conf")][0].decode()
    res = uninstall(etc)
    assert res.applied and res.exit_code == 0
    assert snapshot(tmp_path) == before
    assert not (tmp_path / "systemd").exists()  # created by install, removed when empty


def test_the_prometheus_rules_go_in_as_shipped_and_the_report_says_how_to_load_them(
        tmp_path: Path) -> None:
    etc = make_conf_dir(tmp_path)
    out = install(cfg(), params(tmp_path, etc))

    rules = etc / "slurm-ml.rules.yml"
    assert rules.read_bytes() == asset_path("conf", "prometheus", "slurm-ml.rules.yml").read_bytes()
    assert rules.stat().st_mode & 0o777 == 0o644
    text = out.render(diff=False)
    assert f"rule_files: [{rules}]" in text
    for job in ("slurm-ml-daemon on :9309", "slurm-ml-submitd on :9310", "node: node_exporter"):
        assert job in text, job
    assert "--collector.textfile.directory=/var/lib/prometheus/node-exporter" in text
    assert out.as_dict()["next_steps"] == list(out.next_steps)


def test_the_rules_may_go_where_prometheus_reads_them_and_come_out_again(
        tmp_path: Path) -> None:
    etc = make_conf_dir(tmp_path)
    before = snapshot(tmp_path)
    rules_dir = tmp_path / "prometheus" / "rules"
    out = install(cfg(), params(tmp_path, etc, rules_dir=rules_dir))

    assert (rules_dir / "slurm-ml.rules.yml").is_file()
    assert not (etc / "slurm-ml.rules.yml").exists()
    assert f"rule_files: [{rules_dir}/slurm-ml.rules.yml]" in out.render(diff=False)
    manifest = json.loads((etc / MANIFEST_NAME).read_text())
    assert str(rules_dir / "slurm-ml.rules.yml") in manifest["files"]
    assert uninstall(etc).applied
    assert snapshot(tmp_path) == before
    assert not (tmp_path / "prometheus").exists()  # made by install, gone with it


def test_metrics_turned_off_are_no_scrape_job(tmp_path: Path) -> None:
    etc = make_conf_dir(tmp_path)
    off = replace(cfg(), submitd=SubmitdConfig(metrics_port=0),
                  daemon=replace(cfg().daemon, metrics_addr="0.0.0.0"))
    steps = " ".join(install(off, params(tmp_path, etc), dry_run=True).next_steps)
    assert "slurm-ml-submitd (off: its metrics_port is 0)" in steps
    assert "slurm-ml-daemon on :9309 of each controller host;" in steps  # no 127.0.0.1 note


def test_hooks_find_the_env_file_without_slurm_conf(tmp_path: Path) -> None:
    etc = make_conf_dir(tmp_path)
    install(cfg(), params(tmp_path, etc, systemd_dir=None))
    for hook in ("slurm-ml-prolog", "slurm-ml-epilog", "slurm-ml-healthcheck"):
        assert f"INSTALLED_ENV_FILE={etc}/slurm-ml.env\n" in (etc / hook).read_text()
    env = (etc / "slurm-ml.env").read_text()
    assert f"SLURM_CONF={etc}/slurm.conf\n" in env
    assert "SLURM_ML_DSN=postgresql://u:p@db/slurmml\n" in env
    shim = (etc / "job_submit.lua").read_text()
    assert 'local SOCKET_PATH = "/run/slurm-ml/submitd.sock"' in shim


def test_reinstall_with_the_same_config_changes_nothing(tmp_path: Path) -> None:
    etc = make_conf_dir(tmp_path)
    install(cfg(), params(tmp_path, etc))
    before = snapshot(tmp_path)
    again = install(cfg(), params(tmp_path, etc))
    assert not again.changed and again.changes.actions == ()
    assert "nothing to change" in again.render(diff=True)
    assert snapshot(tmp_path) == before


def test_a_changed_config_updates_only_what_changed(tmp_path: Path) -> None:
    etc = make_conf_dir(tmp_path)
    install(cfg(), params(tmp_path, etc))
    out = install(cfg(), params(tmp_path, etc, submitd_socket="/run/x/s.sock",
                                health_check_interval_s=60))
    changed = {a.path.name: a.kind for a in out.changes.actions}
    assert changed == {"job_submit.lua": Kind.UPDATE, "slurm-ml.env": Kind.UPDATE,
                       "slurm-ml.conf": Kind.UPDATE, "slurm-ml-submitd.service": Kind.UPDATE}
    assert "HealthCheckInterval=60" in (etc / "slurm-ml.conf").read_text()
    assert "ReadWritePaths=/run/x" in (tmp_path / "systemd" / "slurm-ml-submitd.service"
                                       ).read_text()


def test_dropping_systemd_removes_the_units(tmp_path: Path) -> None:
    etc = make_conf_dir(tmp_path)
    install(cfg(), params(tmp_path, etc))
    out = install(cfg(), params(tmp_path, etc, systemd_dir=None))
    assert {(a.kind, a.path.name) for a in out.changes.actions} == {
        (Kind.DELETE, "slurm-ml-submitd.service"), (Kind.DELETE, "slurm-ml-daemon.service")}


def test_a_foreign_job_submit_lua_is_refused_then_kept_aside_with_force(tmp_path: Path) -> None:
    etc = make_conf_dir(tmp_path)
    (etc / "job_submit.lua").write_text("-- the site's own shim\n")
    (etc / "job_submit.lua").chmod(0o600)
    before = snapshot(tmp_path)
    out = install(cfg(), params(tmp_path, etc))
    assert out.exit_code == 1 and not out.applied
    assert any("job_submit.lua exists and was not written by slurm-ml" in r
               for r in out.changes.refusals)
    assert snapshot(tmp_path) == before  # refused: nothing at all changed
    forced = install(cfg(), params(tmp_path, etc), force=True)
    assert forced.applied and forced.changes.forced
    assert (etc / "job_submit.lua.slurm-ml-orig").read_text() == "-- the site's own shim\n"
    uninstall(etc)
    assert snapshot(tmp_path) == before


def test_a_locally_changed_file_is_neither_overwritten_nor_deleted(tmp_path: Path) -> None:
    etc = make_conf_dir(tmp_path)
    install(cfg(), params(tmp_path, etc))
    (etc / "slurm-ml.conf").write_text((etc / "slurm-ml.conf").read_text() + "# mine\n")
    again = install(cfg(), params(tmp_path, etc, health_check_interval_s=60))
    assert again.exit_code == 1
    assert any("slurm-ml.conf was changed since slurm-ml installed it" in r
               for r in again.changes.refusals)
    gone = uninstall(etc)
    assert gone.exit_code == 1 and (etc / "slurm-ml.conf").read_text().endswith("# mine\n")
    assert (etc / "job_submit.lua").exists()  # a refused uninstall removes nothing
    forced = uninstall(etc, force=True)
    assert forced.applied and not (etc / "slurm-ml.conf").exists()
    assert not (etc / MANIFEST_NAME).exists()


def test_a_conflicting_setting_is_refused_naming_the_line(tmp_path: Path) -> None:
    etc = make_conf_dir(tmp_path, extra="PreemptType=preempt/partition_prio\n"
                                       "PriorityType=priority/multifactor\n")
    out = install(cfg(), params(tmp_path, etc))
    assert out.exit_code == 1
    [conflict] = out.changes.refusals
    assert "slurm.conf:" in conflict and "PreemptType=preempt/partition_prio" in conflict
    assert "slurm-ml needs PreemptType=preempt/qos" in conflict
    # The same value twice is no conflict, only a note.
    forced = install(cfg(), params(tmp_path, etc), force=True)
    assert forced.applied
    assert any("PriorityType=priority/multifactor" in n for n in forced.changes.notes)


def test_scheduler_parameters_are_merged_and_a_different_item_conflicts(
        tmp_path: Path) -> None:
    etc = make_conf_dir(tmp_path)
    install(cfg(), params(tmp_path, etc))
    inc = (etc / "slurm-ml.conf").read_text()
    assert "SchedulerParameters=bf_interval=30,nohold_on_prolog_fail,max_switch_wait=" in inc
    uninstall(etc)
    other = tmp_path / "b"
    other.mkdir()
    etc2 = make_conf_dir(other, extra="SchedulerParameters=max_switch_wait=60\n")
    out = install(cfg(), params(other, etc2))
    assert out.exit_code == 1 and "max_switch_wait" in out.changes.refusals[0]


def test_an_existing_billing_weight_conflicts_and_force_restores_it(tmp_path: Path) -> None:
    etc = make_conf_dir(tmp_path)
    conf = etc / "slurm.conf"
    text = conf.read_text().replace("PartitionName=debug Nodes=gpu[01-06] Default=NO "
                                    "MaxTime=60 State=UP OverSubscribe=NO",
                                    'PartitionName=debug Nodes=gpu[01-06] Default=NO '
                                    'MaxTime=60 State=UP OverSubscribe=NO '
                                    'TRESBillingWeights="CPU=1.0"  # site billing')
    conf.write_text(text)
    before = snapshot(tmp_path)
    out = install(cfg(), params(tmp_path, etc))
    assert out.exit_code == 1 and "TRESBillingWeights" in out.changes.refusals[0]
    install(cfg(), params(tmp_path, etc), force=True)
    line = next(x for x in conf.read_text().splitlines() if x.startswith("PartitionName=debug"))
    assert line.endswith(f'TRESBillingWeights="{WEIGHTS}"  # site billing')
    uninstall(etc)
    assert snapshot(tmp_path) == before


def test_a_missing_partition_or_slurm_conf_is_bad_input(tmp_path: Path) -> None:
    etc = make_conf_dir(tmp_path)
    conf = etc / "slurm.conf"
    conf.write_text("\n".join(x for x in conf.read_text().splitlines()
                              if not x.startswith("PartitionName=debug")) + "\n")
    with pytest.raises(BadInput, match="no PartitionName line for debug"):
        install(cfg(), params(tmp_path, etc))
    with pytest.raises(BadInput, match=r"slurm\.conf not found"):
        install(cfg(), params(tmp_path, tmp_path / "nowhere"))


def test_lines_the_admin_appended_after_the_include_survive_uninstall(tmp_path: Path) -> None:
    etc = make_conf_dir(tmp_path)
    original = (etc / "slurm.conf").read_text()
    install(cfg(), params(tmp_path, etc))
    with (etc / "slurm.conf").open("a") as fh:
        fh.write("DebugFlags=Backfill\n")
    uninstall(etc)
    assert (etc / "slurm.conf").read_text() == original + "DebugFlags=Backfill\n"


def test_uninstall_without_a_manifest_says_so(tmp_path: Path) -> None:
    etc = make_conf_dir(tmp_path)
    out = uninstall(etc, cfg=cfg())
    assert out.exit_code == 0 and "not installed" in out.render(diff=False)
    assert "sacctmgr -i delete account name=llm-pretrain" in out.render(diff=False)


def test_the_env_file_reads_back_as_it_was_written(tmp_path: Path) -> None:
    """The dev cluster starts submitd with the env file's variables in its environment
    (never the DSN on argv), so the file must read back exactly, quoting included."""
    from dataclasses import replace

    from slurm_ml.deploy.bundle import env_text, parse_env_text

    p = replace(params(tmp_path, tmp_path / "etc"), dsn="postgresql://u:p%20w'd@h:1/db?x=1 2",
                extra_env=(("SLURM_ML_HOOK_LOG", "/var/log/with space.log"),))
    back = parse_env_text(env_text(p))
    assert back["SLURM_ML_DSN"] == "postgresql://u:p%20w'd@h:1/db?x=1 2"
    assert back["SLURM_ML_HOOK_LOG"] == "/var/log/with space.log"
    assert back["SLURM_ML_CONFIG"] == str(p.config_path)
    assert parse_env_text("A=one # a comment\nB=''\n# only a comment\n") == {"A": "one",
                                                                              "B": ""}
    for bad in ("no equals sign", "1BAD=x", "OK='unterminated", "TWO=two words"):
        with pytest.raises(BadInput, match="<env file>:1: "):
            parse_env_text(bad)
