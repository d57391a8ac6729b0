"""What a healthy node of a class looks like, and where the checks draw their lines.

Sources are cited as in docs/research/gpu-health.md ("research §N"); docs/design.md has
the "GPU health: what to check and what to do" table.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_ml.health.checks.findings import Severity
from slurm_ml.model import GpuType, NodeClass


@dataclass(frozen=True, slots=True)
class Expectations:
    """The healthy state of one node class.

    ``nvlink_links_per_gpu`` is the number of *active* links a healthy GPU has (0: none
    expected, NVLink not checked). ``expected_topology_cell`` is what ``nvidia-smi topo -m``
    shows between any two GPUs ("NV12" on 8x A100 SXM); None: topology not checked.
    ``pcie_width``: the link width every GPU must run at; None: compare each GPU's current
    width with its peers' (same product on the node), never with its own maximum alone
    (x16 cards in x8 slots are normal: AWS A10G/T4).
    """

    gpu_count: int
    nvlink_links_per_gpu: int = 0
    expected_topology_cell: str | None = None
    pcie_width: int | None = None
    #: PCIe cards paired by NVLink bridges: each GPU's partner shows ``NV<bridge_links>``
    #: in ``topo -m`` and ``nvlink -s`` lists that many active links. 0: no bridges.
    bridge_links: int = 0
    #: Bridges are part of the product (H100 NVL), so every GPU must have its partner;
    #: otherwise only a node that shows at least one bridged pair is judged.
    bridge_required: bool = False

    def __post_init__(self) -> None:
        if self.gpu_count < 0 or self.nvlink_links_per_gpu < 0 or self.bridge_links < 0:
            raise ValueError(f"negative expectation: {self}")
        if self.pcie_width is not None and self.pcie_width <= 0:
            raise ValueError(f"pcie_width must be positive, got {self.pcie_width}")


def expectations_for(node_class: NodeClass, gpu_type: GpuType) -> Expectations:
    """Expectations of a configured node class (``gpu_type`` is the class's GPU type)."""
    if node_class.gpu_type != gpu_type.name:
        raise ValueError(f"node class {node_class.name} has GPU type {node_class.gpu_type}, "
                         f"not {gpu_type.name}")
    n, links = node_class.gpus_per_node, gpu_type.nvlink_links
    return Expectations(gpu_count=n, nvlink_links_per_gpu=links,
                        expected_topology_cell=topology_cell(n, links))


def topology_cell(gpus: int, links: int) -> str | None:
    """The ``topo -m`` cell between two healthy GPUs, where the layout is unambiguous.

    (inference, checked against the captures in data/gpu/topo/.) 8-GPU HGX
    boards reach every peer through NVSwitch with all of a GPU's links: 8x A100 NV12,
    8x H100 NV18, 8x H800 NV8. Two GPUs are bridged directly with all links (H100 NVL pair
    NV12). Four GPUs without a switch form a full mesh, a third of the links per peer
    (HGX A100 4-GPU NV4, 4x H100 NV6). Any other shape (e.g. the DGX-1 hybrid cube mesh,
    NV1/NV2 mixed) is not checked.
    """
    if links <= 0 or gpus < 2:
        return None
    if gpus in (2, 8):
        return f"NV{links}"
    if gpus == 4 and links % 3 == 0:
        return f"NV{links // 3}"
    return None


#: Xids that drain the node now (research §4 "Recommendation": drain). The first design's list
#: was 48, 62, 64, 74, 79, 95, 119, 120; research §4 adds 61 ("drain if seen") and 140 (ECC
#: unrecovered, NVIDIA RESET_GPU, DCGM FAIL). 144-150 are the NVLink errors of current
#: NVLink generations (NVIDIA Xid catalog: SAW, RLW, TLW, TREX, NVLPW_CTRL, NETIR, MSE),
#: drained like Xid 74 (inference; the capture ogkm1150_kernel_xid45_after_xid145_149
#: shows them behind Xid 45 on a node whose NVLinks were all down).
XID_DRAIN_AFTER_JOB: frozenset[int] = frozenset({94})
#: Xid 94 (contained ECC error): the application that hit it was stopped, other work runs
#: on; NVIDIA's catalog asks for a GPU reset at a convenient time: drain after the job.
XID_DRAIN: frozenset[int] = frozenset({48, 61, 62, 64, 74, 79, 95, 119, 120, 140,
                                       144, 145, 146, 147, 148, 149, 150})
#: Xids that are the application's fault (docs/design.md: 13, 31, 43, 45; research §4 and the
#: NVIDIA k8s-device-plugin ignore set add 68, NVDEC exception). An ignored event whose
#: message says "caused by previous Xid N" is judged as Xid N (checks.xid). Everything in neither
#: set is a FLAG: 63 (remap recorded: the remap.pending check decides), 92 (high SBE rate,
#: NVIDIA "IGNORE"), 109 (drain only if repeated). 94 drains after the job (above).
XID_IGNORE: frozenset[int] = frozenset({13, 31, 43, 45, 68})


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Where the checks draw their lines. Defaults follow docs/design.md and research §2.4/§4."""

    #: Retired pages (SBE + DBE) at or above this drain (DCGM DCGM_LIMIT_MAX_RETIRED_PAGES,
    #: research §1.3; docs/design.md "≥ 63").
    retired_pages_max: int = 63
    #: Page retirement pending: takes effect at the next reset (research §0.5 groups it with
    #: a pending remap: drain after the job, as docs/design.md's table now says).
    retired_pages_pending: Severity = Severity.DRAIN_AFTER_JOB
    #: Row remap pending: "other applications can keep running until a convenient time to
    #: reboot" (NVIDIA, research §4); docs/design.md: drain after job.
    remap_pending: Severity = Severity.DRAIN_AFTER_JOB
    #: Uncorrectable row remaps at or above this are flagged (DCGM WARN
    #: DCGM_LIMIT_MAX_ROW_REMAP_UNCORRECTABLE "GPU is in a bad state", research §1.3).
    remap_uncorrectable_flag: int = 512
    #: NVLink replay + recovery errors since the previous snapshot at or above this count
    #: (DCGM fails on a delta >= 1, research §1.3).
    nvlink_replay_recovery_delta: int = 1
    #: NVLink CRC errors since the previous snapshot at or above this count. DCGM fails at
    #: >= 100/s; snapshots carry no time, so this is a count per interval (stricter).
    nvlink_crc_delta: int = 100
    #: What an NVLink error delta does (docs/design.md: flag; DCGM would fail).
    nvlink_errors: Severity = Severity.FLAG
    #: Aggregate (lifetime) uncorrectable ECC errors since the previous snapshot: flagged;
    #: the volatile counter and row remapping carry the drain decision.
    ecc_aggregate_uncorrected_delta: int = 1
    #: Aggregate correctable ECC errors since the previous snapshot (inference, the order of
    #: Azure NHC's SRAM correctable bound of 10,000, research §1.2).
    ecc_aggregate_corrected_delta: int = 10_000
    xid_drain: frozenset[int] = XID_DRAIN
    xid_ignore: frozenset[int] = XID_IGNORE
    xid_drain_after_job: frozenset[int] = XID_DRAIN_AFTER_JOB

    def __post_init__(self) -> None:
        both = self.xid_drain & self.xid_ignore
        if both:
            raise ValueError(f"Xids both drained and ignored: {sorted(both)}")
        for name in ("retired_pages_max", "remap_uncorrectable_flag",
                     "nvlink_replay_recovery_delta", "nvlink_crc_delta",
                     "ecc_aggregate_uncorrected_delta", "ecc_aggregate_corrected_delta"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
