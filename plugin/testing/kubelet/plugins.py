"""The fake kubelet's table of registered plugin instances and its registration state,
shared by its parts (the registration watcher, the DRA client, the kubelet's queries); every
field is guarded by :attr:`PluginTable.cond`."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import grpc

from drakit.plugin.testing.kubelet.health import HealthWatch
from drakit.plugin.testing.kubelet.model import RegisteredPlugin, Rejection

__all__ = ["PluginInstance", "PluginTable"]


@dataclass
class PluginInstance:
    """One registered instance: what it told, its DRA channel, the identity of its socket
    and the health streams open on it."""

    plugin: RegisteredPlugin
    channel: grpc.Channel
    identity: tuple[int, int, int]
    watches: list[HealthWatch] = field(default_factory=list)


class PluginTable:
    """The registered instances (by registration socket, in registration order) and what the
    registration watcher remembers between scans."""

    def __init__(self, reject_reason: str | None = None) -> None:
        self.cond = threading.Condition(threading.RLock())
        self.instances: dict[str, PluginInstance] = {}  # registration socket → instance
        self.order: list[str] = []  # registration sockets in registration order
        self.seen: dict[str, tuple[int, int, int]] = {}  # socket → identity handled
        self.busy: set[str] = set()  # sockets with a registration attempt running
        self.retry: dict[str, tuple[float, float]] = {}  # socket → (next try, delay)
        self.registrations: dict[str, int] = {}  # driver → successful registrations
        self.rejections: list[Rejection] = []
        self.reject_reason = reject_reason
        self.restarts = 0
        self.scans = 0  #: completed scans of the registrar directory
        self.epoch = 0  #: bumped by a restart: registrations of an older epoch are dropped
        self.stop = threading.Event()

    def current(self, driver_name: str) -> PluginInstance | None:
        """The most recently registered instance of ``driver_name`` (calls go to it)."""
        with self.cond:
            for sock in reversed(self.order):
                inst = self.instances[sock]
                if inst.plugin.driver_name == driver_name:
                    return inst
        return None

    def drop(self, sock: str) -> None:
        """Forget the instance registered through ``sock``: cancel its health streams, close
        its channel."""
        inst = self.instances.pop(sock, None)
        if sock in self.order:
            self.order.remove(sock)
        if inst is None:
            return
        for watch in inst.watches:
            watch.cancelled = True
            watch._call.cancel()
        inst.channel.close()
