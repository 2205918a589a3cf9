"""Every device every built-in produces is publishable by name and key rules, on this
machine and on an awkward synthetic tree, and the built-ins never collide in the node's
pool."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from drakit.discovery import DiscoveryContext, Pool, SysfsBuilder, load_plugins

Ctx = Callable[..., DiscoveryContext]
BUILTINS = ["net", "pci", "example"]


def test_real_sysfs_all_builtins(make_ctx: Ctx, api_valid: Callable[[list[Pool]], None]) -> None:
    plugins = load_plugins(BUILTINS, lambda name: make_ctx())
    pools = [pool for p in plugins for pool in p.discover()]
    for pool in pools:
        api_valid([pool])
    assert {p.name for p in pools} == {"node-1"}
    # one node-local pool shared by all built-ins: names must not collide across them
    api_valid([Pool(name="node-1", devices=[d for p in pools for d in p.devices],
                    counter_sets=[c for p in pools for c in p.counter_sets])])


@pytest.mark.parametrize("ifname", ["eth0.100", "eth0_100", "ETH1", "eth1", "Wi-Fi_Adapter",
                                    "x" * 15, "br-0123456789ab", "veth@if3"])
def test_awkward_synthetic_tree(sysfs: SysfsBuilder, make_ctx: Ctx, ifname: str,
                                api_valid: Callable[[list[Pool]], None]) -> None:
    sysfs.pci_device("10000:00:00.0", host_bridge="pci10000:00", pci_class=0x020000,
                     extra={"vendor": "0x\n", "device": "\xff\n"})
    sysfs.pci_device("0000:00:1f.7", pci_class=0x010802, driver="x" * 100)
    sysfs.net_interface(ifname, pci="0000:00:1f.7", extra={"mtu": "-1\n"})
    sysfs.net_interface("other", mac="zz:zz")
    plugins = load_plugins(BUILTINS, lambda name: make_ctx(sysfs.root))
    pools = [pool for p in plugins for pool in p.discover()]
    api_valid([Pool(name="node-1", devices=[d for p in pools for d in p.devices],
                    counter_sets=[c for p in pools for c in p.counter_sets])])
    net = next(p for p in pools if any(d.attributes.get("interfaceName") for d in p.devices))
    assert ifname in {d.attributes["interfaceName"].string for d in net.devices}
