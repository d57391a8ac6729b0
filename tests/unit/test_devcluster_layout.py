"""Two dev clusters on one host: `devcluster up --ports-offset N` moves every port and the
job ids, records the ports in the state directory, and every later Layout(root) (down,
env, status, the tests) reads them back."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config
from slurm_ml.devcluster.layout import (
    Layout,
    Ports,
    first_job_id,
    record_ports,
    recorded_ports,
)
from slurm_ml.slurm import render


def _all(p: Ports, nodes: int) -> set[int]:
    return {p.slurmctld, p.slurmd, p.slurmdbd, p.mysql, p.postgres,
            *range(p.node_base, p.node_base + nodes)}


def test_an_offset_moves_every_port_and_shares_none_with_the_defaults() -> None:
    base, moved = Ports(), Ports.shifted(100)
    for f in dataclasses.fields(Ports):
        assert getattr(moved, f.name) == getattr(base, f.name) + 100
    assert moved.offset == 100 and base.offset == 0 and Ports.shifted(0) == base
    nodes = len(load_config(DEFAULT_CONFIG).all_nodes()) + 1  # and the site's cpu01
    assert not _all(base, nodes) & _all(moved, nodes)
    assert not _all(moved, nodes) & _all(Ports.shifted(200), nodes)
    with pytest.raises(ValueError):
        Ports.shifted(-1)


def test_job_ids_start_apart_per_offset() -> None:
    assert first_job_id(Ports()) == 0  # Slurm's default, no FirstJobId line
    assert first_job_id(Ports.shifted(100)) == 1_000_000
    assert first_job_id(Ports.shifted(200)) == 2_000_000


def test_layout_reads_the_ports_up_recorded(tmp_path: Path) -> None:
    assert Layout(tmp_path).ports == Ports()  # nothing recorded: the defaults
    (tmp_path / "state.json").write_text(json.dumps({"other": 1}))
    record_ports(tmp_path, Ports.shifted(100))
    data = json.loads((tmp_path / "state.json").read_text())
    assert data["other"] == 1 and data["ports_offset"] == 100
    assert data["first_job_id"] == 1_000_000
    assert recorded_ports(tmp_path) == Ports.shifted(100)
    assert Layout(tmp_path).ports == Ports.shifted(100)
    # given ports win over the record (`up --ports-offset`)
    assert Layout(tmp_path, Ports.shifted(300)).ports == Ports.shifted(300)


@pytest.mark.parametrize("text", ["", "{", "[]", '{"ports": {"slurmctld": "x", "bad": 1}}',
                                  '{"ports": {"slurmctld": "16917"}}',
                                  '{"ports": {"postgres": 70000}}'])
def test_an_unreadable_record_means_the_defaults(tmp_path: Path, text: str) -> None:
    (tmp_path / "state.json").write_text(text)
    assert Layout(tmp_path).ports == Ports()


def _site(first: int) -> render.SiteParams:
    return render.SiteParams(controller_host="h", state_dir="/s", run_dir="/s/run",
                             log_dir="/s/log", gpu_dev_dir="/s/dev", first_job_id=first)


def test_slurm_conf_names_first_job_id_only_when_moved() -> None:
    cfg = load_config(DEFAULT_CONFIG)
    moved = render.render_all(cfg, _site(1_000_000))["slurm.conf"]
    assert "\nFirstJobId=1000000\n" in moved
    plain = render.render_all(cfg, _site(0))["slurm.conf"]
    assert "\nFirstJobId=" not in plain
