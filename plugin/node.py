"""The prepare / unprepare flow of claims (the node half of DRA), version-neutral.

Per call from the kubelet (one pod, one driver, one or more claims):

1. claims already completed in the checkpoint are answered from it (their CDI spec is
   re-written first if it went missing, e.g. /var/run/cdi is a tmpfs after a reboot);
2. the others are fetched (GET ResourceClaim) and checked (UID, allocation, results for our
   driver, devices in our inventory, opaque configs valid); then, under the checkpoint's file
   lock and in one write, each is checked against the other claims (device busy, another
   live instance preparing it, a stale retry) and recorded as ``PrepareStarted`` with its
   allocation results and opaque configs; each is handed device by device to the owning
   discovery plugin (no lock held: different claims run in parallel), written as ONE CDI spec
   per claim, recorded as ``PrepareCompleted`` (one checkpoint write for the whole call), and
   finally its AllocatedDeviceStatus entries are queued;
3. the answer lists, per device, its base request name, pool, device and CDI device IDs.

An error for one claim is that claim's ``error`` string; it never fails the others. The same
claim never runs twice at once in one process: a second caller waits for the first and gets
its answer (single flight). Across two instances (rolling update) the checkpoint's
``PrepareStarted`` owner decides.

Rules (kubelet-wire-protocol fact sheet §2.3, §4.2; issue 3):

- Device busy: a device still recorded for another claim (any phase, not adminAccess) is
  refused with a retryable error unless the device allows multiple allocations or the new
  result has adminAccess.
- Stale prepare retry: unprepare leaves an ``unprepared`` mark (claim UID + allocation
  fingerprint) in the checkpoint for an hour. A prepare of a marked UID whose allocation
  matches the mark and whose claim is reserved for no one (``status.reservedFor`` empty) is
  refused. A legitimate prepare always comes from a pod the claim is reserved for (the
  kubelet only runs pods whose claims list them in ``reservedFor``; the resourceclaim
  controller clears the entry only once the pod is gone), so it can never match; a
  successful prepare clears the mark. The mark also keeps a digest of ``reservedFor`` as
  the claim's last prepare read it: a prepare of a claim whose ``reservedFor`` still names
  exactly those consumers (the claim has not changed since its unprepare: a stale retry of
  a terminated pod's prepare) is refused too; a new pod reserving the claim changes it, and
  that prepare runs (issue 16).
- Unprepare order: driver hooks, then (under the file lock) the checkpoint entry is dropped
  and the CDI spec removed right after the write. A crash in between leaves only an orphan
  spec, which the start-up sweep removes, never an entry without its spec. When the spec
  cannot be removed (an immutable or read-only CDI directory) the entry is put back in a
  second write under the same lock and the claim's error says so: the device stays busy
  while a spec still names it, and the kubelet's retry finishes the job.
- Deadlines: a kubelet call's work ends by its gRPC deadline minus a margin to answer
  (:func:`drakit.plugin.retry.call_deadline`); claim reads are bounded by it and run
  concurrently; a caller waiting for another call's run of the same claim waits at most
  until its own deadline and does not take a result produced after that call's deadline
  (its caller had given up): it runs the claim afresh.
- Crash recovery (:meth:`NodeLogic.recover`): ``PrepareStarted`` entries whose owner process
  is gone are rolled back; completed entries missing their CDI spec get it re-written; CDI
  specs of this driver that no entry owns are removed.

Crash tests: ``crash_hook`` (a constructor argument, never set in production) is called at
each of :data:`CRASH_POINTS`; tests/contract/crash_agent.py runs ``drakit run`` with a hook
that kills the process there.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from drakit.cdi.errors import CDINameError
from drakit.cdi.spec import ContainerEdits
from drakit.cdi.spec import Device as CDIDevice
from drakit.discovery.plugin import (
    ClaimRef,
    DeviceRequest,
    DiscoveryPlugin,
    UnprepareRequest,
    env_name,
)
from drakit.plugin.activity import KubeletCalls
from drakit.plugin.checkpoint import (
    Checkpoint,
    CheckpointError,
    CheckpointState,
    ClaimRecord,
    PreparedDeviceRecord,
    UnpreparedRecord,
)
from drakit.plugin.claims import (
    AllocatedDevice,
    ClaimError,
    OpaqueConfig,
    RetryableClaimError,
    allocated_devices,
    check_claim,
    opaque_configs,
    typed_config,
)
from drakit.plugin.events import Events
from drakit.plugin.inventory import Inventory
from drakit.plugin.names import (
    InvalidNameError,
    check_claim_uid,
    check_namespace,
    check_object_name,
)
from drakit.plugin.retry import call_deadline
from drakit.plugin.singleflight import SingleFlight
from drakit.plugin.types import PreparedDeviceRef, PrepareResult

log = logging.getLogger(__name__)

#: The points inside prepare where a ``crash_hook`` is called (crash tests).
CRASH_POINTS = ("after-driver-hook", "after-cdi-write", "after-checkpoint-write")
CrashHook = Callable[[str], None]
#: Seconds after which a CDI temp file (``.<spec file>.<random>.tmp``) is surely abandoned.
TEMP_FILE_AGE = 60.0
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


class SpecWriter(Protocol):
    @property
    def root_dir(self) -> Path: ...
    @property
    def file_prefix(self) -> str: ...

    def write(self, claim_uid: str, devices: list[CDIDevice]) -> list[str]: ...
    def remove(self, claim_uid: str) -> bool: ...
    def exists(self, claim_uid: str) -> bool: ...
    def qualified_name(self, device_name: str) -> str: ...
    def list_specs(self) -> list[str]: ...


class StatusWriter(Protocol):
    def write(self, claim: ClaimRef, record: ClaimRecord) -> None: ...
    def remove(self, claim: ClaimRef) -> None: ...


def reservations_digest(reserved_for: Any) -> str | None:
    """A short hash of ``status.reservedFor`` (its consumers' resource, name and UID, in
    any order); None when it is empty or not a list. A new pod reserving the claim changes
    it; this driver's own status writes do not."""
    if not isinstance(reserved_for, list) or not reserved_for:
        return None
    keys = sorted(
        json.dumps([r.get("resource"), r.get("name"), r.get("uid")], default=str)
        for r in reserved_for if isinstance(r, dict))
    return hashlib.sha256("\n".join(keys).encode()).hexdigest()[:32]


def allocation_fingerprint(allocs: list[AllocatedDevice], configs: list[OpaqueConfig]) -> str:
    """A short hash of the allocation results and opaque configs of our driver: the same
    allocation of a claim gives the same fingerprint."""
    body = {
        "results": [[a.request, a.pool, a.device, a.share_id, a.admin_access] for a in allocs],
        "configs": [[c.source, list(c.requests), c.parameters] for c in configs],
    }
    raw = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(raw).hexdigest()[:32]


@dataclass
class _Item:
    alloc: AllocatedDevice
    plugin: DiscoveryPlugin
    request: DeviceRequest
    shareable: bool  # adminAccess or the device allows multiple allocations


@dataclass
class _Plan:
    ref: ClaimRef
    claim: dict[str, Any]
    fingerprint: str = ""
    reserved: bool = True
    reservations: str | None = None
    configs: list[dict[str, Any]] = field(default_factory=list)
    items: list[_Item] = field(default_factory=list)


def cdi_device_name(claim_uid: str, alloc: AllocatedDevice) -> str:
    """The CDI device name of one allocated device: ``<claimUID>-<device>`` plus
    ``-<shareID>`` for a share, so names never collide across claims or shares."""
    name = f"{claim_uid}-{alloc.device}"
    if alloc.share_id:
        name += f"-{alloc.share_id}"
    return name


class NodeLogic:
    """Implements :class:`drakit.plugin.types.NodeService` for one driver on one node.

    ``events`` hears of every claim answered and every checkpoint failure
    (:class:`drakit.plugin.events.Events`; default: none). ``calls`` counts the prepare and
    unprepare calls in flight (background status writes give way to them; default: a
    counter of its own).
    ``crash_hook(point)`` is called at each of :data:`CRASH_POINTS` (crash tests only: the
    crash agent of tests/contract kills the process there; default: nothing).
    """

    def __init__(
        self,
        driver_name: str,
        inventory: Inventory,
        claims: ClaimSource,
        specs: SpecWriter,
        checkpoint: Checkpoint,
        status: StatusWriter | None = None,
        events: Events | None = None,
        crash_hook: CrashHook | None = None,
        calls: KubeletCalls | None = None,
    ) -> None:
        self.driver_name = driver_name
        self.calls = calls if calls is not None else KubeletCalls()
        self.inventory = inventory
        self.claim_source = claims
        self.specs = specs
        self.checkpoint = checkpoint
        self.status = status
        self.events = events if events is not None else Events()
        self.flights = SingleFlight()
        self._lock = threading.Lock()  # _readers, _reservations
        self._readers: ThreadPoolExecutor | None = None
        # claim UID → digest of status.reservedFor as last read by a prepare; an unprepare
        # keeps it in its mark for the stale-prepare rule
        self._reservations: dict[str, str] = {}
        self._crash = crash_hook if crash_hook is not None else _no_crash
        inventory.set_in_use(self.prepared_devices)

    # -- observability -------------------------------------------------------------------

    @property
    def single_flight_waiters(self) -> int:
        """Callers currently waiting for another caller's run of the same claim."""
        return self.flights.waiters

    def prepared_devices(self) -> set[tuple[str, str]]:
        """(pool, device) of every device recorded in the checkpoint (empty while corrupt)."""
        try:
            return {(d.pool, d.device) for rec in self.checkpoint.claims().values()
                    for d in rec.devices}
        except CheckpointError:
            return set()

    def _checkpoint_failed(self, e: CheckpointError) -> str:
        msg = str(e)
        log.error("%s", msg)
        self.events.checkpoint_error(msg)
        return msg

    def _remember_reservations(self, uid: str, digest: str | None) -> None:
        """Note the ``status.reservedFor`` digest a prepare of claim ``uid`` saw."""
        if digest:
            with self._lock:
                self._reservations.pop(uid, None)
                self._reservations[uid] = digest
                while len(self._reservations) > MAX_REMEMBERED_RESERVATIONS:
                    del self._reservations[next(iter(self._reservations))]

    # -- prepare -------------------------------------------------------------------------

    def prepare_claims(self, claims: list[ClaimRef], *,
                       deadline: float | None = None) -> dict[str, PrepareResult]:
        """NodePrepareResources: one PrepareResult per distinct claim UID in ``claims``.

        ``deadline`` (``time.monotonic()`` seconds; default
        :func:`drakit.plugin.retry.call_deadline`
        of a call without one) bounds every API call and every wait for another call's run
        of the same claim; a claim not done by then gets a retryable per-claim error."""
        if deadline is None:
            deadline = call_deadline(None)
        with self.calls.call():
            return self._prepare_claims(claims, deadline)

    def _prepare_claims(self, claims: list[ClaimRef],
                        deadline: float) -> dict[str, PrepareResult]:
        results: dict[str, PrepareResult] = {}
        refs: list[ClaimRef] = []
        for ref in _dedupe(claims):
            try:
                _check_ref(ref)
            except InvalidNameError as e:
                results[ref.uid] = PrepareResult(error=str(e))
                continue
            refs.append(ref)
        started = time.monotonic()
        while refs:
            mine, waiting = self.flights.claim(refs, deadline)
            try:
                results.update(self._prepare_owned(mine, deadline))
            finally:
                self.flights.release(results, mine)
            elapsed = time.monotonic() - started
            for ref in mine:
                got = results.get(ref.uid)
                self.events.claim_prepared(got is not None and not got.error, elapsed)
            refs = []
            for uid, flight in waiting.items():
                ok, got = self.flights.wait(flight, deadline)
                if ok and isinstance(got, PrepareResult):
                    results[uid] = got  # the first caller's answer
                elif time.monotonic() >= deadline:
                    ref = next(r for r in claims if r.uid == uid)
                    results[uid] = PrepareResult(error=(
                        f"ResourceClaim {ref.namespace}/{ref.name}: an earlier call for this "
                        "claim was still running when this call's deadline came; retry"))
                else:
                    # The running call was an unprepare, failed, or its caller had given up
                    # (a stale result): prepare afresh.
                    refs.extend(r for r in claims if r.uid == uid and r.uid not in results)
            refs = _dedupe(refs)
        return results

    def _prepare_owned(self, refs: list[ClaimRef],
                       deadline: float) -> dict[str, PrepareResult]:
        results: dict[str, PrepareResult] = {}
        todo: list[ClaimRef] = []
        for ref in refs:
            try:
                rec = self.checkpoint.get(ref.uid)
            except CheckpointError as e:
                results[ref.uid] = PrepareResult(error=self._checkpoint_failed(e))
                continue
            if rec is not None and rec.phase == "PrepareCompleted":
                results[ref.uid] = self._answer_from_record(rec)
            else:
                todo.append(ref)
        plans: list[_Plan] = []
        for ref, got in zip(todo, self._plan_all(todo, deadline), strict=True):
            if isinstance(got, _Plan):
                plans.append(got)
            elif isinstance(got, ClaimError):
                results[ref.uid] = PrepareResult(error=str(got))
                log.warning("prepare failed: %s", got, extra=_ctx(ref))
            else:
                results[ref.uid] = PrepareResult(
                    error=f"ResourceClaim {ref.namespace}/{ref.name}: {type(got).__name__}: {got}")
                log.error("prepare failed: %s", got, exc_info=got, extra=_ctx(ref))
        if plans:
            results.update(self._run_plans(plans))
        return results

    def _plan_all(self, refs: list[ClaimRef], deadline: float) -> list[_Plan | BaseException]:
        """:meth:`_plan` of every claim, concurrently (the first in this thread, the others
        on the shared reader threads); each result is the plan or the exception it raised.
        A read still running at ``deadline`` is answered with a retryable error."""
        def plan(ref: ClaimRef) -> _Plan | BaseException:
            try:
                return self._plan(ref, deadline)
            except Exception as e:
                return e

        if len(refs) <= 1:
            return [plan(r) for r in refs]
        if self._readers is None:
            with self._lock:
                if self._readers is None:
                    self._readers = ThreadPoolExecutor(CLAIM_READ_THREADS,
                                                       thread_name_prefix="claim-read")
        futures = [self._readers.submit(plan, r) for r in refs[1:]]
        out: list[_Plan | BaseException] = [plan(refs[0])]
        for ref, fut in zip(refs[1:], futures, strict=True):
            try:
                out.append(fut.result(timeout=max(0.0, deadline - time.monotonic()) + 0.5))
            except FutureTimeout:
                fut.cancel()
                out.append(RetryableClaimError(
                    f"ResourceClaim {ref.namespace}/{ref.name}: reading it from the API did "
                    "not finish before the call's deadline; retry"))
        return out

    def _answer_from_record(self, rec: ClaimRecord) -> PrepareResult:
        try:
            if not self.specs.exists(rec.uid):
                self.specs.write(rec.uid, _cdi_devices(rec))
                log.info("re-wrote missing CDI spec", extra={"claim_uid": rec.uid})
        except Exception as e:
            return PrepareResult(error=f"re-writing CDI spec of claim {rec.uid}: {e}")
        return PrepareResult(devices=_refs(rec))

    def _plan(self, ref: ClaimRef, deadline: float | None = None) -> _Plan:
        try:
            claim = self.claim_source.get_claim(ref.namespace, ref.name, deadline=deadline)
        except Exception as e:
            raise RetryableClaimError(
                f"ResourceClaim {ref.namespace}/{ref.name}: cannot read it from the API: {e}"
            ) from None
        if claim is None:
            raise ClaimError(f"ResourceClaim {ref.namespace}/{ref.name}: not found")
        check_claim(claim, ref)
        allocs = allocated_devices(claim, self.driver_name)
        configs = opaque_configs(claim, self.driver_name)
        status = claim.get("status") or {}
        plan = _Plan(
            ref, claim, fingerprint=allocation_fingerprint(allocs, configs),
            reserved=bool(status.get("reservedFor")),
            reservations=reservations_digest(status.get("reservedFor")),
            configs=[{"source": c.source, "requests": list(c.requests),
                      "opaque": {"driver": self.driver_name, "parameters": c.parameters}}
                     for c in configs],
        )
        for alloc in allocs:
            where = (f"ResourceClaim {ref.namespace}/{ref.name}: "
                     f"status.allocation.devices.results[{alloc.index}]")
            found = self.inventory.lookup(alloc.pool, alloc.device)
            if found is None:
                raise ClaimError(
                    f"{where}: device {alloc.pool}/{alloc.device} is not in this node's inventory"
                )
            plugin, device = found
            config = typed_config(
                claim, configs, alloc.request, plugin.config_model,
                plugin.config_api_version, plugin.config_kind,
            )
            request = DeviceRequest(
                claim=ref, request=alloc.request, pool=alloc.pool, device=device,
                share_id=alloc.share_id, admin_access=alloc.admin_access, config=config,
                consumed_capacity=alloc.consumed_capacity,
            )
            shareable = alloc.admin_access or bool(device.allow_multiple_allocations)
            plan.items.append(_Item(alloc, plugin, request, shareable))
        return plan

    def _admit(self, plans: list[_Plan], state: CheckpointState, owner: str,
               admitted: list[_Plan], refused: dict[str, PrepareResult],
               completed: dict[str, ClaimRecord]) -> None:
        """Under the checkpoint lock: decide per plan and record ``PrepareStarted``."""
        busy: dict[tuple[str, str], str] = {}
        for uid, rec in state.peek_claims():
            for d in rec.devices:
                if not d.admin_access:
                    busy.setdefault((d.pool, d.device), uid)
        now = time.time()
        for p in plans:
            uid = p.ref.uid
            name = f"ResourceClaim {p.ref.namespace}/{p.ref.name}"
            existing = state.claims.get(uid)
            if existing is not None and existing.phase == "PrepareCompleted":
                completed[uid] = existing
                continue
            if (existing is not None and existing.owner != owner
                    and self.checkpoint.owner_alive(existing.owner)):
                refused[uid] = PrepareResult(error=(
                    f"{name}: being prepared by another instance of this plugin "
                    f"({existing.owner}); retry"))
                continue
            mark = state.unprepared.get(uid)
            if mark is not None and mark.fingerprint in (None, p.fingerprint):
                when = time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(mark.at))
                if not p.reserved:
                    refused[uid] = PrepareResult(error=(
                        f"{name}: stale prepare: this allocation was unprepared at {when} and "
                        "status.reservedFor is empty; not preparing it again"))
                    continue
                if p.reservations is not None and p.reservations == mark.reservations:
                    refused[uid] = PrepareResult(error=(
                        f"{name}: stale prepare: the claim was unprepared at {when} and has "
                        "not changed since (status.reservedFor names the same consumers); "
                        "not preparing it again"))
                    continue
            conflict = None
            for it in p.items:
                other = busy.get((it.alloc.pool, it.alloc.device))
                if other is not None and other != uid and not it.shareable:
                    conflict = (it, other)
                    break
            if conflict is not None:
                it, other = conflict
                refused[uid] = PrepareResult(error=(
                    f"{name}: status.allocation.devices.results[{it.alloc.index}]: device "
                    f"{it.alloc.pool}/{it.alloc.device} is still prepared for claim {other}; "
                    "retry after it is unprepared"))
                continue
            state.claims[uid] = ClaimRecord(
                uid=uid, namespace=p.ref.namespace, name=p.ref.name, phase="PrepareStarted",
                owner=owner, fingerprint=p.fingerprint, prepared_at=now, configs=p.configs,
                devices=[_record(it, uid) for it in p.items],
            )
            state.unprepared.pop(uid, None)
            for it in p.items:
                if not it.alloc.admin_access:
                    busy.setdefault((it.alloc.pool, it.alloc.device), uid)
            admitted.append(p)

    def _run_plans(self, plans: list[_Plan]) -> dict[str, PrepareResult]:
        results: dict[str, PrepareResult] = {}
        admitted: list[_Plan] = []
        completed: dict[str, ClaimRecord] = {}
        try:
            owner = self.checkpoint.owner
            self.checkpoint.update_state(
                lambda s: self._admit(plans, s, owner, admitted, results, completed))
        except CheckpointError as e:
            msg = self._checkpoint_failed(e)
            return {p.ref.uid: PrepareResult(error=msg) for p in plans}
        for p in plans:  # the claims as this call saw them, for a later unprepare's mark
            self._remember_reservations(p.ref.uid, p.reservations)
        for uid, rec in completed.items():
            results[uid] = self._answer_from_record(rec)
        for uid, res in results.items():
            if res.error:
                log.warning("prepare refused: %s", res.error, extra={"claim_uid": uid})

        done: dict[str, ClaimRecord] = {}
        failed: list[_Plan] = []
        for p in admitted:
            try:
                done[p.ref.uid] = self._prepare_devices(p, owner)
            except Exception as e:
                failed.append(p)
                msg = str(e) if isinstance(e, ClaimError) else (
                    f"ResourceClaim {p.ref.namespace}/{p.ref.name}: {type(e).__name__}: {e}")
                results[p.ref.uid] = PrepareResult(error=msg)
                log.warning("prepare failed: %s", msg, extra=_ctx(p.ref))

        def record_completed(claims: dict[str, ClaimRecord]) -> None:
            for uid, rec in done.items():
                claims[uid] = rec
            for p in failed:
                cur = claims.get(p.ref.uid)
                if cur is not None and cur.owner == owner and cur.phase == "PrepareStarted":
                    del claims[p.ref.uid]

        if not admitted:
            return results
        try:
            self.checkpoint.update(record_completed)
        except CheckpointError as e:
            # Not recorded as completed: roll every claim of this call back.
            msg = self._checkpoint_failed(e)
            for p in admitted:
                if p.ref.uid in done:
                    self._rollback(p.ref, done[p.ref.uid].devices)
                results[p.ref.uid] = PrepareResult(error=msg)
            return results
        self._crash("after-checkpoint-write")

        for p in admitted:
            got = done.get(p.ref.uid)
            if got is None:
                continue
            rec = got
            if self.status is not None:
                try:
                    self.status.write(p.ref, rec)
                except Exception:
                    log.exception("writing AllocatedDeviceStatus failed", extra=_ctx(p.ref))
            results[p.ref.uid] = PrepareResult(devices=_refs(rec))
            log.info("prepared claim with %d device(s)", len(rec.devices), extra=_ctx(p.ref))
        return results

    def _prepare_devices(self, plan: _Plan, owner: str) -> ClaimRecord:
        prepared: list[PreparedDeviceRecord] = []
        cdi_devices: list[CDIDevice] = []
        try:
            for it in plan.items:
                rec = _record(it, plan.ref.uid)
                # Listed before the hook runs: a hook that fails half-way is undone too
                # (unprepare hooks must be idempotent).
                prepared.append(rec)
                out = it.plugin.prepare(it.request)
                self._crash("after-driver-hook")
                edits = out.edits
                if edits.is_empty():
                    edits = ContainerEdits(env=[
                        f"DRAKIT_DEVICE_{env_name(it.alloc.device)}={it.alloc.pool}/{it.alloc.device}"
                    ])
                rec.edits = edits.to_json_dict()
                rec.state = out.state
                rec.status = out.status.model_dump(mode="json") if out.status else None
                cdi_devices.append(CDIDevice(name=rec.cdi_name, container_edits=edits))
            ids = self.specs.write(plan.ref.uid, cdi_devices)
            self._crash("after-cdi-write")
            by_name = {i.rsplit("=", 1)[-1]: i for i in ids}
            for rec in prepared:
                rec.cdi_device_ids = [
                    by_name.get(rec.cdi_name, self.specs.qualified_name(rec.cdi_name))]
        except Exception:
            self._rollback(plan.ref, prepared)
            raise
        return ClaimRecord(
            uid=plan.ref.uid, namespace=plan.ref.namespace, name=plan.ref.name,
            phase="PrepareCompleted", owner=owner, fingerprint=plan.fingerprint,
            configs=plan.configs, devices=prepared, prepared_at=time.time(),
        )

    def _rollback(self, ref: ClaimRef, prepared: list[PreparedDeviceRecord]) -> None:
        for rec in prepared:
            try:
                self._unprepare_device(ref, rec)
            except Exception:
                log.exception("unprepare hook during rollback failed", extra=_ctx(ref))
        try:
            self.specs.remove(ref.uid)
        except Exception:
            log.exception("removing CDI spec during rollback failed", extra=_ctx(ref))

    # -- unprepare -----------------------------------------------------------------------

    def unprepare_claims(self, claims: list[ClaimRef], write_status: bool = True, *,
                         deadline: float | None = None) -> dict[str, str]:
        """NodeUnprepareResources from the checkpoint alone: claim UID → error ("" = ok).
        Unknown claims are success once no CDI spec of theirs is left. A claim succeeds only
        when its device is released: every unprepare hook done and its CDI spec removed;
        otherwise its error names what failed and its checkpoint entry stays (the device
        stays busy), so the kubelet's retry finishes the job. ``write_status=False`` leaves
        the claim's AllocatedDeviceStatus alone (the orphan sweep: the claim is gone or
        replaced). ``deadline`` (monotonic seconds) bounds the wait for another call's run
        of the same claim."""
        if deadline is None:
            deadline = call_deadline(None)
        with self.calls.call():
            return self._unprepare_claims(claims, write_status, deadline)

    def _unprepare_claims(self, claims: list[ClaimRef], write_status: bool,
                          deadline: float) -> dict[str, str]:
        results: dict[str, str] = {}
        refs: list[ClaimRef] = []
        for ref in _dedupe(claims):
            try:
                check_claim_uid(ref.uid)
            except InvalidNameError as e:
                results[ref.uid] = str(e)
                continue
            refs.append(ref)
        started = time.monotonic()
        while refs:
            mine, waiting = self.flights.claim(refs, deadline)
            try:
                results.update(self._unprepare_owned(mine, write_status))
            finally:
                self.flights.release(results, mine)
            elapsed = time.monotonic() - started
            for ref in mine:
                self.events.claim_unprepared(results.get(ref.uid) == "", elapsed)
            # A prepare or unprepare of these claims was running: run ours after it.
            late = False
            for flight in waiting.values():
                self.flights.wait(flight, deadline)
                late = late or time.monotonic() >= deadline
            if late:
                for ref in refs:
                    if ref.uid in waiting:
                        results[ref.uid] = (f"claim {ref.uid}: an earlier call for this claim "
                                            "was still running when this call's deadline "
                                            "came; retry")
                break
            refs = [r for r in refs if r.uid in waiting]
        return results

    def _unprepare_owned(self, refs: list[ClaimRef], write_status: bool) -> dict[str, str]:
        results: dict[str, str] = {}
        drop: dict[str, ClaimRecord] = {}
        unknown: list[str] = []
        try:
            owner = self.checkpoint.owner
        except CheckpointError as e:
            return {r.uid: self._checkpoint_failed(e) for r in refs}
        for ref in refs:
            try:
                rec = self.checkpoint.get(ref.uid)
            except CheckpointError as e:
                results[ref.uid] = self._checkpoint_failed(e)
                continue
            if rec is None:
                unknown.append(ref.uid)
                results[ref.uid] = ""
                continue
            if (rec.phase == "PrepareStarted" and rec.owner != owner
                    and self.checkpoint.owner_alive(rec.owner)):
                results[ref.uid] = (f"claim {ref.uid}: being prepared by another instance of "
                                    f"this plugin ({rec.owner}); retry")
                continue
            try:
                self._run_unprepare_hooks(rec)
            except Exception as e:
                results[ref.uid] = (f"ResourceClaim {rec.namespace}/{rec.name}: "
                                    f"{type(e).__name__}: {e}; the claim stays prepared")
                log.exception("unprepare failed", extra=_ctx(ref))
                continue
            drop[ref.uid] = rec
            results[ref.uid] = ""
        failed: dict[str, str] = {}
        if drop or unknown:
            try:
                failed = self._drop(drop, unknown)
            except CheckpointError as e:
                msg = self._checkpoint_failed(e)
                for uid in drop:
                    results[uid] = msg
                return results
        results.update(failed)
        for uid, rec in drop.items():
            if uid in failed:
                continue
            if write_status and self.status is not None and rec.phase == "PrepareCompleted":
                ref = ClaimRef(namespace=rec.namespace, name=rec.name, uid=uid)
                try:
                    self.status.remove(ref)
                except Exception:
                    log.exception("removing AllocatedDeviceStatus failed", extra=_ctx(ref))
            log.info("unprepared claim", extra={"claim_uid": uid})
        return results

    def _drop(self, drop: dict[str, ClaimRecord], unknown: list[str]) -> dict[str, str]:
        """One checkpoint write: remove the entries of ``drop`` and mark them (and the
        ``unknown`` UIDs) unprepared; then, still under the file lock, remove their CDI
        specs (and any spec an ``unknown`` UID still has). A claim whose spec cannot be
        removed gets its entry back (a second write, same lock: the device stays busy while
        a spec still names it). Returns claim UID → error for those."""
        now = time.time()
        with self._lock:
            seen = {uid: self._reservations[uid] for uid in [*drop, *unknown]
                    if uid in self._reservations}
        failed: dict[str, str] = {}

        def change(state: CheckpointState) -> None:
            for uid, rec in drop.items():
                state.claims.pop(uid, None)
                state.unprepared[uid] = UnpreparedRecord(
                    fingerprint=rec.fingerprint, at=now, reservations=seen.get(uid))
            for uid in unknown:
                if uid not in state.claims and uid not in state.unprepared:
                    state.unprepared[uid] = UnpreparedRecord(
                        fingerprint=None, at=now, reservations=seen.get(uid))

        def restore(state: CheckpointState) -> None:
            for uid in failed:
                if uid in drop and uid not in state.claims:
                    state.claims[uid] = drop[uid]
                    state.unprepared.pop(uid, None)

        def remove_specs(_: None) -> None:
            for uid in [*drop, *unknown]:
                try:
                    self.specs.remove(uid)
                except Exception as e:
                    if isinstance(e, CDINameError) and uid not in drop:
                        continue  # an unknown UID no spec file can be named after
                    rec = drop.get(uid)
                    what = f"ResourceClaim {rec.namespace}/{rec.name}" if rec else f"claim {uid}"
                    failed[uid] = (f"{what}: removing its CDI spec failed: "
                                   f"{type(e).__name__}: {e}; the claim stays prepared, retry")
                    log.error("%s", failed[uid], extra={"claim_uid": uid})
            if any(uid in drop for uid in failed):
                self.checkpoint.update_state(restore)

        self.checkpoint.update_state(change, after=remove_specs)
        return failed

    def _run_unprepare_hooks(self, rec: ClaimRecord) -> None:
        ref = ClaimRef(namespace=rec.namespace, name=rec.name, uid=rec.uid)
        for d in rec.devices:
            self._unprepare_device(ref, d)

    def unprepare_record(self, rec: ClaimRecord, write_status: bool) -> None:
        """Undo a checkpointed claim locally (driver hooks, CDI spec, status entries)
        without touching the checkpoint. Hook errors are logged, not raised."""
        ref = ClaimRef(namespace=rec.namespace, name=rec.name, uid=rec.uid)
        self._rollback(ref, rec.devices)
        if write_status and self.status is not None and rec.phase == "PrepareCompleted":
            try:
                self.status.remove(ref)
            except Exception:
                log.exception("removing AllocatedDeviceStatus failed", extra=_ctx(ref))

    def _unprepare_device(self, ref: ClaimRef, d: PreparedDeviceRecord) -> None:
        """Call the owning plugin's unprepare hook; raises what the hook raises."""
        plugin = self.inventory.plugin_named(d.plugin)
        if plugin is None:
            log.warning("plugin %s of device %s/%s is not loaded; skipping its unprepare hook",
                        d.plugin, d.pool, d.device, extra=_ctx(ref))
            return
        try:
            plugin.unprepare(UnprepareRequest(
                claim=ref, request=d.request, pool=d.pool, device=d.device,
                share_id=d.share_id, state=d.state,
            ))
        except Exception as e:
            raise RuntimeError(
                f"unprepare hook of plugin {d.plugin} failed for device {d.pool}/{d.device}: "
                f"{type(e).__name__}: {e}") from e

    # -- start-up recovery and sweeps ------------------------------------------------------

    def recover(self, spec_claim_uids: list[str] | None = None) -> tuple[int, int]:
        """Start-up recovery. Rolls back ``PrepareStarted`` claims whose owner process is
        gone (driver hooks, CDI spec, entry), re-writes missing CDI specs of completed
        claims, and removes CDI specs of this driver that no entry owns (the spec list is
        taken under the checkpoint lock; ``spec_claim_uids`` is ignored and kept for
        callers of the old signature). Returns (claims rolled back, specs removed).
        Raises CheckpointError while the checkpoint is corrupt."""
        rolled = self.rollback_dead_owners()
        self.checkpoint.forget_dead_owners()
        rewritten = 0
        for rec in self.checkpoint.claims().values():
            if (
                rec.phase == "PrepareCompleted"
                and not self.specs.exists(rec.uid)
                and not self._answer_from_record(rec).error
            ):
                rewritten += 1
        removed = self.sweep_orphan_specs()
        if rolled or removed or rewritten:
            log.warning("recovery: rolled back %d half-prepared claim(s), re-wrote %d missing "
                        "CDI spec(s), removed %d orphan CDI spec(s)",
                        rolled, rewritten, len(removed))
        return rolled, len(removed)

    def rollback_dead_owners(self) -> int:
        """Roll back ``PrepareStarted`` claims whose owner process is gone (a crash, here or
        in another instance): adopt them under the file lock, run the unprepare hooks,
        remove the CDI spec, drop the entry. Claims running in this process are skipped.
        Returns how many were rolled back. Raises CheckpointError while corrupt."""
        owner = self.checkpoint.owner
        candidates = [
            ClaimRef(namespace=r.namespace, name=r.name, uid=uid)
            for uid, r in self.checkpoint.claims().items()
            if r.phase == "PrepareStarted" and r.owner != owner
            and not self.checkpoint.owner_alive(r.owner)
        ]
        if not candidates:
            return 0
        mine, _busy = self.flights.claim(candidates, call_deadline(None))
        adopted: list[ClaimRecord] = []
        try:
            uids = {r.uid for r in mine}

            def adopt(claims: dict[str, ClaimRecord]) -> None:
                for uid in uids:
                    rec = claims.get(uid)
                    if (rec is not None and rec.phase == "PrepareStarted"
                            and rec.owner != owner
                            and not self.checkpoint.owner_alive(rec.owner)):
                        rec.owner = owner
                        adopted.append(rec.model_copy(deep=True))

            if uids:
                self.checkpoint.update(adopt)
            for rec in adopted:
                self.unprepare_record(rec, write_status=False)
            if adopted:
                done = {r.uid for r in adopted}

                def drop(claims: dict[str, ClaimRecord]) -> None:
                    for uid in done:
                        cur = claims.get(uid)
                        if cur is not None and cur.owner == owner and cur.phase == "PrepareStarted":
                            del claims[uid]

                self.checkpoint.update(drop)
                log.warning("rolled back %d claim(s) left half-prepared by a crashed instance",
                            len(adopted))
        finally:
            self.flights.release({}, mine)  # waiters (none expected) run their own call afresh
        return len(adopted)

    def sweep_orphan_specs(self) -> list[str]:
        """Remove this driver's CDI specs that no checkpoint entry (of any phase) owns;
        runs under the checkpoint lock, so a prepare in another instance (which records its
        claim before writing the spec) is never hit. Returns the removed claim UIDs."""
        removed: list[str] = []
        with self.checkpoint.locked() as state:
            for uid in self.specs.list_specs():
                if uid not in state.claims:
                    try:
                        if self.specs.remove(uid):
                            removed.append(uid)
                    except Exception:
                        log.exception("removing orphan CDI spec failed", extra={"claim_uid": uid})
            self._remove_stale_temp_files(state)
        return removed

    def _remove_stale_temp_files(self, state: CheckpointState) -> None:
        """Temp files of this driver's spec writes left by a crash: those of claims without
        an entry (nobody can be writing them: specs are written only while an entry exists)
        and any older than :data:`TEMP_FILE_AGE`."""
        prefix = f".{self.specs.file_prefix}"
        now = time.time()
        try:
            entries = list(os.scandir(self.specs.root_dir))
        except OSError:
            return
        for entry in entries:
            name = entry.name
            if not (name.startswith(prefix) and name.endswith(".tmp")):
                continue
            uid = name[len(prefix):].split(".json.", 1)[0]
            try:
                old = now - entry.stat(follow_symlinks=False).st_mtime > TEMP_FILE_AGE
                if uid not in state.claims or old:
                    os.unlink(entry.path)
                    log.info("removed abandoned CDI temp file %s", entry.path)
            except OSError:
                continue


def _no_crash(point: str) -> None:
    pass


def _dedupe(claims: list[ClaimRef]) -> list[ClaimRef]:
    seen: dict[str, ClaimRef] = {}
    for c in claims:
        seen.setdefault(c.uid, c)
    return list(seen.values())


def _check_ref(ref: ClaimRef) -> None:
    check_claim_uid(ref.uid)
    check_namespace(ref.namespace)
    check_object_name(ref.name)


def _record(it: _Item, claim_uid: str) -> PreparedDeviceRecord:
    a = it.alloc
    cfg = it.request.config
    return PreparedDeviceRecord(
        request=a.request, pool=a.pool, device=a.device, share_id=a.share_id,
        admin_access=a.admin_access, consumed_capacity=dict(a.consumed_capacity),
        plugin=it.plugin.name, config=cfg.model_dump(mode="json") if cfg is not None else None,
        cdi_name=cdi_device_name(claim_uid, a),
    )


def _cdi_devices(rec: ClaimRecord) -> list[CDIDevice]:
    return [
        CDIDevice(name=d.cdi_name, container_edits=ContainerEdits.model_validate(d.edits))
        for d in rec.devices
    ]


def _refs(rec: ClaimRecord) -> list[PreparedDeviceRef]:
    return [
        PreparedDeviceRef(
            request_names=(d.request.split("/", 1)[0],), pool_name=d.pool, device_name=d.device,
            cdi_device_ids=tuple(d.cdi_device_ids), share_id=d.share_id,
        )
        for d in rec.devices
    ]


def _ctx(ref: ClaimRef) -> dict[str, str]:
    return {"claim_uid": ref.uid, "claim": f"{ref.namespace}/{ref.name}"}
