"""The checkpoint of prepared claims: one JSON file, written atomically, with a format version
and a checksum, shared safely by two plugin instances during a rolling update.

File shape (mode 0600)::

    {"version": 1, "checksum": "<sha256 hex of the canonical claims JSON>",
     "claims": {"<claim UID>": ClaimRecord, ...}}

A claim goes through ``PrepareStarted`` (recorded before any driver hook runs, so a crash can
be rolled back at start) and ``PrepareCompleted`` (recorded before the kubelet gets its
answer). Unprepare works from the record alone. A corrupt or unreadable file is never reset:
every operation raises :class:`CheckpointError` naming the problem until the file is fixed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError

from cdi.atomic import atomic_write

FORMAT_VERSION = 1
T = TypeVar("T")


class CheckpointError(Exception):
    """The checkpoint cannot be read or written; the message names the file and the problem."""


class PreparedDeviceRecord(BaseModel):
    """One prepared device: its allocation result, owning plugin, CDI name and edits (so the
    CDI spec can be re-written from the checkpoint alone), the plugin's state for unprepare
    and the AllocatedDeviceStatus entry written for it."""

    request: str
    pool: str
    device: str
    share_id: str | None = None
    admin_access: bool = False
    plugin: str = ""
    cdi_name: str = ""
    cdi_device_ids: list[str] = Field(default_factory=list)
    edits: dict[str, Any] = Field(default_factory=dict)
    state: dict[str, Any] = Field(default_factory=dict)
    status: dict[str, Any] | None = None


class ClaimRecord(BaseModel):
    """One claim in the checkpoint."""

    uid: str
    namespace: str
    name: str
    phase: Literal["PrepareStarted", "PrepareCompleted"] = "PrepareStarted"
    devices: list[PreparedDeviceRecord] = Field(default_factory=list)
    prepared_at: float = 0.0
    missing_since: float | None = None


def _checksum(claims: dict[str, Any]) -> str:
    canonical = json.dumps(claims, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(canonical).hexdigest()


class Checkpoint:
    """The prepared-claims checkpoint at ``path``; ``lock_path`` is the file locked (flock)
    around every change so two instances never interleave (default ``<path>.lock``).

    Thread-safe. Reads come from memory; a change re-reads the file first if another
    process replaced it, applies the change, and writes the whole file atomically.
    """

    def __init__(self, path: str | os.PathLike[str], lock_path: str | None = None) -> None:
        self.path = Path(path)
        self.lock_path = Path(lock_path) if lock_path else self.path.with_name(
            self.path.name + ".lock"
        )
        self._lock = threading.RLock()
        self._claims: dict[str, ClaimRecord] = {}
        self._stamp: tuple[int, int, int] | None = None
        self.error: str | None = None
        self.writes = 0

    # -- reading -------------------------------------------------------------------------

    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _read(self) -> dict[str, ClaimRecord]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as e:
            raise CheckpointError(f"checkpoint {self.path}: unreadable: {e}") from None
        try:
            doc = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise CheckpointError(f"checkpoint {self.path}: not valid JSON: {e}") from None
        if not isinstance(doc, dict):
            raise CheckpointError(f"checkpoint {self.path}: not a JSON object")
        if doc.get("version") != FORMAT_VERSION:
            raise CheckpointError(
                f"checkpoint {self.path}: version: unsupported format version "
                f"{doc.get('version')!r} (this plugin reads {FORMAT_VERSION})"
            )
        claims = doc.get("claims")
        if not isinstance(claims, dict):
            raise CheckpointError(f"checkpoint {self.path}: claims: not a JSON object")
        if doc.get("checksum") != _checksum(claims):
            raise CheckpointError(f"checkpoint {self.path}: checksum mismatch (file corrupt)")
        try:
            return {uid: ClaimRecord.model_validate(rec) for uid, rec in claims.items()}
        except ValidationError as e:
            raise CheckpointError(f"checkpoint {self.path}: claims: {e}") from None

    def _refresh(self) -> None:
        stamp = self._file_stamp()
        if stamp == self._stamp and self.error is None:
            return
        try:
            self._claims = self._read()
        except CheckpointError as e:
            self.error = str(e)
            raise
        self.error = None
        self._stamp = stamp

    def load(self) -> None:
        """Read the file (missing means empty). Raises CheckpointError and records it in
        ``error`` when the file is corrupt."""
        with self._lock, self._flock():
            self._stamp = None
            self._refresh()

    def get(self, uid: str) -> ClaimRecord | None:
        """The record of claim ``uid`` or None. Raises CheckpointError while corrupt."""
        with self._lock:
            self._refresh()
            rec = self._claims.get(uid)
            return rec.model_copy(deep=True) if rec else None

    def claims(self) -> dict[str, ClaimRecord]:
        """A copy of all records by claim UID."""
        with self._lock:
            self._refresh()
            return {k: v.model_copy(deep=True) for k, v in self._claims.items()}

    # -- writing -------------------------------------------------------------------------

    @contextlib.contextmanager
    def _flock(self) -> Iterator[None]:
        self.lock_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def update(self, change: Callable[[dict[str, ClaimRecord]], T]) -> T:
        """Apply ``change`` to the claims map under the locks and write the file atomically.

        ``change`` mutates the dict in place and returns any value, which ``update`` returns.
        Nothing is written when ``change`` raises. Raises CheckpointError when the file is
        corrupt or cannot be written (then memory is restored from the file).
        """
        with self._lock, self._flock():
            self._refresh()
            work = {k: v.model_copy(deep=True) for k, v in self._claims.items()}
            result = change(work)
            self._write(work)
            return result

    def _write(self, claims: dict[str, ClaimRecord]) -> None:
        body = {uid: rec.model_dump(mode="json") for uid, rec in sorted(claims.items())}
        doc = {"version": FORMAT_VERSION, "checksum": _checksum(body), "claims": body}
        data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            atomic_write(self.path, data, mode=0o600)
        except OSError as e:
            raise CheckpointError(f"checkpoint {self.path}: write failed: {e}") from None
        self._claims = claims
        self._stamp = self._file_stamp()
        self.writes += 1
