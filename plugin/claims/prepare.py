"""Prepare of the claims one kubelet call runs (single flight already decided that this call
runs them; see :mod:`drakit.plugin.claims.node`), read top to bottom in
:meth:`Prepare.run` and :meth:`Prepare._run_plans`:

1. A claim with a ``PrepareCompleted`` record is answered from it (its CDI spec re-written
   when it went missing). The others are read at the API (concurrently, bounded by the
   call's deadline) and planned (:func:`drakit.plugin.claims.resourceclaim.plan_claim`).
2. The prepare hooks of claims whose plugins all declare ``prepare_changes_node = False``
   (on purpose; nothing is inferred from overridden methods:
   :func:`drakit.plugin.claims.claimdevices.prepare_changes_nothing`) run first, each claim's
   on a worker of its own, outside any lock: they change nothing on the node, so a claim
   that admission then refuses has left nothing behind. Their ``PrepareCompleted`` records
   are built from the hooks' outputs.
3. ONE checkpoint write for the whole call admits the claims
   (:func:`drakit.plugin.claims.admission.admit_into`, a pure function of the checkpoint's
   content, run under the file lock): the claims of step 2 are recorded ``PrepareCompleted``
   at once, the others ``PrepareStarted``.
4. The claims recorded ``PrepareCompleted`` get their CDI spec, after the record. A spec
   that cannot be written drops its record again (a second write, only then).
5. The ``PrepareStarted`` claims run their hooks and get their CDI spec
   (:class:`drakit.plugin.claims.claimdevices.ClaimDevices`, each claim on a worker of its
   own, no lock held), then ONE write records them ``PrepareCompleted`` (or drops the failed
   ones). A completed record that cannot be written rolls the claims back.
6. The AllocatedDeviceStatus entries are queued (their wish is in the record:
   ``status_owed``); the kubelet gets the CDI device IDs.

Write order and crashes: a CDI spec is written only while a record names its claim, so
the orphan-spec sweep (which removes specs no record names, under the checkpoint's file
lock) never meets a prepare in progress, here or in another instance. The
``PrepareStarted`` record comes before any hook that changes the node, so a crash leaves a
record recovery rolls back (:mod:`drakit.plugin.claims.recovery`), never a device prepared
with no record. A ``PrepareCompleted`` record may lack its spec: after a crash between the
record and the spec (step 4), or after a power loss (the spec's content is fsynced before
its rename but its directory is not: one fsync less per prepare); the start-up
recovery re-writes it from the record before the kubelet can call, and a prepare answered
from the record re-writes it too. The one-write path (steps 2 to 4) saves one checkpoint write
per claim; bench/README.md has the figure it buys.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from functools import partial
from typing import Any, Protocol

from drakit.cdi.spec import Device as CDIDevice
from drakit.discovery.plugin import ClaimRef, PreparedDevice
from drakit.plugin.api.retry import describe
from drakit.plugin.claims.admission import (
    DeviceHolders,
    Reservations,
    admit_into,
    complete,
    drop_recorded,
    drop_started,
)
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
from drakit.plugin.claims.inflight import SingleFlight
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


class Prepare:
    """The prepare of owned claims (see the module docstring) for ``driver_name``."""

    def __init__(self, driver_name: str, inventory: Inventory, claims: ClaimSource,
                 checkpoint: Checkpoint, devices: ClaimDevices, status: StatusQueue | None,
                 events: Events, reservations: Reservations,
                 flights: SingleFlight | None = None) -> None:
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
        #: the flights of the claims run here: a claim whose hook outlives its call keeps
        #: its flight until the hook ends (then it is released here)
        self.flights = flights
        self.workers = HookWorkers()

    def run(self, refs: list[ClaimRef],
            deadline: float) -> tuple[dict[str, PrepareResult], set[str]]:
        """One PrepareResult per claim of ``refs`` (validated, distinct), and the UIDs of the
        claims whose hooks still run (their flights are released here when the hooks end);
        ``deadline`` (monotonic seconds) bounds the API reads and the wait for the hooks."""
        # 1. Answered from a PrepareCompleted record, or read at the API and planned.
        results: dict[str, PrepareResult] = {}
        todo: list[ClaimRef] = []
        for ref in refs:
            try:
                rec = self.checkpoint.get(ref.uid)
            except CheckpointError as e:
                results[ref.uid] = PrepareResult(error=self.events.checkpoint_failed(e))
                continue
            if rec is not None and rec.phase == "PrepareCompleted":
                results[ref.uid] = self.devices.answer_from_record(rec)
            else:
                todo.append(ref)
        plans: list[Plan] = []
        for ref, got in zip(todo, self._plan_all(todo, deadline), strict=True):
            if isinstance(got, Plan):
                plans.append(got)
            elif isinstance(got, ClaimError):
                results[ref.uid] = PrepareResult(error=str(got))
            else:  # drakit's own bug: its traceback goes into the claim's failure line
                results[ref.uid] = PrepareResult(
                    error=f"ResourceClaim {ref.namespace}/{ref.name}: {type(got).__name__}: {got}",
                    cause=got)
        late: set[str] = set()
        if plans:
            answers, late = self._run_plans(plans, deadline)
            results.update(answers)
        return results, late

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

    def _run_plans(self, plans: list[Plan],
                   deadline: float) -> tuple[dict[str, PrepareResult], set[str]]:
        """Prepare the planned claims (see the module docstring): their answers, and the UIDs
        of the claims whose hooks still run past ``deadline``."""
        errors: dict[str, str] = {}
        causes: dict[str, BaseException] = {}
        # 2. The hooks that change nothing on the node run before admission, each claim's
        #    on a worker of its own, bounded by the call's deadline.
        ran, late = self._hooks([p for p in plans if prepare_changes_nothing(p)],
                                self.devices.compute, deadline, self._late_pure)
        outputs: dict[str, list[PreparedDevice]] = {}
        for p in plans:
            run = ran.get(p.ref.uid)
            if run is not None and run.error is not None:
                errors[p.ref.uid] = _run_failure(p, run, causes)
            elif run is not None:
                outputs[p.ref.uid] = run.result
        still = {uid: PrepareResult(error=msg) for uid, msg in late.items()}
        plans = [p for p in plans if p.ref.uid not in errors and p.ref.uid not in late]
        if not plans:
            return _failed(errors, causes) | still, set(late)

        # 3. Admission, one checkpoint write: the claims whose hooks ran are recorded
        #    PrepareCompleted at once, the others PrepareStarted.
        try:
            owner = self.checkpoint.owner
        except CheckpointError as e:
            msg = self.events.checkpoint_failed(e)
            return (_failed(errors, causes) | still
                    | {p.ref.uid: PrepareResult(error=msg) for p in plans}, set(late))
        now = time.time()
        specs: dict[str, list[CDIDevice]] = {}
        built: dict[str, ClaimRecord] = {}
        for p in plans:
            if p.ref.uid in outputs:
                try:
                    built[p.ref.uid], specs[p.ref.uid] = self.devices.completed(
                        p, p.started(owner, now), now, outputs[p.ref.uid],
                        owe_status=self.status is not None)
                except Exception as e:  # the hooks' outputs do not make a record
                    errors[p.ref.uid] = _failure(p, e)
        plans = [p for p in plans if p.ref.uid not in errors]
        try:
            adm = self.checkpoint.update_state(partial(
                admit_into, plans=plans, owner=owner, owner_alive=self.checkpoint.owner_alive,
                now=now, holders=self._holders, prepared=built))
        except CheckpointError as e:
            msg = self.events.checkpoint_failed(e)
            # nothing was written for them; the claims whose hook failed keep their error
            return (_failed(errors, causes) | still
                    | {p.ref.uid: PrepareResult(error=msg) for p in plans}, set(late))
        for p in plans:  # the claims as this call saw them, for a later unprepare's mark
            self.reservations.remember(p.ref.uid, p.reservations)
        results = {uid: PrepareResult(error=err) for uid, err in adm.refused.items()}
        for uid, rec in adm.already_completed.items():
            results[uid] = self.devices.answer_from_record(rec)

        # 4. The CDI specs of the claims recorded PrepareCompleted at once, after their
        #    record (no spec without a record: the orphan sweep's rule).
        done: dict[str, ClaimRecord] = {}
        if adm.completed_now:
            self.devices.crash("after-checkpoint-write")
        for uid, rec in adm.completed_now.items():
            try:
                self.devices.write_spec(uid, specs[uid])
                done[uid] = rec
            except Exception as e:
                errors[uid] = _failure(next(p for p in plans if p.ref.uid == uid), e)
        self._drop_unwritten({uid: rec for uid, rec in adm.completed_now.items() if uid in errors})

        # 5. The PrepareStarted claims: their hooks and CDI spec, each claim on a worker of
        #    its own, then one write records them PrepareCompleted (or drops the failed).
        started: dict[str, ClaimRecord] = {}
        ran, late_started = self._hooks(
            [p for p in plans if p.ref.uid in adm.started],
            lambda p, progress: self._prepared(p, adm.started[p.ref.uid], progress),
            deadline, lambda p, run: self._late_started(p, run, owner))
        for uid, run in ran.items():
            if run.error is not None:
                errors[uid] = _run_failure(next(p for p in plans if p.ref.uid == uid), run,
                                           causes)
            else:
                started[uid] = run.result
        late |= late_started
        still |= {uid: PrepareResult(error=msg) for uid, msg in late_started.items()}
        results |= _failed(errors, causes) | still
        settled = [uid for uid in adm.started if uid not in late_started]
        if settled:  # the claims whose hooks still run stay PrepareStarted until they end
            failed = [uid for uid in settled if uid not in started]
            try:
                self.checkpoint.update(partial(complete, done=started, failed=failed, owner=owner))
            except CheckpointError as e:
                # Not recorded as completed: roll these claims back.
                msg = self.events.checkpoint_failed(e)
                for rec in started.values():
                    self.devices.rollback(claim_ref(rec), list(rec.devices))
                results |= {uid: PrepareResult(error=msg) for uid in settled}
                started = {}
            if started:
                self.devices.crash("after-checkpoint-write")
        done |= started

        # 6. Their AllocatedDeviceStatus is queued; the kubelet gets the CDI device IDs.
        for p in plans:
            got = done.get(p.ref.uid)
            if got is not None:
                self._queue_status(p.ref, got)
                results[p.ref.uid] = answer(got)
        return results, set(late)

    def _drop_unwritten(self, records: dict[str, ClaimRecord]) -> None:
        """Claims recorded ``PrepareCompleted`` whose CDI spec could not be written: their
        records dropped again and their devices rolled back. When that write fails too, the
        record stays: the kubelet's retry is answered from it once its spec is re-written
        (:meth:`ClaimDevices.answer_from_record`)."""
        if not records:
            return
        try:
            self.checkpoint.update(partial(drop_recorded, records=records))
        except CheckpointError as e:
            log.error("%d claim(s) whose CDI spec could not be written stay recorded; the "
                      "kubelet's retry re-writes the spec", len(records),
                      extra={"err": self.events.checkpoint_failed(e)})
            return
        for rec in records.values():
            self.devices.rollback(claim_ref(rec), list(rec.devices))

    def _queue_status(self, ref: ClaimRef, rec: ClaimRecord) -> None:
        if self.status is not None:
            try:
                self.status.write(ref, rec)
            except Exception:
                log.exception("writing AllocatedDeviceStatus failed", extra=keys_of(ref))

    # -- each claim's hooks on a worker of its own (drakit.plugin.claims.claimdevices) ----------

    def _hooks(self, plans: list[Plan], work: Callable[[Plan, HookProgress], Any],
               deadline: float, on_late: Callable[[Plan, HookRun], None]
               ) -> tuple[dict[str, HookRun], dict[str, str]]:
        """``work(plan, progress)`` of every plan on a worker of its own, waited for until
        ``deadline``: (the finished runs, the error of each claim whose hook still runs, by
        claim UID). A run that ends later goes to ``on_late``."""
        runs = [(p, self.workers.submit(_bind_work(work, p), p.name)) for p in plans]
        ran: dict[str, HookRun] = {}
        late: dict[str, str] = {}
        for p, run in runs:
            if run.wait(deadline, _bind_late(on_late, p), _bind(self._overdue, p, run)):
                ran[p.ref.uid] = run
            else:
                late[p.ref.uid] = run.progress.still_running(p.name)
        return ran, late

    def _overdue(self, p: Plan, run: HookRun) -> None:
        """Retries of a claim whose hook outlived its call get the hook's answer."""
        if self.flights is not None:
            self.flights.note(p.ref.uid, lambda: run.progress.still_running(p.name))

    def _release_late(self, p: Plan, result: PrepareResult | None = None) -> None:
        if self.flights is not None:
            self.flights.release({p.ref.uid: result} if result is not None else {}, [p.ref])

    def _late_pure(self, p: Plan, run: HookRun) -> None:
        """The hooks of a claim whose plugins declare they change nothing on the node ended
        after the call's deadline: nothing was recorded, nothing is left to undo; the
        kubelet's retry prepares the claim afresh."""
        if run.error is not None:
            _log_late_failure(p, run)
        else:
            log.info("prepare hooks ended after the call's deadline; nothing recorded, the "
                     "retry prepares the claim afresh", extra=keys_of(p.ref))
        self._release_late(p)

    def _late_started(self, p: Plan, run: HookRun, owner: str) -> None:
        """A ``PrepareStarted`` claim's hooks ended after the call's deadline: record it
        ``PrepareCompleted`` (then its status is queued and a retry is answered from the
        record), or roll it back. A crash before this leaves the ``PrepareStarted``
        record, which the next start rolls back."""
        uid = p.ref.uid
        result: PrepareResult | None = None
        try:
            if run.error is not None:  # ClaimDevices.prepare undid the claim already
                _log_late_failure(p, run)
                self._drop_started(uid, owner)
                return
            rec: ClaimRecord = run.result
            try:
                self.checkpoint.update(partial(complete, done={uid: rec}, failed=[], owner=owner))
            except CheckpointError as e:
                log.error("recording a late prepare failed; rolled back", extra={
                    **keys_of(p.ref), "err": self.events.checkpoint_failed(e)})
                self.devices.rollback(claim_ref(rec), list(rec.devices))
                self._drop_started(uid, owner)
                return
            self._queue_status(p.ref, rec)
            result = answer(rec)
            log.info("prepare hooks ended after the call's deadline; claim recorded prepared",
                     extra=keys_of(p.ref))
        except Exception:
            log.exception("recording a late prepare failed", extra=keys_of(p.ref))
        finally:
            self._release_late(p, result)

    def _drop_started(self, uid: str, owner: str) -> None:
        try:
            self.checkpoint.update(partial(drop_started, uids=[uid], owner=owner))
        except CheckpointError as e:  # the next start rolls the record back
            log.error("dropping a late prepare's record failed; the next start rolls it back",
                      extra={"claim_uid": uid, "err": self.events.checkpoint_failed(e)})

    def _prepared(self, p: Plan, started: ClaimRecord,
                  progress: HookProgress | None = None) -> ClaimRecord:
        """The claim's devices prepared and its CDI spec written: its ``PrepareCompleted``
        record, owing the claim its AllocatedDeviceStatus entries when status writes are on
        (:mod:`drakit.plugin.claims.owedstatus`)."""
        return self.devices.prepare(p, started, time.time(), progress,
                                    owe_status=self.status is not None)


def _bind_work(work: Callable[[Plan, HookProgress], Any],
               p: Plan) -> Callable[[HookProgress], Any]:
    return lambda progress: work(p, progress)


def _bind_late(on_late: Callable[[Plan, HookRun], None],
               p: Plan) -> Callable[[HookRun], None]:
    return lambda run: on_late(p, run)


def _bind(fn: Callable[[Plan, HookRun], None], p: Plan, run: HookRun) -> Callable[[], None]:
    return lambda: fn(p, run)


def _failed(errors: dict[str, str],
            causes: dict[str, BaseException] | None = None) -> dict[str, PrepareResult]:
    """The results of the claims in ``errors`` (claim UID → message), each with its
    ``causes`` entry (a vendor hook's exception, whose traceback the claim's failure line
    carries: :mod:`drakit.plugin.claims.node`)."""
    return {uid: PrepareResult(error=msg, cause=(causes or {}).get(uid))
            for uid, msg in errors.items()}


def _log_late_failure(p: Plan, run: HookRun) -> None:
    """The one line of a claim whose hook failed after its call had answered (the claim's
    error then said the hook was still running): the error naming plugin, hook and device,
    with the hook's traceback."""
    assert run.error is not None
    err = run.progress.failed(p.name, run.error) or _failure(p, run.error)
    hook_error = run.error if not isinstance(run.error, ClaimError) else None
    log.warning("prepare failed after its call's deadline; nothing recorded",
                exc_info=_exc_info(hook_error), extra={**keys_of(p.ref), "err": err})


def _exc_info(e: BaseException | None) -> Any:
    return (type(e), e, e.__traceback__) if e is not None else None


def _run_failure(p: Plan, run: HookRun, causes: dict[str, BaseException]) -> str:
    """The claim's error from a failed run: naming plugin, hook and device when a vendor hook
    raised (its exception kept in ``causes`` for the log's traceback)."""
    assert run.error is not None
    if isinstance(run.error, ClaimError):
        return str(run.error)
    named = run.progress.failed(p.name, run.error)
    if named is None:
        return _failure(p, run.error)
    causes[p.ref.uid] = run.error
    return named


def _failure(p: Plan, e: BaseException) -> str:
    return str(e) if isinstance(e, ClaimError) else f"{p.name}: {type(e).__name__}: {e}"
