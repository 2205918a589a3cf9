"""The hostdev rule language: udev match keys over synthetic devices and the real /sys."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from drakit.discovery.builtin.hostdev.rules import (
    Rule,
    RuleSyntaxError,
    ancestry,
    glob_match,
    parse_rule,
)
from drakit.discovery.builtin.hostdev.tree import DeviceTree


@dataclass
class Dev:
    """A device as a rule sees it (the DeviceView protocol), for the matcher alone."""

    sys_name: str
    subsystem: str = ""
    driver: str = ""
    parent: Dev | None = None
    attrs: dict[str, str] = field(default_factory=dict)
    props: dict[str, str] = field(default_factory=dict)

    def attribute(self, name: str) -> str | None:
        return self.attrs.get(name)

    def env(self, name: str) -> str | None:
        return self.props.get(name)


def usb_tty(vendor: str = "0403", product: str = "6001", serial: str = "A50285BI") -> Dev:
    """ttyUSB0 → interface 1-1:1.0 (driver ftdi_sio) → USB device 1-1 → controller."""
    hc = Dev("0000:00:14.0", "pci", "xhci_hcd", attrs={"vendor": "0x8086"})
    usb = Dev("1-1", "usb", "usb", hc, {"idVendor": vendor, "idProduct": product,
                                         "serial": serial, "manufacturer": "FTDI"})
    iface = Dev("1-1:1.0", "usb", "ftdi_sio", usb, {"bInterfaceNumber": "00"})
    port = Dev("ttyUSB0", "usb-serial", "ftdi_sio", iface, {"port_number": "0"})
    return Dev("ttyUSB0", "tty", "", port, {"dev": "188:0\n"},
               {"MAJOR": "188", "MINOR": "0", "DEVNAME": "ttyUSB0", "SUBSYSTEM": "tty"})


def rule(text: str) -> Rule:
    return parse_rule(text)


def test_equal_and_not_equal_with_globs() -> None:
    tty = usb_tty()
    assert rule('KERNEL=="ttyUSB0"').matches_device(tty)
    assert rule('KERNEL=="ttyUSB[0-9]*"').matches_device(tty)
    assert rule('KERNEL=="tty?SB0"').matches_device(tty)
    assert not rule('KERNEL=="ttyACM*"').matches_device(tty)
    assert rule('KERNEL!="ttyACM*"').matches_device(tty)
    assert not rule('KERNEL!="ttyUSB*"').matches_device(tty)
    assert rule('SUBSYSTEM=="tty", KERNEL=="ttyACM*|ttyUSB*"').matches_device(tty)
    assert not rule('SUBSYSTEM=="tty", KERNEL=="ttyACM*|ttyS*"').matches_device(tty)


def test_glob_alternatives_and_empty() -> None:
    assert glob_match("", "")
    assert not glob_match("x", "")
    assert glob_match("card0", "card[0-9]|renderD*")
    assert glob_match("renderD128", "card[0-9]|renderD*")
    assert not glob_match("Card0", "card*")   # case-sensitive, as udev


def test_device_keys_do_not_walk_up() -> None:
    tty = usb_tty()
    assert not rule('ATTR{idVendor}=="0403"').matches_device(tty)
    assert not rule('DRIVER=="ftdi_sio"').matches_device(tty)   # the tty has no driver
    assert rule('DRIVER==""').matches_device(tty)
    assert rule('ATTR{dev}=="188:0"').matches_device(tty)       # trailing newline ignored
    assert not rule('ATTR{dev}=="188:0 "').matches_device(tty)  # unless the pattern has one


def test_parent_keys_walk_up() -> None:
    tty = usb_tty()
    assert rule('SUBSYSTEM=="tty", ATTRS{idVendor}=="0403", ATTRS{idProduct}=="6001"'
                ).matches_device(tty)
    assert rule('DRIVERS=="ftdi_sio"').matches_device(tty)
    assert rule('KERNELS=="1-1"').matches_device(tty)
    assert rule('SUBSYSTEMS=="pci", ATTRS{vendor}=="0x8086"').matches_device(tty)
    assert not rule('ATTRS{idVendor}=="067b"').matches_device(tty)
    assert rule('ATTRS{idVendor}!="067b"').matches_device(tty)   # some device of the chain


def test_parent_keys_must_match_on_one_device() -> None:
    tty = usb_tty()
    # idVendor is on the USB device, the driver ftdi_sio on the interface below it
    assert not rule('DRIVERS=="ftdi_sio", ATTRS{idVendor}=="0403"').matches_device(tty)
    assert rule('DRIVERS=="usb", ATTRS{idVendor}=="0403"').matches_device(tty)
    assert rule('KERNELS=="1-1:1.0", ATTRS{bInterfaceNumber}=="00"').matches_device(tty)
    assert not rule('KERNELS=="1-1", ATTRS{bInterfaceNumber}=="00"').matches_device(tty)
    # two adapters: the vendor of one and the product of another never combine
    assert not rule('ATTRS{idVendor}=="0403", ATTRS{vendor}=="0x8086"').matches_device(tty)


def test_env_and_missing_values() -> None:
    tty = usb_tty()
    assert rule('ENV{MAJOR}=="188", ENV{DEVNAME}=="ttyUSB*"').matches_device(tty)
    assert not rule('ENV{MAJOR}=="188", ENV{DEVNAME}=="ttyACM*"').matches_device(tty)
    assert rule('ENV{ID_SERIAL}==""').matches_device(tty)      # no udev database
    assert not rule('ENV{ID_SERIAL}=="?*"').matches_device(tty)
    assert rule('ATTR{nonexistent}!="?*"').matches_device(tty)


@pytest.mark.parametrize(("text", "column", "words"), [
    ('KERNAL=="kvm"', 1, "unknown key 'KERNAL'"),
    ('KERNEL=="kvm", SUBSYSTEM="misc"', 25, "assignment SUBSYSTEM= is not supported"),
    ('KERNEL=="kvm", MODE:="0666"', 16, "unknown key 'MODE'"),
    ('KERNEL=="kvm" SUBSYSTEM=="misc"', 15, "expected ','"),
    ('KERNEL=="kvm', 9, "unterminated"),
    ("KERNEL==kvm", 9, "double quotes"),
    ('KERNEL<>"kvm"', 7, "expected == or !="),
    ('ATTRS=="x"', 6, "needs an argument"),
    ('ATTRS{idVendor=="x"', 7, "needs a name"),
    ('ATTR{../../etc}=="x"', 6, "no '..'"),
    ('KERNEL{x}=="x"', 7, "takes no"),
    ('KERNEL=="kvm",', 15, "expected a key after ','"),
    ("   ", 1, "empty rule"),
    ("/dev/../etc/passwd", 6, "path glob"),
    ("/dev/fuse x", 10, "path glob"),
    ('kernel=="kvm"', 1, "unknown key 'kernel'"),
])
def test_bad_rules_name_the_column(text: str, column: int, words: str) -> None:
    with pytest.raises(RuleSyntaxError) as info:
        parse_rule(text)
    assert info.value.column == column, str(info.value)
    assert words in str(info.value)
    assert repr(text) in str(info.value)


def test_path_glob_rule() -> None:
    r = parse_rule("/dev/fuse")
    assert r.path_glob == "/dev/fuse" and not r.matches
    assert not r.matches_device(usb_tty())
    assert parse_rule("  /dev/video*  ").path_glob == "/dev/video*"


def test_subsystems_of_a_rule() -> None:
    assert rule('SUBSYSTEM=="tty", KERNEL=="ttyUSB*"').subsystems() == {"tty"}
    assert rule('SUBSYSTEM=="drm|misc"').subsystems() == {"drm", "misc"}
    assert rule('KERNEL=="kvm"').subsystems() is None
    assert rule('SUBSYSTEM=="t*"').subsystems() is None


# -- the real device tree ------------------------------------------------------------------


def real_tree_or_skip() -> tuple[DeviceTree, DeviceTree]:
    if not os.path.isdir("/sys/dev/char"):
        pytest.skip("no /sys/dev/char on this machine")
    return DeviceTree("/sys"), DeviceTree("/sys", use_udev=False)


def test_both_readers_see_the_real_tree_alike() -> None:
    """pyudev and the plain sysfs reader give the same view of every real device node
    (names, subsystems, drivers, properties, parents, a few attributes)."""
    udev, files = real_tree_or_skip()
    by_udev = {(n.kind, n.major, n.minor): n for n in udev.nodes()}
    by_files = {(n.kind, n.major, n.minor): n for n in files.nodes()}
    assert by_udev.keys() == by_files.keys() and len(by_udev) > 5

    def chain(d: object) -> list[tuple[object, ...]]:
        return [(v.sys_name, v.subsystem, v.driver, v.attribute("dev"), v.attribute("size"),
                 v.attribute("vendor"), v.attribute("driver"), v.attribute("power"))
                for v in ancestry(d)]  # type: ignore[arg-type]

    for key, node in by_udev.items():
        other = by_files[key].device
        assert chain(node.device) == chain(other), key
        if not os.path.isdir("/run/udev/data"):  # no database: the same properties
            assert node.device.properties == other.properties, key


def test_rules_on_real_devices() -> None:
    udev, _ = real_tree_or_skip()
    names = {n.device.sys_name: n for n in udev.nodes()}
    if "kvm" in names:
        assert rule('KERNEL=="kvm", SUBSYSTEM=="misc"').matches_device(names["kvm"].device)
        assert rule('ENV{MINOR}=="232"').matches_device(names["kvm"].device)
    loop0 = names.get("loop0")
    if loop0 is None:
        pytest.skip("no loop0 here")
    assert rule('SUBSYSTEM=="block", KERNEL=="loop[0-9]*"').matches_device(loop0.device)
    assert rule('SUBSYSTEM=="block", ENV{DEVTYPE}=="disk"').matches_device(loop0.device)
    assert not rule('SUBSYSTEM=="block", KERNEL=="loop[0-9]*", SUBSYSTEMS=="pci"'
                    ).matches_device(loop0.device)


def test_attrs_walk_up_on_a_real_pci_device() -> None:
    """A real block or net device below a PCI function: ATTRS and DRIVERS find the PCI
    function's values above it, and only together on that one device."""
    udev, _ = real_tree_or_skip()
    on_pci = [n for n in udev.nodes() if any(d.subsystem == "pci" for d in ancestry(n.device))]
    if not on_pci:
        pytest.skip("no device node below a PCI function on this machine")
    node = on_pci[0].device
    pci = next(d for d in ancestry(node) if d.subsystem == "pci")
    vendor = pci.attribute("vendor")
    assert vendor
    text = f'KERNEL=="{node.sys_name}", ATTRS{{vendor}}=="{vendor}", DRIVERS=="{pci.driver}"'
    assert rule(text).matches_device(node)
    other = next((d for d in ancestry(node) if d.driver and d.driver != pci.driver), None)
    if other is not None:  # that driver sits on another device than the PCI vendor
        klass = pci.attribute("class")
        assert klass and other.attribute("class") != klass
        assert rule(f'ATTRS{{class}}=="{klass}", DRIVERS=="{pci.driver}"').matches_device(node)
        assert not rule(f'ATTRS{{class}}=="{klass}", DRIVERS=="{other.driver}"'
                        ).matches_device(node)


def test_sysfs_reader_on_a_synthetic_tree(tmp_path: Path) -> None:
    """The same walk on files: a tty below a USB interface below a USB device."""
    root = tmp_path / "sys"
    usb = root / "devices/pci0000:00/0000:00:14.0/usb1/1-1"
    tty = usb / "1-1:1.0/ttyUSB0/tty/ttyUSB0"
    tty.mkdir(parents=True)
    for d in (usb.parent.parent, usb.parent, usb, usb / "1-1:1.0", usb / "1-1:1.0/ttyUSB0", tty):
        (d / "uevent").write_text("")
    (usb / "idVendor").write_text("0403\n")
    (tty / "uevent").write_text("MAJOR=188\nMINOR=0\nDEVNAME=ttyUSB0\n")
    (root / "class/tty").mkdir(parents=True)
    (tty / "subsystem").symlink_to(os.path.relpath(root / "class/tty", tty))
    (root / "dev/char").mkdir(parents=True)
    (root / "dev/char/188:0").symlink_to(os.path.relpath(tty, root / "dev/char"))
    [node] = list(DeviceTree(root).nodes())
    assert (node.kind, node.major, node.minor, node.devname) == ("char", 188, 0, "ttyUSB0")
    assert node.device.subsystem == "tty"
    assert [d.sys_name for d in ancestry(node.device)] == [
        "ttyUSB0", "ttyUSB0", "1-1:1.0", "1-1", "usb1", "0000:00:14.0"]
    assert rule('SUBSYSTEM=="tty", ATTRS{idVendor}=="0403"').matches_device(node.device)
    assert node.device.env("DEVPATH") == \
        "/devices/pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0/ttyUSB0/tty/ttyUSB0"
