"""Kernel-log ``NVRM: Xid`` and NVSwitch ``SXid`` lines read back as events.

An Xid line is ``NVRM: Xid (<pci>): <code>, pid=<pid>, name=<process>, <message>``; ``pid``
and ``name`` are optional (old drivers and some events print neither, or only ``pid``),
and ``pid='<unknown>'`` means the driver did not know it. Lines that do not hold such an
event are ignored, so whole logs can be passed in; nothing here raises.

The time of a line comes from whatever precedes the event on that line:

===============================================  ==========================================
``[  123.456789]`` (plain ``dmesg``)              seconds since boot, as a float
``[Sun Feb 23 16:24:18 2025]`` (``dmesg -T``)    epoch seconds, the wall time read as UTC
``2024-11-15T05:39:15,491363+00:00`` (``dmesg    epoch seconds, with the printed offset
--time-format iso``, journald ``short-iso``)      (UTC when none is printed)
``Feb 23 16:24:18 host kernel:`` (syslog)        None: the year is not printed
nothing (``kernel: NVRM: …``, a bare line)       None
===============================================  ==========================================

A wall-clock time wins over a boot-relative one on the same line (``<iso> host kernel:
[ 12.3] NVRM: …``), and syslog lines carrying a ``[ 12.3]`` get the boot-relative time.
So ``timestamp`` is boot-relative for some logs and epoch for others: use
:func:`line_time` for the kind, or the fact that boot-relative values are far below 1e9.
``dmesg -T`` prints local time and may drift from the true time after a suspend; it is
read as UTC because the line carries no zone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone

from slurm_ml.health.snapshot import XidEvent

__all__ = [
    "LineTime",
    "SxidEvent",
    "caused_by_xids",
    "line_time",
    "parse_fabricmanager_errors",
    "parse_sxids",
    "parse_xids",
]

_MONTHS = {
    name: number
    for number, name in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"),
        start=1,
    )
}
_MON = "(" + "|".join(_MONTHS) + ")"
_DAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"

_XID = re.compile(r"NVRM: Xid \(([^()]{0,80})\): (\d{1,6})(?:,\s*|\s*$)(.*)")
_PID = re.compile(r"pid=([^,]*)(?:,\s*|$)")
_NAME = re.compile(r"name=([^,]*)(?:,\s*|$)")
_SXID = re.compile(
    r"(?:(nvidia-nvswitch\d{1,4}):\s*)?SXid \(([^()]{0,80})\): (\d{1,6})(?:,\s*|\s*$)(.*)"
)
_CAUSED_BY = re.compile(r"previous Xid (\d{1,6})")

_ISO = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?"
    r"(Z|[+-]\d{2}:?\d{2})?"
)
_CTIME = re.compile(
    rf"\[{_DAY}\s+{_MON}\s+(\d{{1,2}})\s+(\d{{2}}):(\d{{2}}):(\d{{2}})\s+(\d{{4}})\]"
)
#: Fabric Manager's ``[Feb 27 2025 15:10:02]``.
_FM_TIME = re.compile(rf"\[{_MON}\s+(\d{{1,2}})\s+(\d{{4}})\s+(\d{{2}}):(\d{{2}}):(\d{{2}})\]")
_BOOT = re.compile(r"\[\s*(\d{1,10}\.\d{1,9})\]")
_FM_ERROR = re.compile(r"detected NVSwitch ((?:non-)?fatal) error (\d{1,6})(.*)", re.IGNORECASE)
_FM_PCI = re.compile(r"pci bus id (\S+)")


@dataclass(frozen=True, slots=True)
class LineTime:
    """When a log line happened, as far as its prefix says."""

    seconds: float | None
    #: "epoch" (UTC seconds), "boot" (seconds since boot) or "none".
    kind: str


_NO_TIME = LineTime(None, "none")


@dataclass(frozen=True, slots=True)
class SxidEvent:
    """One NVSwitch error: a kernel ``SXid`` line or a Fabric Manager error line.

    The kernel prints one switch error as several lines with the same code (``Data {…}``,
    ``Non-fatal, Link 44 …``, ``Severity 0 …``); each line is one event here.
    """

    sxid: int
    switch_pci: str | None  # as the line names it: "PCI:0000:04:00.0", "00000000:86:00.0"
    message: str
    timestamp: float | None = None  # as for XidEvent: see the module docstring
    device: str | None = None  # "nvidia-nvswitch3"; None when the line does not say


def _epoch(
    when: tuple[int, int, int, int, int, int],
    fraction: str | None = None,
    offset: str | None = None,
) -> float | None:
    """Epoch seconds of (year, month, day, hour, minute, second); None when not a date."""
    try:
        zone = UTC
        if offset and offset != "Z":
            sign = -1 if offset[0] == "-" else 1
            digits = offset[1:].replace(":", "")
            zone = timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))
        moment = datetime(*when, tzinfo=zone)
    except (ValueError, OverflowError):
        return None
    return moment.timestamp() + (float("0." + fraction) if fraction else 0.0)


def line_time(prefix: str) -> LineTime:
    """The time printed in ``prefix`` (the text of a log line before the event)."""
    iso = _ISO.search(prefix)
    if iso:
        y, mo, d, h, mi, s, frac, off = iso.groups()
        seconds = _epoch((int(y), int(mo), int(d), int(h), int(mi), int(s)), frac, off)
        if seconds is not None:
            return LineTime(seconds, "epoch")
    ctime = _CTIME.search(prefix)
    if ctime:
        mon, d, h, mi, s, y = ctime.groups()
        seconds = _epoch((int(y), _MONTHS[mon], int(d), int(h), int(mi), int(s)))
        if seconds is not None:
            return LineTime(seconds, "epoch")
    fm = _FM_TIME.search(prefix)
    if fm:
        mon, d, y, h, mi, s = fm.groups()
        seconds = _epoch((int(y), _MONTHS[mon], int(d), int(h), int(mi), int(s)))
        if seconds is not None:
            return LineTime(seconds, "epoch")
    boot = _BOOT.search(prefix)
    if boot:
        return LineTime(float(boot.group(1)), "boot")
    return _NO_TIME


def parse_xids(text: str) -> tuple[XidEvent, ...]:
    """Every ``NVRM: Xid`` event in ``text``, in log order."""
    events: list[XidEvent] = []
    for line in text.splitlines():
        match = _XID.search(line)
        if not match:
            continue
        pci, code, rest = match.groups()
        pid: int | None = None
        pid_match = _PID.match(rest)
        if pid_match:
            raw = pid_match.group(1)
            pid = int(raw) if raw.isdecimal() and raw.isascii() else None
            rest = rest[pid_match.end() :]
            name_match = _NAME.match(rest)
            if name_match:
                rest = rest[name_match.end() :]
        events.append(
            XidEvent(
                xid=int(code),
                pci_bus_id=pci.strip() or None,
                message=rest.strip(),
                timestamp=line_time(line[: match.start()]).seconds,
                pid=pid,
            )
        )
    return tuple(events)


def caused_by_xids(event: XidEvent) -> tuple[int, ...]:
    """Xid codes the message blames, e.g. Xid 45 "… caused by previous Xid 149" → (149,).

    Xid 45 (channel teardown) is on most ignore lists, but the Xid that caused it may not
    be: a check that ignores 45 should still look at what this returns.
    """
    return tuple(int(code) for code in _CAUSED_BY.findall(event.message))


def parse_sxids(text: str) -> tuple[SxidEvent, ...]:
    """Every kernel ``SXid`` line (``nvidia-nvswitchN: SXid (PCI:…): <code>, …``)."""
    events: list[SxidEvent] = []
    for line in text.splitlines():
        match = _SXID.search(line)
        if not match:
            continue
        device, pci, code, message = match.groups()
        events.append(
            SxidEvent(
                sxid=int(code),
                switch_pci=pci.strip() or None,
                message=message.strip(),
                timestamp=line_time(line[: match.start()]).seconds,
                device=device,
            )
        )
    return tuple(events)


def parse_fabricmanager_errors(text: str) -> tuple[SxidEvent, ...]:
    """Fabric Manager log lines ``detected NVSwitch [non-]fatal error <sxid> … pci bus id …``.

    The message keeps the severity word first ("non-fatal error 12028 on fid 0 …").
    """
    events: list[SxidEvent] = []
    for line in text.splitlines():
        match = _FM_ERROR.search(line)
        if not match:
            continue
        severity, code, rest = match.groups()
        pci = _FM_PCI.search(rest)
        events.append(
            SxidEvent(
                sxid=int(code),
                switch_pci=pci.group(1) if pci else None,
                message=f"{severity} error {code}{rest}".strip(),
                timestamp=line_time(line[: match.start()]).seconds,
            )
        )
    return tuple(events)
