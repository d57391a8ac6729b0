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
import errno
import os
import re
import secrets
import stat
import tempfile
from pathlib import Path

__all__ = ["DEFAULT_KEY_FILE", "KeyFileError", "load_or_create_key", "socket_dir_problem"]

#: Where install points submitd and the shim: systemd's StateDirectory of the submitd
#: unit (mode 0750, submitd's user), not the socket's RuntimeDirectory.
DEFAULT_KEY_FILE = Path("/var/lib/slurm-ml/submitd.key")
_KEY = re.compile(r"[0-9a-f]{64}")


class KeyFileError(OSError):
    """The key file cannot be read, made, or trusted; the message says which and why."""


def _owners(user_uid: int | None) -> frozenset[int]:
    """Who may own what submitd trusts: root, and submitd's user (this process's, or
    ``user_uid`` when someone else, such as ``config check``, judges for it)."""
    return frozenset({0, os.geteuid() if user_uid is None else user_uid})


def _groups(user_gid: int | None) -> frozenset[int]:
    """Groups that may write the socket's directory: root's, and submitd's own (the
    units' RuntimeDirectory is SlurmUser's group)."""
    return frozenset({0, os.getegid() if user_gid is None else user_gid})


def _new_key(path: Path) -> None:
    """Write a fresh key beside ``path`` and link it into place only if none is there:
    a crash leaves no half-written key, and two starts at once keep one key."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            os.fchmod(fh.fileno(), 0o640)
            fh.write(secrets.token_hex(32) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def load_or_create_key(path: Path) -> str:
    """submitd's reply key from ``path``, made there (64 hex digits, mode 0640) if absent.

    A key is refused when another user owns the file, when anyone but its owner may write
    it, when any user may read it (a key others can read proves nothing), or when the
    path is a symbolic link. One descriptor is checked and read, so the file judged is
    the file read.
    """
    try:
        if not path.exists() and not path.is_symlink():
            _new_key(path)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise KeyFileError(f"{path}: a symbolic link; submitd's reply key must be the "
                               f"file itself") from None
        raise KeyFileError(f"{path}: cannot read or create submitd's reply key: "
                           f"{exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise KeyFileError(f"{path}: submitd's reply key is not a regular file")
        text = fh.read(256).decode("ascii", errors="replace").strip()
    if st.st_uid not in _owners(None):
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


def socket_dir_problem(socket_path: Path, *, user_uid: int | None = None,
                       user_gid: int | None = None) -> str | None:
    """What lets someone other than root or submitd's user take over ``socket_path``: a
    directory on its way that another user owns or that others may write (the sticky bit
    does not help in the socket's own directory: after submitd stops, the name is free
    for anyone to bind), or the socket's directory writable by a group other than root's
    or submitd's. None when there is nothing; a directory that does not exist yet is
    judged when it does. ``user_uid``/``user_gid``: submitd's, when this process is not
    submitd (default: this process's)."""
    owners, groups = _owners(user_uid), _groups(user_gid)
    directory = socket_path.parent
    for d in (directory, *directory.parents):
        with contextlib.suppress(FileNotFoundError):
            st = os.stat(d)
            mode = st.st_mode & 0o7777
            if st.st_uid not in owners:
                return (f"{d} (on the way to {socket_path}) is owned by uid {st.st_uid}, "
                        f"not root or submitd's user, who could replace the socket")
            if d == directory and mode & 0o002:
                return (f"{d} is writable by every user (mode {mode:04o}): whoever binds "
                        f"{socket_path.name} there while submitd is stopped answers the "
                        f"job_submit shim; use a directory only root or submitd's user can "
                        f"write (install: /run/slurm-ml, mode 0750)")
            if d == directory and mode & 0o020 and st.st_gid not in groups:
                return (f"{d} is writable by group {st.st_gid} (mode {mode:04o}), not root's "
                        f"or submitd's: its members could bind {socket_path.name} there "
                        f"while submitd is stopped")
            if mode & 0o002 and not mode & stat.S_ISVTX:
                return (f"{d} (on the way to {socket_path}) is writable by every user "
                        f"(mode {mode:04o}), who could replace the path")
    return None
