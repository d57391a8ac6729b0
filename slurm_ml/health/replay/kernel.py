"""GPU kernel messages that are not Xid lines, read by their text.

A GPU that falls off the bus, never initialises, or fails the driver's probe often logs
no ``Xid`` at all, only NVRM's own words and a PCI address:

* ``NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.``, or over two lines on older
  drivers, ``NVRM: The NVIDIA GPU 0000:02:00.0 (PCI ID: 10de:1db4)`` then
  ``NVRM: installed in this system has fallen off the bus and is not responding to
  commands.``;
* ``NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x22:0x56:667)`` and
  ``NVRM: rm_init_adapter failed, device minor number 0``;
* ``NVRM: The NVIDIA probe routine failed for 1 device(s).`` and
  ``nvidia: probe of 0000:01:00.0 failed with error -1``;
* ``NVRM: GPU 0000:01:00.0: GPU does not have the necessary power cables connected.``;
* InfoROM, PCIe AER and PCIe link-width messages naming an NVIDIA device.

Continuation lines: a message split over consecutive ``NVRM:`` lines names its GPU on
the first line only, so a line without an address takes the address of the ``NVRM:``
line before it, as long as no other line came between. Xid and SXid lines are read by
``replay.xid``, never here (an Xid 79 line also says "fallen off the bus"). Pure: text
in, events out; nothing here raises.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Final

from slurm_ml.health.replay.xid import line_time
from slurm_ml.health.snapshot import KernelEvent

__all__ = ["KINDS", "parse_kernel_events"]

#: kind → the text that marks it (case-insensitive). Order matters: first match wins.
_PATTERNS: Final[tuple[tuple[str, re.Pattern[str]], ...]] = (
    ("fallen_off_bus", re.compile(r"fallen off the bus|lost from the bus|NV_ERR_GPU_IS_LOST",
                                  re.IGNORECASE)),
    ("gsp_timeout", re.compile(r"_kgspLogXid119|\bGSP Timeout\b", re.IGNORECASE)),
    ("power_cables", re.compile(r"necessary power cables|insufficient (?:external )?power",
                                re.IGNORECASE)),
    ("init_failed", re.compile(r"RmInitAdapter failed|rm_init_adapter failed"
                               r"|failed to initiali[sz]e the NVIDIA (?:GPU|kernel module)"
                               r"|GPU \S+ failed to initiali[sz]e", re.IGNORECASE)),
    ("probe_failed", re.compile(r"probe routine (?:failed|was not called)"
                                r"|probe of \S+ failed with error|probe with driver nvidia failed"
                                r"|No NVIDIA graphics adapter (?:probed|found)", re.IGNORECASE)),
    ("reset_required", re.compile(r"\b(?:requires|needs) (?:a )?(?:GPU )?reset\b"
                                  r"|reset required", re.IGNORECASE)),
    ("inforom", re.compile(r"info ?rom\b.*\b(?:corrupt|invalid|fail)", re.IGNORECASE)),
    ("pcie_aer_fatal", re.compile(r"(?:AER|PCIe Bus Error).*(?:Uncorrect(?:ed|able) \(Fatal\)"
                                  r"|severity=(?:Uncorrected \()?Fatal|can't recover)",
                                  re.IGNORECASE)),
    ("pcie_aer_uncorrected", re.compile(r"(?:AER|PCIe Bus Error).*(?:Uncorrect(?:ed|able)"
                                        r"|Non-Fatal)", re.IGNORECASE)),
    ("pcie_aer_corrected", re.compile(r"(?:AER|PCIe Bus Error).*Correct(?:ed|able)",
                                      re.IGNORECASE)),
    ("pcie_link_limited", re.compile(r"available PCIe bandwidth, limited by", re.IGNORECASE)),
)
KINDS: Final = tuple(kind for kind, _ in _PATTERNS)

_NVRM = re.compile(r"\bNVRM: ")
_XID_LINE = re.compile(r"\bXid \(")
_SXID = re.compile(r"SXid \(([^()]{0,80})\)")
#: PCI addresses as the kernel prints them: "0000:3b:00.0", "PCI:0000:3b:00", "3b:00.0".
_ADDR = re.compile(r"(?<![0-9A-Za-z:])(?:PCI:)?([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}"
                   r"(?:\.[0-7])?|[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])(?![0-9A-Za-z])")
#: An AER report names the device that erred after "received:" (the port prints it);
#: "nvidia 0000:3b:00.0:" names it as the driver's own line.
_AER_SOURCE = re.compile(r"received: ?(?:id=)?((?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:"
                         r"[0-9a-fA-F]{2}\.[0-7])")
_DRIVER_DEVICE = re.compile(r"\bnvidia(?:-nvswitch\d*)? ((?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:"
                            r"[0-9a-fA-F]{2}\.[0-7]):")
#: Where a non-NVRM message starts (the time prefix is what comes before it).
_WHO = re.compile(r"\b(?:nvidia|pcieport|NVRM)\b", re.IGNORECASE)
_PCIE_KINDS = frozenset(k for k in KINDS if k.startswith("pcie_"))


def _address(line: str, kind: str) -> str | None:
    """The GPU's address on ``line``: the driver's device prefix, an AER source, else
    the first PCI address (the line's own, never a time such as 12:34:56)."""
    driver = _DRIVER_DEVICE.search(line)
    if driver is not None:
        return driver.group(1)
    if kind in _PCIE_KINDS:
        source = _AER_SOURCE.search(line)
        return source.group(1) if source else None
    nvrm = _NVRM.search(line)
    m = _ADDR.search(line, nvrm.end() if nvrm else 0)
    return m.group(1) if m else None


def _is_gpu_line(line: str, kind: str) -> bool:
    """PCIe messages count only when they name the NVIDIA driver (any device may log
    AER errors); every other kind is NVRM's or the nvidia driver's own text."""
    if kind in _PCIE_KINDS:
        return _DRIVER_DEVICE.search(line) is not None or "nvidia" in line.lower()
    return _NVRM.search(line) is not None or _DRIVER_DEVICE.search(line) is not None \
        or re.search(r"\bnvidia\b", line, re.IGNORECASE) is not None


#: "NVRM: GPU at PCI:0000:0b:00: GPU-<uuid>": the driver names the GPU of the report it is
#: printing; a GSP-timeout banner comes a few lines BEFORE it.
_GPU_AT = re.compile(r"NVRM: GPU at (?:PCI:)?(\S+?):? GPU-")


def _switch_kind(text: str) -> str:
    """An NVSwitch error is fatal when its text says "fatal" and not "non-fatal" (the
    kernel's SXid lines and Fabric Manager's "detected NVSwitch [non-]fatal error")."""
    fatal = (re.search(r"\bfatal\b", text, re.IGNORECASE) is not None
             and re.search(r"non-fatal", text, re.IGNORECASE) is None)
    return "nvswitch_fatal" if fatal else "nvswitch_sxid"


def parse_kernel_events(text: str) -> tuple[KernelEvent, ...]:
    """Every non-Xid GPU message in ``text`` (dmesg, journal, syslog or bare), in log order.

    NVSwitch ``SXid`` lines become ``nvswitch_sxid`` events (the switch's address; a
    line saying "Fatal" but not "Non-fatal" makes it ``nvswitch_fatal``)."""
    events: list[KernelEvent] = []
    carried: str | None = None  # the address of the NVRM line just before, for continuations
    waiting: list[int] = []  # events of this NVRM run still without an address
    for line in text.splitlines():
        nvrm = _NVRM.search(line)
        sxid = _SXID.search(line)
        if sxid is not None:
            events.append(KernelEvent(kind=_switch_kind(line),
                                      pci_bus_id=sxid.group(1).strip() or None,
                                      message=line[sxid.start():].strip()[:300],
                                      timestamp=line_time(line[:sxid.start()]).seconds))
            continue
        if _XID_LINE.search(line):
            carried = None
            waiting = []
            continue
        at = _GPU_AT.search(line)
        if at is not None and waiting:
            for i in waiting:
                events[i] = replace(events[i], pci_bus_id=at.group(1))
            waiting = []
        kind = next((k for k, rx in _PATTERNS if rx.search(line)), None)
        own = _address(line, kind or "")
        if kind is not None and _is_gpu_line(line, kind):
            bus = own if own is not None else (carried if nvrm else None)
            who = nvrm or _WHO.search(line)
            start = who.start() if who else 0
            message = line[nvrm.end():] if nvrm else line[start:]
            if bus is None and nvrm is not None:
                waiting.append(len(events))
            events.append(KernelEvent(kind=kind, pci_bus_id=bus, message=message.strip()[:300],
                                      timestamp=line_time(line[:start]).seconds))
        if nvrm is None:
            carried = None
            waiting = []
        elif own is not None:
            carried = own
    return tuple(events)


#: Fabric Manager (``nv-fabricmanager``, its systemd unit and start script) saying it
#: could not start or run: NVLink peer traffic through NVSwitches stays off until it does.
_FM_FAILED = re.compile(r"nvidia-fabricmanager\.service failed|fabric ?manager.*\bfailed\b"
                        r"|nv-fabricmanager.*\bfailed!|nvidia-fabricmanager.*status=\d+/FAILURE"
                        r"|fabricmanager.*(?:error|failed) (?:initializ|start)",
                        re.IGNORECASE)
#: "NV_WARN_NOTHING_TO_DO": no NVSwitch to manage (a PCIe or bridged box): the service
#: has nothing to do there; its failure is not a fault of the GPUs.
_FM_NOTHING = re.compile(r"NV_WARN_NOTHING_TO_DO", re.IGNORECASE)
_FM_MENTION = re.compile(r"fabric ?manager|nv-fabricmanager|\[(?:INFO|ERROR|WARNING)\] "
                         r"\[tid \d+\]", re.IGNORECASE)


def looks_like_fabricmanager_log(text: str) -> bool:
    """A Fabric Manager log, its journal or ``systemctl status`` output."""
    return _FM_MENTION.search(text) is not None


def parse_fabricmanager_log(text: str) -> tuple[KernelEvent, ...]:
    """Node-level events from a Fabric Manager log: ``fabricmanager_failed`` when it did
    not start or stopped with an error (unless it only had nothing to do, which is
    ``fabricmanager_idle``), and its NVSwitch error lines as ``nvswitch_fatal`` /
    ``nvswitch_sxid`` (``replay.xid.parse_fabricmanager_errors``)."""
    from slurm_ml.health.replay.xid import parse_fabricmanager_errors

    events: list[KernelEvent] = []
    nothing = _FM_NOTHING.search(text) is not None
    for line in text.splitlines():
        if _FM_FAILED.search(line):
            events.append(KernelEvent(kind="fabricmanager_idle" if nothing
                                      else "fabricmanager_failed", pci_bus_id=None,
                                      message=line.strip()[:300],
                                      timestamp=line_time(line).seconds))
            break  # one failure is the finding; the unit prints it several ways
    for sx in parse_fabricmanager_errors(text):
        events.append(KernelEvent(kind=_switch_kind(sx.message),
                                  pci_bus_id=sx.switch_pci, message=sx.message[:300],
                                  timestamp=sx.timestamp))
    return tuple(events)
