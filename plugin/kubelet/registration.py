"""The kubelet plugin-registration service (``pluginregistration.Registration``).

GetInfo answers from fixed data (the kubelet gives it a 1 s deadline). The kubelet's verdict
arrives through NotifyRegistrationStatus and is kept in a :class:`RegistrationState` that the
rest of the plugin can read and wait on. A rejection (``plugin_registered=false``) is logged
as an error with the kubelet's reason and makes the plugin not ready; the owner (the
:class:`drakit.plugin.kubelet.server.PluginServer`) re-creates the registration socket with backoff,
because the kubelet does not retry a plugin it already rejected on the same socket
(k8s.io/kubernetes pkg/kubelet/pluginmanager: reconciler.go, operationexecutor).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from drakit.plugin._proto.pluginregistration.v1 import api_pb2 as reg_pb2
from drakit.plugin._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from drakit.plugin.kubelet.protocol import DRA_PLUGIN_TYPE

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RegistrationStatus:
    """One observation of the registration.

    ``registered`` is None before the kubelet said anything (or after the socket was
    re-created), else the kubelet's ``plugin_registered``. ``error`` is the kubelet's reason,
    ``timestamp`` the Unix time of the notification (None before any), ``generation`` counts
    changes (notifications and resets).
    """

    registered: bool | None
    error: str
    timestamp: float | None
    generation: int


class RegistrationState:
    """Thread-safe record of the kubelet's NotifyRegistrationStatus calls."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._status = RegistrationStatus(None, "", None, 0)

    @property
    def status(self) -> RegistrationStatus:
        with self._cond:
            return self._status

    @property
    def registered(self) -> bool | None:
        return self.status.registered

    @property
    def error(self) -> str:
        return self.status.error

    @property
    def timestamp(self) -> float | None:
        return self.status.timestamp

    @property
    def ready(self) -> bool:
        """True only while the kubelet's last word was ``plugin_registered=true``."""
        return self.status.registered is True

    def record(self, registered: bool, error: str = "") -> RegistrationStatus:
        """Store a notification and wake every waiter."""
        with self._cond:
            self._status = RegistrationStatus(
                registered, error, time.time(), self._status.generation + 1
            )
            self._cond.notify_all()
            return self._status

    def reset(self) -> RegistrationStatus:
        """Forget the verdict (the registration socket was re-created)."""
        with self._cond:
            self._status = RegistrationStatus(None, "", None, self._status.generation + 1)
            self._cond.notify_all()
            return self._status

    def wait_registered(self, timeout: float | None = None) -> bool:
        """Block until registered (True) or ``timeout`` seconds pass (False)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._status.registered is True, timeout)

    def wait_for_change(self, generation: int, timeout: float | None = None) -> RegistrationStatus:
        """Block until the generation differs from ``generation`` or ``timeout`` passes."""
        with self._cond:
            self._cond.wait_for(lambda: self._status.generation != generation, timeout)
            return self._status


class RegistrationServicer:
    """Serves ``pluginregistration.Registration`` for one plugin instance.

    ``endpoint`` is the absolute DRA socket path; ``supported_versions`` the registration
    strings in advertised order. ``on_rejected(reason)`` is called (on the gRPC thread; it
    must not block) after the kubelet answered ``plugin_registered=false``.
    """

    def __init__(
        self,
        driver_name: str,
        endpoint: str,
        supported_versions: Sequence[str],
        state: RegistrationState,
        on_rejected: Callable[[str], None] | None = None,
    ) -> None:
        self._info = reg_pb2.PluginInfo(
            type=DRA_PLUGIN_TYPE,
            name=driver_name,
            endpoint=endpoint,
            supported_versions=list(supported_versions),
        )
        self._driver = driver_name
        self._state = state
        self._on_rejected = on_rejected

    def add_to_server(self, server: grpc.Server) -> None:
        reg_grpc.add_RegistrationServicer_to_server(self, server)

    def GetInfo(self, request: Any, context: grpc.ServicerContext) -> Any:
        log.debug("GetInfo from the kubelet")
        return self._info

    def NotifyRegistrationStatus(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._state.record(request.plugin_registered, request.error)
        if request.plugin_registered:
            log.info("driver %s: registered with the kubelet (endpoint %s, versions %s)",
                     self._driver, self._info.endpoint, ", ".join(self._info.supported_versions))
        else:
            log.error("driver %s: the kubelet REJECTED the registration: %s",
                      self._driver, request.error or "(no reason given)")
            if self._on_rejected is not None:
                try:
                    self._on_rejected(request.error)
                except Exception:
                    log.exception("on_rejected callback failed")
        return reg_pb2.RegistrationStatusResponse()
