"""Why the shim can trust the process that answers on submitd's socket.

job_submit.lua applies whatever the process on the socket path answers: a QOS, an
AdminComment record, a rewritten GPU request. Two things keep that process submitd:

- **The socket's directory.** Only root or submitd's own user may write it, so no
  researcher can bind the path while submitd is stopped. :func:`socket_dir_problem` says
  what is wrong with a directory; submitd refuses to listen in one, and ``slurm-ml
  config check`` reports it.
- **A key only SlurmUser and submitd can read.** submitd puts it in every reply; the shim
  reads the same file and drops (fails open on) any reply without it. It guards against
  a socket directory that was opened up after all (a copied unit, a hand-made path). The
  key never travels towards submitd, so a squatter who receives the shim's requests still
  cannot answer them. It lives apart from the socket (install: ``/var/lib/slurm-ml``).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
from pathlib import Path

__all__ = ["DEFAULT_KEY_FILE", "KeyFileError", "load_or_create_key", "socket_dir_problem"]

#: Where install points submitd and the shim: systemd's StateDirectory of the submitd
#: unit (mode 0750, submitd's user), not the socket's RuntimeDirectory.
DEFAULT_KEY_FILE = Path("/var/lib/slurm-ml/submitd.key")
_KEY = re.compile(r"[0-9a-f]{64}")


class KeyFileError(OSError):
    """The key file cannot be read, made, or trusted; the message says which and why."""


def _owner_ok(st: os.stat_result) -> bool:
    return st.st_uid in (0, os.geteuid())


def load_or_create_key(path: Path) -> str:
    """submitd's reply key from ``path``, made there (64 hex digits, mode 0640) if absent.

    A key is refused when another user owns the file, when anyone but its owner may write
    it, or when any user may read it: a key others can read proves nothing.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
    except FileExistsError:
        pass
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot create submitd's reply key: "
                           f"{exc.strerror or exc}") from None
    else:
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
    try:
        st = os.stat(path)
        text = path.read_text(encoding="ascii", errors="replace").strip()
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot read submitd's reply key: "
                           f"{exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise KeyFileError(f"{path}: submitd's reply key is not a regular file")
    if not _owner_ok(st):
        raise KeyFileError(f"{path}: owned by uid {st.st_uid}, not root or submitd's user; "
                           f"refusing a key someone else controls")
    if st.st_mode & 0o022:
        raise KeyFileError(f"{path}: mode {st.st_mode & 0o777:04o} lets others write "
                           f"submitd's reply key; chmod 0640 it")
    if st.st_mode & 0o004:
        raise KeyFileError(f"{path}: mode {st.st_mode & 0o777:04o} lets every user read "
                           f"submitd's reply key; chmod 0640 it")
    if not _KEY.fullmatch(text):
        raise KeyFileError(f"{path}: not a submitd reply key (64 hex digits); remove it "
                           f"and submitd makes a new one")
    return text


def socket_dir_problem(socket_path: Path) -> str | None:
    """What lets someone other than root or submitd's user take over ``socket_path``: a
    directory on its way that another user owns or that others may write (the sticky bit
    does not help: after submitd stops, the name is free for anyone to bind). None when
    there is nothing; a directory that does not exist yet is judged when it does."""
    directory = socket_path.parent
    for d in (directory, *directory.parents):
        with contextlib.suppress(FileNotFoundError):
            st = os.stat(d)
            if not _owner_ok(st):
                return (f"{d} (on the way to {socket_path}) is owned by uid {st.st_uid}, "
                        f"not root or submitd's user, who could replace the socket")
            if st.st_mode & 0o002 and d == directory:
                return (f"{d} is writable by every user (mode {st.st_mode & 0o7777:04o}): "
                        f"whoever binds {socket_path.name} there while submitd is stopped "
                        f"answers the job_submit shim; use a directory only root or "
                        f"submitd's user can write (install: /run/slurm-ml, mode 0750)")
            if st.st_mode & 0o002 and not st.st_mode & stat.S_ISVTX:
                return (f"{d} (on the way to {socket_path}) is writable by every user "
                        f"(mode {st.st_mode & 0o7777:04o}), who could replace the path")
    return None
