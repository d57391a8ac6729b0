"""GPU memory health: ECC counters, row remapping (Ampere+), page retirement (pre-Ampere)."""

from __future__ import annotations

from slurm_ml.health.checks._common import Out, label, num, unsupported
from slurm_ml.health.checks.findings import Severity
from slurm_ml.health.snapshot import Gpu, RemappedRows, RetiredPages

S = Severity


def ecc_volatile(gpu: Gpu, out: Out) -> None:
    """Uncorrectable ECC errors since the driver loaded: > 0 drains (DCGM FAIL, GCM
    CRITICAL, research §2.4; docs/design.md)."""
    value = gpu.ecc.volatile_uncorrected
    if unsupported(value):
        return  # no ECC on this device, or MIG hides the counter
    n = num(value)
    if n is None:
        if gpu.ecc_enabled is not False:  # ECC switched off: no counter to read
            out.miss("ecc.volatile_uncorrected", gpu, "ecc.volatile_uncorrected")
        return
    if n > 0:
        out.add("ecc.volatile_uncorrected", S.DRAIN_NOW, gpu,
                f"{label(gpu)} has {n} uncorrectable ECC error(s) since the driver loaded; "
                f"drain, reset the GPU, and check its row remapping before resuming.",
                f"{n} uncorrectable ECC", volatile_uncorrected=n,
                aggregate_uncorrected=num(gpu.ecc.aggregate_uncorrected))


def ecc_aggregate(gpu: Gpu, prev: Gpu, out: Out) -> None:
    """Lifetime counters that grew since the previous snapshot (flagged only)."""
    th = out.th
    for field_name, limit, kind in (
        ("aggregate_uncorrected", th.ecc_aggregate_uncorrected_delta, "uncorrectable"),
        ("aggregate_corrected", th.ecc_aggregate_corrected_delta, "correctable"),
    ):
        now_v, then_v = getattr(gpu.ecc, field_name), getattr(prev.ecc, field_name)
        if unsupported(now_v) or unsupported(then_v):
            continue
        now, then = num(now_v), num(then_v)
        if now is None or then is None:
            out.miss("ecc.aggregate", gpu, f"ecc.{field_name}")
            continue
        delta = now - then
        if delta >= limit:  # a negative delta is a counter reset, not an error
            out.add(f"ecc.{field_name}", S.FLAG, gpu,
                    f"{label(gpu)} logged {delta} {kind} ECC error(s) since the previous "
                    f"check ({then} -> {now} lifetime); watch it and compare with row "
                    f"remapping.", f"+{delta} {kind} ECC",
                    delta=delta, previous=then, current=now, threshold=limit)


def remap(gpu: Gpu, out: Out) -> None:
    """Row remapping (``nvmlDeviceGetRemappedRows``): failure drains now, pending drains
    after the job (Thresholds.remap_pending), many uncorrectable remaps are flagged."""
    rows = gpu.remapped_rows
    if rows is None:
        out.miss("remap", gpu, "remapped_rows")
        return
    if not isinstance(rows, RemappedRows):
        return  # NOT_SUPPORTED: pre-Ampere, or MIG with active instances
    unc = num(rows.uncorrectable)
    if rows.failure is True:
        out.add("remap.failure", S.DRAIN_NOW, gpu,
                f"{label(gpu)} failed to remap a memory row (no spare rows left in the bank, "
                f"{unc if unc is not None else 'unknown'} uncorrectable remaps); drain it and "
                f"open an RMA.", "row remap failed", uncorrectable=unc,
                correctable=num(rows.correctable))
    elif rows.failure is None:
        out.miss("remap", gpu, "remapped_rows.failure")
    if rows.pending is True:
        out.add("remap.pending", out.th.remap_pending, gpu,
                f"{label(gpu)} has a row remap pending ({unc if unc is not None else 'unknown'}"
                f" uncorrectable remaps); drain after the job and reset the GPU to apply it, "
                f"then resume.", "row remap pending", uncorrectable=unc,
                correctable=num(rows.correctable))
    elif rows.pending is None:
        out.miss("remap", gpu, "remapped_rows.pending")
    if unc is not None and unc >= out.th.remap_uncorrectable_flag:
        out.add("remap.uncorrectable", S.FLAG, gpu,
                f"{label(gpu)} has {unc} uncorrectable row remaps (flag at "
                f"{out.th.remap_uncorrectable_flag}); plan its replacement.",
                f"{unc} uncorrectable remaps", uncorrectable=unc,
                threshold=out.th.remap_uncorrectable_flag)


def retired_pages(gpu: Gpu, out: Out) -> None:
    """Page retirement (Volta/Turing): SBE+DBE pages >= Thresholds.retired_pages_max
    drains now, a pending retirement drains after the job."""
    pages = gpu.retired_pages
    if pages is None:
        out.miss("retired_pages", gpu, "retired_pages")
        return
    if not isinstance(pages, RetiredPages):
        return  # NOT_SUPPORTED: Ampere and later remap rows instead
    sbe, dbe = num(pages.single_bit), num(pages.double_bit)
    total = (sbe or 0) + (dbe or 0)
    limit = out.th.retired_pages_max
    unread = [f"retired_pages.{name}" for name, v in
              (("single_bit", pages.single_bit), ("double_bit", pages.double_bit))
              if v is None]
    if total >= limit:
        out.add("retired_pages.count", S.DRAIN_NOW, gpu,
                f"{label(gpu)} has retired {total} memory pages ({sbe} single-bit, {dbe} "
                f"double-bit), at or over the limit of {limit}; drain it and open an RMA.",
                f"{total} retired pages", single_bit=sbe, double_bit=dbe, threshold=limit)
    elif unread:
        out.miss("retired_pages", gpu, *unread)
    if pages.pending is True:
        out.add("retired_pages.pending", out.th.retired_pages_pending, gpu,
                f"{label(gpu)} has a page retirement pending ({total} pages retired so far); "
                f"drain after the job and reset the GPU to apply it, then resume.",
                "page retirement pending", single_bit=sbe, double_bit=dbe)
    elif pages.pending is None:
        out.miss("retired_pages", gpu, "retired_pages.pending")
