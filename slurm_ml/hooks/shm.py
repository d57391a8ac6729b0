"""Remove a user's leftovers from /dev/shm without ever following a symlink.

Runs as root in the epilog, over a directory every user can write: every step works on
directory file descriptors (``dir_fd``, ``O_NOFOLLOW``) so that a symlink planted by the
user (``/dev/shm/x -> /etc``) or swapped in mid-walk is removed as a link, never entered.
Only entries owned by ``uid`` are touched; a directory is entered only if it is owned by
``uid`` and really a directory, and removed only once empty. uid 0 is refused.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ShmResult", "clean_shm"]

_MAX_DEPTH = 32


@dataclass(frozen=True, slots=True)
class ShmResult:
    """``ran``: the cleanup ran (else ``why`` says why not); paths as text."""

    ran: bool
    why: str = ""
    removed: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()


@dataclass
class _Walk:
    uid: int
    removed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def clean(self, dfd: int, path: str, depth: int) -> bool:
        """Remove the uid's entries under the open directory ``dfd``; True if it is empty."""
        kept = 0
        with os.scandir(dfd) as it:
            names = [e.name for e in it]
        for name in names:
            where = f"{path}/{name}"
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError as exc:
                self.errors.append(f"{where}: {exc.strerror or exc}")
                kept += 1
                continue
            if st.st_uid != self.uid:
                kept += 1
            elif stat.S_ISDIR(st.st_mode):
                kept += not self._clean_dir(dfd, name, where, st, depth)
            else:  # file, symlink (the link itself), fifo, socket
                kept += not self._unlink(dfd, name, where, rmdir=False)
        return kept == 0

    def _clean_dir(self, dfd: int, name: str, where: str, st: os.stat_result,
                   depth: int) -> bool:
        if depth >= _MAX_DEPTH:
            self.errors.append(f"{where}: deeper than {_MAX_DEPTH} levels, left alone")
            return False
        try:
            cfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dfd)
        except OSError as exc:  # ELOOP/ENOTDIR: swapped for a symlink or a file meanwhile
            self.errors.append(f"{where}: {exc.strerror or exc}")
            return False
        try:
            now = os.fstat(cfd)
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                self.errors.append(f"{where}: changed while being cleaned, left alone")
                return False
            empty = self.clean(cfd, where, depth + 1)
        finally:
            os.close(cfd)
        return empty and self._unlink(dfd, name, where, rmdir=True)

    def _unlink(self, dfd: int, name: str, where: str, *, rmdir: bool) -> bool:
        try:
            if rmdir:
                os.rmdir(name, dir_fd=dfd)
            else:
                os.unlink(name, dir_fd=dfd)
        except FileNotFoundError:
            return True
        except OSError as exc:
            self.errors.append(f"{where}: {exc.strerror or exc}")
            return False
        self.removed.append(where)
        return True


def clean_shm(shm_dir: Path, uid: int) -> ShmResult:
    """Remove what ``uid`` owns in ``shm_dir`` (the directory itself stays).

    The caller decides whether to run at all (the user has no other job on the node)."""
    if uid == 0:
        return ShmResult(False, "refusing to clean root's files")
    try:
        dfd = os.open(shm_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        return ShmResult(False, f"{shm_dir}: {exc.strerror or exc}")
    walk = _Walk(uid)
    try:
        walk.clean(dfd, str(shm_dir).rstrip("/") or "/", 0)
    except OSError as exc:
        walk.errors.append(f"{shm_dir}: {exc.strerror or exc}")
    finally:
        os.close(dfd)
    return ShmResult(True, "", tuple(walk.removed), tuple(walk.errors))
