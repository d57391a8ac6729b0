"""``slurm-ml health check --from-nvidia-smi DIR``: captures in, a verdict out.

The CLI stays thin: it loads the config (when one is needed) and prints; choosing the
expectations, running the checks and shaping the report happen here.

Expectations come from, in order:

1. ``--class NAME``: that node class of the config (``expectations_for``);
2. ``--node NAME``: the node class the config puts that node in;
3. neither: the GPU model's healthy shape (``health.models``: NVLink links, bridged
   pairs), the model named by ``--gpu-model`` or by the GPU names in the capture, with
   the GPU count the capture reports (``Attached GPUs``, else the GPUs listed). So a
   capture of one GPU, or of a node whose GPUs are all degraded the same way, is judged
   against what the model should have;
4. a model the table does not know: inferred from the snapshot itself
   (:func:`infer_expectations`): the most NVLink links active on any one GPU (at least 1
   when a GPU has NVLink but no link up), and the ``topo -m`` cell most GPU pairs show.
   Inference can only see a GPU that differs from its peers. It also stays as a second
   opinion beside the model: the report names both.

Exit codes: 0 no drain finding; 1 a drain finding (now or after the job); 2 bad input
(unreadable or contradictory captures, an unknown class or node, a bad config).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Final

from slurm_ml.config import Config
from slurm_ml.health.checks import (
    Expectations,
    Finding,
    Thresholds,
    check_node,
    drain_reason,
    expectations_for,
    worst,
)
from slurm_ml.health.checks.expect import topology_cell
from slurm_ml.health.models import GpuModel, model_for
from slurm_ml.health.probe_replay import ReplayProbe
from slurm_ml.health.snapshot import NOT_SUPPORTED, NodeSnapshot

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_DRAIN",
    "EXIT_HEALTHY",
    "CheckReport",
    "HealthInputError",
    "check_captures",
    "expectations_from_config",
    "infer_expectations",
]

EXIT_HEALTHY: Final = 0
EXIT_DRAIN: Final = 1
EXIT_BAD_INPUT: Final = 2


class HealthInputError(ValueError):
    """The node class or node asked for is not in the config."""


def infer_expectations(snap: NodeSnapshot) -> Expectations:
    """What a healthy node looks like, judged from the snapshot alone (module doc)."""
    count = gpu_count(snap)
    listed = [g.nvlinks for g in snap.gpus if isinstance(g.nvlinks, tuple)]
    links = max((sum(1 for link in t if link.active is True) for t in listed), default=0)
    if links == 0 and any(not any(link.active is NOT_SUPPORTED for link in t) for t in listed):
        links = 1  # NVLink present ("all links are inactive", or <inactive> links): none up
    cell: str | None = None
    if snap.topology:
        idx = sorted({g.index for g in snap.gpus})
        cells = [c.strip().upper() for n, i in enumerate(idx) for j in idx[n + 1:]
                 if (c := snap.topology.get((i, j)) or snap.topology.get((j, i)))]
        if cells:
            top, seen = Counter(cells).most_common(1)[0]
            if top.startswith("NV") and 2 * seen > len(cells):
                cell = top
    return Expectations(gpu_count=count, nvlink_links_per_gpu=links,
                        expected_topology_cell=cell)


def gpu_count(snap: NodeSnapshot) -> int:
    """GPUs the node has: the driver's count when the capture shows it, else those listed."""
    attached = snap.attached_gpus
    return (attached if isinstance(attached, int) and not isinstance(attached, bool)
            else len(snap.gpus))


def snapshot_model(snap: NodeSnapshot) -> GpuModel | None:
    """The one model every named GPU of the snapshot is; None when unnamed, unknown or
    mixed (a node of two models is judged by its peers)."""
    names = {g.name.strip() for g in snap.gpus if isinstance(g.name, str) and g.name.strip()}
    models = {model_for(n) for n in names}
    if len(models) != 1 or None in models:
        return None
    return models.pop()


def model_expectations(snap: NodeSnapshot, model: GpuModel) -> Expectations:
    """What a healthy node of ``model`` looks like with the snapshot's GPU count."""
    count = gpu_count(snap)
    links = model.nvlink_links
    return Expectations(gpu_count=count, nvlink_links_per_gpu=links,
                        expected_topology_cell=topology_cell(count, links) if links else None,
                        bridge_links=model.bridge_links, bridge_required=model.paired)


def expectations_for_snapshot(snap: NodeSnapshot, gpu_model: str | None = None
                              ) -> tuple[Expectations, str]:
    """Expectations without a node class: the model's (named, or from the capture), else
    inferred from the peers; and a sentence saying which (module doc, steps 3-4)."""
    model = model_for(gpu_model) if gpu_model is not None else snapshot_model(snap)
    if gpu_model is not None and model is None:
        raise HealthInputError(f"GPU model {gpu_model!r} is not in the model table "
                               f"(slurm_ml/health/models.py); name a node class instead")
    if model is None:
        return infer_expectations(snap), "inferred from the capture's GPUs (model unknown)"
    exp = model_expectations(snap, model)
    said = "from --gpu-model" if gpu_model is not None else "named in the capture"
    second = ""
    listed = [t for g in snap.gpus if isinstance(t := g.nvlinks, tuple)]
    most = max((sum(1 for k in t if k.active is True) for t in listed), default=None)
    if exp.nvlink_links_per_gpu and most is not None and len(listed) > 1 \
            and 0 < most < exp.nvlink_links_per_gpu:
        second = (f"; second opinion: no GPU here has more than {most} links up, so every "
                  f"GPU is degraded alike")
    return exp, f"GPU model {model.key} ({said}){second}"


def expectations_from_config(cfg: Config, *, node_class: str | None,
                             node: str | None) -> tuple[Expectations, str]:
    """Expectations of ``node_class`` (by name), else of ``node``'s class; and how."""
    if node_class is not None:
        nc = next((c for c in cfg.node_classes if c.name == node_class), None)
        if nc is None:
            known = ", ".join(c.name for c in cfg.node_classes) or "none"
            raise HealthInputError(f"no node class {node_class!r} in the config "
                                   f"(known: {known})")
        how = f"node class {nc.name}, from --class"
    elif node is not None:
        found = cfg.node_class_of(node)
        if found is None:
            raise HealthInputError(f"node {node!r} is in no node class of the config; "
                                   f"name its class with --class")
        nc, how = found, f"node class {found.name} of node {node}, from the config"
    else:
        raise HealthInputError("neither a node class nor a node to look up")
    gpu_type = cfg.gpu_types.get(nc.gpu_type)
    if gpu_type is None:  # the config parser refuses this; kept for a hand-built Config
        raise HealthInputError(f"node class {nc.name} names unknown GPU type {nc.gpu_type!r}")
    return expectations_for(nc, gpu_type), how


@dataclass(frozen=True)
class CheckReport:
    """One node's verdict over its captures."""

    node: str
    source: str
    expectations: Expectations
    basis: str  # how the expectations were chosen
    findings: Sequence[Finding]

    @property
    def drains(self) -> list[Finding]:
        return [f for f in self.findings if f.severity.drains]

    @property
    def exit_code(self) -> int:
        return EXIT_DRAIN if self.drains else EXIT_HEALTHY

    @property
    def reason(self) -> str | None:
        """The Slurm drain reason the prolog would write; None when nothing drains."""
        return drain_reason(self.findings) if self.drains else None

    def as_dict(self) -> dict[str, object]:
        sev = worst(self.findings)
        return {
            "node": self.node,
            "source": self.source,
            "healthy": not self.drains,
            "exit_code": self.exit_code,
            "worst": None if sev is None else sev.value,
            "drain_reason": self.reason,
            "expectations": asdict(self.expectations),
            "expectations_from": self.basis,
            "findings": [
                {"check_id": f.check_id, "severity": f.severity.value, "gpu": f.gpu,
                 "message": f.message, "detail": f.detail, "evidence": f.evidence}
                for f in self.findings
            ],
        }

    def render(self) -> str:
        """Human text: a summary line, the expectations, one line per finding, the reason."""
        e = self.expectations
        shape = [f"{e.gpu_count} GPUs"]
        if e.nvlink_links_per_gpu:
            shape.append(f"{e.nvlink_links_per_gpu} NVLink links per GPU")
        else:
            shape.append("NVLink not checked")
        if e.expected_topology_cell:
            shape.append(f"topology {e.expected_topology_cell}")
        if e.pcie_width:
            shape.append(f"PCIe x{e.pcie_width}")
        flags = len(self.findings) - len(self.drains)
        head = (f"{self.node}: {len(self.drains)} drain finding(s), {flags} flag(s)"
                if self.drains else f"{self.node}: healthy (no drain finding, {flags} flag(s))")
        lines = [head, f"  read: {self.source.removeprefix('replay:')}",
                 f"  expected: {', '.join(shape)} ({self.basis})"]
        width = max((len(f.check_id) for f in self.findings), default=0)
        for f in self.findings:
            gpu = "-" if f.gpu is None else str(f.gpu)
            lines.append(f"{f.severity.value:<15} {f.check_id:<{width}}  GPU {gpu:<2} "
                         f"{f.message}")
        if self.reason is not None:
            lines.append(f"drain reason: {self.reason}")
        return "\n".join(lines)


def check_captures(paths: str | Path | Sequence[str | Path], *, node: str | None = None,
                   node_class: str | None = None, config: Config | None = None,
                   thresholds: Thresholds | None = None,
                   gpu_model: str | None = None, gpus: int | None = None) -> CheckReport:
    """Read ``paths`` (capture files and directories of them, one node's) with
    ReplayProbe, choose the expectations, run every check.

    Raises ``CaptureError`` (bad captures) and :class:`HealthInputError` (``node_class``
    or ``node`` given but not resolvable: a config is then required; an unknown
    ``gpu_model``).
    """
    items = [Path(paths)] if isinstance(paths, str | Path) else [Path(p) for p in paths]
    first = items[0] if items else Path(".")
    name = node or (first.name if first.is_dir() else first.stem) or str(first)
    snap = ReplayProbe.from_paths(items).snapshot(name)
    if node_class is not None or node is not None:
        if config is None:
            raise HealthInputError("--class and --node need a config")
        exp, basis = expectations_from_config(config, node_class=node_class, node=node)
    else:
        exp, basis = expectations_for_snapshot(snap, gpu_model)
        if gpus is not None:
            exp = replace(exp, gpu_count=gpus)
            if exp.nvlink_links_per_gpu and exp.expected_topology_cell is not None:
                exp = replace(exp, expected_topology_cell=topology_cell(
                    gpus, exp.nvlink_links_per_gpu))
            basis += f", {gpus} GPUs from --gpus"
    findings = check_node(snap, exp, thresholds or Thresholds())
    return CheckReport(node=name, source=snap.source, expectations=exp, basis=basis,
                       findings=findings)
