"""Prepare of the claims one kubelet call runs (single flight already decided that this call
runs them; see :mod:`drakit.plugin.node`).

Per claim: answered from its ``PrepareCompleted`` record when there is one; else read at the
API (concurrently, bounded by the call's deadline) and planned
(:func:`drakit.plugin.claimplan.plan_claim`); then, in ONE checkpoint write for the whole
call, admitted (:func:`drakit.plugin.admission.admit`, under the file lock) and recorded
``PrepareStarted``; each admitted claim's devices are prepared and its CDI spec written
(:class:`drakit.plugin.claimdevices.ClaimDevices`, no lock held); then ONE write records
every claim ``PrepareCompleted`` (or drops the failed ones); finally the AllocatedDeviceStatus
entries are queued. A completed record that cannot be written rolls the call's claims back.

Write order and crashes: the ``PrepareStarted`` record comes before any side effect, so a
crash leaves a record recovery rolls back (:mod:`drakit.plugin.recovery`), never a device
prepared with no record; the CDI spec comes before the ``PrepareCompleted`` record, so a
completed record always has its spec. The spec's content is fsynced before its rename but
its directory is not (issue #18: one fsync less per prepare): after a power loss the spec
of a completed record may be missing (never partial), and the start-up recovery re-writes
it from the record before the kubelet can call.

Claims without a prepare hook that changes the node (every device's plugin keeps
:meth:`drakit.discovery.plugin.DiscoveryPlugin.prepare`'s default or declares
``prepare_changes_node = False``: :func:`drakit.plugin.claimdevices.without_prepare_hook`)
skip the ``PrepareStarted`` write: their hooks run first, outside the file lock (they change
nothing, so a claim admission then refuses has left nothing behind, and a slow vendor hook
never holds the lock); inside the admission write, under the lock, their CDI spec is written
and they are recorded ``PrepareCompleted`` at once (one checkpoint write per call instead of
two). What a crash can leave of them is a CDI spec without a record, which is what
``PrepareStarted`` would have been rolled back to anyway; the orphan-spec sweep (start-up and
every orphan pass, under the same file lock, so it never meets a spec being written) removes
it, and the kubelet's retry prepares the claim afresh. A failed admission write removes their
specs again (under the lock, only while no record names the claim).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Protocol

from drakit.discovery.plugin import ClaimRef, PreparedDevice
from drakit.plugin.admission import Admission, DeviceHolders, admit, drop_started, record
from drakit.plugin.checkpoint import Checkpoint, CheckpointError, CheckpointState, ClaimRecord
from drakit.plugin.claimdevices import (
    ClaimDevices,
    answer,
    claim_ref,
    log_context,
    without_prepare_hook,
)
from drakit.plugin.claimplan import Plan, plan_claim
from drakit.plugin.claims import ClaimError, RetryableClaimError
from drakit.plugin.events import Events
from drakit.plugin.inventory import Inventory
from drakit.plugin.retry import describe
from drakit.plugin.types import PrepareResult

log = logging.getLogger("drakit.plugin.node")

#: Threads reading the claims of one kubelet call concurrently (shared by all calls).
CLAIM_READ_THREADS = 8
#: reservedFor digests remembered (for the stale-prepare rule); the oldest are forgotten.
MAX_REMEMBERED_RESERVATIONS = 4096


class ClaimSource(Protocol):
    def get_claim(self, namespace: str, name: str,
                  deadline: float | None = None) -> dict[str, Any] | None:
        """The claim as resource.k8s.io/v1 JSON, or None when it does not exist; gives up
        by ``deadline`` (``time.monotonic()`` seconds) when one is given."""
        ...


class StatusWriter(Protocol):
    def write(self, claim: ClaimRef, record: ClaimRecord) -> None: ...
    def remove(self, claim: ClaimRef) -> None: ...


def checkpoint_failed(events: Events, e: CheckpointError) -> str:
    """Log and report a checkpoint failure; returns the claim error (its message)."""
    msg = str(e)
    log.error("%s", msg)
    events.checkpoint_error(msg)
    return msg


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


class Prepare:
    """The prepare of owned claims (see the module docstring) for ``driver_name``."""

    def __init__(self, driver_name: str, inventory: Inventory, claims: ClaimSource,
                 checkpoint: Checkpoint, devices: ClaimDevices, status: StatusWriter | None,
                 events: Events, reservations: Reservations) -> None:
        self.driver_name = driver_name
        self.inventory = inventory
        self.claim_source = claims
        self.checkpoint = checkpoint
        self.devices = devices
        self.status = status
        self.events = events
        self.reservations = reservations
        self._readers: ThreadPoolExecutor | None = None
        self._readers_lock = threading.Lock()
        self._holders = DeviceHolders()  # used under the checkpoint's lock only

    def run(self, refs: list[ClaimRef], deadline: float) -> dict[str, PrepareResult]:
        """One PrepareResult per claim of ``refs`` (validated, distinct); ``deadline``
        (monotonic seconds) bounds the API reads."""
        results: dict[str, PrepareResult] = {}
        todo: list[ClaimRef] = []
        for ref in refs:
            try:
                rec = self.checkpoint.get(ref.uid)
            except CheckpointError as e:
                results[ref.uid] = PrepareResult(error=checkpoint_failed(self.events, e))
                continue
            if rec is not None and rec.phase == "PrepareCompleted":
                results[ref.uid] = self.devices.rewrite_spec(rec)[0]
            else:
                todo.append(ref)
        plans: list[Plan] = []
        for ref, got in zip(todo, self._plan_all(todo, deadline), strict=True):
            if isinstance(got, Plan):
                plans.append(got)
            elif isinstance(got, ClaimError):
                results[ref.uid] = PrepareResult(error=str(got))
                log.warning("prepare failed: %s", got, extra=log_context(ref))
            else:
                results[ref.uid] = PrepareResult(
                    error=f"ResourceClaim {ref.namespace}/{ref.name}: {type(got).__name__}: {got}")
                log.error("prepare failed: %s", got, exc_info=got, extra=log_context(ref))
        if plans:
            results.update(self._run_plans(plans))
        return results

    def _plan_all(self, refs: list[ClaimRef], deadline: float) -> list[Plan | BaseException]:
        """:meth:`_plan` of every claim, concurrently (the first in this thread, the others
        on the shared reader threads); each result is the plan or the exception it raised.
        A read still running at ``deadline`` is answered with a retryable error."""
        def plan(ref: ClaimRef) -> Plan | BaseException:
            try:
                return self._plan(ref, deadline)
            except Exception as e:
                return e

        if len(refs) <= 1:
            return [plan(r) for r in refs]
        with self._readers_lock:
            if self._readers is None:
                self._readers = ThreadPoolExecutor(CLAIM_READ_THREADS,
                                                   thread_name_prefix="claim-read")
        futures = [self._readers.submit(plan, r) for r in refs[1:]]
        out: list[Plan | BaseException] = [plan(refs[0])]
        for ref, fut in zip(refs[1:], futures, strict=True):
            try:
                out.append(fut.result(timeout=max(0.0, deadline - time.monotonic()) + 0.5))
            except FutureTimeout:
                fut.cancel()
                out.append(RetryableClaimError(
                    f"ResourceClaim {ref.namespace}/{ref.name}: reading it from the API did "
                    "not finish before the call's deadline; retry"))
        return out

    def _plan(self, ref: ClaimRef, deadline: float) -> Plan:
        try:
            claim = self.claim_source.get_claim(ref.namespace, ref.name, deadline=deadline)
        except Exception as e:
            raise RetryableClaimError(
                f"ResourceClaim {ref.namespace}/{ref.name}: cannot read it from the API: "
                f"{describe(e)}") from None
        if claim is None:
            raise ClaimError(f"ResourceClaim {ref.namespace}/{ref.name}: not found")
        return plan_claim(ref, claim, self.driver_name, self.inventory)

    def _admit(self, state: CheckpointState, plans: list[Plan], owner: str,
               pure: dict[str, list[PreparedDevice]], early: dict[str, ClaimRecord],
               errors: dict[str, str]) -> Admission:
        """The checkpoint change of admission: decide; write the CDI specs of the admitted
        claims without a prepare hook that changes the node (``pure``: their hooks' outputs,
        computed before the lock; ``early``: their started records; ``errors``: those that
        failed); record the others ``PrepareStarted`` and those ``PrepareCompleted``."""
        got = admit(state.claims, state.unprepared, plans, owner,
                    self.checkpoint.owner_alive, time.time(), self._holders)
        for p in plans:
            started = got.started.get(p.ref.uid)
            if started is None or p.ref.uid not in pure:
                continue
            del got.started[p.ref.uid]
            early[p.ref.uid] = started
            try:
                got.prepared[p.ref.uid] = self.devices.prepare(
                    p, started, time.time(), outputs=pure[p.ref.uid])
            except Exception as e:
                errors[p.ref.uid] = _failure(p, e)
        record(state, got)
        return got

    def _run_plans(self, plans: list[Plan]) -> dict[str, PrepareResult]:
        early: dict[str, ClaimRecord] = {}
        errors: dict[str, str] = {}
        pure: dict[str, list[PreparedDevice]] = {}
        for p in plans:  # hooks that change nothing on the node run before the lock
            if without_prepare_hook(p):
                try:
                    pure[p.ref.uid] = self.devices.compute(p)
                except Exception as e:
                    errors[p.ref.uid] = _failure(p, e)
        plans = [p for p in plans if p.ref.uid not in errors]
        if not plans:
            return _failed(errors)
        try:
            owner = self.checkpoint.owner
            adm = self.checkpoint.update_state(
                lambda s: self._admit(s, plans, owner, pure, early, errors))
        except CheckpointError as e:
            msg = checkpoint_failed(self.events, e)
            self._undo_unrecorded(early)
            # the claims whose hook failed before the write keep their own error
            return _failed(errors) | {p.ref.uid: PrepareResult(error=msg) for p in plans}
        for p in plans:  # the claims as this call saw them, for a later unprepare's mark
            self.reservations.remember(p.ref.uid, p.reservations)
        results = {uid: PrepareResult(error=err) for uid, err in adm.refused.items()}
        for uid, err in adm.refused.items():
            log.warning("prepare refused: %s", err, extra={"claim_uid": uid})
        for uid, rec in adm.completed.items():
            results[uid] = self.devices.rewrite_spec(rec)[0]

        done: dict[str, ClaimRecord] = {}
        for p in plans:
            started = adm.started.get(p.ref.uid)
            if started is None:
                continue
            try:
                done[p.ref.uid] = self.devices.prepare(p, started, time.time())
            except Exception as e:
                errors[p.ref.uid] = _failure(p, e)
        results |= _failed(errors)
        if adm.started:
            failed = [uid for uid in adm.started if uid not in done]
            try:
                self.checkpoint.update(lambda claims: _complete(claims, done, failed, owner))
            except CheckpointError as e:
                # Not recorded as completed: roll these claims back.
                msg = checkpoint_failed(self.events, e)
                for rec in done.values():
                    self.devices.rollback(claim_ref(rec), list(rec.devices))
                results |= {uid: PrepareResult(error=msg) for uid in adm.started}
                done = {}
        done |= adm.prepared
        if done:
            self.devices.crash("after-checkpoint-write")
        for p in plans:
            if p.ref.uid not in done:
                continue
            rec = done[p.ref.uid]
            if self.status is not None:
                try:
                    self.status.write(p.ref, rec)
                except Exception:
                    log.exception("writing AllocatedDeviceStatus failed",
                                  extra=log_context(p.ref))
            results[p.ref.uid] = answer(rec)
            log.debug("prepared claim with %d device(s)", len(rec.devices),
                      extra=log_context(p.ref))
        return results

    def _undo_unrecorded(self, early: dict[str, ClaimRecord]) -> None:
        """After a failed admission write: remove the CDI specs written for ``early``
        claims, under the file lock and only while no record names the claim (another
        instance may have prepared it meanwhile)."""
        if not early:
            return
        try:
            with self.checkpoint.locked() as state:
                for uid, rec in early.items():
                    if uid not in state.claims:
                        self.devices.rollback(claim_ref(rec), [])
        except CheckpointError:
            log.error("CDI specs of %d claim(s) not recorded are left for the orphan sweep",
                      len(early))


def _failed(errors: dict[str, str]) -> dict[str, PrepareResult]:
    """The results of the claims in ``errors`` (claim UID → message), each logged."""
    for uid, msg in errors.items():
        log.warning("prepare failed: %s", msg, extra={"claim_uid": uid})
    return {uid: PrepareResult(error=msg) for uid, msg in errors.items()}


def _failure(p: Plan, e: Exception) -> str:
    return str(e) if isinstance(e, ClaimError) else f"{p.name}: {type(e).__name__}: {e}"


def _complete(claims: dict[str, ClaimRecord], done: dict[str, ClaimRecord],
              failed: list[str], owner: str) -> None:
    """The checkpoint change after the devices ran: ``done`` recorded ``PrepareCompleted``;
    the ``PrepareStarted`` records of ``failed`` (still ``owner``'s) dropped."""
    claims.update(done)
    drop_started(claims, failed, owner)
