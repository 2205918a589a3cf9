"""The checkpoint of prepared claims: a snapshot file and an append-only log beside it,
both checksummed, shared safely by two plugin instances during a rolling update.

A write costs what it changes: it appends one line to the log with the records it changed
or removed (:mod:`drakit.plugin.claims.checkpointlog`) and makes it durable (``fdatasync``);
the snapshot is rewritten only to compact the log (in the background, once the log outgrows
:data:`COMPACT_MIN_BYTES` and :data:`COMPACT_RATIO` times the snapshot), for the first
write, and after a crash left a torn log tail.

Snapshot ``<path>`` (mode 0600; canonical JSON: sorted keys, no spaces)::

    {"checksum": "<sha256 hex of the canonical JSON of {claims, log, unprepared}>",
     "claims": {"<claim UID>": ClaimRecord, ...}, "log": N,
     "unprepared": {"<claim UID>": UnpreparedRecord, ...}, "version": 3}

The content is the snapshot's with the lines of its log ``<path>.<N>.log`` applied in order.
Compaction creates log N+1 (empty), renames a new snapshot naming it into place (the
rename and the new log's directory entry made durable by one directory fsync), then removes
log N: a kill at any point leaves either the old snapshot with its complete log or the new
one, so every claim is in its old or its new record. A snapshot whose log is missing is an
error, not an empty log.

Versions 1 and 2 (the single file of earlier drakit releases: no ``log``; version 1 without
``unprepared``, its checksum over ``claims`` alone) are read, and migrated by
:meth:`~Checkpoint.load` or the first write: a version 3 snapshot of the same content
replaces the file atomically, so a kill during the migration leaves the old file or the
migrated one. An older drakit reading version 3 stops with an "unsupported format version"
error rather than missing the log.
Any valid layout of the same content is read (the checksum is taken over the parsed content).

A claim goes through ``PrepareStarted`` (recorded before any driver hook runs, with the
instance that runs it as ``owner``, so a crash can be rolled back) and ``PrepareCompleted``
(recorded before the kubelet gets its answer). Unprepare works from the record alone (it
holds the allocation results and the opaque configs) and leaves an ``unprepared`` mark for a
while, so a stale prepare retry can be told from a real one (see
:mod:`drakit.plugin.claims.lifecycle`).

Records are frozen pydantic models: a change replaces a record (``model_copy(update=...)``),
it never edits one, so records are shared between memory, callers and changes without
copies, and a write finds the records it changed by identity. Their JSON fields
(``config``, ``edits``, ``state``...) must not be edited in place.

A corrupt or unreadable snapshot or log is never reset: every operation raises
:class:`CheckpointError` naming the problem until it is fixed. A write that fails for want
of room (a full disk or quota) leaves the files as they were, part of a log line taken back
by ``ftruncate``, and raises :class:`CheckpointFullError`: the next write tries again. Any
other write error raises :class:`CheckpointWriteError`.

Two instances (a DaemonSet rolling update) share the files: every change runs under an
``flock`` of ``<path>.lock`` and first catches up with the files. A change is seen by
``os.stat`` of the snapshot and ``os.fstat`` of the log: compaction renames a new snapshot
into place and this instance keeps the snapshot and the log it last read open, so their
inodes cannot be reused; a different inode at the path, or a different size or mtime of the
same inode (an edit in place), means "read the snapshot again"; a log that grew is read from
where this instance stopped (a log only grows; one that shrank is read again whole). Each
instance holds an owner lock (:mod:`drakit.plugin.claims.owners`) for its lifetime.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from drakit.cdi.atomic import atomic_write
from drakit.plugin.claims import checkpointlog
from drakit.plugin.claims.checkpointlog import canonical
from drakit.plugin.claims.owners import OwnerError, OwnerLocks

log = logging.getLogger(__name__)

FORMAT_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
#: Seconds an ``unprepared`` mark is kept. A stale prepare is a call the kubelet sent
#: before the unprepare that reaches the plugin after it; the kubelet bounds each
#: NodePrepareResources call with a deadline well under a minute, so ten minutes is ample.
UNPREPARED_TTL = 600.0
#: At most this many ``unprepared`` marks are kept (the newest win); the limit bounds the
#: snapshot and the memory (128 marks are ~18 KB). 128 is above the kubelet's default of
#: 110 pods per node.
UNPREPARED_MAX = 128
#: The log is compacted once it is larger than both this many bytes and
#: :data:`COMPACT_RATIO` times the snapshot: reading the checkpoint at start-up then reads
#: at most about (1 + ratio) snapshots, and a compaction's cost (the whole snapshot) is
#: spread over at least as many bytes of appended changes as the snapshot has.
COMPACT_MIN_BYTES = 1 << 20
COMPACT_RATIO = 2
T = TypeVar("T")

_MISSING = (0, -1, 0)  # _seen when the file did not exist (no file has size -1)


class CheckpointError(Exception):
    """The checkpoint cannot be read or written; the message names the file and the problem."""


class CheckpointWriteError(CheckpointError):
    """The checkpoint cannot be written and the disk under it needs a person: the write
    failed with an error other than want of room (``EIO`` of a failing disk, ``EROFS``...),
    or what part of it got in could not be taken back. The message names the file and the
    error. Fatal to background work (:mod:`drakit.plugin.background`)."""


#: ``errno`` values of a write that failed for want of room: the file system or the quota
#: is full (write(2), fsync(2)).
NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT})


class CheckpointFullError(CheckpointError):
    """The checkpoint cannot be written for want of room (an errno of :data:`NO_ROOM`) and
    nothing of the change is in it: the files hold exactly what they held before (a part of
    a log line that got in was taken back, a new snapshot never replaced the old one). The
    message names the file and the error. The next write tries again: background work
    retries it; a kubelet call fails the claims of the change and the kubelet retries them.
    """


class PreparedDeviceRecord(BaseModel):
    """One prepared device: its allocation result (request, pool, device, shareID,
    adminAccess, consumedCapacity), owning plugin, the typed opaque config it was prepared
    with, CDI name and edits (so the CDI spec can be re-written from the checkpoint alone),
    the plugin's state for unprepare and the AllocatedDeviceStatus entry written for it."""

    model_config = ConfigDict(ser_json_inf_nan="constants", frozen=True)

    request: str
    pool: str
    device: str
    share_id: str | None = None
    admin_access: bool = False
    consumed_capacity: dict[str, str] = Field(default_factory=dict)
    plugin: str = ""
    config: dict[str, Any] | None = None
    cdi_name: str = ""
    cdi_device_ids: list[str] = Field(default_factory=list)
    edits: dict[str, Any] = Field(default_factory=dict)
    state: dict[str, Any] = Field(default_factory=dict)
    status: dict[str, Any] | None = None


class ClaimRecord(BaseModel):
    """One claim in the checkpoint.

    ``owner`` is the instance that recorded ``PrepareStarted`` (see :attr:`Checkpoint.owner`);
    ``fingerprint`` identifies the allocation
    (:func:`drakit.plugin.claims.resourceclaim.allocation_fingerprint`);
    ``configs`` are the claim's opaque configs for this driver
    (``status.allocation.devices.config`` entries, class configs first).
    """

    model_config = ConfigDict(ser_json_inf_nan="constants", frozen=True)

    uid: str
    namespace: str
    name: str
    phase: Literal["PrepareStarted", "PrepareCompleted"] = "PrepareStarted"
    owner: str | None = None
    fingerprint: str | None = None
    devices: list[PreparedDeviceRecord] = Field(default_factory=list)
    configs: list[dict[str, Any]] = Field(default_factory=list)
    prepared_at: float = 0.0
    missing_since: float | None = None
    #: This driver's AllocatedDeviceStatus entries are owed to the API server: set in the
    #: write that records the claim ``PrepareCompleted`` (status writes on), cleared once an
    #: apply held (:mod:`drakit.plugin.claims.owedstatus`).
    status_owed: bool = False

    #: Fields left out of the file while at their default: the same content is the same
    #: bytes as before they existed, for older readers and for the checksum.
    OMIT_WHEN_DEFAULT: ClassVar[tuple[str, ...]] = ("status_owed",)


class UnpreparedRecord(BaseModel):
    """A claim unprepared recently: its allocation fingerprint (None: unknown, the claim was
    not prepared here), when (seconds since the epoch) and a digest of the claim's
    ``status.reservedFor`` as the last prepare read it (None: unknown). ``status_owed``: the
    removal of this driver's AllocatedDeviceStatus entries from the claim ``namespace/name``
    is owed to the API server (the mark is kept until it is done, past its age and count
    limits)."""

    model_config = ConfigDict(ser_json_inf_nan="constants", frozen=True)

    fingerprint: str | None = None
    at: float = 0.0
    reservations: str | None = None
    namespace: str | None = None
    name: str | None = None
    status_owed: bool = False

    OMIT_WHEN_DEFAULT: ClassVar[tuple[str, ...]] = ("namespace", "name", "status_owed")


@dataclass
class CheckpointState:
    """Everything in the checkpoint: prepared claims and recent ``unprepared`` marks, by
    claim UID."""

    claims: dict[str, ClaimRecord] = field(default_factory=dict)
    unprepared: dict[str, UnpreparedRecord] = field(default_factory=dict)

    def copy(self) -> CheckpointState:
        """Its own maps of the same (frozen) records."""
        return CheckpointState(dict(self.claims), dict(self.unprepared))


def _checksum(body: Any) -> str:
    return hashlib.sha256(canonical(body).encode()).hexdigest()


class Encoder:
    """Encodes a :class:`CheckpointState` as a snapshot (see the module docstring): one
    canonical encoding of ``{claims, log, unprepared}``, its checksum, and the version, in
    sorted-key order; the same bytes as ``json.dumps(sort_keys=True, separators=(",",
    ":"))`` of the whole document (version :data:`FORMAT_VERSION`).

    Each record's JSON is kept while the map holds the very same record object (records
    are frozen, so the same object has the same JSON): a compaction encodes only the records
    changed since the previous one. Not thread-safe (called under the lock)."""

    def __init__(self) -> None:
        self._claims: dict[str, tuple[BaseModel, str]] = {}
        self._unprepared: dict[str, tuple[BaseModel, str]] = {}

    def encode(self, state: CheckpointState, log: int) -> bytes:
        """The snapshot of ``state`` naming log number ``log``."""
        claims, self._claims = _members(state.claims, self._claims)
        marks, self._unprepared = _members(state.unprepared, self._unprepared)
        body = f'{{"claims":{{{claims}}},"log":{int(log)},"unprepared":{{{marks}}}}}'
        digest = hashlib.sha256(body.encode()).hexdigest()
        return f'{{"checksum":"{digest}",{body[1:-1]},"version":{FORMAT_VERSION}}}'.encode()


def _members(records: dict[str, Any], cache: dict[str, tuple[BaseModel, str]]
             ) -> tuple[str, dict[str, tuple[BaseModel, str]]]:
    """The ``"key":{record}`` members of ``records`` in sorted-key order, joined, and the
    cache of the next call."""
    new: dict[str, tuple[BaseModel, str]] = {}
    for key in sorted(records):
        rec = records[key]
        hit = cache.get(key)
        if hit is None or hit[0] is not rec:
            hit = (rec, f"{canonical(key)}:{canonical(_dump(rec))}")
        new[key] = hit
    return ",".join(member for _, member in new.values()), new


def _dump(rec: BaseModel) -> dict[str, Any]:
    """A record's JSON, without the fields of ``OMIT_WHEN_DEFAULT`` that hold their default."""
    doc = rec.model_dump(mode="json")
    for name in getattr(rec, "OMIT_WHEN_DEFAULT", ()):
        if doc.get(name) == type(rec).model_fields[name].default:
            del doc[name]
    return doc


def decode_snapshot(raw: bytes, path: Path) -> tuple[CheckpointState, int | None]:
    """The content of a snapshot file (version 1, 2 or 3, any JSON layout) and the number of
    its log (None: versions 1 and 2, which have none). Raises CheckpointError naming
    ``path`` and the problem (not JSON, a version not read here, a field of the wrong type,
    a checksum mismatch, a record that does not validate)."""
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"checkpoint {path}: not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise CheckpointError(f"checkpoint {path}: not a JSON object")
    version = doc.get("version")
    if version not in READABLE_VERSIONS or isinstance(version, bool):
        raise CheckpointError(
            f"checkpoint {path}: version: unsupported format version "
            f"{version!r} (this plugin reads {', '.join(map(str, READABLE_VERSIONS))})"
        )
    claims = doc.get("claims")
    if not isinstance(claims, dict):
        raise CheckpointError(f"checkpoint {path}: claims: not a JSON object")
    unprepared = doc.get("unprepared", {}) if version >= 2 else {}
    if not isinstance(unprepared, dict):
        raise CheckpointError(f"checkpoint {path}: unprepared: not a JSON object")
    log = doc.get("log") if version >= 3 else None
    if version >= 3 and (not isinstance(log, int) or isinstance(log, bool) or log < 1):
        raise CheckpointError(f"checkpoint {path}: log: not a positive integer: {log!r}")
    body: Any = claims if version == 1 else {"claims": claims, "unprepared": unprepared}
    if log is not None:
        body["log"] = log
    if doc.get("checksum") != _checksum(body):
        raise CheckpointError(f"checkpoint {path}: checksum mismatch (file corrupt)")
    try:
        return CheckpointState(
            {uid: ClaimRecord.model_validate(rec) for uid, rec in claims.items()},
            {uid: UnpreparedRecord.model_validate(u) for uid, u in unprepared.items()},
        ), log
    except ValidationError as e:
        raise CheckpointError(f"checkpoint {path}: claims: {e}") from None


def apply_changes(state: CheckpointState, payloads: list[dict[str, Any]], path: Path,
                  offset: int) -> CheckpointState:
    """``state`` (left as it is) with the log lines ``payloads`` applied in order: a new
    state sharing the unchanged records. Raises CheckpointError naming the log ``path``,
    the byte ``offset`` the lines were read from, and the record that does not validate."""
    claims, marks = dict(state.claims), dict(state.unprepared)
    parts: tuple[tuple[str, dict[str, Any], type[BaseModel]], ...] = (
        ("claims", claims, ClaimRecord), ("unprepared", marks, UnpreparedRecord))
    for payload in payloads:
        for key, records, model in parts:
            for uid, doc in payload[key].items():
                try:
                    if doc is None:
                        records.pop(uid, None)
                    else:
                        records[uid] = model.model_validate(doc)
                except ValidationError as e:
                    raise CheckpointError(f"checkpoint log {path} (from byte {offset}): "
                                          f"{key}: {uid}: {e}") from None
    return CheckpointState(claims, marks)


V = TypeVar("V")


class _Tracked(dict[str, V]):
    """A map given to a change: it notes every key set or removed through it, so a write
    compares only those with the map before (not every record held). A change that puts a
    map of its own in place of it is compared whole."""

    __slots__ = ("touched",)

    def __init__(self, base: dict[str, V]) -> None:
        super().__init__(base)
        self.touched: set[str] = set()

    def __setitem__(self, key: str, value: V) -> None:
        self.touched.add(key)
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        self.touched.add(key)

    def pop(self, key: str, *default: Any) -> Any:
        self.touched.add(key)
        return super().pop(key, *default)

    def popitem(self) -> tuple[str, V]:
        key, value = super().popitem()
        self.touched.add(key)
        return key, value

    def setdefault(self, key: str, default: Any = None) -> Any:
        self.touched.add(key)
        return super().setdefault(key, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def __ior__(self, other: Any) -> _Tracked[V]:  # type: ignore[override,misc]
        self.update(other)
        return self

    def clear(self) -> None:
        self.touched.update(self.keys())
        super().clear()


def _changed(before: dict[str, BaseModel], after: dict[str, BaseModel],
             touched: set[str] | None = None) -> list[tuple[str, str | None]]:
    """(UID, canonical JSON, or None when removed) of every record of ``after`` that is not
    the very object of ``before`` under its UID, and of every UID removed; only the UIDs of
    ``touched`` are compared when given (the others are the same)."""
    if touched is None:
        out: list[tuple[str, str | None]] = [
            (uid, canonical(_dump(rec))) for uid, rec in after.items()
            if before.get(uid) is not rec]
        out += [(uid, None) for uid in before if uid not in after]
        return out
    out = []
    for uid in touched:
        rec = after.get(uid)
        if rec is not before.get(uid):
            out.append((uid, None if rec is None else canonical(_dump(rec))))
    return out


class _Request(Generic[T]):
    """One caller's change waiting for (or done by) a group commit."""

    __slots__ = ("change", "done", "error", "result", "written")

    def __init__(self, change: Callable[[CheckpointState], T]) -> None:
        self.change = change
        self.result: T | None = None
        self.error: BaseException | None = None
        self.done = False
        self.written = False


class Checkpoint:
    """The prepared-claims checkpoint: the snapshot at ``path`` and its log
    ``<path>.<N>.log`` (see the module docstring); ``lock_path`` is the file locked (flock)
    around every change so two instances never interleave (default ``<path>.lock``).
    ``owner`` names this instance (default: a random id); owner lock files live in
    ``<path's dir>/owners/``.

    Thread-safe. Every read and change first checks the files (``os.stat`` / ``os.fstat``,
    see the module docstring) and reads only what changed (a new snapshot whole, the log
    from where it was last read), so another instance's change is never missed.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        lock_path: str | None = None,
        owner: str | None = None,
    ) -> None:
        self.path = Path(path)
        self.lock_path = Path(lock_path) if lock_path else self.path.with_name(
            self.path.name + ".lock"
        )
        self._lock_name = str(self.lock_path)
        self.owners_dir = self.path.parent / "owners"
        self._owners = OwnerLocks(self.owners_dir, owner)
        self._owner: str | None = None  # this instance's owner id once its lock is taken
        self._lock = threading.RLock()
        self._state = CheckpointState()
        # (st_ino, st_size, st_mtime_ns) of the snapshot whose content is in memory;
        # _MISSING when it was missing; None: read it again. _held keeps it open.
        self._seen: tuple[int, int, int] | None = None
        self._held: int | None = None
        # The log the snapshot in memory names (None: a version 1/2 file or none), kept
        # open; the bytes of it applied to memory (a line boundary) and its size when read.
        self._gen: int | None = None
        self._log: int | None = None
        self._log_end = 0
        self._log_size = 0
        self._snap_size = 0
        self.error: str | None = None
        #: Writes of changes (appends to the log, or whole snapshots when one is due).
        self.writes = 0
        #: Compactions (snapshots rewritten to empty the log, migration included).
        self.compactions = 0
        self._encoder = Encoder()
        self._queue_lock = threading.Lock()
        self._queue: list[_Request[Any]] = []
        self._compactor: threading.Thread | None = None

    def log_path(self, n: int) -> Path:
        """The path of log number ``n`` (``<path>.<n>.log``)."""
        return self.path.with_name(f"{self.path.name}.{int(n)}.log")

    # -- reading -------------------------------------------------------------------------

    def _parse(self, raw: bytes) -> tuple[CheckpointState, int | None]:
        return decode_snapshot(raw, self.path)

    def _refresh(self) -> None:
        """Bring memory up to date with the files: a snapshot read again only when it
        changed, the log from where it was last read."""
        try:
            for _ in range(5):
                if self._refresh_once():
                    return
            raise CheckpointError(f"checkpoint {self.path}: replaced again and again "
                                  f"while being read")
        except CheckpointError as e:
            self.error = str(e)
            raise

    def _refresh_once(self) -> bool:
        """One try of :meth:`_refresh`; False when the snapshot was replaced while it was
        read (or the log shrank): try again."""
        try:
            try:
                st = os.stat(self.path)
            except FileNotFoundError:
                if self._seen == _MISSING and self.error is None:
                    return True
                self._hold(None, _MISSING)
                self._hold_log(None, None)
                self._state, self.error, self._snap_size = CheckpointState(), None, 0
                return True
            if _key(st) == self._seen and self.error is None:
                return self._follow_log()
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                key = _key(os.fstat(fd))  # of the file read, if replaced since the stat
                with open(os.dup(fd), "rb") as f:
                    raw = f.read()
            except BaseException:
                os.close(fd)
                raise
        except OSError as e:
            raise CheckpointError(f"checkpoint {self.path}: unreadable: {e}") from None
        self._hold(fd, None)
        state, gen = self._parse(raw)
        log_fd, used, size = None, 0, 0
        if gen is not None:
            log_path = self.log_path(gen)
            try:
                log_fd = _open_log(log_path)
            except FileNotFoundError:
                if _stat_key(self.path) != key:
                    return False  # compacted meanwhile: that log is gone, read the new one
                raise CheckpointError(f"checkpoint {self.path}: its log {log_path} is "
                                      f"missing (file lost)") from None
            except OSError as e:
                raise CheckpointError(f"checkpoint log {log_path}: unreadable: {e}") from None
            try:
                data = _read_from(log_fd, 0)
                chunk = checkpointlog.parse(data, log_path, 0)
                state = apply_changes(state, chunk.payloads, log_path, 0)
            except BaseException as e:
                os.close(log_fd)
                if isinstance(e, checkpointlog.LogError):
                    raise CheckpointError(str(e)) from None
                if isinstance(e, OSError):
                    raise CheckpointError(
                        f"checkpoint log {log_path}: unreadable: {e}") from None
                raise
            used, size = chunk.used, len(data)
        self._hold_log(log_fd, gen)
        self._log_end, self._log_size, self._snap_size = used, size, len(raw)
        self._state, self.error, self._seen = state, None, key
        return True

    def _follow_log(self) -> bool:
        """Apply what was appended to the log since it was last read; False when the log
        shrank (a failed append taken back): read everything again."""
        if self._log is None or self._gen is None:
            return True
        path = self.log_path(self._gen)
        try:
            size = os.fstat(self._log).st_size
            if size == self._log_size:
                return True
            if size < self._log_end:
                self._seen = None
                return False
            data = _read_from(self._log, self._log_end)
        except OSError as e:
            raise CheckpointError(f"checkpoint log {path}: unreadable: {e}") from None
        try:
            chunk = checkpointlog.parse(data, path, self._log_end)
        except checkpointlog.LogError as e:
            raise CheckpointError(str(e)) from None
        if chunk.payloads:
            self._state = apply_changes(self._state, chunk.payloads, path, self._log_end)
        self._log_size = self._log_end + len(data)
        self._log_end += chunk.used
        return True

    def _hold(self, fd: int | None, seen: tuple[int, int, int] | None) -> None:
        """Keep ``fd`` (the snapshot now in memory) open instead of the previous one."""
        if self._held is not None:
            os.close(self._held)
        self._held, self._seen = fd, seen

    def _hold_log(self, fd: int | None, gen: int | None) -> None:
        """Keep ``fd`` (log ``gen``, the one the snapshot in memory names) open instead of
        the previous one."""
        if self._log is not None and self._log != fd:
            os.close(self._log)
        self._log, self._gen = fd, gen

    def load(self) -> None:
        """Read the checkpoint (a missing snapshot means empty), remove temp files and old
        logs a crash left (every write happens under the file lock, so none is in
        progress), and migrate a version 1 or 2 file to version 3 (when that write fails,
        the first change tries again). Raises CheckpointError and records it in ``error``
        when the checkpoint is corrupt."""
        with self._lock, self._flock():
            for tmp in self.path.parent.glob(f".{self.path.name}.*.tmp"):
                with contextlib.suppress(OSError):
                    tmp.unlink()
            self._seen = None
            self._refresh()
            if self._gen is None and self._seen != _MISSING:
                try:
                    self._compact(self._state)
                except CheckpointWriteError as e:
                    log.warning("%s; the migration to version %d is retried by the first "
                                "change", e, FORMAT_VERSION)
            self._remove_old_logs()

    def _remove_old_logs(self) -> None:
        """Remove the logs of this snapshot's directory other than the one it names."""
        prefix = self.path.name + "."
        for p in self.path.parent.glob(f"{self.path.name}.*.log"):
            number = p.name[len(prefix):-len(".log")]
            if number.isdigit() and int(number) != self._gen:
                with contextlib.suppress(OSError):
                    p.unlink()

    def get(self, uid: str) -> ClaimRecord | None:
        """The record of claim ``uid`` or None. Raises CheckpointError while corrupt."""
        with self._lock:
            self._refresh()
            return self._state.claims.get(uid)

    def claims(self) -> dict[str, ClaimRecord]:
        """All records by claim UID (a map of its own). Raises CheckpointError while
        corrupt."""
        with self._lock:
            self._refresh()
            return dict(self._state.claims)

    def state(self) -> CheckpointState:
        """The whole content (maps of its own). Raises CheckpointError while corrupt."""
        with self._lock:
            self._refresh()
            return self._state.copy()

    # -- writing -------------------------------------------------------------------------

    @contextlib.contextmanager
    def _flock(self) -> Iterator[None]:
        """The file lock (not re-entrant: a second flock on a new descriptor would wait for
        the first forever; nothing that holds it changes the checkpoint again)."""
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
        try:
            fd = os.open(self._lock_name, flags, 0o600)
        except FileNotFoundError:  # the directory is created on first use
            self.lock_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self._lock_name, flags, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def locked(self) -> Iterator[CheckpointState]:
        """Hold the file lock (no instance can change the checkpoint meanwhile) and yield
        the current content; the holder must not change the checkpoint. Raises
        CheckpointError while corrupt."""
        with self._lock, self._flock():
            self._refresh()
            yield self._state.copy()

    def change(self, change: Callable[[CheckpointState], T]) -> T:
        """Apply ``change`` to the content under the locks and write it durably: the one way
        the checkpoint changes. Returns what ``change`` returned.

        ``change`` is a transition of :mod:`drakit.plugin.claims.lifecycle` (or a test's): it
        changes the :class:`CheckpointState` it is given in place (puts, replaces, deletes
        records and marks) and does no I/O. It runs under the thread lock and the file lock,
        possibly on another caller's thread (group commit), so everything it needs from
        outside (the time, the owners that are gone) is read before and given to it.
        Nothing is written when it raises, or when it changed nothing. Marks older than
        :data:`UNPREPARED_TTL` are dropped.

        Group commit: changes of concurrent callers that queue up while a write is in
        flight are applied one after the other (each seeing the earlier ones) and made
        durable by one write (one log line, one fdatasync); every caller returns once its
        own change is durable. A change that raises writes nothing (the others of its batch
        are unaffected): it works on its own maps (shallow copies; the records themselves
        are frozen). Raises CheckpointError when the checkpoint is corrupt; to every caller
        of a batch whose write failed, CheckpointFullError (no room; nothing of the batch is
        in the files) or CheckpointWriteError (then memory is read again from the files at
        the next access).
        """
        req: _Request[T] = _Request(change)
        with self._queue_lock:
            self._queue.append(req)
        with self._lock:
            if not req.done:  # else: a previous leader committed it meanwhile
                with self._queue_lock:
                    batch, self._queue = self._queue, []
                self._commit(batch)
                self._compact_when_due()
        if req.error is not None:
            raise req.error
        return req.result  # type: ignore[return-value]

    def _commit(self, batch: list[_Request[Any]]) -> None:
        """Apply and write ``batch`` (under the thread lock); marks every request done."""
        try:
            with self._flock():
                try:
                    self._refresh()
                except CheckpointError as e:
                    for req in batch:
                        req.error = CheckpointError(str(e))
                    return
                base = self._state
                claims: dict[str, ClaimRecord] = base.claims
                unprepared: dict[str, UnpreparedRecord] = base.unprepared
                # The keys the batch's changes set or removed (None: compare whole maps).
                touched: tuple[set[str] | None, set[str] | None] = (set(), set())
                ok: list[_Request[Any]] = []
                for req in batch:
                    given = (_Tracked(claims), _Tracked(unprepared))
                    work = CheckpointState(*given)
                    try:
                        req.result = req.change(work)
                    except BaseException as e:
                        req.error = e
                        continue
                    claims, unprepared = work.claims, work.unprepared
                    touched = (_union(touched[0], given[0], claims),
                               _union(touched[1], given[1], unprepared))
                    ok.append(req)
                if not ok:
                    return
                try:
                    self._write(base, CheckpointState(dict(claims), dict(unprepared)), touched)
                except BaseException as e:
                    self._restore()
                    for req in ok:
                        req.error = (type(e)(str(e)) if isinstance(e, CheckpointError)
                                     else e)
                    return
                for req in ok:
                    req.written = True
        except BaseException as e:
            # The file lock could not be taken (or a bug): nobody's change was written.
            for req in batch:
                if req.error is None and not req.written:
                    req.error = (CheckpointError(f"checkpoint {self.path}: {e}")
                                 if isinstance(e, OSError) else e)
            raise
        finally:
            for req in batch:
                req.done = True

    def _restore(self) -> None:
        """After a failed write: memory is read again from the files at the next access."""
        self._seen = None

    def _write(self, base: CheckpointState, state: CheckpointState,
               touched: tuple[set[str] | None, set[str] | None] = (None, None)) -> None:
        """Make ``state`` durable, ``base`` being the content in the files: one log line
        with the records that differ, or a whole snapshot when the log cannot take one (no
        version 3 snapshot yet, or a torn tail). ``touched``: the claim UIDs and the mark
        UIDs that may differ (None: any). Raises CheckpointWriteError."""
        marks_before = state.unprepared
        state.unprepared = _pruned(marks_before, time.time())
        if state.unprepared is not marks_before:  # marks were dropped: compare them all
            touched = (touched[0], None)
        if self._gen is None or self._log is None or self._log_size != self._log_end:
            self._compact(state)
            self.writes += 1
            return
        claims = _changed(base.claims, state.claims, touched[0])  # type: ignore[arg-type]
        marks = _changed(base.unprepared, state.unprepared,  # type: ignore[arg-type]
                         touched[1])
        if not claims and not marks:
            self._state = state
            return
        line = checkpointlog.encode_line(claims, marks)
        try:
            checkpointlog.append(self._log, line)
        except OSError as e:
            raise self._append_failed(e) from None
        self._log_end += len(line)
        self._log_size = self._log_end
        self._state = state
        self.writes += 1

    def _append_failed(self, e: OSError) -> CheckpointError:
        """The error for an append to the log that raised ``e``, after taking back what
        part of the line got in (``ftruncate`` to the end of the last acknowledged line):
        CheckpointFullError when ``e`` is want of room and the log is back to that end,
        else CheckpointWriteError (the log may hold a line nobody was told of)."""
        assert self._log is not None
        try:
            os.ftruncate(self._log, self._log_end)
            back = os.fstat(self._log).st_size == self._log_end
        except OSError:
            back = False
        return _write_failed(f"checkpoint log {self.log_path(self._gen or 0)}", e,
                             intact=back)

    def _compact(self, state: CheckpointState) -> None:
        """Write ``state`` as a new snapshot with a new, empty log (see the module
        docstring), then remove the old log. Raises CheckpointFullError when there was no
        room and the snapshot in place is still the old one (or still none), else
        CheckpointWriteError; then the snapshot and log in place are the old ones, or (the
        directory's fsync failed after the rename) the new ones."""
        n = (self._gen or 0) + 1
        log_path = self.log_path(n)
        data = self._encoder.encode(state, log=n)
        try:
            try:
                log_fd = checkpointlog.create(log_path)
            except FileNotFoundError:  # the directory went away: create it, once
                self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                log_fd = checkpointlog.create(log_path)
            try:
                atomic_write(self.path, data, mode=0o600)  # fsyncs the log's entry too
                snap = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)  # ours: flock held
            except BaseException:
                os.close(log_fd)
                raise
        except OSError as e:
            held = None if self._seen in (None, _MISSING) else self._seen
            intact = _stat_key(self.path) == held  # else renamed into place: it names log n
            if intact:
                with contextlib.suppress(OSError):  # named by no snapshot
                    os.unlink(log_path)
            raise _write_failed(f"checkpoint {self.path}", e, intact=intact) from None
        old = self._gen
        self._hold(snap, _key(os.fstat(snap)))
        self._hold_log(log_fd, n)
        self._log_end = self._log_size = 0
        self._snap_size = len(data)
        self._state = state
        if old is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.log_path(old))

    def _compaction_due(self) -> bool:
        return self._log_end > max(COMPACT_MIN_BYTES, COMPACT_RATIO * self._snap_size)

    def _compact_when_due(self) -> None:
        """Start the background compaction when the log outgrew its bounds (and none is
        running)."""
        if self._compactor is not None or not self._compaction_due():
            return
        self._compactor = threading.Thread(target=self._compact_in_background,
                                           name="checkpoint-compaction", daemon=True)
        self._compactor.start()

    def _compact_in_background(self) -> None:
        try:
            with self._lock, self._flock():
                self._refresh()
                if self._compaction_due():
                    self._compact(self._state)
                    self.compactions += 1
        except CheckpointError as e:
            log.warning("%s; the compaction is tried again after the next change", e)
        finally:
            self._compactor = None

    def compact(self) -> None:
        """Write the whole content as a new snapshot with an empty log now (what the
        background compaction does when the log outgrew :data:`COMPACT_MIN_BYTES` and
        :data:`COMPACT_RATIO` times the snapshot). Raises CheckpointError while corrupt,
        CheckpointWriteError when it cannot be written."""
        with self._lock, self._flock():
            self._refresh()
            self._compact(self._state)
            self.compactions += 1

    # -- owners (drakit.plugin.claims.owners) ---------------------------------------------------

    @property
    def owner(self) -> str:
        """This instance's owner id; the first access takes its owner lock (held until
        :meth:`close` or process exit). Raises CheckpointError when another instance holds
        it."""
        if self._owner is None:
            try:
                self._owner = self._owners.take()
            except OwnerError as e:
                raise CheckpointError(str(e)) from None
        return self._owner

    def dead_owners(self, uids: Iterable[str] | None = None) -> frozenset[str]:
        """The owners of the ``PrepareStarted`` records of ``uids`` (None: of every record),
        other than this instance, whose owner lock is free (their process is gone): what
        the transitions of :mod:`drakit.plugin.claims.lifecycle` take as ``dead``. Probes
        the owner lock files outside the checkpoint's locks. Raises CheckpointError while
        corrupt."""
        with self._lock:
            self._refresh()
            claims = self._state.claims
            recs = (claims.values() if uids is None
                    else [r for r in map(claims.get, uids) if r is not None])
            owners = {r.owner for r in recs if r.phase == "PrepareStarted"
                      and r.owner is not None and r.owner != self._owners.name}
        return frozenset(o for o in owners if not self._owners.alive(o))

    def forget_dead_owners(self) -> list[str]:
        """Remove owner lock files of instances that are gone; returns their ids."""
        return self._owners.forget_dead()

    def close(self) -> None:
        """Release this instance's owner lock and remove its file; wait for a compaction
        in progress; close the snapshot and log held open."""
        self._owners.close()
        self._owner = None
        compactor = self._compactor
        if compactor is not None:
            compactor.join(30)
        with self._lock:
            self._hold(None, None)
            self._hold_log(None, None)


def _write_failed(what: str, e: OSError, *, intact: bool) -> CheckpointError:
    """The error of a write of ``what`` that raised ``e``: CheckpointFullError when it found
    no room (:data:`NO_ROOM`) and the files are ``intact`` (as they were before the write),
    else CheckpointWriteError."""
    cls = CheckpointFullError if intact and e.errno in NO_ROOM else CheckpointWriteError
    return cls(f"{what}: write failed: {e}")


def _union(acc: set[str] | None, given: _Tracked[Any], now: dict[str, Any]
           ) -> set[str] | None:
    """``acc`` with the keys ``given`` noted, or None when ``now`` (the map after the
    change) is not ``given`` (the change put a map of its own in its place)."""
    if acc is None or now is not given:
        return None
    return acc | given.touched


def _key(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _stat_key(path: Path) -> tuple[int, int, int] | None:
    try:
        return _key(os.stat(path))
    except FileNotFoundError:
        return None


def _open_log(path: Path) -> int:
    """The log at ``path``, open for reading and appending (read-only where it cannot be
    written: a reader without write access)."""
    try:
        return os.open(path, checkpointlog.OPEN_FLAGS)
    except PermissionError:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)


def _read_from(fd: int, offset: int) -> bytes:
    """Everything of the file ``fd`` from byte ``offset`` on."""
    chunks: list[bytes] = []
    while True:
        chunk = os.pread(fd, 1 << 20, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)


def _pruned(marks: dict[str, UnpreparedRecord], now: float) -> dict[str, UnpreparedRecord]:
    """``marks`` without those older than :data:`UNPREPARED_TTL`, at most
    :data:`UNPREPARED_MAX` (the newest). Marks are added in time order, so the first one is
    normally the oldest: while it is fresh and the map small enough, nothing is scanned.
    An overfull map is cut to 7/8 of the limit, so the sort runs once per many marks. Marks
    whose status removal is owed are kept whatever their age (they are settled within
    seconds while the API server answers)."""
    if not marks:
        return marks
    first = next(iter(marks.values()))
    if len(marks) <= UNPREPARED_MAX and now - first.at < UNPREPARED_TTL:
        return marks
    owed = {uid: u for uid, u in marks.items() if u.status_owed}  # kept until done
    kept = sorted(((uid, u) for uid, u in marks.items()
                   if now - u.at < UNPREPARED_TTL and uid not in owed),
                  key=lambda item: item[1].at)
    if len(kept) > UNPREPARED_MAX:
        kept = kept[-(UNPREPARED_MAX - UNPREPARED_MAX // 8):]
    return dict(kept) | owed
