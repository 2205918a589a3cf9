"""The node's inventory: the pools of all discovery plugins, which plugin owns which device,
and the health of every device for the dra-health stream.

One plugin's failure never stops the others: when ``discover()`` raises, that plugin keeps
its previous pools and the error is logged. Devices that disappear (hot-plug) are reported
Unhealthy for ``removed_grace`` seconds before they leave the health list, and for as long as
a claim still holds them prepared (``set_in_use``); they leave the ResourceSlices at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from drakit.discovery.model import Device, DeviceHealth, Pool
from drakit.discovery.plugin import DiscoveryPlugin
from drakit.plugin.types import DeviceHealthEntry

log = logging.getLogger(__name__)



class Inventory:
    """Holds the current pools per plugin; thread-safe."""

    def __init__(self, plugins: Iterable[DiscoveryPlugin], removed_grace: float = 60.0) -> None:
        self.plugins: list[DiscoveryPlugin] = list(plugins)
        self.removed_grace = removed_grace
        self._lock = threading.Condition()
        self._pools: dict[str, list[Pool]] = {}
        self._owner: dict[tuple[str, str], tuple[DiscoveryPlugin, Device]] = {}
        self._removed: dict[tuple[str, str], float] = {}
        self._health: dict[tuple[str, str], DeviceHealth] = {}
        self._health_version = 0
        self._in_use: Callable[[], Iterable[tuple[str, str]]] | None = None
        self.errors: dict[str, str] = {}

    def set_in_use(self, source: Callable[[], Iterable[tuple[str, str]]]) -> None:
        """``source()`` gives the (pool, device) pairs currently prepared for a claim; a
        removed device among them stays in the health list as Unhealthy until released."""
        self._in_use = source

    def plugin_named(self, name: str) -> DiscoveryPlugin | None:
        for p in self.plugins:
            if p.name == name:
                return p
        return None

    def refresh(self, subsystems: set[str] | None = None) -> bool:
        """Re-run discovery for all plugins, or for those watching one of ``subsystems``.

        Returns True when the inventory changed.
        """
        changed = False
        for plugin in self.plugins:
            if subsystems is not None and not subsystems & set(plugin.watched_subsystems()):
                continue
            try:
                pools = plugin.discover()
            except Exception as e:  # one plugin's failure never stops the node
                log.exception(
                    "discovery plugin %s failed; keeping its previous devices", plugin.name
                )
                self.errors[plugin.name] = f"{type(e).__name__}: {e}"
                continue
            self.errors.pop(plugin.name, None)
            with self._lock:
                if self._pools.get(plugin.name) != pools:
                    self._pools[plugin.name] = pools
                    changed = True
        if changed:
            self._reindex()
            self.mark_changed()
        self.refresh_health()
        return changed

    def _reindex(self) -> None:
        with self._lock:
            owner: dict[tuple[str, str], tuple[DiscoveryPlugin, Device]] = {}
            for plugin in self.plugins:
                for pool in self._pools.get(plugin.name, []):
                    for device in pool.devices:
                        key = (pool.name, device.name)
                        if key in owner:
                            first = owner[key][0]
                            if first is plugin:
                                log.error("pool %s: device %s reported twice by plugin %s; "
                                          "keeping the first", pool.name, device.name,
                                          plugin.name)
                            else:
                                log.error("pool %s: device %s reported by plugins %s and %s; "
                                          "keeping the first", pool.name, device.name,
                                          first.name, plugin.name)
                            continue
                        owner[key] = (plugin, device)
            now = time.monotonic()
            for key in self._owner.keys() - owner.keys():
                self._removed[key] = now
            for key in owner.keys() & self._removed.keys():
                del self._removed[key]
            self._owner = owner

    def pools(self) -> list[Pool]:
        """All pools, merged by name across plugins (devices and counter sets concatenated,
        duplicates of an earlier plugin left out), in plugin order."""
        with self._lock:
            merged: dict[str, Pool] = {}
            for plugin in self.plugins:
                for pool in self._pools.get(plugin.name, []):
                    if pool.name not in merged:
                        merged[pool.name] = pool.model_copy(
                            update={"devices": [], "counter_sets": []}
                        )
                    target = merged[pool.name]
                    for d in pool.devices:
                        owner = self._owner.get((pool.name, d.name))
                        if owner is not None and owner[0] is plugin:
                            target.devices.append(d)
                    target.counter_sets.extend(pool.counter_sets)
            return list(merged.values())

    def lookup(self, pool: str, device: str) -> tuple[DiscoveryPlugin, Device] | None:
        """The plugin owning ``pool``/``device`` and the device, or None when not present."""
        with self._lock:
            return self._owner.get((pool, device))

    def device_count(self) -> int:
        with self._lock:
            return len(self._owner)

    # -- health --------------------------------------------------------------------------

    def refresh_health(self) -> None:
        """Ask every plugin for health and bump the version when anything changed."""
        health: dict[tuple[str, str], DeviceHealth] = {}
        for plugin in self.plugins:
            try:
                health.update(plugin.health())
            except Exception:
                log.exception("health check of plugin %s failed", plugin.name)
        in_use: set[tuple[str, str]] = set()
        if self._in_use is not None:
            try:
                in_use = set(self._in_use())
            except Exception:
                log.exception("reading the devices in use failed")
        with self._lock:
            now = time.monotonic()
            for key, since in list(self._removed.items()):
                if now - since > self.removed_grace and key not in in_use:
                    del self._removed[key]
            for key in self._removed:
                health[key] = DeviceHealth(
                    state="Unhealthy", message="device removed from the node"
                )
            snapshot = {k: v for k, v in health.items() if k in self._owner or k in self._removed}
            if snapshot != self._health:
                self._health = snapshot
                self.mark_changed()

    def health_snapshot(self) -> list[DeviceHealthEntry]:
        """Every current device (and recently removed ones) with its health state."""
        with self._lock:
            now = int(time.time())
            out: list[DeviceHealthEntry] = []
            for key in sorted(self._owner.keys() | self._removed.keys()):
                h = self._health.get(key, DeviceHealth())
                out.append(
                    DeviceHealthEntry(key[0], key[1], h.state, h.message, now)
                )
            return out

    def wait_for_health_change(self, version: int, timeout: float) -> int:
        """Block until the health version differs from ``version`` or ``timeout`` seconds."""
        with self._lock:
            self._lock.wait_for(lambda: self._health_version != version, timeout=timeout)
            return self._health_version

    def mark_changed(self) -> None:
        """Bump the health version (a device set change that health should announce)."""
        with self._lock:
            self._health_version += 1
            self._lock.notify_all()
