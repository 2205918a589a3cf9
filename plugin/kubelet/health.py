"""The dra-health stream: ``NodeWatchResources`` for v1alpha1 and v1 ``DRAResourceHealth``.

KEP-4680 (k8s.io/kubelet pkg/apis/dra-health, kubelet pkg/kubelet/cm/dra/healthinfo.go):
every message carries the driver's **complete** device list. The kubelet
stamps devices with its own receive time and marks a device Unknown when it was not reported
for ``health_check_timeout_seconds`` (default 30 s), so the list is sent when the stream
opens, on every change of the :class:`drakit.plugin.types.HealthSource`, and again every
``resend_interval`` seconds (default 10 s, well within the timeout). ``message`` is limited
to 1024 bytes; longer text is cut at a UTF-8 character boundary and ends in ``...`` (the
kubelet's own truncation form). The stream ends when the client cancels or the server stops.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import grpc

from drakit.plugin.kubelet.protocol import HEALTH_MODULES, HEALTH_V1
from drakit.plugin.types import DeviceHealthEntry, HealthSource

log = logging.getLogger(__name__)

#: ``DeviceHealth.message`` limit in bytes (dra-health API).
MAX_MESSAGE_BYTES = 1024
#: The kubelet's default staleness timeout (``DefaultHealthTimeout``), seconds.
DEFAULT_HEALTH_CHECK_TIMEOUT_SECONDS = 30
#: Default period of full re-sends, seconds.
DEFAULT_RESEND_INTERVAL = 10.0

_STATES = {"healthy": "HEALTHY", "unhealthy": "UNHEALTHY", "unknown": "UNKNOWN"}


def truncate_message(message: str, limit: int = MAX_MESSAGE_BYTES) -> str:
    """``message`` cut to at most ``limit`` UTF-8 bytes, never splitting a character.

    A cut message ends in ``...`` (``limit - 3`` bytes of text plus the dots).
    """
    raw = message.encode("utf-8")
    if len(raw) <= limit:
        return message
    return raw[: limit - 3].decode("utf-8", errors="ignore") + "..."


def health_status_name(state: str) -> str:
    """Map a :class:`DeviceHealthEntry` state (Healthy / Unhealthy / Unknown, any case) to the
    ``HealthStatus`` enum name; anything else is ``UNKNOWN``."""
    return _STATES.get(state.strip().lower(), "UNKNOWN")


class HealthStreamServicer:
    """Serves ``DRAResourceHealth.NodeWatchResources`` of one version.

    ``stop_event`` (shared with the server) ends every open stream when set. ``poll_slice``
    bounds how long one wait on the source blocks, i.e. how quickly a stream notices a
    cancel or a stop.
    """

    def __init__(
        self,
        source: HealthSource,
        version: str = HEALTH_V1,
        *,
        stop_event: threading.Event | None = None,
        resend_interval: float = DEFAULT_RESEND_INTERVAL,
        health_check_timeout_seconds: int = DEFAULT_HEALTH_CHECK_TIMEOUT_SECONDS,
        poll_slice: float = 0.5,
    ) -> None:
        if version not in HEALTH_MODULES:
            raise ValueError(f"unknown health service version {version!r}")
        if resend_interval <= 0:
            raise ValueError("resend_interval must be > 0 seconds")
        if health_check_timeout_seconds > 0 and resend_interval >= health_check_timeout_seconds:
            raise ValueError(
                f"resend_interval ({resend_interval}s) must be shorter than"
                f" health_check_timeout_seconds ({health_check_timeout_seconds}s)"
            )
        self.version = version
        self._source = source
        self._pb2: ModuleType = HEALTH_MODULES[version][0]
        self._stop = stop_event or threading.Event()
        self._resend = resend_interval
        self._timeout_s = health_check_timeout_seconds
        self._slice = poll_slice
        self._active = 0
        self._active_cond = threading.Condition()

    @property
    def open_streams(self) -> int:
        """Number of NodeWatchResources calls currently being served."""
        with self._active_cond:
            return self._active

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no stream is open (True) or ``timeout`` seconds pass (False)."""
        with self._active_cond:
            return self._active_cond.wait_for(lambda: self._active == 0, timeout)

    def add_to_server(self, server: grpc.Server) -> None:
        """Register this servicer on ``server`` (before it starts)."""
        HEALTH_MODULES[self.version][1].add_DRAResourceHealthServicer_to_server(self, server)

    def build_response(self, entries: list[DeviceHealthEntry]) -> Any:
        """One ``NodeWatchResourcesResponse`` holding every entry."""
        now = int(time.time())
        response = self._pb2.NodeWatchResourcesResponse()
        for e in entries:
            response.devices.add(
                device=self._pb2.DeviceIdentifier(pool_name=e.pool_name,
                                                  device_name=e.device_name),
                health=self._pb2.HealthStatus.Value(health_status_name(e.state)),
                last_updated_time=e.last_updated or now,
                health_check_timeout_seconds=self._timeout_s,
                message=truncate_message(e.message),
            )
        return response

    def _snapshot(self) -> Any | None:
        try:
            return self.build_response(list(self._source.health_snapshot()))
        except Exception:
            # Skip this send; the next change or re-send tries again. The kubelet marks the
            # devices Unknown if this persists past the timeout, which is the truth.
            log.exception("%s: reading the device health failed", self.version)
            return None

    def _wait(self, version: int, timeout: float) -> int:
        try:
            return self._source.wait_for_health_change(version, timeout)
        except Exception:
            log.exception("%s: waiting for a device health change failed", self.version)
            self._stop.wait(timeout)
            return version

    def NodeWatchResources(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        log.info("%s NodeWatchResources: stream opened", self.version)
        with self._active_cond:
            self._active += 1
        try:
            version = self._wait(-1, 0.0)
            due = 0.0  # send at once
            while not self._stop.is_set() and context.is_active():
                now = time.monotonic()
                if now >= due:
                    response = self._snapshot()
                    if response is not None:
                        yield response
                    due = time.monotonic() + self._resend
                    continue
                wait = min(self._slice, due - now)
                current = self._wait(version, wait)
                if current != version:
                    version = current
                    due = 0.0
        finally:
            with self._active_cond:
                self._active -= 1
                self._active_cond.notify_all()
            log.info("%s NodeWatchResources: stream closed", self.version)
