"""Synthetic sysfs trees for tests of discovery plugins (this project's and vendors').

:class:`SysfsBuilder` lays out the same shapes the kernel does, with real directories and
relative symlinks, so the code under test reads it exactly as it reads ``/sys``::

    sysfs = SysfsBuilder(tmp_path / "sys")
    sysfs.numa_node(0, cpulist="0-15")
    sysfs.pci_device("0000:3b:00.0", vendor=0x10DE, device=0x2330, pci_class=0x030200,
                     numa_node=0, driver="nvidia")
    sysfs.net_interface("ens1f0", mac="0c:42:a1:00:00:01", pci="0000:3b:00.0",
                        driver="mlx5_core")
    ctx = DiscoveryContext(driver_name="x.example.com", node_name="n1", sysfs_root=sysfs.root)

Layout written (kernel names):

- ``devices/pci<domain>:<bus>/<address>/`` with ``vendor``, ``device``, ``class``,
  ``subsystem_vendor``, ``subsystem_device``, ``numa_node``, ``uevent``; ``subsystem`` →
  ``bus/pci``; ``driver`` → ``bus/pci/drivers/<driver>``; ``iommu_group`` →
  ``kernel/iommu_groups/<n>``; ``bus/pci/devices/<address>`` → the device directory.
- ``devices/…/<address>/net/<ifname>/`` (or ``devices/virtual/net/<ifname>/``) with
  ``address``, ``mtu``, ``ifindex``, ``type``, ``operstate``, ``uevent``; ``device`` → the
  parent device; ``class/net/<ifname>`` → the interface directory.
- ``devices/system/node/node<N>/cpulist`` and ``devices/system/node/online``.

:func:`device_node_stand_in` makes a device node a test can use without root (for the
``dev_root`` of :class:`~drakit.discovery.plugin.DiscoveryContext`, ``drakit run
--dev-root`` and ``DriverHarness(dev_root=...)``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from drakit.discovery.sysfs import PCI_ADDRESS_RE


def device_node_stand_in(dev_root: str | os.PathLike[str], name: str,
                         like: str = "/dev/null") -> Path:
    """``<dev_root>/<name>``: a stand-in for the device node ``/dev/<name>`` that the CDI
    host-node check accepts, made without root.

    Creating a character device needs ``mknod`` and CAP_MKNOD (root); a symlink to an
    existing one does not, and the check follows symlinks: the spec then names
    ``/dev/<name>`` with ``like``'s type and major/minor (``/dev/null``: ``c`` 1:3). Point
    the agent's dev root at ``dev_root`` (``drakit run --dev-root``, ``DriverHarness(...,
    dev_root=...)``) so that ``/dev/<name>`` is looked up there. ``name`` may contain
    ``/`` (``dri/card0``); parent directories are created. Returns the path made.
    Raises ``ValueError`` when ``like`` is not a character or block device."""
    import stat

    mode = os.stat(like).st_mode
    if not (stat.S_ISCHR(mode) or stat.S_ISBLK(mode)):
        raise ValueError(f"device_node_stand_in: {like} is not a character or block device")
    rel = os.path.normpath("/" + name).lstrip("/")
    if not rel or rel == ".":
        raise ValueError(f"device_node_stand_in: {name!r} is not a device name")
    path = Path(dev_root) / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.exists():
        path.unlink()
    path.symlink_to(like)
    return path


class SysfsBuilder:
    """Builds a synthetic sysfs tree under ``root`` (created if missing).

    Methods return the created device directory. Every value is written as the kernel
    writes it (hex with ``0x``, trailing newline). Errors: ``ValueError`` for a malformed
    PCI address or an unknown parent device. Paths are handled as strings internally so
    that thousands of devices take well under a second or two.
    """

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._root = os.path.realpath(self.root)
        self._next_ifindex = 2
        self._made_dirs: set[str] = set()
        self._pci_dirs: dict[str, str] = {}

    # -- primitives ------------------------------------------------------------------------

    def _abs(self, rel: str | Path) -> str:
        return os.path.join(self._root, os.fspath(rel))

    def _mkdir(self, path: str) -> None:
        if path not in self._made_dirs:
            os.makedirs(path, exist_ok=True)
            self._made_dirs.add(path)

    def write(self, rel: str | Path, content: str | bytes) -> Path:
        """Write one file at ``rel`` (relative to ``root``), creating parents; returns it.
        Use it for odd content: garbage, binary, empty, huge."""
        path = self._abs(rel)
        self._mkdir(os.path.dirname(path))
        data = content if isinstance(content, bytes) else content.encode()
        with open(path, "wb") as f:
            f.write(data)
        return Path(path)

    def symlink(self, rel: str | Path, target_rel: str | Path) -> Path:
        """A relative symlink at ``rel`` pointing to ``target_rel`` (both relative to
        ``root``), replacing an existing link."""
        rel_s = os.path.normpath(os.fspath(rel))
        target_s = os.path.normpath(os.fspath(target_rel))
        link = self._abs(rel_s)
        self._mkdir(os.path.dirname(link))
        depth = rel_s.count("/")  # both are normalised, relative to root, without ".."
        target = "../" * depth + target_s
        try:
            os.symlink(target, link)
        except FileExistsError:
            os.unlink(link)
            os.symlink(target, link)
        return Path(link)

    def _files(self, directory: str, files: dict[str, str]) -> None:
        self._mkdir(directory)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
        for name, value in files.items():
            fd = os.open(os.path.join(directory, name), flags, 0o644)
            try:
                os.write(fd, value.encode())
            finally:
                os.close(fd)

    def _pci_rel(self, address: str) -> str:
        """The directory of an existing PCI device relative to the root."""
        rel = self._pci_dirs.get(address)
        if rel is None:
            real = os.path.realpath(self._abs(f"bus/pci/devices/{address}"))
            rel = os.path.relpath(real, self._root)
        return rel

    # -- NUMA ------------------------------------------------------------------------------

    def numa_node(self, node: int, cpulist: str = "0") -> Path:
        """``devices/system/node/node<node>`` with ``cpulist``; ``online`` lists all nodes."""
        base = self._abs("devices/system/node")
        d = os.path.join(base, f"node{node}")
        self._files(d, {"cpulist": f"{cpulist}\n"})
        nodes = sorted(int(n[4:]) for n in os.listdir(base)
                       if n.startswith("node") and n[4:].isdigit())
        self._files(base, {"online": ",".join(str(n) for n in nodes) + "\n"})
        return Path(d)

    # -- PCI -------------------------------------------------------------------------------

    def pci_device(
        self,
        address: str,
        *,
        vendor: int = 0x8086,
        device: int = 0x0001,
        pci_class: int = 0x020000,
        subsystem_vendor: int | None = None,
        subsystem_device: int | None = None,
        numa_node: int | None = None,
        driver: str | None = None,
        iommu_group: int | None = None,
        parent: str | None = None,
        host_bridge: str | None = None,
        extra: dict[str, str] | None = None,
    ) -> Path:
        """A PCI function at ``address`` (``0000:3b:00.0``).

        It sits directly below its host bridge ``devices/pci<domain>:<bus>`` unless
        ``parent`` names an existing PCI device (a bridge/switch port) to nest it under, or
        ``host_bridge`` gives the bridge directory's path below ``devices/`` (e.g. a
        Hyper-V-like ``LNXSYSTM:00/VMBUS:01/pci7870:00`` to mimic a virtualised topology).
        ``numa_node`` None writes ``-1``. ``extra`` adds (or replaces) attribute files.
        """
        if not PCI_ADDRESS_RE.fullmatch(address):
            raise ValueError(f"PCI address {address!r} is not in domain:bus:device.function form")
        if parent is not None:
            if not os.path.exists(self._abs(f"bus/pci/devices/{parent}")):
                raise ValueError(f"parent PCI device {parent!r} does not exist")
            base = self._pci_rel(parent)
        else:
            domain, bus, _ = address.split(":")
            base = "devices/" + (host_bridge or f"pci{domain}:{bus}")
        rel = f"{base}/{address}"
        files = {
            "vendor": f"0x{vendor:04x}\n",
            "device": f"0x{device:04x}\n",
            "class": f"0x{pci_class:06x}\n",
            "subsystem_vendor": f"0x{(subsystem_vendor or vendor):04x}\n",
            "subsystem_device": f"0x{(subsystem_device or device):04x}\n",
            "numa_node": f"{-1 if numa_node is None else numa_node}\n",
            "uevent": f"PCI_SLOT_NAME={address}\nPCI_ID={vendor:04X}:{device:04X}\n"
                      + (f"DRIVER={driver}\n" if driver else ""),
        }
        files.update(extra or {})
        self._files(self._abs(rel), files)
        self.symlink(f"{rel}/subsystem", "bus/pci")
        self.symlink(f"bus/pci/devices/{address}", rel)
        self._pci_dirs[address] = rel
        if driver:
            self._mkdir(self._abs(f"bus/pci/drivers/{driver}"))
            self.symlink(f"{rel}/driver", f"bus/pci/drivers/{driver}")
        if iommu_group is not None:
            self._mkdir(self._abs(f"kernel/iommu_groups/{iommu_group}/devices"))
            self.symlink(f"{rel}/iommu_group", f"kernel/iommu_groups/{iommu_group}")
        return Path(self._abs(rel))

    def remove_pci_device(self, address: str) -> None:
        """Remove a PCI function (its directory, with anything below it, and its bus link)."""
        self._remove(f"bus/pci/devices/{address}")

    # -- net -------------------------------------------------------------------------------

    def net_interface(
        self,
        name: str,
        *,
        mac: str = "02:00:00:00:00:01",
        mtu: int = 1500,
        pci: str | None = None,
        via: str | None = None,
        driver: str | None = None,
        operstate: str = "up",
        ifindex: int | None = None,
        extra: dict[str, str] | None = None,
    ) -> Path:
        """A network interface ``name``. ``pci`` puts it below that (existing) PCI device,
        optionally through an intermediate device ``via`` (e.g. ``virtio2``, as virtio-net
        does); without ``pci`` it is virtual (``devices/virtual/net``). ``driver`` is the
        driver of its parent device (for a PCI NIC without ``via``, it is set on the PCI
        device unless that already has one)."""
        parent: str | None = None
        if pci is not None:
            if not os.path.exists(self._abs(f"bus/pci/devices/{pci}")):
                raise ValueError(f"PCI device {pci!r} does not exist")
            parent = self._pci_rel(pci)
            if via:
                parent = f"{parent}/{via}"
                self._mkdir(self._abs(parent))
                self.symlink(f"{parent}/subsystem", "bus/virtio")
                if driver:
                    self._mkdir(self._abs(f"bus/virtio/drivers/{driver}"))
                    self.symlink(f"{parent}/driver", f"bus/virtio/drivers/{driver}")
            elif driver and not os.path.islink(self._abs(f"{parent}/driver")):
                self._mkdir(self._abs(f"bus/pci/drivers/{driver}"))
                self.symlink(f"{parent}/driver", f"bus/pci/drivers/{driver}")
            rel = f"{parent}/net/{name}"
        else:
            rel = f"devices/virtual/net/{name}"
        if ifindex is None:
            ifindex = self._next_ifindex
            self._next_ifindex += 1
        files = {
            "address": f"{mac}\n",
            "mtu": f"{mtu}\n",
            "ifindex": f"{ifindex}\n",
            "type": "1\n",
            "operstate": f"{operstate}\n",
            "uevent": f"INTERFACE={name}\nIFINDEX={ifindex}\n",
        }
        files.update(extra or {})
        self._files(self._abs(rel), files)
        if parent is not None:
            self.symlink(f"{rel}/device", parent)
        self.symlink(f"{rel}/subsystem", "class/net")
        self.symlink(f"class/net/{name}", rel)
        return Path(self._abs(rel))

    def remove_net_interface(self, name: str) -> None:
        """Remove a network interface (its directory and ``class/net`` link)."""
        self._remove(f"class/net/{name}")

    # -- any device --------------------------------------------------------------------------

    def device(
        self,
        rel: str,
        *,
        subsystem: str,
        driver: str | None = None,
        attrs: dict[str, str] | None = None,
        uevent: dict[str, str] | None = None,
        node: tuple[str, int, int] | None = None,
    ) -> Path:
        """A device directory ``rel`` (below ``root``, e.g.
        ``devices/pci0000:00/0000:00:14.0/usb1/1-1``), with a ``uevent`` file (``uevent``
        properties, one ``KEY=VALUE`` a line), ``subsystem`` → ``class/<subsystem>``,
        ``driver`` → ``bus/<subsystem>/drivers/<driver>``, and attribute files ``attrs``
        (written as given: end values with a newline as the kernel does). ``node`` =
        (``"char"`` | ``"block"``, major, minor) makes it a device with a node: ``dev``,
        ``MAJOR``/``MINOR`` in the properties, ``dev/<kind>/<major>:<minor>`` → the
        directory. Create parents first: a parent device is a directory with a
        ``uevent`` file."""
        props = dict(uevent or {})
        files = dict(attrs or {})
        if node is not None:
            kind, major, minor = node
            if kind not in ("char", "block"):
                raise ValueError(f"node kind is 'char' or 'block', not {kind!r}")
            props = {"MAJOR": str(major), "MINOR": str(minor), **props}
            files["dev"] = f"{major}:{minor}\n"
        files["uevent"] = "".join(f"{k}={v}\n" for k, v in props.items())
        path = self._abs(rel)
        self._files(path, files)
        self._mkdir(self._abs(f"class/{subsystem}"))
        self.symlink(f"{rel}/subsystem", f"class/{subsystem}")
        if driver:
            self._mkdir(self._abs(f"bus/{subsystem}/drivers/{driver}"))
            self.symlink(f"{rel}/driver", f"bus/{subsystem}/drivers/{driver}")
        if node is not None:
            self.symlink(f"dev/{node[0]}/{node[1]}:{node[2]}", rel)
        return Path(path)

    def remove_device(self, rel: str) -> None:
        """Remove a device directory (with anything below it) and the ``dev/*`` links
        that led into it."""
        real = os.path.realpath(self._abs(rel))
        for kind in ("char", "block"):
            directory = self._abs(f"dev/{kind}")
            for name in os.listdir(directory) if os.path.isdir(directory) else []:
                link = os.path.join(directory, name)
                target = os.path.realpath(link)
                if target == real or target.startswith(real + os.sep):
                    os.unlink(link)
        shutil.rmtree(real, ignore_errors=True)
        self._made_dirs.clear()

    def _remove(self, rel_link: str) -> None:
        link = self._abs(rel_link)
        if os.path.islink(link):
            real = os.path.realpath(link)
            os.unlink(link)
            shutil.rmtree(real, ignore_errors=True)
            self._made_dirs.clear()  # the caches may name removed directories
            self._pci_dirs.clear()


class LoopDevice:
    """A loop device for hot-plug tests: ``backing`` (a file, created with ``size`` bytes
    of ``pattern`` repeated) attached by ``losetup -f --show`` (root), so the kernel sends
    real ``change`` uevents for ``block/loopN`` on :meth:`attach` and :meth:`detach`.

    :attr:`path` is the ``/dev/loopN`` it got (None while detached). Use it as a context
    manager to detach at the end. Raises ``subprocess.CalledProcessError`` when ``losetup``
    fails (no free loop device, no permission) and ``FileNotFoundError`` without it.
    """

    def __init__(self, backing: str | os.PathLike[str], pattern: bytes = b"drakit-loop-",
                 size: int = 1 << 20) -> None:
        self.backing = Path(backing)
        self.pattern = pattern
        self.size = size
        self.backing.write_bytes((pattern * (size // len(pattern) + 1))[:size])
        self.path: str | None = None

    @property
    def name(self) -> str:
        """The kernel name (``loop3``) of the attached device."""
        if self.path is None:
            raise RuntimeError(f"{self.backing} is not attached")
        return os.path.basename(self.path)

    def attach(self) -> str:
        """Attach to the first free loop device; returns its path (``/dev/loop3``)."""
        out = subprocess.run(["losetup", "-f", "--show", str(self.backing)], check=True,
                             capture_output=True, text=True, timeout=30)
        self.path = out.stdout.strip()
        return self.path

    def detach(self) -> None:
        """Detach (nothing when not attached; a failure is ignored)."""
        if self.path is not None:
            subprocess.run(["losetup", "-d", self.path], check=False, capture_output=True,
                           timeout=30)
            self.path = None

    def __enter__(self) -> LoopDevice:
        self.attach()
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()
