"""SysfsBuilder at scale: 4,096 devices build and discover (sizes, not timings)."""

from __future__ import annotations

from collections.abc import Callable

from drakit.discovery import DiscoveryContext, Pool, SysfsBuilder
from drakit.discovery.builtin.net import NetDiscovery
from drakit.discovery.builtin.pci import PciDiscovery

Ctx = Callable[..., DiscoveryContext]


def test_4096_devices(sysfs: SysfsBuilder, make_ctx: Ctx,
                      api_valid: Callable[[list[Pool]], None]) -> None:
    for node in range(4):
        sysfs.numa_node(node, f"{node * 8}-{node * 8 + 7}")
    for i in range(2048):
        bus, fn = divmod(i, 8)
        address = f"0000:{bus // 32 + 1:02x}:{bus % 32:02x}.{fn}"
        sysfs.pci_device(address, vendor=0x15B3, device=0x101E, numa_node=bus % 4,
                         driver="mlx5_core")
        sysfs.net_interface(f"ens{i}", mac=f"0c:42:a1:00:{i >> 8:02x}:{i & 0xFF:02x}",
                            pci=address)
    pci = PciDiscovery(make_ctx(sysfs.root)).discover()
    net = NetDiscovery(make_ctx(sysfs.root)).discover()
    api_valid(pci)
    api_valid(net)
    assert len(pci[0].devices) == 2048
    assert len(net[0].devices) == 2048
    numa = {d.attributes["numaNode"].int_ for d in net[0].devices}
    assert numa == {0, 1, 2, 3}
