"""``dcgmi diag`` results as findings: each failed test judged by what it tests.

* A hardware test (memory, memtest, diagnostic, targeted stress/power, pulse, memory
  bandwidth, SM stress, context create, EUD) that a GPU fails: drain now. DCGM's guidance
  for these is to take the GPU out of service and look at it.
* A link or bandwidth test (pcie, nvbandwidth, nccl_tests) that a GPU fails: drain after
  the job; but a failure that is about NVLink or peer-to-peer on a node whose GPUs have
  no NVLink (the node class's ``nvlink_links_per_gpu`` and ``bridge_links`` are 0) is
  not a fault: a flag that names the model facts it rested on.
* Deployment tests: Page Retirement/Row Remap and Inforom (and an excerpt's message that
  names a GPU with pending remaps or retired pages) drain after the job, as the
  ``remap.pending`` and ``gpu.inforom`` checks do; the others (libraries, permissions,
  persistence mode, environment, graphics processes, denylist) are the node's software,
  not a GPU: a flag.
* A test that failed with no GPU failing it (DCGM 4's ``pcie | Fail`` above eight
  ``GPUn: Pass`` rows; "internal error", "couldn't be parsed"), a failure whose messages
  say the run itself broke (a library, a version mismatch, a child process), a 3.x
  ``Warn``, a run that did not happen (``runtime_error``): a flag. DCGM cannot judge a
  GPU from such a run; nothing is drained for it (NVIDIA/DCGM#253 on GitHub: a Slurm
  job's cpuset made the pcie test fail on healthy B200s).
* ``Skip`` and ``Pass``: nothing.

Check ids are ``dcgm.<plugin>`` ("dcgm.memory", "dcgm.pcie"), so each test has its own
breaker. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from slurm_ml.health.checks._common import Out, join
from slurm_ml.health.checks.findings import Severity
from slurm_ml.health.snapshot import DcgmDiag, DiagTest, Gpu, NodeSnapshot

S = Severity

_HARDWARE = frozenset({"memory", "memtest", "diagnostic", "targeted_stress",
                       "targeted_power", "pulse_test", "memory_bandwidth", "sm_stress",
                       "context_create", "eud", "rist"})
_LINKS = frozenset({"pcie", "nvbandwidth", "nccl_tests"})
_AFTER_JOB = frozenset({"page_retirement", "inforom"})
_SOFTWARE = frozenset({"denylist", "nvml_library", "cuda_main_library",
                       "cuda_toolkit_libraries", "permissions", "persistence_mode",
                       "environment", "graphics_processes", "software"})
#: Messages that say the diagnostic itself broke, not the GPU.
_RUN_BROKE = re.compile(
    r"internal error|could ?n[o']t be parsed|could ?n[o']t find|cannot find|missing"
    r"|child process|library|libcuda|version mismatch"
    r"|mismatch between|not found|no such file|permission|not supported|could not load"
    r"|unable to load|timed? ?out waiting|cuda_error_system_driver_mismatch|insufficient",
    re.IGNORECASE)
_ABOUT_LINKS = re.compile(r"nv-?link|p2p|peer[- ]to[- ]peer|nvswitch", re.IGNORECASE)
#: A Deployment message naming a GPU's memory records (3.x "Error" rows).
_MEMORY_RECORDS = re.compile(r"row remap|retire|uncorrectable|pending page", re.IGNORECASE)
_INFOROM = re.compile(r"inforom", re.IGNORECASE)


def dcgm_diag(snap: NodeSnapshot, scope: Collection[int], out: Out) -> None:
    """Findings from the node's ``dcgmi diag`` run, if one was read."""
    diag = snap.dcgm_diag
    if diag is None:
        return
    if diag.runtime_error:
        out.add("dcgm.runtime_error", S.FLAG, None,
                f"dcgmi diag did not run on {snap.node} ({diag.runtime_error}); it says "
                f"nothing about the GPUs: fix DCGM (nv-hostengine) and run it again.",
                "dcgmi diag did not run", runtime_error=diag.runtime_error,
                dcgm_version=diag.version)
    gpus = {g.index: g for g in snap.gpus}
    for test in diag.tests:
        _judge(test, diag, snap.node, gpus, scope=scope, out=out)


def _gpu(index: int, gpus: dict[int, Gpu]) -> Gpu:
    return gpus.get(index) or Gpu(index=index)


def _failed(test: DiagTest) -> list[int]:
    """GPUs whose own result is a failure; a 3.x ``Fail - All`` counts for the GPUs its
    messages name (the others are not told apart from a run that broke)."""
    out = [g for g, r in test.gpus if r == "fail"]
    if test.all_gpus == "fail":
        out += [m.gpu for m in test.messages if m.gpu is not None]
    if test.category == "deployment" and test.status in ("fail", None):
        out += [m.gpu for m in test.messages if m.gpu is not None and m.level == "error"]
    return sorted(set(out))


def _messages(test: DiagTest, gpu: int | None) -> list[str]:
    return [m.text for m in test.messages if m.level != "info" and m.gpu in (gpu, None)]


def _title(test: DiagTest) -> str:
    return test.name or f"{test.category or 'dcgmi'} messages"


def _judge(test: DiagTest, diag: DcgmDiag, node: str, gpus: dict[int, Gpu], *,
           scope: Collection[int], out: Out) -> None:
    check = f"dcgm.{test.key}"
    failed = [g for g in _failed(test) if not scope or g in scope or g not in gpus]
    for g in failed:
        said = _messages(test, g)
        sev, why, facts = _severity(test, said, out)
        text = f" ({said[0][:160]})" if said else ""
        out.add(check, sev, _gpu(g, gpus),
                f"GPU {g} of {node} failed dcgmi diag's {_title(test)} test{text}; {why}",
                f"dcgmi {test.key} fail"[:40], test=test.name, category=test.category,
                messages=said, dcgm_version=diag.version, model_facts=facts)
    if failed:
        return
    broke = test.status == "fail" or test.all_gpus == "fail" or (
        test.category == "deployment" and any(m.level == "error" for m in test.messages))
    warned = test.status == "warn" or test.all_gpus == "warn" or any(
        r == "warn" for _, r in test.gpus)
    if not (broke or warned):
        return
    said = _messages(test, None)
    text = f" ({said[0][:160]})" if said else ""
    if test.key in _SOFTWARE:
        why = ("this is the node's software (driver, libraries, settings), not a GPU: fix "
               "it and run dcgmi diag again")
    elif broke:
        why = ("no GPU failed it: the run itself broke, so it says nothing about a GPU; "
               "run dcgmi diag again with the whole node (outside a job, or --exclusive)")
    else:
        why = "a warning, not a failure: watch for it in the next runs"
    out.add(check, S.FLAG, None,
            f"dcgmi diag's {_title(test)} test on {node} "
            f"{'failed' if broke else 'warned'}{text}; {why}.",
            f"dcgmi {test.key} {'fail' if broke else 'warn'}"[:40], test=test.name,
            category=test.category, messages=said,
            gpus_warned=[g for g, r in test.gpus if r == "warn"],
            dcgm_version=diag.version)


def _severity(test: DiagTest, said: Sequence[str], out: Out
              ) -> tuple[Severity, str, dict[str, object]]:
    """How a GPU's failure of ``test`` is judged, why, and the model facts used."""
    exp = out.exp
    facts: dict[str, object] = {}
    if said and all(_RUN_BROKE.search(m) for m in said):
        return S.FLAG, ("its messages say the diagnostic itself broke (" + join(said, 1)[:80]
                        + "), not the GPU: fix that and run dcgmi diag again."), facts
    key = test.key
    if test.category == "deployment" and key not in _AFTER_JOB | _SOFTWARE:
        if any(_INFOROM.search(m) for m in said):
            key = "inforom"
        elif any(_MEMORY_RECORDS.search(m) for m in said):
            key = "page_retirement"
    if key in _SOFTWARE:
        return S.FLAG, ("this is the node's software, not the GPU: fix it and run dcgmi "
                        "diag again."), facts
    if key in _AFTER_JOB:
        return S.DRAIN_AFTER_JOB, ("its memory records (row remapping, retired pages) or "
                                   "InfoROM need a reset or an RMA: drain after the job."
                                   if key == "page_retirement" else
                                   "a corrupted InfoROM: drain after the job, RMA."), facts
    if key in _LINKS or test.key in _LINKS:
        facts = {"nvlink_links_per_gpu": exp.nvlink_links_per_gpu,
                 "bridge_links": exp.bridge_links, "source": "node class"}
        if any(_ABOUT_LINKS.search(m) for m in said) and not (
                exp.nvlink_links_per_gpu or exp.bridge_links):
            return S.FLAG, ("the failure is about NVLink or peer-to-peer, and this node's "
                            "GPUs have none (node class: 0 NVLink links, no bridge): not "
                            "a fault of the GPU."), facts
        return S.DRAIN_AFTER_JOB, ("its links (PCIe, NVLink) do not carry what they should: "
                                   "drain after the job, reseat or replace."), facts
    if key in _HARDWARE:
        return S.DRAIN_NOW, ("the GPU failed a hardware test: drain now, then run dcgmi diag "
                             "-r 3 again and replace it if it fails again."), facts
    return S.DRAIN_AFTER_JOB, ("a test slurm-ml has no rule for failed on it: drain after "
                               "the job and look at dcgmi diag -r 3 -v."), facts

