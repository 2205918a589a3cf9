"""The hostdev discoverer at its edges: identities that clean to one name, options that
would reach past what a rule may touch (the whole /dev, files outside a device directory),
values YAML turns into something else than the operator meant.

USB devices use a synthetic sysfs tree with real device nodes made by ``mknod`` in a
temporary dev root (root needed).
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from drakit.discovery import DiscoveryContext, SysfsBuilder
from drakit.discovery.builtin.hostdev import HostdevDiscovery
from drakit.discovery.builtin.hostdev.rules import RuleSyntaxError, parse_rule
from drakit.discovery.loader import PluginLoadError, load_plugins
from drakit.discovery.model import Device
from drakit.discovery.plugin import ClaimRef, DeviceRequest

DRIVER = "hostdev.drakit.dev"
NODE = "node-1"
XHCI = "devices/pci0000:00/0000:00:14.0"
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")


def plugin(options: dict[str, Any], sysfs_root: Path, dev_root: Path) -> HostdevDiscovery:
    return HostdevDiscovery(DiscoveryContext(
        driver_name=DRIVER, node_name=NODE, sysfs_root=sysfs_root, dev_root=dev_root,
        options=options, plugin_name="hostdev"))


def request(device: Device) -> DeviceRequest:
    return DeviceRequest(claim=ClaimRef(uid="uid-1", namespace="default", name="c"),
                         request="r", pool=NODE, device=device)


def nodes_only(tmp_path: Path, minors: dict[str, int]) -> tuple[Path, Path]:
    """An empty sysfs tree and a dev root with char nodes ``name`` → 240:``minor`` (nodes
    without a sysfs device): (sysfs root, dev root)."""
    dev, sysfs = tmp_path / "dev", tmp_path / "sys"
    dev.mkdir()
    sysfs.mkdir()
    for name, minor in minors.items():
        os.mknod(dev / name, 0o600 | stat.S_IFCHR, os.makedev(240, minor))
    return sysfs, dev


def ftdi_adapters(tmp_path: Path, serials: list[str]) -> tuple[SysfsBuilder, Path]:
    """FTDI adapters on USB ports 1-1, 1-2 … with the given serials, as ttyUSB0, ttyUSB1 …"""
    tree, dev = SysfsBuilder(tmp_path / "sys"), tmp_path / "dev"
    dev.mkdir()
    tree.device(XHCI, subsystem="pci", driver="xhci_hcd",
                attrs={"vendor": "0x8086\n", "device": "0xa36d\n"})
    tree.device(f"{XHCI}/usb1", subsystem="usb", driver="usb",
                attrs={"idVendor": "1d6b\n", "idProduct": "0002\n"})
    for i, serial in enumerate(serials):
        port, tty = f"1-{i + 1}", f"ttyUSB{i}"
        usb = f"{XHCI}/usb1/{port}"
        tree.device(usb, subsystem="usb", driver="usb", attrs={
            "idVendor": "0403\n", "idProduct": "6001\n", "serial": serial + "\n"})
        tree.device(f"{usb}/{port}:1.0", subsystem="usb", driver="ftdi_sio",
                    attrs={"bInterfaceNumber": "00\n"})
        tree.device(f"{usb}/{port}:1.0/{tty}/tty/{tty}", subsystem="tty",
                    uevent={"DEVNAME": tty}, node=("char", 188, i))
        os.mknod(dev / tty, 0o600 | stat.S_IFCHR, os.makedev(188, i))
    return tree, dev


@root_only
def test_serials_equal_but_for_case_are_two_devices_each_prepared_with_its_node(
        tmp_path: Path) -> None:
    # device names are lower case: "AB" and "ab" clean to the same name
    tree, dev = ftdi_adapters(tmp_path, ["AB", "ab", "A_B"])
    p = plugin({"rules": [{"name": "serial", "match": 'SUBSYSTEM=="tty", '
                           'ATTRS{idVendor}=="0403"'}]}, tree.root, dev)
    [pool] = p.discover()
    names = [d.name for d in pool.devices]
    assert len(names) == len(set(names)) == 3, names
    for device in pool.devices:
        serial = device.attributes["serial"].value()
        [node] = p.prepare(request(device)).edits.device_nodes or []
        assert node.host_path == device.attributes["devNode"].value(), (serial, node)
        assert (node.major, node.minor) == (188, device.attributes["minor"].value())
    # the names do not depend on the order of the ports
    tree2, dev2 = ftdi_adapters(tmp_path / "again", ["A_B", "ab", "AB"])
    [pool2] = plugin({"rules": [{"name": "serial", "match": 'SUBSYSTEM=="tty", '
                                 'ATTRS{idVendor}=="0403"'}]}, tree2.root, dev2).discover()
    by_serial = {d.attributes["serial"].value(): d.name for d in pool.devices}
    assert {d.attributes["serial"].value(): d.name for d in pool2.devices} == by_serial


@root_only
def test_names_of_two_rules_that_meet_stay_apart(tmp_path: Path) -> None:
    # rule x, node /dev/y-z and rule x-y, node /dev/z: both are x-y-z as they are
    sysfs, dev = nodes_only(tmp_path, {"y-z": 1, "z": 2})
    p = plugin({"rules": [{"name": "x", "match": "/dev/y-z"},
                          {"name": "x-y", "match": "/dev/z"}]}, sysfs, dev)
    [pool] = p.discover()
    assert len({d.name for d in pool.devices}) == 2
    for device in pool.devices:
        [node] = p.prepare(request(device)).edits.device_nodes or []
        assert node.host_path == device.attributes["devNode"].value()


def load(options: dict[str, Any]) -> None:
    load_plugins(["hostdev"], lambda name: DiscoveryContext(
        driver_name=DRIVER, node_name=NODE, options=options))


def one_rule(**fields: Any) -> dict[str, Any]:
    return {"rules": [{"name": "a", "match": "/dev/kvm", **fields}]}


@pytest.mark.parametrize(("options", "message"), [
    # the whole /dev, / or /sys through a second leading slash (POSIX keeps '//')
    (one_rule(mounts=[{"hostPath": "//dev", "containerPath": "/host-dev"}]),
     r"rules.0.mounts.0.hostPath: '//dev': hostdev never mounts /, /dev"),
    (one_rule(mounts=[{"hostPath": "//", "containerPath": "/host"}]), r"never mounts /,"),
    (one_rule(mounts=[{"hostPath": "//sys/kernel", "containerPath": "/k"}]), r"never mounts"),
    (one_rule(mounts=[{"hostPath": "/run/x", "containerPath": "//dev"}]),
     r"mounts.0.containerPath: .*never mounts"),
    # YAML's `sharing: true` is not one slot
    (one_rule(sharing=True), r"rules.0.sharing: .*exclusive, shared or a number of slots"),
    (one_rule(sharing=False), r"rules.0.sharing: .*exclusive, shared or a number of slots"),
    # a node at / cannot be made
    (one_rule(containerPath="/"), r"rules.0.containerPath: .*names no file"),
    (one_rule(containerPath="//"), r"rules.0.containerPath: .*names no file"),
    # `fileMode: 660` in YAML is decimal 660 = 0o1224: not what was meant
    (one_rule(fileMode=660), r"rules.0.fileMode: .*0o777.*octal string such as '0660'"),
    # ATTR{/etc/passwd} would read a file outside the device's directory
    ({"rules": [{"name": "a", "match": 'ATTR{/etc/passwd}=="x"'}]},
     r"match\[0\]: column 6: ATTR\{…\} needs a name below the device"),
    # not an assignment: an operator udev does not have
    ({"rules": [{"name": "a", "match": 'KERNEL=~"kvm"'}]},
     r"match\[0\]: column 7: expected == or !="),
])
def test_options_that_reach_too_far_or_mean_otherwise_are_refused(
        options: dict[str, Any], message: str) -> None:
    with pytest.raises(PluginLoadError, match=message):
        load(options)


def test_paths_that_only_begin_like_a_refused_one_are_allowed() -> None:
    load(one_rule(mounts=[{"hostPath": "/sysroot/etc", "containerPath": "/procfs-copy"},
                          {"hostPath": "/devices.d", "containerPath": "/devices.d"}],
                  fileMode="0660", containerPath="/dev/vm/{kernel}"))
    load(one_rule(sharing=1))
    load(one_rule(fileMode=0o660))


def test_a_rule_without_subsystem_matching_nothing_at_start_says_hot_plug_misses_it(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # /dev/ttyUSB* before any adapter is plugged: no subsystem to watch for it
    sysfs, dev = nodes_only(tmp_path, {})
    with caplog.at_level(logging.WARNING, logger="drakit.discovery.builtin.hostdev.plugin"):
        p = plugin({"rules": [{"name": "usb", "match": "/dev/ttyUSB*"},
                              {"name": "tty", "match": 'SUBSYSTEM=="tty", KERNEL=="ttyACM*"'}]},
                   sysfs, dev)
    assert p.watched_subsystems() == ("tty",)
    [warning] = [r.getMessage() for r in caplog.records]
    assert "hostdev rule usb: '/dev/ttyUSB*' names no SUBSYSTEM" in warning
    assert "periodic rescan, not on hot-plug" in warning


@pytest.mark.parametrize("plugin_name", ["hostdev", "net", "pci"])
@pytest.mark.parametrize("pool", ["Bad_Pool", "a//b", "x" * 254, "-a"])
def test_a_pool_option_that_is_no_pool_name_stops_the_plugin(plugin_name: str,
                                                            pool: str) -> None:
    # accepted, it left the pool unpublished with a warning and the agent running
    options = {"pool": pool, **({"rules": [{"name": "k", "match": "/dev/kvm"}]}
                                if plugin_name == "hostdev" else {})}
    with pytest.raises(PluginLoadError, match=rf"discovery.{plugin_name}.pool: .*not a pool "
                       "name"):
        load_plugins([plugin_name], lambda name: DiscoveryContext(
            driver_name=DRIVER, node_name=NODE, options=options))
    load_plugins([plugin_name], lambda name: DiscoveryContext(
        driver_name=DRIVER, node_name=NODE, options={**options, "pool": "rack-1/node.a"}))


def test_tabs_around_operators_parse_as_in_udev_rules_files() -> None:
    rule = parse_rule('KERNEL\t==\t"kvm",\tSUBSYSTEM !=\t"block"')
    assert [str(m) for m in rule.matches] == ['KERNEL=="kvm"', 'SUBSYSTEM!="block"']
    with pytest.raises(RuleSyntaxError, match=r"column 8: assignment KERNEL= is not"):
        parse_rule('KERNEL\t=\t"kvm"')


@pytest.mark.parametrize("options", [{}, {"rules": []}, {"pool": "p"}])
def test_hostdev_without_rules_stops_the_plugin(options: dict[str, Any]) -> None:
    # forgotten --config: it ran publishing nothing, without a word
    with pytest.raises(PluginLoadError, match=r"discovery.hostdev.rules: hostdev needs at "
                       r"least one rule \(discovery.hostdev.rules in the --config file\)"):
        load(options)


@root_only
def test_a_node_two_rules_publish_is_warned_about_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    sysfs, dev = nodes_only(tmp_path, {"widget0": 1})
    p = plugin({"rules": [{"name": "solo", "match": "/dev/widget0"},
                          {"name": "many", "match": "/dev/widget*", "sharing": "shared"}]},
               sysfs, dev)
    with caplog.at_level(logging.WARNING, logger="drakit.discovery.builtin.hostdev.plugin"):
        [pool] = p.discover()
        p.discover()                        # the same overlap: said once
    assert sorted(d.name for d in pool.devices) == ["many-widget0", "solo-widget0"]
    [warning] = [r.getMessage() for r in caplog.records if "several rules" in r.getMessage()]
    assert warning.endswith("/dev/widget0 by many, solo")


@root_only
@pytest.mark.parametrize(("kind", "minor", "now"), [("char", 2, "c 240:2"),
                                                    ("block", 1, "b 240:1")])
def test_a_node_replaced_since_publish_fails_the_claim(tmp_path: Path, kind: str, minor: int,
                                                      now: str) -> None:
    # another device at the same path before discovery ran again: not handed out as this one
    sysfs, dev = nodes_only(tmp_path, {"widget0": 1})
    p = plugin({"rules": [{"name": "w", "match": "/dev/widget*"}]}, sysfs, dev)
    [pool] = p.discover()
    [device] = pool.devices
    (dev / "widget0").unlink()
    os.mknod(dev / "widget0", 0o600 | (stat.S_IFCHR if kind == "char" else stat.S_IFBLK),
             os.makedev(240, minor))
    with pytest.raises(RuntimeError, match=rf"w-widget0: node /dev/widget0 is gone or changed "
                       rf"since it was published: it is {now} now, c 240:1 when published"):
        p.prepare(request(device))
    [pool] = p.discover()                   # discovered again: the new node is the device
    [node] = p.prepare(request(pool.devices[0])).edits.device_nodes or []
    assert (node.type, node.minor) == (now[0], minor)
