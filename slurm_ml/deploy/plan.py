"""Plan install and uninstall as a :class:`ChangeSet` (pure: no file is read or written).

Inputs are the rendered files, the current state of every path involved and the manifest;
the output says what would be created, updated, edited, deleted or restored, what is
refused (a file slurm-ml did not write, one changed since it wrote it, a conflicting
setting) and the manifest afterwards. ``--force`` turns refusals into actions that keep
a backup of any file slurm-ml did not write, which uninstall puts back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from slurm_ml.deploy.manifest import FileRecord, Manifest, key_of, path_of, sha256
from slurm_ml.deploy.slurmconf import ConfEdits, Conflict, revert_edits

BACKUP_SUFFIX = ".slurm-ml-orig"


class Kind(StrEnum):
    CREATE = "create"
    UPDATE = "update"
    EDIT = "edit"  # slurm.conf: the admin's file, changed in place
    DELETE = "delete"
    RESTORE = "restore"  # put back the file install had set aside
    MKDIR = "mkdir"
    RMDIR = "rmdir"


@dataclass(frozen=True, slots=True)
class Current:
    """A path as it is now (``data`` None: it does not exist)."""

    data: bytes | None = None
    mode: int | None = None

    @property
    def text(self) -> str | None:
        return None if self.data is None else self.data.decode("utf-8", errors="replace")


@dataclass(frozen=True, slots=True)
class Action:
    kind: Kind
    path: Path
    before: str | None = None  # for the diff
    after: str | None = None  # what is written (None: nothing)
    mode: int | None = None
    backup: Path | None = None  # CREATE/UPDATE: set the existing file aside here first
    restore_from: Path | None = None  # RESTORE: the backup to move back
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ChangeSet:
    actions: tuple[Action, ...] = ()
    refusals: tuple[str, ...] = ()  # why it cannot go ahead without --force
    forced: tuple[str, ...] = ()  # refusals --force overrode
    notes: tuple[str, ...] = ()
    manifest: Manifest | None = None  # afterwards (None: remove it)
    manifest_changed: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.actions) or self.manifest_changed


@dataclass(frozen=True, slots=True)
class ConfPlan:
    """slurm.conf before and after install's edits, and what the edits are."""

    path: Path
    before: str
    after: str
    edits: ConfEdits
    conflicts: tuple[Conflict, ...] = ()
    stale: tuple[str, ...] = ()  # lines of the last install's edits no longer in slurm.conf


@dataclass(slots=True)
class _Builder:
    force: bool
    actions: list[Action] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    forced: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def refuse(self, message: str) -> bool:
        """Record a refusal; True when --force lets it go ahead."""
        (self.forced if self.force else self.refusals).append(message)
        return self.force


def _mode(cur: Current) -> str:
    return "?" if cur.mode is None else f"{cur.mode:04o}"


def plan_install(
    wanted: Sequence[tuple[Path, str, int]],
    conf: ConfPlan,
    current: Mapping[Path, Current],
    manifest: Manifest | None,
    conf_dir: Path,
    *,
    force: bool = False,
    new_dirs: Sequence[Path] = (),
    config: str = "",
) -> ChangeSet:
    """What install changes. ``wanted``: (path, text, mode) of every file it writes;
    ``current`` must hold every wanted path, every manifest path and their backups."""
    old = manifest or Manifest()
    b = _Builder(force)
    records: dict[str, FileRecord] = {}
    for d in new_dirs:
        b.actions.append(Action(Kind.MKDIR, d, reason="missing"))
    for path, text, mode in wanted:
        key = key_of(path, conf_dir)
        cur = current.get(path, Current())
        rec = old.files.get(key)
        data = text.encode()
        backup = rec.backup if rec else ""
        if cur.data is None:
            reason = "recreated (it was deleted since install)" if rec else "new"
            b.actions.append(Action(Kind.CREATE, path, None, text, mode, reason=reason))
        elif rec is None:
            bpath = Path(str(path) + BACKUP_SUFFIX)
            msg = (f"{path} exists and was not written by slurm-ml install (not in its "
                   f"manifest)")
            if current.get(bpath, Current()).data is not None:
                b.refusals.append(f"{msg}, and {bpath} exists too: move one of them away")
                continue
            if not b.refuse(msg + "; --force keeps it as " + bpath.name
                            + " and uninstall restores it"):
                continue
            backup = key_of(bpath, conf_dir)
            b.actions.append(Action(Kind.UPDATE, path, cur.text, text, mode, backup=bpath,
                                    reason="replaces a file slurm-ml did not write"))
        elif not rec.written_by_install(sha256(cur.data)):
            if not b.refuse(f"{path} was changed since slurm-ml installed it (sha256 differs "
                            f"from the manifest)"):
                records[key] = rec
                continue
            b.actions.append(Action(Kind.UPDATE, path, cur.text, text, mode,
                                    reason="overwrites local changes"))
        elif cur.data != data or cur.mode != mode:
            reason = "changed" if cur.data != data else f"mode {_mode(cur)} -> {mode:04o}"
            b.actions.append(Action(Kind.UPDATE, path, cur.text, text, mode, reason=reason))
        digest = sha256(data)
        previous = (rec.previous if rec.sha256 == digest else rec.sha256) if rec else ""
        records[key] = FileRecord(digest, mode, backup, previous)
    wanted_keys = {key_of(p, conf_dir) for p, _, _ in wanted}
    for key, rec in old.files.items():
        if key not in wanted_keys:
            _plan_removal(b, key, rec, current, conf_dir=conf_dir, keep=records)
    for c in conf.conflicts:
        b.refuse("conflicting setting: " + c.describe())
    for line in conf.stale:
        b.refuse(f"{conf.path}: a line install edited was changed locally since, so "
                 f"uninstall could no longer restore it: {line} (put it back, or --force "
                 "to forget that edit)")
    if conf.after != conf.before:
        b.actions.append(Action(Kind.EDIT, conf.path, conf.before, conf.after,
                                reason="Include line and partition TRESBillingWeights"))
    new = Manifest(records, conf.edits, tuple(sorted({*old.dirs, *map(str, new_dirs)})),
                   config)
    return _finish(b, new, manifest)


def _plan_removal(b: _Builder, key: str, rec: FileRecord, current: Mapping[Path, Current],
                  *, conf_dir: Path, keep: dict[str, FileRecord]) -> None:
    path = path_of(key, conf_dir)
    cur = current.get(path, Current())
    bpath = path_of(rec.backup, conf_dir) if rec.backup else None
    has_backup = bpath is not None and current.get(bpath, Current()).data is not None
    if cur.data is not None and not rec.written_by_install(sha256(cur.data)) and not b.refuse(
            f"{path} was changed since slurm-ml installed it: not removed"):
        keep[key] = rec
        return
    if has_backup:
        assert bpath is not None
        b.actions.append(Action(Kind.RESTORE, path, cur.text, None, restore_from=bpath,
                                reason=f"put back the file it replaced ({bpath.name})"))
    elif cur.data is not None:
        b.actions.append(Action(Kind.DELETE, path, cur.text, None, reason="written by install"))
    else:
        b.notes.append(f"{path} is already gone")


def plan_uninstall(
    manifest: Manifest,
    current: Mapping[Path, Current],
    conf_dir: Path,
    slurm_conf: Path,
    *,
    force: bool = False,
) -> ChangeSet:
    """Remove what the manifest says install wrote; undo its slurm.conf edits."""
    b = _Builder(force)
    keep: dict[str, FileRecord] = {}
    for key, rec in sorted(manifest.files.items()):
        _plan_removal(b, key, rec, current, conf_dir=conf_dir, keep=keep)
    conf_cur = current.get(slurm_conf, Current())
    edits = manifest.slurm_conf
    if edits is not None and conf_cur.text is not None:
        reverted = revert_edits(conf_cur.text, edits)
        for line in reverted.not_found:
            b.refuse(f"{slurm_conf}: the line install added or edited is no longer there "
                     f"(changed locally), left as it is: {line}")
        if reverted.text != conf_cur.text:
            b.actions.append(Action(Kind.EDIT, slurm_conf, conf_cur.text, reverted.text,
                                    reason="remove the Include line, restore partition lines"))
    elif edits is not None:
        b.notes.append(f"{slurm_conf} is gone: nothing to undo there")
    for d in sorted(manifest.dirs, reverse=True):
        b.actions.append(Action(Kind.RMDIR, Path(d), reason="created by install (if empty)"))
    if keep:
        # Refused (no --force): nothing happens, the manifest stays.
        return _finish(b, manifest, manifest)
    return _finish(b, None, manifest)


def _finish(b: _Builder, new: Manifest | None, old: Manifest | None) -> ChangeSet:
    if b.refusals:
        return ChangeSet((), tuple(b.refusals), tuple(b.forced), tuple(b.notes), old, False)
    changed = (new is None) != (old is None) or (
        new is not None and old is not None and new.to_json() != old.to_json())
    return ChangeSet(tuple(b.actions), (), tuple(b.forced), tuple(b.notes), new, changed)
