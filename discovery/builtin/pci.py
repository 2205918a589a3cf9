"""Built-in ``pci`` discovery: PCI functions from ``<sysfs>/bus/pci/devices``.

One device per PCI function, named from its address (``0000:00:03.0`` →
``pci-0000-00-03-0``): stable across reboots and hot-plug of other devices.

Attributes: ``vendor``, ``device``, ``subsystemVendor``, ``subsystemDevice`` (4 lower-case
hex digits, ``1af4``), ``class`` (6 hex digits, ``020000``), ``driver``, ``iommuGroup``
(int), ``numaNode`` (int), and the standard ``resource.kubernetes.io/pciBusID`` and
``resource.kubernetes.io/pcieRoot`` (left out with a warning for virtualised topologies).

Options (``discovery.pci``; unknown keys are errors): ``pool`` (str), ``vendors`` (list of
vendor ids, ``"0x1af4"`` or ``"1af4"``; default all), ``classes`` (list of class-code
prefixes in hex: ``"02"`` all network controllers, ``"0302"`` 3D controllers; default all),
``excludeBridges`` (bool, default true: class 06 host/PCI bridges are left out).
"""

from __future__ import annotations

import logging
import os
import re
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from drakit.discovery.builtin._common import PoolName, parse_options, put
from drakit.discovery.model import Device, DeviceAttribute, Pool
from drakit.discovery.names import NUMA_NODE, PCI_BUS_ID, PCIE_ROOT
from drakit.discovery.plugin import DiscoveryContext, DiscoveryPlugin
from drakit.discovery.sysfs import PCI_ADDRESS_RE, Sysfs

_log = logging.getLogger(__name__)

_GROUP_RE = re.compile(r"[0-9]{1,9}", re.ASCII)
"""An IOMMU group number as the kernel names its directory (``str.isdigit`` also accepts
``²``, which ``int`` refuses)."""


def _hex(value: str, digits: int, what: str) -> str:
    v = value.lower().removeprefix("0x")
    if not re.fullmatch(rf"[0-9a-f]{{1,{digits}}}", v):
        raise ValueError(f"{what} {value!r} is not a hex number of at most {digits} digits")
    return v


class PciOptions(BaseModel):
    """Options of the ``pci`` plugin (camelCase keys in the config file)."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    pool: PoolName | None = None
    vendors: list[str] = Field(default_factory=list)
    classes: list[str] = Field(default_factory=list)
    exclude_bridges: bool = True

    @field_validator("vendors")
    @classmethod
    def _vendors(cls, v: list[str]) -> list[str]:
        return [_hex(x, 4, "vendor id").zfill(4) for x in v]

    @field_validator("classes")
    @classmethod
    def _classes(cls, v: list[str]) -> list[str]:
        return [_hex(x, 6, "class prefix") for x in v]


def device_name(address: str) -> str:
    """The device name of PCI function ``address``: ``pci-`` and the address with ``:`` and
    ``.`` as ``-`` (``0000:3b:00.0`` → ``pci-0000-3b-00-0``), always a DNS label."""
    return "pci-" + re.sub(r"[:.]", "-", address.lower())


class PciDiscovery(DiscoveryPlugin):
    """PCI functions as devices (see the module docstring for names and attributes)."""

    name: ClassVar[str] = "pci"
    subsystems: ClassVar[tuple[str, ...]] = ("pci",)
    # the default prepare: container edits computed from the discovered device only
    prepare_changes_node: ClassVar[bool] = False

    def __init__(self, context: DiscoveryContext) -> None:
        super().__init__(context)
        self.options: PciOptions = parse_options(PciOptions, self.name, context.options)
        self.sysfs = Sysfs(context.sysfs_root, logger=_log)

    def discover(self) -> list[Pool]:
        """One pool (``pool`` option or the node name) with one device per PCI function that
        passes the filters."""
        devices: list[Device] = []
        for address in self.sysfs.list_dir("bus/pci/devices"):
            if not PCI_ADDRESS_RE.fullmatch(address):
                continue
            try:
                device = self._device(address)
            except Exception:  # one odd device never stops discovery
                _log.exception("pci: skipping device %s", address)
                continue
            if device is not None:
                devices.append(device)
        return [Pool(name=self.options.pool or self.context.default_pool, devices=devices)]

    def _device(self, address: str) -> Device | None:
        s = self.sysfs
        real = s.entry("bus/pci/devices", address)
        if real is None:
            return None

        def at(attr: str) -> str:
            return os.path.join(real, attr)

        vendor = s.read_hex(at("vendor"), 4)
        pci_class = s.read_hex(at("class"), 6)
        opts = self.options
        if opts.vendors and vendor not in opts.vendors:
            return None
        if opts.classes and not (pci_class and any(pci_class.startswith(c) for c in opts.classes)):
            return None
        if opts.exclude_bridges and pci_class is not None and pci_class.startswith("06"):
            return None
        name = device_name(address)
        group = s.link_name(at("iommu_group"))
        attrs: dict[str, DeviceAttribute] = {}
        for key, value in (
            ("vendor", vendor),
            ("device", s.read_hex(at("device"), 4)),
            ("subsystemVendor", s.read_hex(at("subsystem_vendor"), 4)),
            ("subsystemDevice", s.read_hex(at("subsystem_device"), 4)),
            ("class", pci_class),
            ("driver", s.link_name(at("driver"))),
            ("iommuGroup", int(group) if group and _GROUP_RE.fullmatch(group) else None),
            (NUMA_NODE, s.numa_node(real)),
            (PCI_BUS_ID, address),
            (PCIE_ROOT, s.pcie_root(address, real)),
        ):
            put(attrs, key, value, device=name, log=_log)
        return Device(name=name, attributes=attrs)
