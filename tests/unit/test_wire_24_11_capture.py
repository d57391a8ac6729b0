"""The job_desc fields Slurm 24.11.5 really hands the shim decode to the same request as
the sbatch line they came from (parsed by ``sbatch_args``, which models 22.05's sbatch)."""

from __future__ import annotations

import re
import shlex
from datetime import UTC, datetime
from pathlib import Path

import pytest

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config
from slurm_ml.policy.admission import decide, recorded_min_runtime_min
from slurm_ml.policy.admission.cluster_view import cluster_view
from slurm_ml.policy.admission.state import AdmissionState
from slurm_ml.submitd.sbatch_args import parse_sbatch
from slurm_ml.submitd.wire import INFINITE, NO_VAL, NO_VAL16, normalize, reply_for, to_request

CAPTURE = Path(__file__).resolve().parents[1] / "fixtures/slurm/24.11/job_submit_fields.txt"
CFG = load_config(DEFAULT_CONFIG)
NOW = datetime(2026, 11, 30, 14, 0, tzinfo=UTC)
_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|number:\d+|nil)')


def _shim_fields(line: str) -> dict[str, object]:
    """One probe log line → the dict the shim would send (NO_VAL/nil left out)."""
    body = line.split(" job_desc ", 1)[1]
    out: dict[str, object] = {}
    for key, raw in _FIELD.findall(body):
        if raw == "nil":
            continue
        if raw.startswith("number:"):
            value = int(raw[7:])
            if value not in (NO_VAL, NO_VAL16):
                out[key] = value
        else:
            out[key] = raw[1:-1].encode().decode("unicode_escape")
    return out


def _cases() -> list[tuple[str, int, dict[str, object]]]:
    cases = []
    command = None
    offset = 0
    for line in CAPTURE.read_text().splitlines():
        if line.startswith("# sbatch "):
            command, offset = line[len("# sbatch "):].split("   ->")[0], 0
        elif "slurm-ml-probe submit" in line and command is not None:
            cases.append((command, offset, _shim_fields(line)))
            offset += 1
    return cases


CASES = _cases()


def test_capture_has_submissions() -> None:
    assert len(CASES) >= 5


@pytest.mark.parametrize(("command", "offset", "live"), CASES,
                         ids=[f"{c}#{o}" for c, o, _ in CASES])
def test_live_24_11_fields_decode_like_the_parsed_sbatch_line(
        command: str, offset: int, live: dict[str, object]) -> None:
    parsed = parse_sbatch(shlex.split(command), user="bob", user_id=1002)[offset]
    assert str(live.get("tres_per_node", "gres/")).startswith("gres/")  # 24.11 spelling
    assert to_request(normalize(live)) == to_request(normalize(parsed))


def test_time_min_zero_arrives_as_infinite_on_24_11() -> None:
    zero = [live for command, _, live in CASES if "--time-min=0" in command]
    assert zero and all(live["time_min"] == INFINITE for live in zero)
    assert all(to_request(live).time_min_min == 0 for live in zero)


def test_live_24_11_time_min_is_cleared_and_recorded() -> None:
    """The --time-min=30 -t 60 submission as 24.11 hands it over: Slurm's time_min is
    cleared (backfill could lower the limit to it) and 30 min is recorded instead."""
    (live,) = [live for command, _, live in CASES if "--time-min=30" in command]
    assert live["time_min"] == 30
    req = to_request(normalize(live))
    decision = decide(req, CFG, cluster_view(CFG), AdmissionState(), NOW)
    reply = reply_for(decision, normalize(live), req, leaf_wait_s=600)
    assert reply["action"] == "accept"
    assert reply["set"]["time_min"] == NO_VAL
    assert recorded_min_runtime_min(reply["set"]["admin_comment"]) == 30
