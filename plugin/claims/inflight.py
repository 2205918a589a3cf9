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
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Protocol

from drakit.discovery.plugin import ClaimRef


class Unfinished(Protocol):
    """Work a call left running past its deadline (a prepare hook:
    :class:`drakit.plugin.claims.prepare.LatePrepare`)."""

    def still_running(self) -> str:
        """What a caller waiting for the claim is told when its own deadline comes."""
        ...


class Flight:
    """One claim being run by one call: ``future`` gets the result; ``deadline`` is that
    call's (monotonic seconds); ``stale`` once the result came after the deadline;
    ``unfinished``: the work the call left running (None: the call itself runs it)."""

    __slots__ = ("deadline", "future", "stale", "unfinished")

    def __init__(self, deadline: float) -> None:
        self.future: Future[Any] = Future()
        self.deadline = deadline
        self.stale = False
        self.unfinished: Unfinished | None = None


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

    def hold(self, uid: str, unfinished: Unfinished) -> None:
        r"""Claim ``uid``'s flight (kept by the call that owns it) now holds the work that
        call left running, until its owner :meth:`release`\ s it."""
        with self._lock:
            flight = self._flights.get(uid)
            if flight is not None:
                flight.unfinished = unfinished

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
