"""What a hostdev device is: its stable identity (for its name) and its attributes.

Identity, first that exists (never the enumeration order of the kernel's names):

1. udevd's ``ID_SERIAL`` (with ``ID_USB_INTERFACE_NUM``), where its database exists;
2. a ``serial`` attribute of the device or a parent up to the first USB device (USB
   devices, NVMe controllers, virtio disks; not a hub's), with the USB vendor/product ids
   and interface number on the way;
3. udevd's ``ID_PATH``, or the bus path: the PCI function's address, the USB port path
   (``1-1.2``) and interface number; or the network interface a device belongs to (the
   ``tapN`` of a macvtap: its interface name);
4. the kernel name, for devices on no bus (``kvm``, ``fuse``, ``loop0``, ``tun``).

When the identity comes from a parent, the node's kind (its kernel name without the
trailing number: ``ttyUSB``, ``card``, ``renderD``) and its namespace or partition number
are added, so several nodes below one parent keep distinct names.
"""

from __future__ import annotations

import re

from drakit.discovery.builtin.hostdev.rules import DeviceView, ancestry
from drakit.discovery.names import PCI_BUS_ID, PCIE_ROOT
from drakit.discovery.sysfs import PCI_ADDRESS_RE, PCI_ROOT_RE

_TRAILING_NUMBER = re.compile(r"[0-9]+$")
_HEX4 = re.compile(r"(0x)?([0-9a-fA-F]{1,4})")


def _attr(device: DeviceView, name: str) -> str | None:
    value = (device.attribute(name) or "").strip()
    return value or None


def _usb_device(device: DeviceView) -> DeviceView | None:
    """The USB device (not interface) in ``device``'s chain: the one with ``idVendor``."""
    return next((d for d in ancestry(device) if d.subsystem == "usb" and _attr(d, "idVendor")),
                None)


def _pci_device(device: DeviceView) -> DeviceView | None:
    return next((d for d in ancestry(device) if d.subsystem == "pci"
                 and PCI_ADDRESS_RE.fullmatch(d.sys_name)), None)


def _interface_number(device: DeviceView, stop: DeviceView | None = None) -> str | None:
    for d in ancestry(device):
        if d is stop:
            return None
        number = _attr(d, "bInterfaceNumber")
        if d.subsystem == "usb" and number:
            return number
    return None


def _kind(device: DeviceView) -> str:
    parts = [_TRAILING_NUMBER.sub("", device.sys_name) or device.sys_name]
    for attr, prefix in (("nsid", "ns"), ("partition", "p")):
        value = _attr(device, attr)
        if value:
            parts.append(prefix + value)
    return "-".join(parts)


def _serial_holder(device: DeviceView) -> DeviceView | None:
    """The nearest device of the chain with a ``serial``, not above the first USB device
    (a hub's or root hub's serial names the hub, not the device behind it)."""
    for d in ancestry(device):
        if _attr(d, "serial"):
            return d
        if d.subsystem == "usb" and _attr(d, "idVendor"):
            return None
    return None


def identity(device: DeviceView, *, with_kind: bool = True) -> str:
    """The stable identity of ``device`` (see the module docstring), e.g.
    ``0403-6001-A50285BI-if00-ttyUSB``, ``pci-0000:00:02.0-card``, ``kvm``. ``with_kind``
    False leaves out the node kind (a group named after its parent)."""
    serial = device.env("ID_SERIAL")
    if serial:
        number = device.env("ID_USB_INTERFACE_NUM")
        return serial + (f"-if{number}" if number else "")
    holder = _serial_holder(device)
    parts: list[str] = []
    if holder is not None:
        parts = [v for v in (_attr(holder, "idVendor"), _attr(holder, "idProduct"))
                 if v] + [_attr(holder, "serial") or ""]
        number = _interface_number(device, stop=holder)
        if number:
            parts.append(f"if{number}")
    elif device.env("ID_PATH"):
        holder = device
        parts = [device.env("ID_PATH") or ""]
    else:
        usb, pci = _usb_device(device), _pci_device(device)
        if pci is not None:
            parts += ["pci", pci.sys_name]
        if usb is not None:
            parts += ["usb", usb.sys_name]
            number = _interface_number(device, stop=usb)
            if number:
                parts.append(f"if{number}")
        holder = usb or pci
        if holder is None:   # below a network interface (a macvtap's tapN): its name
            holder = next((d for d in ancestry(device) if d.subsystem == "net"), None)
            parts = [holder.sys_name] if holder is not None else []
    if holder is None:
        return device.sys_name
    if with_kind and holder is not device:
        parts.append(_kind(device))
    return "-".join(parts)


def _hex4(value: str | None) -> str | None:
    m = _HEX4.fullmatch(value or "")
    return m.group(2).lower().zfill(4) if m else None


def attributes(device: DeviceView) -> dict[str, str | int]:
    """Attributes for CEL selectors (keys in the driver's domain unless qualified):
    ``subsystem``, ``kernelName``, ``driver`` (the nearest bound driver up the chain),
    ``vendorID`` / ``productID`` (4 lower-case hex digits: USB idVendor/idProduct, else PCI
    vendor/device), ``vendor`` / ``product`` (names: udevd's database, USB strings, disk
    vendor/model), ``serial``, ``usbPath`` (the USB port path, ``1-1.2``), and
    ``resource.kubernetes.io/pciBusID`` / ``pcieRoot`` on PCI. Missing values are left
    out; ``major``/``minor`` come from the node."""
    out: dict[str, str | int] = {"subsystem": device.subsystem, "kernelName": device.sys_name}
    driver = next((d.driver for d in ancestry(device) if d.driver), None)
    usb, pci = _usb_device(device), _pci_device(device)
    vendor_id = _hex4(device.env("ID_VENDOR_ID"))
    product_id = _hex4(device.env("ID_MODEL_ID"))
    if usb is not None:
        vendor_id = vendor_id or _hex4(_attr(usb, "idVendor"))
        product_id = product_id or _hex4(_attr(usb, "idProduct"))
    if pci is not None:
        vendor_id = vendor_id or _hex4(_attr(pci, "vendor"))
        product_id = product_id or _hex4(_attr(pci, "device"))
    parent = device.parent
    disk = parent if device.subsystem == "block" and parent and parent.subsystem == "scsi" \
        else None
    vendor = (device.env("ID_VENDOR_FROM_DATABASE") or (usb and _attr(usb, "manufacturer"))
              or (disk and _attr(disk, "vendor")))
    product = (device.env("ID_MODEL_FROM_DATABASE") or (usb and _attr(usb, "product"))
               or (disk and _attr(disk, "model")))
    holder = _serial_holder(device)
    serial = device.env("ID_SERIAL_SHORT") or (_attr(holder, "serial") if holder else None)
    values: dict[str, str | int | None] = {
        "driver": driver, "vendorID": vendor_id, "productID": product_id,
        "vendor": vendor or None, "product": product or None, "serial": serial,
        "usbPath": usb.sys_name if usb is not None else None,
    }
    if pci is not None:
        values[PCI_BUS_ID] = pci.sys_name
        root = pci.env("DEVPATH") or ""
        top = root.split("/")[2] if root.count("/") >= 3 else ""
        values[PCIE_ROOT] = top if PCI_ROOT_RE.fullmatch(top) else None
    out.update({k: v for k, v in values.items() if v is not None and v != ""})
    return out
