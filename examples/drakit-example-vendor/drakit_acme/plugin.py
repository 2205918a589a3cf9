"""The ACME accelerator discovery plugin: everything a vendor writes for drakit.

ACME accelerators are PCI functions with vendor id ``0x1ace``. Each exposes its serial
number (``serial``), firmware version (``fw_version``) and memory size in bytes
(``mem_bytes``) as sysfs attributes of the PCI device. The plugin:

- finds them under the sysfs root drakit passes in (a synthetic tree in tests);
- names each device from its serial (stable identity), or its PCI address without one;
- publishes model, serial, firmware version, memory capacity, NUMA node and the standard
  PCI attributes;
- prepares a device by mapping its device node and setting ``ACME_VISIBLE_DEVICES`` and,
  from the claim's opaque config (:class:`AcmeConfig`), ``ACME_POWER_LIMIT_WATTS``.

Options (``discovery.acme`` in drakit's config file): ``hostDeviceNode`` (default
``/dev/null``: the host node every device maps to, for demos).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from drakit.cdi.spec import ContainerEdits, DeviceNode
from drakit.discovery import (
    NUMA_NODE,
    PCI_BUS_ID,
    PCIE_ROOT,
    Device,
    DeviceAttribute,
    DeviceCapacity,
    DeviceRequest,
    DiscoveryContext,
    DiscoveryPlugin,
    Pool,
    PreparedDevice,
    Sysfs,
    dns_label,
    version,
)

ACME_VENDOR = "1ace"
MODELS = {"0001": "acme-a1", "0002": "acme-a2"}
SEMVER = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)")

log = logging.getLogger(__name__)


class AcmeConfig(BaseModel):
    """Opaque config (``apiVersion: acme.example.com/v1``, ``kind: AcmeConfig``)."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    power_limit_watts: int | None = Field(default=None, ge=50, le=300)  # powerLimitWatts
    mode: Literal["performance", "balanced"] = "balanced"


class AcmeDiscovery(DiscoveryPlugin):
    """ACME accelerators found in sysfs."""

    name: ClassVar[str] = "acme"
    subsystems: ClassVar[tuple[str, ...]] = ("pci",)
    config_model: ClassVar[type[BaseModel] | None] = AcmeConfig
    config_api_version: ClassVar[str | None] = "acme.example.com/v1"
    config_kind: ClassVar[str | None] = "AcmeConfig"

    def __init__(self, context: DiscoveryContext) -> None:
        super().__init__(context)
        self.sysfs = Sysfs(context.sysfs_root)
        self.host_node = str(context.options.get("hostDeviceNode", "/dev/null"))

    def discover(self) -> list[Pool]:
        devices = []
        for address in self.sysfs.list_dir("bus/pci/devices"):
            base = Path("bus/pci/devices") / address
            if self.sysfs.read_hex(base / "vendor", 4) != ACME_VENDOR:
                continue
            serial = self.sysfs.read_attr(base / "serial")
            # stable identity: the serial (case-insensitive), else the PCI address;
            # dns_label adds a hash suffix to anything that is still not a DNS label
            ident = serial.lower() if serial else re.sub(r"[:.]", "-", address)
            name = dns_label(f"acme-{ident}")
            attrs: dict[str, object] = {
                "model": MODELS.get(self.sysfs.read_hex(base / "device", 4) or "", "unknown"),
                PCI_BUS_ID: address,
                "serial": serial,
                NUMA_NODE: self.sysfs.numa_node(base),
                PCIE_ROOT: self.sysfs.pcie_root(address),
            }
            fw = self.sysfs.read_attr(base / "fw_version")
            if fw and SEMVER.fullmatch(fw):
                attrs["firmwareVersion"] = version(fw)
            mem = self.sysfs.read_int(base / "mem_bytes")
            devices.append(Device(
                name=name,
                attributes={k: DeviceAttribute.of(v) for k, v in attrs.items() if v is not None},
                capacity={"memory": DeviceCapacity.of(mem)} if mem else {},
                env={"ACME_VISIBLE_DEVICES": serial or address},
            ))
        return [Pool(name=self.context.default_pool, devices=devices)]

    def prepare(self, request: DeviceRequest) -> PreparedDevice:
        device = request.device
        env = [f"{k}={v}" for k, v in sorted(device.env.items())]
        if isinstance(request.config, AcmeConfig):
            if request.config.power_limit_watts is not None:
                env.append(f"ACME_POWER_LIMIT_WATTS={request.config.power_limit_watts}")
            env.append(f"ACME_MODE={request.config.mode}")
        node = DeviceNode(path=f"/dev/{device.name}", host_path=self.host_node)
        return PreparedDevice(edits=ContainerEdits(env=env, device_nodes=[node]))
