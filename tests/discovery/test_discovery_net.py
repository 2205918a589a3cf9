"""Built-in net discovery over real /sys and synthetic trees; prepare over a real veth."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from drakit.cdi.names import canonical_cidr
from drakit.discovery import (
    PCI_BUS_ID,
    PCIE_ROOT,
    ClaimRef,
    DeviceRequest,
    DiscoveryContext,
    Pool,
    SysfsBuilder,
)
from drakit.discovery.builtin.net import NetDiscovery

Ctx = Callable[..., DiscoveryContext]


def by_ifname(pools: list[Pool]) -> dict[str, Any]:
    [pool] = pools
    return {d.attributes["interfaceName"].string: d for d in pool.devices}


def test_real_sysfs(make_ctx: Ctx, api_valid: Callable[[list[Pool]], None]) -> None:
    real = {p.name for p in Path("/sys/class/net").iterdir()} - {"lo"}
    if not real:
        pytest.skip("no network interfaces besides lo")
    pools = NetDiscovery(make_ctx()).discover()
    api_valid(pools)
    found = by_ifname(pools)
    assert "lo" not in found
    assert real <= set(found)  # veths of concurrent tests may come and go
    for ifname, dev in found.items():
        mac = Path(f"/sys/class/net/{ifname}/address").read_text().strip()
        if ifname in real:
            assert dev.attributes["macAddress"].string == mac.lower()
    if "eth0" in found and Path("/sys/class/net/eth0/device").exists():
        eth0 = found["eth0"].attributes
        assert eth0["virtual"].bool_ is False
        assert eth0[PCI_BUS_ID].string  # eth0 is virtio-net on PCI here
        assert eth0[PCIE_ROOT].string.startswith("pci")
    for ifb in ("ifb0", "ifb1"):
        if ifb in found:
            assert found[ifb].attributes["virtual"].bool_ is True
            assert PCI_BUS_ID not in found[ifb].attributes


def test_synthetic_tree(sysfs: SysfsBuilder, make_ctx: Ctx,
                        api_valid: Callable[[list[Pool]], None]) -> None:
    sysfs.numa_node(0)
    sysfs.numa_node(1)
    sysfs.pci_device("0000:3b:00.0", vendor=0x15B3, device=0x1017, numa_node=1,
                     driver="mlx5_core")
    sysfs.net_interface("ens1f0", mac="0C:42:A1:00:00:01", mtu=9000, pci="0000:3b:00.0")
    sysfs.pci_device("0000:00:03.0")
    sysfs.net_interface("eth0", pci="0000:00:03.0", via="virtio2", driver="virtio_net",
                        mac="02:fc:00:00:00:01")
    sysfs.net_interface("lo", mac="00:00:00:00:00:00", extra={"type": "772\n"})
    sysfs.net_interface("eth0.100", mac="02:fc:00:00:00:01")
    sysfs.net_interface("eth0_100", mac="02:fc:00:00:00:02")
    sysfs.net_interface("ETH1", mac="02:fc:00:00:00:03")
    sysfs.net_interface("eth1", mac="02:fc:00:00:00:04")
    pools = NetDiscovery(make_ctx(sysfs.root)).discover()
    api_valid(pools)
    found = by_ifname(pools)
    assert set(found) == {"ens1f0", "eth0", "eth0.100", "eth0_100", "ETH1", "eth1"}
    ens = found["ens1f0"]
    assert ens.name == "ens1f0"
    a = ens.attributes
    assert a["macAddress"].string == "0c:42:a1:00:00:01"
    assert a["mtu"].int_ == 9000
    assert a["driver"].string == "mlx5_core"
    assert a[PCI_BUS_ID].string == "0000:3b:00.0"
    assert a[PCIE_ROOT].string == "pci0000:3b"
    assert a["numaNode"].int_ == 1
    assert a["virtual"].bool_ is False
    assert found["eth0"].attributes["driver"].string == "virtio_net"
    assert found["eth0"].attributes[PCI_BUS_ID].string == "0000:00:03.0"
    assert "numaNode" not in found["eth0"].attributes
    names = {d.name for d in found.values()}
    assert len(names) == 6
    assert found["eth1"].name == "eth1"
    assert found["ETH1"].name != "eth1"
    assert found["eth0.100"].name != found["eth0_100"].name
    assert pools[0].name == "node-1"


def test_names_stable_across_removal(sysfs: SysfsBuilder, make_ctx: Ctx) -> None:
    for i, name in enumerate(["eth0", "eth0.100", "eth0_100", "ETH1", "eth1", "veth_x"]):
        sysfs.net_interface(name, mac=f"02:00:00:00:00:{i:02x}")
    plugin = NetDiscovery(make_ctx(sysfs.root))
    before = {k: d.name for k, d in by_ifname(plugin.discover()).items()}
    for gone in ("eth0", "eth1", "eth0_100"):
        sysfs.remove_net_interface(gone)
        after = {k: d.name for k, d in by_ifname(plugin.discover()).items()}
        assert gone not in after
        assert all(before[k] == v for k, v in after.items())


def test_mac_naming_and_filters(sysfs: SysfsBuilder, make_ctx: Ctx) -> None:
    sysfs.pci_device("0000:3b:00.0")
    sysfs.net_interface("ens1", mac="0c:42:a1:00:00:01", pci="0000:3b:00.0")
    sysfs.net_interface("veth0", mac="02:00:00:00:00:09")
    sysfs.net_interface("bond0", mac="02:00:00:00:00:09")  # shared MAC: falls back to name
    plugin = NetDiscovery(make_ctx(sysfs.root, naming="mac"))
    found = by_ifname(plugin.discover())
    assert found["ens1"].name == "mac-0c42a1000001"
    assert found["veth0"].name == "veth0"
    only_phys = by_ifname(NetDiscovery(make_ctx(sysfs.root, includeVirtual=False)).discover())
    assert set(only_phys) == {"ens1"}
    filtered = by_ifname(NetDiscovery(make_ctx(sysfs.root, include=["v*", "b*"],
                                               exclude=["bond*"])).discover())
    assert set(filtered) == {"veth0"}
    other_pool = NetDiscovery(make_ctx(sysfs.root, pool="nics")).discover()
    assert other_pool[0].name == "nics"


def test_bad_options_name_the_field(make_ctx: Ctx) -> None:
    with pytest.raises(ValueError, match=r"discovery\.net\.naming"):
        NetDiscovery(make_ctx(naming="serial"))
    with pytest.raises(ValueError, match=r"discovery\.net\.bogus"):
        NetDiscovery(make_ctx(bogus=1))


def test_odd_interface_files_do_not_stop_discovery(sysfs: SysfsBuilder, make_ctx: Ctx) -> None:
    sysfs.net_interface("good0")
    bad = sysfs.net_interface("bad0")
    (bad / "address").write_bytes(b"\xff\x00" * 10)
    (bad / "mtu").write_bytes(b"9" * 100_000)
    (bad / "type").unlink()
    os.symlink("../../nowhere", sysfs.root / "class/net/dangling0")
    found = by_ifname(NetDiscovery(make_ctx(sysfs.root)).discover())
    assert set(found) == {"good0", "bad0"}
    assert "macAddress" not in found["bad0"].attributes
    assert "mtu" not in found["bad0"].attributes


@pytest.mark.parametrize(("addr", "plen", "expected"), [
    ("192.0.2.5", 24, "192.0.2.5/24"),
    ("2001:DB8:0:0::1", 64, "2001:db8::1/64"),
    ("::ffff:192.0.2.1", 120, "192.0.2.1/24"),
    ("fe80::1", 64, "fe80::1/64"),
])
def test_canonical_cidr(addr: str, plen: int, expected: str) -> None:
    assert canonical_cidr(addr, plen) == expected


def test_prepare_synthetic_device(sysfs: SysfsBuilder, make_ctx: Ctx) -> None:
    sysfs.net_interface("veth9", mac="02:00:00:00:00:09")
    plugin = NetDiscovery(make_ctx(sysfs.root, netDevices=True))
    plugin.addresses = lambda ifname: ["10.0.0.1/8"]  # type: ignore[method-assign]
    [dev] = plugin.discover()[0].devices
    req = DeviceRequest(claim=ClaimRef(namespace="ns", name="c", uid="u"), request="nic",
                        pool="node-1", device=dev)
    out = plugin.prepare(req)
    assert "DRAKIT_NET_IFNAME_VETH9=veth9" in (out.edits.env or [])
    assert out.edits.net_devices and out.edits.net_devices[0].host_interface_name == "veth9"
    nd = out.status.network_data if out.status else None
    assert nd is not None and nd.interface_name == "veth9" and nd.ips == ["10.0.0.1/8"]
    assert nd.hardware_address == "02:00:00:00:00:09"
    sysfs.remove_net_interface("veth9")
    with pytest.raises(RuntimeError, match="no longer exists"):
        plugin.prepare(req)


@pytest.mark.root
def test_prepare_reports_network_data_of_real_veth(veth: Any, make_ctx: Ctx) -> None:
    a, _b = veth.create()
    veth.ip("addr", "add", "10.213.7.5/24", "dev", a)
    veth.ip("addr", "add", "fd00:d7a::5/64", "dev", a, "nodad")
    veth.ip("link", "set", a, "up")
    plugin = NetDiscovery(make_ctx(include=[a]))
    [dev] = plugin.discover()[0].devices
    assert dev.attributes["interfaceName"].string == a
    assert dev.attributes["virtual"].bool_ is True
    out = plugin.prepare(DeviceRequest(claim=ClaimRef(namespace="ns", name="c", uid="u"),
                                       request="nic", pool="node-1", device=dev))
    assert out.edits.net_devices is None  # CDI netDevices are opt-in
    env = out.edits.env or []
    assert any(e.endswith(f"={a}") and e.startswith("DRAKIT_NET_IFNAME_") for e in env)
    nd = out.status.network_data if out.status else None
    assert nd is not None
    assert nd.interface_name == a
    mac = Path(f"/sys/class/net/{a}/address").read_text().strip()
    assert nd.hardware_address == mac
    assert "10.213.7.5/24" in nd.ips
    assert "fd00:d7a::5/64" in nd.ips
    for ip in nd.ips:  # canonical form, as the API server demands
        iface = ipaddress.ip_interface(ip)
        assert f"{iface.ip}/{iface.network.prefixlen}" == ip
