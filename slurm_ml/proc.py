"""The one place slurm-ml starts a subprocess.

Every external command (Slurm CLIs, sacctmgr, pg_ctl, apt-get, ...) goes
through :func:`run`, so that each has a timeout, is killed with its whole
process group when it overruns, and fails with a typed error that names the
command instead of a bare ``CalledProcessError``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 30.0


class CommandError(Exception):
    """Base class for every failure of an external command."""

    def __init__(self, argv: Sequence[str], message: str) -> None:
        self.argv = tuple(argv)
        super().__init__(f"{_show(argv)}: {message}")


class CommandNotFound(CommandError):
    """The program does not exist or is not executable."""


class CommandTimeout(CommandError):
    """The program ran past its timeout; its process group was killed."""

    def __init__(self, argv: Sequence[str], timeout_s: float) -> None:
        self.timeout_s = timeout_s
        super().__init__(argv, f"timed out after {timeout_s:g}s (process group killed)")


class CommandFailed(CommandError):
    """The program exited non-zero; carries its exit code and stderr."""

    def __init__(self, argv: Sequence[str], returncode: int, stdout: str, stderr: str) -> None:
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        detail = stderr.strip() or stdout.strip() or "(no output)"
        super().__init__(argv, f"exit {returncode}: {detail}")


@dataclass(frozen=True, slots=True)
class Result:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    elapsed_s: float


def _show(argv: Sequence[str]) -> str:
    return " ".join(argv[:6]) + (" ..." if len(argv) > 6 else "")


def run(
    argv: Sequence[str],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    input_text: str | None = None,
    cwd: str | None = None,
) -> Result:
    """Run ``argv`` (never through a shell) and return its output.

    The child gets its own session so that a timeout kills everything it
    spawned. ``env`` entries are added to the current environment.
    """
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=full_env,
            cwd=cwd,
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        raise CommandNotFound(argv, "command not found") from exc
    except PermissionError as exc:
        raise CommandNotFound(argv, f"not executable: {exc}") from exc
    try:
        out, err = proc.communicate(input=input_text, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        _kill_group(proc)
        raise CommandTimeout(argv, timeout_s) from exc
    elapsed = time.monotonic() - start
    log.debug("cmd=%r rc=%d elapsed_s=%.3f", _show(argv), proc.returncode, elapsed)
    if check and proc.returncode != 0:
        raise CommandFailed(argv, proc.returncode, out, err)
    return Result(tuple(argv), proc.returncode, out, err, elapsed)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    try:
        proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover - a zombie that ignores SIGKILL
        log.warning("cmd=%r pid=%d did not exit after SIGKILL", proc.args, proc.pid)


def spawn_daemon(
    argv: Sequence[str], *, log_path: str, env: Mapping[str, str] | None = None
) -> int:
    """Start a long-running process detached from us and return its pid.

    Used only by the dev cluster for daemons that stay in the foreground
    (slurmd -D, munged -F, ...). Output goes to ``log_path``; the child gets its own
    session. ``os.posix_spawnp`` rather than Popen: we never wait for a daemon, and a
    Popen object dropped while its child runs is a ResourceWarning.
    """
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    try:
        # Python ignores SIGPIPE and SIGXFSZ; Popen gives a child the defaults back.
        return os.posix_spawnp(argv[0], list(argv), full_env, file_actions=actions,
                               setsid=True, setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
    except FileNotFoundError as exc:
        raise CommandNotFound(argv, "command not found") from exc
