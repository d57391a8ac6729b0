"""``slurm-ml health prolog|epilog|periodic``, ``slurm-ml quarantine``, ``slurm-ml devcluster
fault`` and the prolog/epilog wrapper scripts, without a cluster: replayed real captures,
no database (records spool), and a Slurm that cannot be reached (an empty SLURM_CONF)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.cli import main
from slurm_ml.store.spool import Spool

REPO = Path(__file__).resolve().parents[2]
GPU_DATA = REPO / "data" / "gpu"
A100 = ("nvlink/gpud_a100x8_nvlink_status.txt", "topo/mleng_a100x8_nv12_topo.txt")
NVLINK_DOWN = "nvlink/azhc_a100_gpu6_nvlink_status_all_inactive.txt"
#: Every variable the hooks read, unset unless a test sets it (``make test`` exports the
#: dev cluster's, which must not leak into these tests).
HOOK_VARS = ("SLURM_ML_CONFIG", "SLURM_ML_DSN", "SLURM_ML_SPOOL_DIR", "SLURM_ML_REPLAY_DIR",
             "SLURM_ML_FAKE_GPU_DIR", "SLURM_ML_STATE_DIR", "SLURM_ML_SHM_DIR",
             "SLURMD_NODENAME", "SLURM_JOB_ID", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES",
             "SLURM_ML_DEVCLUSTER")


@pytest.fixture
def node_env(tmp_path: Path) -> dict[str, str | None]:
    """A dev-like node: gpu03 (healthy) and gpu04 (GPU 6 without NVLink) replayed, no
    database, a Slurm that fails at once; the default config but for the textfile
    directory, which is the test's (``textfile/``, not made)."""
    for node, rels in (("gpu03", A100), ("gpu04", (NVLINK_DOWN, A100[1]))):
        (tmp_path / "health" / node).mkdir(parents=True)
        for rel in rels:
            shutil.copy(GPU_DATA / rel, tmp_path / "health" / node)
    empty = tmp_path / "slurm.conf"
    empty.write_text("")
    cfg = yaml.safe_load(DEFAULT_CONFIG.read_text())
    cfg["health"]["textfile_dir"] = str(tmp_path / "textfile")
    (tmp_path / "slurm-ml.yaml").write_text(yaml.safe_dump(cfg))
    env: dict[str, str | None] = dict.fromkeys(HOOK_VARS)
    env.update(SLURM_ML_CONFIG=str(tmp_path / "slurm-ml.yaml"),
               SLURM_ML_REPLAY_DIR=str(tmp_path / "health"),
               SLURM_ML_SPOOL_DIR=str(tmp_path / "spool"),
               SLURM_ML_STATE_DIR=str(tmp_path / "state"),
               SLURM_ML_SHM_DIR=str(tmp_path / "shm" / "%n"), SLURM_CONF=str(empty))
    return env


def invoke(env: dict[str, str | None], *args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, list(args), env=env)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res.exit_code, res.stdout, res.stderr


@pytest.mark.parametrize("cmd", [("health", "prolog"), ("health", "epilog"),
                                 ("health", "periodic"), ("quarantine",),
                                 ("quarantine", "list"), ("quarantine", "resume"),
                                 ("quarantine", "reset"), ("devcluster", "fault")])
def test_help(cmd: tuple[str, ...]) -> None:
    code, out, _ = invoke({}, *cmd, "--help")
    assert code == 0 and "Usage:" in out


def test_prolog_healthy_gpus_pass_and_records_spool(node_env: dict[str, str | None],
                                                    tmp_path: Path) -> None:
    env = node_env | {"SLURMD_NODENAME": "gpu03", "SLURM_JOB_ID": "11", "SLURM_JOB_GPUS": "0,1"}
    code, out, _ = invoke(env, "health", "prolog")
    assert code == 0, out
    assert out.startswith("slurm-ml prolog: recorded: gpu03: ")  # probe.missing flags only
    assert Spool(tmp_path / "spool").pending_count() > 0  # no database: every record spooled
    assert (tmp_path / "state" / "baseline-11.json").exists()


def test_prolog_fault_exits_1_even_when_slurm_cannot_be_asked(
        node_env: dict[str, str | None]) -> None:
    env = node_env | {"SLURMD_NODENAME": "gpu04", "SLURM_JOB_ID": "12", "SLURM_JOB_GPUS": "0-7"}
    code, out, _ = invoke(env, "health", "prolog", "--json")
    doc = json.loads(out)
    # The breaker allowed the drain but scontrol failed: Slurm's own "Prolog error" drain is
    # the fallback, so the job must not start here.
    assert code == 1 and doc["action"] == "drain_failed"
    assert doc["drain"]["reason"] == "slurm-ml: nvlink.active_links gpu6 (0/12 active)"


def test_hooks_with_a_bad_config(node_env: dict[str, str | None], tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: [\n")
    env = node_env | {"SLURM_ML_CONFIG": str(bad), "SLURMD_NODENAME": "gpu04",
                      "SLURM_JOB_ID": "13"}
    assert invoke(env, "health", "prolog")[0] == 0  # never fail the prolog for slurm-ml
    assert invoke(env, "health", "epilog")[0] == 0
    code, _, err = invoke(env, "health", "periodic", "--node", "gpu04")
    assert code == 1 and "invalid configuration" in err
    assert invoke(env, "quarantine", "list")[0] == 2


def test_epilog_outside_slurm_is_skipped(node_env: dict[str, str | None]) -> None:
    code, out, _ = invoke(node_env, "health", "epilog")
    assert code == 0 and out.startswith("slurm-ml epilog: skipped: SLURMD_NODENAME")


def test_periodic_default_node_and_unmanaged_node(node_env: dict[str, str | None]) -> None:
    code, out, _ = invoke(node_env | {"SLURMD_NODENAME": "login1"}, "health", "periodic")
    assert code == 0 and out.startswith("slurm-ml periodic: skipped: login1 is in no")


def test_periodic_textfile_written_or_said_missing_never_the_exit_code(
        node_env: dict[str, str | None], tmp_path: Path) -> None:
    code, out, _ = invoke(node_env, "health", "periodic", "--node", "gpu04")
    # Slurm cannot be asked which jobs run there: a drain finding waits for the epilog.
    assert code == 0 and out.startswith("slurm-ml periodic: deferred: gpu04")
    assert out.rstrip().endswith(f"; textfile not written: {tmp_path / 'textfile'} does not "
                                 "exist")
    (tmp_path / "textfile").mkdir()
    code, out, _ = invoke(node_env, "health", "periodic", "--node", "gpu04", "--json")
    assert code == 0 and json.loads(out)["textfile_error"] is None
    text = (tmp_path / "textfile" / "slurm-ml-gpu04.prom").read_text()
    assert 'slurm_ml_node_health_pass{node="gpu04"} 0.0' in text
    assert 'slurm_ml_gpu_nvlink_links_active{gpu="6",node="gpu04"} 0.0' in text
    assert "slurm_ml_node_drained" not in text  # Slurm did not say


def test_quarantine_bad_input_and_a_spooled_reset(node_env: dict[str, str | None]) -> None:
    code, _, err = invoke(node_env, "quarantine", "reset", "h100")
    assert code == 2 and "no node class 'h100'" in err
    code, out, err = invoke(node_env, "quarantine", "reset", "a100-40g")
    # no database: the reset waits in the spool, so it is not in effect: exit 1, and why
    assert code == 1 and "NOT in effect yet" in out
    assert err.startswith("slurm-ml: error: reset a100-40g is not in effect yet")
    assert "quarantine list" in err
    assert list((Path(str(node_env["SLURM_ML_SPOOL_DIR"]))).iterdir())  # nothing lost
    code, _, err = invoke(node_env, "quarantine", "resume", "gpu04")
    assert code == 1 and "slurm-ml: error:" in err  # Slurm cannot be asked


def test_quarantine_reset_of_a_check(node_env: dict[str, str | None]) -> None:
    code, out, _ = invoke(node_env, "quarantine", "reset", "--check", "nvlink.active_links",
                          "--json")
    doc = json.loads(out)
    assert code == 1 and (doc["check"], doc["node_class"]) == ("nvlink.active_links", None)
    assert doc["audit"] == "spooled"  # no database here
    for args, match in ((("--check", "nvlink"), "is not a check id"),
                        (("a100-40g", "--check", "xid.79"), "one of them"),
                        ((), "one of them")):
        code, _, err = invoke(node_env, "quarantine", "reset", *args)
        assert code == 2 and match in err, (args, err)


def test_devcluster_fault_command(tmp_path: Path) -> None:
    state = str(tmp_path / "dc")
    base = ("devcluster", "fault", "--state-dir", state)
    code, out, _ = invoke({}, *base, "gpu03", Path(NVLINK_DOWN).name)
    assert code == 0 and "the checks say: slurm-ml: nvlink.active_links gpu6" in out
    code, out, _ = invoke({}, *base, "gpu03", "--clear", "--json")
    assert code == 0 and json.loads(out)["verdict"] == "healthy"
    assert invoke({}, *base, "gpu03")[0] == 2
    assert invoke({}, *base, "gpu03", NVLINK_DOWN, "--clear")[0] == 2
    assert invoke({}, *base, "gpu42", NVLINK_DOWN)[0] == 2


# ------------------------------------------------------------------ wrappers

FAKE_PYTHON = """#!/bin/sh
echo "ran: $* config=$SLURM_ML_CONFIG"
[ -n "${FAKE_VERDICT:-}" ] && echo "slurm-ml $4: $FAKE_VERDICT"
[ -n "${FAKE_SLEEP:-}" ] && sleep "$FAKE_SLEEP"
exit "${FAKE_RC:-0}"
"""


HOOK_SCRIPT = REPO / "prolog" / "slurm-ml-hook"


def wrapper(tmp: Path, hook: str, rc: int, *, sleep: float = 0, timeout: int = 20,
            via_slurm_conf: bool = False, verdict: str = "drained: gpu03 nvlink",
            argv: tuple[str, ...] | None = None) -> tuple[int, str, float]:
    """Run the one wrapper as slurmd does: a copy named ``slurm-ml-<hook>`` (as install
    writes it), no arguments, or ``argv`` instead (the name then stays slurm-ml-hook)."""
    fake = tmp / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    log = tmp / "hooks.log"
    etc = tmp / "etc"
    etc.mkdir(exist_ok=True)
    envfile = etc / "slurm-ml.env"
    envfile.write_text(f"SLURM_ML_PYTHON={fake}\nSLURM_ML_CONFIG=/c.yaml\nFAKE_RC={rc}\n"
                       f"FAKE_SLEEP={sleep or ''}\nSLURM_ML_HOOK_TIMEOUT={timeout}\n"
                       f"SLURM_ML_HEALTHCHECK_TIMEOUT={timeout}\n"
                       f"SLURM_ML_HOOK_LOG={log}\nFAKE_VERDICT='{verdict}'\n")
    # slurmd's environment: no PATH at all.
    env = {"SLURMD_NODENAME": "gpu03", "SLURM_JOB_ID": "7"}
    env |= ({"SLURM_CONF": str(etc / "slurm.conf")} if via_slurm_conf
            else {"SLURM_ML_ENV_FILE": str(envfile)})
    script = tmp / ("slurm-ml-hook" if argv is not None else f"slurm-ml-{hook}")
    shutil.copy2(HOOK_SCRIPT, script)
    t0 = time.monotonic()
    res = subprocess.run([str(script), *(argv or ())], env=env, capture_output=True,
                         text=True, timeout=60, check=False)
    return res.returncode, log.read_text() if log.exists() else "", time.monotonic() - t0


def test_prolog_wrapper_passes_0_and_1_through(tmp_path: Path) -> None:
    code, log, _ = wrapper(tmp_path, "prolog", 1)
    assert code == 1
    assert "ran: -m slurm_ml.cli health prolog config=/c.yaml" in log
    assert "slurm-ml-prolog job 7 on gpu03: exit 1" in log
    assert wrapper(tmp_path, "prolog", 0, via_slurm_conf=True)[0] == 0


def test_prolog_wrapper_ignores_exit_1_without_a_verdict(tmp_path: Path) -> None:
    # e.g. "No module named slurm_ml.cli.__main__": python failed, the node is fine
    code, log, _ = wrapper(tmp_path, "prolog", 1, verdict="")
    assert code == 0 and "could not run (exit 1 without a verdict)" in log


def test_prolog_wrapper_never_fails_for_slurm_ml(tmp_path: Path) -> None:
    code, log, _ = wrapper(tmp_path, "prolog", 3)
    assert code == 0 and "did not finish (exit 3" in log
    code, log, elapsed = wrapper(tmp_path, "prolog", 0, sleep=30, timeout=1)
    assert code == 0 and elapsed < 10
    assert "exit 124" in log and "the job may start" in log


def test_epilog_wrapper_always_exits_0(tmp_path: Path) -> None:
    code, log, _ = wrapper(tmp_path, "epilog", 1)
    assert code == 0 and "ran: -m slurm_ml.cli health epilog" in log
    code, log, elapsed = wrapper(tmp_path, "epilog", 0, sleep=30, timeout=1)
    assert code == 0 and elapsed < 10 and "exit 124" in log


def test_healthcheck_wrapper_checks_this_node_and_always_exits_0(tmp_path: Path) -> None:
    code, log, _ = wrapper(tmp_path, "healthcheck", 1)
    assert code == 0
    assert "ran: -m slurm_ml.cli health periodic --node gpu03 config=/c.yaml" in log
    assert "slurm-ml-healthcheck on gpu03: slurm-ml did not finish cleanly (exit 1" in log
    code, log, elapsed = wrapper(tmp_path, "healthcheck", 0, sleep=30, timeout=1)
    assert code == 0 and elapsed < 10 and "exit 124" in log


def test_an_argument_picks_the_hook_whatever_the_name(tmp_path: Path) -> None:
    code, log, _ = wrapper(tmp_path, "prolog", 1, argv=("prolog",))
    assert code == 1 and "ran: -m slurm_ml.cli health prolog" in log
    code, log, _ = wrapper(tmp_path, "epilog", 1, argv=("epilog",))
    assert code == 0 and "ran: -m slurm_ml.cli health epilog" in log


def test_an_unknown_hook_name_runs_nothing_and_does_not_fail(tmp_path: Path) -> None:
    # Prolog=.../slurm-ml-hook with no argument: a wiring mistake must not drain nodes.
    fake = tmp_path / "slurm-ml-hook"
    shutil.copy2(HOOK_SCRIPT, fake)
    res = subprocess.run([str(fake)], env={}, capture_output=True, text=True, timeout=60,
                         check=False)
    assert res.returncode == 0
    assert "which hook? Call it as slurm-ml-prolog" in res.stderr
    assert "got 'slurm-ml-hook'" in res.stderr


def test_the_wrapper_is_executable() -> None:
    assert os.access(HOOK_SCRIPT, os.X_OK)
