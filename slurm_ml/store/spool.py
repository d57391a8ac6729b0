"""A durable local spool so that no record is lost while PostgreSQL is down.

``SpoolingStore`` wraps any ``Store``. A write that raises ``StoreUnavailable``
is appended to ``<spool_dir>/spool.jsonl`` (one JSON record per line, fsync'ed)
and the call returns ``WriteOutcome.SPOOLED``. While the spool is non-empty,
new writes go to the spool too, so records reach the database in the order
they were written. ``drain()`` replays the spool in order; because every record
has an idempotency key, a record lands exactly once even if a drain is
interrupted and rerun, an acknowledgement was lost, or it was spooled twice.

Concurrency: appends and the final rewrite of the file take a short exclusive
``flock`` on ``.append.lock``; a drain holds ``.drain.lock`` for its whole run,
so at most one process drains at a time and appenders (e.g. several prologs on
one node) are never blocked for longer than a file append. Damaged lines (a
torn write after a crash) and records the database refuses outright are moved
to ``rejected.jsonl`` with a warning instead of blocking the drain forever.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from slurm_ml.store.errors import SpoolError, StoreIntegrityError, StoreUnavailable
from slurm_ml.store.protocol import OneWritePath, Store, WriteOutcome, write_record
from slurm_ml.store.records import (
    AuditEntry,
    BudgetSnapshot,
    GpuMemProfile,
    HealthEvent,
    JobGpuStats,
    ReconcilerDecision,
    Record,
    UtilSample,
    record_from_json,
    record_to_json,
)

logger = logging.getLogger(__name__)

SPOOL_FILE = "spool.jsonl"
REJECTED_FILE = "rejected.jsonl"
_APPEND_LOCK = ".append.lock"
_DRAIN_LOCK = ".drain.lock"
_FORMAT_VERSION = 1


def kv(event: str, **fields: object) -> str:
    """``event=... key=value ...`` log text; values with spaces or quotes are JSON-quoted."""
    parts = [f"event={event}"]
    for name, value in fields.items():
        text = str(value)
        if not text or any(c.isspace() or c in '"=' for c in text):
            text = json.dumps(text)
        parts.append(f"{name}={text}")
    return " ".join(parts)


def encode_line(record: Record) -> bytes:
    """One spool line: a versioned JSON object ending in a newline (no other newlines)."""
    doc = {"v": _FORMAT_VERSION, "kind": record.KIND, "record": record_to_json(record)}
    return (json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n").encode()


def decode_line(raw: bytes) -> Record:
    """Parse one spool line; ValueError for anything damaged or unknown."""
    try:
        doc: Any = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("v") != _FORMAT_VERSION:
        raise ValueError("not a spool record of a known format version")
    kind, data = doc.get("kind"), doc.get("record")
    if not isinstance(kind, str) or not isinstance(data, dict):
        raise ValueError("spool record lacks kind or record")
    return record_from_json(kind, data)


@dataclass(frozen=True, slots=True)
class DrainResult:
    """What one ``drain()`` did.

    ``landed``: inserted now; ``duplicates``: already in the database (an earlier,
    interrupted drain or a lost acknowledgement); ``remaining``: lines still
    spooled (the store went away again, or another process is draining);
    ``rejected``: refused by the database; ``corrupt``: unreadable lines. The
    last two were moved to ``rejected.jsonl``.
    """

    landed: int
    duplicates: int
    remaining: int
    rejected: int = 0
    corrupt: int = 0


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


@contextlib.contextmanager
def _flock(path: Path, *, blocking: bool = True) -> Iterator[bool]:
    """Exclusive flock on ``path``; yields False if non-blocking and already held."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            got = True
        except BlockingIOError:
            got = False
        yield got
    finally:
        os.close(fd)  # closing the descriptor releases the lock


class _Stop(Exception):
    """The store went away mid-drain: keep the rest for next time."""


class Spool:
    """The spool directory: ``spool.jsonl``, ``rejected.jsonl`` and the lock files."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.path = self.directory / SPOOL_FILE
        self.rejected_path = self.directory / REJECTED_FILE

    def _ensure_dir(self) -> None:
        if not self.directory.is_dir():
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            _fsync_dir(self.directory.parent)

    # --- appending ---

    def append(self, record: Record) -> None:
        """Durably append one record (file fsync'ed; directory too when the file is new)."""
        line = encode_line(record)
        try:
            self._ensure_dir()
            with _flock(self.directory / _APPEND_LOCK):
                self._append_locked(self.path, [line])
        except OSError as exc:
            raise SpoolError(f"cannot append to spool {self.path}: {exc}") from exc

    def _append_locked(self, path: Path, lines: list[bytes]) -> None:
        existed = path.exists()
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            data = b"".join(lines)
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                # A torn line from a crash: end it, so it stays one (skipped) line
                # instead of swallowing this record.
                data = b"\n" + data
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        if not existed:
            _fsync_dir(path.parent)

    # --- inspecting ---

    def has_pending(self) -> bool:
        """True while anything (even a damaged line) waits in the spool."""
        try:
            return self.path.stat().st_size > 0
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise SpoolError(f"cannot read spool {self.path}: {exc}") from exc

    def pending_count(self) -> int:
        """Number of non-blank lines waiting in the spool."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return 0
        except OSError as exc:
            raise SpoolError(f"cannot read spool {self.path}: {exc}") from exc
        return sum(1 for line in data.split(b"\n") if line.strip())

    def records(self) -> list[Record]:
        """The readable records waiting in the spool, in order (damaged lines left out)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise SpoolError(f"cannot read spool {self.path}: {exc}") from exc
        out: list[Record] = []
        for line in data.split(b"\n"):
            if line.strip():
                with contextlib.suppress(ValueError):
                    out.append(decode_line(line))
        return out

    # --- draining ---

    def drain(self, deliver: Callable[[Record], WriteOutcome]) -> DrainResult:
        """Replay the spool in order through ``deliver`` and drop what landed.

        Returns at once (everything counted as remaining) if another process is
        draining. Errors other than StoreUnavailable/StoreIntegrityError propagate
        after the progress made so far has been saved.
        """
        try:
            self._ensure_dir()
            with _flock(self.directory / _DRAIN_LOCK, blocking=False) as got:
                if not got:
                    return DrainResult(0, 0, self.pending_count())
                return self._drain_locked(deliver)
        except OSError as exc:
            raise SpoolError(f"cannot drain spool {self.path}: {exc}") from exc

    def _drain_locked(self, deliver: Callable[[Record], WriteOutcome]) -> DrainResult:
        with _flock(self.directory / _APPEND_LOCK):
            try:
                fh = self.path.open("rb")
            except FileNotFoundError:
                return DrainResult(0, 0, 0)
        counts = {"landed": 0, "duplicates": 0, "rejected": 0, "corrupt": 0}
        rejects: list[bytes] = []
        offset = 0
        remaining: int | None = None
        with fh:
            try:
                while True:
                    # Replay complete lines without the append lock, so appenders never wait
                    # on the database. A line without its newline may still be being written.
                    fh.seek(offset)
                    for raw in iter(fh.readline, b""):
                        if not raw.endswith(b"\n"):
                            break
                        self._replay(raw, deliver, counts, rejects)
                        offset += len(raw)
                    with _flock(self.directory / _APPEND_LOCK):
                        fh.seek(offset)
                        rest = fh.read()
                        if b"\n" in rest:
                            continue  # more was appended meanwhile: replay it too
                        if rest.strip():
                            # No writer is active under the lock, so this is a torn write.
                            self._note_corrupt(rest, offset, "torn line at end of spool")
                            counts["corrupt"] += 1
                            rejects.append(rest + b"\n")
                            offset += len(rest)
                        remaining = self._compact(fh, offset, rejects)
                        break
            except _Stop:
                pass
            finally:
                if remaining is None:  # stopped early or failed: save the progress made
                    with _flock(self.directory / _APPEND_LOCK):
                        remaining = self._compact(fh, offset, rejects)
        return DrainResult(
            landed=counts["landed"],
            duplicates=counts["duplicates"],
            remaining=remaining,
            rejected=counts["rejected"],
            corrupt=counts["corrupt"],
        )

    def _replay(
        self,
        raw: bytes,
        deliver: Callable[[Record], WriteOutcome],
        counts: dict[str, int],
        rejects: list[bytes],
    ) -> None:
        if not raw.strip():
            return
        try:
            record = decode_line(raw)
        except ValueError as exc:
            self._note_corrupt(raw, None, str(exc))
            counts["corrupt"] += 1
            rejects.append(raw)
            return
        try:
            outcome = deliver(record)
        except StoreUnavailable as exc:
            logger.warning(
                "%s",
                kv("spool_drain_paused", spool=self.path, key=record.idempotency_key, error=exc),
            )
            raise _Stop from exc
        except StoreIntegrityError as exc:
            logger.warning(
                "%s",
                kv(
                    "spool_record_rejected",
                    spool=self.path,
                    kind=record.KIND,
                    key=record.idempotency_key,
                    moved_to=self.rejected_path,
                    error=exc,
                ),
            )
            counts["rejected"] += 1
            rejects.append(raw)
            return
        if outcome == WriteOutcome.DUPLICATE:
            counts["duplicates"] += 1
        else:
            counts["landed"] += 1

    def _note_corrupt(self, raw: bytes, offset: int | None, why: str) -> None:
        logger.warning(
            "%s",
            kv(
                "spool_line_corrupt",
                spool=self.path,
                offset="" if offset is None else offset,
                bytes=len(raw),
                moved_to=self.rejected_path,
                error=why,
            ),
        )

    def _compact(self, fh: IO[bytes], offset: int, rejects: list[bytes]) -> int:
        """Under the append lock: set rejects aside, keep only the unreplayed tail.

        The tail goes to a temp file that atomically replaces the spool, so a crash
        at any point leaves either the old spool (replayed again: duplicates only)
        or the new one — never a lost record.
        """
        if rejects:
            self._append_locked(self.rejected_path, rejects)
            rejects.clear()
        try:
            same_file = os.stat(self.path).st_ino == os.fstat(fh.fileno()).st_ino
        except FileNotFoundError:
            same_file = False
        if not same_file:  # only possible if something outside this class touched the spool
            logger.error("%s", kv("spool_replaced_during_drain", spool=self.path))
            return self.pending_count()
        fh.seek(offset)
        rest = fh.read()
        remaining = sum(1 for line in rest.split(b"\n") if line.strip())
        if not rest.strip():
            self.path.unlink()
            _fsync_dir(self.directory)
        elif offset:
            tmp = self.directory / f".{SPOOL_FILE}.{os.getpid()}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                _write_all(fd, rest)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
            _fsync_dir(self.directory)
        return remaining


class SpoolingStore(OneWritePath):
    """A ``Store`` that never loses a write to an outage: it spools, then ``drain()``s.

    Whoever owns it must call ``drain()`` regularly (the daemon does so every
    cycle): while anything is spooled, every write is spooled too, to keep order.
    Reads go straight to the wrapped store and do not see spooled records.
    """

    def __init__(self, inner: Store, spool_dir: str | os.PathLike[str]) -> None:
        if isinstance(inner, SpoolingStore):
            raise TypeError("SpoolingStore must wrap a real store, not another SpoolingStore")
        self._inner = inner
        self._spool = Spool(spool_dir)

    @property
    def spool(self) -> Spool:
        return self._spool

    @property
    def inner(self) -> Store:
        return self._inner

    def has_pending(self) -> bool:
        return self._spool.has_pending()

    def _write(self, record: Record) -> WriteOutcome:
        if self._spool.has_pending():
            self._spool.append(record)
            logger.debug(
                "%s",
                kv(
                    "store_write_spooled",
                    reason="spool_not_empty",
                    kind=record.KIND,
                    key=record.idempotency_key,
                    spool=self._spool.path,
                ),
            )
            return WriteOutcome.SPOOLED
        try:
            return write_record(self._inner, record)
        except StoreUnavailable as exc:
            self._spool.append(record)
            logger.warning(
                "%s",
                kv(
                    "store_write_spooled",
                    reason="store_unavailable",
                    kind=record.KIND,
                    key=record.idempotency_key,
                    spool=self._spool.path,
                    error=exc,
                ),
            )
            return WriteOutcome.SPOOLED

    def drain(self) -> DrainResult:
        """Replay the spool into the wrapped store; safe to call at any time, repeatedly."""
        if not self._spool.has_pending():
            return DrainResult(0, 0, 0)
        result = self._spool.drain(lambda record: write_record(self._inner, record))
        logger.info(
            "%s",
            kv(
                "spool_drained",
                spool=self._spool.path,
                landed=result.landed,
                duplicates=result.duplicates,
                remaining=result.remaining,
                rejected=result.rejected,
                corrupt=result.corrupt,
            ),
        )
        return result

    def recent_health_events(
        self, node: str | None = None, since: datetime | None = None, limit: int = 1000
    ) -> list[HealthEvent]:
        return self._inner.recent_health_events(node, since, limit)

    def job_gpu_stats_for(self, user: str, job_name: str, limit: int = 20) -> list[JobGpuStats]:
        return self._inner.job_gpu_stats_for(user, job_name, limit)

    def job_gpu_stats_of(self, job_id: int) -> list[JobGpuStats]:
        return self._inner.job_gpu_stats_of(job_id)

    def decisions_for_job(self, job_id: int) -> list[ReconcilerDecision]:
        return self._inner.decisions_for_job(job_id)

    def requeues_for(self, job_id: int) -> list[ReconcilerDecision]:
        return self._inner.requeues_for(job_id)

    def audit_entries(self, since: datetime | None = None) -> list[AuditEntry]:
        return self._inner.audit_entries(since)

    def util_samples_for(self, job_id: int, since: datetime | None = None) -> list[UtilSample]:
        return self._inner.util_samples_for(job_id, since)

    def budget_snapshots(
        self, account: str | None = None, since: datetime | None = None
    ) -> list[BudgetSnapshot]:
        return self._inner.budget_snapshots(account, since)

    def latest_budget_snapshots(self) -> list[BudgetSnapshot]:
        return self._inner.latest_budget_snapshots()

    def gpu_mem_profiles(self, runs: int = 20) -> list[GpuMemProfile]:
        return self._inner.gpu_mem_profiles(runs)

    def util_samples_since(
        self, since: datetime, job_ids: Collection[int] | None = None
    ) -> list[UtilSample]:
        return self._inner.util_samples_since(since, job_ids)

    def decisions_since(
        self, since: datetime, kinds: Collection[str] | None = None
    ) -> list[ReconcilerDecision]:
        return self._inner.decisions_since(since, kinds)

    def job_gpu_stats_since(self, since: datetime) -> list[JobGpuStats]:
        return self._inner.job_gpu_stats_since(since)

    def audit_by_keys(self, keys: Collection[str]) -> dict[str, AuditEntry]:
        return self._inner.audit_by_keys(keys)

    def health_events_since(
        self,
        since: datetime,
        check_ids: Collection[str] | None = None,
        limit: int = 10000,
    ) -> list[HealthEvent]:
        return self._inner.health_events_since(since, check_ids, limit)

    def close(self) -> None:
        self._inner.close()
