"""Sysfs readers: odd files never raise; PCI address and root resolution; NUMA."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from drakit.discovery.sysfs import Sysfs
from drakit.discovery.testing import SysfsBuilder


@pytest.mark.parametrize(("content", "expected"), [
    (b"0x10de\n", "0x10de"),
    (b"  spaced  \n", "spaced"),
    (b"", None),
    (b"\n\n", None),
    (b"\x00\x01\x02binary", None),
    (b"\xff\xfe\xfd", None),
    (b"ok\x00", None),
    (b"x" * 5000, None),
    ("naïve\n".encode(), "naïve"),
])
def test_read_attr_odd_content(sysfs: SysfsBuilder, content: bytes, expected: str | None) -> None:
    sysfs.write("class/x/attr", content)
    assert Sysfs(sysfs.root).read_attr("class/x/attr") == expected


def test_read_attr_never_raises_on_odd_files(sysfs: SysfsBuilder) -> None:
    s = Sysfs(sysfs.root)
    (sysfs.root / "dir").mkdir()
    os.mkfifo(sysfs.root / "fifo")  # would block a plain open()
    os.symlink("nowhere", sysfs.root / "dangling")
    os.symlink("/etc/hostname", sysfs.root / "outside")
    for name in ("missing", "dir", "fifo", "dangling", "nested/missing/deep"):
        assert s.read_attr(name) is None, name
        assert s.read_int(name) is None
    assert s.resolve("outside") is None  # leads outside the root
    assert s.list_dir("missing") == []
    assert s.link_name("missing") is None


def test_huge_file_warns_once(sysfs: SysfsBuilder, caplog: pytest.LogCaptureFixture) -> None:
    sysfs.write("huge", b"1" * 100_000)
    s = Sysfs(sysfs.root, max_bytes=64)
    with caplog.at_level(logging.WARNING):
        assert s.read_attr("huge") is None
        assert s.read_attr("huge") is None
    assert sum("larger than 64 bytes" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize(("content", "base", "expected"), [
    ("42\n", 10, 42), ("-1\n", 10, -1), ("0x1af4\n", 16, 0x1AF4), ("1af4", 16, 0x1AF4),
    ("garbage", 10, None), ("4 2", 10, None), ("0x", 16, None),
])
def test_read_int(sysfs: SysfsBuilder, content: str, base: int, expected: int | None) -> None:
    sysfs.write("v", content)
    assert Sysfs(sysfs.root).read_int("v", base) == expected


def test_read_hex(sysfs: SysfsBuilder) -> None:
    sysfs.write("vendor", "0x10DE\n")
    sysfs.write("big", "0x123456\n")
    s = Sysfs(sysfs.root)
    assert s.read_hex("vendor", 4) == "10de"
    assert s.read_hex("big", 4) is None
    assert s.read_hex("big", 6) == "123456"


def test_pci_address_and_root(sysfs: SysfsBuilder) -> None:
    sysfs.pci_device("0000:00:01.0", pci_class=0x060400)  # a root port
    sysfs.pci_device("0000:01:00.0", parent="0000:00:01.0", numa_node=1)
    sysfs.net_interface("ens1", pci="0000:01:00.0")
    sysfs.pci_device("0000:00:03.0")
    sysfs.net_interface("eth0", pci="0000:00:03.0", via="virtio2", driver="virtio_net")
    sysfs.net_interface("veth0")
    s = Sysfs(sysfs.root)
    assert s.pci_address("class/net/ens1/device") == "0000:01:00.0"
    assert s.pci_address("class/net/eth0/device") == "0000:00:03.0"
    assert s.pci_address("class/net/veth0") is None
    assert s.pcie_root("0000:01:00.0") == "pci0000:00"
    assert s.numa_node("bus/pci/devices/0000:01:00.0") == 1
    assert s.numa_node("bus/pci/devices/0000:00:03.0") is None  # -1: no affinity
    assert s.link_name("class/net/eth0/device/driver") == "virtio_net"


def test_usb_nic_is_not_its_host_controller(sysfs: SysfsBuilder) -> None:
    ctrl = sysfs.pci_device("0000:00:14.0", pci_class=0x0C0330)
    usb = ctrl / "usb1" / "1-1"
    usb.mkdir(parents=True)
    sysfs.symlink(usb.relative_to(sysfs.root) / "subsystem", "bus/usb")
    (usb / "net" / "usb0").mkdir(parents=True)
    sysfs.symlink((usb / "net" / "usb0").relative_to(sysfs.root) / "device",
                  usb.relative_to(sysfs.root))
    s = Sysfs(sysfs.root)
    assert s.pci_address((usb / "net" / "usb0" / "device").relative_to(sysfs.root)) is None


def test_virtualised_topology_omits_pcie_root(sysfs: SysfsBuilder,
                                              caplog: pytest.LogCaptureFixture) -> None:
    sysfs.pci_device("7870:00:00.0", host_bridge="LNXSYSTM:00/VMBUS:01/abcd-1234/pci7870:00")
    s = Sysfs(sysfs.root)
    with caplog.at_level(logging.WARNING):
        assert s.pcie_root("7870:00:00.0") is None
        assert s.pcie_root("7870:00:00.0") is None
    assert sum("pcieRoot" in r.getMessage() for r in caplog.records) == 1
    assert s.pci_address("bus/pci/devices/7870:00:00.0") == "7870:00:00.0"


def test_numa_nodes(sysfs: SysfsBuilder) -> None:
    sysfs.numa_node(0, "0-3")
    sysfs.numa_node(1, "4-7")
    s = Sysfs(sysfs.root)
    assert s.numa_nodes() == [0, 1]
    assert (sysfs.root / "devices/system/node/online").read_text() == "0,1\n"


def test_real_sysfs_readers() -> None:
    s = Sysfs(Path("/sys"))
    if not Path("/sys/class/net/eth0").exists():
        pytest.skip("no eth0 on this machine")
    assert s.read_int("class/net/eth0/mtu") is not None
    assert s.read_attr("class/net/eth0/address")
    if Path("/sys/devices/system/node/node0").exists():
        assert 0 in s.numa_nodes()
