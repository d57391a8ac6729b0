"""What install/uninstall did or would do, for people (unified diffs) and for --json (pure)."""

from __future__ import annotations

import difflib
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from slurm_ml.deploy.plan import Action, ChangeSet, Kind

_DSN_PASSWORD = re.compile(r"(://[^:/@\s'\"]+:)[^@\s'\"]+@")


def redact(text: str) -> str:
    """Passwords in DSNs (``scheme://user:secret@host``) replaced by ``***``: diffs of
    slurm-ml.env end up in terminals and CI logs."""
    return _DSN_PASSWORD.sub(r"\1***@", text)


def unified(a: Action) -> str:
    """The action as a unified diff (a mode-only change as a one-line note), with DSN
    passwords redacted."""
    return redact(_unified(a))


def _unified(a: Action) -> str:
    if a.kind in (Kind.MKDIR, Kind.RMDIR):
        return f"{a.kind.value} {a.path}\n"
    before = (a.before or "").splitlines(keepends=True)
    after = (a.after or "").splitlines(keepends=True)
    if a.kind is Kind.RESTORE:
        return f"--- {a.path}\n+++ {a.path}\n(restored from {a.restore_from})\n"
    old = "/dev/null" if a.before is None else str(a.path)
    new = "/dev/null" if a.after is None else str(a.path)
    text = "".join(difflib.unified_diff(before, after, old, new))
    if not text:
        return f"mode {a.path}: {a.reason}\n"
    return text if text.endswith("\n") else text + "\n\\ No newline at end of file\n"


@dataclass(frozen=True, slots=True)
class AccountsReport:
    """The sacctmgr step: commands planned (and run, unless a dry run)."""

    skipped: bool = False
    reachable: bool = True
    error: str = ""
    commands: tuple[tuple[str, ...], ...] = ()
    applied: bool = False
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"skipped": self.skipped, "reachable": self.reachable, "error": self.error,
                "commands": [shlex.join(c) for c in self.commands], "applied": self.applied,
                "note": self.note}


@dataclass(frozen=True, slots=True)
class Outcome:
    """The result of one install or uninstall run."""

    command: str  # "install" | "uninstall"
    changes: ChangeSet
    dry_run: bool
    applied: bool
    accounts: AccountsReport = field(default_factory=AccountsReport)
    next_steps: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return self.changes.changed or (bool(self.accounts.commands)
                                        and not self.accounts.skipped)

    @property
    def exit_code(self) -> int:
        return 1 if self.changes.refusals else 0

    def as_dict(self) -> dict[str, Any]:
        c = self.changes
        return {
            "command": self.command,
            "dry_run": self.dry_run,
            "applied": self.applied,
            "changed": self.changed,
            "refused": list(c.refusals),
            "forced": list(c.forced),
            "notes": list(c.notes),
            "actions": [{"action": a.kind.value, "path": str(a.path), "reason": a.reason,
                         **({"mode": f"{a.mode:04o}"} if a.mode is not None else {}),
                         **({"backup": str(a.backup)} if a.backup else {}),
                         **({"restore_from": str(a.restore_from)} if a.restore_from else {})}
                        for a in c.actions],
            "accounts": self.accounts.as_dict(),
            "next_steps": list(self.next_steps),
        }

    def render(self, *, diff: bool) -> str:
        lines: list[str] = []
        c = self.changes
        verb = "would" if self.dry_run or not self.applied else "did"
        if c.refusals:
            lines.append(f"slurm-ml {self.command}: refused (nothing changed); "
                         "--force overrides:")
            lines += [f"  - {r}" for r in c.refusals]
        elif not self.changed:
            lines.append(f"slurm-ml {self.command}: nothing to change")
        else:
            lines.append(f"slurm-ml {self.command}: {verb} change {len(c.actions)} path(s)")
            for a in c.actions:
                lines.append(f"  {a.kind.value:<7} {a.path}" + (f"  ({a.reason})"
                                                                 if a.reason else ""))
        lines += [f"  forced: {f}" for f in c.forced]
        lines += [f"  note: {n}" for n in c.notes]
        if diff and c.actions:
            lines.append("")
            lines += [unified(a).rstrip("\n") for a in c.actions]
        acc = self.accounts
        if acc.skipped:
            lines.append(f"accounts: {acc.note or 'skipped (--no-accounts)'}")
            lines += [f"  {shlex.join(cmd)}" for cmd in acc.commands]
        else:
            if not acc.reachable:
                lines.append(f"accounts: sacctmgr unreachable ({acc.error}); the full "
                             "creation plan:")
            elif acc.commands:
                lines.append(f"accounts: {'ran' if acc.applied else 'would run'} "
                             f"{len(acc.commands)} sacctmgr command(s):")
            else:
                lines.append("accounts: QOS and account tree already match the config")
            lines += [f"  {shlex.join(cmd)}" for cmd in acc.commands]
            if acc.note:
                lines.append(f"  {acc.note}")
        if self.next_steps and self.applied and self.changed:
            lines.append("next:")
            lines += [f"  {s}" for s in self.next_steps]
        return "\n".join(lines)
