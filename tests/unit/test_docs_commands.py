"""Every command shown in the docs is checked, so the docs cannot rot.

Commands are the lines of ```sh / ```bash / ```shell blocks (and the ``$ `` lines of
```console blocks) in docs/*.md, README.md and BENCHMARKS.md (not docs/benchmarks-history.md,
a record of what was run), and the ``python3 benchmarks/...``, ``make ...`` and
``slurm-ml ...`` code spans in BENCHMARKS.md's tables (its rerun column); a trailing ``\\``
continues a line, ``#`` starts a comment, ``;``, ``&&``, ``||`` and ``|`` separate
commands, ``$(...)`` inside a word is checked as a command of its own, and ``[--opt]`` is
usage syntax for an optional word (checked both without and with it). Placeholders must
be concrete example values (``slurm-ml why 1234``, ``quarantine resume gpu03``) so that
the lines parse.

For each command:

* ``slurm-ml ...`` must parse against the real click CLI (the subcommand chain is
  resolved and ``make_context`` is called on the final command with its arguments). A
  ``click.Path(exists=True)`` argument naming a file that is not on this machine is
  accepted: that is the reader's file, not a syntax error.
* Those listed in ``RUN`` are also run for real, offline, with the exit code given there
  (in a scratch directory holding ``conf`` and any files the entry names; paths of an
  installed system are swapped for scratch ones).
* Every other ``slurm-ml`` command must be covered by ``LIVE`` (the integration test
  that runs that subcommand on the dev cluster; the test must exist) or be listed in
  ``PARSE_ONLY`` with the reason it is not run here.
* ``sbatch ...`` options must parse with ``slurm_ml.submitd.sbatch_args`` (sbatch 22.05's
  own rules); ``make TARGET`` targets must exist in the Makefile; ``python3
  benchmarks/NAME.py`` must name a script there, and each ``--option`` it is given must
  appear in that script; every other program must be in ``ALLOWED_TOOLS``.

A failing command fails with ``file:line: command: what is wrong``.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from deploy_helpers import make_conf_dir

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.cli import main
from slurm_ml.submitd.sbatch_args import SbatchParseError, parse_sbatch

REPO = Path(__file__).resolve().parents[2]
#: docs/benchmarks-history.md is left out: its commands are a record of what was run on
#: the day, kept as run, and an option they used may since have changed or gone.
HISTORY = frozenset({"benchmarks-history.md"})
BENCHMARKS = REPO / "BENCHMARKS.md"
DOC_FILES = (*sorted(p for p in (REPO / "docs").glob("*.md") if p.name not in HISTORY),
             REPO / "README.md", BENCHMARKS)
#: A command in a table cell of BENCHMARKS.md: each row's rerun command.
_TABLE_COMMAND = re.compile(r"`((?:python3 benchmarks/|make |slurm-ml )[^`]*)`")
SHELL_LANGS = {"sh", "bash", "shell"}
CONSOLE_LANGS = {"console", "shell-session"}

# --------------------------------------------------------------------------- tables

#: Programs a doc may run besides slurm-ml, sbatch and make.
ALLOWED_TOOLS = frozenset({
    # Slurm
    "srun", "salloc", "scontrol", "sacctmgr", "sinfo", "squeue", "sacct", "sprio",
    "sshare", "scancel", "sattach", "sdiag", "slurmctld", "slurmd", "slurmdbd",
    # system and packages
    "apt-get", "apt", "dpkg", "systemctl", "journalctl", "runuser", "su", "sudo", "install",
    "mkdir", "cp", "mv", "rm", "ln", "chown", "chmod", "cat", "ls", "test", "tee", "grep",
    "diff", "sha256sum", "hostname", "id", "useradd", "getent", "curl", "git", "python3",
    "mungekey", "munge", "unmunge", "create-munge-key", "psql", "createuser", "createdb",
    "lint-imports", "pip", "nvidia-smi", "dmesg", "cd", "export", "set", ".", "source",
    "eval", "echo", "true", "sleep", "docker", "docker-compose", "mysql",
    "promtool",  # Prometheus' own checker of the shipped rules
})

#: Commands run for real (key: the doc line's words, joined by single spaces, the
#: program as ``slurm-ml``). Each entry must appear in some doc.
@dataclass(frozen=True)
class Run:
    exit_code: int = 0
    files: dict[str, str] = field(default_factory=dict)  # scratch files to create
    conf_dir: bool = False  # swap /etc/slurm etc. for a scratch Slurm conf dir


_SCRIPT = "#!/bin/bash\n#SBATCH --time=60\nsrun python train.py\n"
RUN: dict[str, Run] = {
    "slurm-ml --version": Run(),
    "slurm-ml config check /opt/slurm-ml/src/conf/examples/slurm-ml.yaml": Run(),
    "slurm-ml config check /etc/slurm-ml/slurm-ml.yaml": Run(),
    "slurm-ml submit-check --user alice -- --gres=gpu:a100_80g:4 --comment=gpu_mem=30G train.sh":
        Run(files={"train.sh": _SCRIPT}),
    "slurm-ml submit-check --json -- --gpus=16 --wrap srun python train.py": Run(),
    "slurm-ml submit-check --user alice -- --gres=gpu:a100_80g:4 --comment=gpu_mem=30G "
    "--wrap python train.py": Run(),
    "slurm-ml submit-check --user alice -- --gpus=16 --wrap srun python train.py": Run(),
    "slurm-ml submit-check --user alice --json -- --gres=gpu:6 -N2 --wrap srun python train.py":
        Run(exit_code=1),
    "slurm-ml submit-check --user alice -- --gres=gpu:a100_40g:8 --wrap nvidia-smi": Run(),
    "slurm-ml sim --policy budget --policy fifo --hours 1 --gpus 64": Run(),
    "slurm-ml install --config /etc/slurm-ml/slurm-ml.yaml --slurm-conf-dir /etc/slurm "
    "--python /opt/slurm-ml/venv/bin/python --dry-run --diff": Run(conf_dir=True),
    "slurm-ml uninstall --slurm-conf-dir /etc/slurm --dry-run": Run(conf_dir=True, exit_code=0),
}

#: Subcommands that need the live cluster, and the integration test that runs them there.
LIVE: dict[tuple[str, ...], str] = {
    ("why",): "tests/integration/test_reconciler_cluster.py::"
              "test_under_served_program_ranks_first_in_sprio_and_budget_status",
    ("jobstats",): "tests/integration/test_jobstats_cluster.py::"
                   "test_a_job_using_2_of_its_8_gpus_is_told_and_the_summary_outlives_its_samples",
    ("efficiency",): "tests/integration/test_jobstats_cluster.py::"
                     "test_a_job_using_2_of_its_8_gpus_is_told_and_the_summary_outlives_its_samples",
    ("budget", "status"): "tests/integration/test_reconciler_cluster.py::"
                          "test_under_served_program_ranks_first_in_sprio_and_budget_status",
    ("daemon",): "tests/integration/test_reconciler_cluster.py::"
                 "test_resumable_over_served_job_is_requeued_for_the_starved_one",
    ("quarantine", "list"): "tests/integration/test_health.py::"
                            "test_faults_on_a_whole_class_drain_no_more_than_the_breaker_allows",
    ("quarantine", "reset"): "tests/integration/test_health.py::"
                             "test_faults_on_a_whole_class_drain_no_more_than_the_breaker_allows",
    ("quarantine", "resume"): "tests/integration/test_health.py::"
                              "test_a_drain_by_an_admin_is_never_resumed",
    ("health", "periodic"): "tests/integration/test_health.py::"
                            "test_repaired_gpu03_resumes_itself_after_n_clean_periodic_checks",
    ("devcluster", "fault"): "tests/integration/test_health.py::"
                             "test_fault_on_gpu03_drains_it_in_the_prolog_and_the_job_runs_on_gpu04",
    ("devcluster", "status"): "tests/integration/test_devcluster.py::"
                              "test_status_json_shows_every_daemon_node_and_researcher",
    ("devcluster", "env"): "tests/integration/test_devcluster.py::test_env_prints_the_exports",
    ("submitd",): "tests/integration/test_admission.py::"
                  "test_sighup_reloads_config_without_dropping_requests",
    ("install",): "tests/integration/test_install_e2e.py::"
                  "test_install_and_uninstall_on_a_copy_of_the_etc_dir",
    ("uninstall",): "tests/integration/test_install_e2e.py::"
                    "test_install_and_uninstall_on_a_copy_of_the_etc_dir",
    ("db", "migrate"): "tests/integration/test_store_pg.py::test_migrate_twice_is_idempotent",
    ("sim", "sweep"): "tests/integration/test_sim_sweep_slurm.py::"
                      "test_a_sweep_runs_as_a_job_array_and_is_gathered",
}

#: Subcommands shown in the docs that neither run here nor have an integration test
#: running exactly them, with the reason.
PARSE_ONLY: dict[tuple[str, ...], str] = {
    ("submitd-ctl",): "needs a running submitd; the socket protocol is covered by "
                      "tests/unit/test_submitd_socket.py",
    ("health", "check"): "needs the reader's own nvidia-smi captures; the captures of "
                         "data/gpu are judged in tests/unit/test_health_captures.py",
    ("sim",): "a full week takes minutes; a one-hour run of the same options is in RUN",
    ("devcluster", "up"): "brings up the whole dev cluster (make demo / make test do)",
    ("devcluster", "down"): "stops the dev cluster",
    ("devcluster", "demo"): "runs on the dev cluster (make demo)",
}

#: sbatch and friends on the live cluster: which integration test submits that way.
LIVE_TOOLS: dict[str, str] = {
    "sbatch": "tests/integration/test_admission.py::"
              "test_sixteen_gpus_become_two_whole_nodes_under_one_leaf",
    "scontrol": "tests/integration/test_admission.py::"
                "test_time_min_becomes_the_recorded_protection_and_slurms_is_cleared",
    "sinfo": "tests/integration/test_health.py::"
             "test_fault_on_gpu03_drains_it_in_the_prolog_and_the_job_runs_on_gpu04",
}

# --------------------------------------------------------------------------- extraction


@dataclass(frozen=True)
class DocCommand:
    path: Path
    line: int
    text: str  # the logical line as written
    argv: tuple[str, ...]  # one simple command, wrappers stripped

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}: {self.text.strip()}"

    @property
    def tool(self) -> str:
        return os.path.basename(self.argv[0])

    @property
    def key(self) -> str:
        return " ".join(("slurm-ml" if self.tool == "slurm-ml" else self.argv[0],
                         *self.argv[1:]))


_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")


def _blocks(path: Path) -> Iterator[tuple[str, list[tuple[int, str]]]]:
    """(language, [(line number, text)]) of every fenced block."""
    lang, fence, body = "", "", []
    for no, line in enumerate(path.read_text().splitlines(), start=1):
        m = _FENCE.match(line)
        if fence:
            if m and m.group(2).startswith(fence) and not m.group(3):
                yield lang, body
                fence, body = "", []
            else:
                body.append((no, line))
        elif m:
            fence, lang, body = m.group(2), m.group(3).lower(), []


def _logical(lang: str, body: list[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """Command lines of a block, continuations joined."""
    pending: tuple[int, str] | None = None
    for no, raw in body:
        line = raw.rstrip()
        if pending is None:
            if lang in CONSOLE_LANGS:
                if not line.lstrip().startswith("$ "):
                    continue
                line = line.lstrip()[2:]
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            pending = (no, "")
        no0, text = pending
        if line.endswith("\\"):
            pending = (no0, text + line[:-1] + " ")
            continue
        pending = None
        yield no0, text + line
    if pending is not None:
        yield pending


_SEPARATORS = {";", "&&", "||", "|", "&"}
_REDIRECTS = {">", ">>", "<", ">&", "&>", "2>"}
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SUBST = re.compile(r"\$\(([^()]*)\)")


def _strip_wrappers(argv: list[str]) -> list[str]:
    while argv and _ASSIGN.match(argv[0]):
        argv = argv[1:]
    while argv:
        head = os.path.basename(argv[0])
        if head == "runuser" and "--" in argv:
            argv = argv[argv.index("--") + 1:]
        elif head == "sudo":
            argv = argv[3:] if len(argv) > 2 and argv[1] == "-u" else argv[1:]
        elif head in ("env", "time", "exec", "nohup"):
            argv = argv[1:]
            while argv and _ASSIGN.match(argv[0]):
                argv = argv[1:]
        elif head == "timeout" and len(argv) > 1:
            argv = argv[2:]
        else:
            break
    return argv


def _optional_forms(argv: list[str]) -> list[list[str]]:
    """``[--json]`` is usage syntax: the line without the optional words, and with them."""
    if not any(w.startswith("[") and w.endswith("]") and len(w) > 2 for w in argv):
        return [argv]
    bare = [w for w in argv if not (w.startswith("[") and w.endswith("]"))]
    full = [w[1:-1] if w.startswith("[") and w.endswith("]") else w for w in argv]
    return [bare, [x for w in full for x in w.split()]]


def split_commands(text: str) -> list[list[str]]:
    """The simple commands of one shell line (see the module docstring)."""
    lex = shlex.shlex(text, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    lex.commenters = "#"
    words = list(lex)
    out: list[list[str]] = []
    cur: list[str] = []
    skip = False
    for w in words:
        if skip:
            skip = False
            continue
        if w in _SEPARATORS:
            out.append(cur)
            cur = []
        elif w in _REDIRECTS:
            skip = True
        else:
            cur.append(w)
            for inner in _SUBST.findall(w):
                out.extend(split_commands(inner))
    out.append(cur)
    return [c for c in out if c]


def _command_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, command line) of every shell block, and of BENCHMARKS.md's tables."""
    for lang, body in _blocks(path):
        if lang in SHELL_LANGS | CONSOLE_LANGS:
            yield from _logical(lang, body)
    if path == BENCHMARKS:
        for no, line in enumerate(path.read_text().splitlines(), start=1):
            if line.startswith("|"):
                for m in _TABLE_COMMAND.finditer(line):
                    yield no, m.group(1)


def doc_commands() -> list[DocCommand]:
    found = []
    for path in DOC_FILES:
        for no, text in _command_lines(path):
            try:
                simple = split_commands(text)
            except ValueError as exc:  # unbalanced quotes
                found.append(DocCommand(path, no, text, ("<unparsable>", str(exc))))
                continue
            for argv in simple:
                for form in _optional_forms(_strip_wrappers(argv)):
                    if form:
                        found.append(DocCommand(path, no, text, tuple(form)))
    return found


COMMANDS = doc_commands()
SLURM_ML = [c for c in COMMANDS if c.tool == "slurm-ml"]


def _id(c: DocCommand) -> str:
    return f"{c.path.name}:{c.line}"


# --------------------------------------------------------------------------- the CLI


def resolve(args: list[str]) -> tuple[tuple[str, ...], click.Context]:
    """Parse ``slurm-ml ARGS`` like click would, down to the final command's context.

    Raises click.ClickException (usage errors) on a line the CLI would refuse.
    """
    ctx = main.make_context("slurm-ml", list(args))
    cmd: click.Command = main
    path: list[str] = []
    while isinstance(cmd, click.Group):
        protected = getattr(ctx, "_protected_args", None)
        if protected is None:
            protected = ctx.protected_args
        rest = [*protected, *ctx.args]
        if not rest and cmd.invoke_without_command:  # `slurm-ml sim --hours 1`: the group runs
            break
        if not rest:
            raise click.UsageError(f"{' '.join(['slurm-ml', *path])} needs a subcommand")
        name, sub, rest = cmd.resolve_command(ctx, rest)
        assert sub is not None and name is not None
        path.append(name)
        try:
            ctx = sub.make_context(name, rest, parent=ctx)
        except click.BadParameter as exc:
            if _missing_file(exc):
                return tuple(path), ctx
            raise
        cmd = sub
    return tuple(path), ctx


def _missing_file(exc: click.BadParameter) -> bool:
    param = exc.param
    return (param is not None and isinstance(param.type, click.Path)
            and "does not exist" in exc.format_message())


def subcommand(c: DocCommand) -> tuple[str, ...]:
    return resolve(list(c.argv[1:]))[0]


# --------------------------------------------------------------------------- tests


def test_the_docs_have_commands() -> None:
    names = {c.path.name for c in COMMANDS}
    for doc in ("README.md", "researcher.md", "operator.md", "architecture.md", "admin.md"):
        assert doc in names, f"no command block found in {doc}"
    assert len(SLURM_ML) >= 40


@pytest.mark.parametrize("cmd", SLURM_ML, ids=_id)
def test_slurm_ml_command_parses(cmd: DocCommand, monkeypatch: pytest.MonkeyPatch) -> None:
    # what the doc exported before this line (e.g. SLURM_ML_DSN) is in the reader's shell
    for c in COMMANDS:
        if c.path == cmd.path and c.line < cmd.line and c.tool == "export":
            for assignment in c.argv[1:]:
                name, _, value = assignment.partition("=")
                monkeypatch.setenv(name, value)
    try:
        resolve(list(cmd.argv[1:]))
    except click.exceptions.Exit:
        pass  # --help / --version
    except click.ClickException as exc:
        pytest.fail(f"{cmd.where}: {exc.format_message()}")


@pytest.mark.parametrize("cmd", SLURM_ML, ids=_id)
def test_slurm_ml_command_is_covered(cmd: DocCommand) -> None:
    if cmd.key in RUN:
        return
    try:
        path = subcommand(cmd)
    except click.ClickException:
        return  # reported by test_slurm_ml_command_parses
    for n in range(len(path), 0, -1):
        if path[:n] in LIVE or path[:n] in PARSE_ONLY:
            return
    pytest.fail(f"{cmd.where}: `slurm-ml {' '.join(path)}` is neither run here (RUN), "
                f"nor run by a named integration test (LIVE), nor listed in PARSE_ONLY")


@pytest.mark.parametrize("cmd", [c for c in COMMANDS if c.tool != "slurm-ml"], ids=_id)
def test_other_command_is_known(cmd: DocCommand) -> None:
    tool = cmd.tool
    if tool == "<unparsable>":
        pytest.fail(f"{cmd.where}: {cmd.argv[1]}")
    if tool == "sbatch":
        try:
            parse_sbatch(list(cmd.argv[1:]), None, user="alice")
        except SbatchParseError as exc:
            pytest.fail(f"{cmd.where}: sbatch would refuse this: {exc}")
    elif tool == "make":
        targets = set(re.findall(r"^([\w.-]+):", (REPO / "Makefile").read_text(), re.M))
        for t in cmd.argv[1:]:
            if not t.startswith("-") and "=" not in t:
                assert t in targets, f"{cmd.where}: no make target {t!r}"
    elif tool == "python3" and len(cmd.argv) > 1 and cmd.argv[1].startswith("benchmarks/"):
        script = REPO / cmd.argv[1]
        assert script.is_file(), f"{cmd.where}: no script {cmd.argv[1]}"
        source = script.read_text()
        for word in cmd.argv[2:]:
            option = word.split("=", 1)[0]
            if option.startswith("--"):
                assert f'"{option}"' in source, f"{cmd.where}: {script.name} has no {option}"
    else:
        assert tool in ALLOWED_TOOLS, f"{cmd.where}: {tool!r} is not in ALLOWED_TOOLS"


def test_every_run_entry_is_in_a_doc() -> None:
    keys = {c.key for c in SLURM_ML}
    stale = sorted(k for k in RUN if k not in keys)
    assert not stale, f"RUN entries no doc shows (update the table): {stale}"


def _test_exists(node_id: str) -> bool:
    file, _, name = node_id.partition("::")
    path = REPO / file
    return path.is_file() and re.search(rf"^\s*def {re.escape(name)}\(", path.read_text(),
                                        re.M) is not None


@pytest.mark.parametrize("node_id", sorted({*LIVE.values(), *LIVE_TOOLS.values()}))
def test_live_mapping_names_a_real_integration_test(node_id: str) -> None:
    assert _test_exists(node_id), f"{node_id} does not exist"


def _swap(argv: list[str], scratch: Path, conf_dir: Path | None) -> list[str]:
    swaps = {"/etc/slurm-ml/slurm-ml.yaml": str(DEFAULT_CONFIG)}
    swaps |= {a: str(REPO) + a.removeprefix("/opt/slurm-ml/src") for a in argv
              if a.startswith("/opt/slurm-ml/src/")}
    if conf_dir is not None:
        swaps |= {"/etc/slurm": str(conf_dir), "/etc/systemd/system": str(scratch / "systemd")}
    out = [swaps.get(a, a) for a in argv]
    if conf_dir is not None and "--systemd-dir" not in out and "--no-systemd" not in out:
        out += ["--systemd-dir", str(scratch / "systemd")]
    return out


@pytest.mark.parametrize("key", sorted(RUN))
def test_run_offline(key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = RUN[key]
    cmd = next((c for c in SLURM_ML if c.key == key), None)
    if cmd is None:
        pytest.skip("not in any doc (test_every_run_entry_is_in_a_doc fails)")
    scratch = tmp_path / "cwd"
    scratch.mkdir()
    (scratch / "examples").symlink_to(REPO / "examples")
    for name, text in run.files.items():
        (scratch / name).write_text(text)
    conf_dir = make_conf_dir(tmp_path) if run.conf_dir else None
    monkeypatch.chdir(scratch)
    args = _swap(list(cmd.argv[1:]), scratch, conf_dir)
    res = CliRunner().invoke(main, args, env={"SLURM_ML_DSN": None, "SLURM_ML_CONFIG": None})
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    assert res.exit_code == run.exit_code, (
        f"{cmd.where}: exit {res.exit_code}, expected {run.exit_code}\n{res.output}")
