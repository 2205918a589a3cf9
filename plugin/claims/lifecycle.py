"""A claim's life in the checkpoint: every transition of its record, as plain functions of
the checkpoint's content and one event. The checkpoint runs them as its changes
(:meth:`drakit.plugin.claims.checkpoint.Checkpoint.change`, under its locks); none does
I/O: what a rule needs from outside (the time, the owners whose process is gone, the
records the caller built) is read before and passed in. The side effects (vendor hooks, CDI
specs, AllocatedDeviceStatus) run outside the lock, before or after the transition, in
:mod:`drakit.plugin.claims.prepare`, :mod:`drakit.plugin.claims.unprepare` and
:mod:`drakit.plugin.claims.recovery`.

Phases of a claim UID: none, ``PrepareStarted`` (recorded before any vendor hook that
changes the node runs, with the instance that runs it as ``owner``), ``PrepareCompleted``,
and the ``unprepared`` mark a released claim leaves for a while.

==================  ==================  ====================  ============================
phase               event               next phase            effects (outside the lock)
==================  ==================  ====================  ============================
none or mark        ``admit``           PrepareStarted        then the hooks and the CDI
                                        (owner: this          spec, then ``complete``
                                        instance)
none or mark        ``admit`` with the  PrepareCompleted      the hooks (changing nothing)
                    record built from   (status owed)         ran before; the CDI spec is
                    the hooks' outputs                        written after
PrepareCompleted    ``admit``           unchanged             answered from the record
                                                              (spec re-written if missing)
PrepareStarted of   ``admit``           unchanged             refused: retryable error
a live owner
PrepareStarted      ``complete``        PrepareCompleted      AllocatedDeviceStatus queued
(this owner)                            (status owed)
PrepareStarted      ``drop_started``    none                  its devices were rolled back
(this owner)                                                  before
PrepareCompleted    ``drop_recorded``   none                  its CDI spec could not be
(just recorded)                                               written: rolled back after
PrepareStarted of   ``adopt``           PrepareStarted        rolled back, then
a gone owner                            (owner: this          ``drop_started``
                                        instance)
any record          ``release``         mark (status removal  hooks run and CDI spec
                                        owed if it was        removed before; the status
                                        PrepareCompleted)     removal queued after
none                ``release``         mark, no fingerprint  any CDI spec removed before
PrepareCompleted,   ``settle``          status no longer      the status writer's apply
status owed                             owed                  held
mark, status owed   ``settle``          status no longer      the removal held
                                        owed
==================  ==================  ====================  ============================

Every admitted claim's ``unprepared`` mark is cleared in the same write.

Admission rules (the kubelet's DRA manager, k8s.io/kubernetes pkg/kubelet/cm/dra/manager.go),
per claim, in order:

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

Owner liveness is data: ``dead`` is the set of owners whose owner lock was found free
before the change (:meth:`drakit.plugin.claims.checkpoint.Checkpoint.dead_owners`). An
owner not in it counts as alive, so a record that appeared since is refused for a retry,
never taken over.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from drakit.plugin.claims.checkpoint import (
    UNPREPARED_TTL,
    CheckpointState,
    ClaimRecord,
    UnpreparedRecord,
)
from drakit.plugin.claims.resourceclaim import Plan


@dataclass
class Admission:
    """What :func:`admit` decided, by claim UID: ``started`` (admitted and recorded
    ``PrepareStarted``: their records), ``completed_now`` (admitted and recorded
    ``PrepareCompleted`` at once from the record the caller built before admission: their
    hooks change nothing on the node, see :mod:`drakit.plugin.claims.prepare`),
    ``already_completed`` (``PrepareCompleted`` before this call: their records),
    ``refused`` (the claim's error)."""

    started: dict[str, ClaimRecord] = field(default_factory=dict)
    completed_now: dict[str, ClaimRecord] = field(default_factory=dict)
    already_completed: dict[str, ClaimRecord] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)


#: reservedFor digests remembered (for the stale-prepare rule); the oldest are forgotten.
MAX_REMEMBERED_RESERVATIONS = 4096


class Reservations:
    """claim UID → digest of ``status.reservedFor`` as the claim's last prepare read it (an
    unprepare keeps it in its mark for the stale-prepare rule); the newest
    :data:`MAX_REMEMBERED_RESERVATIONS`. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[str, str] = {}

    def remember(self, uid: str, digest: str | None) -> None:
        if digest:
            with self._lock:
                self._seen.pop(uid, None)
                self._seen[uid] = digest
                while len(self._seen) > MAX_REMEMBERED_RESERVATIONS:
                    del self._seen[next(iter(self._seen))]

    def of(self, uids: Collection[str]) -> dict[str, str]:
        with self._lock:
            return {uid: self._seen[uid] for uid in uids if uid in self._seen}


#: (pool, device) → the UIDs of the claims whose records hold it, in the order first seen
#: (an insertion-ordered dict used as a set).
Holders = Mapping[tuple[str, str], Mapping[str, None]]


def device_holders(claims: Mapping[str, ClaimRecord]) -> Holders:
    """(pool, device) → the UIDs of the claims recorded for it (adminAccess results
    excluded): what the device-busy rule checks."""
    return DeviceHolders().of(claims)


class DeviceHolders:
    """:func:`device_holders` of a claims map, kept up to date between calls instead of
    built again: the checkpoint's records are frozen (a change replaces a record, never
    edits one), so :meth:`of` compares the map with the one it saw last by record identity
    and re-reads only the records that changed. One admission then costs one identity check
    per record instead of a walk over every record's devices (the walk made a burst of
    prepares quadratic in the claims prepared on the node: ``make bench`` throughput).

    Not thread-safe: the caller holds the checkpoint's lock (admissions run inside its
    changes, one at a time)."""

    def __init__(self) -> None:
        self._seen: dict[str, ClaimRecord] = {}
        self._held: dict[tuple[str, str], dict[str, None]] = {}

    def of(self, claims: Mapping[str, ClaimRecord]) -> Holders:
        """The holders of every device for ``claims`` (valid until the next call)."""
        seen = self._seen
        for uid in seen.keys() - claims.keys():
            self._drop(uid, seen[uid])
        for uid, rec in claims.items():
            old = seen.get(uid)
            if old is not rec:
                if old is not None:
                    self._drop(uid, old)
                for key in _held_by(rec):
                    self._held.setdefault(key, {})[uid] = None
        self._seen = dict(claims)
        return self._held

    def _drop(self, uid: str, rec: ClaimRecord) -> None:
        for key in _held_by(rec):
            uids = self._held.get(key)
            if uids is not None:
                uids.pop(uid, None)
                if not uids:
                    del self._held[key]


def _held_by(rec: ClaimRecord) -> list[tuple[str, str]]:
    return [(d.pool, d.device) for d in rec.devices if not d.admin_access]


def decide(claims: Mapping[str, ClaimRecord], unprepared: Mapping[str, UnpreparedRecord],
           plans: Iterable[Plan], owner: str, dead: Collection[str], now: float,
           holders: DeviceHolders | None = None,
           completed_now: Mapping[str, ClaimRecord] | None = None) -> Admission:
    """Decide each plan against the checkpoint content (``claims``, ``unprepared``) for
    this instance ``owner`` (see the module docstring); ``dead``: the owners known gone;
    ``now`` (seconds since the epoch) stamps the records. ``holders`` (the caller's
    :class:`DeviceHolders`) saves building the device holders from every record.
    ``completed_now``: claim UID → the ``PrepareCompleted`` record the caller built for the
    claim, recorded instead of ``PrepareStarted`` when it is admitted. Reads its arguments
    only (and updates ``holders``)."""
    out = Admission()
    held = holders.of(claims) if holders is not None else device_holders(claims)
    this_call: dict[tuple[str, str], str] = {}  # devices of the claims admitted so far
    for p in plans:
        uid = p.ref.uid
        existing = claims.get(uid)
        if existing is not None and existing.phase == "PrepareCompleted":
            out.already_completed[uid] = existing
            continue
        if existing is not None and held_elsewhere(existing, owner, dead):
            out.refused[uid] = held_elsewhere_error(p.name, existing)
            continue
        error = _stale(p, unprepared.get(uid), now) or _device_busy(p, held, this_call)
        if error:
            out.refused[uid] = error
            continue
        done = completed_now.get(uid) if completed_now else None
        if done is not None:
            out.completed_now[uid] = done
        else:
            out.started[uid] = p.started(owner, now)
        for it in p.items:
            if not it.alloc.admin_access:
                this_call.setdefault((it.alloc.pool, it.alloc.device), uid)
    return out


def owner_gone(rec: ClaimRecord, dead: Collection[str]) -> bool:
    """True when the instance that recorded ``rec`` is gone: no owner, or one of ``dead``."""
    return rec.owner is None or rec.owner in dead


def held_elsewhere(rec: ClaimRecord, owner: str, dead: Collection[str]) -> bool:
    """True when ``rec`` is being prepared by another live instance of this plugin (a
    ``PrepareStarted`` record of another owner not known gone): neither a prepare nor an
    unprepare may touch it here."""
    return rec.phase == "PrepareStarted" and rec.owner != owner and not owner_gone(rec, dead)


def held_elsewhere_error(what: str, rec: ClaimRecord) -> str:
    """The retryable error of a claim :func:`held_elsewhere`; ``what`` names the claim."""
    return f"{what}: being prepared by another instance of this plugin ({rec.owner}); retry"


def record(state: CheckpointState, admission: Admission) -> None:
    """Put the admitted claims of ``admission`` (``started`` and ``completed_now``) into
    ``state``, clearing their marks."""
    for uid, rec in (admission.started | admission.completed_now).items():
        state.claims[uid] = rec
        state.unprepared.pop(uid, None)


def admit(state: CheckpointState, plans: Iterable[Plan], owner: str, dead: Collection[str],
          now: float, holders: DeviceHolders | None = None,
          completed_now: Mapping[str, ClaimRecord] | None = None) -> Admission:
    """Admission of one kubelet call's claims: :func:`decide` against ``state``, then
    :func:`record` of the admitted claims into it."""
    got = decide(state.claims, state.unprepared, plans, owner, dead, now, holders,
                 completed_now)
    record(state, got)
    return got


def complete(state: CheckpointState, done: Mapping[str, ClaimRecord], failed: Iterable[str],
             owner: str) -> None:
    """A call's ``PrepareStarted`` claims ran their hooks: ``done`` (claim UID → its
    ``PrepareCompleted`` record) recorded; the ``PrepareStarted`` records of ``failed``
    that ``owner`` still holds dropped."""
    state.claims.update(done)
    drop_started(state, failed, owner)


def drop_started(state: CheckpointState, uids: Iterable[str], owner: str) -> None:
    """Drop the ``PrepareStarted`` records of ``uids`` that ``owner`` still holds (a
    prepare that failed, a rollback that finished)."""
    for uid in uids:
        cur = state.claims.get(uid)
        if cur is not None and cur.owner == owner and cur.phase == "PrepareStarted":
            del state.claims[uid]


def drop_recorded(state: CheckpointState, records: Mapping[str, ClaimRecord]) -> None:
    """Drop the records of ``records`` (claim UID → record) still recorded as they are (a
    claim whose CDI spec could not be written after its ``PrepareCompleted`` record)."""
    for uid, rec in records.items():
        if state.claims.get(uid) == rec:
            del state.claims[uid]


def adopt(state: CheckpointState, uids: Iterable[str], owner: str,
          dead: Collection[str]) -> list[ClaimRecord]:
    """Make ``owner`` the owner of the ``PrepareStarted`` records of ``uids`` whose owner is
    gone (``dead``), so it can roll them back; returns the adopted records."""
    adopted = []
    for uid in uids:
        rec = state.claims.get(uid)
        if (rec is not None and rec.phase == "PrepareStarted" and rec.owner != owner
                and owner_gone(rec, dead)):
            state.claims[uid] = rec.model_copy(update={"owner": owner})
            adopted.append(state.claims[uid])
    return adopted


def release(state: CheckpointState, records: Mapping[str, ClaimRecord],
            unknown: Iterable[str], now: float, reservations: Mapping[str, str],
            owe_status: bool) -> None:
    """An unprepare (:mod:`drakit.plugin.claims.unprepare`): the ``records`` (claim UID →
    record, their CDI specs removed) dropped, each leaving an ``unprepared`` mark (its
    allocation fingerprint, ``now``, the ``reservations`` digest its last prepare read, and
    owing the removal of its AllocatedDeviceStatus entries when ``owe_status`` and it was
    ``PrepareCompleted``); the ``unknown`` UIDs (no record) get a mark without a fingerprint
    unless they have a record or mark by now."""
    for uid, rec in records.items():
        state.claims.pop(uid, None)
        state.unprepared[uid] = UnpreparedRecord(
            fingerprint=rec.fingerprint, at=now, reservations=reservations.get(uid),
            namespace=rec.namespace, name=rec.name,
            status_owed=owe_status and rec.phase == "PrepareCompleted")
    for uid in unknown:
        if uid not in state.claims and uid not in state.unprepared:
            state.unprepared[uid] = UnpreparedRecord(fingerprint=None, at=now,
                                                     reservations=reservations.get(uid))


def settle(state: CheckpointState, applied: Mapping[str, float],
           removed: Collection[str]) -> bool:
    """The status writer's work held at the API server: the ``status_owed`` flags of
    ``applied`` (claim UID → ``prepared_at`` of the record whose entries were applied: a
    claim prepared again since keeps its own flag) and of the marks of ``removed`` (claim
    UIDs whose entries are gone) cleared (:mod:`drakit.plugin.claims.owedstatus`). True
    when something changed."""
    changed = False
    for uid, stamp in applied.items():
        rec = state.claims.get(uid)
        if rec is not None and rec.status_owed and rec.prepared_at == stamp:
            state.claims[uid] = rec.model_copy(update={"status_owed": False})
            changed = True
    for uid in removed:
        mark = state.unprepared.get(uid)
        if mark is not None and mark.status_owed and uid not in state.claims:
            state.unprepared[uid] = mark.model_copy(update={"status_owed": False})
            changed = True
    return changed


def _stale(p: Plan, mark: UnpreparedRecord | None, now: float) -> str:
    if mark is None or mark.fingerprint not in (None, p.fingerprint):
        return ""
    if now - mark.at >= UNPREPARED_TTL:  # kept only for its owed status removal
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


def _device_busy(p: Plan, held: Holders, this_call: Mapping[tuple[str, str], str]) -> str:
    for it in p.items:
        if it.shareable:
            continue
        key = (it.alloc.pool, it.alloc.device)
        other = next((u for u in held.get(key, ()) if u != p.ref.uid), None)
        if other is None and this_call.get(key, p.ref.uid) != p.ref.uid:
            other = this_call[key]
        if other is not None:
            return (f"{p.name}: status.allocation.devices.results[{it.alloc.index}]: device "
                    f"{it.alloc.pool}/{it.alloc.device} is still prepared for claim "
                    f"{other}; retry after it is unprepared")
    return ""
