"""Safe reads from a sysfs tree under an injectable root (``/sys`` or a synthetic tree).

Every reader returns ``None`` for a file that is missing, unreadable, not a regular file,
larger than the size cap, binary (NUL bytes, invalid UTF-8) or otherwise malformed; none
of them raises for one odd file, so one strange device never stops discovery.

PCI facts follow the kernel's sysfs layout (Documentation/ABI/testing/sysfs-bus-pci):
``bus/pci/devices/<address>`` is a symlink into ``devices/pci<domain>:<bus>/…/<address>``;
the standard attribute ``resource.kubernetes.io/pcieRoot`` is that ``pci<domain>:<bus>``
component, as k8s.io/dynamic-resource-allocation ``deviceattribute`` derives it.

Paths are plain strings internally (discovery of thousands of devices must stay well under
a second); every method accepts ``str`` or ``Path``, relative to the root or absolute.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from pathlib import Path

DEFAULT_MAX_BYTES = 4096
"""Default size cap of one attribute read, bytes (a sysfs attribute is at most a page)."""

PCI_ADDRESS_RE = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", re.ASCII)
"""Extended BDF notation, ``domain:bus:device.function`` (lower-case hex)."""
PCI_ROOT_RE = re.compile(r"pci[0-9a-f]{4,8}:[0-9a-f]{2}", re.ASCII)
"""A PCI host bridge directory under ``devices/`` (``pci0000:00``)."""

_NOT_PCI_FUNCTION = frozenset({"usb", "thunderbolt"})
"""Buses between a device and its PCI ancestor that make that ancestor a controller, not
the device's own PCI function (a USB NIC is not the USB host controller)."""

_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
"""Control characters other than whitespace: binary content, not a text attribute."""

_log = logging.getLogger(__name__)

StrPath = str | Path


class Sysfs:
    """Reader of one sysfs tree.

    ``root`` replaces ``/sys``; paths given to the readers are relative to it (``"class/net"``)
    or absolute paths inside it. ``max_bytes`` caps one attribute read. Symlinks are
    resolved, and a link that leads outside ``root`` is treated as missing (a synthetic tree
    can never make discovery read the host's files). Resolved paths are returned as
    absolute strings below ``root``.
    """

    def __init__(
        self,
        root: StrPath = Path("/sys"),
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        logger: logging.Logger | None = None,
    ) -> None:
        self.root = Path(root)
        self._root = os.path.normpath(os.path.abspath(root))
        self._real_root = os.path.realpath(self._root)
        self.max_bytes = max_bytes
        self.log = logger or _log
        self._warned: set[str] = set()

    # -- paths -----------------------------------------------------------------------------

    def path(self, *parts: StrPath) -> str:
        """``root`` joined with ``parts`` (an absolute first part is kept as it is)."""
        return os.path.join(self._root, *[os.fspath(p) for p in parts])

    def _inside(self, path: str) -> bool:
        return path == self._root or path.startswith(self._root + os.sep)

    def resolve(self, path: StrPath) -> str | None:
        """The real path of ``path`` (all symlinks resolved, spelled below ``root``), or
        None when it does not exist or leads outside ``root``."""
        full = self.path(path)
        try:
            real = os.path.realpath(full, strict=True)
        except (OSError, RuntimeError):
            return None
        if real == self._real_root or real.startswith(self._real_root + os.sep):
            return self._root + real[len(self._real_root):]
        self.warn_once(f"escape:{full}", "sysfs link %s leads outside %s; ignored",
                       full, self._root)
        return None

    def entry(self, directory: StrPath, name: str) -> str | None:
        """The real path of entry ``name`` of a real (not symlinked) ``directory``, following
        at most one symlink (how ``class/*`` and ``bus/*/devices`` entries are built); falls
        back to :meth:`resolve` for anything else. None when missing or outside ``root``."""
        full = os.path.join(self.path(directory), name)
        try:
            target = os.readlink(full)
        except OSError:
            return full if os.path.exists(full) else None
        real = os.path.normpath(os.path.join(os.path.dirname(full), target))
        if not self._inside(real):
            return self.resolve(full)
        return real if os.path.exists(real) else None

    def follow(self, real_dir: str, name: str) -> str | None:
        """The target of link ``name`` inside the resolved directory ``real_dir`` (e.g. an
        interface's ``device``), or None when it is not a link, dangles or leaves ``root``."""
        return self.entry(real_dir, name) if os.path.islink(os.path.join(real_dir, name)) \
            else None

    def relative_parts(self, real: str) -> tuple[str, ...]:
        """Components of a resolved path below ``root`` (``("devices", "pci0000:00", …)``)."""
        rel = os.path.relpath(real, self._root)
        return tuple(p for p in rel.split(os.sep) if p and p != ".")

    def list_dir(self, path: StrPath) -> list[str]:
        """Sorted entry names of a directory; empty when it is missing or unreadable."""
        try:
            return sorted(os.listdir(self.path(path)))
        except OSError:
            return []

    def link_name(self, path: StrPath) -> str | None:
        """The last component of a symlink's target (a ``driver`` link → the driver name),
        or None when ``path`` is not a symlink."""
        try:
            target = os.readlink(self.path(path))
        except OSError:
            return None
        name = os.path.basename(os.path.normpath(target))
        return name or None

    # -- attribute readers -----------------------------------------------------------------

    def read_bytes(self, path: StrPath) -> bytes | None:
        """Raw content of a regular file of at most ``max_bytes`` bytes, or None."""
        p = self.path(path)
        try:
            fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            data = os.read(fd, self.max_bytes + 1)
        except OSError:
            return None
        finally:
            os.close(fd)
        if len(data) > self.max_bytes:
            self.warn_once(f"huge:{p}", "sysfs attribute %s is larger than %d bytes; ignored",
                           p, self.max_bytes)
            return None
        return data

    def read_attr(self, path: StrPath) -> str | None:
        """A small text attribute, whitespace-trimmed; None when missing, empty, binary
        (NUL bytes, invalid UTF-8, control characters other than whitespace) or too big."""
        data = self.read_bytes(path)
        if data is None:
            return None
        try:
            text = data.decode("utf-8").strip()
        except UnicodeDecodeError:
            return None
        if not text or _CONTROL_RE.search(text):
            return None
        return text

    def read_int(self, path: StrPath, base: int = 10) -> int | None:
        """An integer attribute (``base`` 16 accepts an optional ``0x``; 0 = auto), or None."""
        text = self.read_attr(path)
        if text is None:
            return None
        try:
            return int(text, base)
        except ValueError:
            return None

    def read_hex(self, path: StrPath, digits: int) -> str | None:
        """A hex attribute such as PCI ``vendor`` (``0x10de``) as ``digits`` lower-case hex
        digits without ``0x`` (``10de``), or None when it is not a hex number that fits."""
        value = self.read_int(path, 16)
        if value is None or value < 0 or value >= 16**digits:
            return None
        return f"{value:0{digits}x}"

    # -- topology --------------------------------------------------------------------------

    def pci_address(self, device_path: StrPath) -> str | None:
        """The PCI address (``0000:3b:00.0``) of the PCI device that ``device_path`` is or
        sits below (e.g. ``class/net/eth0`` → the NIC's function, also through a virtio
        device), or None when it is not on PCI (virtual devices) or sits behind a
        USB/Thunderbolt bus."""
        real = self.resolve(device_path)
        return None if real is None else self.pci_address_of(real)

    def pci_address_of(self, real: str) -> str | None:
        """:meth:`pci_address` for an already resolved path (saves the resolution)."""
        d = real
        while self._inside(d) and d != self._root:
            name = os.path.basename(d)
            if PCI_ADDRESS_RE.fullmatch(name):
                return name
            if self.link_name(os.path.join(d, "subsystem")) in _NOT_PCI_FUNCTION:
                return None
            d = os.path.dirname(d)
        return None

    def pci_device_path(self, address: str) -> str | None:
        """The resolved device directory of PCI function ``address`` (via ``bus/pci/devices``)."""
        return self.entry("bus/pci/devices", address)

    def pcie_root(self, address: str, real: str | None = None) -> str | None:
        """The PCIe root complex of ``address`` as ``pci<domain>:<bus>`` (standard attribute
        ``resource.kubernetes.io/pcieRoot``), from the ``bus/pci/devices/<address>`` symlink
        (or ``real``, the device's resolved directory or one below it, when known).

        Returns None, with one warning per device, when the device path does not start with
        ``devices/pci<domain>:<bus>/`` (virtualised topologies such as Hyper-V vPCI, where
        the host bridge sits below a VMBus device): the attribute is then left out.
        """
        if real is None:
            real = self.pci_device_path(address)
            if real is None:
                return None
        parts = self.relative_parts(real)
        if len(parts) >= 3 and parts[0] == "devices" and PCI_ROOT_RE.fullmatch(parts[1]):
            return parts[1]
        self.warn_once(f"pcieroot:{address}",
                       "PCI device %s is not below a PCI host bridge (%s); "
                       "leaving out resource.kubernetes.io/pcieRoot", address, "/".join(parts))
        return None

    def numa_node(self, device_path: StrPath) -> int | None:
        """The NUMA node from ``<device>/numa_node``; None when absent or ``-1`` (no NUMA
        affinity)."""
        value = self.read_int(os.path.join(os.fspath(device_path), "numa_node"))
        return value if value is not None and value >= 0 else None

    def numa_nodes(self) -> list[int]:
        """The NUMA node ids under ``devices/system/node`` (``node0`` …), sorted."""
        out = []
        for entry in self.list_dir("devices/system/node"):
            m = re.fullmatch(r"node([0-9]+)", entry)
            if m:
                out.append(int(m.group(1)))
        return sorted(out)

    # -- logging ---------------------------------------------------------------------------

    def warn_once(self, key: str, msg: str, *args: object) -> None:
        """Log a warning once per ``key`` for this reader (rescans do not repeat it)."""
        if key in self._warned:
            return
        self._warned.add(key)
        self.log.warning(msg, *args)
