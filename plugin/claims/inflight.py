"""The kubelet calls in flight in this process.

Single flight of claims (:class:`SingleFlight`): one claim UID is prepared or unprepared by
one kubelet call at a time; a second caller waits for the first and may take its answer. A
flight carries the deadline of the call that runs it (``time.monotonic()`` seconds). A result
set after that deadline is *stale*: the caller it was for had given up, so a waiter does not
take it and runs the claim afresh (the kubelet retries a call whose deadline passed:
pkg/kubelet/cm/dra/manager.go).

The calls in flight, so background work can give way to them (:class:`KubeletCalls`): the
agent runs under one interpreter lock, and a background AllocatedDeviceStatus write (an HTTP
request, JSON in and out) running while the kubelet waits on NodePrepareResources competes
with it for that lock and adds its CPU time to the call's latency. Status is not on the
pod-start path (the kubelet never waits for it), so its writer waits for a moment with no
kubelet call in flight, bounded so status is never starved: see
:meth:`KubeletCalls.wait_quiet`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from drakit.discovery.plugin import ClaimRef


class Flight:
    """One claim being run by one call: ``future`` gets the result; ``deadline`` is that
    call's (monotonic seconds); ``stale`` once the result came after the deadline."""

    __slots__ = ("deadline", "future", "note", "stale")

    def __init__(self, deadline: float) -> None:
        self.future: Future[Any] = Future()
        self.deadline = deadline
        self.stale = False
        #: What a waiter whose deadline comes first is told (a hook still running past its
        #: call's deadline: :mod:`drakit.plugin.claims.claimdevices`); None: the general answer.
        self.note: Callable[[], str] | None = None


class SingleFlight:
    """The claims running in this process, by claim UID. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flights: dict[str, Flight] = {}
        self._waiters = 0

    @property
    def waiters(self) -> int:
        """Callers currently waiting for another caller's run of the same claim."""
        with self._lock:
            return self._waiters

    def claim(self, refs: Iterable[ClaimRef],
              deadline: float) -> tuple[list[ClaimRef], dict[str, Flight]]:
        """Split ``refs`` into the claims this call now runs (it must :meth:`release`
        them) and the flights of claims another call is running (by claim UID)."""
        mine: list[ClaimRef] = []
        running: dict[str, Flight] = {}
        with self._lock:
            for ref in refs:
                flight = self._flights.get(ref.uid)
                if flight is not None:
                    running[ref.uid] = flight
                else:
                    self._flights[ref.uid] = Flight(deadline)
                    mine.append(ref)
        return mine, running

    def note(self, uid: str, note: Callable[[], str]) -> None:
        """Set the :attr:`Flight.note` of claim ``uid``'s flight (if it is running)."""
        with self._lock:
            flight = self._flights.get(uid)
            if flight is not None:
                flight.note = note

    def release(self, results: Mapping[str, Any], owned: Iterable[ClaimRef]) -> None:
        """End the flights of ``owned``, each with its result in ``results`` (None when
        absent: waiters run afresh)."""
        now = time.monotonic()
        with self._lock:
            for ref in owned:
                flight = self._flights.pop(ref.uid, None)
                if flight is not None:
                    flight.stale = now > flight.deadline
                    flight.future.set_result(results.get(ref.uid))

    def wait(self, flight: Flight, deadline: float) -> tuple[bool, Any]:
        """Wait for another call's run of a claim, until ``deadline`` (monotonic seconds).
        Returns (True, its result), or (False, None) when the deadline came first or the
        result is stale."""
        with self._lock:
            self._waiters += 1
        try:
            got = flight.future.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            return False, None
        finally:
            with self._lock:
                self._waiters -= 1
        return (False, None) if flight.stale else (True, got)


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
