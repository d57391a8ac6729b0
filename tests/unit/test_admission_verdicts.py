"""Issue 33's admission classes: reasons Slurm would give, advice that keeps the job, and
jobs that fill their nodes with CPUs or memory.

Each sbatch line goes the way ``slurm-ml submit-check`` sends it (``submitd.check``:
``sbatch_args`` fields, with the option the GPUs per node were written in, through
``PolicyServer``) on the dev cluster's config: gpu[01-02] 8x a100_80g and gpu[03-04] 8x
a100_40g, 64 CPUs / 512000 MB each; gpu[05-06] 4x v100, 32 CPUs / 256000 MB each; all six
in partitions gpu (7 days) and debug (60 min).

Slurm's own verdict is worked out here, independently of ``policy.admission.shape``: a job of N
nodes x G GPUs can be placed when one partition has N nodes with G GPUs or more (of its
type, if it names one; an untyped request takes any type, several at once) and the CPUs
and memory one node's share needs.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from jobdesc_helpers import applied, gpu_items, total_gpus

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config
from slurm_ml.submitd.check import ComponentVerdict, check
from slurm_ml.submitd.sbatch_args import parse_sbatch
from slurm_ml.submitd.server import PolicyServer
from slurm_ml.submitd.state import StateRefresher

CFG = load_config(DEFAULT_CONFIG)
SERVER = PolicyServer(CFG, StateRefresher(None, CFG))
#: (GPU type, GPUs, CPUs, MB) per node, and how many such nodes each partition has
NODES = [(c.gpu_type, c.gpus_per_node, c.cpus, c.memory_mb, 2) for c in CFG.node_classes]
assert sum(n for *_x, n in NODES) == 6, "the dev cluster's six GPU nodes, two per class"


def verdict(argv: list[str], user: str = "alice") -> ComponentVerdict:
    (one,) = check(SERVER, [*argv, "--wrap", "srun train.py"], None, user=user)
    return one


def after(argv: list[str]) -> dict[str, Any]:
    """The job as the shim would leave it after admission's reply."""
    (job,) = parse_sbatch([*argv, "--wrap", "srun train.py"], user="alice")
    got = verdict(argv)
    return applied(job, {"set": got.changes})


def slurm_places(nodes: int, per_node: int, cpus: int, mem: int,
                 gpu_type: str | None = None) -> bool:
    """Slurm's own arithmetic: enough nodes that hold one node's share."""
    fit = sum(n for t, g, c, m, n in NODES
              if g >= per_node and c >= cpus and m >= mem and gpu_type in (None, t))
    return fit >= nodes


def advice(message: str) -> list[tuple[list[str], int]]:
    """(flags, GPUs) of each fix a rejection names."""
    m = re.search(r"Nearest valid requests: (.*?)\.(?: |$)", message)
    out = []
    for item in (m[1].split("; ") if m else []):
        fix = re.fullmatch(r"(.*) \((\d+) GPUs?\)", item)
        assert fix, item
        out.append((fix[1].split(), int(fix[2])))
    return out


# --------------------------------------------------------------------- reasons that are true

#: (id, sbatch line, (nodes, GPUs per node, CPUs per node)), all untyped: jobs Slurm
#: would place, so no rejection of them may say "pend forever"
SLURM_PLACES = [
    ("untyped-3x4-on-any-4-gpu-or-larger-nodes", ["--gres=gpu:4", "-N3"], (3, 4, 1)),
    ("untyped-4x4-gpus-per-node", ["--gpus-per-node=4", "-N4"], (4, 4, 1)),
    ("untyped-4x8-across-a100-types", ["-N4", "--gpus-per-node=8", "--ntasks-per-node=8"],
     (4, 8, 8)),
    ("untyped-5x4-gres", ["--gres=gpu:4", "-N5"], (5, 4, 1)),
    ("untyped-2x4-40-cpus-fits-8-gpu-nodes", ["-N2", "--gres=gpu:4", "--cpus-per-task=40"],
     (2, 4, 40)),
]


@pytest.mark.parametrize(("argv", "shape"), [c[1:] for c in SLURM_PLACES],
                         ids=[c[0] for c in SLURM_PLACES])
def test_a_job_slurm_would_place_is_never_said_to_pend_forever(
        argv: list[str], shape: tuple[int, int, int]) -> None:
    nodes, per_node, cpus = shape
    assert slurm_places(nodes, per_node, cpus, 0)
    got = verdict(argv)
    assert "pend forever" not in got.message, got.message
    assert "more than any node" not in got.message, got.message
    if got.action == "reject":  # a policy refusal, and it can be overridden
        assert "allow_fragment" in got.message, got.message


#: (id, sbatch line, words the reason must contain): jobs Slurm could never place
SLURM_NEVER = [
    ("typed-v100-3x4", ["--gres=gpu:v100:4", "-N3"], ["only 2 nodes", "v100"]),
    ("untyped-5x8", ["-N5", "--gres=gpu:8"], ["only 4 nodes here have 8 GPUs or more"]),
    ("launcher-160-cpus", ["-N4", "--gres=gpu:4", "--ntasks-per-node=1",
                           "--cpus-per-task=160"], ["160 CPUs per node"]),
    ("gpus-48-over-every-gpu", ["--gpus=48"], ["most any job can get here is 40"]),
]


@pytest.mark.parametrize(("argv", "says"), [c[1:] for c in SLURM_NEVER],
                         ids=[c[0] for c in SLURM_NEVER])
def test_pend_forever_is_said_only_with_slurms_own_reason(argv: list[str],
                                                          says: list[str]) -> None:
    got = verdict(argv)
    assert got.action == "reject", got
    assert "pend forever" in got.message, got.message
    for text in says:
        assert text in got.message, got.message


#: sbatch lines with more CPUs or memory per node than some nodes have: a rejection may
#: not call a node too small that has what the job needs per node
NEEDS_LINES = [
    ["-N2", "--gres=gpu:4", "--cpus-per-task=64"],  # the 8-GPU nodes have exactly 64
    ["-N2", "--gres=gpu:4", "--cpus-per-task=40"],
    ["-N2", "--gres=gpu:4", "--cpus-per-task=64", "--mem=300G"],
    ["--gpus=16", "--cpus-per-gpu=16"],
    ["-N2", "--gres=gpu:4", "--ntasks-per-node=1", "--cpus-per-task=160"],
    ["--gpus=4", "--ntasks=1", "--cpus-per-task=80"],
]


@pytest.mark.parametrize("argv", NEEDS_LINES, ids=" ".join)
def test_a_node_with_exactly_enough_is_never_called_too_small(argv: list[str]) -> None:
    got = verdict(argv)
    need = re.search(r"needs (\d+) CPUs per node", got.message)
    sizes = re.findall(r"(\d+)-GPU nodes: (\d+) CPUs", got.message)
    if need and "more than any node" in got.message:
        for gpn, cpus in sizes:
            assert int(cpus) < int(need[1]), (f"{gpn}-GPU nodes have {cpus} CPUs, enough "
                                              f"for {need[1]}: {got.message}")


# --------------------------------------------------------------------- advice keeps the job

#: (id, sbatch line, GPUs, advice that must be first): a shape with the same GPUs and
#: tasks exists, so every fix keeps them, in the options the line used
KEEPING = [
    ("2x2-gres-ntasks-4", ["-N2", "--ntasks=4", "--gres=gpu:2"], 4,
     "--nodes=1 --gres=gpu:4"),
    ("2x2-gpus-per-node", ["-N2", "--ntasks=4", "--gpus-per-node=2"], 4,
     "--nodes=1 --gpus-per-node=4"),
    ("2x2-ntasks-per-node-2", ["-N2", "--ntasks-per-node=2", "--gres=gpu:2"], 4,
     "--nodes=1 --gres=gpu:4 --ntasks-per-node=4"),
    ("2-per-node-gpus-per-task", ["--ntasks=4", "--ntasks-per-node=2", "--gpus-per-task=1"],
     4, "--ntasks-per-node=4"),
    ("4x1-typed-gpus-per-node", ["-N4", "--gpus-per-node=a100_80g:1", "--ntasks=4"], 4,
     "--nodes=1 --gpus-per-node=a100_80g:4"),
]


@pytest.mark.parametrize(("argv", "gpus", "first"), [c[1:] for c in KEEPING],
                         ids=[c[0] for c in KEEPING])
def test_advice_keeps_the_jobs_gpus_and_tasks_in_its_own_options(
        argv: list[str], gpus: int, first: str) -> None:
    got = verdict(argv)
    assert got.action == "reject", got
    fixes = advice(got.message)
    assert fixes, got.message
    assert " ".join(fixes[0][0]) == first, got.message
    before = after([*argv, "--comment=allow_fragment"])
    tasks = before.get("num_tasks")
    for flags, count in fixes:
        assert count == gpus, f"{flags} gives {count} GPUs, not {gpus}: {got.message}"
        other = "--gres" if "--gpus-per-node" in " ".join(argv) else "--gpus-per-node"
        assert not any(f.startswith(other) for f in flags), got.message
        fixed = after([*argv, *flags])
        assert verdict([*argv, *flags]).action == "accept", (flags, got.message)
        assert total_gpus(fixed) == gpus, (flags, fixed)
        if tasks is not None:
            assert fixed.get("num_tasks") == tasks, (flags, fixed)


# --------------------------------------------------------------------- whole-node use

#: (id, sbatch line, CPUs per node): multi-node jobs whose CPUs or memory per node take all
#: of an 8-GPU node: they strand no GPUs of their own making, so they run there whole
WHOLE_NODE = [
    ("2x4-64-cpus", ["-N2", "--gres=gpu:4", "--cpus-per-task=64"], 64),
    ("2x2-8-tasks-of-8-cpus", ["-N2", "--gpus-per-node=2", "--ntasks-per-node=8",
                               "--cpus-per-task=8"], 64),
    ("2x4-all-memory", ["-N2", "--gres=gpu:4", "--cpus-per-task=40", "--mem=500G"], 40),
]


@pytest.mark.parametrize(("argv", "cpus"), [c[1:] for c in WHOLE_NODE],
                         ids=[c[0] for c in WHOLE_NODE])
def test_a_job_that_fills_its_nodes_with_cpus_or_memory_runs_there_whole(
        argv: list[str], cpus: int) -> None:
    got = verdict(argv)
    assert got.action == "accept", got.message
    job = after(argv)
    per_node = gpu_items(job["tres_per_node"])[0][1]
    nodes = job["min_nodes"]
    assert (nodes, job["max_nodes"], total_gpus(job)) == (2, 2, 2 * per_node)
    assert job["shared"] == 0  # exclusive: the node is the job's
    assert "v100" not in job["features"] and "a100" in job["features"]
    assert "take the whole node" in got.message, got.message
    assert slurm_places(nodes, per_node, cpus, 0, None)


def test_a_job_that_leaves_room_on_a_bigger_node_is_refused_saying_why() -> None:
    got = verdict(["-N2", "--gres=gpu:4", "--cpus-per-task=40"])
    assert got.action == "reject", got
    assert "would strand GPUs" in got.message
    assert "leave 4 GPUs of each node idle" in got.message
    assert "the 4-GPU nodes lack the 40 CPUs" in got.message


def test_a_job_that_fills_a_smaller_node_exactly_is_kept_there() -> None:
    """--mem=0 takes any node whole, but the nodes it fills exactly go first."""
    got = verdict(["-N2", "--gres=gpu:4", "--mem=0"])
    assert got.action == "accept", got.message
    assert after(["-N2", "--gres=gpu:4", "--mem=0"])["features"] == "v100"


# --------------------------------------------------------------------- time limits

def test_a_time_limit_over_every_partition_is_refused_with_slurms_reason() -> None:
    got = verdict(["-p", "gpu", "--time=14-0", "--gres=gpu:1"])
    assert got.action == "reject", got
    assert "PartitionTimeLimit" in got.message and "--time=7-00:00:00" in got.message
    assert verdict(["-p", "gpu", "--time=7-0", "--gres=gpu:1"]).action == "accept"
    # Slurm may start it in any partition of its list
    assert verdict(["-p", "debug,gpu", "--time=61", "--gres=gpu:1"]).action == "accept"
    assert verdict(["-p", "debug", "--time=61", "--gres=gpu:1"]).action == "reject"

