"""Where the tests find a real GPU capture.

``data/gpu`` holds the captures taken from repositories' own test data. Those taken from
issue threads are third-party data read in place from the kit beside the repository,
``../shared/data/gpu`` (``$SLURM_ML_GPU_DATA`` names another copy of the kit's ``gpu/``):
they never enter the repository. A test that needs one skips, naming the folder, when the
kit is absent.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GPU_DATA = REPO / "data" / "gpu"
KIT = Path(os.environ.get("SLURM_ML_GPU_DATA")
           or REPO.parent / "shared" / "data" / "gpu").resolve()


def capture(rel: str) -> Path:
    """The capture ``rel`` ("xid/name.log"): in data/gpu, else in the kit; skips without."""
    for base in (GPU_DATA, KIT):
        if (base / rel).is_file():
            return base / rel
    pytest.skip(f"{rel} is read in place from {KIT} (set SLURM_ML_GPU_DATA to the kit's "
                f"gpu/ folder), which does not hold it")


#: The captures the tests use that came from issue and pull-request threads: read from
#: the kit only (data/SOURCES.md says so; a test keeps them out of data/gpu).
FROM_THREADS = frozenset({
    "topo/missalign106_l40s_x4_pcie_nic_topo.txt",
    "topo/nccl1617_h100_x4_nv6_nic_topo_matrix.txt",
    "xid/gpudpr46_dmesg_ctime_xid13_xid109.log",
    "xid/nvtrust124_dmesg_nvswitch_sxid22013.log",
    "xid/ogkm1150_kernel_xid45_after_xid145_149_nvlink.log",
})
