"""Garbage sysfs contents for the built-in net and pci discoverers
(drakit.discovery.testing.SysfsBuilder).

Attribute files hold random bytes: empty, binary, invalid UTF-8, control characters, huge,
numbers out of range, unicode digits; interface names and link targets are odd too.
Property: ``discover()`` never raises, one odd device never hides a sane one, and every
device it reports builds valid API JSON and goes through the ResourceSlice validation
without an exception (problems come back as issues naming device and field).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from reliability_helpers import CASES, fuzz_settings

from drakit.discovery.builtin.net import NetDiscovery
from drakit.discovery.builtin.pci import PciDiscovery
from drakit.discovery.plugin import DiscoveryContext
from drakit.discovery.testing import SysfsBuilder
from drakit.plugin.slices.validate import validate_pool

DRIVER = "drakit.example.com"

contents = st.one_of(
    st.binary(max_size=64),
    st.just(b""),
    st.just(b"\x00\x00\x00"),
    st.text(max_size=40).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.integers(-(2**80), 2**80).map(lambda i: f"{i}\n".encode()),
    st.integers(-(2**40), 2**40).map(lambda i: f"{i:#x}\n".encode()),
    st.sampled_from([b"0x10de\n", b"0x030200\n", b"-1\n", b"\xd9\xa3\n", b"\xc2\xb2\n",
                     b"ff:ff:ff:ff:ff:ff\n", b"1500\n", b"772\n", b"0x" + b"f" * 100 + b"\n",
                     b" \t\n", b"up\n", b"1e9\n", b"NaN\n"]),
    st.integers(4000, 20000).map(lambda n: b"A" * n),  # above the 4 KiB read cap
)
NET_ATTRS = ["address", "mtu", "type", "operstate", "ifindex", "uevent"]
PCI_ATTRS = ["vendor", "device", "class", "subsystem_vendor", "subsystem_device", "numa_node",
             "uevent"]
ifnames = st.one_of(
    st.from_regex(r"[a-z][a-z0-9]{0,14}", fullmatch=True),
    st.text(alphabet=st.characters(codec="utf-8", exclude_characters="/\x00"),
            min_size=1, max_size=40).filter(lambda n: n not in (".", "..")),
)
link_names = st.one_of(st.from_regex(r"[0-9]{1,25}", fullmatch=True),
                       st.sampled_from(["\u00b2", "\u0663", "-1", "x y", "ﾠ"]),
                       st.text(alphabet="abc\u00b2\u0663", min_size=1, max_size=8))


def _check_pools(pools: list[Any], sane: str) -> None:
    names = [d.name for p in pools for d in p.devices]
    assert sane in names, f"the sane device {sane} went missing: {names}"
    for pool in pools:
        for dev in pool.devices:
            dev.to_api()
        result = validate_pool(pool, DRIVER, "node-1")
        for issue in result.issues:
            assert issue.device and issue.field.startswith("spec."), str(issue)
        published = {d["name"] for d in result.pool.devices} if result.pool else set()
        assert sane in published, [str(i) for i in result.issues]


def _ctx(root: Path) -> DiscoveryContext:
    return DiscoveryContext(driver_name=DRIVER, node_name="node-1", sysfs_root=root)


@fuzz_settings(150)
@given(ifnames, st.dictionaries(st.sampled_from(NET_ATTRS), contents, max_size=6),
       st.booleans())
def test_fuzz_net_sysfs(ifname: str, files: dict[str, bytes], on_pci: bool) -> None:
    with CASES.case("sysfs-net"), tempfile.TemporaryDirectory(prefix="drk-sys-") as tmp:
        b = SysfsBuilder(Path(tmp) / "sys")
        b.pci_device("0000:00:03.0", numa_node=0, driver="virtio-pci")
        b.net_interface("sane0", mac="02:00:00:00:00:09", pci="0000:00:03.0")
        pci = None
        if on_pci:
            b.pci_device("0000:00:04.0", numa_node=1)
            pci = "0000:00:04.0"
        d = b.net_interface(ifname, mac="02:00:00:00:00:0a", pci=pci)
        for attr, data in files.items():
            (d / attr).write_bytes(data)
        pools = NetDiscovery(_ctx(b.root)).discover()
        _check_pools(pools, "sane0")


@fuzz_settings(150)
@given(st.dictionaries(st.sampled_from(PCI_ATTRS), contents, max_size=7),
       st.one_of(st.none(), link_names), st.one_of(st.none(), link_names))
def test_fuzz_pci_sysfs(files: dict[str, bytes], group: str | None, driver: str | None) -> None:
    with CASES.case("sysfs-pci"), tempfile.TemporaryDirectory(prefix="drk-sys-") as tmp:
        b = SysfsBuilder(Path(tmp) / "sys")
        b.pci_device("0000:00:02.0", vendor=0x1AF4, device=0x1000, numa_node=0)
        d = b.pci_device("0000:3b:00.0", vendor=0x10DE, pci_class=0x030200)
        for attr, data in files.items():
            (d / attr).write_bytes(data)
        if group is not None:
            os.makedirs(Path(tmp) / "sys" / "kernel" / "iommu_groups" / group, exist_ok=True)
            b.symlink(f"{os.path.relpath(d, b.root)}/iommu_group", f"kernel/iommu_groups/{group}")
        if driver is not None:
            os.makedirs(Path(tmp) / "sys" / "bus" / "pci" / "drivers" / driver, exist_ok=True)
            b.symlink(f"{os.path.relpath(d, b.root)}/driver", f"bus/pci/drivers/{driver}")
        pools = PciDiscovery(_ctx(b.root)).discover()
        _check_pools(pools, "pci-0000-00-02-0")
        # the odd device is still there (its attributes may be left out, the device not)
        assert "pci-0000-3b-00-0" in [x.name for p in pools for x in p.devices] or \
            files.get("class", b"").startswith(b"0x06")


def test_unreadable_entries_are_skipped(tmp_path: Path) -> None:
    """A FIFO, a directory and a dangling link where attributes should be: no hang, no raise."""
    b = SysfsBuilder(tmp_path / "sys")
    b.pci_device("0000:00:02.0")
    d = b.net_interface("odd0", pci="0000:00:02.0")
    (d / "address").unlink()
    os.mkfifo(d / "address")  # a blocking read would hang discovery
    (d / "mtu").unlink()
    (d / "mtu").mkdir()
    (d / "type").unlink()
    os.symlink("/nonexistent/x", d / "type")
    pools = NetDiscovery(_ctx(b.root)).discover()
    dev = [x for p in pools for x in p.devices if x.name == "odd0"]
    assert dev and "macAddress" not in dev[0].attributes and "mtu" not in dev[0].attributes
