"""The device model: what a discovery plugin reports and drakit publishes as ResourceSlices.

Shapes mirror ``resource.k8s.io/v1`` (ResourceSlice ``spec.devices[]``, ``spec.sharedCounters``)
so that every API rule can be checked on them before anything is sent. Models are lenient on
purpose: a device that breaks an API rule can still be built, so the publisher can name the
device and field that is wrong and leave only that device out (see ``drakit.plugin.slices``).

Fields that are never published (``device_nodes``, ``env``) carry node-local facts the default
prepare hook turns into CDI container edits.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from drakit.cdi.names import canonical_cidr, qualified_name_error

AttributeValue: TypeAlias = "DeviceAttribute | bool | int | str | Mapping[str, Any]"
"""What :class:`Device` ``attributes`` accept per key: a :class:`DeviceAttribute`, a plain
``bool`` / ``int`` / ``str``, or its API JSON (``{"version": "1.2.3"}``)."""
QuantityValue: TypeAlias = "str | int | float"
"""A Kubernetes quantity: ``"16Gi"``, ``"500m"``, or a plain number."""
CapacityValue: TypeAlias = "DeviceCapacity | str | int | float | Mapping[str, Any]"
"""What :class:`Device` ``capacity`` accepts per key: a :class:`DeviceCapacity`, a plain
quantity, or its API JSON (``{"value": "16Gi", "requestPolicy": {...}}``)."""
CounterValue: TypeAlias = "Counter | str | int | float | Mapping[str, Any]"
"""What counter maps (:class:`CounterSet`, :class:`DeviceCounterConsumption`) accept per
key: a :class:`Counter`, a plain quantity, or ``{"value": ...}``."""


class _APIModel(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, alias_generator=to_camel)

    def to_api(self) -> dict[str, Any]:
        """The object as resource.k8s.io/v1 JSON (camelCase, unset fields left out)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class DeviceAttribute(_APIModel):
    """A device attribute value (API ``DeviceAttribute``): exactly one member must be set.

    Plain Python values are accepted wherever an attribute is expected and converted:
    ``bool`` → ``bool``, ``int`` → ``int``, ``str`` → ``string``. Use
    :func:`~drakit.discovery.model.version` for a semver value, and the list members
    (``ints`` …, alpha in 1.36) explicitly. The members are keyword arguments under their
    Python names (``DeviceAttribute(int_=4)``, ``DeviceAttribute(string="a1")``) or, in a
    dict given to :meth:`of` or ``model_validate``, under their API names (``{"int": 4}``).
    """

    int_: int | None = Field(default=None, alias="int")
    """API member ``int``: a 64-bit signed integer."""
    bool_: bool | None = Field(default=None, alias="bool")
    """API member ``bool``."""
    string: str | None = None
    """API member ``string``: at most 64 bytes."""
    version: str | None = None
    """API member ``version``: a semantic version (semver 2.0.0), e.g. ``2.4.1``."""
    ints: list[int] | None = None
    """API member ``ints``: a list of 64-bit integers (alpha in Kubernetes 1.36)."""
    bools: list[bool] | None = None
    """API member ``bools``: a list of booleans (alpha in Kubernetes 1.36)."""
    strings: list[str] | None = None
    """API member ``strings``: a list of strings of at most 64 bytes each (alpha in
    Kubernetes 1.36)."""
    versions: list[str] | None = None
    """API member ``versions``: a list of semantic versions (alpha in Kubernetes 1.36)."""

    def members(self) -> list[str]:
        """API names of the members that are set (an empty list counts as set)."""
        return [
            f.alias or k for k, f in type(self).model_fields.items() if getattr(self, k) is not None
        ]

    def value(self) -> Any:
        """The single value that is set (the first one, if several are)."""
        for k in type(self).model_fields:
            v = getattr(self, k)
            if v is not None:
                return v
        return None

    @classmethod
    def of(cls, value: Any) -> DeviceAttribute:
        """Wrap a plain value: bool, int, str (string) or an existing DeviceAttribute/dict."""
        if isinstance(value, DeviceAttribute):
            return value
        if isinstance(value, dict):
            return cls.model_validate(value)
        if isinstance(value, bool):
            return cls.model_validate({"bool": value})
        if isinstance(value, int):
            return cls.model_validate({"int": value})
        if isinstance(value, str):
            return cls(string=value)
        raise TypeError(f"unsupported attribute value type {type(value).__name__}: {value!r}")


def _attribute_input(value: Any) -> Any:
    """:meth:`DeviceAttribute.of` for a plain value, as the dict it validates."""
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, str):
        return {"string": value}
    return DeviceAttribute.of(value)   # raises TypeError for anything else


def version(value: str) -> DeviceAttribute:
    """A semver attribute value (API ``DeviceAttribute.version``), e.g. ``version("1.2.3")``."""
    return DeviceAttribute(version=value)


def versions(*values: str) -> DeviceAttribute:
    """A list of semver values (``DeviceAttribute.versions``, Kubernetes 1.36+ gate
    DRAListTypeAttributes), e.g. ``versions("12.4.0", "13.0.0")``. Non-empty."""
    return DeviceAttribute(versions=list(values))


def list_attribute(values: list[int] | list[bool] | list[str]) -> DeviceAttribute:
    """A list-typed attribute (``ints``, ``bools`` or ``strings`` by the element type;
    DRAListTypeAttributes): e.g. ``list_attribute([0, 1])`` for the NUMA nodes a device
    spans. Use :func:`versions` for semver lists. Raises TypeError for mixed or other
    element types and ValueError for an empty list (the API requires a non-empty list)."""
    if not values:
        raise ValueError("a list attribute must not be empty")
    if all(isinstance(v, bool) for v in values):
        return DeviceAttribute(bools=list(values))  # type: ignore[arg-type]
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return DeviceAttribute(ints=list(values))  # type: ignore[arg-type]
    if all(isinstance(v, str) for v in values):
        return DeviceAttribute(strings=list(values))  # type: ignore[arg-type]
    raise TypeError(f"list attribute values must all be int, bool or str: {values!r}")


class ValidRange(_APIModel):
    """``requestPolicy.validRange``: quantities as strings (``"1Gi"``)."""

    min: str | None = None
    max: str | None = None
    step: str | None = None


class CapacityRequestPolicy(_APIModel):
    """``capacity[k].requestPolicy`` (DRAConsumableCapacity): default plus one of validValues /
    validRange. Only allowed when the device sets ``allowMultipleAllocations: true``."""

    default: str | None = None
    valid_values: list[str] | None = None
    valid_range: ValidRange | None = None


class DeviceCapacity(_APIModel):
    """A capacity (API ``DeviceCapacity``); ``value`` is a Kubernetes quantity string."""

    value: str
    request_policy: CapacityRequestPolicy | None = None

    if TYPE_CHECKING:  # plain quantities are accepted (converted to text)
        def __init__(self, *, value: QuantityValue,
                     request_policy: CapacityRequestPolicy | Mapping[str, Any] | None = None
                     ) -> None: ...

    @field_validator("value", mode="before")
    @classmethod
    def _quantity_to_str(cls, v: Any) -> Any:
        return str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v

    @classmethod
    def of(cls, value: Any) -> DeviceCapacity:
        if isinstance(value, DeviceCapacity):
            return value
        if isinstance(value, dict):
            return cls.model_validate(value)
        return cls(value=str(value))


class Counter(_APIModel):
    """A counter value (API ``Counter``): a quantity string."""

    value: str

    if TYPE_CHECKING:  # plain quantities are accepted (converted to text)
        def __init__(self, *, value: QuantityValue) -> None: ...

    @field_validator("value", mode="before")
    @classmethod
    def _quantity_to_str(cls, v: Any) -> Any:
        return str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v


class CounterSet(_APIModel):
    """A shared counter set (``spec.sharedCounters[]``), e.g. the memory of one physical GPU
    that its partitions consume. ``name`` is a DNS label; counter keys are DNS labels."""

    name: str
    counters: dict[str, Counter]

    if TYPE_CHECKING:  # plain values per counter are accepted
        def __init__(self, *, name: str, counters: Mapping[str, CounterValue]) -> None: ...

    @field_validator("counters", mode="before")
    @classmethod
    def _wrap(cls, v: Any) -> Any:
        if isinstance(v, dict):
            return {
                k: (c if isinstance(c, Counter | dict) else Counter(value=str(c)))
                for k, c in v.items()
            }
        return v


class DeviceCounterConsumption(_APIModel):
    """``spec.devices[i].consumesCounters[j]``: what a device takes from a counter set.

    ``compatibility_groups`` (Kubernetes 1.37, gate DRADeviceCompatibilityGroups, alpha): at
    most 2 unique DNS labels; devices consuming from the same counter set are only
    allocated together when they share a group (none set: only with devices that set none).
    """

    counter_set: str
    counters: dict[str, Counter]
    compatibility_groups: list[str] | None = None

    if TYPE_CHECKING:  # plain values per counter are accepted
        def __init__(self, *, counter_set: str, counters: Mapping[str, CounterValue],
                     compatibility_groups: Sequence[str] | None = None) -> None: ...

    _wrap = field_validator("counters", mode="before")(CounterSet._wrap.__func__)  # type: ignore[attr-defined]


def _quantity_text(v: Any) -> Any:
    return str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v


class NodeAllocatableMapping(_APIModel):
    """``nodeAllocatableResources[r].mapping``: how an allocation of the device counts
    against a node resource. Either ``capacity_key`` (a key of the device's ``capacity``)
    with ``capacity_multiplier`` (consumed capacity times the multiplier), or ``device_multiplier``
    (allocated devices times the multiplier). Multipliers are quantities > 0."""

    capacity_key: str | None = None
    capacity_multiplier: str | None = None
    device_multiplier: str | None = None

    _text = field_validator("capacity_multiplier", "device_multiplier",
                            mode="before")(lambda cls, v: _quantity_text(v))


class NodeAllocatableOverhead(_APIModel):
    """``nodeAllocatableResources[r].overhead``: node resource used besides the device
    itself, ``per_pod`` once per pod and/or ``per_container`` per referencing container
    (quantities ≥ 0)."""

    per_pod: str | None = None
    per_container: str | None = None

    _text = field_validator("per_pod", "per_container",
                            mode="before")(lambda cls, v: _quantity_text(v))


class NodeAllocatableResource(_APIModel):
    """One ``devices[i].nodeAllocatableResources`` entry (Kubernetes 1.37, gate
    DRANodeAllocatableResources, alpha; 1.36 had ``nodeAllocatableResourceMappings``): at
    least one of ``mapping`` and ``overhead``. The map key is a node-allocatable resource
    name: ``cpu``, ``memory`` or ``hugepages-<size>``. kube-apiserver's NodeDeclaredFeatures
    admission refuses (403) a slice with such a device unless its Node lists
    ``DRANodeAllocatableResources`` in ``status.declaredFeatures``.
    """

    mapping: NodeAllocatableMapping | None = None
    overhead: NodeAllocatableOverhead | None = None


class DeviceTaint(_APIModel):
    """``spec.devices[i].taints[j]``: effect is ``NoSchedule``, ``NoExecute`` or ``None``."""

    key: str
    value: str | None = None
    effect: str
    time_added: str | None = None


class Device(_APIModel):
    """One device of a pool (API ``Device`` in resource.k8s.io/v1, no ``basic`` wrapper).

    ``name`` must be a DNS label (≤ 63), unique in its pool and stable across restarts and
    hot-plug (derive it from hardware identity, see :func:`drakit.discovery.names.dns_label`).
    Attribute and capacity keys are qualified names; keys without a domain are in the
    driver's domain. ``device_nodes`` and ``env`` are node-local and never published: the
    default prepare hook puts them into the claim's CDI spec.
    """

    name: str
    attributes: dict[str, DeviceAttribute] = Field(default_factory=dict)
    capacity: dict[str, DeviceCapacity] = Field(default_factory=dict)
    consumes_counters: list[DeviceCounterConsumption] | None = None
    taints: list[DeviceTaint] | None = None
    allow_multiple_allocations: bool | None = None
    binds_to_node: bool | None = None
    binding_conditions: list[str] | None = None
    binding_failure_conditions: list[str] | None = None
    node_name: str | None = None
    node_selector: dict[str, Any] | None = None
    all_nodes: bool | None = None
    node_allocatable_resources: dict[str, NodeAllocatableResource] | None = None
    # node-local, never published
    device_nodes: list[str] = Field(default_factory=list, exclude=True)
    env: dict[str, str] = Field(default_factory=dict, exclude=True)

    if TYPE_CHECKING:  # plain attribute values and quantities are accepted
        def __init__(
            self, *, name: str,
            attributes: Mapping[str, AttributeValue] = ...,
            capacity: Mapping[str, CapacityValue] = ...,
            consumes_counters: Sequence[DeviceCounterConsumption | Mapping[str, Any]]
            | None = None,
            taints: Sequence[DeviceTaint | Mapping[str, Any]] | None = None,
            allow_multiple_allocations: bool | None = None,
            binds_to_node: bool | None = None,
            binding_conditions: Sequence[str] | None = None,
            binding_failure_conditions: Sequence[str] | None = None,
            node_name: str | None = None,
            node_selector: Mapping[str, Any] | None = None,
            all_nodes: bool | None = None,
            node_allocatable_resources: Mapping[str, NodeAllocatableResource
                                                | Mapping[str, Any]] | None = None,
            device_nodes: Sequence[str] = ...,
            env: Mapping[str, str] = ...,
        ) -> None: ...

    @field_validator("attributes", mode="before")
    @classmethod
    def _wrap_attributes(cls, v: Any) -> Any:
        # Plain values become their one-member form ({"int": 3}); dicts and attributes are
        # left to the field's own validation (in pydantic-core, not one Python call each).
        if isinstance(v, dict):
            return {k: a if isinstance(a, DeviceAttribute | dict) else _attribute_input(a)
                    for k, a in v.items()}
        return v

    @field_validator("capacity", mode="before")
    @classmethod
    def _wrap_capacity(cls, v: Any) -> Any:
        if isinstance(v, dict):
            return {k: c if isinstance(c, DeviceCapacity | dict) else {"value": str(c)}
                    for k, c in v.items()}
        return v

    def to_api(self) -> dict[str, Any]:
        out = super().to_api()
        if not out.get("attributes"):
            out.pop("attributes", None)
        if not out.get("capacity"):
            out.pop("capacity", None)
        return out


class Pool(BaseModel):
    """A pool of devices and counter sets, published as one or more ResourceSlices.

    ``name`` is the pool name (DNS subdomains joined by ``/``, ≤ 253). By default a pool is
    node-local (``spec.nodeName`` = this node). Set exactly one of ``node_selector``,
    ``all_nodes`` or ``per_device_node_selection`` for a pool that is not node-local.

    Kubernetes 1.37 (alpha gates), copied into every slice of the pool:
    ``partition_type_attribute`` (``spec.partitionTypeAttribute``, gate
    DRAPartitionableDevicesType) names a string attribute, fully qualified
    (``<driver>/profile``), that every device consuming counters carries: its partition
    type. ``skip_node_operations`` (``spec.skipNodeOperations``, gate
    DRAOptionalNodeOperations): ``NodePrepareResources`` (only with
    ``NodeUnprepareResources``), ``NodeUnprepareResources`` or ``*``: the kubelet skips
    those gRPC calls for claims whose devices all come from such slices.
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    devices: list[Device] = Field(default_factory=list)
    counter_sets: list[CounterSet] = Field(default_factory=list)
    node_selector: dict[str, Any] | None = None
    all_nodes: bool | None = None
    per_device_node_selection: bool | None = None
    partition_type_attribute: str | None = None
    skip_node_operations: list[str] | None = None


HealthState = Literal["Healthy", "Unhealthy", "Unknown"]


class DeviceHealth(BaseModel):
    """Health of one device as a plugin sees it (dra-health ``DeviceHealth``).

    ``message`` is free text, truncated to 1024 bytes on the wire.
    """

    model_config = ConfigDict(extra="forbid")

    state: HealthState = "Healthy"
    message: str = ""


# ---------------------------------------------------------------------------------------------
# AllocatedDeviceStatus: what a prepare hook reports for ResourceClaim ``status.devices[]``.
# The API server's rules (k8s.io/kubernetes pkg/apis/resource/validation
# ValidateResourceClaimStatusUpdate; KEP-4817, resource.k8s.io/v1 in Kubernetes 1.34) are
# checked when the vendor builds the model, so a status the API would refuse fails the prepare
# with a ValidationError naming the field instead of being dropped after it.

MAX_CONDITIONS = 8
"""AllocatedDeviceStatusMaxConditions: at most 8 conditions per device."""
MAX_REASON_BYTES = 1024
MAX_MESSAGE_BYTES = 32768
MAX_DATA_BYTES = 10240
"""AllocatedDeviceStatusDataMaxLength: ``data`` as compact JSON, in bytes."""
MAX_INTERFACE_NAME_BYTES = 256
MAX_HARDWARE_ADDRESS_BYTES = 128
MAX_IPS = 16
"""NetworkDeviceDataMaxIPs: at most 16 entries in ``networkData.ips``."""
CONDITION_STATUSES = ("True", "False", "Unknown")
REASON_FMT = "[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?"
"""metav1.Condition ``reason`` (apimachinery ``conditionReasonFmt``)."""
_REASON = re.compile(REASON_FMT, re.ASCII)
#: The default condition of a device whose plugin reports none.
READY = {"type": "Ready", "status": "True", "reason": "Prepared",
         "message": "device prepared by drakit"}


def _rule(message: str, index: int | None = None) -> PydanticCustomError:
    """A broken API rule; ``message`` in the API server's words (without the field path).
    ``index`` names the list item when the error is reported on the whole list."""
    ctx = {} if index is None else {"index": index}
    return PydanticCustomError("api_rule", message.replace("{", "{{").replace("}", "}}"), ctx)


def _nbytes(value: str) -> int:
    return len(value.encode())


def _too_long(value: str | None, limit: int) -> str | None:
    if value is not None and _nbytes(value) > limit:
        raise _rule(f"Too long: may not be more than {limit} bytes")
    return value


def _canonical_ip(value: str) -> str:
    """An interface address in canonical CIDR form (host bits allowed), as it is."""
    try:
        iface = ipaddress.ip_interface(value) if "/" in value else None
    except ValueError:
        iface = None
    if iface is None:
        raise _rule(f"Invalid value: {value!r}: must be a valid address in CIDR form, "
                    "(e.g. 10.9.8.7/24 or 2001:db8::1/64)")
    canonical = canonical_cidr(str(iface.ip), iface.network.prefixlen)
    if canonical != value:
        raise _rule(f"Invalid value: {value!r}: must be in canonical form ({canonical!r})")
    return value


def _at_most(items: Any, limit: int) -> Any:
    if isinstance(items, list) and len(items) > limit:
        raise _rule(f"Too many: {len(items)}: must have at most {limit} items")
    return items


class _StatusModel(BaseModel):
    # snake_case or the API's camelCase accepted; checked again on assignment
    model_config = ConfigDict(populate_by_name=True, alias_generator=to_camel,
                              validate_assignment=True)


class Condition(_StatusModel):
    """A metav1.Condition for ``status.devices[].conditions``: ``type`` a qualified name,
    ``status`` True / False / Unknown, ``reason`` non-empty ``REASON_FMT`` ≤ 1024 bytes,
    ``message`` ≤ 32768 bytes, ``observed_generation`` ≥ 0; ``last_transition_time``
    (RFC 3339, UTC) is filled in when left empty. Raises ``ValidationError``."""

    type: str
    status: str = "True"
    reason: str = "Prepared"
    message: str = ""
    observed_generation: int | None = None
    last_transition_time: str | None = None

    @field_validator("type")
    @classmethod
    def _type(cls, v: str) -> str:
        if not v:
            raise _rule("Required value")
        err = qualified_name_error(v)
        if err:
            raise _rule(f"Invalid value: {v!r}: {err}")
        return v

    @field_validator("status")
    @classmethod
    def _status(cls, v: str) -> str:
        if v not in CONDITION_STATUSES:
            raise _rule(f"Unsupported value: {v!r}: supported values: "
                        + ", ".join(f'"{s}"' for s in sorted(CONDITION_STATUSES)))
        return v

    @field_validator("reason")
    @classmethod
    def _reason(cls, v: str) -> str:
        if not v:
            raise _rule("Required value")
        if _nbytes(v) > MAX_REASON_BYTES or not _REASON.fullmatch(v):
            raise _rule(f"Invalid value: {v!r}: must match {REASON_FMT} and be at most "
                        f"{MAX_REASON_BYTES} bytes")
        return v

    @field_validator("message")
    @classmethod
    def _message(cls, v: str) -> str:
        return _too_long(v, MAX_MESSAGE_BYTES) or ""

    @field_validator("observed_generation")
    @classmethod
    def _generation(cls, v: int | None) -> int | None:
        if v is not None and v < 0:
            raise _rule("must be greater than or equal to zero")
        return v

    def to_api(self, now: str) -> dict[str, Any]:
        """The condition as API JSON; ``now`` (RFC 3339) when no transition time is set."""
        out: dict[str, Any] = {"type": self.type, "status": self.status, "reason": self.reason,
                               "message": self.message,
                               "lastTransitionTime": self.last_transition_time or now}
        if self.observed_generation is not None:
            out["observedGeneration"] = self.observed_generation
        return out


class NetworkData(_StatusModel):
    """``status.devices[].networkData``: ``interface_name`` ≤ 256 bytes, ``hardware_address``
    ≤ 128 bytes (no format check), at most 16 ``ips``, each an interface address in
    canonical CIDR form (``192.0.2.5/24``, RFC 5952 IPv6; see
    :func:`drakit.cdi.names.canonical_cidr`), no duplicates. Raises ``ValidationError``."""

    interface_name: str | None = None
    hardware_address: str | None = None
    ips: list[Annotated[str, AfterValidator(_canonical_ip)]] = Field(default_factory=list)

    _interface = field_validator("interface_name")(
        lambda cls, v: _too_long(v, MAX_INTERFACE_NAME_BYTES))
    _hardware = field_validator("hardware_address")(
        lambda cls, v: _too_long(v, MAX_HARDWARE_ADDRESS_BYTES))
    _count = field_validator("ips", mode="before")(lambda cls, v: _at_most(v, MAX_IPS))

    @field_validator("ips")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        for k, ip in enumerate(v):
            if ip in v[:k]:
                raise _rule(f"Duplicate value: {ip!r}", k)
        return v

    def to_api(self) -> dict[str, Any]:
        """The set fields as API JSON (camelCase); empty when nothing is set."""
        out: dict[str, Any] = {}
        if self.interface_name:
            out["interfaceName"] = self.interface_name
        if self.hardware_address:
            out["hardwareAddress"] = self.hardware_address
        if self.ips:
            out["ips"] = list(self.ips)
        return out


class DeviceStatus(_StatusModel):
    """What a prepare hook reports for one device's AllocatedDeviceStatus: at most 8
    ``conditions`` with distinct types (None: the default, one ``Ready`` condition),
    ``data`` any JSON object of ≤ 10240 bytes as compact JSON, ``network_data``. Every API
    rule is checked here (ValidateResourceClaimStatusUpdate, KEP-4817): an invalid status
    raises ``pydantic.ValidationError`` naming the field, which fails the prepare."""

    conditions: list[Condition] | None = None
    data: dict[str, Any] | None = None
    network_data: NetworkData | None = None

    _count = field_validator("conditions", mode="before")(
        lambda cls, v: _at_most(v, MAX_CONDITIONS))

    @field_validator("conditions")
    @classmethod
    def _unique(cls, v: list[Condition] | None) -> list[Condition] | None:
        types = [c.type for c in v or []]
        for k, t in enumerate(types):
            if t in types[:k]:
                raise _rule(f"Duplicate value: {t!r}", k)
        return v

    @field_validator("data", mode="before")
    @classmethod
    def _data(cls, v: Any) -> Any:
        if v is None:
            return v
        try:
            size = len(json.dumps(v, separators=(",", ":"), allow_nan=False).encode())
        except (TypeError, ValueError):
            size = -1
        if not isinstance(v, dict) or size < 0:
            raise _rule('Invalid value: "<value omitted>": must be a valid JSON object')
        if size > MAX_DATA_BYTES:
            raise _rule(f"Too long: may not be more than {MAX_DATA_BYTES} bytes")
        return v

    def to_api(self, now: str) -> dict[str, Any]:
        """``conditions``, ``data`` and ``networkData`` of the AllocatedDeviceStatus entry
        as API JSON; ``now`` (RFC 3339) is the transition time of conditions without one."""
        conditions = self.conditions
        if conditions is None:
            conditions = [Condition.model_validate(READY)]
        out: dict[str, Any] = {"conditions": [c.to_api(now) for c in conditions]}
        if self.data is not None:
            out["data"] = self.data
        network = self.network_data.to_api() if self.network_data is not None else {}
        if network:
            out["networkData"] = network
        return out


def status_error_messages(error: ValidationError, path: str) -> list[str]:
    """``error`` of a :class:`DeviceStatus` as the API server would word it: one
    ``<path>.<field>: <message>`` per error, API field names (``networkData.ips[1]``)."""
    out = []
    for err in error.errors():
        where = path
        loc = list(err["loc"])
        if "index" in (err.get("ctx") or {}):
            loc.append(err["ctx"]["index"])
        for part in loc:
            where += f"[{part}]" if isinstance(part, int) else f".{to_camel(str(part))}"
        out.append(f"{where}: {err['msg']}")
    return out
