"""The plan of one claim's prepare, made once from the ResourceClaim read at the API: which
device goes to which discovery plugin with which request, and the checkpoint record it
will be (``PrepareStarted`` at admission, ``PrepareCompleted`` once every device is done).

Checks made here (the claim itself, no other claim): UID and allocation
(:func:`drakit.plugin.claims.resourceclaim.check_claim`), every allocation result for this
driver in this node's inventory, opaque configs valid for the owning plugin
(:func:`drakit.plugin.claims.resourceclaim.typed_config`). They raise
:class:`drakit.plugin.claims.resourceclaim.ClaimError` naming the field
(``status.allocation.devices.results[i]``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from drakit.discovery.plugin import ClaimRef, DeviceRequest, DiscoveryPlugin
from drakit.plugin.claims.checkpoint import ClaimRecord, PreparedDeviceRecord
from drakit.plugin.claims.resourceclaim import (
    AllocatedDevice,
    ClaimError,
    OpaqueConfig,
    allocated_devices,
    check_claim,
    opaque_configs,
    typed_config,
)
from drakit.plugin.slices.inventory import Inventory


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


def cdi_device_name(claim_uid: str, alloc: AllocatedDevice) -> str:
    """The CDI device name of one allocated device: ``<claimUID>-<device>`` plus
    ``-<shareID>`` for a share, so names never collide across claims or shares."""
    name = f"{claim_uid}-{alloc.device}"
    if alloc.share_id:
        name += f"-{alloc.share_id}"
    return name


@dataclass(frozen=True)
class PlanItem:
    """One allocated device: its allocation result, owning plugin, the request handed to
    the plugin's prepare hook, and its checkpoint record before the hook ran."""

    alloc: AllocatedDevice
    plugin: DiscoveryPlugin
    request: DeviceRequest
    shareable: bool  # adminAccess or the device allows multiple allocations
    record: PreparedDeviceRecord


@dataclass(frozen=True)
class Plan:
    """One claim to prepare. ``reserved``: ``status.reservedFor`` is not empty;
    ``reservations``: its digest (:func:`reservations_digest`)."""

    ref: ClaimRef
    fingerprint: str
    reserved: bool
    reservations: str | None
    configs: list[dict[str, Any]]
    items: list[PlanItem] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"ResourceClaim {self.ref.namespace}/{self.ref.name}"

    def started(self, owner: str, now: float) -> ClaimRecord:
        """The ``PrepareStarted`` record of this claim, run by ``owner``, at ``now``
        (seconds since the epoch)."""
        return ClaimRecord(
            uid=self.ref.uid, namespace=self.ref.namespace, name=self.ref.name,
            phase="PrepareStarted", owner=owner, fingerprint=self.fingerprint,
            prepared_at=now, configs=self.configs, devices=[it.record for it in self.items],
        )


def plan_claim(ref: ClaimRef, claim: dict[str, Any], driver_name: str,
               inventory: Inventory) -> Plan:
    """The plan of ``claim`` (resource.k8s.io/v1 JSON) for ``driver_name``. Raises
    ClaimError when the claim cannot be prepared here (see the module docstring)."""
    check_claim(claim, ref)
    allocs = allocated_devices(claim, driver_name)
    configs = opaque_configs(claim, driver_name)
    reserved_for = (claim.get("status") or {}).get("reservedFor")
    items: list[PlanItem] = []
    for alloc in allocs:
        found = inventory.lookup(alloc.pool, alloc.device)
        if found is None:
            raise ClaimError(
                f"ResourceClaim {ref.namespace}/{ref.name}: "
                f"status.allocation.devices.results[{alloc.index}]: device "
                f"{alloc.pool}/{alloc.device} is not in this node's inventory")
        plugin, device = found
        config = typed_config(claim, configs, alloc.request, plugin.config_model,
                              plugin.config_api_version, plugin.config_kind,
                              strict=plugin.config_strict)
        request = DeviceRequest(
            claim=ref, request=alloc.request, pool=alloc.pool, device=device,
            share_id=alloc.share_id, admin_access=alloc.admin_access, config=config,
            consumed_capacity=alloc.consumed_capacity,
        )
        record = PreparedDeviceRecord(
            request=alloc.request, pool=alloc.pool, device=alloc.device,
            share_id=alloc.share_id, admin_access=alloc.admin_access,
            consumed_capacity=dict(alloc.consumed_capacity), plugin=plugin.name,
            config=config.model_dump(mode="json") if config is not None else None,
            cdi_name=cdi_device_name(ref.uid, alloc),
        )
        shareable = alloc.admin_access or bool(device.allow_multiple_allocations)
        items.append(PlanItem(alloc, plugin, request, shareable, record))
    return Plan(
        ref, fingerprint=allocation_fingerprint(allocs, configs), reserved=bool(reserved_for),
        reservations=reservations_digest(reserved_for),
        configs=[{"source": c.source, "requests": list(c.requests),
                  "opaque": {"driver": driver_name, "parameters": c.parameters}}
                 for c in configs],
        items=items,
    )
