"""``dcgmi diag`` output (the text table, and ``-j`` JSON) read back as a :class:`DcgmDiag`.

Sites run DCGM's diagnostic (``dcgmi diag -r 1|2|3``) between jobs; its output is
evidence about each GPU, read here as it is printed. The formats, from DCGM's
``dcgmi/Diag.cpp`` at each release (docs/research/captures-wanted-2026-12.md, Part C):

* **Text.** A framed table: ``| <name, 25 wide> | <info, 46 wide> |`` rows under section
  lines (``|-----  Metadata  ---…|``, ``+-----  Hardware  ---…+``). Messages are cut
  every 45 characters, mid-word, on continuation rows whose name cell is blank: they are
  joined back here. DCGM 3.x names tests by display name (``GPU Memory``) and prints a
  test's results as ``Pass - All`` or one row per result, ``Fail - GPU: 0`` /
  ``Pass - GPUs: 1, 2``, then ``Warning``/``Info`` rows (Deployment tests: ``Error``
  rows). DCGM 4.x names tests by plugin (``memory``), prints the test's own result, then
  the messages of the run as a whole, then one ``GPU0: Pass`` row per GPU, each
  followed by that GPU's messages; a GPU row never says ``Warn`` (a warned GPU fails).
  Excerpts parse (a row cut at its end, no frame).
* **JSON** (``-j``). DCGM ≤ 3.2: ``{"DCGM GPU Diagnostic": {"test_categories": [{"category",
  "tests": [{"name", "results": [{"gpu_ids": "0", "status", "warnings": "<text>", "info":
  "<text>"}]}]}]}}``; 3.3: ``"gpu_id"`` (text, or a number in Deployment results) and
  ``"warnings"`` as a list of ``{"warning"|"warnings": "<text>", "error_id", ...}``; 4.x:
  top key ``"DCGM Diagnostic"``, results with ``"entity_group"``/``"entity_id"``, ``"info"`` a
  list, and a ``"test_summary"`` per test. ``"runtime_error"`` when the run failed;
  ``{"iterations": [...]}`` with ``--iterations``. JSON writes only Pass, Skip and Fail.

Pure: text in, value out. Anything that is not ``dcgmi diag`` output, or is damaged,
raises :class:`CaptureError` with the line or the JSON path that is wrong.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from slurm_ml.health.replay.errors import CaptureError
from slurm_ml.health.snapshot import DcgmDiag, DiagMessage, DiagTest

__all__ = ["looks_like_dcgmi_diag", "parse_dcgmi_diag", "test_key"]

#: DCGM 3.x display names → the plugin names DCGM 4.x prints (and the checks use).
_KEYS: dict[str, str] = {
    "denylist": "denylist", "blacklist": "denylist", "nvml library": "nvml_library",
    "cuda main library": "cuda_main_library",
    "cuda toolkit libraries": "cuda_toolkit_libraries",
    "permissions and os blocks": "permissions", "persistence mode": "persistence_mode",
    "environment variables": "environment",
    "page retirement/row remap": "page_retirement", "graphics processes": "graphics_processes",
    "inforom": "inforom", "pcie": "pcie", "gpu memory": "memory",
    "diagnostic": "diagnostic", "context create": "context_create", "sm stress": "sm_stress",
    "targeted stress": "targeted_stress", "targeted power": "targeted_power",
    "memory bandwidth": "memory_bandwidth", "memtest": "memtest", "pulse test": "pulse_test",
    "eud test": "eud", "cpu eud test": "cpu_eud", "nvbandwidth": "nvbandwidth",
}
_CATEGORIES = ("metadata", "deployment", "integration", "hardware", "stress")
_RESULTS = {"pass": "pass", "fail": "fail", "warn": "warn", "skip": "skip",
            "not run": "not run"}
_LEVELS = {"error": "error", "warning": "warning", "info": "info"}

_SECTION = re.compile(r"^\s*[|+]-{3,}\s+([A-Za-z][A-Za-z ]*?)\s+-+\+", re.MULTILINE)
_BORDER = re.compile(r"^\s*\+[-=+]+\s*$")
_HEADER = re.compile(r"^\s*\|\s*Diagnostic\s*\|\s*Result\s*\|?\s*$")
_ROW = re.compile(r"^\s*\|([^|]*)\|(.*)$")
_RESULT_3X = re.compile(r"^(Pass|Fail|Warn|Skip)(?:\s*-\s*(?:(All)|GPUs?:\s*([\d,\s]+)))?$",
                        re.IGNORECASE)
_ENTITY = re.compile(r"^(GPU|CPU)\s?(\d{1,4})\s*:\s*(Pass|Fail|Warn|Skip|Not Run)?$",
                     re.IGNORECASE)
_NAMES_GPU = re.compile(r"\bGPU\s?(\d{1,4})\b")
_ELISION = frozenset({"...", "[...]", "…", "[…]"})
#: The width of a message piece: dcgmi cuts messages every 45 characters.
_PIECE = 45


def test_key(name: str) -> str:
    """DCGM's plugin name for a test printed as ``name`` ("GPU Memory" → "memory")."""
    n = " ".join(name.split()).lower()
    return _KEYS.get(n) or re.sub(r"[^0-9a-z]+", "_", n).strip("_")


def looks_like_dcgmi_diag(text: str) -> bool:
    """Whether ``text`` is ``dcgmi diag`` output (text or JSON), by its own marks."""
    body = text.lstrip("\ufeff \t\r\n")
    if body.startswith("{"):
        return '"DCGM GPU Diagnostic"' in body or '"DCGM Diagnostic"' in body
    if "Successfully ran diagnostic for group" in text or any(
            m[1].strip().lower() in _CATEGORIES for m in _SECTION.finditer(text)):
        return True
    rows = [_ROW.match(line) for line in text.splitlines() if line.strip()]
    return any(r is not None and r[1].strip() and _RESULT_3X.match(_cell(r[2]).strip())
               for r in rows)


def parse_dcgmi_diag(text: str) -> DcgmDiag:
    """``dcgmi diag`` output as a :class:`DcgmDiag`; CaptureError if it is not that."""
    body = text.lstrip("\ufeff \t\r\n")
    if body.startswith("{"):
        return _parse_json(body)
    return _parse_text(text)


# --------------------------------------------------------------------------- text


def _cell(raw: str) -> str:
    """The info cell of a row, without the frame: ``" Pass   |"`` → ``"Pass   "``."""
    raw = raw.rstrip()
    if raw.endswith("|"):
        raw = raw[:-1]
    return raw[1:] if raw.startswith(" ") else raw


@dataclass
class _Test:
    name: str
    category: str
    status: str | None = None
    all_gpus: str | None = None
    gpus: list[tuple[int, str]] = field(default_factory=list)
    messages: list[DiagMessage] = field(default_factory=list)


@dataclass
class _Message:
    level: str
    pieces: list[str]
    gpu: int | None  # the entity row it follows (4.x), if any


def _result(word: str | None, where: str) -> str:
    if word is None or not word.strip():
        return "not run"
    out = _RESULTS.get(" ".join(word.split()).lower())
    if out is None:
        raise CaptureError(f"{where}: {word!r} is not a dcgmi diag result")
    return out


def _gpu_list(text: str, where: str) -> list[int]:
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError as exc:
        raise CaptureError(f"{where}: {text!r} is not a list of GPU ids") from exc


def _parse_text(text: str) -> DcgmDiag:
    meta: dict[str, str] = {}
    tests: list[_Test] = []
    category = ""
    test: _Test | None = None
    message: _Message | None = None
    entity: int | None = None
    started = False

    def close_message() -> None:
        nonlocal message
        if message is not None and test is not None:
            joined = "".join(message.pieces).strip()
            gpu = message.gpu
            if gpu is None and (m := _NAMES_GPU.search(joined)) is not None:
                gpu = int(m[1])
            test.messages.append(DiagMessage(message.level, joined, gpu))
        message = None

    for no, line in enumerate(text.splitlines(), 1):
        where = f"line {no}"
        stripped = line.strip()
        if not stripped or stripped in _ELISION:
            continue
        if stripped.startswith("Successfully ran diagnostic"):
            started = True
            continue
        if (sec := _SECTION.match(line)) is not None:
            close_message()
            category = sec[1].strip().lower()
            if category not in _CATEGORIES:
                raise CaptureError(f"{where}: {sec[1].strip()!r} is not a dcgmi diag section")
            test, entity, started = None, None, True
            continue
        if _BORDER.match(line) or _HEADER.match(line):
            started = True
            continue
        row = _ROW.match(line)
        if row is None:
            if not started:
                continue  # a prompt or tool noise before the table
            raise CaptureError(f"{where}: not a row of a dcgmi diag table: {stripped[:60]!r}")
        started = True
        name, info = row[1].strip(), _cell(row[2])
        if category == "metadata":
            if name:
                meta[name.lower()] = info.strip()
            continue
        level = _LEVELS.get(name.lower())
        if level is not None:
            close_message()
            if test is None:  # an excerpt that starts at a message, or a section's own
                test = _Test("", category)
                tests.append(test)
            message = _Message(level, [info[:_PIECE]], entity)
            continue
        if not name:
            if message is not None:
                message.pieces.append(info[:_PIECE])
                continue
            if test is None:
                raise CaptureError(f"{where}: a continuation row with no test above it")
            value = info.strip()
            if (m := _ENTITY.match(value)) is not None:
                if m[1].upper() == "GPU":
                    entity = int(m[2])
                    test.gpus.append((entity, _result(m[3], where)))
                else:
                    entity = None  # a CPU entity: not a GPU's
                continue
            if value.lower().startswith("code:"):
                continue  # "Code: (000000000000)" under a 3.x "Warn - All"
            _result_3x(test, value, where)
            continue
        close_message()
        entity = None
        test = _Test(name, category)
        tests.append(test)
        value = info.strip()
        if _RESULT_3X.match(value):
            _result_3x(test, value, where)
        else:
            test.status = _result(value, where)
    close_message()
    if not tests and not meta:
        raise CaptureError("no dcgmi diag test or metadata row")
    ids = tuple(x.strip() for x in meta.get("gpu device ids detected", "").split(",")
                if x.strip())
    return DcgmDiag(tests=tuple(_frozen(t) for t in tests),
                    version=meta.get("dcgm version"),
                    driver=meta.get("driver version detected"), device_ids=ids)


def _result_3x(test: _Test, value: str, where: str) -> None:
    m = _RESULT_3X.match(value)
    if m is None:
        raise CaptureError(f"{where}: {value!r} is not a dcgmi diag result")
    result = _result(m[1], where)
    if m[2]:
        test.all_gpus = result
    elif m[3]:
        test.gpus.extend((g, result) for g in _gpu_list(m[3], where))
    else:
        test.status = result


def _frozen(t: _Test) -> DiagTest:
    return DiagTest(name=t.name, key=test_key(t.name) if t.name else t.category or "diag",
                    category=t.category, status=t.status, all_gpus=t.all_gpus,
                    gpus=tuple(t.gpus), messages=tuple(t.messages))


# --------------------------------------------------------------------------- JSON


def _parse_json(body: str) -> DcgmDiag:
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise CaptureError(f"not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise CaptureError("$: a dcgmi diag -j document is an object")
    runs = doc.get("iterations")
    if isinstance(runs, list):
        parts = [_one_run(r, f"$.iterations[{i}]") for i, r in enumerate(runs)]
        if not parts:
            raise CaptureError("$.iterations: no run")
        first = parts[0]
        return DcgmDiag(tests=tuple(t for p in parts for t in p.tests),
                        version=first.version, driver=first.driver,
                        device_ids=first.device_ids,
                        runtime_error=next((p.runtime_error for p in parts
                                            if p.runtime_error), None))
    return _one_run(doc, "$")


def _str(value: object) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _one_run(doc: object, path: str) -> DcgmDiag:
    if not isinstance(doc, dict):
        raise CaptureError(f"{path}: a run is an object")
    key = next((k for k in ("DCGM Diagnostic", "DCGM GPU Diagnostic") if k in doc), None)
    if key is None:
        raise CaptureError(f"{path}: neither 'DCGM Diagnostic' (DCGM 4) nor "
                           f"'DCGM GPU Diagnostic' (DCGM 2-3): not dcgmi diag -j output")
    diag = doc[key]
    if not isinstance(diag, dict):
        raise CaptureError(f"{path}.{key}: an object expected")
    raw_meta = doc.get("metadata")
    meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    version = _str(doc.get("version")) or _str(meta.get("version")) or _str(diag.get("version"))
    driver = _str(doc.get("Driver Version Detected")) or _str(meta.get("Driver Version Detected"))
    ids = doc.get("GPU Device IDs")
    device_ids = tuple(str(x) for x in ids) if isinstance(ids, list) else tuple(
        str(e.get("device_id")) for g in doc.get("entity_groups") or []
        if isinstance(g, dict) and g.get("entity_group") == "GPU"
        for e in g.get("entities") or [] if isinstance(e, dict) and e.get("device_id"))
    runtime = _str(diag.get("runtime_error"))
    cats = diag.get("test_categories")
    if cats is None:
        if runtime is None:
            raise CaptureError(f"{path}.{key}: no test_categories and no runtime_error")
        return DcgmDiag((), version, driver, device_ids, runtime)
    if not isinstance(cats, list):
        raise CaptureError(f"{path}.{key}.test_categories: a list expected")
    tests: list[DiagTest] = []
    for ci, cat in enumerate(cats):
        cpath = f"{path}.{key}.test_categories[{ci}]"
        if not isinstance(cat, dict) or not isinstance(cat.get("tests"), list):
            raise CaptureError(f"{cpath}: an object with a 'tests' list expected")
        category = str(cat.get("category", "")).strip().lower()
        for ti, t in enumerate(cat["tests"]):
            tests.append(_json_test(t, category, f"{cpath}.tests[{ti}]"))
    return DcgmDiag(tuple(tests), version, driver, device_ids, runtime)


def _texts(value: object, path: str) -> Iterator[str]:
    """Messages as the versions write them: a string, a list of strings, or a list of
    {"warning"|"warnings": text, "error_id": ...} objects."""
    if value is None:
        return
    if isinstance(value, str):
        if value.strip():
            yield value.strip()
        return
    if not isinstance(value, list):
        raise CaptureError(f"{path}: a string or a list expected")
    for i, item in enumerate(value):
        if isinstance(item, str):
            if item.strip():
                yield item.strip()
        elif isinstance(item, dict):
            msg = item.get("warning", item.get("warnings"))
            if not isinstance(msg, str):
                raise CaptureError(f"{path}[{i}]: no 'warning' text")
            yield msg.strip()
        else:
            raise CaptureError(f"{path}[{i}]: a string or an object expected")


def _gpu_of(result: dict[str, Any], path: str) -> int | None:
    if "entity_id" in result:
        if str(result.get("entity_group", "GPU")).upper() != "GPU":
            return -1  # a CPU or switch entity: not a GPU's result
        raw: object = result["entity_id"]
    else:
        raw = result.get("gpu_id", result.get("gpu_ids"))
    if raw is None:
        return None
    try:
        return int(str(raw).strip())
    except ValueError as exc:
        raise CaptureError(f"{path}: GPU id {raw!r} is not a number") from exc


def _json_test(t: object, category: str, path: str) -> DiagTest:
    if not isinstance(t, dict) or not isinstance(t.get("name"), str):
        raise CaptureError(f"{path}: a test object with a 'name' expected")
    results = t.get("results", [])
    if not isinstance(results, list):
        raise CaptureError(f"{path}.results: a list expected")
    status: str | None = None
    gpus: list[tuple[int, str]] = []
    messages: list[DiagMessage] = []
    for ri, r in enumerate(results):
        rpath = f"{path}.results[{ri}]"
        if not isinstance(r, dict):
            raise CaptureError(f"{rpath}: an object expected")
        result = _result(str(r.get("status", "")), f"{rpath}.status")
        gpu = None if category == "deployment" else _gpu_of(r, rpath)
        if gpu == -1:
            continue
        if gpu is None:
            status = result if status in (None, "pass", "skip") else status
        else:
            gpus.append((gpu, result))
        for level, k in (("warning", "warnings"), ("info", "info")):
            for text in _texts(r.get(k), f"{rpath}.{k}"):
                named = gpu
                if named is None and (m := _NAMES_GPU.search(text)) is not None:
                    named = int(m[1])
                messages.append(DiagMessage("error" if category == "deployment"
                                            and level == "warning" else level, text, named))
    summary = t.get("test_summary")
    if isinstance(summary, dict):
        status = _result(str(summary.get("status", "")), f"{path}.test_summary.status")
        seen = {m.text for m in messages}
        for level, k in (("warning", "warnings"), ("info", "info")):
            for text in _texts(summary.get(k), f"{path}.test_summary.{k}"):
                if text not in seen:  # the summary repeats the GPUs' own messages
                    messages.append(DiagMessage(level, text, None))
    return DiagTest(name=t["name"], key=test_key(t["name"]), category=category,
                    status=status, gpus=tuple(gpus), messages=tuple(messages))
