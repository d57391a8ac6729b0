"""Run the GPU probe under a hard deadline, so that a hook never hangs on it.

A hung NVML call cannot be interrupted from Python; the probe runs in a daemon thread
and the hook stops waiting for it when the deadline passes (the thread is abandoned and
dies with the process). ``NvmlProbe`` has its own watchdog and normally returns a
snapshot with ``errors`` first, which the checks turn into ``probe.error`` (drain). This
outer deadline is the last resort: the probe said nothing, so the hook has no evidence
about the GPUs and records a ``probe.timeout`` FLAG instead of draining.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from slurm_ml.health.checks import Finding, Severity
from slurm_ml.health.probe import GpuProbe
from slurm_ml.health.snapshot import NodeSnapshot

__all__ = ["DeadlineExceeded", "call_with_deadline", "take_snapshot"]

T = TypeVar("T")


class DeadlineExceeded(TimeoutError):
    """The call did not return in time; it may still be running in its thread."""


@dataclass
class _Box(Generic[T]):
    value: T | None = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


def call_with_deadline(fn: Callable[[], T], timeout_s: float, *, name: str = "deadline") -> T:
    """``fn()``, or DeadlineExceeded after ``timeout_s``; ``fn``'s own exception is
    re-raised."""
    box: _Box[T] = _Box()

    def target() -> None:
        try:
            box.value = fn()
        except BaseException as exc:  # handed to the caller
            box.error = exc
        finally:
            box.done.set()

    threading.Thread(target=target, name=name, daemon=True).start()
    if not box.done.wait(max(0.0, timeout_s)):
        raise DeadlineExceeded(f"{name} did not return within {timeout_s:g} s")
    if box.error is not None:
        raise box.error
    return box.value  # type: ignore[return-value]  # set whenever error is None


def take_snapshot(probe: GpuProbe, node: str, gpus: Collection[int] | None,
                  timeout_s: float) -> tuple[NodeSnapshot | None, Finding | None]:
    """The probe's snapshot, or None and a FLAG finding saying why there is none
    (``probe.timeout``: no answer within ``timeout_s``; ``probe.failed``: it raised)."""
    try:
        snap = call_with_deadline(lambda: probe.snapshot(node, gpus), timeout_s,
                                  name=f"gpu-probe {node}")
    except DeadlineExceeded:
        return None, Finding(
            "probe.timeout", Severity.FLAG, None,
            f"The GPU probe on {node} did not answer within {timeout_s:g} s; no GPU was "
            f"checked. A wedged NVML looks like this: check nvidia-smi and dmesg.",
            {"timeout_s": timeout_s}, f"no answer in {timeout_s:g}s")
    except Exception as exc:
        text = " ".join(str(exc).split())[:300] or type(exc).__name__
        return None, Finding(
            "probe.failed", Severity.FLAG, None,
            f"The GPU probe on {node} failed ({text}); no GPU was checked.",
            {"error": text, "type": type(exc).__name__}, "probe failed")
    return snap, None
