"""The install manifest: what ``slurm-ml install`` wrote and changed, so that uninstall
removes exactly that and install can tell its own files from the admin's.

Kept as ``<slurm-conf-dir>/.slurm-ml-manifest.json``. Paths under the conf dir are stored
relative to it (a copied conf dir keeps a valid manifest), others absolute.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurm_ml.deploy.errors import BadInput
from slurm_ml.deploy.slurmconf import ConfEdits, LineEdit

MANIFEST_NAME = ".slurm-ml-manifest.json"
VERSION = 1


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True, slots=True)
class FileRecord:
    """A file install wrote: its hash and mode then, and where the file it replaced went."""

    sha256: str
    mode: int
    backup: str = ""  # manifest key of the pre-install file kept aside ("" = none)
    # the hash install wrote before this one: an update cut short (a failed apply) leaves
    # that content, which is still install's own, not a local change
    previous: str = ""

    def written_by_install(self, digest: str) -> bool:
        return digest in (self.sha256, self.previous) and bool(digest)


@dataclass(frozen=True, slots=True)
class Manifest:
    files: Mapping[str, FileRecord] = field(default_factory=dict)
    slurm_conf: ConfEdits | None = None
    dirs: tuple[str, ...] = ()  # directories install created (removed when empty)
    config: str = ""  # the slurm-ml.yaml it was installed from

    def to_json(self) -> str:
        doc: dict[str, Any] = {
            "version": VERSION,
            "written_by": "slurm-ml install",
            "config": self.config,
            "files": {k: {"sha256": r.sha256, "mode": f"{r.mode:04o}",
                          **({"backup": r.backup} if r.backup else {}),
                          **({"previous": r.previous} if r.previous else {})}
                      for k, r in sorted(self.files.items())},
            "dirs": list(self.dirs),
        }
        if self.slurm_conf is not None:
            e = self.slurm_conf
            doc["slurm_conf"] = {
                "include_line": e.include_line,
                "newline_added": e.newline_added,
                "partition_lines": [{"before": p.before, "after": p.after}
                                    for p in e.partitions],
            }
        return json.dumps(doc, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, source: str = MANIFEST_NAME) -> Manifest:
        try:
            doc = json.loads(text)
            if doc.get("version") != VERSION:
                raise ValueError(f"unknown version {doc.get('version')!r}")
            files = {str(k): FileRecord(str(v["sha256"]), int(str(v["mode"]), 8),
                                        str(v.get("backup", "")), str(v.get("previous", "")))
                     for k, v in doc["files"].items()}
            conf = None
            if doc.get("slurm_conf"):
                c = doc["slurm_conf"]
                conf = ConfEdits(str(c["include_line"]), bool(c["newline_added"]),
                                 tuple(LineEdit(str(p["before"]), str(p["after"]))
                                       for p in c.get("partition_lines", [])))
            return cls(files, conf, tuple(str(d) for d in doc.get("dirs", [])),
                       str(doc.get("config", "")))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BadInput(f"{source}: not a slurm-ml install manifest ({exc}); "
                           "move it away only if you know slurm-ml is not installed") from exc


def key_of(path: Path, conf_dir: Path) -> str:
    """The manifest key of ``path``: relative under ``conf_dir``, else absolute."""
    try:
        return str(path.relative_to(conf_dir))
    except ValueError:
        return str(path)


def path_of(key: str, conf_dir: Path) -> Path:
    p = Path(key)
    return p if p.is_absolute() else conf_dir / p
