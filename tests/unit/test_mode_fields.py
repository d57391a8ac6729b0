"""An error read in place of a mode is judged across the node's GPUs (health.field_kinds).

A real ``nvidia-smi -q`` of a healthy 8x RTX 4090 node (leptonai/gpud testdata
``nvidia-smi-query.535.154.05.out.3.valid``, recorded in
docs/research/captures-wanted-2026-12.md) reads ``Addressing Mode : Unknown Error`` on
all eight GPUs with every health counter clean; it used to drain all eight. Its source
reports it as a quirk, no action named: at most a flag. A GPU that alone cannot read a
mode its peers read is in an error state, as before.

The real capture is read in place from ``../shared/data/gpu/smi-q/`` when the kit has
it. The other cases are *derived*, not real: the healthy capture of the same node type
(data/gpu, a different day) with one printed value replaced in memory, to pin the rule
on the field and on how many GPUs read it.
"""

from __future__ import annotations

import dataclasses
import re

import pytest
from gpu_data import GPU_DATA, KIT

from slurm_ml.health.checks import Expectations, Severity, Thresholds, check_node
from slurm_ml.health.fake_nvml import FakeNvml
from slurm_ml.health.field_kinds import MODE_KEYS
from slurm_ml.health.probe_nvml import ERROR_UNKNOWN, NvmlProbe
from slurm_ml.health.replay.smi_q import parse_smi_q

HEALTHY = GPU_DATA / "smi-q" / "gpud_rtx4090x8_535.154.05_q.txt"
REAL = KIT / "smi-q" / "gpud_rtx4090x8_535.154.05_q_addressing_mode_unknown_error.txt"
EXP = Expectations(gpu_count=8)
ADDRESSING = re.compile(r"^(    Addressing Mode\s+: )None$", re.MULTILINE)


def verdicts(text: str, **kw: object) -> list[tuple[str, Severity, int | None]]:
    snap = parse_smi_q(text, "node01")
    return [(f.check_id, f.severity, f.gpu) for f in check_node(snap, EXP, Thresholds(), **kw)
            if f.check_id != "probe.missing"]


def addressing_unknown(on: set[int] | None) -> str:
    """The healthy capture with "Addressing Mode : None" read as "Unknown Error" on the
    GPUs ``on`` (None: all), counted in the order they are printed."""
    text = HEALTHY.read_text()
    seen = iter(range(100))

    def sub(m: re.Match[str]) -> str:
        i = next(seen)
        return f"{m[1]}Unknown Error" if on is None or i in on else m[0]
    out, n = ADDRESSING.subn(sub, text)
    assert n == 8
    return out


def test_the_healthy_capture_is_healthy() -> None:
    assert verdicts(HEALTHY.read_text()) == []


def test_a_mode_no_gpu_can_read_is_one_flag_and_drains_nothing() -> None:
    assert verdicts(addressing_unknown(None)) == [("gpu.mode_unreadable", Severity.FLAG, None)]
    snap = parse_smi_q(addressing_unknown(None), "node01")
    assert all(g.errors == () and g.mode_errors == ("Addressing Mode: Unknown Error",)
               for g in snap.gpus)


def test_a_mode_one_gpu_cannot_read_while_its_peers_can_drains_that_gpu() -> None:
    got = verdicts(addressing_unknown({3}))
    assert [(c, s, g) for c, s, g in got if s.drains] == [
        ("gpu.error_state", Severity.DRAIN_NOW, 3)]


def test_the_prolog_of_a_one_gpu_job_judges_the_gpus_it_was_given() -> None:
    # The prolog probes only the job's GPUs: on the node where every GPU reads the mode
    # in error, a one-GPU job sees one GPU, which no peer contradicts.
    snap = parse_smi_q(addressing_unknown(None), "node01")
    one = dataclasses.replace(snap, gpus=snap.gpus[:1])
    found = check_node(one, EXP, Thresholds(), gpus=[0])
    assert not [f for f in found if f.severity.drains]


def test_an_identity_field_in_error_is_still_the_gpus_error_state() -> None:
    text = HEALTHY.read_text().replace("Product Brand                         : GeForce",
                                       "Product Brand                         : Unknown Error")
    drains = [(c, g) for c, s, g in verdicts(text) if s.drains]
    assert drains == [("gpu.error_state", g) for g in range(8)]


def test_a_health_reading_in_error_on_every_gpu_still_drains() -> None:
    text = re.sub(r"(        GPU Current Temp\s+: )\d+ C", r"\1Unknown Error",
                  HEALTHY.read_text())
    assert [(c, s, g) for c, s, g in verdicts(text) if s.drains] == [
        ("gpu.error_state", Severity.DRAIN_NOW, g) for g in range(8)]


def test_the_live_probe_judges_a_mode_call_the_same_way() -> None:
    snap = parse_smi_q(HEALTHY.read_text(), "node01")
    every = FakeNvml(snap)
    every.fail("nvmlDeviceGetMigMode", ERROR_UNKNOWN)
    got = NvmlProbe(every, timeout_s=4).snapshot("node01")
    assert all(g.mode_errors == ("nvmlDeviceGetMigMode: Unknown Error",) for g in got.gpus)
    found = check_node(got, EXP, Thresholds())
    assert not [f for f in found if f.severity.drains]
    assert "gpu.mode_unreadable" in {f.check_id for f in found}
    one = FakeNvml(snap)
    one.fail("nvmlDeviceGetMigMode", ERROR_UNKNOWN, gpu=5)
    found = check_node(NvmlProbe(one, timeout_s=4).snapshot("node01"), EXP, Thresholds())
    assert [(f.check_id, f.gpu) for f in found if f.severity.drains] == [
        ("gpu.error_state", 5)]


def test_mode_keys_are_top_level_fields_of_real_captures() -> None:
    labels = {re.sub(r"[^0-9a-z]+", "_", m[1].lower()).strip("_")
              for m in re.finditer(r"^    (\S[^:\n]*?)\s*(?::|$)", HEALTHY.read_text(),
                                   re.MULTILINE)}
    assert {"addressing_mode", "persistence_mode", "mig_mode", "compute_mode",
            "ecc_mode", "gpu_virtualization_mode"} <= labels & MODE_KEYS
    assert not {"product_name", "product_brand", "ecc_errors", "temperature",
                "remapped_rows", "fan_speed", "gpu_uuid"} & MODE_KEYS


def test_the_real_capture_of_the_quirk_flags_and_drains_nothing() -> None:
    if not REAL.is_file():
        pytest.skip(f"{REAL.name} is read in place from {REAL.parent} (recorded in "
                    f"docs/research/captures-wanted-2026-12.md), which does not hold it yet")
    got = verdicts(REAL.read_text())
    assert not [v for v in got if v[1].drains], got
    assert ("gpu.mode_unreadable", Severity.FLAG, None) in got
