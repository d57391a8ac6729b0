"""Control test for the import-linter contracts in pyproject.toml.

Each case copies the package's modules and pyproject.toml into a temporary directory,
plants one import, and runs ``lint-imports`` on the copy (cwd and PYTHONPATH there, so the
copy is analysed, not the installed editable package). A planted violation must break the
contract that names it, and only the contracts listed; an allowed import must keep them
all; the unplanted copy must keep them all, so the test fails both ways.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which(
    "lint-imports"
)

SUBPROCESS = "subprocesses only through slurm_ml.proc"
PSYCOPG = "only store/ talks to PostgreSQL"
NVML = "only health.probe_nvml talks to NVML"
CHECKS_PURE = "health checks are pure: no probe, Slurm, store or process, even indirectly"
CHECKS_NO_IO = "health checks do no I/O of their own"
POLICY_PURE = "policy is pure: no I/O layers"
LAYERS = "layers"
DRIVERS = "the daemon and the simulator drive one cycle: neither imports the other"
POLICIES_APART = "admission and the reconcile cycle are independent policies"
FAIRSHARE_BELOW = "fair share reads neither admission nor the reconcile cycle"
YAML_READER = "YAML is read by the one strict reader, config.yaml_reader"
SWEEP_APART = "sim sweep's commands stand on their own: they do not import `slurm-ml sim`'s"

_VERDICT = re.compile(r"^(?P<name>.+) (?P<verdict>KEPT|BROKEN)(?: \(\d+ ignored imports?\))?$")


@dataclass(frozen=True)
class Plant:
    path: str  # relative to the copy's root
    code: str  # appended to the module
    broken: frozenset[str]  # exactly the contracts it must break (empty: an allowed import)
    chain: str = ""  # an import the report must show, proving it is the planted one


PLANTS = {
    "subprocess-in-health-report": Plant(
        "slurm_ml/health/report.py",
        "import subprocess\n",
        frozenset({SUBPROCESS}),
        "slurm_ml.health.report -> subprocess",
    ),
    "subprocess-in-daemon-lazy": Plant(
        "slurm_ml/daemon/loop.py",
        "def _planted():\n    from subprocess import run\n    return run\n",
        frozenset({SUBPROCESS}),
        "slurm_ml.daemon.loop -> subprocess",
    ),
    "psycopg-in-daemon-report": Plant(
        "slurm_ml/ops/report.py",
        "from psycopg import errors\n",
        frozenset({PSYCOPG}),
        "slurm_ml.ops.report -> psycopg",
    ),
    "pynvml-outside-probe-nvml": Plant(
        "slurm_ml/health/probe_replay.py",
        "import pynvml\n",
        # health/ must not load psycopg; pynvml breaks the NVML contract alone.
        frozenset({NVML}),
        "slurm_ml.health.probe_replay -> pynvml",
    ),
    "os-in-health-checks": Plant(
        "slurm_ml/health/checks/xid.py",
        "import os\n",
        frozenset({CHECKS_NO_IO}),
        "slurm_ml.health.checks.xid -> os",
    ),
    "socket-in-health-checks": Plant(
        "slurm_ml/health/checks/node.py",
        "import socket\n",
        frozenset({CHECKS_PURE}),
        "slurm_ml.health.checks.node -> socket",
    ),
    "probe-reached-from-health-checks-indirectly": Plant(
        # snapshot.py is allowed to the checks; through it they would reach a probe.
        "slurm_ml/health/snapshot.py",
        "from slurm_ml.health import probe_replay\n",
        frozenset({CHECKS_PURE}),
        "slurm_ml.health.snapshot -> slurm_ml.health.probe_replay",
    ),
    "store-in-policy": Plant(
        "slurm_ml/policy/quarantine.py",
        "from slurm_ml.store import records\n",
        # The checks use policy.quarantine, so through it they would reach store/ too.
        frozenset({POLICY_PURE, LAYERS, CHECKS_PURE}),
        "slurm_ml.policy.quarantine -> slurm_ml.store.records",
    ),
    "simulator-imports-the-daemon": Plant(
        "slurm_ml/sim/policies.py",
        "from slurm_ml.daemon import views\n",
        frozenset({DRIVERS, LAYERS}),
        "slurm_ml.sim.policies -> slurm_ml.daemon.views",
    ),
    "reconcile-reads-admission": Plant(
        "slurm_ml/policy/reconcile/cycle.py",
        "from slurm_ml.policy.admission import read_record\n",
        frozenset({POLICIES_APART}),
        "slurm_ml.policy.reconcile.cycle -> slurm_ml.policy.admission",
    ),
    "fairshare-reads-the-cycle": Plant(
        "slurm_ml/policy/fairshare/lane.py",
        "from slurm_ml.policy.reconcile import cycle\n",
        # admission reads the lane, so through it admission would reach the cycle too
        frozenset({FAIRSHARE_BELOW, POLICIES_APART}),
        "slurm_ml.policy.fairshare.lane -> slurm_ml.policy.reconcile",
    ),
    "yaml-read-outside-the-reader": Plant(
        "slurm_ml/sim/sweep.py",
        "import yaml\n",
        frozenset({YAML_READER}),
        "slurm_ml.sim.sweep -> yaml",
    ),
    "sweep-command-imports-sim-command": Plant(
        "slurm_ml/cli/sim_sweep.py",
        "def _planted():\n    from slurm_ml.cli.simulate import sim_cmd\n    return sim_cmd\n",
        frozenset({SWEEP_APART}),
        "slurm_ml.cli.sim_sweep -> slurm_ml.cli.simulate",
    ),
    # Allowed: what the boundaries are for must keep every contract.
    "allowed-proc-run-from-health-report": Plant(
        "slurm_ml/health/report.py",
        "from slurm_ml.proc import run\n",
        frozenset(),
    ),
    "allowed-the-reader-from-the-simulator": Plant(
        "slurm_ml/sim/sweep.py",
        "from slurm_ml.config.yaml_reader import read_yaml\n",
        frozenset(),
    ),
    "allowed-psycopg-in-store-init": Plant(
        "slurm_ml/store/__init__.py",
        "import psycopg\n",
        frozenset(),
    ),
}


def _copy_tree(dst: Path) -> None:
    """The package's modules (grimp reads nothing else) and the linter's configuration."""

    def not_python(directory: str, names: list[str]) -> set[str]:
        return {
            n
            for n in names
            if n == "__pycache__" or (not n.endswith(".py") and not (Path(directory) / n).is_dir())
        }

    shutil.copytree(REPO / "slurm_ml", dst / "slurm_ml", ignore=not_python)
    shutil.copy2(REPO / "pyproject.toml", dst / "pyproject.toml")


def _contract_names() -> set[str]:
    with (REPO / "pyproject.toml").open("rb") as f:
        contracts = tomllib.load(f)["tool"]["importlinter"]["contracts"]
    return {c["name"] for c in contracts}


def _lint(root: Path) -> tuple[int, dict[str, str], str]:
    """Run lint-imports on the copy at ``root``: exit code, verdict per contract, output."""
    assert LINT_IMPORTS is not None, "lint-imports is not installed (pip install -e '.[dev]')"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = str(root)
    proc = subprocess.run(
        [LINT_IMPORTS, "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = proc.stdout + proc.stderr
    verdicts = {}
    for line in out.splitlines():
        m = _VERDICT.match(line.strip())
        if m:
            verdicts[m["name"]] = m["verdict"]
    return proc.returncode, verdicts, out


def test_unplanted_copy_keeps_every_contract(tmp_path: Path) -> None:
    _copy_tree(tmp_path)
    rc, verdicts, out = _lint(tmp_path)
    assert rc == 0, out
    assert set(verdicts) == _contract_names(), out
    assert set(verdicts.values()) == {"KEPT"}, out


def test_the_contracts_this_file_names_exist() -> None:
    names = _contract_names()
    for plant in PLANTS.values():
        assert plant.broken <= names


@pytest.mark.parametrize("case", sorted(PLANTS))
def test_planted_import(tmp_path: Path, case: str) -> None:
    plant = PLANTS[case]
    _copy_tree(tmp_path)
    target = tmp_path / plant.path
    assert target.is_file(), f"{plant.path} moved: plant the import elsewhere"
    target.write_text(target.read_text() + "\n\n" + plant.code)

    rc, verdicts, out = _lint(tmp_path)

    broken = {name for name, verdict in verdicts.items() if verdict == "BROKEN"}
    assert set(verdicts) == _contract_names(), out
    assert broken == plant.broken, out
    if plant.broken:
        assert rc != 0, out
        assert plant.chain in out, out
    else:
        assert rc == 0, out


def test_both_drivers_call_the_one_reconcile_cycle() -> None:
    """No contract type says "must import", so the graph itself (grimp, import-linter's
    own library) is asked."""
    graph = grimp.build_graph("slurm_ml")
    for driver in ("slurm_ml.daemon.plan", "slurm_ml.sim.policies"):
        assert graph.direct_import_exists(importer=driver, imported="slurm_ml.policy.reconcile")
