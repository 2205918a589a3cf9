"""Kubelet calls in flight, so background work can give way to them.

The agent runs under one interpreter lock: a background AllocatedDeviceStatus write (an
HTTP request, JSON in and out) running while the kubelet waits on NodePrepareResources
competes with it for that lock and adds its CPU time to the call's latency. Status is not
on the pod-start path (the kubelet never waits for it), so its writer waits for a moment with
no kubelet call in flight, bounded so status is never starved: see
:meth:`KubeletCalls.wait_quiet`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator


class KubeletCalls:
    """Counts NodePrepareResources / NodeUnprepareResources calls in flight (thread-safe)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._in_flight = 0

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        """Wrap one kubelet call."""
        with self._cond:
            self._in_flight += 1
        try:
            yield
        finally:
            with self._cond:
                self._in_flight -= 1
                if not self._in_flight:
                    self._cond.notify_all()

    def wait_quiet(self, deadline: float) -> bool:
        """Block until no call is in flight or ``time.monotonic()`` reaches ``deadline``.
        Returns True when quiet, False when the deadline passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._in_flight,
                                       max(0.0, deadline - time.monotonic()))
