"""The sbatch corpus through the real shim: every script, as its user, on the dev cluster.

``tests/unit/test_sbatch_corpus.py`` runs the same scripts through the policy in-process;
this runs them the way a researcher does, through sbatch → slurmctld → job_submit.lua →
submitd, and asks Slurm whether it could place what admission lets through. The scripts
are read in place (``tests/sbatch_corpus.py``: ``../shared/data/sbatch`` or
``$SLURM_ML_SBATCH_CORPUS``; without them the module skips, naming the folder) and piped
to sbatch on stdin: nothing of them is written anywhere.

``sbatch --test-only`` runs job_submit plugins on Slurm 22.05 (the shim's rewrite shows in
the processor count it reports: ``-N2 --gres=gpu:8`` is shaped exclusive, 128 processors),
so no job is ever created. Its verdict must be expected.yaml's:

- accept: sbatch succeeds and names a start ("Job N to start at ... on nodes X"), on as many
  nodes as ``keep`` pins;
- reject: sbatch fails with slurm-ml's rejection, mentioning ``message_mentions``;
- keep-or-reject: either of those;
- sbatch-refuses: sbatch itself refuses the script;

and a rejection's ``fix``, added, is accepted and placeable.

expected.yaml's ``argv`` blanks site-specific options (``--account=``, ``--nodelist=``):
``submit-check`` reads an empty value as "not given", but real sbatch 22.05 sends it on
(an empty node list, which Slurm can never satisfy; an empty account, which it refuses).
So the options the argv blanks are taken out of the script's #SBATCH lines instead, in the
piped copy, and left off the command line.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet
from sbatch_corpus import CASES, needs_corpus, script_text, user_of

from slurm_ml import proc
from slurm_ml.devcluster.cluster import DevCluster

pytestmark = [pytest.mark.integration, needs_corpus]

#: sbatch's short spelling of the site-specific options expected.yaml's argv may blank
SHORT = {"account": "A", "partition": "p", "qos": "q", "constraint": "C", "nodelist": "w",
         "licenses": "L", "reservation": None}
START = re.compile(r"Job \d+ to start at \S+ using \d+ processors on nodes (\S+) in "
                   r"partition (\S+)")
PACKAGE = Path(__file__).resolve().parents[2] / "slurm_ml"
#: the package folders whose code decides what submitd answers
ADMISSION_CODE = (".", "policy", "submitd", "config", "slurm")


# ------------------------------------------------------------------ fixtures

def _started_at(pid: int) -> float:
    """When process ``pid`` started (epoch seconds), from /proc."""
    ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                if line.startswith("btime "))
    return boot + ticks / os.sysconf("SC_CLK_TCK")


@pytest.fixture(scope="module")
def shim(cluster: DevCluster) -> DevCluster:
    """submitd answering, and running this checkout's policy: one started before the
    policy code last changed is started again (the verdicts are this code's)."""
    pid = cluster.submitd_pid()
    newest = max(p.stat().st_mtime for part in ADMISSION_CODE
                 for p in (PACKAGE / part).glob("*.py"))
    if pid is not None and _started_at(pid) < newest:
        cluster.stop_submitd()
    cluster.start_submitd()
    return cluster


@pytest.fixture
def created(jobs: list[int]) -> Iterator[list[int]]:
    """Ids of any job sbatch did create (--test-only creates none): cancelled after."""
    yield jobs


# ------------------------------------------------------------------ submitting

def _blanked(argv: list[str]) -> set[str]:
    """The long names of the options argv gives an empty value (``--account=``)."""
    return {a[2:-1] for a in argv if a.startswith("--") and a.endswith("=")}


def _without(script: str, names: set[str]) -> str:
    """The script with the #SBATCH options ``names`` taken out (the line's other options
    and its comment kept); a line left with no option becomes a comment."""
    longs = tuple(f"--{n}" for n in names)
    shorts = tuple(f"-{SHORT[n]}" for n in names if SHORT.get(n))
    out = []
    for line in script.split("\n"):
        if not line.startswith("#SBATCH"):
            out.append(line)
            continue
        words = line[len("#SBATCH"):].split()
        kept: list[str] = []
        tail: list[str] = []
        skip = False
        for i, word in enumerate(words):
            if word.startswith("#"):
                tail = words[i:]
                break
            if skip:
                skip = False
            elif word in longs or word in shorts:
                skip = True  # its value is the next word
            elif not (word.startswith(tuple(f"{o}=" for o in longs))
                      or (word.startswith(shorts) and not word.startswith("--"))):
                kept.append(word)
        out.append(" ".join(["#SBATCH", *kept, *tail]) if kept else " ".join(["#", *tail]))
    return "\n".join(out)


def sbatch(name: str, extra: list[str], created: list[int]) -> proc.Result:
    """``sbatch --test-only`` of the corpus script ``name`` as its user, with its argv
    and ``extra`` options (the script on stdin)."""
    argv = [*CASES[name].get("argv", []), *extra]
    blank = _blanked(argv)
    script = _without(script_text(name), blank)
    workdir = os.path.join(os.environ["SLURM_ML_DEVCLUSTER"], "jobs")
    res = proc.run(["runuser", "-u", user_of(name), "--", "sbatch", "--test-only",
                    f"--chdir={workdir}", "--output=/dev/null",
                    *[a for a in argv if not (a.startswith("--") and a.endswith("="))]],
                   input_text=script, check=False, timeout_s=30)
    created.extend(int(m) for m in re.findall(r"Submitted batch job (\d+)", res.stdout))
    return res


def placed(res: proc.Result) -> tuple[int, str] | None:
    """(nodes, partition) of the start --test-only names; None when it names none."""
    m = START.search(res.stderr)
    if m is None:
        return None
    return len(NodeSet(m[1], resolver=RESOLVER_NOGROUP)), m[2]


def slurm_ml_rejected(res: proc.Result) -> bool:
    return res.returncode != 0 and "slurm-ml rejected this job" in res.stderr


#: seconds the whole module may wait for GPU nodes that another test drained
WAIT_BUDGET_S = [90.0]


def _placed_or_retry(name: str, extra: list[str], created: list[int]) -> proc.Result:
    """An accepted job whose start Slurm cannot name while GPU nodes are drained or down
    (another test's doing) is asked again once they are back, within the module's
    ``WAIT_BUDGET_S``."""
    res = sbatch(name, extra, created)
    while (res.returncode != 0 and not slurm_ml_rejected(res) and WAIT_BUDGET_S[0] > 0
           and _gpu_nodes_unavailable()):
        time.sleep(2)
        WAIT_BUDGET_S[0] -= 2
        res = sbatch(name, extra, created)
    return res


def _gpu_nodes_unavailable() -> bool:
    states = proc.run(["sinfo", "-h", "-N", "-p", "gpu", "-o", "%t"], check=False).stdout
    return any(s.strip("*~#!%$@^-") not in ("idle", "mix", "alloc") for s in states.split())


# ------------------------------------------------------------------ the test

def _check_accepted(name: str, res: proc.Result, keep: dict[str, object]) -> list[str]:
    where = placed(res)
    if res.returncode != 0:
        return [f"refused: {res.stderr.strip()}"]
    if where is None:
        return [f"accepted, but Slurm names no start for it: {res.stderr.strip()}"]
    nodes = keep.get("nodes")
    if isinstance(nodes, int) and where[0] != nodes:
        return [f"placed on {where[0]} nodes, not {nodes}: {res.stderr.strip()}"]
    if isinstance(nodes, str):
        low, high = (int(x) for x in nodes.split("-"))
        if not low <= where[0] <= high:
            return [f"placed on {where[0]} nodes, outside {nodes}: {res.stderr.strip()}"]
    return []


@pytest.mark.parametrize("name", sorted(CASES), ids=lambda n: n.removesuffix(".sbatch"))
def test_the_real_shim_gives_each_script_its_admins_verdict(
        name: str, shim: DevCluster, created: list[int]) -> None:
    case = CASES[name]
    verdict = case["verdict"]
    if verdict == "sbatch-refuses":
        res = sbatch(name, [], created)
        assert res.returncode != 0 and "does not look like a batch script" in res.stderr, \
            res.stderr
        return
    res = _placed_or_retry(name, [], created)
    problems: list[str] = []
    if verdict == "accept" or (verdict == "keep-or-reject" and not slurm_ml_rejected(res)):
        problems += _check_accepted(name, res, case.get("keep", {}))
    elif not slurm_ml_rejected(res):
        problems.append(f"not rejected by slurm-ml ({case['reason']}): rc {res.returncode}, "
                        f"{res.stderr.strip()}")
    else:
        said = res.stderr.lower()
        problems += [f"the rejection does not mention {w!r}: {res.stderr.strip()}"
                     for w in case.get("message_mentions", []) if w.lower() not in said]
    if "fix" in case:
        fixed = _placed_or_retry(name, case["fix"], created)
        problems += [f"with {case['fix']}: {p}"
                     for p in _check_accepted(name, fixed, case["fixed"])]
    assert not problems, f"{name}: " + "; ".join(problems)
