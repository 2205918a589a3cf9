"""The hostdev discoverer: names, attributes, grouping, links, sharing, options, prepare.

USB and DRM devices do not exist on the test machines: those use a synthetic sysfs tree
with real device nodes made by ``mknod`` in a temporary dev root (root needed). /dev/kvm,
/dev/fuse, /dev/net/tun and loop devices are the machine's own.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from drakit.discovery import DiscoveryContext, SysfsBuilder
from drakit.discovery.builtin.hostdev import HostdevDiscovery
from drakit.discovery.loader import PluginLoadError, load_plugins
from drakit.discovery.model import Device
from drakit.discovery.plugin import ClaimRef, DeviceRequest

DRIVER = "hostdev.drakit.dev"
NODE = "node-1"
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")

XHCI = "devices/pci0000:00/0000:00:14.0"
FTDI = {"idVendor": "0403\n", "idProduct": "6001\n", "manufacturer": "FTDI\n",
        "product": "FT232R USB UART\n"}


def plugin(options: dict[str, Any], sysfs_root: Path | str = "/sys",
           dev_root: Path | str = "/dev") -> HostdevDiscovery:
    return HostdevDiscovery(DiscoveryContext(
        driver_name=DRIVER, node_name=NODE, sysfs_root=Path(sysfs_root),
        dev_root=Path(dev_root), options=options, plugin_name="hostdev"))


def devices(p: HostdevDiscovery) -> dict[str, Device]:
    [pool] = p.discover()
    assert pool.name == NODE
    return {d.name: d for d in pool.devices}


def attr(device: Device, key: str) -> Any:
    return device.attributes[key].value()


def mknod(dev: Path, name: str, kind: str, major: int, minor: int) -> Path:
    path = dev / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.unlink()
    os.mknod(path, 0o600 | (stat.S_IFCHR if kind == "char" else stat.S_IFBLK),
             os.makedev(major, minor))
    return path


def usb_controller(tree: SysfsBuilder) -> None:
    tree.device(XHCI, subsystem="pci", driver="xhci_hcd",
                attrs={"vendor": "0x8086\n", "device": "0xa36d\n", "class": "0x0c0330\n"})
    tree.device(f"{XHCI}/usb1", subsystem="usb", driver="usb",
                attrs={"idVendor": "1d6b\n", "idProduct": "0002\n",
                       "serial": "0000:00:14.0\n"})   # a root hub's serial: its controller


def usb_serial(tree: SysfsBuilder, dev: Path, port: str, tty: str, minor: int,
               serial: str | None) -> None:
    """An FTDI adapter on USB port ``port`` whose tty the kernel named ``tty``."""
    usb = f"{XHCI}/usb1/{port}"
    tree.device(usb, subsystem="usb", driver="usb",
                attrs={**FTDI, **({"serial": serial + "\n"} if serial else {})})
    tree.device(f"{usb}/{port}:1.0", subsystem="usb", driver="ftdi_sio",
                attrs={"bInterfaceNumber": "00\n"})
    tree.device(f"{usb}/{port}:1.0/{tty}", subsystem="usb-serial", driver="ftdi_sio")
    tree.device(f"{usb}/{port}:1.0/{tty}/tty/{tty}", subsystem="tty",
                uevent={"DEVNAME": tty}, node=("char", 188, minor))
    mknod(dev, tty, "char", 188, minor)


SERIAL_RULE = {"name": "serial", "match": [
    'SUBSYSTEM=="tty", ATTRS{idVendor}=="0403", ATTRS{idProduct}=="6001"']}


def two_adapters(tmp_path: Path) -> tuple[SysfsBuilder, Path]:
    """A USB controller with two FTDI adapters (serials A50285BI on ttyUSB0, FT9XYZ on
    ttyUSB1): the synthetic sysfs tree and the dev root."""
    tree, dev = SysfsBuilder(tmp_path / "sys"), tmp_path / "dev"
    usb_controller(tree)
    usb_serial(tree, dev, "1-1", "ttyUSB0", 0, "A50285BI")
    usb_serial(tree, dev, "1-2", "ttyUSB1", 1, "FT9XYZ")
    return tree, dev


@root_only
def test_usb_serial_names_follow_the_serial_not_the_kernel_name(tmp_path: Path) -> None:
    tree, dev = two_adapters(tmp_path)
    p = plugin({"rules": [SERIAL_RULE]}, tree.root, dev)
    first = devices(p)
    assert sorted(first) == ["serial-0403-6001-a50285bi-if00-ttyusb",
                             "serial-0403-6001-ft9xyz-if00-ttyusb"]
    a = first["serial-0403-6001-a50285bi-if00-ttyusb"]
    assert attr(a, "kernelName") == "ttyUSB0" and attr(a, "subsystem") == "tty"
    assert (attr(a, "vendorID"), attr(a, "productID")) == ("0403", "6001")
    assert (attr(a, "vendor"), attr(a, "product")) == ("FTDI", "FT232R USB UART")
    assert attr(a, "serial") == "A50285BI" and attr(a, "usbPath") == "1-1"
    assert attr(a, "driver") == "ftdi_sio"
    assert attr(a, "resource.kubernetes.io/pciBusID") == "0000:00:14.0"
    assert attr(a, "resource.kubernetes.io/pcieRoot") == "pci0000:00"
    assert (attr(a, "major"), attr(a, "minor"), attr(a, "devNode")) == (188, 0, "/dev/ttyUSB0")
    assert attr(a, "rule") == "serial"
    assert a.allow_multiple_allocations is None and not a.capacity   # exclusive

    # unplug both, plug them back in the other order: the kernel names swap, names do not
    for port in ("1-1", "1-2"):
        tree.remove_device(f"{XHCI}/usb1/{port}")
    usb_serial(tree, dev, "1-2", "ttyUSB0", 0, "FT9XYZ")
    usb_serial(tree, dev, "1-1", "ttyUSB1", 1, "A50285BI")
    again = devices(p)
    assert sorted(again) == sorted(first)
    assert attr(again["serial-0403-6001-a50285bi-if00-ttyusb"], "kernelName") == "ttyUSB1"
    assert attr(again["serial-0403-6001-ft9xyz-if00-ttyusb"], "kernelName") == "ttyUSB0"


@root_only
def test_without_a_serial_the_usb_port_path_names_it(tmp_path: Path) -> None:
    """No serial of its own (and never the root hub's): the bus path, by port."""
    tree, dev = SysfsBuilder(tmp_path / "sys"), tmp_path / "dev"
    usb_controller(tree)
    usb_serial(tree, dev, "1-3", "ttyUSB0", 0, None)
    [name] = devices(plugin({"rules": [SERIAL_RULE]}, tree.root, dev))
    assert name.startswith("serial-pci-0000-00-14-0-usb-1-3-if00-ttyusb")


@root_only
def test_links_go_along_with_their_node(tmp_path: Path) -> None:
    tree, dev = two_adapters(tmp_path)
    (dev / "serial/by-id").mkdir(parents=True)
    (dev / "serial/by-id/usb-FTDI_A50285BI-if00-port0").symlink_to("../../ttyUSB0")
    p = plugin({"rules": [{**SERIAL_RULE, "links": ["/dev/serial/by-id/*"]}]}, tree.root, dev)
    found = devices(p)
    assert found["serial-0403-6001-a50285bi-if00-ttyusb"].device_nodes == [
        "/dev/ttyUSB0", "/dev/serial/by-id/usb-FTDI_A50285BI-if00-port0"]
    assert found["serial-0403-6001-ft9xyz-if00-ttyusb"].device_nodes == ["/dev/ttyUSB1"]
    prepared = p.prepare(request(found["serial-0403-6001-a50285bi-if00-ttyusb"]))
    nodes = prepared.edits.device_nodes or []
    assert [(n.path, n.host_path, n.type, n.major, n.minor) for n in nodes] == [
        ("/dev/ttyUSB0", "/dev/ttyUSB0", "c", 188, 0),
        ("/dev/serial/by-id/usb-FTDI_A50285BI-if00-port0", "/dev/ttyUSB0", "c", 188, 0)]


@root_only
def test_group_parent_makes_card_and_render_node_one_device(tmp_path: Path) -> None:
    tree, dev = SysfsBuilder(tmp_path / "sys"), tmp_path / "dev"
    for addr, card, render in (("0000:00:02.0", 0, 128), ("0000:65:00.0", 1, 129)):
        gpu = f"devices/pci0000:00/{addr}"
        tree.device(gpu, subsystem="pci", driver="i915",
                    attrs={"vendor": "0x8086\n", "device": "0x46a6\n"})
        for name, minor in ((f"card{card}", card), (f"renderD{render}", render)):
            tree.device(f"{gpu}/drm/{name}", subsystem="drm",
                        uevent={"DEVNAME": f"dri/{name}", "DEVTYPE": "drm_minor"},
                        node=("char", 226, minor))
            mknod(dev, f"dri/{name}", "char", 226, minor)
    rule = {"name": "gpu", "match": 'SUBSYSTEM=="drm", KERNEL=="card[0-9]*|renderD*"',
            "group": "parent", "env": "GPU_NODE"}
    p = plugin({"rules": [rule]}, tree.root, dev)
    found = devices(p)
    assert sorted(found) == ["gpu-pci-0000-00-02-0", "gpu-pci-0000-65-00-0"]
    one = found["gpu-pci-0000-65-00-0"]
    assert one.device_nodes == ["/dev/dri/card1", "/dev/dri/renderD129"]
    assert attr(one, "resource.kubernetes.io/pciBusID") == "0000:65:00.0"
    assert (attr(one, "vendorID"), attr(one, "productID"), attr(one, "driver")) == (
        "8086", "46a6", "i915")
    edits = p.prepare(request(one)).edits
    assert [(n.path, n.minor) for n in edits.device_nodes or []] == [
        ("/dev/dri/card1", 1), ("/dev/dri/renderD129", 129)]
    assert "GPU_NODE=/dev/dri/card1" in (edits.env or [])
    # without grouping: one device per node, named by the parent and the node's kind
    ungrouped = devices(plugin({"rules": [{**rule, "group": "none"}]}, tree.root, dev))
    assert sorted(ungrouped)[:2] == ["gpu-pci-0000-00-02-0-card", "gpu-pci-0000-00-02-0-renderd"]


def request(device: Device, pool: str = NODE) -> DeviceRequest:
    return DeviceRequest(claim=ClaimRef(namespace="default", name="c", uid="u-1"),
                         request="req-0", pool=pool, device=device)


def real_node_or_skip(path: str) -> None:
    if not os.path.exists(path):
        pytest.skip(f"{path} does not exist on this machine")


def test_sharing_modes_on_real_nodes() -> None:
    for path in ("/dev/kvm", "/dev/fuse", "/dev/net/tun"):
        real_node_or_skip(path)
    p = plugin({"rules": [
        {"name": "kvm", "match": 'KERNEL=="kvm", SUBSYSTEM=="misc"', "sharing": "shared"},
        {"name": "fuse", "match": "/dev/fuse", "sharing": 3},
        {"name": "tun", "match": "/dev/net/tun"},
    ]})
    found = devices(p)
    assert sorted(found) == ["fuse", "kvm", "tun"]
    assert found["kvm"].allow_multiple_allocations is True and not found["kvm"].capacity
    fuse = found["fuse"].to_api()
    assert fuse["allowMultipleAllocations"] is True
    assert fuse["capacity"] == {"slots": {"value": "3", "requestPolicy": {
        "default": "1", "validRange": {"min": "1", "max": "3", "step": "1"}}}}
    assert "allowMultipleAllocations" not in found["tun"].to_api()
    assert (attr(found["kvm"], "major"), attr(found["kvm"], "minor")) == (10, 232)
    assert attr(found["tun"], "devNode") == "/dev/net/tun"
    assert attr(found["tun"], "subsystem") == "misc"   # a path glob still finds its device
    assert set(p.watched_subsystems()) == {"misc"}


def test_prepare_reads_the_host_node_with_the_rule_settings() -> None:
    real_node_or_skip("/dev/kvm")
    p = plugin({"rules": [{
        "name": "kvm", "match": 'KERNEL=="kvm"', "permissions": "rw", "uid": 1000,
        "gid": 36, "fileMode": "0660", "containerPath": "/dev/vm/{kernel}",
        "env": "KVM_DEVICE",
        "mounts": [{"hostPath": "/usr/share/zoneinfo", "containerPath": "/zoneinfo"}]}]})
    kvm = devices(p)["kvm"]
    edits = p.prepare(request(kvm)).edits
    [node] = edits.device_nodes or []
    host = os.stat("/dev/kvm")
    assert (node.path, node.host_path, node.type) == ("/dev/vm/kvm", "/dev/kvm", "c")
    assert (node.major, node.minor) == (os.major(host.st_rdev), os.minor(host.st_rdev))
    assert (node.permissions, node.uid, node.gid, node.file_mode) == ("rw", 1000, 36, 0o660)
    assert "KVM_DEVICE=/dev/vm/kvm" in (edits.env or [])
    assert f"DRAKIT_DEVICE_KVM={NODE}/kvm" in (edits.env or [])
    [mount] = edits.mounts or []
    assert (mount.host_path, mount.container_path) == ("/usr/share/zoneinfo", "/zoneinfo")
    assert mount.options == ["bind", "ro", "nosuid"]


@root_only
def test_a_node_gone_since_publish_fails_the_claim_naming_it(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    mknod(dev, "widget0", "char", 240, 77)   # no sysfs device: named by its path
    p = plugin({"rules": [{"name": "w", "match": "/dev/widget*"}]}, dev_root=dev)
    device = devices(p)["w-widget0"]
    (dev / "widget0").unlink()               # removed, not discovered again yet
    with pytest.raises(RuntimeError, match=r"w-widget0: node /dev/widget0 is gone"):
        p.prepare(request(device))
    assert devices(p) == {}                  # discovered again: gone from the inventory
    with pytest.raises(RuntimeError, match=r"w-widget0: /dev/widget0 no longer on this node"):
        p.prepare(request(device))


def test_loop_devices_publish_their_size_and_kernel_names() -> None:
    real_node_or_skip("/dev/loop0")
    found = devices(plugin({"rules": [
        {"name": "loop", "match": 'SUBSYSTEM=="block", KERNEL=="loop[0-9]*"'}]}))
    loop0 = found["loop-loop0"]
    size = int(Path("/sys/block/loop0/size").read_text()) * 512
    assert loop0.capacity["size"].value == str(size)
    assert attr(loop0, "subsystem") == "block" and attr(loop0, "major") == 7


@pytest.mark.parametrize(("options", "message"), [
    ({"rules": [{"name": "k", "match": 'KERNEL=="kvm", MODE="0666"'}]},
     r"discovery.hostdev.rules.0.match: match\[0\]: column 16: unknown key 'MODE'"),
    ({"rules": [{"name": "k", "match": ['KERNEL=="kvm"', 'ATTRS{x}="1"']}]},
     r"rules.0.match: .*match\[1\]: column 9: assignment ATTRS= is not supported"),
    ({"rules": [{"name": "K_1", "match": "/dev/kvm"}]}, r"rules.0.name: .*not a DNS label"),
    ({"rules": [{"name": "a", "match": "/dev/kvm"}, {"name": "a", "match": "/dev/fuse"}]},
     r"two rules are named 'a'"),
    ({"rules": [{"name": "a", "match": "/dev/kvm",
                 "mounts": [{"hostPath": "/dev", "containerPath": "/dev"}]}]},
     r"never mounts /, /dev"),
    ({"rules": [{"name": "a", "match": "/etc/passwd"}]}, r"a path glob is below /dev"),
    ({"rules": [{"name": "a", "match": "/dev/kvm", "permissions": "rwx"}]}, r"some of r, w, m"),
    ({"rules": [{"name": "a", "match": "/dev/kvm", "sharing": 0}]}, r"slots is 1 to"),
    ({"rules": [{"name": "a", "match": "/dev/kvm", "fileMode": "rw"}]}, r"octal string"),
    ({"rules": [{"name": "a", "match": "/dev/dri/*", "group": "parent",
                 "containerPath": "/dev/gpu"}]}, r"several"),
    ({"rules": [{"name": "a", "match": "/dev/kvm", "colour": "red"}]}, r"colour"),
])
def test_bad_options_stop_the_plugin_naming_the_field(options: dict[str, Any],
                                                       message: str) -> None:
    with pytest.raises(PluginLoadError, match=message):
        load_plugins(["hostdev"], lambda name: DiscoveryContext(
            driver_name=DRIVER, node_name=NODE, options=options))
