"""The prepare / unprepare flow of claims (the node half of DRA), version-neutral.

Per call from the kubelet (one pod, one driver, one or more claims):

1. claims already completed in the checkpoint are answered from it (their CDI spec is
   re-written first if it went missing, e.g. /var/run/cdi is a tmpfs after a reboot);
2. the others are fetched (GET ResourceClaim), checked (UID, allocation, results for our
   driver, devices in our inventory, devices not busy, opaque configs valid), recorded as
   ``PrepareStarted``, handed device by device to the owning discovery plugin, written as
   ONE CDI spec per claim, recorded as ``PrepareCompleted`` (one checkpoint write for the
   whole call), and finally their AllocatedDeviceStatus entries are written;
3. the answer lists, per device, its base request name, pool, device and CDI device IDs.

An error for one claim is that claim's ``error`` string; it never fails the others. The same
claim never runs twice at once: a second caller waits for the first and gets its answer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

from cdi.spec import ContainerEdits
from cdi.spec import Device as CDIDevice
from discovery.plugin import ClaimRef, DeviceRequest, DiscoveryPlugin, UnprepareRequest, env_name
from plugin.checkpoint import CheckpointError, ClaimRecord, PreparedDeviceRecord
from plugin.claims import (
    AllocatedDevice,
    ClaimError,
    RetryableClaimError,
    allocated_devices,
    check_claim,
    opaque_configs,
    typed_config,
)
from plugin.inventory import Inventory
from plugin.names import InvalidNameError, check_claim_uid, check_namespace, check_object_name
from plugin.types import PreparedDeviceRef, PrepareResult

log = logging.getLogger(__name__)


class ClaimSource(Protocol):
    def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The claim as resource.k8s.io/v1 JSON, or None when it does not exist."""
        ...


class SpecWriter(Protocol):
    def write(self, claim_uid: str, devices: list[CDIDevice]) -> list[str]: ...
    def remove(self, claim_uid: str) -> bool: ...
    def exists(self, claim_uid: str) -> bool: ...
    def qualified_name(self, device_name: str) -> str: ...


class StatusWriter(Protocol):
    def write(self, claim: ClaimRef, record: ClaimRecord) -> None: ...
    def remove(self, claim: ClaimRef) -> None: ...


class CheckpointLike(Protocol):
    def get(self, uid: str) -> ClaimRecord | None: ...
    def claims(self) -> dict[str, ClaimRecord]: ...
    def update(self, change: Callable[[dict[str, ClaimRecord]], Any]) -> Any: ...


class Observer(Protocol):
    """Hooks for metrics: called once per claim with its result and duration (seconds)."""

    def claim_prepared(self, ok: bool, seconds: float) -> None: ...
    def claim_unprepared(self, ok: bool, seconds: float) -> None: ...


@dataclass
class _Plan:
    ref: ClaimRef
    claim: dict[str, Any]
    items: list[tuple[AllocatedDevice, DiscoveryPlugin, DeviceRequest]] = field(
        default_factory=list
    )


def cdi_device_name(claim_uid: str, alloc: AllocatedDevice) -> str:
    """The CDI device name of one allocated device: ``<claimUID>-<device>`` plus
    ``-<shareID>`` for a share, so names never collide across claims or shares."""
    name = f"{claim_uid}-{alloc.device}"
    if alloc.share_id:
        name += f"-{alloc.share_id}"
    return name


class NodeLogic:
    """Implements :class:`plugin.types.NodeService` for one driver on one node."""

    def __init__(
        self,
        driver_name: str,
        inventory: Inventory,
        claims: ClaimSource,
        specs: SpecWriter,
        checkpoint: CheckpointLike,
        status: StatusWriter | None = None,
        observer: Observer | None = None,
    ) -> None:
        self.driver_name = driver_name
        self.inventory = inventory
        self.claim_source = claims
        self.specs = specs
        self.checkpoint = checkpoint
        self.status = status
        self.observer = observer
        self._inflight_lock = threading.Lock()
        self._inflight: dict[str, Future[Any]] = {}

    # -- single flight -------------------------------------------------------------------

    def _claim_slots(self, refs: list[ClaimRef]) -> tuple[list[ClaimRef], dict[str, Future[Any]]]:
        """Split ``refs`` into claims this call owns and futures of claims already running."""
        mine: list[ClaimRef] = []
        waiting: dict[str, Future[Any]] = {}
        with self._inflight_lock:
            for ref in refs:
                fut = self._inflight.get(ref.uid)
                if fut is not None:
                    waiting[ref.uid] = fut
                else:
                    self._inflight[ref.uid] = Future()
                    mine.append(ref)
        return mine, waiting

    def _release(self, results: dict[str, Any], owned: list[ClaimRef]) -> None:
        with self._inflight_lock:
            for ref in owned:
                fut = self._inflight.pop(ref.uid, None)
                if fut is not None:
                    fut.set_result(results.get(ref.uid))

    # -- prepare -------------------------------------------------------------------------

    def prepare_claims(self, claims: list[ClaimRef]) -> dict[str, PrepareResult]:
        """NodePrepareResources: one PrepareResult per distinct claim UID in ``claims``."""
        results: dict[str, PrepareResult] = {}
        refs: list[ClaimRef] = []
        for ref in _dedupe(claims):
            try:
                _check_ref(ref)
            except InvalidNameError as e:
                results[ref.uid] = PrepareResult(error=str(e))
                continue
            refs.append(ref)
        mine, waiting = self._claim_slots(refs)
        started = time.monotonic()
        try:
            results.update(self._prepare_owned(mine))
        finally:
            self._release(results, mine)
        for uid, fut in waiting.items():
            got = fut.result()
            results[uid] = got if isinstance(got, PrepareResult) else PrepareResult(
                error="concurrent prepare of this claim failed; retry"
            )
        if self.observer:
            elapsed = time.monotonic() - started
            for ref in mine:
                self.observer.claim_prepared(not results[ref.uid].error, elapsed)
        return results

    def _prepare_owned(self, refs: list[ClaimRef]) -> dict[str, PrepareResult]:
        results: dict[str, PrepareResult] = {}
        todo: list[ClaimRef] = []
        for ref in refs:
            try:
                rec = self.checkpoint.get(ref.uid)
            except CheckpointError as e:
                results[ref.uid] = PrepareResult(error=str(e))
                continue
            if rec is not None and rec.phase == "PrepareCompleted":
                results[ref.uid] = self._answer_from_record(rec)
            else:
                todo.append(ref)
        plans: list[_Plan] = []
        for ref in todo:
            try:
                plans.append(self._plan(ref))
            except ClaimError as e:
                results[ref.uid] = PrepareResult(error=str(e))
                log.warning("prepare failed: %s", e, extra=_ctx(ref))
            except Exception as e:
                results[ref.uid] = PrepareResult(error=f"{type(e).__name__}: {e}")
                log.exception("prepare failed", extra=_ctx(ref))
        if plans:
            results.update(self._run_plans(plans))
        return results

    def _answer_from_record(self, rec: ClaimRecord) -> PrepareResult:
        try:
            if not self.specs.exists(rec.uid):
                self.specs.write(rec.uid, _cdi_devices(rec))
                log.info("re-wrote missing CDI spec", extra={"claim_uid": rec.uid})
        except Exception as e:
            return PrepareResult(error=f"re-writing CDI spec of claim {rec.uid}: {e}")
        return PrepareResult(devices=_refs(rec))

    def _plan(self, ref: ClaimRef) -> _Plan:
        try:
            claim = self.claim_source.get_claim(ref.namespace, ref.name)
        except Exception as e:
            raise RetryableClaimError(
                f"ResourceClaim {ref.namespace}/{ref.name}: cannot read it from the API: {e}"
            ) from None
        if claim is None:
            raise ClaimError(f"ResourceClaim {ref.namespace}/{ref.name}: not found")
        check_claim(claim, ref)
        allocs = allocated_devices(claim, self.driver_name)
        configs = opaque_configs(claim, self.driver_name)
        busy = self._busy_devices(ref.uid)
        plan = _Plan(ref, claim)
        for alloc in allocs:
            where = f"ResourceClaim {ref.namespace}/{ref.name}: status.allocation.devices.results[{alloc.index}]"
            found = self.inventory.lookup(alloc.pool, alloc.device)
            if found is None:
                raise ClaimError(
                    f"{where}: device {alloc.pool}/{alloc.device} is not in this node's inventory"
                )
            plugin, device = found
            other = busy.get((alloc.pool, alloc.device))
            if other and not (alloc.admin_access or device.allow_multiple_allocations):
                raise RetryableClaimError(
                    f"{where}: device {alloc.pool}/{alloc.device} is still prepared for claim "
                    f"{other}; retry after it is unprepared"
                )
            config = typed_config(
                claim, configs, alloc.request, plugin.config_model,
                plugin.config_api_version, plugin.config_kind,
            )
            request = DeviceRequest(
                claim=ref, request=alloc.request, pool=alloc.pool, device=device,
                share_id=alloc.share_id, admin_access=alloc.admin_access, config=config,
                consumed_capacity=alloc.consumed_capacity,
            )
            plan.items.append((alloc, plugin, request))
        return plan

    def _busy_devices(self, uid: str) -> dict[tuple[str, str], str]:
        busy: dict[tuple[str, str], str] = {}
        for other_uid, rec in self.checkpoint.claims().items():
            if other_uid == uid:
                continue
            for d in rec.devices:
                if not d.admin_access:
                    busy[(d.pool, d.device)] = other_uid
        return busy

    def _run_plans(self, plans: list[_Plan]) -> dict[str, PrepareResult]:
        results: dict[str, PrepareResult] = {}
        now = time.time()

        def record_started(claims: dict[str, ClaimRecord]) -> None:
            for p in plans:
                claims[p.ref.uid] = ClaimRecord(
                    uid=p.ref.uid, namespace=p.ref.namespace, name=p.ref.name,
                    phase="PrepareStarted", prepared_at=now,
                    devices=[_record(a, pl.name, p.ref.uid) for a, pl, _ in p.items],
                )

        try:
            self.checkpoint.update(record_started)
        except CheckpointError as e:
            return {p.ref.uid: PrepareResult(error=str(e)) for p in plans}

        done: dict[str, ClaimRecord] = {}
        failed: list[_Plan] = []
        for p in plans:
            try:
                done[p.ref.uid] = self._prepare_devices(p)
            except Exception as e:
                failed.append(p)
                msg = str(e) if isinstance(e, ClaimError) else f"{type(e).__name__}: {e}"
                results[p.ref.uid] = PrepareResult(error=msg)
                log.warning("prepare failed: %s", msg, extra=_ctx(p.ref))

        def record_completed(claims: dict[str, ClaimRecord]) -> None:
            for uid, rec in done.items():
                claims[uid] = rec
            for p in failed:
                claims.pop(p.ref.uid, None)

        try:
            self.checkpoint.update(record_completed)
        except CheckpointError as e:
            # Not recorded as completed: roll every claim of this call back.
            for p in plans:
                if p.ref.uid in done:
                    self._rollback(p, done[p.ref.uid].devices)
                results[p.ref.uid] = PrepareResult(error=str(e))
            return results

        for p in plans:
            rec = done.get(p.ref.uid)
            if rec is None:
                continue
            if self.status is not None:
                try:
                    self.status.write(p.ref, rec)
                except Exception:
                    log.exception("writing AllocatedDeviceStatus failed", extra=_ctx(p.ref))
            results[p.ref.uid] = PrepareResult(devices=_refs(rec))
            log.info(
                "prepared claim with %d device(s)", len(rec.devices), extra=_ctx(p.ref)
            )
        return results

    def _prepare_devices(self, plan: _Plan) -> ClaimRecord:
        prepared: list[PreparedDeviceRecord] = []
        cdi_devices: list[CDIDevice] = []
        try:
            for alloc, plugin, request in plan.items:
                out = plugin.prepare(request)
                rec = _record(alloc, plugin.name, plan.ref.uid)
                edits = out.edits
                if edits.is_empty():
                    edits = ContainerEdits(
                        env=[f"DRAKIT_DEVICE_{env_name(alloc.device)}={alloc.pool}/{alloc.device}"]
                    )
                rec.edits = edits.to_json_dict()
                rec.state = out.state
                rec.status = out.status.model_dump(mode="json") if out.status else None
                prepared.append(rec)
                cdi_devices.append(CDIDevice(name=rec.cdi_name, container_edits=edits))
            ids = self.specs.write(plan.ref.uid, cdi_devices)
            by_name = {i.rsplit("=", 1)[-1]: i for i in ids}
            for rec in prepared:
                rec.cdi_device_ids = [by_name.get(rec.cdi_name, self.specs.qualified_name(rec.cdi_name))]
        except Exception:
            self._rollback(plan, prepared)
            raise
        return ClaimRecord(
            uid=plan.ref.uid, namespace=plan.ref.namespace, name=plan.ref.name,
            phase="PrepareCompleted", devices=prepared, prepared_at=time.time(),
        )

    def _rollback(self, plan: _Plan, prepared: list[PreparedDeviceRecord]) -> None:
        for rec in prepared:
            self._unprepare_device(plan.ref, rec)
        try:
            self.specs.remove(plan.ref.uid)
        except Exception:
            log.exception("removing CDI spec during rollback failed", extra=_ctx(plan.ref))

    # -- unprepare -----------------------------------------------------------------------

    def unprepare_claims(self, claims: list[ClaimRef]) -> dict[str, str]:
        """NodeUnprepareResources from the checkpoint alone: claim UID → error ("" = ok).
        Unknown claims are success."""
        results: dict[str, str] = {}
        refs: list[ClaimRef] = []
        for ref in _dedupe(claims):
            try:
                check_claim_uid(ref.uid)
            except InvalidNameError as e:
                results[ref.uid] = str(e)
                continue
            refs.append(ref)
        mine, waiting = self._claim_slots(refs)
        started = time.monotonic()
        try:
            results.update(self._unprepare_owned(mine))
        finally:
            self._release(results, mine)
        for uid, fut in waiting.items():
            # A prepare or unprepare of this claim was running; run ours after it.
            fut.result()
            results[uid] = self.unprepare_claims([r for r in refs if r.uid == uid])[uid]
        if self.observer:
            elapsed = time.monotonic() - started
            for ref in mine:
                self.observer.claim_unprepared(not results[ref.uid], elapsed)
        return results

    def _unprepare_owned(self, refs: list[ClaimRef]) -> dict[str, str]:
        results: dict[str, str] = {}
        drop: list[str] = []
        for ref in refs:
            try:
                rec = self.checkpoint.get(ref.uid)
            except CheckpointError as e:
                results[ref.uid] = str(e)
                continue
            if rec is None:
                results[ref.uid] = ""
                continue
            try:
                self.unprepare_record(rec, write_status=True)
                drop.append(ref.uid)
                results[ref.uid] = ""
            except Exception as e:
                results[ref.uid] = f"{type(e).__name__}: {e}"
                log.exception("unprepare failed", extra=_ctx(ref))
        if drop:
            try:
                self.checkpoint.update(lambda c: [c.pop(uid, None) for uid in drop])
            except CheckpointError as e:
                for uid in drop:
                    results[uid] = str(e)
        for uid in drop:
            log.info("unprepared claim", extra={"claim_uid": uid})
        return results

    def unprepare_record(self, rec: ClaimRecord, write_status: bool) -> None:
        """Undo a checkpointed claim locally: driver hooks, CDI spec, status entries.
        Raises when the CDI spec cannot be removed (the checkpoint entry must then stay)."""
        ref = ClaimRef(namespace=rec.namespace, name=rec.name, uid=rec.uid)
        for d in rec.devices:
            self._unprepare_device(ref, d)
        self.specs.remove(rec.uid)
        if write_status and self.status is not None and rec.phase == "PrepareCompleted":
            try:
                self.status.remove(ref)
            except Exception:
                log.exception("removing AllocatedDeviceStatus failed", extra=_ctx(ref))

    def _unprepare_device(self, ref: ClaimRef, d: PreparedDeviceRecord) -> None:
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
        except Exception:
            log.exception("unprepare hook of %s failed for %s/%s", d.plugin, d.pool, d.device,
                          extra=_ctx(ref))

    # -- start-up recovery ---------------------------------------------------------------

    def recover(self, spec_claim_uids: list[str]) -> tuple[int, int]:
        """Roll back claims left ``PrepareStarted`` by a crash and remove CDI specs of this
        driver that no completed claim owns. Returns (claims rolled back, specs removed)."""
        claims = self.checkpoint.claims()
        rolled: list[str] = []
        for uid, rec in claims.items():
            if rec.phase == "PrepareStarted":
                self.unprepare_record(rec, write_status=False)
                rolled.append(uid)
        if rolled:
            self.checkpoint.update(lambda c: [c.pop(uid, None) for uid in rolled])
        removed = 0
        for uid in spec_claim_uids:
            rec = claims.get(uid)
            if rec is None or rec.phase != "PrepareCompleted":
                if self.specs.remove(uid):
                    removed += 1
        if rolled or removed:
            log.warning("recovery: rolled back %d half-prepared claim(s), removed %d orphan "
                        "CDI spec(s)", len(rolled), removed)
        return len(rolled), removed


def _dedupe(claims: list[ClaimRef]) -> list[ClaimRef]:
    seen: dict[str, ClaimRef] = {}
    for c in claims:
        seen.setdefault(c.uid, c)
    return list(seen.values())


def _check_ref(ref: ClaimRef) -> None:
    check_claim_uid(ref.uid)
    check_namespace(ref.namespace)
    check_object_name(ref.name)


def _record(alloc: AllocatedDevice, plugin: str, claim_uid: str) -> PreparedDeviceRecord:
    return PreparedDeviceRecord(
        request=alloc.request, pool=alloc.pool, device=alloc.device, share_id=alloc.share_id,
        admin_access=alloc.admin_access, plugin=plugin,
        cdi_name=cdi_device_name(claim_uid, alloc),
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
