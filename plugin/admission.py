"""Admission of claims to prepare: a pure function of the checkpoint's content, the plans of
one kubelet call and the liveness of checkpoint owners. The caller runs it under the
checkpoint's file lock and records the admitted claims in the same write.

Rules (kubelet-wire-protocol fact sheet §2.3, §4.2; issues 3 and 16), per claim, in order:

- Already ``PrepareCompleted``: answered from its record (nothing runs again).
- Another live instance's ``PrepareStarted`` (rolling update): refused with a retryable error.
- Stale prepare retry: unprepare leaves an ``unprepared`` mark (claim UID + allocation
  fingerprint + a digest of ``status.reservedFor`` as the claim's last prepare read it). A
  prepare of a marked UID whose allocation matches the mark (or the mark does not know it)
  is refused when ``status.reservedFor`` is empty (a legitimate prepare always comes from a
  pod the claim is reserved for: the kubelet only runs pods the claim lists, and the
  resourceclaim controller clears the entry only once the pod is gone), or when it still
  names exactly the consumers of the mark (the claim has not changed since its unprepare:
  a stale retry of a terminated pod's prepare). A new pod reserving the claim changes it.
- Device busy: a device still recorded for another claim (any phase, not adminAccess) is
  refused with a retryable error unless the device allows multiple allocations or the new
  result has adminAccess. Claims admitted earlier in the same call count as recorded.

An admitted claim's record is its plan's ``PrepareStarted`` record; recording it clears the
claim's ``unprepared`` mark.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from drakit.plugin.checkpoint import CheckpointState, ClaimRecord, UnpreparedRecord
from drakit.plugin.claimplan import Plan


@dataclass
class Admission:
    """What :func:`admit` decided, by claim UID: ``started`` (admitted; their
    ``PrepareStarted`` records), ``completed`` (already prepared: their records),
    ``refused`` (the claim's error). ``prepared``: admitted claims the caller prepared
    before recording them (their ``PrepareCompleted`` records, see
    :mod:`drakit.plugin.prepare`)."""

    started: dict[str, ClaimRecord] = field(default_factory=dict)
    completed: dict[str, ClaimRecord] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    prepared: dict[str, ClaimRecord] = field(default_factory=dict)


def busy_devices(claims: Mapping[str, ClaimRecord]) -> dict[tuple[str, str], str]:
    """(pool, device) → the claim UID it is recorded for (adminAccess results excluded)."""
    busy: dict[tuple[str, str], str] = {}
    for uid, rec in claims.items():
        for d in rec.devices:
            if not d.admin_access:
                busy.setdefault((d.pool, d.device), uid)
    return busy


def admit(claims: Mapping[str, ClaimRecord], unprepared: Mapping[str, UnpreparedRecord],
          plans: Iterable[Plan], owner: str, owner_alive: Callable[[str | None], bool],
          now: float) -> Admission:
    """Decide each plan against the checkpoint content (``claims``, ``unprepared``) for
    this instance ``owner`` (see the module docstring). ``owner_alive(owner)`` tells a
    live instance from a crashed one; ``now`` (seconds since the epoch) stamps the
    records. Reads its arguments only."""
    out = Admission()
    busy = busy_devices(claims)
    for p in plans:
        uid = p.ref.uid
        existing = claims.get(uid)
        if existing is not None and existing.phase == "PrepareCompleted":
            out.completed[uid] = existing
            continue
        if existing is not None and held_elsewhere(existing, owner, owner_alive):
            out.refused[uid] = held_elsewhere_error(p.name, existing)
            continue
        error = _stale(p, unprepared.get(uid)) or _device_busy(p, busy)
        if error:
            out.refused[uid] = error
            continue
        out.started[uid] = p.started(owner, now)
        for it in p.items:
            if not it.alloc.admin_access:
                busy.setdefault((it.alloc.pool, it.alloc.device), uid)
    return out


def held_elsewhere(rec: ClaimRecord, owner: str,
                   owner_alive: Callable[[str | None], bool]) -> bool:
    """True when ``rec`` is being prepared by another live instance of this plugin (a
    ``PrepareStarted`` record of another owner whose owner lock is held): neither a prepare
    nor an unprepare may touch it here."""
    return rec.phase == "PrepareStarted" and rec.owner != owner and owner_alive(rec.owner)


def held_elsewhere_error(what: str, rec: ClaimRecord) -> str:
    """The retryable error of a claim :func:`held_elsewhere`; ``what`` names the claim."""
    return f"{what}: being prepared by another instance of this plugin ({rec.owner}); retry"


def record(state: CheckpointState, admission: Admission) -> None:
    """Put the admitted claims of ``admission`` (``started`` and ``prepared``) into
    ``state``, clearing their marks."""
    for uid, rec in (admission.started | admission.prepared).items():
        state.claims[uid] = rec
        state.unprepared.pop(uid, None)


def drop_started(claims: dict[str, ClaimRecord], uids: Iterable[str], owner: str) -> None:
    """Drop the ``PrepareStarted`` records of ``uids`` that ``owner`` still holds (a
    prepare that failed, a rollback that finished)."""
    for uid in uids:
        cur = claims.get(uid)
        if cur is not None and cur.owner == owner and cur.phase == "PrepareStarted":
            del claims[uid]


def _stale(p: Plan, mark: UnpreparedRecord | None) -> str:
    if mark is None or mark.fingerprint not in (None, p.fingerprint):
        return ""
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(mark.at))
    if not p.reserved:
        return (f"{p.name}: stale prepare: this allocation was unprepared at {when} and "
                "status.reservedFor is empty; not preparing it again")
    if p.reservations is not None and p.reservations == mark.reservations:
        return (f"{p.name}: stale prepare: the claim was unprepared at {when} and has "
                "not changed since (status.reservedFor names the same consumers); "
                "not preparing it again")
    return ""


def _device_busy(p: Plan, busy: Mapping[tuple[str, str], str]) -> str:
    for it in p.items:
        other = busy.get((it.alloc.pool, it.alloc.device))
        if other is not None and other != p.ref.uid and not it.shareable:
            return (f"{p.name}: status.allocation.devices.results[{it.alloc.index}]: device "
                    f"{it.alloc.pool}/{it.alloc.device} is still prepared for claim "
                    f"{other}; retry after it is unprepared")
    return ""
