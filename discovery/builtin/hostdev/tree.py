"""The node's devices with device nodes, as the ``hostdev`` rules see them.

Every device with a device node is listed by the kernel under ``<sysfs>/dev/char`` and
``<sysfs>/dev/block`` (``MAJOR:MINOR`` → the device directory; sysfs-dev ABI). Each is read
as a :class:`~drakit.discovery.builtin.hostdev.rules.DeviceView` by one of two readers:

- :class:`UdevDevice` (``/sys``): a ``pyudev.Device``. Its properties are the kernel's
  uevent properties plus, where udevd runs, its database (``ID_SERIAL``, ``ID_PATH`` …).
- :class:`SysfsDevice` (any other sysfs root: a synthetic tree in tests, a host sysfs
  mounted elsewhere): files read below that root, the way libudev reads them (``uevent``
  for properties, the ``subsystem`` and ``driver`` links, the parent being the nearest
  directory above that has a ``uevent`` file). It has no udev database.

Attribute reads follow sd-device: a value's trailing newline is dropped, a symlink
attribute gives the last component of its target only for ``driver``, ``subsystem`` and
``module`` (other links read as missing).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from drakit.discovery.sysfs import Sysfs

_LINK_ATTRIBUTES = frozenset({"driver", "subsystem", "module"})
NODE_KINDS = ("char", "block")
"""``<sysfs>/dev/<kind>``: the two kinds of device node (CDI type ``c`` and ``b``)."""


def _text(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8").removesuffix("\n")
    except UnicodeDecodeError:
        return None


class SysfsDevice:
    """One device directory ``path`` (resolved, below ``sysfs.root``) read from files."""

    def __init__(self, sysfs: Sysfs, path: str) -> None:
        self.sysfs = sysfs
        self.path = path

    @property
    def sys_name(self) -> str:
        return os.path.basename(self.path)

    @cached_property
    def subsystem(self) -> str:
        return self.sysfs.link_name(os.path.join(self.path, "subsystem")) or ""

    @cached_property
    def driver(self) -> str:
        return self.sysfs.link_name(os.path.join(self.path, "driver")) or ""

    @cached_property
    def parent(self) -> SysfsDevice | None:
        d = os.path.dirname(self.path)
        top = self.sysfs.path("devices")
        while d.startswith(top + os.sep):
            if os.path.isfile(os.path.join(d, "uevent")):
                return SysfsDevice(self.sysfs, d)
            d = os.path.dirname(d)
        return None

    def attribute(self, name: str) -> str | None:
        full = os.path.join(self.path, name)
        if os.path.islink(full):
            return self.sysfs.link_name(full) if name in _LINK_ATTRIBUTES else None
        return _text(self.sysfs.read_bytes(full))

    @cached_property
    def properties(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for line in (_text(self.sysfs.read_bytes(os.path.join(self.path, "uevent"))) or
                     "").splitlines():
            key, sep, value = line.partition("=")
            if sep and key:
                out[key] = value
        if out.get("DEVNAME") and not out["DEVNAME"].startswith("/"):
            out["DEVNAME"] = "/dev/" + out["DEVNAME"]   # as libudev spells it
        out["DEVPATH"] = "/" + "/".join(self.sysfs.relative_parts(self.path))
        if self.subsystem:
            out["SUBSYSTEM"] = self.subsystem
        return out

    def env(self, name: str) -> str | None:
        return self.properties.get(name)

    @property
    def device_path(self) -> str:
        """The devpath, ``/devices/…``."""
        return self.properties["DEVPATH"]

    @property
    def device_links(self) -> list[str]:
        """Symlinks to the node that udevd made (none without its database)."""
        return []


class UdevDevice:
    """A ``pyudev.Device`` as a rule view."""

    def __init__(self, device: Any) -> None:
        self.device = device

    @property
    def sys_name(self) -> str:
        return str(self.device.sys_name)

    @property
    def subsystem(self) -> str:
        return str(self.device.subsystem or "")

    @property
    def driver(self) -> str:
        return str(self.device.driver or "")

    @cached_property
    def parent(self) -> UdevDevice | None:
        parent = self.device.parent
        return UdevDevice(parent) if parent is not None else None

    def attribute(self, name: str) -> str | None:
        try:
            raw = self.device.attributes.get(name)
        except (OSError, ValueError):
            return None
        return _text(raw)

    @cached_property
    def properties(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in self.device.properties.items()}

    def env(self, name: str) -> str | None:
        return self.properties.get(name)

    @property
    def device_path(self) -> str:
        return str(self.device.device_path)

    @property
    def device_links(self) -> list[str]:
        return [str(p) for p in self.device.device_links]


HostDevice = SysfsDevice | UdevDevice


@dataclass(frozen=True)
class NodeEntry:
    """A device with a node: its ``kind`` (``char`` or ``block``), ``major``:``minor``
    and the device view."""

    kind: str
    major: int
    minor: int
    device: HostDevice

    @property
    def cdi_type(self) -> str:
        """CDI ``DeviceNode.type``: ``c`` or ``b``."""
        return "b" if self.kind == "block" else "c"

    @property
    def devname(self) -> str | None:
        """The node's path below ``/dev`` (``DEVNAME`` without ``/dev/``: ``net/tun``), or
        None."""
        name = (self.device.env("DEVNAME") or "").removeprefix("/dev/").lstrip("/")
        return name or None


class DeviceTree:
    """Reads the devices with nodes below ``sysfs_root`` (pyudev for ``/sys``)."""

    def __init__(self, sysfs_root: str | os.PathLike[str], *, use_udev: bool | None = None
                 ) -> None:
        self.sysfs = Sysfs(Path(sysfs_root))
        if use_udev is None:
            use_udev = os.path.normpath(os.fspath(sysfs_root)) == "/sys"
        self._udev: Any = None
        self._context: Any = None
        if use_udev:
            import pyudev

            self._udev = pyudev
            self._context = pyudev.Context()   # one: each loads libudev (ldconfig -p)

    def _view(self, path: str) -> HostDevice | None:
        if self._udev is None:
            return SysfsDevice(self.sysfs, path)
        try:
            return UdevDevice(self._udev.Devices.from_sys_path(self._context, path))
        except self._udev.DeviceNotFoundError:
            return None  # gone since the listing

    def by_number(self, kind: str, major: int, minor: int,
                  subsystems: frozenset[str] | None = None) -> NodeEntry | None:
        """The device with node ``kind`` ``major``:``minor``, or None (also when
        ``subsystems`` is given and its subsystem is not among them: read from the
        ``subsystem`` link before the device is opened)."""
        real = self.sysfs.resolve(f"dev/{kind}/{major}:{minor}")
        if real is None:
            return None
        if subsystems is not None and \
                self.sysfs.link_name(os.path.join(real, "subsystem")) not in subsystems:
            return None
        view = self._view(real)
        return NodeEntry(kind, major, minor, view) if view is not None else None

    def nodes(self, subsystems: frozenset[str] | None = None) -> Iterator[NodeEntry]:
        """Every device listed in ``dev/char`` and ``dev/block`` (of ``subsystems`` only,
        when given), in listing order."""
        for kind in NODE_KINDS:
            for entry in self.sysfs.list_dir(f"dev/{kind}"):
                major, sep, minor = entry.partition(":")
                if not (sep and major.isdigit() and minor.isdigit()):
                    continue
                node = self.by_number(kind, int(major), int(minor), subsystems)
                if node is not None:
                    yield node
