"""What a GPU field means, for judging an error read in its place.

A field is an *identity* (name, UUID, bus id, serial), a *health counter* or reading
(ECC, remapped rows, temperatures, clocks events, utilisation, memory), or a *mode or
capability*: a setting the driver reports (persistence, addressing mode, MIG, ECC mode,
virtualisation, accounting, compute mode, application clocks). An NVML error in place of
an identity or a health reading means the driver cannot read the GPU itself: the GPU is
in an error state. An error in place of a mode is weaker evidence: drivers answer
"Unknown Error" for a mode query they do not implement on a product (a real case: every
GPU of a healthy 8x RTX 4090 node on 535.154.05 reads ``Addressing Mode : Unknown
Error``, leptonai/gpud's testdata ``nvidia-smi-query.535.154.05.out.3.valid``). So the
checks take a mode that no GPU of the node can read as a driver quirk (a flag), and a
mode that one GPU cannot read while its peers can as that GPU's error state.

Keys are nvidia-smi's: the snake_case of a ``-q`` text label at the top of a GPU's block
(``Addressing Mode`` → ``addressing_mode``) or the ``-q -x`` tag, which is the same word
for these; and, for the live probe, the NVML calls that read a mode.
"""

from __future__ import annotations

__all__ = ["MODE_CALLS", "MODE_KEYS", "is_mode_call", "is_mode_key"]

#: Top-level fields of a GPU's ``nvidia-smi -q`` block (text label in snake_case, or the
#: XML tag) that report a mode, a setting or a capability, not the GPU's health.
MODE_KEYS: frozenset[str] = frozenset({
    "display_mode", "display_active", "display_attached", "persistence_mode",
    "addressing_mode", "mig_mode", "accounting_mode", "accounting_mode_buffer_size",
    "driver_model", "gpu_operation_mode", "gsp_firmware_version",
    "gpu_virtualization_mode", "ibmnpu", "compute_mode", "ecc_mode", "clock_policy",
    "applications_clocks", "default_applications_clocks", "deferred_clocks",
    "max_clocks", "max_customer_boost_clocks", "supported_clocks", "multigpu_board",
    "board_id", "module_id", "gpu_module_id", "c2c_mode", "gpu_c2c_mode",
    "power_smoothing", "workload_power_profiles",
})

#: NVML calls of the live probe that read a mode (same meaning as MODE_KEYS).
MODE_CALLS: frozenset[str] = frozenset({
    "nvmlDeviceGetEccMode", "nvmlDeviceGetMigMode", "nvmlDeviceGetPersistenceMode",
    "nvmlDeviceGetComputeMode", "nvmlDeviceGetDisplayMode", "nvmlDeviceGetDisplayActive",
    "nvmlDeviceGetAccountingMode", "nvmlDeviceGetVirtualizationMode",
    "nvmlDeviceGetDriverModel", "nvmlDeviceGetGpuOperationMode",
    "nvmlDeviceGetAddressingMode",
})


def is_mode_key(key: str) -> bool:
    """Whether the top-level ``-q`` field ``key`` (snake_case label or XML tag) is a mode."""
    return key in MODE_KEYS


def is_mode_call(call: str) -> bool:
    """Whether the NVML call ``call`` reads a mode."""
    return call in MODE_CALLS
