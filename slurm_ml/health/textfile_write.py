"""Writing a node's textfile where node_exporter reads it: whole, readable, no leftovers.

``prometheus_client.write_to_textfile`` (checked in 0.26) writes the registry to
``<path>.<pid>.<thread id>`` in the same directory and renames it over ``<path>``, so a
reader sees the old file or the new one, never a part of one; the temporary name ends in
digits, so node_exporter, which reads ``*.prom`` only, never reads it. It removes the
temporary file when the write raises. Around it this module adds what it lacks:

* **leftovers**: a writer killed mid-write (SIGKILL, the hook wrapper's ``timeout``)
  leaves its temporary file behind, and nothing else would ever remove it. Before each
  write, the temporary files of this node's textfile whose process is gone are removed.
  A live one is another writer's (an operator's run beside HealthCheckProgram's).
* **durability**: it does not fsync. After the rename the file and its directory are
  fsynced, so the file a finished check reports on is the one a reboot finds. (A crash
  between the rename and the fsync may still leave it empty on some file systems: the
  next run rewrites it.)
* **permissions**: node_exporter runs as its own user; the file is created under umask
  022, whatever umask slurmd handed the hook, so that it can read it from the start.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from prometheus_client import CollectorRegistry, write_to_textfile

__all__ = ["PREFIX", "SUFFIX", "textfile_path", "write_textfile"]

PREFIX = "slurm-ml-"
#: node_exporter's textfile collector reads only files named ``*.prom``.
SUFFIX = ".prom"
#: Group and others may read, nobody else may write: node_exporter's user must read it.
_UMASK = 0o022
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def textfile_path(directory: Path, node: str) -> Path:
    """``<directory>/slurm-ml-<node>.prom``; a character a file name should not carry
    becomes ``_`` (the ``node`` label inside keeps the name as Slurm spells it)."""
    return directory / f"{PREFIX}{_UNSAFE.sub('_', node) or '_'}{SUFFIX}"


def write_textfile(directory: Path, node: str, registry: CollectorRegistry) -> Path:
    """Write ``registry`` as ``node``'s textfile in ``directory``; the path written.
    ``OSError`` when it cannot be written (the old file, if any, stays as it was)."""
    path = textfile_path(directory, node)
    remove_leftovers(path)
    old = os.umask(_UMASK)  # the hook runs one thread: nothing else creates files now
    try:
        write_to_textfile(str(path), registry)
    finally:
        os.umask(old)
    _fsync(path, os.O_RDONLY)
    _fsync(directory, os.O_RDONLY | os.O_DIRECTORY)
    return path


def remove_leftovers(path: Path) -> list[Path]:
    """Remove the temporary files write_to_textfile left for ``path`` in processes that
    are gone; the paths removed."""
    temp = re.compile(re.escape(path.name) + r"\.(\d+)\.\d+")
    removed = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(path.parent):
            m = temp.fullmatch(entry.name)
            if m is None or _alive(int(m.group(1))):
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # gone, or no pid at all
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def _fsync(path: Path, flags: int) -> None:
    fd = os.open(path, flags | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
