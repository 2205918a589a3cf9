"""The two gRPC servers of one plugin instance and their socket lifecycle.

:class:`PluginServer` serves, on the DRA socket, DRA v1 + v1beta1, the dra-health stream
(v1 + v1alpha1, unless disabled) and the standard gRPC health-checking service; and, on the
registration socket, ``pluginregistration.Registration``. Behaviour from the kubelet's
plugin manager (k8s.io/kubernetes pkg/kubelet/pluginmanager) and the Go helper's
kubeletplugin (k8s.io/dynamic-resource-allocation):

- The DRA server starts first, then the registration server (the kubelet dials the endpoint
  as soon as it sees the registration socket).
- A stale socket file of this instance is removed before listening; another instance's
  socket is never touched (paths are unique per pod UID; see :mod:`drakit.plugin.kubelet.sockets`).
- A watcher thread re-creates the registration socket when its file disappears (a kubelet
  restart wipes the registrar directory) and then calls ``on_reregister`` (the app
  republishes its ResourceSlices there, because the kubelet deleted them at start).
- A rejected registration makes the instance not ready and re-creates the registration
  socket with exponential backoff, so the kubelet tries again.
- ``stop()`` stops both servers and removes this instance's socket files.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from types import TracebackType

import grpc
from grpc_health.v1 import health as grpc_health
from grpc_health.v1 import health_pb2, health_pb2_grpc

from drakit.plugin.background import Supervisor
from drakit.plugin.kubelet.dra import DraNodeServicer
from drakit.plugin.kubelet.health import (
    DEFAULT_HEALTH_CHECK_TIMEOUT_SECONDS,
    DEFAULT_RESEND_INTERVAL,
    HealthStreamServicer,
)
from drakit.plugin.kubelet.protocol import (
    DRA_SERVICES,
    HEALTH_SERVICES,
    grpc_service_name,
    supported_versions,
)
from drakit.plugin.kubelet.registration import RegistrationServicer, RegistrationState
from drakit.plugin.kubelet.sockets import (
    SOCKET_MODE,
    SocketPaths,
    ensure_dir,
    prepare_socket_path,
    remove_own_socket,
    socket_identity,
)
from drakit.plugin.types import HealthSource, NodeService

log = logging.getLogger(__name__)


class PluginServer:
    """DRA + registration gRPC servers of one plugin instance.

    Args:
        driver_name: the DRA driver name (validated: DNS subdomain, ≤ 63 bytes).
        node_service: answers prepare / unprepare (:class:`drakit.plugin.types.NodeService`).
        health_source: device health for the dra-health stream; None disables health.
        registrar_dir: the kubelet's plugin registrar directory
            (``/var/lib/kubelet/plugins_registry`` on a default node).
        plugins_dir: the kubelet plugins directory (``/var/lib/kubelet/plugins``); the DRA
            socket lives in ``<plugins_dir>/<driver>/``.
        pod_uid: this pod's UID for per-instance socket names (rolling update), or None.
        health_enabled: serve and advertise dra-health (needs ``health_source``).
        health_resend_interval: seconds between full re-sends of the health list.
        health_check_timeout_seconds: value sent in ``DeviceHealth.health_check_timeout_seconds``.
        max_workers: worker threads of the DRA server (concurrent kubelet calls plus one per
            open health stream; further calls wait). Calls run Python under one GIL, so
            more threads add memory (each keeps its stack pages), not throughput.
        watch_interval: seconds between checks of the registration socket file.
        rejection_backoff: (initial, maximum) seconds before re-creating the registration
            socket after a rejection; doubles per consecutive rejection.
        on_reregister: called (on the watcher thread) after the registration socket was
            re-created because its file disappeared.
        stop_grace: seconds in-flight RPCs get on ``stop()``.

    Raises :class:`drakit.plugin.kubelet.sockets.SocketPathError` for a bad driver name / pod UID
    or a socket path that does not fit.
    """

    def __init__(
        self,
        driver_name: str,
        node_service: NodeService,
        health_source: HealthSource | None,
        registrar_dir: Path | str,
        plugins_dir: Path | str,
        pod_uid: str | None = None,
        *,
        health_enabled: bool = True,
        health_resend_interval: float = DEFAULT_RESEND_INTERVAL,
        health_check_timeout_seconds: int = DEFAULT_HEALTH_CHECK_TIMEOUT_SECONDS,
        max_workers: int = 16,
        watch_interval: float = 1.0,
        rejection_backoff: tuple[float, float] = (1.0, 60.0),
        on_reregister: Callable[[], None] | None = None,
        stop_grace: float = 2.0,
        supervisor: Supervisor | None = None,
    ) -> None:
        self.driver_name = driver_name
        self.paths = SocketPaths.for_instance(driver_name, registrar_dir, plugins_dir, pod_uid)
        self.pod_uid = pod_uid
        if health_enabled and health_source is None:
            log.warning("driver %s: health enabled but no health source given; health off",
                        driver_name)
        self.health_enabled = health_enabled and health_source is not None
        self.supported_versions = supported_versions(self.health_enabled)
        self.registration_state = RegistrationState()
        self._node = node_service
        self._health_source = health_source
        self._health_resend = health_resend_interval
        self._health_timeout = health_check_timeout_seconds
        self._max_workers = max_workers
        self._watch_interval = watch_interval
        self._backoff_initial, self._backoff_max = rejection_backoff
        self._on_reregister = on_reregister
        self._grace = stop_grace
        self._supervisor = supervisor or Supervisor()

        self._lock = threading.RLock()  # guards the server start / stop / swap
        self._retry_lock = threading.Lock()  # guards _retry_at / _backoff
        self._stop = threading.Event()
        self._dra_server: grpc.Server | None = None
        self._dra_identity: tuple[int, int] | None = None
        self._reg_server: grpc.Server | None = None
        self._reg_identity: tuple[int, int] | None = None
        self._health_checker: grpc_health.HealthServicer | None = None
        self._health_servicers: list[HealthStreamServicer] = []
        self._watcher: threading.Thread | None = None
        self._retry_at: float | None = None
        self._backoff = self._backoff_initial
        self.reregistrations = 0  #: times the registration socket was re-created

    # --- public ---------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Serving and registered with the kubelet (its last notification said so)."""
        return self._dra_server is not None and self.registration_state.ready

    @property
    def health_streams_open(self) -> int:
        """Number of dra-health streams currently open (all versions)."""
        return sum(s.open_streams for s in self._health_servicers)

    @property
    def running(self) -> bool:
        return self._dra_server is not None

    def start(self) -> None:
        """Start the DRA server, then the registration server, then the watcher thread.

        Raises :class:`drakit.plugin.kubelet.sockets.SocketInUseError` when a live process serves
        one of this instance's paths, ``RuntimeError`` when gRPC cannot bind.
        """
        with self._lock:
            if self._dra_server is not None:
                raise RuntimeError("PluginServer already started")
            self._stop.clear()
            self._start_dra()
            try:
                self._start_registration()
            except BaseException:
                self._stop_dra()
                raise
            self._watcher = threading.Thread(
                target=self._supervisor.loop("registration-watch", self._watch_once,
                                             lambda: self._watch_interval, self._stop),
                name=f"drakit-regwatch-{self.driver_name}", daemon=True)
            self._watcher.start()

    def stop(self, grace: float | None = None) -> None:
        """Stop both servers (registration first) and remove this instance's socket files.

        Open health streams end; in-flight RPCs get ``grace`` seconds (default
        ``stop_grace``). Safe to call more than once.
        """
        grace = self._grace if grace is None else grace
        self._stop.set()
        watcher, self._watcher = self._watcher, None
        if watcher is not None and watcher is not threading.current_thread():
            watcher.join(timeout=10)
        with self._lock:
            self._stop_registration(grace)
            self._stop_dra(grace)

    def __enter__(self) -> PluginServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def recreate_registration_socket(self) -> None:
        """Stop the registration server and listen again on a fresh socket file, so the
        kubelet's plugin watcher sees a new socket and registers it again."""
        with self._lock:
            if self._dra_server is None:
                raise RuntimeError("PluginServer not started")
            self._stop_registration(0.5)
            self._start_registration()
            self.reregistrations += 1

    # --- servers --------------------------------------------------------------------------

    def _bind(self, server: grpc.Server, path: Path) -> tuple[int, int] | None:
        prepare_socket_path(path)
        server.add_insecure_port(f"unix:{path}")  # raises RuntimeError on failure
        server.start()
        try:
            os.chmod(path, SOCKET_MODE)
        except OSError as exc:
            log.warning("chmod %s: %s", path, exc)
        return socket_identity(path)

    def _start_dra(self) -> None:
        ensure_dir(self.paths.dra.parent, flag="--kubelet-plugins-directory-path")
        server = grpc.server(
            futures.ThreadPoolExecutor(self._max_workers,
                                       thread_name_prefix=f"drakit-dra-{self.driver_name}")
        )
        for version in DRA_SERVICES:
            DraNodeServicer(self._node, version).add_to_server(server)
        checker = grpc_health.HealthServicer(experimental_non_blocking=True)
        health_pb2_grpc.add_HealthServicer_to_server(checker, server)
        served = list(DRA_SERVICES)
        if self.health_enabled:
            assert self._health_source is not None
            self._health_servicers = [
                HealthStreamServicer(
                    self._health_source,
                    version,
                    stop_event=self._stop,
                    resend_interval=self._health_resend,
                    health_check_timeout_seconds=self._health_timeout,
                )
                for version in HEALTH_SERVICES
            ]
            for servicer in self._health_servicers:
                servicer.add_to_server(server)
            served += HEALTH_SERVICES
        for name in ["", *(grpc_service_name(v) for v in served)]:
            checker.set(name, health_pb2.HealthCheckResponse.SERVING)
        self._dra_identity = self._bind(server, self.paths.dra)
        self._dra_server = server
        self._health_checker = checker
        log.info("driver %s: DRA server listening on %s (%s)", self.driver_name,
                 self.paths.dra, ", ".join(served))

    def _stop_dra(self, grace: float | None = None) -> None:
        server, self._dra_server = self._dra_server, None
        if self._health_checker is not None:
            self._health_checker.enter_graceful_shutdown()
            self._health_checker = None
        if server is not None:
            # Let open health streams end cleanly (they watch the stop event) before the
            # server cancels whatever is left.
            for servicer in self._health_servicers:
                servicer.wait_idle(timeout=grace or 0)
            server.stop(grace).wait(timeout=(grace or 0) + 5)
            log.info("driver %s: DRA server stopped", self.driver_name)
        remove_own_socket(self.paths.dra, self._dra_identity)
        self._dra_identity = None

    def _start_registration(self) -> None:
        ensure_dir(self.paths.registration.parent,
                   flag="--kubelet-registrar-directory-path")
        server = grpc.server(
            futures.ThreadPoolExecutor(4, thread_name_prefix=f"drakit-reg-{self.driver_name}")
        )
        RegistrationServicer(
            self.driver_name,
            str(self.paths.dra),
            self.supported_versions,
            self.registration_state,
            on_rejected=self._on_rejected,
        ).add_to_server(server)
        self.registration_state.reset()
        self._reg_identity = self._bind(server, self.paths.registration)
        self._reg_server = server
        log.info("driver %s: registration server listening on %s", self.driver_name,
                 self.paths.registration)

    def _stop_registration(self, grace: float | None = None) -> None:
        server, self._reg_server = self._reg_server, None
        if server is not None:
            server.stop(grace).wait(timeout=(grace or 0) + 5)
        # gRPC unlinks the path itself on stop; this covers the case it did not.
        remove_own_socket(self.paths.registration, self._reg_identity)
        self._reg_identity = None

    # --- watcher --------------------------------------------------------------------------

    def _on_rejected(self, reason: str) -> None:
        with self._retry_lock:
            delay = self._backoff
            self._backoff = min(self._backoff * 2, self._backoff_max)
            self._retry_at = time.monotonic() + delay
        log.error("driver %s: not ready (registration rejected); re-creating the registration"
                  " socket in %.1fs", self.driver_name, delay)

    def _watch_once(self) -> None:
        with self._retry_lock:
            if self.registration_state.ready:
                self._backoff = self._backoff_initial
            retry = self._retry_at is not None and time.monotonic() >= self._retry_at
        lost = False
        with self._lock:
            if self._stop.is_set() or self._dra_server is None:
                return
            if (
                self._reg_server is None
                or socket_identity(self.paths.registration) != self._reg_identity
            ):
                log.warning("driver %s: registration socket %s disappeared (kubelet restart?);"
                            " re-creating it", self.driver_name, self.paths.registration)
                lost = True
            elif retry:
                log.info("driver %s: re-creating the registration socket after rejection",
                         self.driver_name)
            else:
                return
            with self._retry_lock:
                self._retry_at = None
            self.recreate_registration_socket()
        if lost and self._on_reregister is not None:
            try:
                self._on_reregister()
            except Exception:
                log.exception("driver %s: on_reregister callback failed", self.driver_name)
