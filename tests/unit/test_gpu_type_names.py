"""Every GPU type name config check accepts works everywhere; the rest it refuses, saying why.

MIG types (``3g.40gb``, ``a100_3g.40gb``) start with a digit or hold a '.', and used to be
dropped by a GPU parser that wanted a letter first: ``--gres=gpu:3g.40gb:2`` was accepted
unchanged and unrecorded, and the daemon never saw the job's GPUs. The grammar is Slurm's
(``slurm_get_next_tres()``, see ``slurm_ml/gres.py``).

No capture here has a MIG type (the captured clusters had none), so the Slurm strings
below are the real captures in ``tests/fixtures/slurm/`` with their type name replaced:
same fields, same spellings (22.05 ``gres:gpu:T:N``, 24.11 ``gres/gpu:T:N``, AllocTRES
``gres/gpu:T=N``), only the name differs.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.cli import main
from slurm_ml.config import Config, ConfigError, load_config, parse_config
from slurm_ml.config.checks import check_gpu_type, check_name
from slurm_ml.daemon.views import footprints, running_jobs, usage_billing_gpus, waiting_jobs
from slurm_ml.gres import GresItem, gpu_type_problem, parse_count, parse_item, tres_gpu_type
from slurm_ml.model import GpuRequest, JobState
from slurm_ml.policy.admission import read_record
from slurm_ml.sim.engine import simulate
from slurm_ml.sim.scenario import cluster_config
from slurm_ml.sim.state import billing_weight
from slurm_ml.sim.workload import SimJob
from slurm_ml.slurm import parse
from slurm_ml.slurm.tres import gpu_type_of_gres, parse_gpu_spec
from slurm_ml.submitd.check import check
from slurm_ml.submitd.sbatch_args import parse_sbatch
from slurm_ml.submitd.server import PolicyServer
from slurm_ml.submitd.state import StateRefresher
from slurm_ml.submitd.wire import to_request

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures/slurm"
MIG = "3g.40gb"  # an A100/H100 MIG profile: starts with a digit, holds a '.'
A100_MIG = "a100_3g.40gb"  # the spelling gres.shtml's MIG example uses (a100_3g.20gb)
WEIGHT = {MIG: 0.375, A100_MIG: 0.5}
#: The default config's types these tests rename into MIG types.
RENAMED = {"v100": MIG, "a100_40g": A100_MIG}


def mig_data() -> dict[str, Any]:
    """The shipped config with v100 renamed 3g.40gb and a100_40g renamed a100_3g.40gb
    (type, feature and node class), at their own billing weights."""
    data: dict[str, Any] = yaml.safe_load(DEFAULT_CONFIG.read_text(encoding="utf-8"))
    types = data["gpu_types"]
    assert set(RENAMED) <= set(types), "the default config changed its GPU types"
    for old, new in RENAMED.items():
        spec = types.pop(old)
        types[new] = {**spec, "feature": new, "billing_weight": WEIGHT[new]}
    for node_class in data["node_classes"]:
        node_class["gpu_type"] = RENAMED.get(node_class["gpu_type"], node_class["gpu_type"])
        node_class["features"] = [RENAMED.get(f, f) for f in node_class["features"]]
    return data


def mig_config() -> Config:
    return parse_config(mig_data(), source="MIG config")


CFG = mig_config()


def first_node_of(gpu_type: str) -> str:
    return next(n for n in CFG.all_nodes()
                if (t := CFG.gpu_type_of_node(n)) is not None and t.name == gpu_type)


# --------------------------------------------------------------------------- the grammar


@pytest.mark.parametrize(("item", "want"), [
    # what slurm_get_next_tres() makes of each (src/common/slurm_protocol_defs.c)
    ("gpu", GresItem("", "gpu", None, 1)),
    ("gpu:2", GresItem("", "gpu", None, 2)),
    ("gpu:3g.40gb:2", GresItem("", "gpu", MIG, 2)),
    ("gpu:3g.40gb", GresItem("", "gpu", MIG, 1)),
    ("gres:gpu:3g.40gb:2", GresItem("gres:", "gpu", MIG, 2)),
    ("gres/gpu:3g.40gb:2", GresItem("gres/", "gpu", MIG, 2)),
    ("gres/gpu:3g.40gb=2", GresItem("gres/", "gpu", MIG, 2, "=")),
    ("gres/gpu:a100_3g.40gb:7", GresItem("gres/", "gpu", A100_MIG, 7)),
    ("gres/gpu=1", GresItem("gres/", "gpu", None, 1, "=")),  # 24.11 TresPerTask
    ("gpu:2k", GresItem("", "gpu", None, 2048)),  # suffix_mult(): a count, not a type
    ("gpu:1KB", GresItem("", "gpu", None, 1000)),
    ("gpu:3g", GresItem("", "gpu", None, 3 * 1024**3)),  # so "3g" cannot be a type
    ("gpu:2x", GresItem("", "gpu", "2x", 1)),  # no such suffix: a type
    ("gpu:a:b:2", GresItem("", "gpu", "a:b", 2)),  # as Slurm: the type runs to the count
    ("gpu:", None), ("gpu=a100", None), ("gpu:a:b", None), ("2", None), ("", None),
])
def test_items_read_as_slurm_reads_them(item: str, want: GresItem | None) -> None:
    assert parse_item(item) == want


def test_a_count_slurm_would_overflow_on_is_not_a_count() -> None:
    assert parse_count(str(2**64 - 1)) is None  # strtoull's ULLONG_MAX: Slurm refuses it
    assert parse_count(str(2**64 - 2)) == 2**64 - 2


def test_tres_names_give_their_gpu_type() -> None:
    assert tres_gpu_type(f"gres/gpu:{MIG}") == MIG
    assert [tres_gpu_type(k) for k in ("gres/gpu", "gres/gpumem", "cpu", "gres/gpu:")] == [
        None, None, None, None]


#: Names made of Slurm-safe characters and of every separator, digits first or not.
NAMES = st.text(alphabet="ag0123456789._-:=, kKbB", min_size=0, max_size=10)


@given(NAMES)
def test_config_accepts_exactly_the_names_every_spelling_reads_back(name: str) -> None:
    spellings = [f"gpu:{name}", f"gpu:{name}:2", f"gres:gpu:{name}:2",
                 f"gres/gpu:{name}:2", f"gres/gpu:{name}=2"]
    reads_back = bool(name) and all(
        (got := parse_item(s)) is not None and got.type == name for s in spellings)
    assert (check_gpu_type(name) is None) == (reads_back and check_name(name) is None)
    # Blanks read back in a TRES string, but end a gres.conf value and a command-line word.
    assert (gpu_type_problem(name) is None) == (reads_back and not re.search(r"\s", name))
    if check_gpu_type(name) is None:
        for spelling in spellings[1:]:
            assert parse_gpu_spec(spelling, "node") == [GpuRequest(2, "node", name)]
        assert tres_gpu_type(f"gres/gpu:{name}") == name
        assert gpu_type_of_gres(f"gpu:{name}:8(S:0)") == (name, 8)


# --------------------------------------------------------------------------- config check


def test_mig_type_names_pass_config_check() -> None:
    assert {MIG, A100_MIG} <= set(CFG.gpu_types)
    assert [CFG.gpu_types[t].billing_weight for t in (MIG, A100_MIG)] == [0.375, 0.5]
    assert CFG.gpu_type_of_node(first_node_of(MIG)) == CFG.gpu_types[MIG]


def _issues(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    return [str(issue) for issue in info.value.issues]


def _renamed(old: str, new: str) -> dict[str, Any]:
    data = copy.deepcopy(mig_data())
    data["gpu_types"][new] = data["gpu_types"].pop(old)
    for node_class in data["node_classes"]:
        if node_class["gpu_type"] == old:
            node_class["gpu_type"] = new
    return data


@pytest.mark.parametrize(("name", "why"), [
    ("80gb", "invalid GPU type '80gb': Slurm reads it as a count, so --gpus=80gb asks for "
             "80000000000 GPUs rather than one 80gb; add a letter that makes it a name "
             "(e.g. a100_80gb, mig_80gb)"),
    ("7", "invalid GPU type '7': Slurm reads it as a count"),
    ("a100:3g.40gb", "invalid GPU type 'a100:3g.40gb': it holds ':', which Slurm's GRES "
                     "syntax (gpu:TYPE:COUNT, gres/gpu:TYPE=COUNT) splits on; pick a name "
                     "without ',', ':', '=' or blanks"),
    ("3g=40gb", "invalid GPU type '3g=40gb': it holds '='"),
    ("3g 40gb", "invalid GPU type '3g 40gb': it holds a blank"),
])
def test_config_check_refuses_a_name_the_grammar_cannot_carry(name: str, why: str) -> None:
    got = _issues(_renamed(MIG, name))
    assert got[0].startswith(f"gpu_types.{name}: {why}"), got
    # the node class naming it is told the same, not "unknown GPU type"
    assert all(name in issue for issue in got)


def test_config_check_on_the_command_line_names_the_path(tmp_path: Path) -> None:
    bad = tmp_path / "mig.yaml"
    bad.write_text(yaml.safe_dump(_renamed(MIG, "a100:3g.40gb")), encoding="utf-8")
    good = tmp_path / "ok.yaml"
    good.write_text(yaml.safe_dump(mig_data()), encoding="utf-8")

    refused = CliRunner().invoke(main, ["config", "check", str(bad)])
    accepted = CliRunner().invoke(main, ["config", "check", str(good)])

    assert refused.exit_code == 2
    assert "gpu_types.a100:3g.40gb: invalid GPU type 'a100:3g.40gb': it holds ':'" in (
        refused.output)
    assert accepted.exit_code == 0, accepted.output
    assert load_config(good).gpu_types[MIG].billing_weight == 0.375


# --------------------------------------------------------------------------- admission


def server(cfg: Config = CFG) -> PolicyServer:
    return PolicyServer(cfg, StateRefresher(None, cfg))


@pytest.mark.parametrize("gpu_type", [MIG, A100_MIG])
@pytest.mark.parametrize("option", ["--gres=gpu:{}:2", "--gpus={}:2"])
def test_submit_check_reads_and_records_a_mig_request(option: str, gpu_type: str) -> None:
    argv = [option.format(gpu_type), "--wrap", "srun python train.py"]
    job = parse_sbatch(argv, user="alice")[0]
    assert to_request(job).gpus == (
        GpuRequest(2, "job" if option.startswith("--gpus") else "node", gpu_type),)

    (verdict,) = check(server(), argv, None, user="alice")

    assert verdict.action == "accept", verdict.message
    record = read_record(verdict.changes["admin_comment"])
    assert record is not None and record["qos"] == "alloc"
    assert verdict.changes["qos"] == "alloc"
    if option.startswith("--gpus"):  # shaped onto one node, the type kept
        assert record["shape"] == "1x2"
        assert verdict.changes["tres_per_node"] == f"gres:gpu:{gpu_type}:2"


def test_without_the_type_in_the_config_the_request_is_refused_not_passed() -> None:
    """The type is read: a cluster that lacks it rejects the job (it used to pass)."""
    default = load_config(DEFAULT_CONFIG)
    assert MIG not in default.gpu_types
    (verdict,) = check(server(default), [f"--gres=gpu:{MIG}:2", "--wrap", "true"], None,
                       user="alice")
    assert verdict.action == "reject"
    assert f"GPU type {MIG} does not exist" in verdict.message


def _capture_fields(command: str) -> dict[str, object]:
    """The job_desc fields Slurm 24.11.5 gave the shim for ``sbatch <command>``."""
    lines = (FIXTURES / "24.11/job_submit_fields.txt").read_text().splitlines()
    probe = lines[lines.index(f"# sbatch {command}   -> job 1") + 1]
    out: dict[str, object] = {}
    for key, raw in re.findall(r'(\w+)=("(?:[^"\\]|\\.)*"|number:\d+|nil)',
                               probe.split(" job_desc ", 1)[1]):
        if raw.startswith('"'):
            out[key] = raw[1:-1]
        elif raw.startswith("number:") and int(raw[7:]) not in (4294967294, 65534):
            out[key] = int(raw[7:])
    return out


def test_the_shim_fields_of_24_11_with_a_mig_type_are_read_and_recorded() -> None:
    fields = _capture_fields("--gres=gpu:a100_80g:4 --comment=gpu_mem=30G --wrap 'sleep 600'")
    assert fields["tres_per_node"] == fields["gres"] == "gres/gpu:a100_80g:4"
    job = {k: (f"gres/gpu:{MIG}:2" if k in ("tres_per_node", "gres") else v)
           for k, v in fields.items()}
    job["comment"] = ""  # 30 GB does fit a 40 GB slice, but the need is not the point here

    assert to_request(job).gpus == (GpuRequest(2, "node", MIG),)
    reply = server().handle_line(json.dumps({"v": 1, "op": "submit", "uid": 1002, "job": job}))

    assert reply["action"] == "accept", reply
    assert read_record(reply["set"]["admin_comment"]) is not None
    assert reply["set"]["qos"] == "alloc"


# --------------------------------------------------------------------------- the daemon


def _sacct_line(version: str, file: str, job_id: str) -> str:
    for line in (FIXTURES / version / file).read_text().splitlines():
        if line.startswith(f"{job_id}|"):
            return line
    raise AssertionError(f"no job {job_id} in {version}/{file}")


@pytest.mark.parametrize(("version", "file", "job_id"), [
    ("24.11", "sacct_truncate_p_epoch.txt", "2"),
    ("22.05", "sacct_truncate_p.txt", "1"),
])
def test_sacct_usage_of_a_mig_job_counts_two_gpus_at_their_weight(
        version: str, file: str, job_id: str) -> None:
    line = _sacct_line(version, file, job_id)
    assert "gres/gpu:a100_80g=2,gres/gpu=2" in line
    (usage,) = parse.parse_sacct_usage(line.replace("a100_80g", MIG), 0, 2**31)

    assert usage.alloc_tres[f"gres/gpu:{MIG}"] == 2 and usage.gpus == 2
    assert usage_billing_gpus(CFG, usage) == 2 * 0.375
    (footprint,) = footprints(CFG, [], [usage])
    assert footprint.billing_gpus == 0.75


def _json_job(version: str, tres_per_node: str, state: str) -> dict[str, Any]:
    """A job of the real ``squeue --json`` capture (22.05 states are strings, 24.11 lists)."""
    jobs = json.loads((FIXTURES / version / "squeue.json").read_text())["jobs"]
    return copy.deepcopy(next(
        j for j in jobs if j.get("tres_per_node") == tres_per_node
        and state in (j["job_state"] if isinstance(j["job_state"], list) else [j["job_state"]])))


@pytest.mark.parametrize(("version", "real", "mig"), [
    ("22.05", "gres:gpu:a100_80g:2", f"gres:gpu:{MIG}:2"),
    ("24.11", "gres/gpu:a100_80g:2", f"gres/gpu:{MIG}:2"),
])
def test_squeue_json_of_a_running_mig_job_counts_and_bills_it(
        version: str, real: str, mig: str) -> None:
    raw = _json_job(version, real, "RUNNING")
    raw.update(tres_per_node=mig, nodes=first_node_of(MIG))
    job = parse.job_from_json(raw)
    assert job.gpus == (GpuRequest(2, "node", MIG),) and job.total_gpus == 2

    (running,) = running_jobs(CFG, [job])

    assert (running.gpus, running.gpu_type, running.billing_gpus) == (2, MIG, 0.75)


def test_a_pending_mig_job_waits_for_its_type_at_its_weight() -> None:
    raw = _json_job("22.05", "gres:gpu:a100_40g:1", "PENDING")
    raw.update(tres_per_node=f"gres:gpu:{A100_MIG}:2")
    job = parse.job_from_json(raw)
    assert job.state == JobState.PENDING

    (waiting,) = waiting_jobs(CFG, [job])

    assert (waiting.gpus, waiting.gpu_types, waiting.billing_gpus) == (2, frozenset({A100_MIG}), 1.0)


def test_scontrol_lines_of_24_11_with_a_mig_type_give_the_job_and_node_gpus() -> None:
    job_line = next(line for line in (FIXTURES / "24.11/scontrol_show_job_o.txt")
                    .read_text().splitlines() if "TresPerNode=gres/gpu:a100_80g:2" in line)
    node_line = (FIXTURES / "24.11/scontrol_show_node_o.txt").read_text().splitlines()[0]
    assert "Gres=gpu:a100_80g:8 " in node_line

    (job,) = parse.parse_scontrol_jobs(job_line.replace("a100_80g", MIG))
    (node,) = parse.parse_scontrol_nodes(node_line.replace("a100_80g", MIG))

    assert job.gpus == (GpuRequest(2, "node", MIG),)
    assert (node.gpu_type, node.gpus_total) == (MIG, 8)


# --------------------------------------------------------------------------- the simulator


def test_the_simulator_places_and_bills_mig_typed_jobs() -> None:
    cfg = cluster_config(CFG, 16, {"a": 1.0, "b": 1.0}, users={"a": "ua", "b": "ub"},
                         gpus_per_node=8, gpu_type=MIG)
    assert {nc.gpu_type for nc in cfg.node_classes} == {MIG}
    assert billing_weight(cfg, MIG) == 0.375

    jobs = [SimJob(job_id=1, team="a", user="ua", submit_s=0, gpus=8, duration_s=100,
                   gpu_type=MIG),
            SimJob(job_id=2, team="b", user="ub", submit_s=1, gpus=2, duration_s=50,
                   gpu_type=MIG)]
    result = simulate(cfg, jobs, "fifo")

    assert {j.job_id: (j.start_s, j.end_s) for j in result.jobs} == {1: (0, 100), 2: (1, 51)}
