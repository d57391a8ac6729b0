"""Carry out a :class:`~.plan.ChangeSet`: the only module of install that writes files.

Each file is written to a temporary file in its directory, given its mode (and, for a file
that existed, its owner) and renamed over the old one, so a crash never leaves half a
slurm.conf. Backups are copies with mode and times (``shutil.copy2``) and are renamed back
on uninstall, so the directory ends byte-identical, modes included.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from slurm_ml.deploy.errors import FileFailed
from slurm_ml.deploy.manifest import MANIFEST_NAME
from slurm_ml.deploy.plan import Action, ChangeSet, Kind

Say = Callable[[str], None]
MANIFEST_MODE = 0o600


def write_atomic(path: Path, text: str, mode: int | None) -> None:
    """Replace ``path`` with ``text``; ``mode`` None keeps the old file's mode and owner."""
    old = None
    with contextlib.suppress(FileNotFoundError):
        old = path.stat()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        final_mode = mode if mode is not None else (old.st_mode & 0o7777 if old else 0o644)
        os.chmod(tmp, final_mode)
        if old is not None and os.geteuid() == 0:
            os.chown(tmp, old.st_uid, old.st_gid)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _apply_one(a: Action) -> None:
    if a.kind is Kind.MKDIR:
        a.path.mkdir(mode=0o755, exist_ok=True)
    elif a.kind is Kind.RMDIR:
        with contextlib.suppress(FileNotFoundError, OSError):
            a.path.rmdir()  # only when empty
    elif a.kind in (Kind.CREATE, Kind.UPDATE):
        assert a.after is not None
        if a.backup is not None and not a.backup.exists():
            shutil.copy2(a.path, a.backup)  # content, mode and times
            if os.geteuid() == 0:  # and owner, so uninstall puts back exactly that file
                st = a.path.stat()
                os.chown(a.backup, st.st_uid, st.st_gid)
        write_atomic(a.path, a.after, a.mode)
    elif a.kind is Kind.EDIT:
        assert a.after is not None
        write_atomic(a.path, a.after, None)  # the admin's file: keep its mode and owner
    elif a.kind is Kind.DELETE:
        a.path.unlink(missing_ok=True)
    elif a.kind is Kind.RESTORE:
        assert a.restore_from is not None
        os.replace(a.restore_from, a.path)


def apply(changes: ChangeSet, conf_dir: Path, say: Say) -> None:
    """Apply every action in order. An install's manifest is written first, so a run cut
    short (disk full, a crash) leaves every file it wrote on record: running install
    again finishes it and uninstall removes them (a record also accepts the content it
    replaced, see ``FileRecord.previous``). Uninstall removes the manifest last. Mode
    0600: it holds the hash of slurm-ml.env, whose DSN carries a password."""
    manifest = conf_dir / MANIFEST_NAME
    if changes.manifest is not None and (changes.manifest_changed or not manifest.exists()):
        try:
            write_atomic(manifest, changes.manifest.to_json(), MANIFEST_MODE)
        except OSError as exc:
            raise FileFailed(f"cannot write {manifest}: {exc.strerror or exc}; nothing was "
                             f"changed (run as root, or check the disk)") from exc
    for n, a in enumerate(changes.actions):
        say(f"  {a.kind.value:<7} {a.path}" + (f"  ({a.reason})" if a.reason else ""))
        try:
            _apply_one(a)
        except OSError as exc:
            raise FileFailed(
                f"cannot {a.kind.value} {a.path}: {exc.strerror or exc}; {n} of "
                f"{len(changes.actions)} changes were made before it and are on record. "
                f"Fix the cause (permissions, disk space) and run the command again to "
                f"finish, or `slurm-ml uninstall` to take them out") from exc
    if changes.manifest is None:
        try:
            manifest.unlink(missing_ok=True)
        except OSError as exc:
            raise FileFailed(f"every change was made, but {manifest} could not be removed: "
                             f"{exc.strerror or exc}; remove it by hand") from exc
