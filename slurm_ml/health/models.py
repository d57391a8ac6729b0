"""What a healthy GPU of each model looks like, by the product name NVML and nvidia-smi print.

The checks need an expectation that does not come from the capture itself: a node whose
GPUs are all degraded the same way, or a capture of one GPU, has no healthy peer to be
compared with. This table gives that expectation from the model. A node class in the
config overrides it (``checks.expect.expectations_for``); inferring from the peers stays
as a second opinion where the model is unknown (``health.report``).

Each entry cites where its numbers come from. NVLink counts are links per GPU:
NVLink 2 (V100) carries 50 GB/s per link both ways, NVLink 3 (A100) 50 GB/s, NVLink 4
(H100) 50 GB/s, NVLink 5 (B200) 100 GB/s, so "links" = the datasheet's total NVLink
bandwidth over the per-link rate; the captures in data/gpu/ agree (A100 SXM4 NV12, H100
SXM5 NV18, H800 NV8). ``bridge_links`` is for PCIe cards that may be paired with an
NVLink bridge: a bridge is optional, so a single PCIe card is never judged on NVLink,
but where the capture shows bridged pairs every GPU must have its partner at that count.
``memory_gib`` is the marketed size (NVML reports a little less: 80 GB reads 81,559 MiB
on H100, 81,920 on A100); ``pcie`` the host link the GPU supports (slots may run it
narrower by design: AWS runs A10G and T4 at x8, so it is data for a node class that
wants it, not a check of its own).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["MODELS", "GpuModel", "model_for"]


@dataclass(frozen=True, slots=True)
class GpuModel:
    """The healthy shape of one GPU model."""

    key: str  # short stable name: "a100-sxm4", "h100-nvl"
    pattern: str  # regular expression over the product name, case-insensitive
    nvlink_links: int  # active NVLink links a healthy GPU has; 0 = no NVLink (or optional)
    memory_gib: tuple[int, ...]  # marketed sizes this name covers
    pcie_gen: int
    pcie_width: int
    bridge_links: int = 0  # links to the partner when an NVLink bridge pairs two cards
    source: str = ""
    #: The bridge is part of the product (H100 NVL is sold as bridged pairs): a GPU of
    #: the model without its partner is a fault even when no pair on the node shows one.
    paired: bool = False

    def matches(self, name: str) -> bool:
        return re.search(self.pattern, name, re.IGNORECASE) is not None


_V100 = ("NVIDIA Tesla V100 datasheet: NVLink 300 GB/s for SXM2 (6 NVLink 2 links of "
         "50 GB/s), PCIe Gen3 x16; the PCIe card has no NVLink")
_A100 = ("NVIDIA A100 Tensor Core GPU datasheet: SXM4 NVLink 600 GB/s (12 NVLink 3 links), "
         "PCIe Gen4 x16; the PCIe card takes an NVLink bridge for 2 GPUs at 600 GB/s")
_A800 = ("NVIDIA A800 datasheet (China export variant of A100): NVLink 400 GB/s (8 links); "
         "PCIe Gen4 x16")
_H100 = ("NVIDIA H100 Tensor Core GPU datasheet: SXM5 NVLink 900 GB/s (18 NVLink 4 links), "
         "PCIe Gen5 x16; H100 PCIe and H100 NVL pair with NVLink bridges at 600 GB/s "
         "(12 links); data/gpu/topo/mleng_h100x8_nv18_topo.txt shows NV18")
_H800 = ("NVIDIA H800 (China export variant of H100): NVLink 400 GB/s (8 links); "
         "data/gpu/topo/llmaction_h800x8_nv8_nic_topo_pastedamaged.txt shows NV8")
_H200 = ("NVIDIA H200 Tensor Core GPU datasheet: SXM NVLink 900 GB/s (18 links), 141 GB, "
         "PCIe Gen5 x16; H200 NVL bridges 2 or 4 GPUs at 900 GB/s")
_B200 = ("NVIDIA DGX B200 / HGX B200 and GB200 NVL72 datasheets: fifth-generation NVLink "
         "1.8 TB/s per GPU (18 links of 100 GB/s), PCIe Gen5 x16; B300/GB300 keep 18 links")
_H20 = ("NVIDIA HGX H20 (China export variant of H100): NVLink 900 GB/s (18 links)")
_BRIDGE4 = ("NVIDIA product briefs: GeForce RTX 3090, RTX A6000, A40 and A30 take a 2-way "
            "NVLink bridge of 4 links (112.5 GB/s; A30 200 GB/s)")
_PCIE = "NVIDIA datasheet: PCIe card without NVLink"

#: Most specific first: "H100 NVL" before "H100", "A100-PCIE" before "A100".
MODELS: tuple[GpuModel, ...] = (
    GpuModel("v100-sxm2", r"V100-SXM2|V100 SXM2|V100-SXM3", 6, (16, 32), 3, 16, 0, _V100),
    GpuModel("v100-pcie", r"V100S?-PCIE|V100S? PCIe|V100-FHHL", 0, (16, 32), 3, 16, 0, _V100),
    GpuModel("a100-pcie", r"A100-PCIE|A100 \d+GB PCIe|A100 PCIe", 0, (40, 80), 4, 16, 12,
             _A100),
    GpuModel("a100-sxm4", r"A100-SXM|A100 SXM", 12, (40, 80), 4, 16, 0, _A100),
    GpuModel("a800-pcie", r"A800.*PCIE|A800 \d+GB PCIe", 0, (40, 80), 4, 16, 8, _A800),
    GpuModel("a800-sxm4", r"A800", 8, (40, 80), 4, 16, 0, _A800),
    GpuModel("h100-nvl", r"H100 NVL", 0, (94,), 5, 16, 12, _H100 + "; H100 NVL product "
             "brief: two PCIe boards joined by three NVLink bridges", paired=True),
    GpuModel("h100-pcie", r"H100 PCIe|H100-PCIE", 0, (80,), 5, 16, 12, _H100),
    GpuModel("h100-sxm5", r"H100 80GB HBM3|H100 SXM|H100-SXM", 18, (80,), 5, 16, 0, _H100),
    GpuModel("h800-pcie", r"H800 PCIe", 0, (80,), 5, 16, 8, _H800),
    GpuModel("h800-sxm5", r"\bH800\b", 8, (80,), 5, 16, 0, _H800),
    GpuModel("h200-nvl", r"H200 NVL", 0, (141,), 5, 16, 18, _H200),
    GpuModel("h200-sxm", r"\bH200\b", 18, (141,), 5, 16, 0, _H200),
    GpuModel("h20", r"\bH20\b", 18, (96,), 5, 16, 0, _H20),
    GpuModel("b200", r"\bG?B[23]00\b", 18, (180, 186, 192, 288), 5, 16, 0, _B200),
    GpuModel("rtx-3090", r"RTX 3090", 0, (24,), 4, 16, 4, _BRIDGE4),
    GpuModel("rtx-a6000", r"RTX A6000", 0, (48,), 4, 16, 4, _BRIDGE4),
    GpuModel("a40", r"\bA40\b", 0, (48,), 4, 16, 4, _BRIDGE4),
    GpuModel("a30", r"\bA30\b", 0, (24,), 4, 16, 4, _BRIDGE4),
    GpuModel("a10", r"\bA10G?\b", 0, (24,), 4, 16, 0, _PCIE),
    GpuModel("t4", r"\bT4\b", 0, (16,), 3, 16, 0, _PCIE),
    GpuModel("l4", r"\bL4\b", 0, (24,), 4, 16, 0, _PCIE),
    GpuModel("l40", r"\bL40S?\b", 0, (48,), 4, 16, 0, _PCIE),
    GpuModel("rtx-4090", r"RTX 4090", 0, (24,), 4, 16, 0, _PCIE),
)


def model_for(name: object) -> GpuModel | None:
    """The model a product name ("NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-32GB")
    belongs to; None when the name is unknown or not text."""
    if not isinstance(name, str) or not name.strip():
        return None
    return next((m for m in MODELS if m.matches(name)), None)
