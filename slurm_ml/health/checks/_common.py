"""Helpers shared by the checks: reading values, naming GPUs, collecting findings."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from slurm_ml.health.checks.expect import Expectations, Thresholds
from slurm_ml.health.checks.findings import Finding, Severity
from slurm_ml.health.snapshot import NOT_SUPPORTED, Gpu, NodeSnapshot, Reading, bus_key

#: Strings a parser may have left where it meant "not supported".
_NA_TEXT = frozenset({"n/a", "na", "not supported", "notsupported", "[n/a]", "[not supported]"})


def num(value: Reading[int]) -> int | None:
    """The integer in a reading, None for NOT_SUPPORTED / None / a non-integer."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


def unsupported(value: object) -> bool:
    """NOT_SUPPORTED, or text that says so ("N/A")."""
    if value is NOT_SUPPORTED:
        return True
    return isinstance(value, str) and value.strip().lower() in _NA_TEXT


def text(value: Reading[str]) -> str | None:
    return value if isinstance(value, str) and not unsupported(value) else None


def label(gpu: Gpu) -> str:
    """"GPU 3 (00000000:07:00.0)", the way an operator finds it in nvidia-smi."""
    bus = text(gpu.pci_bus_id)
    return f"GPU {gpu.index} ({bus})" if bus else f"GPU {gpu.index}"


def ids(gpu: Gpu) -> dict[str, object]:
    """Identity of a GPU for evidence: index, and UUID and bus id where read."""
    out: dict[str, object] = {"gpu": gpu.index}
    for key, value in (("uuid", gpu.uuid), ("pci_bus_id", gpu.pci_bus_id)):
        t = text(value)
        if t is not None:
            out[key] = t
    return out


def gpus_by_bus(snap: NodeSnapshot) -> dict[tuple[int, int, int], Gpu]:
    """The snapshot's GPUs by PCI address (``bus_key``): how a kernel-log event, which
    names an address, finds its GPU. The first GPU listed at an address wins."""
    out: dict[tuple[int, int, int], Gpu] = {}
    for g in snap.gpus:
        key = bus_key(g.pci_bus_id)
        if key is not None:
            out.setdefault(key, g)
    return out


def join(items: Iterable[object], limit: int = 8) -> str:
    """"0, 1, 2" with at most ``limit`` items shown."""
    items = list(items)
    shown = ", ".join(str(i) for i in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


@dataclass
class Out:
    """Findings as they are made, plus evidence the probe did not collect.

    Missing evidence is gathered per check and becomes one ``probe.missing`` FLAG each,
    never a drain: a node must not be drained because the probe could not look.
    """

    exp: Expectations
    th: Thresholds
    findings: list[Finding] = field(default_factory=list)
    _missing: dict[str, tuple[set[int], set[str]]] = field(default_factory=dict)

    def add(self, check_id: str, severity: Severity, gpu: Gpu | None, message: str,
            detail: str, **evidence: object) -> None:
        ev: dict[str, object] = ids(gpu) if gpu is not None else {}
        ev.update(evidence)
        self.findings.append(Finding(check_id, severity, None if gpu is None else gpu.index,
                                     message, ev, detail))

    def miss(self, check: str, gpu: Gpu | None, *fields: str) -> None:
        gpus, names = self._missing.setdefault(check, (set(), set()))
        if gpu is not None:
            gpus.add(gpu.index)
        names.update(fields)

    def missing_findings(self) -> list[Finding]:
        out = []
        for check, (gpus, names) in sorted(self._missing.items()):
            where = (f"GPU {join(sorted(gpus))}" if len(gpus) == 1
                     else f"GPUs {join(sorted(gpus))}" if gpus else "the node")
            msg = (f"The probe did not read {join(sorted(names))} on {where}, so check "
                   f"{check} could not run there; see the probe log (missing evidence "
                   f"never drains a node).")
            only = next(iter(gpus)) if len(gpus) == 1 else None
            out.append(Finding("probe.missing", Severity.FLAG, only, msg,
                               {"check": check, "gpus": sorted(gpus), "fields": sorted(names)},
                               f"{check} not read"))
        return out
