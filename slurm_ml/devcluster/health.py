"""Node health on the dev cluster: a replay directory per node, fault injection, and the
environment the Prolog/Epilog wrappers read.

The dev nodes have no GPUs, so their probe is ``ReplayProbe`` over real captures from
the checkout's ``data/gpu`` (``$SLURM_ML_GPU_DATA`` elsewhere), copied into
``.devcluster/health/<node>/``; the hooks find them through ``$SLURM_ML_REPLAY_DIR``.
Each node starts with the healthy captures of its class (:func:`healthy_captures`).
``data/gpu`` holds only captures from repositories' own test data; those taken from issue
threads are third-party data read in place from the kit beside the checkout,
``../shared/data/gpu`` (:func:`find_capture`).

Which captures, and why (no capture of the exact dev hardware exists; never edited):

* **A100 SXM x8 classes** (a100-80g, a100-40g: 8 GPUs, 12 NVLink links, ``NV12``):
  ``nvlink/gpud_a100x8_nvlink_status.txt`` (8x A100-SXM4-80GB, 12 x 25 GB/s each) and
  ``topo/mleng_a100x8_nv12_topo.txt`` (8x A100 SXM, NV12 between every pair). They meet
  the class's expectations exactly (count, links per GPU, topology). There is no healthy
  8-GPU A100 ``nvidia-smi -q`` capture; the closest full 8-GPU one,
  ``smi-q/gpud_h100x8_535.183.01_q.txt``, is an H100 node: ReplayProbe refuses to merge
  it with the A100 NVLink capture (different GPU UUIDs: captures of different nodes), and
  without the NVLink capture the NVLink checks, the ones the demo's fault trips, would
  not run. So the -q readings (ECC, row remapping, fabric, PCIe width, utilisation) are
  *not read* on these nodes: each periodic run and prolog records ``probe.missing`` FLAGs
  for them, which never drain. The a100-40g nodes replay 80 GB captures; no check reads
  the memory size.
* **V100 PCIe x4 class** (v100-pcie: 4 GPUs, no NVLink, topology not checked):
  ``topo/missalign106_l40s_x4_pcie_nic_topo.txt``, a healthy 4-GPU PCIe-only box (L40S),
  from an issue thread, so read from ``../shared/data/gpu``; without that kit these nodes
  replay nothing and their checks drain them (``probe.error``).
  It is the only capture with 4 GPUs and no NVLink; no -q capture of a 4-GPU PCIe node
  exists (the Volta ones are a single TITAN V and an 8-GPU page-retirement excerpt), so
  here too the -q readings are not read (FLAGs only).

Live GPU processes come from the fake device files (``health.probe_devfiles``,
``$SLURM_ML_FAKE_GPU_DIR``), not from a capture.

``inject_fault(node, capture)`` copies a capture into the node's directory, replacing the
healthy capture of the same kind (``probe_replay.classify``: -q, topo, nvlink status, ...)
and refusing a capture that does not combine with the rest; ``clear_fault`` restores the
healthy set. A ``.fault`` file records what was injected (ReplayProbe skips dot-files);
``sync_healthy`` (run by ``devcluster up``) resets every node without one.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_ml.assets import checkout_root
from slurm_ml.config import Config
from slurm_ml.devcluster.layout import Layout
from slurm_ml.devcluster.platform import DevClusterError
from slurm_ml.envvars import env
from slurm_ml.health.probe_replay import MAX_FILE_BYTES, ReplayProbe, classify
from slurm_ml.health.replay.errors import CaptureError
from slurm_ml.health.report import check_captures
from slurm_ml.model import NodeClass

__all__ = [
    "A100_SXM_8",
    "PCIE_4",
    "FaultResult",
    "clear_fault",
    "find_capture",
    "gpu_data_dir",
    "healthy_captures",
    "hook_env",
    "inject_fault",
    "node_health",
    "shared_gpu_data",
    "sync_healthy",
]

A100_SXM_8: tuple[str, ...] = ("nvlink/gpud_a100x8_nvlink_status.txt",
                               "topo/mleng_a100x8_nv12_topo.txt")
PCIE_4: tuple[str, ...] = ("topo/missalign106_l40s_x4_pcie_nic_topo.txt",)
FAULT_FILE = ".fault"
#: Last-resort limit of the wrappers; PrologEpilogTimeout (SiteParams, 60 s) stays above it.
HOOK_TIMEOUT_S = 50


def gpu_data_dir(default: Path | None = None) -> Path:
    """The real captures: ``$SLURM_ML_GPU_DATA``, else ``default``, else the checkout's
    ``data/gpu`` (origins in ``data/SOURCES.md``). The wheel does not ship them: an
    installed package with neither is a DevClusterError saying so."""
    value = env("SLURM_ML_GPU_DATA")
    if value:
        return Path(value)
    if default is not None:
        return default
    root = checkout_root()
    if root is None:
        raise DevClusterError("the dev cluster's GPU captures come with a source checkout "
                              "of slurm-ml (data/gpu); set $SLURM_ML_GPU_DATA to a directory "
                              "holding them")
    return root / "data" / "gpu"


def shared_gpu_data() -> Path | None:
    """The data kit's ``gpu/`` beside the checkout (``../shared/data/gpu``), read in place:
    the captures taken from issue threads live only there. None without a checkout."""
    root = checkout_root()
    return None if root is None else root.parent / "shared" / "data" / "gpu"


def find_capture(rel: str, data: Path) -> Path | None:
    """``rel`` under ``data``, else under the kit beside the checkout; None if neither
    holds it."""
    kit = shared_gpu_data()
    for base in (data, kit):
        if base is not None and (base / rel).is_file():
            return base / rel
    return None


def healthy_captures(node_class: NodeClass, nvlink_links: int) -> tuple[str, ...]:
    """The healthy captures a node of this class replays (module doc), as paths under
    :func:`gpu_data_dir`. DevClusterError for a shape no capture set matches."""
    shape = (node_class.gpus_per_node, nvlink_links)
    if shape == (8, 12):
        return A100_SXM_8
    if shape == (4, 0):
        return PCIE_4
    raise DevClusterError(
        f"node class {node_class.name}: no healthy capture set for {shape[0]} GPUs with "
        f"{shape[1]} NVLink links; add one to slurm_ml/devcluster/health.py")


def _healthy_for(cfg: Config, node: str) -> tuple[str, ...]:
    nc = cfg.node_class_of(node)
    if nc is None:
        raise DevClusterError(f"no dev node {node} (nodes: {', '.join(cfg.all_nodes())})")
    return healthy_captures(nc, cfg.gpu_types[nc.gpu_type].nvlink_links)


def _captures(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith("."))


def _copy_healthy(cfg: Config, layout: Layout, node: str, data: Path) -> list[str]:
    want = _healthy_for(cfg, node)
    found = {rel: find_capture(rel, data) for rel in want}
    missing = [rel for rel, path in found.items() if path is None]
    if missing:
        kit = shared_gpu_data()
        raise DevClusterError(f"captures not found under {data}"
                              + (f" or {kit}" if kit is not None else "")
                              + f": {', '.join(missing)} (set $SLURM_ML_GPU_DATA to the "
                              f"data kit's gpu/ directory)")
    d = layout.health / node
    d.mkdir(parents=True, exist_ok=True)
    names = {Path(rel).name for rel in want}
    for p in _captures(d):
        if p.name not in names:
            p.unlink()
    for rel, src in found.items():
        assert src is not None
        dst = d / Path(rel).name
        if not dst.exists() or dst.read_bytes() != src.read_bytes():
            shutil.copyfile(src, dst)
            dst.chmod(0o644)
    (d / FAULT_FILE).unlink(missing_ok=True)
    return sorted(names)


def sync_healthy(cfg: Config, layout: Layout, *, data: Path | None = None) -> list[str]:
    """Give every node without an injected fault its healthy captures; the nodes whose
    fault was kept. A node whose captures cannot be found is left without and named in
    one DevClusterError, raised after every other node got its captures."""
    data = data or gpu_data_dir()
    kept = []
    problems = []
    for node in cfg.all_nodes():
        if (layout.health / node / FAULT_FILE).exists():
            kept.append(node)
            continue
        try:
            _copy_healthy(cfg, layout, node, data)
        except DevClusterError as exc:
            problems.append(f"{node}: {exc}")
    for node in cfg.all_nodes():
        shm = layout.shm / node
        shm.mkdir(parents=True, exist_ok=True)
        shm.chmod(0o1777)
    if problems:
        raise DevClusterError("; ".join(problems))
    return kept


@dataclass(frozen=True, slots=True)
class FaultResult:
    node: str
    files: tuple[str, ...]  # the node's captures now
    injected: tuple[str, ...]  # captures that are not the healthy set's
    replaced: tuple[str, ...] = ()  # healthy captures this call removed
    verdict: str = ""  # the drain reason the checks give now, or "healthy"

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "files": list(self.files), "injected": list(self.injected),
                "replaced": list(self.replaced), "verdict": self.verdict}


def _resolve(capture: str, data: Path) -> Path:
    """A path as given, else relative to the data kit (or the kit beside the checkout),
    else a unique file name in one of them."""
    if Path(capture).is_file():
        return Path(capture)
    if (p := find_capture(capture, data)) is not None:
        return p
    kit = shared_gpu_data()
    for base in (b for b in (data, kit) if b is not None):
        found = sorted(base.rglob(Path(capture).name)) if base.is_dir() else []
        if len(found) == 1:
            return found[0]
        if found:
            raise DevClusterError(f"{capture}: several captures have that name: "
                                  + ", ".join(str(p.relative_to(base)) for p in found))
    where = f"{data}" + (f" or {kit}" if kit is not None else "")
    raise DevClusterError(f"{capture}: no such capture (a path, or a name under {where})")


def _verdict(cfg: Config, directory: Path, node: str) -> str:
    try:
        report = check_captures(directory, node=node, config=cfg)
    except CaptureError as exc:
        return f"unreadable: {exc}"
    return report.reason or "healthy"


def _read_fault(d: Path) -> list[str]:
    try:
        doc = json.loads((d / FAULT_FILE).read_text())
    except (OSError, ValueError):
        return []
    return [str(x) for x in doc.get("injected", [])] if isinstance(doc, dict) else []


def inject_fault(cfg: Config, layout: Layout, node: str, capture: str, *,
                 data: Path | None = None) -> FaultResult:
    """Copy ``capture`` into ``node``'s replay directory, replacing the captures of the
    same kind. The captures must still combine (ReplayProbe reads them): otherwise
    nothing changes and DevClusterError says why."""
    data = data or gpu_data_dir()
    _healthy_for(cfg, node)  # a known dev node
    src = _resolve(capture, data)
    if src.stat().st_size > MAX_FILE_BYTES:
        raise DevClusterError(f"{src}: larger than a capture can be")
    text = src.read_bytes().decode("utf-8", errors="replace")
    kind = classify(text)
    if kind is None:
        raise DevClusterError(f"{src.name}: not a capture ReplayProbe reads")
    d = layout.health / node
    if not d.is_dir():
        _copy_healthy(cfg, layout, node, data)
    same = [p for p in _captures(d)
            if classify(p.read_bytes().decode("utf-8", errors="replace")) == kind]
    rest = [p for p in _captures(d) if p not in same and p.name != src.name]
    try:
        ReplayProbe.from_files([*rest, src]).snapshot(node)
    except CaptureError as exc:
        raise DevClusterError(
            f"{src.name} does not combine with {node}'s other captures "
            f"({', '.join(p.name for p in rest) or 'none'}): {exc}") from exc
    healthy = {Path(rel).name for rel in _healthy_for(cfg, node)}
    for p in same:
        p.unlink()
    dst = d / src.name
    shutil.copyfile(src, dst)
    dst.chmod(0o644)
    injected = sorted({*_read_fault(d), src.name} - healthy)
    (d / FAULT_FILE).write_text(json.dumps({"injected": injected}) + "\n")
    files = tuple(p.name for p in _captures(d))
    return FaultResult(node, files, tuple(injected),
                       tuple(sorted(p.name for p in same if p.name != src.name)),
                       _verdict(cfg, d, node))


def clear_fault(cfg: Config, layout: Layout, node: str, *,
                data: Path | None = None) -> FaultResult:
    """Give ``node`` its healthy captures back."""
    data = data or gpu_data_dir()
    d = layout.health / node
    before = _read_fault(d)
    files = _copy_healthy(cfg, layout, node, data)
    return FaultResult(node, tuple(files), (), tuple(before), _verdict(cfg, d, node))


def node_health(cfg: Config, layout: Layout) -> dict[str, dict[str, Any]]:
    """Per node: its replayed captures and the injected ones (for ``status``)."""
    out = {}
    for node in cfg.all_nodes():
        d = layout.health / node
        out[node] = {"files": [p.name for p in _captures(d)], "fault": _read_fault(d)}
    return out


def hook_env(layout: Layout, *, python: str, config_path: Path, dsn: str) -> dict[str, str]:
    """What the Prolog/Epilog/HealthCheckProgram wrappers read from ``etc/slurm-ml.env``
    (slurmd gives them almost no environment: see prolog/slurm-ml-hook); the dev
    cluster hands these to ``slurm-ml install`` as extra env lines."""
    return {
        "SLURM_ML_PYTHON": python,
        "SLURM_ML_CONFIG": str(config_path),
        "SLURM_ML_DSN": dsn,
        "SLURM_ML_SPOOL_DIR": str(layout.spool),
        "SLURM_ML_REPLAY_DIR": str(layout.health),
        "SLURM_ML_FAKE_GPU_DIR": str(layout.dev),
        "SLURM_ML_STATE_DIR": str(layout.hook_state),
        "SLURM_ML_SHM_DIR": str(layout.shm / "%n"),
        "SLURM_ML_HOOK_LOG": str(layout.log / "hooks.log"),
        "SLURM_ML_HOOK_TIMEOUT": str(HOOK_TIMEOUT_S),
    }
