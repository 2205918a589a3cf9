"""Built-in ``example`` discovery: fake devices declared in YAML, for demos and tests.

Like the Kubernetes example driver's GPUs, but declared, not hard-wired. The inventory comes
from the YAML file named by option ``file`` and/or from the same keys given inline in the
options; with neither, the demo file shipped next to this module
(``example-devices.yaml``) is used. Shape (camelCase keys; unknown keys are errors)::

    pool: my-pool                     # default: the node name
    devices:                          # plain devices
      - name: gpu-0
        attributes: {model: LATEST-GPU-MODEL, driverVersion: {version: 1.0.0}}
        capacity: {memory: 80Gi}
        deviceNodes: [/dev/null, {path: /dev/example-gpu0, hostPath: /dev/null}]
        env: {EXAMPLE_GPU: "0"}
        allowMultipleAllocations: true        # with capacity requestPolicy (consumable)
        taints: [{key: example.com/broken, effect: NoSchedule}]
    partitionable:                    # a counter set per physical device + partitions
      - name: gpu-1
        counters: {memory: 40Gi, compute: 98}
        whole: true                   # also offer the whole device (consumes everything)
        partitions:
          - {profile: 1g-10gb, count: 4, counters: {memory: 10Gi, compute: 14}}
    generate: {count: 10000, prefix: fake}    # fake-0 … fake-9999 (index, uuid attributes)

Kubernetes 1.37 fields (alpha feature gates; drakit leaves them out, with a warning, on a
server that does not serve them): ``nodeAllocatableResources`` on a plain device (``{memory:
{mapping: {capacityKey: memory, capacityMultiplier: "1"}, overhead: {perPod: 64Mi}}}``),
``compatibilityGroups`` on a partition profile, and at the top level
``partitionTypeAttribute: true`` (every device that consumes counters carries its partition
type as the string attribute ``profile``, the whole device ``whole``; the slices name
``<driver>/profile``) and ``skipNodeOperations: [NodeUnprepareResources]``. The shipped
``example-devices-k8s137.yaml`` (:data:`DEMO_FILE_K8S_137`) shows them, plus list-typed
attributes (``{ints: [0, 1]}``, ``{versions: [12.4.0, 13.0.0]}``).

Partitionable devices follow resource.k8s.io/v1 partitionable devices (KEP-4815): the
physical device's counter set ``<name>-counters`` goes to ``spec.sharedCounters``; the
whole device and each partition ``<name>-<profile>-<i>`` consume from it
(``consumesCounters``), so the scheduler never over-commits the physical device.

Names that are not DNS labels are mapped with :func:`drakit.discovery.names.dns_label`; attribute
and capacity keys with :func:`drakit.discovery.names.qualified_name` (each with a warning).

Opaque configuration: :class:`ExampleConfig` (``apiVersion: drakit.example.com/v1alpha1``,
``kind: ExampleDeviceConfig``); prepare turns it into environment variables.
"""

from __future__ import annotations

import hashlib
import logging
import os
import uuid
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from drakit.cdi.spec import ContainerEdits, DeviceNode
from drakit.discovery.builtin._common import parse_options
from drakit.discovery.model import (
    Counter,
    CounterSet,
    Device,
    DeviceCounterConsumption,
    DeviceTaint,
    NodeAllocatableResource,
    Pool,
)
from drakit.discovery.names import dns_label, qualified_name
from drakit.discovery.plugin import (
    DeviceRequest,
    DiscoveryContext,
    DiscoveryPlugin,
    PreparedDevice,
    env_name,
)

DEMO_FILE = Path(__file__).with_name("example-devices.yaml")
"""The demo inventory shipped with drakit."""
DEMO_FILE_K8S_137 = Path(__file__).with_name("example-devices-k8s137.yaml")
"""A demo inventory with the Kubernetes 1.37 fields (alpha gates on the cluster)."""
MAX_GENERATED = 100_000
"""Upper bound of ``generate.count``."""

_log = logging.getLogger(__name__)
_UUID_NAMESPACE = uuid.UUID("5d3ad1f4-4c55-4f7e-9a53-8d0b0a2f6e11")
_UUID_NAMESPACE_SHA1 = hashlib.sha1(_UUID_NAMESPACE.bytes, usedforsecurity=False)


def device_uuid(name: str) -> str:
    """``str(uuid.uuid5(_UUID_NAMESPACE, name))`` (the ``uuid`` attribute of generated
    devices), without building a UUID object: a third of the time, for 10,000 devices."""
    digest = _UUID_NAMESPACE_SHA1.copy()
    digest.update(name.encode("utf-8"))
    b = bytearray(digest.digest()[:16])
    b[6] = (b[6] & 0x0F) | 0x50     # version 5
    b[8] = (b[8] & 0x3F) | 0x80     # RFC 4122 variant
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)


# -- opaque configuration ----------------------------------------------------------------


class TimeSlicing(_Strict):
    """Time-slicing settings: ``interval`` of Default, Short, Medium or Long."""

    interval: Literal["Default", "Short", "Medium", "Long"] = "Default"


class Sharing(_Strict):
    """How a device is shared between the containers of a claim."""

    strategy: Literal["Exclusive", "TimeSlicing", "SpacePartitioning"] = "Exclusive"
    time_slicing: TimeSlicing | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Sharing:
        if self.time_slicing is not None and self.strategy != "TimeSlicing":
            raise ValueError("timeSlicing is only allowed with strategy TimeSlicing")
        return self


class ExampleConfig(_Strict):
    """Opaque device configuration of the ``example`` plugin (the object's ``parameters``,
    ``apiVersion: drakit.example.com/v1alpha1``, ``kind: ExampleDeviceConfig``)."""

    sharing: Sharing | None = None


# -- inventory file ----------------------------------------------------------------------


class NodeSpec(_Strict):
    """A device node: ``path`` in the container, ``host_path`` on the host (default: same)."""

    path: str
    host_path: str | None = None


class _DeviceCommon(_Strict):
    attributes: dict[str, Any] = Field(default_factory=dict)
    capacity: dict[str, Any] = Field(default_factory=dict)
    device_nodes: list[str | NodeSpec] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)


class DeviceSpec(_DeviceCommon):
    """A plain device."""

    name: str
    allow_multiple_allocations: bool | None = None
    taints: list[DeviceTaint] | None = None
    node_allocatable_resources: dict[str, NodeAllocatableResource] | None = None


class PartitionSpec(_Strict):
    """A partition profile: ``count`` partitions, each consuming ``counters``."""

    profile: str
    count: int = Field(default=1, ge=1, le=64)
    counters: dict[str, str | int]
    attributes: dict[str, Any] = Field(default_factory=dict)
    capacity: dict[str, Any] | None = None
    compatibility_groups: list[str] | None = None


class PartitionableSpec(_DeviceCommon):
    """A physical device with a counter set and partitions that consume from it."""

    name: str
    counters: dict[str, str | int]
    whole: bool = True
    partitions: list[PartitionSpec] = Field(default_factory=list)


class GenerateSpec(_DeviceCommon):
    """``count`` devices ``<prefix>-<start>`` … with attributes ``index`` and ``uuid``."""

    count: int = Field(ge=0, le=MAX_GENERATED)
    prefix: str = "fake"
    start: int = Field(default=0, ge=0)


class Inventory(_Strict):
    """The whole example inventory (file content or inline options)."""

    pool: str | None = None
    devices: list[DeviceSpec] = Field(default_factory=list)
    partitionable: list[PartitionableSpec] = Field(default_factory=list)
    generate: GenerateSpec | None = None
    partition_type_attribute: bool | None = None
    skip_node_operations: list[str] | None = None


class ExampleOptions(Inventory):
    """Options of the ``example`` plugin: an inventory inline, plus an optional ``file``."""

    file: str | None = None


def _values(counters: dict[str, Counter]) -> dict[str, str]:
    return {k: c.value for k, c in counters.items()}


def load_inventory(path: Path) -> Inventory:
    """Read and validate an inventory YAML file. ``ValueError`` names the file and field."""
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ValueError(f"example inventory {path}: {e}") from None
    try:
        return Inventory.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"]) or "(root)"
        raise ValueError(f"example inventory {path}: {loc}: {err['msg']}") from None


# -- the plugin --------------------------------------------------------------------------


class ExampleDiscovery(DiscoveryPlugin):
    """Fake devices from YAML (see the module docstring for the file format)."""

    name: ClassVar[str] = "example"
    subsystems: ClassVar[tuple[str, ...]] = ()
    config_model: ClassVar[type[BaseModel] | None] = ExampleConfig
    config_api_version: ClassVar[str | None] = "drakit.example.com/v1alpha1"
    config_kind: ClassVar[str | None] = "ExampleDeviceConfig"
    # prepare computes env and device nodes from the device and its config; nothing on the
    # node changes, so a claim is recorded in one checkpoint write
    prepare_changes_node: ClassVar[bool] = False

    def __init__(self, context: DiscoveryContext) -> None:
        super().__init__(context)
        self.options: ExampleOptions = parse_options(ExampleOptions, self.name, context.options)
        inline = self.options.devices or self.options.partitionable or self.options.generate
        self.file: Path | None = None
        if self.options.file:
            self.file = Path(self.options.file)
        elif not inline:
            self.file = DEMO_FILE
        self._mtime: float | None = None
        self._from_file = Inventory()
        if self.file is not None:
            self._from_file = load_inventory(self.file)
            self._mtime = self._stat()
        self._nodes: dict[str, list[DeviceNode]] = {}
        self._key_names: dict[str, str] = {}

    def _stat(self) -> float | None:
        try:
            return os.stat(self.file).st_mtime if self.file else None
        except OSError:
            return None

    def _inventory(self) -> Inventory:
        if self.file is not None and self._stat() != self._mtime:
            try:
                self._from_file = load_inventory(self.file)
                self._mtime = self._stat()
            except ValueError as e:
                _log.error("%s; keeping the previous inventory", e)
        o = self.options
        f = self._from_file
        return Inventory(
            pool=o.pool or f.pool,
            devices=[*f.devices, *o.devices],
            partitionable=[*f.partitionable, *o.partitionable],
            generate=o.generate or f.generate,
            partition_type_attribute=o.partition_type_attribute
            if o.partition_type_attribute is not None else f.partition_type_attribute,
            skip_node_operations=o.skip_node_operations or f.skip_node_operations,
        )

    def discover(self) -> list[Pool]:
        """One pool with the declared, partitionable and generated devices and the counter
        sets of the partitionable ones. The file is re-read when it changed; a file that no
        longer validates is logged and the previous content kept."""
        inv = self._inventory()
        nodes: dict[str, list[DeviceNode]] = {}
        devices: list[Device] = []
        counter_sets: list[CounterSet] = []
        for spec in inv.devices:
            self._guard(spec.name, lambda s=spec: devices.append(self._plain(s, nodes)))
        typed = inv.partition_type_attribute is True
        for pspec in inv.partitionable:
            self._guard(pspec.name, lambda s=pspec: self._partitionable(
                s, nodes, devices, counter_sets, typed))
        if inv.generate is not None:
            self._guard(inv.generate.prefix,
                        lambda g=inv.generate: self._generate(g, nodes, devices))
        seen: set[str] = set()
        unique: list[Device] = []
        for d in devices:
            if d.name in seen:
                _log.warning("example: duplicate device name %s; later one left out", d.name)
                continue
            seen.add(d.name)
            unique.append(d)
        self._nodes = nodes
        pool = inv.pool or self.context.default_pool
        return [Pool(name=pool, devices=unique, counter_sets=counter_sets,
                     partition_type_attribute=f"{self.context.driver_name}/profile"
                     if typed else None,
                     skip_node_operations=inv.skip_node_operations)]

    @staticmethod
    def _guard(what: str, fn: Any) -> None:
        try:
            fn()
        except Exception:  # one bad entry never stops the others
            _log.exception("example: skipping %s", what)

    # -- builders --------------------------------------------------------------------------

    @staticmethod
    def _name(name: str) -> str:
        label = dns_label(name)
        if label != name:
            _log.warning("example: device name \"%s\" is not a DNS label; using %s", name, label)
        return label

    def _keys(self, values: dict[str, Any], device: str, what: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        names = self._key_names  # key → qualified name (the same for every device)
        for key, value in values.items():
            q = names.get(key) if type(key) is str else None
            if q is None:
                q = qualified_name(str(key))
                if type(key) is str:
                    names[key] = q
            if q != key:
                _log.warning("example: device %s: %s key \"%s\" is not a qualified name; using %s",
                             device, what, key, q)
            out[q] = value
        return out

    def _common(self, spec: _DeviceCommon, name: str, nodes: dict[str, list[DeviceNode]],
                extra_attrs: dict[str, Any] | None = None,
                capacity: dict[str, Any] | None = None) -> dict[str, Any]:
        dev_nodes = [DeviceNode(path=n) if isinstance(n, str)
                     else DeviceNode(path=n.path, host_path=n.host_path) for n in spec.device_nodes]
        if dev_nodes:
            nodes[name] = dev_nodes
        attrs = {**spec.attributes, **(extra_attrs or {})}
        # plain values, dicts or models: Device wraps them (DeviceAttribute.of,
        # DeviceCapacity.of) and validates them
        return {
            "name": name,
            "attributes": self._keys(attrs, name, "attribute"),
            "capacity": self._keys(spec.capacity if capacity is None else capacity,
                                   name, "capacity"),
            "device_nodes": [n.path for n in dev_nodes],
            "env": dict(spec.env),
        }

    def _plain(self, spec: DeviceSpec, nodes: dict[str, list[DeviceNode]]) -> Device:
        name = self._name(spec.name)
        extra = {"name": spec.name} if name != spec.name else None
        return Device(**self._common(spec, name, nodes, extra),
                      allow_multiple_allocations=spec.allow_multiple_allocations,
                      taints=spec.taints,
                      node_allocatable_resources=spec.node_allocatable_resources)

    def _partitionable(self, spec: PartitionableSpec, nodes: dict[str, list[DeviceNode]],
                       devices: list[Device], counter_sets: list[CounterSet],
                       typed: bool = False) -> None:
        """Add the counter set and devices of one physical device, all or nothing. ``typed``:
        the whole device carries ``profile: whole`` (the pool names ``profile`` as its
        partitionTypeAttribute, which every counter-consuming device must carry)."""
        name = self._name(spec.name)
        set_name = dns_label(f"{name}-counters")
        counters = {dns_label(k): Counter(value=str(v)) for k, v in spec.counters.items()}
        mine: list[Device] = []
        my_nodes: dict[str, list[DeviceNode]] = {}
        if spec.whole:
            mine.append(Device(
                **self._common(spec, name, my_nodes,
                               {"partition": False, **({"profile": "whole"} if typed else {})},
                               capacity=spec.capacity or _values(counters)),
                consumes_counters=[DeviceCounterConsumption(counter_set=set_name,
                                                            counters=counters)],
            ))
        for part in spec.partitions:
            profile = dns_label(part.profile)
            part_counters = {dns_label(k): Counter(value=str(v)) for k, v in part.counters.items()}
            unknown = sorted(set(part_counters) - set(counters))
            if unknown:
                raise ValueError(f"partition profile {part.profile!r} of {spec.name!r} "
                                 f"consumes unknown counters {unknown}")
            for i in range(part.count):
                pname = dns_label(f"{name}-{profile}-{i}")
                extra = {**part.attributes, "partition": True, "profile": part.profile,
                         "parentDevice": name}
                mine.append(Device(
                    **self._common(spec, pname, my_nodes, extra,
                                   capacity=part.capacity if part.capacity is not None
                                   else _values(part_counters)),
                    consumes_counters=[DeviceCounterConsumption(
                        counter_set=set_name, counters=part_counters,
                        compatibility_groups=part.compatibility_groups)],
                ))
        counter_sets.append(CounterSet(name=set_name, counters=counters))
        devices.extend(mine)
        nodes.update(my_nodes)

    def _generate(self, spec: GenerateSpec, nodes: dict[str, list[DeviceNode]],
                  devices: list[Device]) -> None:
        prefix = self._name(spec.prefix)
        node = self.context.node_name
        for i in range(spec.start, spec.start + spec.count):
            name = dns_label(f"{prefix}-{i}")
            extra = {"index": i, "uuid": device_uuid(f"{node}/{name}")}
            devices.append(Device(**self._common(spec, name, nodes, extra)))

    # -- prepare ---------------------------------------------------------------------------

    def prepare(self, request: DeviceRequest) -> PreparedDevice:
        """The default edits (env, device nodes) with declared host paths mapped, plus env
        from the opaque config (``DRAKIT_EXAMPLE_<DEVICE>_SHARING``/``_TIMESLICE``), the
        share (``_SHARE_ID``) and consumed capacity (``_CAPACITY_<NAME>``)."""
        base = super().prepare(request)
        device = request.device
        prefix = f"DRAKIT_EXAMPLE_{env_name(device.name)}"
        env = list(base.edits.env or [])
        cfg = request.config
        if isinstance(cfg, ExampleConfig) and cfg.sharing is not None:
            env.append(f"{prefix}_SHARING={cfg.sharing.strategy}")
            if cfg.sharing.time_slicing is not None:
                env.append(f"{prefix}_TIMESLICE={cfg.sharing.time_slicing.interval}")
        if request.share_id:
            env.append(f"{prefix}_SHARE_ID={request.share_id}")
        for cap, qty in sorted(request.consumed_capacity.items()):
            env.append(f"{prefix}_CAPACITY_{env_name(cap)}={qty}")
        dev_nodes = self._nodes.get(device.name) or base.edits.device_nodes
        return PreparedDevice(edits=ContainerEdits(env=env, device_nodes=dev_nodes or None))
