"""The checkpoint of prepared claims: one JSON file, written atomically, with a format version
and a checksum, shared safely by two plugin instances during a rolling update.

File shape (mode 0600)::

    {"version": 2, "checksum": "<sha256 hex of the canonical JSON of {claims, unprepared}>",
     "claims": {"<claim UID>": ClaimRecord, ...},
     "unprepared": {"<claim UID>": UnpreparedRecord, ...}}

Version 1 files (no ``unprepared``; checksum over ``claims`` alone) are read and rewritten as
version 2 at the next change.

A claim goes through ``PrepareStarted`` (recorded before any driver hook runs, with the
instance that runs it as ``owner``, so a crash can be rolled back) and ``PrepareCompleted``
(recorded before the kubelet gets its answer). Unprepare works from the record alone (it
holds the allocation results and the opaque configs) and leaves an ``unprepared`` mark for a
while, so a stale prepare retry can be told from a real one (see :mod:`drakit.plugin.node`).

A corrupt or unreadable file is never reset: every operation raises :class:`CheckpointError`
naming the problem until the file is fixed.

Two instances (a DaemonSet rolling update) share the file: every change runs under an
``flock`` of ``<path>.lock`` and re-reads the file first. Each instance also holds an
``flock`` on its own owner file ``owners/<owner>.lock`` for its lifetime; the kernel drops it
when the process dies, which is how one instance tells a crashed owner of a
``PrepareStarted`` record from a live one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from drakit.cdi.atomic import atomic_write
from drakit.plugin.canonical_json import CanonicalMapEncoder, canonical
from drakit.plugin.jsontree import copy_model
from drakit.plugin.names import UID

FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
#: Seconds an ``unprepared`` mark is kept. A stale prepare is a call the kubelet sent
#: before the unprepare that reaches the plugin after it; the kubelet bounds each
#: NodePrepareResources call with a deadline well under a minute, so ten minutes is ample.
UNPREPARED_TTL = 600.0
#: At most this many ``unprepared`` marks are kept (the newest win). Every mark is in the
#: file, so every write pays for them (128 marks are ~18 KB). 128 is above the kubelet's
#: default of 110 pods per node.
UNPREPARED_MAX = 128
#: Every file this module writes starts with ``{"checksum":"<64 hex digits>"``: the
#: SHA-256 of its content, so these bytes identify the whole content.
_HEAD = b'{"checksum":"'
HEAD_LEN = len(_HEAD) + 64 + 1
T = TypeVar("T")

# owner names become lock file names: the same rule as claim UIDs
_OWNER_RE = UID


_MISSING = b"<missing>"  # _seen when the file did not exist (never a file's first bytes)


def _identity(raw: bytes) -> bytes | None:
    """The first bytes of a parsed (checksum verified) file when they identify its content:
    ``{"checksum":"<64 hex>"`` as written here; None for any other layout."""
    if len(raw) > HEAD_LEN and raw.startswith(_HEAD) and raw[HEAD_LEN - 1:HEAD_LEN] == b'"':
        return raw[:HEAD_LEN]
    return None


class CheckpointError(Exception):
    """The checkpoint cannot be read or written; the message names the file and the problem."""


class PreparedDeviceRecord(BaseModel):
    """One prepared device: its allocation result (request, pool, device, shareID,
    adminAccess, consumedCapacity), owning plugin, the typed opaque config it was prepared
    with, CDI name and edits (so the CDI spec can be re-written from the checkpoint alone),
    the plugin's state for unprepare and the AllocatedDeviceStatus entry written for it."""

    # Distinct JSON for inf / nan / None: the write cache compares model_dump_json output.
    model_config = ConfigDict(ser_json_inf_nan="constants")

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
    ``fingerprint`` identifies the allocation (:func:`drakit.plugin.node.allocation_fingerprint`);
    ``configs`` are the claim's opaque configs for this driver
    (``status.allocation.devices.config`` entries, class configs first).
    """

    model_config = ConfigDict(ser_json_inf_nan="constants")

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


class UnpreparedRecord(BaseModel):
    """A claim unprepared recently: its allocation fingerprint (None: unknown, the claim was
    not prepared here), when (seconds since the epoch) and a digest of the claim's
    ``status.reservedFor`` as the last prepare read it (None: unknown)."""

    model_config = ConfigDict(ser_json_inf_nan="constants")

    fingerprint: str | None = None
    at: float = 0.0
    reservations: str | None = None


@dataclass
class CheckpointState:
    """Everything in the file: prepared claims and recent ``unprepared`` marks, by claim UID."""

    claims: dict[str, ClaimRecord] = field(default_factory=dict)
    unprepared: dict[str, UnpreparedRecord] = field(default_factory=dict)

    def peek_claims(self) -> Iterable[tuple[str, ClaimRecord]]:
        """(claim UID, record) pairs without copying them (read only: never mutate them;
        inside a change, records obtained otherwise are copies and may be mutated)."""
        claims = self.claims
        return claims.peek_items() if isinstance(claims, _CopyOnAccess) else claims.items()

    def copy(self) -> CheckpointState:
        return CheckpointState(
            {k: copy_model(v) for k, v in self.claims.items()},
            {k: v.model_copy() for k, v in self.unprepared.items()},
        )


def _checksum(body: Any) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(canonical).hexdigest()


class _Request(Generic[T]):
    """One caller's change waiting for (or done by) a group commit."""

    __slots__ = ("after", "change", "done", "error", "result", "written")

    def __init__(self, change: Callable[[CheckpointState], T],
                 after: Callable[[T], None] | None) -> None:
        self.change = change
        self.after = after
        self.result: T | None = None
        self.error: BaseException | None = None
        self.done = False
        self.written = False


M = TypeVar("M", bound=BaseModel)


class _CopyOnAccess(dict[str, M]):
    """The map a change function gets: a shallow copy of the committed map whose records
    are deep-copied the first time the change reads them (``[]``, ``get``, ``pop``,
    ``setdefault``, ``items``, ``values``...), so a change that mutates records in place and
    then raises leaves the committed records (and the other changes of its batch)
    untouched. ``peek_items`` reads without copying (the caller must not mutate).
    Values a change assigns are copied once when its change returns (:func:`_owned`), so the
    caller keeping a reference cannot change memory behind the file's back."""

    def __init__(self, base: dict[str, M]) -> None:
        super().__init__(base)
        self.copied: set[str] = set()
        self.assigned: set[str] = set()

    def __getitem__(self, key: str) -> M:
        value = dict.__getitem__(self, key)
        if key not in self.copied:
            value = copy_model(value)
            dict.__setitem__(self, key, value)
            self.copied.add(key)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        if key in self:
            return self[key]
        return default

    def __setitem__(self, key: str, value: M) -> None:
        dict.__setitem__(self, key, value)
        self.copied.add(key)
        self.assigned.add(key)

    def pop(self, key: str, *default: Any) -> Any:
        if key in self:
            value = self[key]
            dict.__delitem__(self, key)
            return value
        if default:
            return default[0]
        raise KeyError(key)

    def popitem(self) -> tuple[str, M]:
        key = next(reversed(self.keys()))
        return key, self.pop(key)

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def items(self) -> Any:
        return [(key, self[key]) for key in list(self.keys())]

    def values(self) -> Any:
        return [self[key] for key in list(self.keys())]

    def copy(self) -> dict[str, M]:
        return dict(self.items())

    def __or__(self, other: Any) -> Any:
        return self.copy() | other

    def __ior__(self, other: Any) -> Any:
        self.update(other)
        return self

    def peek_items(self) -> Any:
        return dict.items(self)


def _pruned(marks: dict[str, UnpreparedRecord], now: float) -> dict[str, UnpreparedRecord]:
    """``marks`` without those older than :data:`UNPREPARED_TTL`, at most
    :data:`UNPREPARED_MAX` (the newest). Marks are added in time order, so the first one is
    normally the oldest: while it is fresh and the map small enough, nothing is scanned.
    An overfull map is cut to 7/8 of the limit, so the sort runs once per many marks."""
    if not marks:
        return marks
    first = next(iter(marks.values()))
    if len(marks) <= UNPREPARED_MAX and now - first.at < UNPREPARED_TTL:
        return marks
    kept = sorted(((uid, u) for uid, u in marks.items() if now - u.at < UNPREPARED_TTL),
                  key=lambda item: item[1].at)
    if len(kept) > UNPREPARED_MAX:
        kept = kept[-(UNPREPARED_MAX - UNPREPARED_MAX // 8):]
    return dict(kept)


def _owned(work: dict[str, M]) -> dict[str, M]:
    """The map a change left, as a plain dict whose records the checkpoint alone holds."""
    if not isinstance(work, _CopyOnAccess):  # the change replaced the whole map
        return {k: copy_model(v) for k, v in work.items()}
    out = dict(work.peek_items())
    for key in work.assigned:
        value = out.get(key)
        if value is not None:
            out[key] = copy_model(value)
    return out


class Checkpoint:
    """The prepared-claims checkpoint at ``path``; ``lock_path`` is the file locked (flock)
    around every change so two instances never interleave (default ``<path>.lock``).
    ``owner`` names this instance (default: a random id); owner lock files live in
    ``<path's dir>/owners/``.

    Thread-safe. Every read and change first checks the file (its first bytes: the checksum)
    and parses it again only when it changed, so another instance's change is never missed.
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
        if owner is not None and not _OWNER_RE.fullmatch(owner):
            raise ValueError(f"checkpoint owner {owner!r}: must match {_OWNER_RE.pattern}")
        self._owner = owner or uuid.uuid4().hex[:16]
        self._owner_fd: int | None = None
        self._lock = threading.RLock()
        self._state = CheckpointState()
        # The first HEAD_LEN bytes of the content in memory, when they identify it (see
        # _refresh); _MISSING when the file was missing; None: re-read and parse.
        self._seen: bytes | None = None
        self.error: str | None = None
        self.writes = 0
        # Records in memory are never changed in place (changes get copies, see
        # _CopyOnAccess), so a cached fragment is valid while the record object is the same.
        self._claims_json = CanonicalMapEncoder(trust_identity=True)
        self._unprepared_json = CanonicalMapEncoder(trust_identity=True)
        self._queue_lock = threading.Lock()
        self._queue: list[_Request[Any]] = []
        self._leader: int | None = None
        self._flock_holder: int | None = None

    # -- reading -------------------------------------------------------------------------

    def _parse(self, raw: bytes) -> CheckpointState:
        try:
            doc = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise CheckpointError(f"checkpoint {self.path}: not valid JSON: {e}") from None
        if not isinstance(doc, dict):
            raise CheckpointError(f"checkpoint {self.path}: not a JSON object")
        version = doc.get("version")
        if version not in READABLE_VERSIONS:
            raise CheckpointError(
                f"checkpoint {self.path}: version: unsupported format version "
                f"{version!r} (this plugin reads {list(READABLE_VERSIONS)})"
            )
        claims = doc.get("claims")
        if not isinstance(claims, dict):
            raise CheckpointError(f"checkpoint {self.path}: claims: not a JSON object")
        unprepared = doc.get("unprepared", {}) if version >= 2 else {}
        if not isinstance(unprepared, dict):
            raise CheckpointError(f"checkpoint {self.path}: unprepared: not a JSON object")
        body: Any = claims if version == 1 else {"claims": claims, "unprepared": unprepared}
        if doc.get("checksum") != _checksum(body):
            raise CheckpointError(f"checkpoint {self.path}: checksum mismatch (file corrupt)")
        try:
            return CheckpointState(
                {uid: ClaimRecord.model_validate(rec) for uid, rec in claims.items()},
                {uid: UnpreparedRecord.model_validate(u) for uid, u in unprepared.items()},
            )
        except ValidationError as e:
            raise CheckpointError(f"checkpoint {self.path}: claims: {e}") from None

    def _refresh(self) -> None:
        """Bring memory up to date with the file: parse it again only when it changed.

        A file is known by its first :data:`HEAD_LEN` bytes when they hold the checksum in
        this module's canonical layout (every write; a parse verifies the checksum against
        the content), so the frequent "unchanged" case reads 78 bytes, not the whole file
        (which holds every prepared claim). Another instance's change always has a new
        checksum. Damage made in place to a file after it was read (the writers here only
        rename whole files into place) shows at the next start, when it is parsed."""
        try:
            try:
                f = open(self.path, "rb", buffering=0)  # noqa: SIM115 - closed below
            except FileNotFoundError:
                if self._seen is _MISSING and self.error is None:
                    return
                raw = None
            else:
                with f:
                    head = f.read(HEAD_LEN)
                    if head == self._seen and self.error is None:
                        return
                    raw = head + f.readall()
        except OSError as e:
            self.error = f"checkpoint {self.path}: unreadable: {e}"
            raise CheckpointError(self.error) from None
        try:
            state = self._parse(raw) if raw is not None else CheckpointState()
        except CheckpointError as e:
            self.error = str(e)
            self._seen = None
            raise
        self._state, self.error = state, None
        self._seen = _MISSING if raw is None else _identity(raw)

    def load(self) -> None:
        """Read the file (missing means empty) and remove temp files a crashed write left
        (every write happens under the file lock, so none is in progress). Raises
        CheckpointError and records it in ``error`` when the file is corrupt."""
        with self._lock, self._flock():
            for tmp in self.path.parent.glob(f".{self.path.name}.*.tmp"):
                with contextlib.suppress(OSError):
                    tmp.unlink()
            self._seen = None
            self._refresh()

    def get(self, uid: str) -> ClaimRecord | None:
        """The record of claim ``uid`` or None. Raises CheckpointError while corrupt."""
        with self._lock:
            self._refresh()
            rec = self._state.claims.get(uid)
            return copy_model(rec) if rec else None

    def claims(self) -> dict[str, ClaimRecord]:
        """A copy of all records by claim UID. Raises CheckpointError while corrupt."""
        with self._lock:
            self._refresh()
            return {k: copy_model(v) for k, v in self._state.claims.items()}

    def state(self) -> CheckpointState:
        """A copy of the whole content. Raises CheckpointError while corrupt."""
        with self._lock:
            self._refresh()
            return self._state.copy()

    # -- writing -------------------------------------------------------------------------

    @contextlib.contextmanager
    def _flock(self) -> Iterator[None]:
        """The file lock; re-entrant within the thread holding it (a change's ``after``
        that updates the checkpoint again: a second flock on a new descriptor would wait
        for the first forever)."""
        if self._flock_holder == threading.get_ident():
            yield
            return
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
        try:
            fd = os.open(self._lock_name, flags, 0o600)
        except FileNotFoundError:  # the directory is created on first use
            self.lock_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self._lock_name, flags, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._flock_holder = threading.get_ident()
            try:
                yield
            finally:
                self._flock_holder = None
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def locked(self) -> Iterator[CheckpointState]:
        """Hold the file lock (no instance can change the checkpoint meanwhile) and yield a
        copy of the current content. Raises CheckpointError while corrupt."""
        with self._lock, self._flock():
            self._refresh()
            yield self._state.copy()

    def update(self, change: Callable[[dict[str, ClaimRecord]], T]) -> T:
        """Apply ``change`` to the claims map under the locks and write the file atomically.

        ``change`` mutates the dict in place and returns any value, which ``update`` returns.
        Nothing is written when ``change`` raises. Raises CheckpointError when the file is
        corrupt or cannot be written (then memory still holds the file's content).
        """
        return self.update_state(lambda s: change(s.claims))

    def update_state(
        self,
        change: Callable[[CheckpointState], T],
        after: Callable[[T], None] | None = None,
    ) -> T:
        """Like :meth:`update`, with the whole :class:`CheckpointState` (claims and
        ``unprepared`` marks). Marks older than :data:`UNPREPARED_TTL` are dropped.
        ``after(result)`` runs once the file is written, still under the file lock (for
        work other instances must see together with the change, e.g. removing CDI specs).

        Group commit: changes of concurrent callers that queue up while a write is in
        flight are applied one after the other (each under the thread lock and the file
        lock, each seeing the earlier ones) and made durable by one write (one encode, one
        fsync); every caller returns once its own change is in the file. A change that
        raises writes nothing (the others of its batch are unaffected): records it reads
        are copies made on first access (:class:`_CopyOnAccess`). A failed write raises
        CheckpointError to every caller of the batch.
        """
        req: _Request[T] = _Request(change, after)
        if self._leader == threading.get_ident():
            # Re-entrant call from a change or ``after``: committed on its own, now.
            self._commit([req])
        else:
            with self._queue_lock:
                self._queue.append(req)
            with self._lock:
                if not req.done:  # else: a previous leader committed it meanwhile
                    with self._queue_lock:
                        batch, self._queue = self._queue, []
                    self._leader = threading.get_ident()
                    try:
                        self._commit(batch)
                    finally:
                        self._leader = None
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
                claims: dict[str, ClaimRecord] = self._state.claims
                unprepared: dict[str, UnpreparedRecord] = self._state.unprepared
                ok: list[_Request[Any]] = []
                for req in batch:
                    work = CheckpointState(_CopyOnAccess(claims), _CopyOnAccess(unprepared))
                    try:
                        req.result = req.change(work)
                    except BaseException as e:
                        req.error = e
                        continue
                    claims = _owned(work.claims)
                    unprepared = _owned(work.unprepared)
                    ok.append(req)
                if not ok:
                    return
                try:
                    self._write(CheckpointState(claims, unprepared))
                except BaseException as e:
                    self._restore()
                    for req in ok:
                        req.error = (CheckpointError(str(e)) if isinstance(e, CheckpointError)
                                     else e)
                    return
                for req in ok:
                    req.written = True
                    if req.after is not None:
                        try:
                            req.after(req.result)
                        except BaseException as e:
                            req.error = e
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
        """After a failed write: memory is re-read from the file at the next access."""
        self._seen = None

    def _write(self, state: CheckpointState) -> None:
        state.unprepared = _pruned(state.unprepared, time.time())
        # The canonical JSON of {"version", "checksum", "claims", "unprepared"} (sorted
        # keys), assembled from per-record fragments that are re-encoded only when changed.
        claims = self._claims_json.encode(state.claims)
        unprepared = self._unprepared_json.encode(state.unprepared)
        digest = hashlib.sha256(b'{"claims":')
        for part in (claims, b',"unprepared":', unprepared, b"}"):
            digest.update(part)
        data = b"".join((b'{"checksum":', canonical(digest.hexdigest()).encode(), b',"claims":',
                         claims, b',"unprepared":', unprepared,
                         b',"version":', str(FORMAT_VERSION).encode(), b"}"))
        try:
            try:
                atomic_write(self.path, data, mode=0o600)
            except FileNotFoundError:  # the directory went away: create it, once
                self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                atomic_write(self.path, data, mode=0o600)
        except OSError as e:
            raise CheckpointError(f"checkpoint {self.path}: write failed: {e}") from None
        self._state, self._seen = state, data[:HEAD_LEN]
        self.writes += 1

    # -- owners --------------------------------------------------------------------------

    def _owner_path(self, owner: str) -> Path:
        if not _OWNER_RE.fullmatch(owner):
            raise ValueError(f"checkpoint owner {owner!r}: not a valid owner name")
        return self.owners_dir / f"{owner}.lock"

    @property
    def owner(self) -> str:
        """This instance's owner id; the first access takes its owner lock (held until
        :meth:`close` or process exit)."""
        with self._lock:
            if self._owner_fd is None:
                self.owners_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
                final = self._owner_path(self._owner)
                # Locked under a hidden name first, so a probe never sees it unlocked.
                tmp = final.with_name(f".{final.name}.{os.getpid()}")
                fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    if final.exists():
                        raise OSError(f"{final} exists")
                    os.rename(tmp, final)
                except OSError:
                    os.close(fd)
                    with contextlib.suppress(OSError):
                        tmp.unlink()
                    raise CheckpointError(
                        f"checkpoint owner {self._owner} is already held by another instance"
                    ) from None
                self._owner_fd = fd
            return self._owner

    def owner_alive(self, owner: str | None) -> bool:
        """True when ``owner`` is this instance or another live one (its owner lock is
        held). None, an unknown or a crashed owner is not alive."""
        if owner is None:
            return False
        if owner == self._owner:
            return self._owner_fd is not None
        try:
            fd = os.open(self._owner_path(owner), os.O_RDWR | os.O_CLOEXEC)
        except (OSError, ValueError):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        finally:
            os.close(fd)  # closing drops the probe's lock
        return False

    def forget_dead_owners(self) -> list[str]:
        """Remove owner lock files of instances that are gone; returns their ids."""
        removed = []
        with contextlib.suppress(FileNotFoundError):
            for path in self.owners_dir.iterdir():
                name = path.name.removesuffix(".lock")
                if path.suffix != ".lock" or not _OWNER_RE.fullmatch(name) or name == self._owner:
                    continue
                if not self.owner_alive(name):
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
                    removed.append(name)
        return removed

    def close(self) -> None:
        """Release this instance's owner lock and remove its file."""
        with self._lock:
            if self._owner_fd is not None:
                with contextlib.suppress(FileNotFoundError):
                    self._owner_path(self._owner).unlink()
                os.close(self._owner_fd)
                self._owner_fd = None
