"""slurm_ml.envvars: the one table of SLURM_ML_* variables and the one function reading them.

The table, docs/admin.md and the code must agree: every variable the repository mentions
outside tests/ is declared, every declared one is used, docs/admin.md lists exactly the
table, and no Python module reads one past :func:`slurm_ml.envvars.env`.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from slurm_ml import envvars
from slurm_ml.assets import FOLDERS
from slurm_ml.envvars import VARS, UndeclaredEnvVar, declared, env

REPO = Path(__file__).resolve().parents[2]
ADMIN = REPO / "docs" / "admin.md"
NAME = re.compile(r"\bSLURM_ML_[A-Z0-9_]+\b")
BEGIN = "<!-- envvars: generated from slurm_ml.envvars.VARS -->\n"
END = "<!-- envvars: end -->\n"
REGEN = ".venv/bin/python -c 'from slurm_ml import envvars; print(envvars.markdown(), end=\"\")'"

#: Read by tests or the test runner only (never by slurm-ml), so not settings: they stay
#: out of the table (SLURM_ML_TEST_SERIAL: devcluster/test-all.sh, one pytest run; the two
#: corpus folders: tests/unit/test_fault_corpus.py, test_sbatch_corpus.py and .ci/run).
TEST_ONLY = {"SLURM_ML_REGEN_EXAMPLES", "SLURM_ML_COMPOSE_KEEP", "SLURM_ML_FAULT_CORPUS",
             "SLURM_ML_SBATCH_CORPUS", "SLURM_ML_TEST_SERIAL"}
#: What slurm-ml is made of: the package and the folders of files it deploys (the hook
#: wrapper in prolog/ reads its own variables).
SHIPPED = ("slurm_ml", *FOLDERS)
#: Where the repository talks about its variables, outside tests/.
SCANNED = [*SHIPPED, "epilog", "devcluster", "docs", "examples", "benchmarks", "README.md",
           "CHANGELOG.md", "Makefile", "docker-compose.yml"]


def _files() -> list[Path]:
    out: list[Path] = []
    for rel in SCANNED:
        path = REPO / rel
        if path.is_file():
            out.append(path)
        elif path.is_dir():
            out += [p for p in sorted(path.rglob("*")) if p.is_file()
                    and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".csv", ".gz")]
    return out


def _mentions() -> dict[str, set[str]]:
    """Every SLURM_ML_* name → the files that mention it."""
    out: dict[str, set[str]] = {}
    for path in _files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # a binary capture
        for name in set(NAME.findall(text)):
            out.setdefault(name, set()).add(str(path.relative_to(REPO)))
    return out


def test_every_variable_the_repository_mentions_is_declared() -> None:
    undeclared = {name: sorted(files) for name, files in _mentions().items()
                  if name not in {v.name for v in VARS} | TEST_ONLY}
    assert not undeclared, (
        f"declare these in slurm_ml/envvars.py (name, meaning, default), or stop reading "
        f"them: {undeclared}")


def test_every_declared_variable_is_used_by_slurm_ml() -> None:
    used = {name for name, files in _mentions().items()
            if any(f.startswith(tuple(f"{d}/" for d in SHIPPED)) and f != "slurm_ml/envvars.py"
                   for f in files)}
    assert [v.name for v in VARS if v.name not in used] == []


def test_the_table_is_well_formed() -> None:
    names = [v.name for v in VARS]
    assert len(names) == len(set(names))
    for var in VARS:
        assert NAME.fullmatch(var.name), var.name
        assert var.meaning and var.default and "|" not in var.meaning + var.default, var.name
        assert not TEST_ONLY & {var.name}


def test_admin_doc_lists_exactly_the_table() -> None:
    text = ADMIN.read_text(encoding="utf-8")
    assert text.count(BEGIN) == 1 and text.count(END) == 1, (
        f"docs/admin.md needs one section between {BEGIN.strip()} and {END.strip()}")
    listed = text.split(BEGIN, 1)[1].split(END, 1)[0]
    assert listed == envvars.markdown(), (
        f"docs/admin.md's variables differ from slurm_ml/envvars.py; paste the output of\n"
        f"  {REGEN}\nbetween its markers")


def _direct_reads(path: Path) -> list[int]:
    """Lines that read a SLURM_ML_* variable from the environment without envvars.env:
    os.environ / os.getenv / click's envvar= on a line naming one, directly or through a
    module constant holding its name."""
    text = path.read_text(encoding="utf-8")
    consts = {t.id for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Assign)
              and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
              and NAME.fullmatch(node.value.value) for t in node.targets
              if isinstance(t, ast.Name)}
    named = NAME.pattern if not consts else rf"{NAME.pattern}|\b(?:{'|'.join(consts)})\b"
    reader = re.compile(rf"(os\.environ|getenv|envvar=).*({named})")
    return [n for n, line in enumerate(text.splitlines(), 1) if reader.search(line)]


def test_python_reads_the_variables_only_through_env() -> None:
    found = {}
    for path in sorted((REPO / "slurm_ml").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel == "slurm_ml/envvars.py":
            continue
        if lines := _direct_reads(path):
            found[rel] = lines
    assert not found, f"read these through slurm_ml.envvars.env(name): {found}"


def test_the_direct_read_detector_sees_both_spellings(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text('import os\nX = os.environ.get("SLURM_ML_DSN")\n')
    (tmp_path / "b.py").write_text('import os\nK = "SLURM_ML_DSN"\n\n\nv = os.environ[K]\n')
    (tmp_path / "c.py").write_text('import os\nenv = {**os.environ, "PATH": "/bin"}\n')
    assert [_direct_reads(tmp_path / n) for n in ("a.py", "b.py", "c.py")] == [[2], [5], []]


# --------------------------------------------------------------------------- env()


def test_env_reads_a_declared_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_ML_DSN", "  postgresql://db/x \n")
    assert env("SLURM_ML_DSN") == "postgresql://db/x"
    monkeypatch.setenv("SLURM_ML_DSN", "   ")
    assert env("SLURM_ML_DSN") is None
    monkeypatch.delenv("SLURM_ML_DSN")
    assert env("SLURM_ML_DSN") is None


def test_env_reads_a_given_environment_instead(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_ML_STATE_DIR", "/from/process")
    assert env("SLURM_ML_STATE_DIR", {"SLURM_ML_STATE_DIR": "/given"}) == "/given"
    assert env("SLURM_ML_STATE_DIR", {}) is None


def test_an_undeclared_name_is_refused_even_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_ML_TEST_PAUSE_AFTER_INTENT_S", "60")
    with pytest.raises(UndeclaredEnvVar, match="SLURM_ML_TEST_PAUSE_AFTER_INTENT_S is not"):
        env("SLURM_ML_TEST_PAUSE_AFTER_INTENT_S")
    with pytest.raises(UndeclaredEnvVar):
        declared("SLURM_ML_X")
    assert declared("SLURM_ML_DSN").name == "SLURM_ML_DSN"


def test_envvars_is_stdlib_only() -> None:
    tree = ast.parse(Path(envvars.__file__).read_text(encoding="utf-8"))
    roots = {alias.name.split(".")[0] for node in ast.walk(tree)
             if isinstance(node, ast.Import) for alias in node.names}
    roots |= {node.module.split(".")[0] for node in ast.walk(tree)
              if isinstance(node, ast.ImportFrom) and node.module}
    assert roots <= set(sys.stdlib_module_names) | {"__future__"}, roots
