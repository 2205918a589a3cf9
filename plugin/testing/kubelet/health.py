"""The kubelet's consumer of a plugin's health stream (``NodeWatchResources``, KEP-4680):
:class:`HealthWatch` reads it on its own thread as :class:`DeviceHealthReport` lists.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

import grpc

from drakit.plugin.kubelet.protocol import HEALTH_MODULES
from drakit.plugin.testing.kubelet.model import DeviceHealthReport

__all__ = ["HealthWatch"]

log = logging.getLogger("drakit.plugin.testing.kubelet")

_HEALTH_NAMES = {"HEALTHY": "Healthy", "UNHEALTHY": "Unhealthy", "UNKNOWN": "Unknown"}


class HealthWatch:
    """A consumer of one ``NodeWatchResources`` stream, on its own thread.

    ``next(timeout)`` returns the next message (a list of :class:`DeviceHealthReport`),
    ``latest`` the last one, ``received`` the count. ``done`` is set when the stream ended;
    ``error`` then holds the gRPC error (None for a clean end or a cancel).
    """

    def __init__(self, channel: grpc.Channel, version: str, driver_name: str) -> None:
        self.version = version
        self.driver_name = driver_name
        pb2, grpc_mod = HEALTH_MODULES[version]
        self._pb2 = pb2
        self._queue: queue.Queue[list[DeviceHealthReport]] = queue.Queue()
        self._lock = threading.Lock()
        self._latest: list[DeviceHealthReport] | None = None
        self.received = 0
        self.error: grpc.RpcError | None = None
        self.cancelled = False
        self.done = threading.Event()
        self._call = grpc_mod.DRAResourceHealthStub(channel).NodeWatchResources(
            pb2.NodeWatchResourcesRequest()
        )
        self._thread = threading.Thread(target=self._run, name=f"fake-kubelet-health-{version}",
                                         daemon=True)
        self._thread.start()

    def _convert(self, response: Any) -> list[DeviceHealthReport]:
        return [
            DeviceHealthReport(
                pool_name=d.device.pool_name,
                device_name=d.device.device_name,
                health=_HEALTH_NAMES.get(self._pb2.HealthStatus.Name(d.health), "Unknown"),
                last_updated_time=d.last_updated_time,
                health_check_timeout_seconds=d.health_check_timeout_seconds,
                message=d.message,
            )
            for d in response.devices
        ]

    def _run(self) -> None:
        try:
            for response in self._call:
                reports = self._convert(response)
                with self._lock:
                    self._latest = reports
                    self.received += 1
                self._queue.put(reports)
        except grpc.RpcError as exc:
            if not (self.cancelled and exc.code() == grpc.StatusCode.CANCELLED):
                self.error = exc
                log.info("health stream of %s ended: %s", self.driver_name, exc.code())
        finally:
            self.done.set()

    def next(self, timeout: float = 10.0) -> list[DeviceHealthReport]:
        """The next message; raises TimeoutError after ``timeout`` seconds."""
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(
                f"no health message from {self.driver_name} within {timeout}s"
                f" (stream done={self.done.is_set()}, error={self.error})"
            ) from None

    @property
    def latest(self) -> list[DeviceHealthReport] | None:
        with self._lock:
            return self._latest

    def cancel(self) -> None:
        """Cancel the stream (as the kubelet does on deregistration) and wait for the thread."""
        self.cancelled = True
        self._call.cancel()
        self._thread.join(timeout=5)
