"""A fake kubelet: the plugin-manager and DRA-manager side of the protocol, for tests.

It behaves like the real kubelet where a DRA driver can tell (kubelet 1.34: plugin
registration pluginregistration/v1, the DRA node API dra/v1 of KEP-4381, device health of
KEP-4680):

- Watches the registrar directory (recursively, by polling plus an initial scan); files whose
  name starts with ``.`` and non-sockets are ignored. A new socket file (or a re-created one)
  is dialled (10 s), asked ``GetInfo`` (1 s deadline), validated, and told the verdict with
  ``NotifyRegistrationStatus`` (5 s). A failed dial or GetInfo is retried with backoff
  (0.5 s doubling, capped). A removed socket deregisters that instance.
- ``type`` must be ``DRAPlugin``. The node-API version is chosen like kubelet 1.34+ (walk the
  plugin's ``supported_versions`` in order, take the first of ``v1.DRAPlugin`` /
  ``v1beta1.DRAPlugin``) or 1.32/1.33 (``v1beta1.DRAPlugin`` if listed). A 1.32/1.33 kubelet
  would fall back to v1alpha4 for a plugin that lists neither; the fake does not speak
  v1alpha4 and rejects such a plugin instead, naming the reason.
- Several instances per driver; calls go to the most recently registered one; a duplicate
  endpoint is rejected.
- Prepare / unprepare use a 45 s deadline and check the answer like the kubelet: an entry for
  every requested claim and none for an unknown UID (:class:`KubeletCheckError` otherwise);
  a gRPC error becomes :class:`KubeletCallError`. Per-claim ``error`` strings are returned.
- The health stream prefers ``v1.DRAResourceHealth`` when advertised, else ``v1alpha1``.

Not simulated: the kubelet's checkpoint, pod admission, ResourceSlice wiping (tests do that
through the API server), connection monitoring.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from types import TracebackType

from drakit.plugin.testing.kubelet.calls import KubeletDRAClient
from drakit.plugin.testing.kubelet.model import (
    DIAL_TIMEOUT,
    RegisteredPlugin,
    Rejection,
    parse_kubelet_version,
)
from drakit.plugin.testing.kubelet.plugins import PluginTable
from drakit.plugin.testing.kubelet.registration import KubeletRegistration

__all__ = ["FakeKubelet"]

log = logging.getLogger("drakit.plugin.testing.kubelet")


class FakeKubelet:
    """The registration and DRA-client side of a kubelet, over real unix sockets.

    Args:
        registrar_dir: the directory to watch (the plugin's ``registrar_dir``).
        kubelet_version: ``"1.34"`` (default), ``"1.33"``, ``"1.37"``…; decides the version
            choice (see :func:`choose_dra_version`).
        reject_reason: when set, every registration is refused with this reason (the kubelet
            answering ``plugin_registered=false``); change it at runtime with
            :meth:`set_reject_reason`.
        poll_interval: seconds between scans of the registrar directory.
        dial_timeout: blocking dial timeout for registration sockets.

    Thread-safe. Use as a context manager or call :meth:`start` / :meth:`stop`.

    It holds the lifecycle and the queries and *has* its parts: the table of registered
    instances (:class:`~drakit.plugin.testing.kubelet.plugins.PluginTable`), the
    registrar-directory watcher
    (:class:`~drakit.plugin.testing.kubelet.registration.KubeletRegistration`) and the DRA
    client (:attr:`calls`, a :class:`~drakit.plugin.testing.kubelet.calls.KubeletDRAClient`:
    :meth:`node_prepare_resources`, :meth:`node_unprepare_resources`, :meth:`watch_health`
    are its methods); the CLI is :mod:`drakit.plugin.testing.kubelet.cli`.
    """

    def __init__(
        self,
        registrar_dir: Path | str,
        kubelet_version: str = "1.34",
        *,
        reject_reason: str | None = None,
        poll_interval: float = 0.1,
        dial_timeout: float = DIAL_TIMEOUT,
    ) -> None:
        parse_kubelet_version(kubelet_version)
        self.registrar_dir = Path(os.path.abspath(registrar_dir))
        self.kubelet_version = kubelet_version
        self._plugins = PluginTable(reject_reason)
        self._registration = KubeletRegistration(
            self._plugins, self.registrar_dir, kubelet_version, poll=poll_interval,
            dial_timeout=dial_timeout)
        self.calls = KubeletDRAClient(self._plugins)
        self.node_prepare_resources = self.calls.node_prepare_resources
        self.node_unprepare_resources = self.calls.node_unprepare_resources
        self.watch_health = self.calls.watch_health
        self.rejections = self._plugins.rejections
        self._thread: threading.Thread | None = None

    @property
    def restarts(self) -> int:
        """How many times :meth:`simulate_restart` ran."""
        return self._plugins.restarts

    @property
    def scans(self) -> int:
        """Completed scans of the registrar directory."""
        return self._plugins.scans

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> FakeKubelet:
        """Create the registrar directory if needed and start watching it."""
        self.registrar_dir.mkdir(parents=True, exist_ok=True)
        if self._thread is not None:
            return self
        self._plugins.stop.clear()
        self._thread = threading.Thread(target=self._registration.run, name="fake-kubelet",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching, cancel health streams and close every connection."""
        self._plugins.stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=10)
        with self._plugins.cond:
            for sock in list(self._plugins.instances):
                self._plugins.drop(sock)
            self._plugins.cond.notify_all()

    def __enter__(self) -> FakeKubelet:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def set_reject_reason(self, reason: str | None) -> None:
        """Refuse future registrations with ``reason`` (None: accept again)."""
        with self._plugins.cond:
            self._plugins.reject_reason = reason

    def simulate_restart(self, wipe_sockets: bool = True) -> None:
        """Act like a kubelet restart: forget every plugin (closing connections and health
        streams) and, with ``wipe_sockets``, delete the socket files in the registrar
        directory. Sockets that (re)appear afterwards are registered anew. Deleting the
        node's ResourceSlices is the test's job (through the API server)."""
        with self._plugins.cond:
            self._plugins.epoch += 1
            self._plugins.restarts += 1
            for sock in list(self._plugins.instances):
                self._plugins.drop(sock)
            self._plugins.seen.clear()
            self._plugins.retry.clear()
            if wipe_sockets:
                for path, _ident in self._registration.scan():
                    try:
                        os.unlink(path)
                        log.info("fake kubelet restart: removed %s", path)
                    except FileNotFoundError:
                        pass
            self._plugins.cond.notify_all()

    # --- queries --------------------------------------------------------------------------

    def registered_plugins(self, driver_name: str | None = None) -> list[RegisteredPlugin]:
        """Registered instances (of one driver, or all), oldest first."""
        with self._plugins.cond:
            plugins = [self._plugins.instances[s].plugin for s in self._plugins.order]
        return [p for p in plugins if driver_name is None or p.driver_name == driver_name]

    def registration_count(self, driver_name: str) -> int:
        """How many successful registrations ``driver_name`` had so far."""
        with self._plugins.cond:
            return self._plugins.registrations.get(driver_name, 0)

    def wait_registered(
        self, driver_name: str, timeout: float = 10.0, min_count: int = 1
    ) -> RegisteredPlugin:
        """Wait until ``driver_name`` is registered and has had at least ``min_count``
        successful registrations; return the instance calls would go to.

        Raises TimeoutError naming the rejections seen so far.
        """

        def ok() -> bool:
            return (self._plugins.registrations.get(driver_name, 0) >= min_count
                    and self._plugins.current(driver_name) is not None)

        with self._plugins.cond:
            if not self._plugins.cond.wait_for(ok, timeout):
                rejected = [r.reason for r in self.rejections if r.driver_name == driver_name]
                raise TimeoutError(
                    f"driver {driver_name} not registered (count >= {min_count}) within"
                    f" {timeout}s; rejections: {rejected}"
                )
            inst = self._plugins.current(driver_name)
            assert inst is not None
            return inst.plugin

    def wait_rejected(self, timeout: float = 10.0, min_count: int = 1) -> Rejection:
        """Wait until at least ``min_count`` registrations were refused; return the last."""
        with self._plugins.cond:
            if not self._plugins.cond.wait_for(lambda: len(self.rejections) >= min_count, timeout):
                raise TimeoutError(f"no rejection within {timeout}s")
            return self.rejections[-1]

    def wait_idle(self, timeout: float = 10.0) -> None:
        """Wait for two more complete scans with no registration attempt in flight, so that
        everything present in the registrar directory has been handled."""
        plugins = self._plugins
        with plugins.cond:
            target = plugins.scans + 2
            if not plugins.cond.wait_for(lambda: plugins.scans >= target and not plugins.busy,
                                         timeout):
                raise TimeoutError(f"fake kubelet not idle within {timeout}s")

    def wait_unregistered(self, driver_name: str, timeout: float = 10.0) -> None:
        """Wait until no instance of ``driver_name`` is registered."""
        plugins = self._plugins
        with plugins.cond:
            if not plugins.cond.wait_for(lambda: plugins.current(driver_name) is None, timeout):
                raise TimeoutError(f"driver {driver_name} still registered after {timeout}s")

