"""What a node's periodic health check publishes for Prometheus: its metric families.

Every periodic run (``hooks.periodic``), whatever it decided, ends by handing what it
knows to :func:`render`, and ``health.textfile_write`` puts the result where
node_exporter's textfile collector reads it. Operators alert on GPU health from these
series; docs/health.md lists them with their meaning.

One file per Slurm node: a host may run several ``slurmd -N`` (the dev cluster does) and
one node_exporter reads them all, so every series carries ``node``, the Slurm node name,
and one host's files never hold the same series twice.

Nothing is made up. A reading the probe did not take, or one the device does not have,
has no series (a missing ECC counter must not read as 0 errors); so has what Slurm did
not say (drained or not, the jobs on the node). The help texts are constants: node_exporter
merges the families of all files, and files that disagree on a family's help clash.

Pure: values in, a ``CollectorRegistry`` out.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric

from slurm_ml.health.checks import Finding, Severity, Thresholds
from slurm_ml.health.checks.xid import XID_CLASSES, tally
from slurm_ml.health.snapshot import (
    Gpu,
    NodeSnapshot,
    RemappedRows,
    RetiredPages,
    reading_number,
)
from slurm_ml.model import Node
from slurm_ml.policy.quarantine import owned

__all__ = ["METRICS", "MetricSpec", "NodeHealth", "families", "render"]


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric family of the textfile: its name, help text and label names."""

    name: str
    help: str
    labels: tuple[str, ...] = ("node",)


PASS = MetricSpec("slurm_ml_node_health_pass",
                  "1 when the last periodic health check passed (no drain-severity "
                  "finding), else 0")
LAST_CHECK = MetricSpec("slurm_ml_node_health_last_check_timestamp_seconds",
                        "When the last periodic health check ran (Unix time)")
FINDINGS = MetricSpec("slurm_ml_node_health_findings",
                      "Findings of the last periodic health check by the severity the "
                      "check gave them", ("node", "severity"))
ACTION = MetricSpec("slurm_ml_node_health_action",
                    "1 for what the last periodic health check did (pass, recorded, "
                    "deferred, drained, refused, held, resumed, ...)", ("node", "action"))
DRAINED = MetricSpec("slurm_ml_node_drained",
                     "1 when Slurm shows the node drained or draining, else 0")
DRAINED_OWNED = MetricSpec("slurm_ml_node_drained_by_slurm_ml",
                           "1 when Slurm shows the node drained with a reason slurm-ml "
                           "owns (slurm-ml: ...), else 0")
ALLOCATED = MetricSpec("slurm_ml_node_gpus_allocated",
                       "GPUs the health check attributes to a job running on the node "
                       "(the GPU runs that job's processes)")
ALLOCATED_IDLE = MetricSpec("slurm_ml_node_gpus_allocated_idle",
                            "Of slurm_ml_node_gpus_allocated, the GPUs whose utilisation "
                            "is at or below policy.reclaim.zombie_util_pct")
SPOOL = MetricSpec("slurm_ml_node_spool_records",
                   "Records waiting in the node's local spool for PostgreSQL")
XIDS = MetricSpec("slurm_ml_gpu_xid_errors",
                  "Xid events in the kernel log the health check read, by the class the "
                  "Xid check gives them (gpu: NVML index, or the PCI address of a GPU no "
                  "longer listed)", ("node", "gpu", "class"))
ECC = MetricSpec("slurm_ml_gpu_ecc_errors",
                 "ECC error counters as the GPU reports them (volatile: since the last "
                 "driver reload; aggregate: lifetime)", ("node", "gpu", "kind"))
REMAPPED_ROWS = MetricSpec("slurm_ml_gpu_remapped_rows",
                           "Rows remapped by the GPU's row remapper (Ampere and later)",
                           ("node", "gpu", "kind"))
RETIRED_PAGES = MetricSpec("slurm_ml_gpu_retired_pages",
                           "Pages retired by the GPU's page retirement (Volta, Turing)",
                           ("node", "gpu", "kind"))
REPAIR_PENDING = MetricSpec("slurm_ml_gpu_memory_repair_pending",
                            "1 when a row remap or page retirement waits for the next "
                            "GPU reset, else 0", ("node", "gpu", "kind"))
REMAP_FAILURE = MetricSpec("slurm_ml_gpu_row_remap_failure",
                           "1 when the GPU's row remapper reports a failure, else 0",
                           ("node", "gpu"))
NVLINKS = MetricSpec("slurm_ml_gpu_nvlink_links_active",
                     "NVLink links of the GPU that are active", ("node", "gpu"))

#: Every family the textfile may hold, in the order it holds them.
METRICS: tuple[MetricSpec, ...] = (
    PASS, LAST_CHECK, FINDINGS, ACTION, DRAINED, DRAINED_OWNED, ALLOCATED, ALLOCATED_IDLE,
    SPOOL, XIDS, ECC, REMAPPED_ROWS, RETIRED_PAGES, REPAIR_PENDING, REMAP_FAILURE, NVLINKS,
)
_DEFAULT_THRESHOLDS = Thresholds()


@dataclass(frozen=True, slots=True)
class NodeHealth:
    """What one periodic run knows about its node: the textfile's input.

    ``passed`` is None when no check ran (a node in no node class): the file then holds
    no verdict, only when the run happened and what it did. ``gpu_jobs`` maps a GPU index
    to the job running on it, None when the run could not tell (no snapshot, or Slurm
    did not say which jobs run here). ``spool_records`` is None when nobody counted.
    """

    node: str
    checked_at: datetime
    action: str
    passed: bool | None
    idle_util_pct: float  # policy.reclaim.zombie_util_pct
    findings: tuple[Finding, ...] = ()
    snapshot: NodeSnapshot | None = None
    slurm_node: Node | None = None
    gpu_jobs: Mapping[int, int] | None = None
    spool_records: int | None = None
    thresholds: Thresholds = _DEFAULT_THRESHOLDS


class _Families:
    """A collector of families built beforehand: the registry only lists them."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def render(health: NodeHealth) -> CollectorRegistry:
    """The registry ``prometheus_client.write_to_textfile`` writes for ``health``."""
    registry = CollectorRegistry()
    registry.register(_Families(families(health)))
    return registry


def families(health: NodeHealth) -> list[Metric]:
    """The metric families of ``health``, in :data:`METRICS` order; a family without a
    sample is left out."""
    samples: dict[str, list[tuple[tuple[str, ...], float]]] = {m.name: [] for m in METRICS}

    def add(spec: MetricSpec, value: float, *labels: str) -> None:
        samples[spec.name].append(((health.node, *labels), float(value)))

    _node(health, add)
    if health.snapshot is not None:
        _gpus(health, health.snapshot, add)
    out: list[Metric] = []
    for spec in METRICS:
        if samples[spec.name]:
            family = GaugeMetricFamily(spec.name, spec.help, labels=spec.labels)
            for labels, value in samples[spec.name]:
                family.add_metric(labels, value)
            out.append(family)
    return out


class _Add(Protocol):
    """The type of ``families``' ``add``: a spec, a value, the labels after ``node``."""

    def __call__(self, spec: MetricSpec, value: float, *labels: str) -> None: ...


def _node(h: NodeHealth, add: _Add) -> None:
    add(LAST_CHECK, h.checked_at.timestamp())
    add(ACTION, 1, h.action)
    if h.passed is not None:
        add(PASS, int(h.passed))
        for severity in Severity:
            add(FINDINGS, sum(1 for f in h.findings if f.severity is severity),
                severity.value)
    if h.slurm_node is not None:
        drained = h.slurm_node.drained
        add(DRAINED, int(drained))
        add(DRAINED_OWNED, int(drained and owned(h.slurm_node.reason)))
    if h.gpu_jobs is not None and h.snapshot is not None:
        by_index = {g.index: g for g in h.snapshot.gpus}
        held = [by_index.get(i) for i in h.gpu_jobs]
        add(ALLOCATED, len(held))
        add(ALLOCATED_IDLE, sum(1 for g in held if g is not None and _idle(g, h.idle_util_pct)))
    if h.spool_records is not None:
        add(SPOOL, h.spool_records)


def _idle(gpu: Gpu, util_pct: float) -> bool:
    """At or below the zombie line; a utilisation not read is never idle."""
    util = reading_number(gpu.utilization_gpu_pct)
    return util is not None and util <= util_pct


def _gpus(h: NodeHealth, snap: NodeSnapshot, add: _Add) -> None:
    if snap.xids is not None:
        counts = tally(snap, h.thresholds)
        # Every listed GPU gets its zeros, so a series exists before the first Xid.
        for g in snap.gpus:
            for cls in XID_CLASSES:
                counts.setdefault((g.index, cls), 0)
        for (gpu, cls), n in sorted(counts.items(), key=_by_gpu):
            add(XIDS, n, str(gpu), cls)
    for g in snap.gpus:
        gpu = str(g.index)
        ecc = g.ecc
        for kind, value in (("volatile_corrected", ecc.volatile_corrected),
                            ("volatile_uncorrected", ecc.volatile_uncorrected),
                            ("aggregate_corrected", ecc.aggregate_corrected),
                            ("aggregate_uncorrected", ecc.aggregate_uncorrected)):
            _count(add, ECC, value, gpu, kind)
        rows = g.remapped_rows
        if isinstance(rows, RemappedRows):
            _count(add, REMAPPED_ROWS, rows.correctable, gpu, "correctable")
            _count(add, REMAPPED_ROWS, rows.uncorrectable, gpu, "uncorrectable")
            _flag(add, REPAIR_PENDING, rows.pending, gpu, "row_remap")
            _flag(add, REMAP_FAILURE, rows.failure, gpu)
        pages = g.retired_pages
        if isinstance(pages, RetiredPages):
            _count(add, RETIRED_PAGES, pages.single_bit, gpu, "single_bit")
            _count(add, RETIRED_PAGES, pages.double_bit, gpu, "double_bit")
            _flag(add, REPAIR_PENDING, pages.pending, gpu, "page_retirement")
        if isinstance(g.nvlinks, tuple):
            states = [k.active for k in g.nvlinks]
            # No link listed is a reading (none there); links whose state was not read
            # are not.
            if not states or any(isinstance(s, bool) for s in states):
                add(NVLINKS, sum(1 for s in states if s is True), gpu)


def _by_gpu(item: tuple[tuple[int | str, str], int]) -> tuple[bool, int, str, int]:
    """GPUs by index, then the addresses of GPUs no longer listed; classes in order."""
    (gpu, cls), _ = item
    return (isinstance(gpu, str), gpu if isinstance(gpu, int) else 0, str(gpu),
            XID_CLASSES.index(cls))


def _count(add: _Add, spec: MetricSpec, value: object, *labels: str) -> None:
    """A counter reading, only where the probe read one."""
    if isinstance(value, int) and not isinstance(value, bool):
        add(spec, value, *labels)


def _flag(add: _Add, spec: MetricSpec, value: object, *labels: str) -> None:
    """A yes/no reading as 1/0, only where the probe read one."""
    if isinstance(value, bool):
        add(spec, int(value), *labels)
