"""Built-in pci discovery over real /sys and synthetic trees."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from drakit.discovery import PCI_BUS_ID, PCIE_ROOT, DiscoveryContext, Pool, SysfsBuilder
from drakit.discovery.builtin.pci import PciDiscovery, device_name

Ctx = Callable[..., DiscoveryContext]


def by_address(pools: list[Pool]) -> dict[str, Any]:
    [pool] = pools
    return {d.attributes[PCI_BUS_ID].string: d for d in pool.devices}


def test_real_sysfs(make_ctx: Ctx, api_valid: Callable[[list[Pool]], None]) -> None:
    root = Path("/sys/bus/pci/devices")
    real = sorted(p.name for p in root.iterdir()) if root.exists() else []
    if not real:
        pytest.skip("no PCI devices visible")
    pools = PciDiscovery(make_ctx(excludeBridges=False)).discover()
    api_valid(pools)
    found = by_address(pools)
    assert sorted(found) == real
    for address, dev in found.items():
        assert dev.name == device_name(address)
        vendor = (root / address / "vendor").read_text().strip().removeprefix("0x")
        assert dev.attributes["vendor"].string == vendor
    virtio = [d for d in found.values() if d.attributes["vendor"].string == "1af4"]
    if virtio:  # this machine: virtio devices bound to virtio-pci
        assert any(d.attributes.get("driver") and
                   d.attributes["driver"].string == "virtio-pci" for d in virtio)
        assert all(d.attributes[PCIE_ROOT].string == "pci0000:00" for d in virtio
                   if d.attributes[PCI_BUS_ID].string.startswith("0000:00:"))
    # bridges are left out by default
    default = by_address(PciDiscovery(make_ctx()).discover())
    assert all(not d.attributes["class"].string.startswith("06") for d in default.values())


def test_synthetic_tree(sysfs: SysfsBuilder, make_ctx: Ctx,
                        api_valid: Callable[[list[Pool]], None]) -> None:
    sysfs.pci_device("0000:00:00.0", vendor=0x8086, pci_class=0x060000)
    sysfs.pci_device("0000:3a:00.0", vendor=0x8086, pci_class=0x060400)
    sysfs.pci_device("0000:3b:00.0", vendor=0x10DE, device=0x2330, pci_class=0x030200,
                     numa_node=0, driver="nvidia", iommu_group=17, parent="0000:3a:00.0")
    sysfs.pci_device("0001:00:02.0", vendor=0x15B3, device=0x1017, pci_class=0x020000,
                     driver="mlx5_core")
    sysfs.pci_device("7870:00:00.0", vendor=0x1414, pci_class=0x020000,
                     host_bridge="VMBUS:01/f8b3/pci7870:00")
    pools = PciDiscovery(make_ctx(sysfs.root)).discover()
    api_valid(pools)
    found = by_address(pools)
    assert set(found) == {"0000:3b:00.0", "0001:00:02.0", "7870:00:00.0"}
    gpu = found["0000:3b:00.0"]
    assert gpu.name == "pci-0000-3b-00-0"
    a = gpu.attributes
    assert (a["vendor"].string, a["device"].string, a["class"].string) == ("10de", "2330",
                                                                           "030200")
    assert a["driver"].string == "nvidia"
    assert a["iommuGroup"].int_ == 17
    assert a["numaNode"].int_ == 0
    assert a[PCIE_ROOT].string == "pci0000:3a"
    assert found["0001:00:02.0"].attributes[PCIE_ROOT].string == "pci0001:00"
    assert PCIE_ROOT not in found["7870:00:00.0"].attributes  # virtualised: left out
    assert "numaNode" not in found["0001:00:02.0"].attributes


def test_filters(sysfs: SysfsBuilder, make_ctx: Ctx) -> None:
    sysfs.pci_device("0000:01:00.0", vendor=0x10DE, pci_class=0x030200)
    sysfs.pci_device("0000:02:00.0", vendor=0x10DE, pci_class=0x040300)
    sysfs.pci_device("0000:03:00.0", vendor=0x15B3, pci_class=0x020000)
    def names(**opts: Any) -> set[str]:
        return {d.name for d in PciDiscovery(make_ctx(sysfs.root, **opts)).discover()[0].devices}
    assert names(vendors=["0x10de"]) == {"pci-0000-01-00-0", "pci-0000-02-00-0"}
    assert names(vendors=["10DE"], classes=["03"]) == {"pci-0000-01-00-0"}
    assert names(classes=["02", "0403"]) == {"pci-0000-02-00-0", "pci-0000-03-00-0"}
    with pytest.raises(ValueError, match=r"discovery\.pci\.vendors"):
        PciDiscovery(make_ctx(vendors=["nvidia"]))


def test_garbage_attributes_and_removal(sysfs: SysfsBuilder, make_ctx: Ctx) -> None:
    sysfs.pci_device("0000:01:00.0", extra={"vendor": "\x00\x00garbage", "class": ""})
    sysfs.pci_device("0000:02:00.0", extra={"numa_node": "x" * 10_000})
    sysfs.pci_device("0000:03:00.0")
    sysfs.write("bus/pci/devices/not-an-address", "x")
    plugin = PciDiscovery(make_ctx(sysfs.root))
    found = by_address(plugin.discover())
    assert set(found) == {"0000:01:00.0", "0000:02:00.0", "0000:03:00.0"}
    assert "vendor" not in found["0000:01:00.0"].attributes
    assert "numaNode" not in found["0000:02:00.0"].attributes
    sysfs.remove_pci_device("0000:02:00.0")
    after = by_address(plugin.discover())
    assert set(after) == {"0000:01:00.0", "0000:03:00.0"}
    assert {a: d.name for a, d in after.items()} == {a: found[a].name for a in after}
