"""The job-start counters the epilog compares against (aggregate ECC, NVLink errors).

The prolog writes the lifetime counters of the job's GPUs to a node-local file
(``<dir>/baseline-<job>.json``, e.g. under /run/slurm-ml: tmpfs, gone at reboot, when
the counters reset anyway); the epilog reads it back as the ``previous`` snapshot of
``check_node``, so "an ECC delta during the job" is a real delta, and removes it. The
file is local rather than in PostgreSQL so that it works when the database is down and
costs the prolog no round trip.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from slurm_ml.health.snapshot import NOT_SUPPORTED, EccCounts, Gpu, NodeSnapshot, NvLink

__all__ = ["load_baseline", "save_baseline"]

log = logging.getLogger(__name__)
_VERSION = 1
_NA = "N/A"
_ECC = ("volatile_corrected", "volatile_uncorrected", "aggregate_corrected",
        "aggregate_uncorrected")
_LINK = ("replay_errors", "recovery_errors", "crc_errors")


def _path(directory: Path, job_id: int) -> Path:
    return directory / f"baseline-{job_id}.json"


def _enc(value: object) -> object:
    if value is NOT_SUPPORTED:
        return _NA
    return value if isinstance(value, int | str) and not isinstance(value, bool) else None


def _dec(value: object) -> Any:
    if value == _NA:
        return NOT_SUPPORTED
    return value if isinstance(value, int | str) and not isinstance(value, bool) else None


def _gpu_doc(g: Gpu) -> dict[str, object]:
    links: object = _enc(g.nvlinks) if not isinstance(g.nvlinks, tuple) else [
        {"link": k.link} | {f: _enc(getattr(k, f)) for f in _LINK} for k in g.nvlinks]
    return {"index": g.index, "uuid": _enc(g.uuid), "pci_bus_id": _enc(g.pci_bus_id),
            "ecc": {f: _enc(getattr(g.ecc, f)) for f in _ECC}, "nvlinks": links}


def save_baseline(directory: Path, job_id: int, snap: NodeSnapshot) -> Path:
    """Write the counters of ``snap``'s GPUs atomically (mode 0600); OSError on failure."""
    doc = {"v": _VERSION, "node": snap.node, "gpus": [_gpu_doc(g) for g in snap.gpus]}
    directory.mkdir(parents=True, exist_ok=True)
    path = _path(directory, job_id)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(doc, fh)
    os.replace(tmp, path)
    return path


def _gpu(doc: dict[str, Any]) -> Gpu:
    ecc = doc.get("ecc") or {}
    raw_links = doc.get("nvlinks")
    links: Any = _dec(raw_links) if not isinstance(raw_links, list) else tuple(
        NvLink(link=int(k["link"]), **{f: _dec(k.get(f)) for f in _LINK}) for k in raw_links)
    return Gpu(index=int(doc["index"]), uuid=_dec(doc.get("uuid")),
               pci_bus_id=_dec(doc.get("pci_bus_id")),
               ecc=EccCounts(**{f: _dec(ecc.get(f)) for f in _ECC}), nvlinks=links)


def load_baseline(directory: Path, job_id: int, node: str, *,
                  remove: bool = True) -> NodeSnapshot | None:
    """The saved counters as a NodeSnapshot (only ids, ECC and NVLink counters filled),
    None when there is no usable file. The file is removed unless ``remove`` is False."""
    path = _path(directory, job_id)
    try:
        doc = json.loads(path.read_text())
        if doc.get("v") != _VERSION or doc.get("node") != node:
            raise ValueError(f"baseline of another node or format: {path}")
        return NodeSnapshot(node=node, gpus=tuple(_gpu(g) for g in doc["gpus"]),
                            source=f"baseline:{path}")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("ignoring baseline %s: %s", path, exc)
        return None
    finally:
        if remove:
            with contextlib.suppress(OSError):
                path.unlink()
