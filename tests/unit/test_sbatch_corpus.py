"""Real sbatch scripts from public repositories through the real admission policy.

The scripts are third-party data and stay out of the repository: they are read in place
from ``../shared/data/sbatch/`` beside the repository root (``$SLURM_ML_SBATCH_CORPUS``
names another folder; ``tests/sbatch_corpus.py`` resolves it for this test and for
``tests/integration/test_sbatch_corpus_shim.py``, which runs the same scripts through the
real shim), which also holds their ``SOURCES.md``. The project's own record is
``docs/research/sbatch-corpus/``: ``SOURCES.md`` (origin, licence, the lines kept, what
each asks for) and ``expected.yaml``, the outcome an experienced admin wants for each on
the dev cluster's nodes. Without the folder the record is still checked and the tests
that need the scripts skip, naming the folder they looked for. Each script goes the way
``slurm-ml submit-check`` sends it: ``sbatch_args`` turns its ``#SBATCH`` lines into the
job_desc fields the shim would forward, and ``submitd.check`` runs them through
``PolicyServer`` with the dev cluster's config (``slurm_ml.assets.DEFAULT_CONFIG``), no
database.

Where today's admission is known to get a script wrong, ``expected.yaml`` names the class
in ``known_wrong`` (or ``fix_known_wrong``, ``advice_known_wrong``) and the case is a
strict xfail: the day admission gets it right the test fails with XPASS, and the marker
has to go.

The judge of an accepted job is Slurm's own arithmetic, done here on the job as admission
rewrote it: how many GPUs it gets (``--gpus-per-node`` with ``--gpus-per-task`` on the
same node is the larger of the two, not their sum), how many CPUs and how much memory one
node must have, and whether enough nodes of the dev cluster have that.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sbatch_corpus import CASES, CORPUS, RECORD, needs_corpus, script_text, user_of

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config
from slurm_ml.model import NodeClass
from slurm_ml.policy.admission.features import parse_constraint
from slurm_ml.slurm.tres import parse_gpu_spec
from slurm_ml.submitd.check import ComponentVerdict, check
from slurm_ml.submitd.sbatch_args import SbatchParseError, parse_sbatch
from slurm_ml.submitd.server import PolicyServer
from slurm_ml.submitd.state import StateRefresher
from slurm_ml.submitd.wire import NO_VAL, NO_VAL16

CFG = load_config(DEFAULT_CONFIG)
VERDICTS = {"accept", "reject", "keep-or-reject", "sbatch-refuses"}
KEEP_KEYS = {"nodes", "range_may_narrow", "ntasks", "ntasks_per_node", "gpus_per_node",
             "gpus_per_task", "total_gpus", "gpu_types"}
NEEDS_KEYS = {"cpus_per_task", "cpus_per_gpu", "mem_per_node_mb", "mem_per_gpu_mb",
              "mem_per_cpu_mb"}
CASE_KEYS = {"argv", "snippet", "user", "verdict", "reason", "keep", "needs",
             "message_mentions", "message_avoids", "fix", "fixed", "known_wrong",
             "fix_known_wrong", "advice_known_wrong", "issue", "fix_issue"}
#: job_desc fields admission must never change on an accepted job
UNTOUCHED = ("array_inx", "requeue", "time_limit")


def _xfail(case: Mapping[str, Any], key: str) -> list[pytest.MarkDecorator]:
    wrong = case.get(key)
    if not wrong:
        return []
    issue = case.get({"known_wrong": "issue", "fix_known_wrong": "fix_issue"}.get(key, ""), 14)
    where = f"issue {issue}" if issue not in (None, "none") else "not filed yet"
    return [pytest.mark.xfail(strict=True, reason=f"{where}: {wrong}")]


def _params(key: str, only: set[str] | None = None, need: str | None = None) -> list[Any]:
    return [pytest.param(name, marks=_xfail(case, key), id=name.removesuffix(".sbatch"))
            for name, case in sorted(CASES.items())
            if (only is None or case["verdict"] in only) and (need is None or case.get(need))]


# ------------------------------------------------------------------ submitting a script

@dataclass(frozen=True)
class Outcome:
    job: dict[str, Any]  # the fields the shim would send
    verdict: ComponentVerdict

    @property
    def accepted(self) -> bool:
        return self.verdict.action == "accept"

    def final(self) -> dict[str, Any]:
        """The job as admission's reply leaves it (``""``/NO_VAL clear a field)."""
        out = dict(self.job)
        for key, value in self.verdict.changes.items():
            if value in ("", NO_VAL, NO_VAL16):
                out.pop(key, None)
            else:
                out[key] = value
        if "tres_per_node" in self.verdict.changes:
            out["gres"] = out.get("tres_per_node")  # 22.05's gres reads tres_per_node
        return out


def _submit(name: str, extra: list[str] | None = None) -> Outcome:
    case = CASES[name]
    argv = [*case.get("argv", []), *(extra or []), name]
    user = user_of(name)
    script = script_text(name)
    (job,) = parse_sbatch(argv, script, user=user)
    server = PolicyServer(CFG, StateRefresher(None, CFG))
    (verdict,) = check(server, argv, script, user=user)
    return Outcome(job, verdict)


# ------------------------------------------------------------------ Slurm's arithmetic

@dataclass(frozen=True)
class Placement:
    nodes: int
    gpus_per_node: int
    gpus_per_task: int
    tasks: int
    total_gpus: int
    gpu_types: frozenset[str]  # GPU types of the nodes that can hold it


def _gpus(job: Mapping[str, Any], key: str, per: str) -> tuple[int, set[str]]:
    items = parse_gpu_spec(job.get(key) or "", per)
    return sum(g.count for g in items), {g.gpu_type for g in items if g.gpu_type}


def _classes() -> dict[NodeClass, int]:
    counts: dict[NodeClass, int] = {}
    for node in CFG.all_nodes():
        node_class = CFG.node_class_of(node)
        assert node_class is not None
        counts[node_class] = counts.get(node_class, 0) + 1
    return counts


def _features_ok(node_class: NodeClass, features: str) -> bool:
    constraint = parse_constraint(features)
    assert constraint is not None, f"constraint {features!r} too rich for this test"
    have = {*node_class.features, CFG.gpu_types[node_class.gpu_type].feature}
    return all(any(name in have for name in term) for term in constraint.terms)


def _node_range(job: Mapping[str, Any]) -> tuple[int, int]:
    if job.get("min_nodes") is None:
        return 1, len(CFG.all_nodes())
    low = int(job["min_nodes"])
    return low, int(job.get("max_nodes") or low)


def placement(job: Mapping[str, Any], needs: Mapping[str, int]) -> Placement | None:
    """The fewest nodes of the dev cluster Slurm could run ``job`` on, or None."""
    per_node, types_n = _gpus(job, "tres_per_node", "node")
    per_job, types_j = _gpus(job, "tres_per_job", "job")
    per_task, types_t = _gpus(job, "tres_per_task", "task")
    types = types_n | types_j | types_t
    time_limit = job.get("time_limit")
    parts = [p for p in CFG.cluster.partitions if p.name in (job.get("partition") or "")]
    part = parts[0] if parts else CFG.cluster.default_partition
    if time_limit is not None and time_limit > part.max_time_min:
        return None
    low, high = _node_range(job)
    for nodes in range(low, high + 1):
        tpn = job.get("ntasks_per_node")
        tasks = job.get("num_tasks") or (tpn * nodes if tpn else nodes)
        if tasks < nodes:
            continue
        tpn = tpn or math.ceil(tasks / nodes)
        gpn = max(per_node, per_task * tpn, math.ceil(per_job / nodes))
        cpus = max(tpn * needs.get("cpus_per_task", 1), gpn * needs.get("cpus_per_gpu", 0))
        if "mem_per_node_mb" in needs:
            mem = needs["mem_per_node_mb"]
        else:
            mem = gpn * needs.get("mem_per_gpu_mb", 0) or cpus * needs.get("mem_per_cpu_mb", 0)
        fits = {c: n for c, n in _classes().items()
                if (not types or c.gpu_type in types) and c.gpus_per_node >= gpn
                and c.cpus >= cpus and c.memory_mb >= mem
                and _features_ok(c, job.get("features") or "")}
        if sum(fits.values()) >= nodes:
            total = per_job or max(per_node * nodes, per_task * tasks)
            return Placement(nodes, gpn, per_task, tasks, total,
                             frozenset(c.gpu_type for c in fits))
    return None


# ------------------------------------------------------------------ the checks

def _problems_accepted(outcome: Outcome, want: Mapping[str, Any],
                       needs: Mapping[str, int]) -> list[str]:
    """What is wrong with an accepted job, measured against ``want`` (empty = right)."""
    final, message = outcome.final(), outcome.verdict.message
    place = placement(final, needs)
    if place is None:
        return [f"accepted, but no node of the dev cluster can hold it: {final}"]
    problems = []
    nodes = want.get("nodes")
    got = (final.get("min_nodes"), final.get("max_nodes") or final.get("min_nodes"))
    if isinstance(nodes, int) and got != (nodes, nodes):
        problems.append(f"node count {got} is not the {nodes} asked for")
    elif isinstance(nodes, str):
        low, high = (int(x) for x in nodes.split("-"))
        if got != (low, high):
            narrowed = (got[0] is not None and low <= got[0] <= (got[1] or 0) <= high)
            if not (want.get("range_may_narrow") and narrowed and "range" in message.lower()):
                problems.append(f"node range {got} is not {nodes} (nor narrowed, saying so)")
    for key, actual in (("ntasks", final.get("num_tasks")),
                        ("ntasks_per_node", final.get("ntasks_per_node")),
                        ("gpus_per_node", place.gpus_per_node),
                        ("gpus_per_task", place.gpus_per_task),
                        ("total_gpus", place.total_gpus)):
        if key in want and actual != want[key]:
            problems.append(f"{key} is {actual}, wanted {want[key]}")
    if "gpu_types" in want and not place.gpu_types <= set(want["gpu_types"]):
        problems.append(f"may run on {sorted(place.gpu_types)}, wanted only "
                        f"{want['gpu_types']} (where it strands no GPUs)")
    for key in UNTOUCHED:
        if final.get(key) != outcome.job.get(key):
            problems.append(f"{key} changed from {outcome.job.get(key)!r} to "
                            f"{final.get(key)!r}")
    return problems


def _mentions(outcome: Outcome, words: list[str]) -> list[str]:
    text = outcome.verdict.message.lower()
    return [f"message does not mention {w!r}: {outcome.verdict.message!r}"
            for w in words if w.lower() not in text]


@needs_corpus
@pytest.mark.parametrize("name", _params("known_wrong"))
def test_admission_does_what_an_admin_wants(name: str) -> None:
    case = CASES[name]
    verdict = case["verdict"]
    if verdict == "sbatch-refuses":
        with pytest.raises(SbatchParseError):
            _submit(name)
        return
    outcome = _submit(name)
    needs = case.get("needs", {})
    if outcome.verdict.action == "reject":
        problems = ([] if verdict in ("reject", "keep-or-reject") else
                    [f"rejected: {outcome.verdict.message}"])
        if verdict == "reject":
            problems += _mentions(outcome, case.get("message_mentions", []))
    elif outcome.accepted:
        problems = ([f"accepted, wanted a rejection ({case['reason']}); set "
                     f"{outcome.verdict.changes}, message {outcome.verdict.message!r}"]
                    if verdict == "reject" else
                    _problems_accepted(outcome, case.get("keep", {}), needs))
    else:
        problems = [f"admission could not decide: {outcome.verdict}"]
    assert not problems, f"{name}: " + "; ".join(problems)


@needs_corpus
@pytest.mark.parametrize("name", _params("advice_known_wrong", {"reject"}, "message_avoids"))
def test_rejection_advice_is_in_the_scripts_own_terms(name: str) -> None:
    """A rejection's advice names options the script uses, not ones it would have to add."""
    outcome = _submit(name)
    assert outcome.verdict.action == "reject", outcome.verdict
    message = outcome.verdict.message
    bad = [w for w in CASES[name]["message_avoids"] if w.lower() in message.lower()]
    assert not bad, f"{name}: the advice speaks of {bad}: {message!r}"


@needs_corpus
@pytest.mark.parametrize("name", _params("fix_known_wrong", {"reject", "keep-or-reject"}, "fix"))
def test_the_fix_an_admin_would_give_is_accepted(name: str) -> None:
    case = CASES[name]
    fixed = case["fixed"]
    outcome = _submit(name, case["fix"])
    assert outcome.accepted, (f"{name} with {case['fix']}: rejected: "
                              f"{outcome.verdict.message}")
    problems = _problems_accepted(outcome, fixed, fixed.get("needs", case.get("needs", {})))
    problems += _mentions(outcome, fixed.get("message_mentions", []))
    assert not problems, f"{name} with {case['fix']}: " + "; ".join(problems)


# ------------------------------------------------------------------ the corpus itself

def _sources_rows(sources: Path) -> set[str]:
    text = sources.read_text()
    return set(re.findall(r"^\|\s*`([^`]+\.sbatch)`\s*\|", text, flags=re.MULTILINE))


def test_the_record_lists_a_source_for_every_expected_outcome() -> None:
    """The record is checked everywhere, with or without the scripts."""
    assert len(CASES) >= 25
    rows = _sources_rows(RECORD / "SOURCES.md")
    assert rows == set(CASES), (f"no SOURCES.md row: {sorted(set(CASES) - rows)}; "
                                f"row for no expected.yaml entry: {sorted(rows - set(CASES))}")


@needs_corpus
def test_every_script_has_a_source_and_an_expected_outcome_and_nothing_else_does() -> None:
    files = {p.name for p in CORPUS.glob("*.sbatch")}
    assert files == set(CASES), (f"no expected.yaml entry: {sorted(files - set(CASES))}; "
                                 f"no such file: {sorted(set(CASES) - files)}")
    # the folder's own SOURCES.md travels with the scripts and must cover them too
    rows = _sources_rows(CORPUS / "SOURCES.md")
    assert files == rows, (f"no row in {CORPUS / 'SOURCES.md'}: {sorted(files - rows)}; "
                           f"row for no file: {sorted(rows - files)}")


@pytest.mark.parametrize("name", sorted(CASES), ids=lambda n: n.removesuffix(".sbatch"))
def test_expected_entries_are_complete(name: str) -> None:
    case = CASES[name]
    assert set(case) <= CASE_KEYS, f"unknown keys {set(case) - CASE_KEYS}"
    assert case["verdict"] in VERDICTS
    assert case.get("reason"), "every expectation says why"
    assert set(case.get("keep", {})) <= KEEP_KEYS
    assert set(case.get("needs", {})) <= NEEDS_KEYS
    if case["verdict"] == "reject":
        assert "fix" in case and "fixed" in case, "a rejection comes with the fix to give"
    if "fix" in case:
        assert set(case["fixed"]) <= KEEP_KEYS | {"needs", "message_mentions"}
    if "fix_known_wrong" in case:
        assert "fix" in case


@needs_corpus
@pytest.mark.parametrize("name", sorted(CASES), ids=lambda n: n.removesuffix(".sbatch"))
def test_script_is_an_sbatch_script(name: str) -> None:
    """Only the script that sbatch refuses may lack the ``#!`` line sbatch requires."""
    script = script_text(name)
    assert script.startswith("#!") or CASES[name]["verdict"] == "sbatch-refuses"
    assert re.search(r"^#SBATCH", script, flags=re.MULTILINE)
