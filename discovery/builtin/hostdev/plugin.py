"""The ``hostdev`` discoverer: the node's own device files for pods, selected by rules.

Each rule (:class:`~drakit.discovery.builtin.hostdev.options.RuleSpec`) matches device
nodes by udev match keys (:mod:`~drakit.discovery.builtin.hostdev.rules`) or by path glob;
each match is one device (or, with ``group: parent``, the matches below one parent device
are one device) named ``<rule>-<identity>`` (:mod:`~drakit.discovery.builtin.hostdev.describe`),
a DNS label that never depends on enumeration order.

Published per device: the attributes of
:func:`~drakit.discovery.builtin.hostdev.describe.attributes` plus ``rule``, ``major``,
``minor`` and ``devNode`` (the host path); block devices their size in bytes as capacity
``size``. Sharing per rule: ``exclusive`` (the default: one
claim at a time), ``shared`` (``allowMultipleAllocations``: any number of claims), or a
number N: N slots, capacity ``slots`` with a requestPolicy of 1 by default and 1 to N in
steps of 1 (consumable capacity, KEP-5075; resource.k8s.io/v1 and v1beta2 from Kubernetes
1.34, gate DRAConsumableCapacity).

Prepare reads each node from the host at that moment (type, major, minor and mode by
``stat``) into CDI device nodes with the rule's permissions, container path, uid, gid and
file mode; adds the rule's mounts and ``<env>=<path in the container>``. A node that went
away since it was published fails that claim with a message naming the node. Nothing is
changed on the node, so a claim is recorded in one checkpoint write.

Hot-plug: the subsystems named by the rules' ``SUBSYSTEM==`` keys, and those of the
devices that rules without one match at start, are watched for uevents.
"""

from __future__ import annotations

import glob
import logging
import os
import stat
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from drakit.cdi.errors import HostNodeError
from drakit.cdi.hostnodes import HostNodes
from drakit.cdi.spec import ContainerEdits, DeviceNode, Mount
from drakit.discovery.builtin._common import put
from drakit.discovery.builtin.hostdev import describe
from drakit.discovery.builtin.hostdev.options import HostdevOptions, RuleSpec
from drakit.discovery.builtin.hostdev.rules import Rule
from drakit.discovery.builtin.hostdev.tree import DeviceTree, HostDevice, NodeEntry
from drakit.discovery.model import CapacityRequestPolicy, Device, DeviceCapacity, Pool, ValidRange
from drakit.discovery.names import dns_labels
from drakit.discovery.plugin import (
    DeviceRequest,
    DiscoveryContext,
    DiscoveryPlugin,
    PreparedDevice,
    env_name,
)

SECTOR_BYTES = 512
"""The unit of a block device's ``size`` attribute (sysfs-block ABI)."""
SLOTS = "slots"
"""Capacity name of a rule shared by a number of slots."""

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeRef:
    """One node of a device: the host path, where it appears in the container, the kernel
    name (or the path's last part for a node without a sysfs device), and the node as
    published: CDI type (``c`` or ``b``), major and minor."""

    host_path: str
    container_path: str
    kernel: str
    type: str
    major: int
    minor: int


@dataclass(frozen=True)
class Found:
    """A device as discovered: its rule and nodes (the primary node first)."""

    spec: RuleSpec
    nodes: tuple[NodeRef, ...]


@dataclass(frozen=True)
class _Hit:
    host_path: str
    kind: str           # char | block
    major: int
    minor: int
    entry: NodeEntry | None

    @property
    def device(self) -> HostDevice | None:
        return self.entry.device if self.entry is not None else None


class HostdevDiscovery(DiscoveryPlugin):
    """Device nodes of the host selected by udev-style rules (see the module docstring)."""

    name: ClassVar[str] = "hostdev"
    # prepare reads the host's nodes and computes container edits; nothing to roll back
    prepare_changes_node: ClassVar[bool] = False

    def __init__(self, context: DiscoveryContext) -> None:
        super().__init__(context)
        self.options: HostdevOptions = context.parse_options(HostdevOptions)
        self.rules: list[tuple[RuleSpec, list[Rule]]] = [
            (spec, spec.parsed) for spec in self.options.rules]
        # every device seen since start: a prepare of one that went away names its nodes
        self._seen: dict[str, Found] = {}
        self.tree = DeviceTree(context.sysfs_root)
        self.host_nodes = HostNodes("/", context.dev_root)
        self._found: dict[str, Found] = {}
        self._overlaps: dict[str, tuple[str, ...]] = {}
        self._watched = self._subsystems()

    # -- hot-plug --------------------------------------------------------------------------

    def watched_subsystems(self) -> tuple[str, ...]:
        return self._watched

    def _subsystems(self) -> tuple[str, ...]:
        out: set[str] = set()
        open_rules = False
        for _spec, rules in self.rules:
            for rule in rules:
                subs = rule.subsystems()
                if subs is None:
                    open_rules = True
                else:
                    out |= subs
        if open_rules:  # rules without SUBSYSTEM== watch what they match now
            entries = self._entries()
            for spec, rules in self.rules:
                for rule in rules:
                    if rule.subsystems() is not None:
                        continue
                    found = {hit.device.subsystem for hit in self._hits([rule], entries)
                             if hit.device is not None and hit.device.subsystem}
                    if not found:
                        _log.warning(
                            "hostdev rule %s: %r names no SUBSYSTEM and matches no device of "
                            "one now: devices it matches later are found by the periodic "
                            "rescan, not on hot-plug (udev keys with SUBSYSTEM==, such as "
                            "'SUBSYSTEM==\"tty\", KERNEL==\"ttyUSB*\"', are watched)",
                            spec.name, rule.text)
                    out |= found
        return tuple(sorted(out))

    # -- discovery -------------------------------------------------------------------------

    def _entries(self) -> list[NodeEntry]:
        """The devices the udev-style rules may match: of their subsystems only when every
        one of them pins its subsystem."""
        udev_rules = [r for _s, rules in self.rules for r in rules if r.path_glob is None]
        if not udev_rules:
            return []
        pinned = [r.subsystems() for r in udev_rules]
        wanted = None if any(p is None for p in pinned) else \
            frozenset().union(*(p for p in pinned if p is not None))
        return list(self.tree.nodes(wanted))

    def _local(self, host_path: str) -> str:
        return str(self.host_nodes.local_path(host_path))

    def _hit_at(self, host_path: str) -> _Hit | None:
        """The node at ``host_path`` as it is now (symlinks followed), or None when it is
        missing or not a char/block device."""
        try:
            st = os.stat(self._local(host_path))
        except (OSError, ValueError):
            return None
        if stat.S_ISCHR(st.st_mode):
            kind = "char"
        elif stat.S_ISBLK(st.st_mode):
            kind = "block"
        else:
            return None
        major, minor = os.major(st.st_rdev), os.minor(st.st_rdev)
        return _Hit(host_path, kind, major, minor, self.tree.by_number(kind, major, minor))

    def _glob(self, pattern: str) -> list[str]:
        """Host paths below /dev matching ``pattern`` (looked up below the dev root)."""
        base = self._local("/dev")
        out = []
        for local in glob.glob(self._local(pattern)):
            rel = os.path.relpath(local, base)
            if not rel.startswith(".."):
                out.append("/dev/" + rel)
        return sorted(out)

    def _hits(self, rules: list[Rule], entries: Iterable[NodeEntry]) -> list[_Hit]:
        hits: dict[str, _Hit] = {}
        for entry in entries:
            if entry.devname and any(r.matches_device(entry.device) for r in rules):
                host = "/dev/" + entry.devname
                if host not in hits and os.path.exists(self._local(host)):
                    hits[host] = _Hit(host, entry.kind, entry.major, entry.minor, entry)
        for rule in rules:
            if rule.path_glob is None:
                continue
            for host in self._glob(rule.path_glob):
                hit = self._hit_at(host)
                if hit is not None:
                    hits.setdefault(host, hit)
        return [hits[k] for k in sorted(hits)]

    def _links(self, spec: RuleSpec) -> dict[str, list[str]]:
        """Real path of a node → host paths of the symlinks to it that ``spec.links``
        matches."""
        out: dict[str, list[str]] = {}
        for pattern in spec.links:
            for host in self._glob(pattern):
                local = self._local(host)
                if os.path.islink(local):
                    out.setdefault(os.path.realpath(local), []).append(host)
        return out

    def discover(self) -> list[Pool]:
        """One pool (``pool`` or the node name) with one device per match (or group)."""
        entries = self._entries()
        raw: list[tuple[str, RuleSpec, list[_Hit]]] = []
        for spec, rules in self.rules:
            try:
                raw.extend(self._devices_of(spec, rules, entries))
            except Exception:  # one odd rule or device never stops discovery
                _log.exception("hostdev: rule %s failed; its devices are left out", spec.name)
        keys = _distinct_keys(raw)
        labels = dns_labels(keys)
        devices: list[Device] = []
        found: dict[str, Found] = {}
        for key, (_name, spec, hits) in zip(keys, raw, strict=True):
            label = labels[key]
            try:
                device, record = self._device(label, spec, hits)
            except Exception:
                _log.exception("hostdev: device %s of rule %s left out", label, spec.name)
                continue
            devices.append(device)
            found[label] = record
        self._found = found
        self._seen.update(found)
        self._warn_shared_nodes(found)
        devices.sort(key=lambda d: d.name)
        return [Pool(name=self.options.pool or self.context.default_pool, devices=devices)]

    def _warn_shared_nodes(self, found: dict[str, Found]) -> None:
        """Warn, once per set of them, about nodes that several rules publish: each rule's
        sharing holds for its own device only (an exclusive device whose node a shared one
        also hands out)."""
        rules_of: dict[str, set[str]] = {}
        for record in found.values():
            for ref in record.nodes:
                rules_of.setdefault(ref.host_path, set()).add(record.spec.name)
        overlaps = {path: tuple(sorted(names)) for path, names in rules_of.items()
                    if len(names) > 1}
        if overlaps and overlaps != self._overlaps:
            _log.warning("hostdev: nodes published by several rules, each rule's sharing "
                         "holding for its own device only: %s", "; ".join(
                             f"{path} by {', '.join(names)}"
                             for path, names in sorted(overlaps.items())))
        self._overlaps = overlaps

    def _devices_of(self, spec: RuleSpec, rules: list[Rule], entries: list[NodeEntry]
                    ) -> list[tuple[str, RuleSpec, list[_Hit]]]:
        groups: dict[str, list[_Hit]] = {}
        parents: dict[str, HostDevice | None] = {}
        for hit in self._hits(rules, entries):
            key = hit.host_path
            device = hit.device
            if spec.group == "parent" and device is not None and device.parent is not None:
                key = device.parent.device_path
                parents[key] = device.parent
            groups.setdefault(key, []).append(hit)
        named: list[tuple[str, list[_Hit]]] = []
        for key, hits in groups.items():
            parent = parents.get(key)
            if parent is not None:
                ident = describe.identity(parent, with_kind=False)
            elif hits[0].device is not None:
                ident = describe.identity(hits[0].device)
            else:
                ident = hits[0].host_path.removeprefix("/dev/")
            named.append((ident, hits))
        counts: dict[str, int] = {}
        for ident, _h in named:
            counts[ident] = counts.get(ident, 0) + 1
        out = []
        for ident, hits in named:
            if counts[ident] > 1:  # two devices with one identity: the kernel name tells
                ident += "-" + os.path.basename(hits[0].host_path)
            out.append((spec.name if ident == spec.name else f"{spec.name}-{ident}", spec,
                        hits))
        return out

    def _device(self, name: str, spec: RuleSpec, hits: list[_Hit]) -> tuple[Device, Found]:
        primary = hits[0]
        attrs: dict[str, Any] = {}
        if primary.device is not None:
            attrs.update(describe.attributes(primary.device))
        attrs.update({"rule": spec.name, "major": primary.major, "minor": primary.minor,
                      "devNode": primary.host_path})
        attributes: dict[str, Any] = {}
        for key, value in attrs.items():
            put(attributes, key, value, device=name, log=_log)
        capacity: dict[str, DeviceCapacity] = {}
        if primary.kind == "block" and primary.device is not None:
            sectors = (primary.device.attribute("size") or "").strip()
            if sectors.isdigit():
                capacity["size"] = DeviceCapacity(value=str(int(sectors) * SECTOR_BYTES))
        shared = spec.sharing != "exclusive"
        if isinstance(spec.sharing, int):
            capacity[SLOTS] = DeviceCapacity(
                value=str(spec.sharing),
                request_policy=CapacityRequestPolicy(default="1", valid_range=ValidRange(
                    min="1", max=str(spec.sharing), step="1")))
        links = self._links(spec) if spec.links else {}
        nodes: list[NodeRef] = []
        for hit in hits:
            kernel = hit.device.sys_name if hit.device is not None else \
                os.path.basename(hit.host_path)
            number = ("b" if hit.kind == "block" else "c", hit.major, hit.minor)
            nodes.append(NodeRef(hit.host_path, spec.container_path_for(hit.host_path, kernel),
                                 kernel, *number))
            for link in links.get(os.path.realpath(self._local(hit.host_path)), []):
                nodes.append(NodeRef(hit.host_path, link, kernel, *number))
        device = Device(name=name, attributes=attributes, capacity=capacity,
                        allow_multiple_allocations=True if shared else None,
                        device_nodes=[n.container_path for n in nodes])
        return device, Found(spec, tuple(nodes))

    # -- prepare ---------------------------------------------------------------------------

    def prepare(self, request: DeviceRequest) -> PreparedDevice:
        """CDI device nodes read from the host now, the rule's mounts and env var.

        Raises ``RuntimeError`` naming the device and the node when the device is no
        longer discovered, or one of its nodes is gone or is another node (type, major,
        minor) than the one published."""
        name = request.device.name
        found = self._found.get(name)
        if found is None:
            seen = self._seen.get(name)
            paths = ", ".join(n.host_path for n in seen.nodes) if seen else "its node"
            raise RuntimeError(f"hostdev device {name}: {paths} no longer on this node "
                               "(removed since the device was published)")
        spec = found.spec
        nodes: list[DeviceNode] = []
        for ref in found.nodes:
            node = DeviceNode(path=ref.container_path, host_path=ref.host_path,
                              permissions=spec.permissions, uid=spec.uid, gid=spec.gid,
                              file_mode=spec.file_mode)
            try:
                node = self.host_nodes.fill_node(node, f"hostdev device {name}")
            except HostNodeError as e:
                raise RuntimeError(f"hostdev device {name}: node {ref.host_path} is gone or "
                                   f"changed since it was published: {e}") from None
            if (node.type, node.major, node.minor) != (ref.type, ref.major, ref.minor):
                raise RuntimeError(
                    f"hostdev device {name}: node {ref.host_path} is gone or changed since it "
                    f"was published: it is {node.type} {node.major}:{node.minor} now, "
                    f"{ref.type} {ref.major}:{ref.minor} when published")
            nodes.append(node)
        env = [f"DRAKIT_DEVICE_{env_name(name)}={request.pool}/{name}"]
        if spec.env:
            env.append(f"{spec.env}={nodes[0].path}")
        mounts = [Mount(host_path=m.host_path, container_path=m.container_path, type="bind",
                        options=["bind", "ro" if m.read_only else "rw", "nosuid"])
                  for m in spec.mounts]
        return PreparedDevice(edits=ContainerEdits(env=env, device_nodes=nodes,
                                                   mounts=mounts or None))


def _distinct_keys(raw: list[tuple[str, RuleSpec, list[_Hit]]]) -> list[str]:
    """One name per device of ``raw`` (``<rule>-<identity>``), distinct, for
    :func:`~drakit.discovery.names.dns_labels`: the :func:`_clean` name where no other
    device cleans to it; else the name as it is (identities equal but for case or
    punctuation, ``AB`` and ``ab``: ``dns_labels`` gives each its own hash suffix); else,
    for names equal as they are (rule ``a`` identity ``b-c`` and rule ``a-b`` identity
    ``c``), the rule and the primary node's path added. Independent of the order."""
    cleaned = [_clean(name) for name, _s, _h in raw]
    clean_count = Counter(cleaned)
    keys = [clean if clean_count[clean] == 1 else name
            for clean, (name, _s, _h) in zip(cleaned, raw, strict=True)]
    key_count = Counter(keys)
    return [key if key_count[key] == 1 else f"{key}@{spec.name}:{hits[0].host_path}"
            for key, (_n, spec, hits) in zip(keys, raw, strict=True)]


def _clean(name: str) -> str:
    """``name`` in lower case with characters other than letters, digits and ``-`` as
    ``-`` (a serial ``A5:0_2`` → ``a5-0-2``), so most names need no hash suffix."""
    out = "".join(c if c.isascii() and (c.isalnum() or c == "-") else "-" for c in name.lower())
    return "-".join(p for p in out.split("-") if p)
