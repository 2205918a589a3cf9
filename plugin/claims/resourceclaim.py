"""What a ResourceClaim asks of this driver, read once at the API: the allocation results and
opaque configs meant for us, checked, and the plan of the claim's prepare made from them
(which device goes to which discovery plugin with which request, and the checkpoint record
it will be: ``PrepareStarted`` at admission, ``PrepareCompleted`` once every device is done).

Claims arrive as resource.k8s.io/v1 JSON dicts (``drakit.plugin.api.resourceapi`` converts older API
versions). The checks (the claim itself, no other claim): UID and allocation
(:func:`check_claim`), every allocation result for this driver in this node's inventory
(:func:`plan_claim`), opaque configs valid for the owning plugin (:func:`typed_config`). They
raise :class:`ClaimError` naming the claim and the field, with the API's paths
(``status.allocation.devices.results[2]``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from drakit.discovery.plugin import ClaimRef, DeviceRequest, DiscoveryPlugin
from drakit.plugin.claims.checkpoint import ClaimRecord, PreparedDeviceRecord
from drakit.plugin.names import (
    InvalidNameError,
    check_claim_uid,
    check_device_name,
    check_pool_name,
)
from drakit.plugin.slices.inventory import Inventory
from drakit.plugin.slices.rules import validate_capacity_amounts


class ClaimError(Exception):
    """A claim that cannot be prepared; the message names the claim and field."""


class RetryableClaimError(ClaimError):
    """A claim that may prepare on a later attempt (device busy, API unavailable)."""


@dataclass(frozen=True)
class AllocatedDevice:
    """One allocation result for our driver (``status.allocation.devices.results[index]``)."""

    index: int
    request: str
    driver: str
    pool: str
    device: str
    share_id: str | None = None
    admin_access: bool = False
    consumed_capacity: dict[str, str] = field(default_factory=dict)

    @property
    def base_request(self) -> str:
        """The request name without a firstAvailable subrequest (``main/sub`` → ``main``)."""
        return self.request.split("/", 1)[0]


@dataclass(frozen=True)
class OpaqueConfig:
    """One opaque config for our driver, in allocation order (class configs come first)."""

    index: int
    source: str
    requests: tuple[str, ...]
    parameters: dict[str, Any]

    def applies_to(self, request: str) -> bool:
        """True when this config covers ``request``: no requests listed means all; a listed
        ``main`` covers its subrequests ``main/x``."""
        if not self.requests:
            return True
        base = request.split("/", 1)[0]
        return request in self.requests or base in self.requests


def _name(claim: dict[str, Any]) -> str:
    meta = claim.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    return f"ResourceClaim {_text(meta.get('namespace', '?'))}/{_text(meta.get('name', '?'))}"


def _text(value: Any, limit: int = 64) -> str:
    """A value from the API for an error message: strings as they are, anything else as
    ``repr``; cut to ``limit`` characters (an API object may hold anything)."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + f"...({len(text)} chars)"


def check_claim(claim: Any, ref: ClaimRef) -> dict[str, Any]:
    """Check that ``claim`` is the claim the kubelet asked for and is allocated.

    Raises ClaimError for a claim that is not a JSON object, whose ``metadata.namespace`` /
    ``metadata.name`` differ from the request's, for a UID mismatch (the claim was deleted
    and re-created) or a claim without ``status.allocation``. Returns
    ``status.allocation``. Messages name the claim as the kubelet did.
    """
    where = f"ResourceClaim {ref.namespace}/{ref.name}"
    if not isinstance(claim, dict):
        raise ClaimError(f"{where}: not a JSON object")
    meta = claim.get("metadata")
    if not isinstance(meta, dict):
        raise ClaimError(f"{where}: metadata: Required value: must be a JSON object")
    for key, want in (("namespace", ref.namespace), ("name", ref.name)):
        if meta.get(key) != want:
            raise ClaimError(f"{where}: metadata.{key} is {_text(meta.get(key))!r} in the "
                             "answer of the API server: not the claim the kubelet asked for")
    uid = meta.get("uid")
    if uid != ref.uid:
        raise ClaimError(
            f"{where}: metadata.uid is {_text(uid)!r}, the kubelet asked for {ref.uid!r}: "
            "the claim was replaced"
        )
    status = claim.get("status")
    allocation = status.get("allocation") if isinstance(status, dict) else None
    if not isinstance(allocation, dict):
        raise ClaimError(f"{where}: status.allocation: not allocated")
    return allocation


def allocated_devices(claim: dict[str, Any], driver: str) -> list[AllocatedDevice]:
    """The allocation results of ``claim`` whose driver is ``driver``, in API order.

    Raises ClaimError for a malformed result (missing pool/device, wrong types) naming its
    path, or when no result is for our driver.
    """
    allocation = claim["status"]["allocation"]
    devices = allocation.get("devices") or {}
    results = devices.get("results") if isinstance(devices, dict) else None
    if not isinstance(results, list):
        raise ClaimError(f"{_name(claim)}: status.allocation.devices.results: not a list")
    out: list[AllocatedDevice] = []
    seen: dict[tuple[str, str, str | None], int] = {}
    for i, r in enumerate(results):
        path = f"{_name(claim)}: status.allocation.devices.results[{i}]"
        if not isinstance(r, dict):
            raise ClaimError(f"{path}: not an object")
        if r.get("driver") != driver:
            continue
        for key in ("request", "pool", "device"):
            if not isinstance(r.get(key), str) or not r.get(key):
                raise ClaimError(f"{path}.{key}: Required value")
        share = r.get("shareID")
        if share is not None and not isinstance(share, str):
            raise ClaimError(f"{path}.shareID: must be a string")
        # pool, device and shareID end up in CDI device names and the checkpoint: check
        # them like the API does before they go anywhere (drakit.plugin.names)
        try:
            check_pool_name(r["pool"], f"{path}.pool")
            check_device_name(r["device"], f"{path}.device")
            if share is not None:
                check_claim_uid(share, f"{path}.shareID")
        except InvalidNameError as e:
            raise ClaimError(str(e)) from None
        consumed = r.get("consumedCapacity") or {}
        if not isinstance(consumed, dict):
            raise ClaimError(f"{path}.consumedCapacity: must be a map")
        if consumed and (errors := validate_capacity_amounts(consumed,
                                                             f"{path}.consumedCapacity")):
            raise ClaimError(str(errors[0]))
        ident = (r["pool"], r["device"], share)
        if ident in seen:
            raise ClaimError(
                f"{path}: Duplicate value: device {_text(r['pool'])}/{_text(r['device'])}"
                f"{' share ' + _text(share) if share else ''} is also "
                f"status.allocation.devices.results[{seen[ident]}]"
            )
        seen[ident] = i
        out.append(
            AllocatedDevice(
                index=i,
                request=r["request"],
                driver=driver,
                pool=r["pool"],
                device=r["device"],
                share_id=share,
                admin_access=r.get("adminAccess") is True,
                consumed_capacity={str(k): str(v) for k, v in consumed.items()},
            )
        )
    if not out:
        raise ClaimError(f"{_name(claim)}: no allocation results for driver {driver!r}")
    return out


def opaque_configs(claim: dict[str, Any], driver: str) -> list[OpaqueConfig]:
    """Opaque configs for ``driver`` from ``status.allocation.devices.config``: class configs
    first, then claim configs, each group in API order (the precedence convention: a later
    config overrides an earlier one). Configs of other drivers are ignored."""
    devices = claim["status"]["allocation"].get("devices") or {}
    configs = devices.get("config") or []
    if not isinstance(configs, list):
        raise ClaimError(f"{_name(claim)}: status.allocation.devices.config: not a list")
    found: list[OpaqueConfig] = []
    for i, c in enumerate(configs):
        path = f"{_name(claim)}: status.allocation.devices.config[{i}]"
        if not isinstance(c, dict):
            raise ClaimError(f"{path}: not an object")
        opaque = c.get("opaque")
        if not isinstance(opaque, dict) or opaque.get("driver") != driver:
            continue
        params = opaque.get("parameters")
        if not isinstance(params, dict):
            raise ClaimError(f"{path}.opaque.parameters: must be a JSON object")
        requests = c.get("requests") or []
        if not isinstance(requests, list) or not all(isinstance(r, str) for r in requests):
            raise ClaimError(f"{path}.requests: must be a list of request names")
        found.append(OpaqueConfig(i, str(c.get("source", "")), tuple(requests), params))
    rank = {"FromClass": 0, "FromClaim": 1}
    return sorted(found, key=lambda c: (rank.get(c.source, 1), c.index))


def typed_config(
    claim: dict[str, Any],
    configs: list[OpaqueConfig],
    request: str,
    model: type[BaseModel] | None,
    api_version: str | None = None,
    kind: str | None = None,
    strict: bool = True,
) -> BaseModel | None:
    """Merge the configs that apply to ``request`` (later keys win) and validate them into
    ``model``: unknown fields are errors. ``apiVersion``/``kind`` in each opaque object must
    match ``api_version``/``kind`` when those are given.

    The parameters are JSON (``opaque.parameters`` is a RawExtension) and are validated as
    JSON, in pydantic's strict mode unless ``strict`` is False: a JSON bool is not a number
    and a string is not a number, as Go's encoding/json decodes an opaque config; a string
    still fills an enum, date-time or UUID field.

    Returns None when ``model`` is None. Raises ClaimError listing every error of every
    config that applies (wrong apiVersion/kind, unknown fields, invalid values), each as
    ``status.allocation.devices.config[<i>].opaque.parameters.<field>: <why>``.
    """
    if model is None:
        return None
    merged: dict[str, Any] = {}
    allowed = set()
    for name, f in model.model_fields.items():
        allowed.add(name)
        if f.alias:
            allowed.add(f.alias)
    errors: list[str] = []  # every problem of every config, one style: "<field path>: <why>"
    source: dict[str, str] = {}  # merged key -> the parameters path of the config it came from
    last_path = "status.allocation.devices.config"
    for cfg in configs:
        if not cfg.applies_to(request):
            continue
        path = f"status.allocation.devices.config[{cfg.index}].opaque.parameters"
        last_path = path
        params = dict(cfg.parameters)
        for key, want in (("apiVersion", api_version), ("kind", kind)):
            got = params.pop(key, None)
            if want is not None and got is not None and got != want:
                errors.append(f"{path}.{key}: Unsupported value: {got!r}: expected {want!r}")
        for key in sorted(set(params) - allowed):
            errors.append(f"{path}.{key}: unknown field (not in {model.__name__})")
            del params[key]
        merged.update(params)
        source.update(dict.fromkeys(params, path))
    result: BaseModel | None = None
    try:
        result = model.model_validate_json(json.dumps(merged), strict=strict)
    except ValidationError as e:
        for err in e.errors():
            loc = ".".join(str(x) for x in err["loc"])
            first = str(err["loc"][0]) if err["loc"] else ""
            errors.append(f"{source.get(first, last_path)}.{loc}: {err['msg']}")
    if errors:
        raise ClaimError(f"{_name(claim)}: opaque config for request {request!r}: "
                         + "; ".join(errors))
    return result


# -- the plan of one claim's prepare ---------------------------------------------------------


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
