"""Built-in ``net`` discovery: the node's network interfaces from ``<sysfs>/class/net``.

One device per interface (``lo`` and loopback-type links are skipped). Device names come
from the interface name (``naming: name``, default) or the MAC address (``naming: mac``)
through :func:`drakit.discovery.names.dns_labels`, so they depend on the interface's own identity
only and removing one interface never renames another. (With ``naming: mac`` an interface
whose MAC is missing, all-zero or shared with another interface — VLANs, bonds — is named
from its interface name instead.)

Attributes (keys without a domain are in the driver's domain): ``interfaceName``,
``macAddress``, ``mtu`` (int), ``driver``, ``virtual`` (bool), ``numaNode`` (int), and the
standard ``resource.kubernetes.io/pciBusID`` / ``resource.kubernetes.io/pcieRoot`` where the
interface sits on PCI.

Prepare reports ``status.devices[].networkData`` (interfaceName, hardwareAddress, and the
interface's current addresses as canonical CIDRs, read over netlink with pyroute2) and puts
``DRAKIT_NET_IFNAME_<DEVICE>=<ifname>`` into the container's environment. Moving the
interface into the container (CDI ``netDevices``) is opt-in with ``netDevices: true``: it
needs CDI 1.1.0, which podman 4.3 rejects.

Options (``discovery.net`` in the config file; unknown keys are errors):
``pool`` (str, default the node name), ``include`` / ``exclude`` (shell patterns on the
interface name, default all / none), ``includeVirtual`` (bool, default true), ``naming``
(``name`` | ``mac``), ``netDevices`` (bool, default false).
"""

from __future__ import annotations

import fnmatch
import logging
import os
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from drakit.cdi.names import canonical_cidr
from drakit.cdi.spec import ContainerEdits, NetDevice
from drakit.discovery.builtin._common import PoolName, parse_options, put
from drakit.discovery.model import MAX_IPS, Device, DeviceAttribute, Pool
from drakit.discovery.names import NUMA_NODE, PCI_BUS_ID, PCIE_ROOT, dns_labels
from drakit.discovery.plugin import (
    DeviceRequest,
    DeviceStatus,
    DiscoveryContext,
    DiscoveryPlugin,
    NetworkData,
    PreparedDevice,
    env_name,
)
from drakit.discovery.sysfs import Sysfs

ARPHRD_LOOPBACK = 772
"""``type`` of a loopback link (linux/if_arp.h)."""

_log = logging.getLogger(__name__)


class NetOptions(BaseModel):
    """Options of the ``net`` plugin (camelCase keys in the config file)."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    pool: PoolName | None = None
    include: list[str] = Field(default_factory=lambda: ["*"])
    exclude: list[str] = Field(default_factory=list)
    include_virtual: bool = True
    naming: Literal["name", "mac"] = "name"
    net_devices: bool = False


def interface_addresses(ifname: str) -> list[str]:
    """The current addresses of interface ``ifname`` in this network namespace as canonical
    CIDRs, in kernel order, duplicates dropped. Empty when the interface does not exist.
    ``OSError`` when netlink is unavailable."""
    from pyroute2 import IPRoute  # imported lazily: ~0.2 s, only needed at prepare

    out: list[str] = []
    with IPRoute() as ipr:
        indexes = ipr.link_lookup(ifname=ifname)
        if not indexes:
            return []
        for msg in ipr.get_addr(index=indexes[0]):
            addr = msg.get_attr("IFA_ADDRESS") or msg.get_attr("IFA_LOCAL")
            if not addr:
                continue
            try:
                cidr = canonical_cidr(addr, int(msg["prefixlen"]))
            except ValueError:
                continue
            if cidr not in out:
                out.append(cidr)
    return out


class NetDiscovery(DiscoveryPlugin):
    """Network interfaces as devices (see the module docstring for names and attributes)."""

    name: ClassVar[str] = "net"
    subsystems: ClassVar[tuple[str, ...]] = ("net",)
    # prepare reads sysfs and netlink and names the interface in the CDI edits; moving it
    # into the pod is the runtime's job (CDI netDevices), so nothing here needs a rollback
    prepare_changes_node: ClassVar[bool] = False

    def __init__(self, context: DiscoveryContext) -> None:
        super().__init__(context)
        self.options: NetOptions = parse_options(NetOptions, self.name, context.options)
        self.sysfs = Sysfs(context.sysfs_root, logger=_log)

    # -- discovery -------------------------------------------------------------------------

    def _wanted(self, ifname: str) -> bool:
        if ifname == "lo":
            return False
        if not any(fnmatch.fnmatchcase(ifname, p) for p in self.options.include):
            return False
        return not any(fnmatch.fnmatchcase(ifname, p) for p in self.options.exclude)

    def _read(self, ifname: str) -> dict[str, Any] | None:
        s = self.sysfs
        real = s.entry("class/net", ifname)
        if real is None:
            return None
        if s.read_int(os.path.join(real, "type")) == ARPHRD_LOOPBACK:
            return None
        device = s.follow(real, "device")
        virtual = device is None or s.relative_parts(real)[:2] == ("devices", "virtual")
        if virtual and not self.options.include_virtual:
            return None
        mac = s.read_attr(os.path.join(real, "address"))
        info: dict[str, Any] = {
            "ifname": ifname,
            "mac": mac.lower() if mac else None,
            "mtu": s.read_int(os.path.join(real, "mtu")),
            "driver": s.link_name(os.path.join(device, "driver")) if device else None,
            "virtual": virtual,
            "pci": None,
            "pcie_root": None,
            "numa": None,
        }
        if device is not None and not virtual:
            pci = s.pci_address_of(device)
            if pci is not None:
                pci_dir = device  # the PCI function's directory: an ancestor (or itself)
                while os.path.basename(pci_dir) != pci:
                    pci_dir = os.path.dirname(pci_dir)
                info["pci"] = pci
                info["pcie_root"] = s.pcie_root(pci, pci_dir)
                info["numa"] = s.numa_node(pci_dir)
        return info

    def _identity(self, info: dict[str, Any], mac_count: dict[str, int]) -> str:
        mac = info["mac"]
        if (self.options.naming == "mac" and mac and mac_count.get(mac) == 1
                and mac.strip("0:")):
            return "mac-" + mac.replace(":", "")
        return str(info["ifname"])

    def discover(self) -> list[Pool]:
        """One pool (``pool`` option or the node name) with one device per interface."""
        infos: list[dict[str, Any]] = []
        for ifname in self.sysfs.list_dir("class/net"):
            if not self._wanted(ifname):
                continue
            try:
                info = self._read(ifname)
            except Exception:  # one odd interface never stops discovery
                _log.exception("net: skipping interface %s", ifname)
                continue
            if info is not None:
                infos.append(info)
        mac_count: dict[str, int] = {}
        for info in infos:
            if info["mac"]:
                mac_count[info["mac"]] = mac_count.get(info["mac"], 0) + 1
        identities = {id(i): self._identity(i, mac_count) for i in infos}
        labels = dns_labels(identities.values())
        devices = [self._device(labels[identities[id(i)]], i) for i in infos]
        devices.sort(key=lambda d: d.name)
        return [Pool(name=self.options.pool or self.context.default_pool, devices=devices)]

    def _device(self, name: str, info: dict[str, Any]) -> Device:
        attrs: dict[str, DeviceAttribute] = {}
        for key, value in (
            ("interfaceName", info["ifname"]),
            ("macAddress", info["mac"]),
            ("mtu", info["mtu"]),
            ("driver", info["driver"]),
            ("virtual", info["virtual"]),
            (PCI_BUS_ID, info["pci"]),
            (PCIE_ROOT, info["pcie_root"]),
            (NUMA_NODE, info["numa"]),
        ):
            put(attrs, key, value, device=name, log=_log)
        return Device(name=name, attributes=attrs)

    # -- prepare ---------------------------------------------------------------------------

    def addresses(self, ifname: str) -> list[str]:
        """Current addresses of ``ifname`` (canonical CIDRs, at most 16); a netlink failure
        (or pyroute2 missing) is logged and gives an empty list. Override for another
        source."""
        try:
            ips = interface_addresses(ifname)
        except (OSError, ImportError) as e:
            _log.warning("net: cannot read addresses of %s over netlink: %s", ifname, e)
            return []
        if len(ips) > MAX_IPS:
            _log.warning("net: %s has %d addresses; reporting the first %d",
                         ifname, len(ips), MAX_IPS)
        return ips[:MAX_IPS]

    def prepare(self, request: DeviceRequest) -> PreparedDevice:
        """Env var naming the interface (+ CDI netDevices when enabled) and networkData.

        Raises ``RuntimeError`` when the device has no ``interfaceName`` attribute or the
        interface no longer exists on the node."""
        device = request.device
        attr = device.attributes.get("interfaceName")
        ifname = attr.string if attr is not None else None
        if not ifname:
            raise RuntimeError(f"net device {device.name}: no interfaceName attribute")
        real = self.sysfs.entry("class/net", ifname)
        if real is None:
            raise RuntimeError(f"net device {device.name}: interface {ifname} no longer exists")
        mac = self.sysfs.read_attr(os.path.join(real, "address"))
        prepared = super().prepare(request)
        env = [*(prepared.edits.env or []), f"DRAKIT_NET_IFNAME_{env_name(device.name)}={ifname}"]
        edits = ContainerEdits(
            env=env,
            device_nodes=prepared.edits.device_nodes,
            net_devices=[NetDevice(host_interface_name=ifname, name=ifname)]
            if self.options.net_devices else None,
        )
        network = NetworkData(interface_name=ifname, hardware_address=mac.lower() if mac else None,
                              ips=self.addresses(ifname))
        return PreparedDevice(edits=edits, status=DeviceStatus(network_data=network),
                              state={"interfaceName": ifname})
