"""Prepare of the claims one kubelet call runs (single flight already decided that this call
runs them; see :mod:`drakit.plugin.claims.node`), read top to bottom from :meth:`Prepare.run`:

1. A claim with a ``PrepareCompleted`` record is answered from it (its CDI spec re-written
   when it went missing). The others are read at the API (concurrently, bounded by the
   call's deadline) and planned (:func:`drakit.plugin.claims.resourceclaim.plan_claim`).
2. Claims whose plugins all declare ``prepare_changes_node = False`` (on purpose; nothing
   is inferred from overridden methods: :func:`~drakit.plugin.claims.claimdevices.\
prepare_changes_nothing`) are prepared in ONE checkpoint write
   (:meth:`Prepare.prepare_in_one_write`): their hooks run first, outside any lock (they
   change nothing on the node, so a claim that admission then refuses has left nothing
   behind); one write admits them and records them ``PrepareCompleted`` from the hooks'
   outputs; then their CDI specs are written. A spec that cannot be written drops its
   record again (a second write, only then).
3. The other claims take TWO writes (:meth:`Prepare.prepare_in_two_writes`): one admits
   them and records them ``PrepareStarted``; their hooks and CDI specs run; one records
   them ``PrepareCompleted`` (or drops the failed ones). A completed record that cannot be
   written rolls the claims back.
4. The AllocatedDeviceStatus entries are queued (their wish is in the record:
   ``status_owed``); the kubelet gets the CDI device IDs.

Both paths run the hooks through one loop (:meth:`Prepare._run_hooks`): each claim's on a
worker of its own, no lock held, waited for until the call's deadline. A claim whose hooks
still run then is answered so and returned as a :class:`LatePrepare` (plain data: the
single-flight entry holds it); once its hooks end, :meth:`Prepare.settle_late` decides, in
one place, whether what they did is recorded or rolled back. The transitions of the
checkpoint are :mod:`drakit.plugin.claims.lifecycle`'s.

Write order and crashes: a CDI spec is written only while a record names its claim, so
the orphan-spec sweep (which removes specs no record names, under the checkpoint's file
lock) never meets a prepare in progress, here or in another instance. The
``PrepareStarted`` record comes before any hook that changes the node, so a crash leaves a
record recovery rolls back (:mod:`drakit.plugin.claims.recovery`), never a device prepared
with no record. A ``PrepareCompleted`` record may lack its spec: after a crash between the
record and the spec (step 2), or after a power loss (the spec's content is fsynced before
its rename but its directory is not: one fsync less per prepare); the start-up recovery
re-writes it from the record before the kubelet can call, and a prepare answered from the
record re-writes it too. The one-write path saves one checkpoint write per claim;
``make bench`` measures what it buys.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from drakit.cdi.spec import Device as CDIDevice
from drakit.discovery.plugin import ClaimRef
from drakit.plugin.api.retry import describe
from drakit.plugin.claims.checkpoint import Checkpoint, CheckpointError, ClaimRecord
from drakit.plugin.claims.claimdevices import (
    ClaimDevices,
    HookProgress,
    HookRun,
    HookWorkers,
    answer,
    claim_ref,
    prepare_changes_nothing,
)
from drakit.plugin.claims.lifecycle import (
    Admission,
    DeviceHolders,
    Reservations,
    admit,
    complete,
    drop_recorded,
    drop_started,
)
from drakit.plugin.claims.owedstatus import StatusQueue
from drakit.plugin.claims.resourceclaim import ClaimError, Plan, RetryableClaimError, plan_claim
from drakit.plugin.events import Events
from drakit.plugin.klog import keys_of
from drakit.plugin.slices.inventory import Inventory
from drakit.plugin.types import PrepareResult

log = logging.getLogger("drakit.plugin.claims.node")

#: Threads reading the claims of one kubelet call concurrently (shared by all calls).
CLAIM_READ_THREADS = 8


class ClaimSource(Protocol):
    def get_claim(self, namespace: str, name: str,
                  deadline: float | None = None) -> dict[str, Any] | None:
        """The claim as resource.k8s.io/v1 JSON, or None when it does not exist; gives up
        by ``deadline`` (``time.monotonic()`` seconds) when one is given."""
        ...


@dataclass
class LatePrepare:
    """A claim whose prepare hooks still ran at its call's deadline: its ``plan``, its
    ``run`` on the worker, and the ``owner`` of its ``PrepareStarted`` record (None: its
    hooks change nothing on the node and nothing was recorded). The call answered it with
    :meth:`still_running`; its single-flight entry holds it until
    :meth:`Prepare.settle_late` has decided what becomes of the claim."""

    plan: Plan
    run: HookRun
    owner: str | None

    def still_running(self) -> str:
        """The claim's error while its hook runs: names the plugin, the hook and the device."""
        return self.run.progress.still_running(self.plan.name)


@dataclass
class PrepareOutcome:
    """What :meth:`Prepare.run` did: one result per claim UID, and the claims whose hooks
    still run (:class:`LatePrepare`, by claim UID; their results say so)."""

    results: dict[str, PrepareResult] = field(default_factory=dict)
    late: dict[str, LatePrepare] = field(default_factory=dict)

    def fail(self, p: Plan, error: str, cause: BaseException | None = None) -> None:
        """The claim of ``p`` failed with ``error``; ``cause`` is a vendor hook's exception
        (its traceback goes into the claim's one failure line: :mod:`.node`)."""
        self.results[p.ref.uid] = PrepareResult(error=error, cause=cause)


class Prepare:
    """The prepare of owned claims (see the module docstring) for ``driver_name``."""

    def __init__(self, driver_name: str, inventory: Inventory, claims: ClaimSource,
                 checkpoint: Checkpoint, devices: ClaimDevices, status: StatusQueue | None,
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
        self._holders = DeviceHolders()  # used by admissions, under the checkpoint's lock
        self.workers = HookWorkers()

    def run(self, refs: list[ClaimRef], deadline: float) -> PrepareOutcome:
        """Prepare the claims of ``refs`` (validated, distinct UIDs); ``deadline``
        (monotonic seconds) bounds the API reads and the wait for the hooks."""
        out = PrepareOutcome()
        # 1. Answered from a PrepareCompleted record, or read at the API and planned.
        todo: list[ClaimRef] = []
        for ref in refs:
            try:
                rec = self.checkpoint.get(ref.uid)
            except CheckpointError as e:
                out.results[ref.uid] = PrepareResult(error=self.events.checkpoint_failed(e))
                continue
            if rec is not None and rec.phase == "PrepareCompleted":
                out.results[ref.uid] = self.devices.answer_from_record(rec)
            else:
                todo.append(ref)
        plans: list[Plan] = []
        for ref, got in zip(todo, self._plan_all(todo, deadline), strict=True):
            if isinstance(got, Plan):
                plans.append(got)
            elif isinstance(got, ClaimError):
                out.results[ref.uid] = PrepareResult(error=str(got))
            else:  # drakit's own bug: its traceback goes into the claim's failure line
                out.results[ref.uid] = PrepareResult(
                    error=f"ResourceClaim {ref.namespace}/{ref.name}: {type(got).__name__}: {got}",
                    cause=got)
        # 2. and 3. The two paths, by what the claims' plugins declare.
        one_write = [p for p in plans if prepare_changes_nothing(p)]
        two_writes = [p for p in plans if not prepare_changes_nothing(p)]
        if one_write:
            self.prepare_in_one_write(one_write, deadline, out)
        if two_writes:
            self.prepare_in_two_writes(two_writes, deadline, out)
        return out

    def prepare_in_one_write(self, plans: list[Plan], deadline: float,
                             out: PrepareOutcome) -> None:
        """Claims whose hooks change nothing on the node: hooks, ONE write that admits them
        and records them ``PrepareCompleted``, CDI specs. Their results go into ``out``."""
        # The hooks, each claim's on a worker of its own, until the call's deadline.
        outputs = self._run_hooks([(p, partial(self.devices.compute, p)) for p in plans],
                                  deadline, None, out)
        plans = [p for p in plans if p.ref.uid in outputs]
        # Their PrepareCompleted records, built from the hooks' outputs.
        now = time.time()
        owner = self._owner(plans, out)
        if owner is None:
            return
        built: dict[str, ClaimRecord] = {}
        specs: dict[str, list[CDIDevice]] = {}
        for p in plans:
            try:
                built[p.ref.uid], specs[p.ref.uid] = self.devices.completed(
                    p, p.started(owner, now), now, outputs[p.ref.uid],
                    owe_status=self.status is not None)
            except Exception as e:  # the hooks' outputs do not make a record
                out.fail(p, _failure(p, e))
        # One write: admission records the admitted claims PrepareCompleted.
        adm = self._admit([p for p in plans if p.ref.uid in built], owner, now, out, built)
        if adm is None or not adm.completed_now:
            return
        # Their CDI specs, after the record (no spec without a record: the orphan sweep's
        # rule); a spec that cannot be written drops its record again.
        self.devices.crash("after-checkpoint-write")
        unwritten: dict[str, ClaimRecord] = {}
        for p in plans:
            rec = adm.completed_now.get(p.ref.uid)
            if rec is None:
                continue
            try:
                self.devices.write_spec(p.ref.uid, specs[p.ref.uid])
            except Exception as e:
                out.fail(p, _failure(p, e))
                unwritten[p.ref.uid] = rec
                continue
            self._answer(p.ref, rec, out)
        if unwritten:
            self._drop_unwritten(unwritten)

    def prepare_in_two_writes(self, plans: list[Plan], deadline: float,
                              out: PrepareOutcome) -> None:
        """Claims whose hooks may change the node: ONE write that admits them and records
        them ``PrepareStarted``, hooks and CDI specs, ONE write that records them
        ``PrepareCompleted``. Their results go into ``out``."""
        # One write: admission records the admitted claims PrepareStarted.
        now = time.time()
        owner = self._owner(plans, out)
        if owner is None:
            return
        adm = self._admit(plans, owner, now, out)
        if adm is None or not adm.started:
            return
        # Their hooks and CDI specs, each claim's on a worker of its own, until the call's
        # deadline (a claim whose hook fails is undone by ClaimDevices.prepare).
        owe = self.status is not None
        prepared: dict[str, ClaimRecord] = self._run_hooks(
            [(p, partial(self.devices.prepare, p, adm.started[p.ref.uid], now, owe_status=owe))
             for p in plans if p.ref.uid in adm.started],
            deadline, owner, out)
        # One write: the prepared claims recorded PrepareCompleted, the failed ones' records
        # dropped; the claims whose hooks still run stay PrepareStarted until they end.
        failed = [uid for uid in adm.started if uid not in prepared and uid not in out.late]
        if not (prepared or failed):
            return
        try:
            self.checkpoint.change(partial(complete, done=prepared, failed=failed, owner=owner))
        except CheckpointError as e:  # not recorded as completed: rolled back
            msg = self.events.checkpoint_failed(e)
            for rec in prepared.values():
                self.devices.rollback(claim_ref(rec), list(rec.devices))
            out.results |= {uid: PrepareResult(error=msg) for uid in [*prepared, *failed]}
            return
        if prepared:
            self.devices.crash("after-checkpoint-write")
        for p in plans:
            if p.ref.uid in prepared:
                self._answer(p.ref, prepared[p.ref.uid], out)

    def settle_late(self, late: LatePrepare) -> PrepareResult | None:
        """The outcome of a claim whose hooks ended after its call's deadline (called once
        ``late.run`` finished; the one place it is decided): the answer a retry waiting for
        the claim takes, or None when the retry must prepare the claim afresh.

        - Hooks that change nothing on the node: nothing was recorded, nothing is left to
          undo: None.
        - Hooks that failed: :meth:`ClaimDevices.prepare` undid the claim; its
          ``PrepareStarted`` record is dropped: None.
        - Hooks that succeeded: the claim is recorded ``PrepareCompleted`` and its status
          queued: its answer. When that write fails it is rolled back: None.

        A crash before this leaves the ``PrepareStarted`` record, which the next start
        rolls back."""
        p, run = late.plan, late.run
        if run.error is not None:
            _log_late_failure(p, run)
            if late.owner is not None:
                self._drop_started(p.ref.uid, late.owner)
            return None
        if late.owner is None:
            log.info("prepare hooks ended after the call's deadline; nothing recorded, the "
                     "retry prepares the claim afresh", extra=keys_of(p.ref))
            return None
        rec: ClaimRecord = run.result
        try:
            self.checkpoint.change(partial(complete, done={p.ref.uid: rec}, failed=[],
                                           owner=late.owner))
        except CheckpointError as e:
            log.error("recording a late prepare failed; rolled back", extra={
                **keys_of(p.ref), "err": self.events.checkpoint_failed(e)})
            self.devices.rollback(claim_ref(rec), list(rec.devices))
            self._drop_started(p.ref.uid, late.owner)
            return None
        self._queue_status(p.ref, rec)
        log.info("prepare hooks ended after the call's deadline; claim recorded prepared",
                 extra=keys_of(p.ref))
        return answer(rec)

    # -- the steps both paths share -----------------------------------------------------

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
        got: list[Plan | BaseException] = [plan(refs[0])]
        for ref, fut in zip(refs[1:], futures, strict=True):
            try:
                got.append(fut.result(timeout=max(0.0, deadline - time.monotonic()) + 0.5))
            except FutureTimeout:
                fut.cancel()
                got.append(RetryableClaimError(
                    f"ResourceClaim {ref.namespace}/{ref.name}: reading it from the API did "
                    "not finish before the call's deadline; retry"))
        return got

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

    def _owner(self, plans: list[Plan], out: PrepareOutcome) -> str | None:
        """This instance's checkpoint owner; None (the claims failed) when it cannot be had."""
        try:
            return self.checkpoint.owner
        except CheckpointError as e:
            msg = self.events.checkpoint_failed(e)
            out.results |= {p.ref.uid: PrepareResult(error=msg) for p in plans}
            return None

    def _admit(self, plans: list[Plan], owner: str, now: float, out: PrepareOutcome,
               completed_now: dict[str, ClaimRecord] | None = None) -> Admission | None:
        """One checkpoint write admitting ``plans`` (:func:`~.lifecycle.admit`; the owners
        known gone are read first); the refused and the already prepared claims answered
        in ``out``. None (the claims failed) when the write fails."""
        if not plans:
            return None
        try:
            dead = self.checkpoint.dead_owners([p.ref.uid for p in plans])
            adm = self.checkpoint.change(partial(
                admit, plans=plans, owner=owner, dead=dead, now=now, holders=self._holders,
                completed_now=completed_now))
        except CheckpointError as e:  # nothing was written for them
            msg = self.events.checkpoint_failed(e)
            out.results |= {p.ref.uid: PrepareResult(error=msg) for p in plans}
            return None
        for p in plans:  # the claims as this call saw them, for a later unprepare's mark
            self.reservations.remember(p.ref.uid, p.reservations)
        out.results |= {uid: PrepareResult(error=err) for uid, err in adm.refused.items()}
        for uid, rec in adm.already_completed.items():
            out.results[uid] = self.devices.answer_from_record(rec)
        return adm

    def _run_hooks(self, works: list[tuple[Plan, Callable[[HookProgress], Any]]],
                   deadline: float, owner: str | None, out: PrepareOutcome) -> dict[str, Any]:
        """Each claim's ``work`` on a worker of its own, waited for until ``deadline``: what
        the finished ones returned, by claim UID. A failed one's error goes into ``out``; a
        claim whose work still runs is answered so and goes into ``out.late`` (``owner``:
        of its ``PrepareStarted`` record, None when none was written)."""
        runs = [(p, self.workers.submit(work, p.name)) for p, work in works]
        done: dict[str, Any] = {}
        for p, run in runs:
            if not run.wait(deadline):
                late = out.late[p.ref.uid] = LatePrepare(p, run, owner)
                out.results[p.ref.uid] = PrepareResult(error=late.still_running())
            elif run.error is not None:
                out.fail(p, *_run_failure(p, run))
            else:
                done[p.ref.uid] = run.result
        return done

    def _answer(self, ref: ClaimRef, rec: ClaimRecord, out: PrepareOutcome) -> None:
        """A claim recorded ``PrepareCompleted`` by this call: its status queued, its
        answer in ``out``."""
        self._queue_status(ref, rec)
        out.results[ref.uid] = answer(rec)

    def _drop_unwritten(self, records: dict[str, ClaimRecord]) -> None:
        """Claims recorded ``PrepareCompleted`` whose CDI spec could not be written: their
        records dropped again and their devices rolled back. When that write fails too, the
        record stays: the kubelet's retry is answered from it once its spec is re-written
        (:meth:`ClaimDevices.answer_from_record`)."""
        try:
            self.checkpoint.change(partial(drop_recorded, records=records))
        except CheckpointError as e:
            log.error("%d claim(s) whose CDI spec could not be written stay recorded; the "
                      "kubelet's retry re-writes the spec", len(records),
                      extra={"err": self.events.checkpoint_failed(e)})
            return
        for rec in records.values():
            self.devices.rollback(claim_ref(rec), list(rec.devices))

    def _drop_started(self, uid: str, owner: str) -> None:
        try:
            self.checkpoint.change(partial(drop_started, uids=[uid], owner=owner))
        except CheckpointError as e:  # the next start rolls the record back
            log.error("dropping a late prepare's record failed; the next start rolls it back",
                      extra={"claim_uid": uid, "err": self.events.checkpoint_failed(e)})

    def _queue_status(self, ref: ClaimRef, rec: ClaimRecord) -> None:
        if self.status is not None:
            try:
                self.status.write(ref, rec)
            except Exception:
                log.exception("writing AllocatedDeviceStatus failed", extra=keys_of(ref))


def _log_late_failure(p: Plan, run: HookRun) -> None:
    """The one line of a claim whose hook failed after its call had answered (the claim's
    error then said the hook was still running): the error naming plugin, hook and device,
    with the hook's traceback."""
    e = run.error
    assert e is not None
    err = _run_failure(p, run)[0]
    exc_info = (type(e), e, e.__traceback__) if not isinstance(e, ClaimError) else None
    log.warning("prepare failed after its call's deadline; nothing recorded",
                exc_info=exc_info, extra={**keys_of(p.ref), "err": err})


def _run_failure(p: Plan, run: HookRun) -> tuple[str, BaseException | None]:
    """The claim's error from a failed run, and the vendor hook's exception when a hook
    raised (the error then names plugin, hook and device)."""
    assert run.error is not None
    if isinstance(run.error, ClaimError):
        return str(run.error), None
    named = run.progress.failed(p.name, run.error)
    if named is None:
        return _failure(p, run.error), None
    return named, run.error


def _failure(p: Plan, e: BaseException) -> str:
    return str(e) if isinstance(e, ClaimError) else f"{p.name}: {type(e).__name__}: {e}"
