"""The fake kubelet's plugin watcher (:mod:`drakit.plugin.testing.kubelet.fake`): it polls the
registrar directory for sockets, dials each new one, asks ``GetInfo``, validates the answer
like the kubelet's plugin manager, tells the verdict with ``NotifyRegistrationStatus`` and
deregisters an instance whose socket went away (the kubelet plugin registration API
pluginregistration/v1, Kubernetes 1.34). A failed dial or GetInfo is retried with backoff
(0.5 s doubling, capped at 2 min 2 s).
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from pathlib import Path
from typing import Any

import grpc

from drakit.plugin._proto.pluginregistration.v1 import api_pb2 as reg_pb2
from drakit.plugin._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from drakit.plugin.kubelet.protocol import DRA_PLUGIN_TYPE, HEALTH_V1, HEALTH_V1ALPHA1
from drakit.plugin.testing.kubelet.model import (
    GET_INFO_TIMEOUT,
    NOTIFY_TIMEOUT,
    RegisteredPlugin,
    Rejection,
    choose_dra_version,
)
from drakit.plugin.testing.kubelet.plugins import PluginInstance, PluginTable

__all__ = ["KubeletRegistration"]

log = logging.getLogger("drakit.plugin.testing.kubelet")


class KubeletRegistration:
    """The plugin watcher of a fake kubelet: scans ``registrar_dir`` every ``poll`` seconds
    (in :meth:`run`, the kubelet's thread) and registers into ``plugins``."""

    def __init__(self, plugins: PluginTable, registrar_dir: Path, kubelet_version: str, *,
                 poll: float, dial_timeout: float) -> None:
        self._plugins = plugins
        self.registrar_dir = registrar_dir
        self.kubelet_version = kubelet_version
        self._poll = poll
        self._dial_timeout = dial_timeout

    def scan(self) -> list[tuple[str, tuple[int, int, int]]]:
        found: list[tuple[str, tuple[int, int, int]]] = []
        for root, dirs, files in os.walk(self.registrar_dir):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            for name in files:
                if name.startswith("."):
                    continue
                path = os.path.join(root, name)
                ident = _socket_ident(path)
                if ident is not None:
                    found.append((path, ident))
        return found

    def run(self) -> None:
        """Scan until the table's ``stop`` is set."""
        while not self._plugins.stop.is_set():
            try:
                self._watch_once()
            except Exception:
                log.exception("fake kubelet: scan failed")
            self._plugins.stop.wait(self._poll)

    def _watch_once(self) -> None:
        current = dict(self.scan())
        now = time.monotonic()
        with self._plugins.cond:
            for sock in list(self._plugins.seen):
                if sock not in current or current[sock] != self._plugins.seen[sock]:
                    # Removed or re-created: deregister the old instance first.
                    del self._plugins.seen[sock]
                    self._plugins.retry.pop(sock, None)
                    if sock in self._plugins.instances:
                        log.info("fake kubelet: %s went away; deregistering", sock)
                        self._plugins.drop(sock)
                        self._plugins.cond.notify_all()
            for sock, ident in current.items():
                if sock in self._plugins.seen or sock in self._plugins.busy:
                    continue
                retry = self._plugins.retry.get(sock)
                if retry is not None and now < retry[0]:
                    continue
                self._plugins.busy.add(sock)
                threading.Thread(
                    target=self._register, args=(sock, ident, self._plugins.epoch),
                    name="fake-kubelet-register", daemon=True,
                ).start()
            self._plugins.scans += 1
            self._plugins.cond.notify_all()

    def _register(self, sock: str, ident: tuple[int, int, int], epoch: int) -> None:
        try:
            self._try_register(sock, ident, epoch)
        except Exception as exc:
            # Dial / GetInfo failure: retry with backoff (0.5 s doubling, capped at 2m2s).
            with self._plugins.cond:
                delay = self._plugins.retry.get(sock, (0.0, 0.25))[1] * 2
                delay = min(delay, 122.0)
                self._plugins.retry[sock] = (time.monotonic() + delay, delay)
            log.warning("fake kubelet: registering %s failed (%s); retry in %.1fs", sock, exc,
                        delay)
        finally:
            with self._plugins.cond:
                self._plugins.busy.discard(sock)
                self._plugins.cond.notify_all()

    def _try_register(self, sock: str, ident: tuple[int, int, int], epoch: int) -> None:
        channel = grpc.insecure_channel(f"unix:{sock}")
        try:
            grpc.channel_ready_future(channel).result(timeout=self._dial_timeout)
            stub = reg_grpc.RegistrationStub(channel)
            info = stub.GetInfo(reg_pb2.InfoRequest(), timeout=GET_INFO_TIMEOUT)
            # The socket that answered is the one at the path now: a stale socket the scan
            # saw may have been replaced while the dial was retrying. Recording the scan's
            # identity would make the next scan see a "re-created" socket and drop this
            # registration (closing the DRA channel under calls in flight).
            ident = _socket_ident(sock) or ident
            verdict, plugin = self._validate(sock, info)
            with self._plugins.cond:
                if epoch != self._plugins.epoch or self._plugins.stop.is_set():
                    return  # a restart happened meanwhile; the new scan handles it
                self._plugins.seen[sock] = ident
                self._plugins.retry.pop(sock, None)
                if verdict:
                    self._reject(sock, info.name, verdict)
                else:
                    assert plugin is not None
                    self._plugins.instances[sock] = PluginInstance(
                        plugin, grpc.insecure_channel(f"unix:{plugin.endpoint}"), ident
                    )
                    self._plugins.order.append(sock)
                    self._plugins.registrations[plugin.driver_name] = (
                        self._plugins.registrations.get(plugin.driver_name, 0) + 1
                    )
                    log.info("fake kubelet: registered %s at %s using %s", plugin.driver_name,
                             plugin.endpoint, plugin.dra_version)
                self._plugins.cond.notify_all()
            try:
                stub.NotifyRegistrationStatus(
                    reg_pb2.RegistrationStatus(plugin_registered=not verdict, error=verdict),
                    timeout=NOTIFY_TIMEOUT,
                )
            except grpc.RpcError as exc:
                # Like the kubelet: a failed notify on the success path leaves it registered.
                log.warning("fake kubelet: NotifyRegistrationStatus to %s failed: %s", sock,
                            exc.code())
        finally:
            channel.close()

    def _validate(self, sock: str, info: Any) -> tuple[str, RegisteredPlugin | None]:
        """("", plugin) to accept, or (reason, None) to reject."""
        if info.type != DRA_PLUGIN_TYPE:
            return (f"no handler registered for plugin type: {info.type} at socket {sock}", None)
        endpoint = info.endpoint or sock
        versions = tuple(info.supported_versions)
        try:
            chosen = choose_dra_version(self.kubelet_version, versions)
        except ValueError as exc:
            return (f"RegisterPlugin error -- plugin validation failed with err: {exc}", None)
        with self._plugins.cond:
            reject = self._plugins.reject_reason
            duplicate = any(
                i.plugin.driver_name == info.name and i.plugin.endpoint == endpoint
                for s, i in self._plugins.instances.items() if s != sock
            )
        if reject:
            return (reject, None)
        if duplicate:
            return (
                "RegisterPlugin error -- plugin registration failed with err: DRA plugin"
                f" {info.name}: endpoint {endpoint} already registered",
                None,
            )
        health = tuple(v for v in versions if v in (HEALTH_V1, HEALTH_V1ALPHA1))
        plugin = RegisteredPlugin(
            driver_name=info.name,
            endpoint=endpoint,
            registration_socket=sock,
            dra_version=chosen,
            health_versions=health,
            supported_versions=versions,
            registered_at=time.time(),
        )
        return ("", plugin)

    def _reject(self, sock: str, driver_name: str, reason: str) -> None:
        log.warning("fake kubelet: rejecting %s (%s): %s", driver_name, sock, reason)
        self._plugins.rejections.append(Rejection(sock, driver_name, reason, time.time()))


def _socket_ident(path: str) -> tuple[int, int, int] | None:
    """A unix socket's identity: (inode, mtime ns, 0) (a chmod changes ctime, not mtime);
    None when ``path`` is missing or not a socket."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISSOCK(st.st_mode):
        return None
    return (st.st_ino, st.st_mtime_ns, 0)
