"""The change log of the checkpoint: an append-only file of checksummed lines, one per write.

Line shape (canonical JSON: sorted keys, no spaces; no raw newline can occur inside)::

    <sha256 hex of PAYLOAD> PAYLOAD\\n
    PAYLOAD = {"claims": {"<claim UID>": ClaimRecord | null, ...},
               "unprepared": {"<claim UID>": UnpreparedRecord | null, ...}}

``null`` removes the record. A line is the whole change of one write (a group commit's batch
included): it applies whole or not at all, since its checksum covers all of it.

A line is appended with one ``write`` and made durable with ``fdatasync``; the file was
created, and its directory entry made durable, before any snapshot named it
(:mod:`drakit.plugin.claims.checkpoint`), so an append needs no directory fsync. A process
killed during an append leaves at most an incomplete last line, a power loss at most a last
line that fails its checksum (or zeros): either is a *torn tail*, never acknowledged to a
caller, and ignored by readers; no writer appends after one (the next write starts a new log).
A line that fails its checksum with a valid line after it is corruption.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Flags of the log's one descriptor: read by ``pread``, appended by ``write``.
OPEN_FLAGS = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW


class LogError(Exception):
    """A log line that is corrupt (not the torn tail); the message names the line."""


@dataclass
class Chunk:
    """The complete lines found in bytes read from the log: their payloads in order, the
    bytes they take (``used``, up to the end of the last valid line) and whether more bytes
    follow them (``tail``: an incomplete or torn last line, or a write in progress)."""

    payloads: list[dict[str, Any]] = field(default_factory=list)
    used: int = 0
    tail: bool = False


def encode_line(claims: Iterable[tuple[str, str | None]],
                unprepared: Iterable[tuple[str, str | None]]) -> bytes:
    """One log line from ``(claim UID, record JSON or None for removed)`` pairs of each map
    (record JSON: canonical, as :func:`canonical` gives). The members are sorted by UID."""
    payload = (f'{{"claims":{{{_members(claims)}}},'
               f'"unprepared":{{{_members(unprepared)}}}}}')
    digest = hashlib.sha256(payload.encode()).hexdigest()
    return f"{digest} {payload}\n".encode()


def _members(pairs: Iterable[tuple[str, str | None]]) -> str:
    return ",".join(f"{canonical(key)}:{'null' if doc is None else doc}"
                    for key, doc in sorted(pairs))


def canonical(value: Any) -> str:
    """Canonical JSON: sorted keys, no spaces."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def parse(data: bytes, path: Path, offset: int) -> Chunk:
    """The lines of ``data``, read from the log ``path`` at byte ``offset`` (for messages).
    Raises LogError for a line that fails its checksum or is not a change, when a line
    follows it (then it is not the torn tail)."""
    out = Chunk()
    pos = 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        if end < 0:
            out.tail = True  # incomplete: being written, or torn
            return out
        payload = _payload(data[pos:end])
        if payload is None:
            if data[end + 1:].strip(b"\0\n"):
                raise LogError(f"checkpoint log {path}: line at byte {offset + pos}: checksum "
                               f"mismatch or not a change (file corrupt)")
            out.tail = True  # torn last line: never acknowledged, ignored
            return out
        out.payloads.append(payload)
        pos = end + 1
        out.used = pos
    return out


def _payload(line: bytes) -> dict[str, Any] | None:
    """The payload of one line (without its newline), or None when it is not a valid line."""
    digest, sep, payload = line.partition(b" ")
    if not sep or len(digest) != 64 or hashlib.sha256(payload).hexdigest().encode() != digest:
        return None
    try:
        doc = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return None
    if (not isinstance(doc, dict) or not isinstance(doc.get("claims"), dict)
            or not isinstance(doc.get("unprepared"), dict)):
        return None
    return doc


def append(fd: int, line: bytes) -> None:
    """Append ``line`` to the log open at ``fd`` (O_APPEND) and make it durable
    (``fdatasync``). Raises OSError; then part of the line may be in the file."""
    view = memoryview(line)
    while view:
        view = view[os.write(fd, view):]
    os.fdatasync(fd)


def create(path: Path) -> int:
    """Create (or empty) the log at ``path``, mode 0600, and return its descriptor
    (:data:`OPEN_FLAGS`). Its directory entry is made durable by the caller (the snapshot's
    rename fsyncs the same directory)."""
    fd = os.open(path, OPEN_FLAGS | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
    except BaseException:
        os.close(fd)
        raise
    return fd
