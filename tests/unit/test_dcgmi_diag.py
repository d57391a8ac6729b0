"""``dcgmi diag`` read as evidence (replay.dcgmi_diag) and judged by what each test tests
(checks.dcgm).

Real runs: the three in data/gpu/ecc (DCGM 3.3 tables, judged in test_health_captures),
and the runs recorded in docs/research/captures-wanted-2026-12.md, read in place from
``../shared/data/gpu/`` once the kit holds them (each skips, naming the folder, until
then). The other inputs here are *built* from the formats DCGM's ``dcgmi/Diag.cpp``
prints (the same note, Part C), to pin each rule; they are not captures.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gpu_data import KIT, capture

from slurm_ml.health.checks import Expectations, Severity, Thresholds, check_node
from slurm_ml.health.probe_replay import build_snapshot, classify
from slurm_ml.health.replay.dcgmi_diag import looks_like_dcgmi_diag, parse_dcgmi_diag
from slurm_ml.health.replay.errors import CaptureError

S = Severity
A100_8 = Expectations(gpu_count=8, nvlink_links_per_gpu=12)
L40S_4 = Expectations(gpu_count=4)  # PCIe cards, no NVLink, no bridge
RULE = "+---------------------------+------------------------------------------------+"


def row(name: str, info: str) -> str:
    return f"| {name:<25} | {info:<46} |"


def table(*sections: tuple[str, list[str]]) -> str:
    """A dcgmi diag table in DCGM 4.x's frame (``HelperDisplayAsCli``)."""
    lines = ["Successfully ran diagnostic for group.", RULE, row("Diagnostic", "Result"),
             RULE.replace("-", "=")]
    for title, rows in sections:
        end = "|" if title in ("Metadata", "Deployment") else "+"
        start = "|" if end == "|" else "+"
        head = f"{start}-----  {title}  "
        lines.append(f"{head:-<28}+{'-' * 48}{end}")
        lines += rows
    lines.append(RULE)
    return "\n".join(lines) + "\n"


def wrapped(name: str, text: str) -> list[str]:
    """A message as dcgmi prints it: cut every 45 characters, mid-word."""
    pieces = [text[i:i + 45] for i in range(0, len(text), 45)]
    return [row(name, pieces[0])] + [row("", p) for p in pieces[1:]]


def judged(text: str, exp: Expectations, name: str = "diag.txt") -> list[tuple[str, S, int | None]]:
    snap = build_snapshot([(name, text)], "node01")
    return [(f.check_id, f.severity, f.gpu) for f in check_node(snap, exp, Thresholds())
            if f.check_id != "probe.missing"]


META4 = ("Metadata", [row("DCGM Version", "4.2.3"), row("Driver Version Detected", "570.148.08"),
                      row("GPU Device IDs Detected", "26b9, 26b9, 26b9, 26b9")])
SOFTWARE_OK = ("Deployment", [row("software", "Pass"), *(row("", f"GPU{i}: Pass")
                                                         for i in range(4))])


def gpus_pass(n: int, fail: int | None = None, warning: str = "") -> list[str]:
    out = []
    for i in range(n):
        out.append(row("", f"GPU{i}: {'Fail' if i == fail else 'Pass'}"))
        if i == fail and warning:
            out += wrapped("Warning", warning)
    return out


# ------------------------------------------------------------------------- text


def test_the_real_3x_tables_parse_with_their_messages_joined() -> None:
    diag = parse_dcgmi_diag(capture("ecc/awsome_p4de_a100x8_dcgmi_diag_r2_pass.txt").read_text())
    assert (diag.version, diag.driver, len(diag.device_ids)) == ("3.3.3", "535.104.12", 8)
    assert {t.key: (t.category, t.status or t.all_gpus) for t in diag.tests}["memory"] == (
        "hardware", "pass")
    excerpt = parse_dcgmi_diag(capture(
        "ecc/mleng_dcgmi_diag_r2_excerpt_gpu0_memory_fail_thermal.txt").read_text())
    (memory,) = excerpt.tests
    assert dict(memory.gpus)[0] == "fail" and dict(memory.gpus)[7] == "pass"
    (msg,) = memory.messages
    assert msg.gpu == 0 and "13.3 seconds started at 9.7 seconds" in msg.text
    assert msg.text.endswith("and any other components.")  # the cut last row is kept


def test_a_4x_table_with_a_gpu_failing_memory_drains_that_gpu() -> None:
    text = table(META4, SOFTWARE_OK, ("Hardware", [
        row("memory", "Fail"),
        *gpus_pass(4, fail=2, warning="Found 12 errors in GPU memory allocation on GPU 2")]))
    assert classify(text) == "dcgmi_diag"
    diag = parse_dcgmi_diag(text)
    assert diag.version == "4.2.3" and diag.device_ids == ("26b9",) * 4
    assert judged(text, L40S_4) == [("dcgm.memory", S.DRAIN_NOW, 2)]


def test_a_test_that_fails_with_every_gpu_passing_is_a_flag() -> None:
    # DCGM issue 253's shape: pcie Fail from an internal error, GPU0-3 Pass.
    text = table(META4, SOFTWARE_OK, ("Integration", [
        row("pcie", "Fail"),
        *wrapped("Warning", "There was an internal error during the test: 'A child "
                            "process (152) exited with non-zero status 1'"),
        *gpus_pass(4)]))
    assert judged(text, L40S_4) == [("dcgm.pcie", S.FLAG, None)]


def test_a_link_failure_on_a_model_without_nvlink_is_not_a_fault() -> None:
    text = table(META4, SOFTWARE_OK, ("Integration", [
        row("pcie", "Fail"),
        *gpus_pass(4, fail=1, warning="GPU 1 NvLink bandwidth check failed: P2P writes "
                                      "below the expected rate")]))
    snap = build_snapshot([("d.txt", text)], "node01")
    (finding,) = [f for f in check_node(snap, L40S_4, Thresholds()) if f.gpu == 1]
    assert (finding.check_id, finding.severity) == ("dcgm.pcie", S.FLAG)
    assert finding.evidence["model_facts"] == {
        "nvlink_links_per_gpu": 0, "bridge_links": 0, "source": "node class"}
    # The same failure where the model has NVLink is the link's fault.
    assert judged(text, Expectations(gpu_count=4, nvlink_links_per_gpu=12)) == [
        ("dcgm.pcie", S.DRAIN_AFTER_JOB, 1)]


def test_a_failure_whose_messages_say_the_run_broke_is_a_flag() -> None:
    text = table(META4, SOFTWARE_OK, ("Integration", [
        row("pcie", "Fail"),
        *gpus_pass(4, fail=0, warning="Couldn't find the CUDA library libcudart.so.13: not "
                                      "found")]))
    assert judged(text, L40S_4) == [("dcgm.pcie", S.FLAG, 0)]


def test_deployment_software_failures_are_flags_and_memory_records_drain_after_job() -> None:
    text = "\n".join([RULE, row("Diagnostic", "Result"), RULE.replace("-", "="),
                      "|-----  Deployment  --------+------------------------------------------------|",
                      row("Denylist", "Pass"), row("Persistence Mode", "Fail"),
                      *wrapped("Error", "Persistence mode for GPU 0 is disabled. Enable "
                                        "persistence mode by running nvidia-smi -pm 1"),
                      row("Page Retirement/Row Remap", "Fail"),
                      *wrapped("Error", "GPU 5 had uncorrectable memory errors and row "
                                        "remapping failed"), RULE])
    got = judged(text, Expectations(gpu_count=2))  # the two GPUs the messages name
    assert ("dcgm.page_retirement", S.DRAIN_AFTER_JOB, 5) in got
    assert ("dcgm.persistence_mode", S.FLAG, 0) in got
    assert not [g for g in got if g[1] is S.DRAIN_NOW]


def test_skip_and_warn() -> None:
    text = table(META4, SOFTWARE_OK,
                 ("Hardware", [row("memory", "Skip"), *(row("", f"GPU{i}: Skip")
                                                         for i in range(4))]),
                 ("Stress", [row("targeted_stress", "Warn"), *gpus_pass(4)]))
    assert judged(text, L40S_4) == [("dcgm.targeted_stress", S.FLAG, None)]


def test_text_that_is_not_a_diag_table_is_refused() -> None:
    with pytest.raises(CaptureError, match="line 6"):
        parse_dcgmi_diag(table(META4).replace(row("DCGM Version", "4.2.3"),
                                              "garbage in the middle"))
    assert not looks_like_dcgmi_diag("| a | b |\n")


# ------------------------------------------------------------------------- JSON


def _v32() -> dict[str, object]:
    return {"version": "3.1.8", "Driver Version Detected": "525.85.12",
            "GPU Device IDs": ["20b0", "20b0"],
            "DCGM GPU Diagnostic": {"test_categories": [
                {"category": "Deployment", "tests": [
                    {"name": "Denylist", "results": [{"status": "Pass"}]}]},
                {"category": "Hardware", "tests": [
                    {"name": "GPU Memory", "results": [
                        {"gpu_ids": "0", "status": "Pass"},
                        {"gpu_ids": "1", "status": "Fail",
                         "warnings": "Found 3 errors in GPU memory on GPU 1"}]}]}]}}


def _v33() -> dict[str, object]:
    return {"version": "3.3.5", "DCGM GPU Diagnostic": {"test_categories": [
        {"category": "Integration", "tests": [
            {"name": "PCIe", "results": [
                {"gpu_id": "0", "status": "Pass", "info": "ok"},
                {"gpu_id": "1", "status": "Fail", "warnings": [
                    {"warning": "GPU 1 PCIe replay count above 10000", "error_id": 23,
                     "error_category": 1, "error_severity": 2}]}]}]}]}}


def _v4() -> dict[str, object]:
    return {"DCGM Diagnostic": {"test_categories": [
        {"category": "Hardware", "tests": [
            {"name": "memory", "results": [
                {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0,
                 "status": "Pass", "info": ["allocated 95%"]},
                {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 1,
                 "status": "Pass"}],
             "test_summary": {"status": "Pass"}}]},
        {"category": "Integration", "tests": [
            {"name": "pcie", "results": [
                {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Pass"},
                {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 1, "status": "Pass"}],
             "test_summary": {"status": "Fail", "warnings": [
                 {"warning": "Output of child process couldn't be parsed", "error_id": 1,
                  "error_category": 1, "error_severity": 1}]}}]}]},
        "entity_groups": [{"entity_group": "GPU", "entity_group_id": 1, "entities": [
            {"entity_id": 0, "serial_num": "x", "device_id": "2901"},
            {"entity_id": 1, "serial_num": "y", "device_id": "2901"}]}],
        "metadata": {"version": "4.4.1", "Driver Version Detected": "570.172.08"}}


def test_json_of_each_dcgm_generation() -> None:
    two = Expectations(gpu_count=2)
    assert judged(json.dumps(_v32(), indent="\t"), two) == [("dcgm.memory", S.DRAIN_NOW, 1)]
    assert judged(json.dumps(_v33()), two) == [("dcgm.pcie", S.DRAIN_AFTER_JOB, 1)]
    diag = parse_dcgmi_diag(json.dumps(_v4()))
    assert (diag.version, diag.driver, diag.device_ids) == ("4.4.1", "570.172.08",
                                                            ("2901", "2901"))
    assert judged(json.dumps(_v4()), two) == [("dcgm.pcie", S.FLAG, None)]


def test_json_iterations_and_a_run_that_did_not_happen() -> None:
    doc = {"iterations": [_v33(), _v32()], "Overall Result": "Fail"}
    assert {t.key for t in parse_dcgmi_diag(json.dumps(doc)).tests} == {
        "pcie", "denylist", "memory"}
    broke = {"DCGM Diagnostic": {"version": "4.4.1",
                                 "runtime_error": "Couldn't connect to the host engine"}}
    assert judged(json.dumps(broke), Expectations(gpu_count=0)) == [
        ("dcgm.runtime_error", S.FLAG, None)]


@pytest.mark.parametrize(("doc", "where"), [
    ("{\"DCGM Diagnostic\": []}", r"\$\.DCGM Diagnostic"),
    ("{\"DCGM GPU Diagnostic\": {\"test_categories\": [{\"tests\": [{\"name\": \"PCIe\", "
     "\"results\": [{\"gpu_id\": \"x\", \"status\": \"Pass\"}]}]}]}}", "results\\[0\\]"),
    ("{\"DCGM GPU Diagnostic\": {\"test_categories\": [{\"tests\": [{\"name\": \"PCIe\", "
     "\"results\": [{\"gpu_id\": \"0\", \"status\": \"Maybe\"}]}]}]}}", "status"),
    ("{\"other\": 1}", "not dcgmi diag"),
])
def test_bad_json_is_a_named_error(doc: str, where: str) -> None:
    with pytest.raises(CaptureError, match=where):
        parse_dcgmi_diag(doc)


# ------------------------------------------------------------------------- real runs

#: Runs recorded in docs/research/captures-wanted-2026-12.md (Part B), with the verdict
#: their sources support: "none" (nothing drains) or "flag" (a flag, no drain).
REAL_RUNS: dict[str, tuple[Expectations, str]] = {
    "dcgm253_l40sx4_dcgm4.2.3_570.148.08_diag_pcie_internal_error_gpus_pass.txt":
        (L40S_4, "flag"),
    "dcgm253_b200x8_dcgm4.4.1_570.172.08_diag_r2_in_slurm_pcie_parse_error.txt":
        (Expectations(gpu_count=8, nvlink_links_per_gpu=18), "flag"),
    "dcgm254_v100x4_dcgm4.4.1_580.65.06_diag_r2_pcie_fail_cuda13_pkg_missing_elided.txt":
        (Expectations(gpu_count=4), "flag"),
    "dcgm124_a10g_dcgm4.4.2_580.105.08_diag_r2_pass.txt": (Expectations(gpu_count=1), "none"),
    "nolebase_rtx3090x8_dcgm3.3.0_530.30.02_diag_r2_pcie_fail_driver_cuda_mismatch.txt":
        (Expectations(gpu_count=8), "flag"),
    "ramble_h200x8_dcgm3.3.9_570.133.20_diag_r3_pass_eud_skip.txt":
        (Expectations(gpu_count=8, nvlink_links_per_gpu=18), "none"),
}


@pytest.mark.parametrize("name", sorted(REAL_RUNS))
def test_a_real_run_gets_its_sources_verdict(name: str) -> None:
    found = sorted(KIT.rglob(name)) if KIT.is_dir() else []
    if not found:
        pytest.skip(f"{name} is read in place from {KIT} (recorded in "
                    f"docs/research/captures-wanted-2026-12.md), which does not hold it yet")
    exp, verdict = REAL_RUNS[name]
    got = judged(Path(found[0]).read_text(), exp, name)
    dcgm = [g for g in got if g[0].startswith("dcgm.")]
    assert not [g for g in dcgm if g[1].drains], got
    assert bool(dcgm) == (verdict == "flag"), got
