"""Discovery figure: the built-in ``pci`` and ``net`` discoverers over a synthetic sysfs tree
of 4,096 devices (2,048 PCI functions with one network interface each, 4 NUMA nodes), built
with :class:`drakit.discovery.testing.SysfsBuilder`. Only ``discover()`` is timed (both plugins,
fresh instances per repeat; building the tree is not timed)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from bench.env import DRIVER, NODE, BenchConfig
from bench.figures import Result
from drakit.discovery.builtin.net import NetDiscovery
from drakit.discovery.builtin.pci import PciDiscovery
from drakit.discovery.plugin import DiscoveryContext
from drakit.discovery.testing import SysfsBuilder


def build_tree(root: Path, functions: int) -> SysfsBuilder:
    """``functions`` Mellanox-like PCI functions, each with a network interface."""
    sysfs = SysfsBuilder(root)
    for node in range(4):
        sysfs.numa_node(node, f"{node * 8}-{node * 8 + 7}")
    for i in range(functions):
        bus, fn = divmod(i, 8)
        address = f"0000:{bus // 32 + 1:02x}:{bus % 32:02x}.{fn}"
        sysfs.pci_device(address, vendor=0x15B3, device=0x101E, numa_node=bus % 4,
                         driver="mlx5_core", iommu_group=i)
        sysfs.net_interface(f"ens{i}", mac=f"0c:42:a1:00:{i >> 8:02x}:{i & 0xFF:02x}",
                            pci=address)
    return sysfs


def run_discovery(cfg: BenchConfig) -> list[Result]:
    functions = cfg.scale(2048, 128)
    root = cfg.tempdir("sysfs-")
    try:
        build_tree(root, functions)
        result = Result("discovery_4096")
        for _ in range(cfg.scale(5, 1)):
            ctx = DiscoveryContext(driver_name=DRIVER, node_name=NODE, sysfs_root=root)
            plugins = [PciDiscovery(ctx), NetDiscovery(ctx)]
            t0 = time.perf_counter()
            found = sum(len(p.devices) for plugin in plugins for p in plugin.discover())
            result.samples.append(time.perf_counter() - t0)
            if found != 2 * functions:
                raise RuntimeError(f"discovered {found} devices, expected {2 * functions}")
        result.extra["devices"] = 2 * functions
        if cfg.quick:
            result.notes.append(f"quick mode: {2 * functions} devices, not 4,096")
        return [result]
    finally:
        shutil.rmtree(root, ignore_errors=True)
