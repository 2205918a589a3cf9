"""Watch this publisher's ResourceSlices and keep the local view current.

Shaped like the Go controller's informer (k8s.io/dynamic-resource-allocation
resourceslice/resourceslicecontroller.go): after a LIST of a
:class:`Scope` (:meth:`SliceWatcher.listed`), a watch with ``allowWatchBookmarks`` from the
LIST's resourceVersion keeps the :class:`~drakit.plugin.slices.view.SliceView` current,
resuming from the last event or bookmark after each ``timeoutSeconds``. The event of one of
the publisher's own writes (:class:`~drakit.plugin.slices.writes.OwnWrites`) only updates the
view; anything else is handed to ``on_foreign`` (the publisher schedules a resync).

* No lockstep: a watch asks for ``timeoutSeconds`` in [``watch_timeout``,
  2·``watch_timeout``) as client-go's reflector does; after a broken watch (API server
  restart, connection loss) the reconnect, and after a 410 the re-list, wait a uniform part
  of ``recovery_spread`` (full jitter). A server that answers and asks for a delay (429
  with Retry-After, as a restarted API server does while its watch cache fills) gets that
  delay spread over [Retry-After, 2·Retry-After); another error answer the backoff with
  full jitter. Each scope's thread draws from a generator of its own, so the schedule does
  not depend on thread timing.
* Watch health: a watch that carries no event and no bookmark for ``watch_idle_timeout``
  seconds (the API server sends a bookmark about every minute) is closed and resumed from
  its last resourceVersion; the bounded ``timeoutSeconds`` moves a watch off a draining
  server at the latest then.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client import ApiException

from drakit.plugin.api.resourceapi import ResourceAPI, SliceWatch, WatchEvent
from drakit.plugin.api.retry import Backoff, ErrorKind, classify, describe, retry_after_seconds
from drakit.plugin.background import Supervisor
from drakit.plugin.slices.view import SliceView, newer_rv
from drakit.plugin.slices.writes import OwnWrites

log = logging.getLogger(__name__)
Rng = Callable[[], float]


@dataclass(frozen=True)
class Scope:
    """One LIST/WATCH selection of this publisher's slices: ``node`` is the
    ``spec.nodeName`` field selector value ("" selects the slices without one, which the
    API server's watch cache serves from its nodeName index as well)."""

    name: str
    node: str
    label_selector: str | None = None

    def holds(self, obj: dict[str, Any]) -> bool:
        return str((obj.get("spec") or {}).get("nodeName") or "") == self.node


@dataclass(frozen=True)
class Timing:
    """The publisher's delays, in seconds (see :class:`~drakit.plugin.slices.publisher.
    SlicePublisher` for each)."""

    resync_period: float
    watch_delay: float
    watch_timeout: int
    watch_idle_timeout: float
    recovery_spread: float
    min_retry_delay: float
    backoff: Backoff = field(default_factory=Backoff)

    def recovery_delay(self, failures: int, rng: Rng) -> float:
        """Full jitter: uniform up to the larger of ``recovery_spread`` and the backoff
        delay of attempt ``failures``, never below ``min_retry_delay``."""
        cap = max(self.recovery_spread, self.backoff.delay(failures, rng))
        return max(self.min_retry_delay, cap * rng())

    def broken_watch_delay(self, exc: BaseException, failures: int, rng: Rng) -> float:
        """The wait before watch attempt ``failures`` + 1 after ``exc``."""
        after = retry_after_seconds(exc)
        if after is not None:
            # the server answered and paces us (429 while its watch cache initialises,
            # APF): its delay, spread over [after, 2·after)
            return min(after, self.backoff.max_retry_after) * (1 + rng())
        if isinstance(exc, ApiException) and exc.status:
            # the server answered with an error: exponential backoff, full jitter
            return max(self.min_retry_delay, self.backoff.delay(failures, rng) * rng())
        # no answer (server restarting, connection lost): spread the reconnects
        return self.recovery_delay(failures, rng)


class SliceWatcher:
    """Watches ``scopes`` of ``driver``'s slices into ``view``.

    ``wanted(scope)``: whether the publisher needs the scope now; ``on_foreign(scope,
    event, rng)``: someone else changed a slice (called from the scope's thread);
    ``schedule(delay)``: ask for a resync (after a reconnect, to verify the view, or a
    re-list after a 410); ``stopping``: set when the publisher stops; ``seed`` seeds the
    per-scope generators. Thread-safe.
    """

    def __init__(self, api: ResourceAPI, driver: str, scopes: Sequence[Scope],
                 view: SliceView, own: OwnWrites, timing: Timing, *, seed: Rng,
                 wanted: Callable[[Scope], bool],
                 on_foreign: Callable[[Scope, WatchEvent, Rng], None],
                 schedule: Callable[[float], None], stopping: threading.Event,
                 supervisor: Supervisor | None = None) -> None:
        self.api, self.driver, self.scopes = api, driver, list(scopes)
        self._view, self._own, self._t = view, own, timing
        self._wanted, self._on_foreign, self._schedule = wanted, on_foreign, schedule
        self._stopping = stopping
        self._supervisor = supervisor or Supervisor()
        self.rngs = {sc.name: random.Random(seed()).random for sc in self.scopes}
        self._cond = threading.Condition()   # guards the fields below
        self._current: dict[str, bool] = {}  # listed, and its watch not expired since
        self._rv: dict[str, str] = {}        # the resourceVersion to watch from
        self._open: dict[str, SliceWatch] = {}
        self._last_seen: dict[str, float] = {}  # time.monotonic() of the last event
        self.watches = 0
        """Watch requests that opened a stream."""
        self.restarts = {"expired": 0, "error": 0}
        """Watches that ended or failed to open, by why: its resourceVersion expired (410,
        re-list), or an error (connection lost, server restarting, refused)."""

    # ------------------------------------------------------------------ state

    def listed(self, scope: Scope, resource_version: str) -> None:
        """A LIST of ``scope`` answered at ``resource_version`` (the view holds it)."""
        with self._cond:
            self._rv[scope.name] = newer_rv(self._rv.get(scope.name, ""), resource_version)
            self._current[scope.name] = True
            self._cond.notify_all()

    def forget(self) -> None:
        """The view may be off (a write's answer was lost): not current until listed."""
        with self._cond:
            self._current.clear()

    def current(self, scope: Scope) -> bool:
        with self._cond:
            return bool(self._current.get(scope.name))

    def verified(self, scope: Scope) -> bool:
        """Listed and watched without a gap since: the view is what the server holds."""
        with self._cond:
            return bool(self._current.get(scope.name)) and scope.name in self._open

    def is_open(self, scope: Scope) -> bool:
        with self._cond:
            return scope.name in self._open

    def threads(self) -> list[threading.Thread]:
        """The threads to start: one per scope and the idle check."""
        guarded = self._supervisor.thread
        return [*(threading.Thread(
                    target=guarded(f"slice-watch-{sc.name}",
                                   lambda sc=sc: self._loop(sc)),  # type: ignore[misc]
                    daemon=True, name=f"drakit-slices-watch-{sc.name}")
                  for sc in self.scopes),
                threading.Thread(target=guarded("slice-watch-idle", self._idle_loop),
                                 name="drakit-slices-watch-idle", daemon=True)]

    def stop(self) -> None:
        """Close the open watches (call after setting ``stopping``)."""
        with self._cond:
            watches = list(self._open.values())
            self._cond.notify_all()
        for watch in watches:
            watch.close()

    # ------------------------------------------------------------------ threads

    def _watchable(self, scope: Scope) -> bool:
        return bool(self._rv.get(scope.name)) and self._wanted(scope)

    def _loop(self, scope: Scope) -> None:
        """Watch ``scope`` from the resourceVersion of its LIST, resuming after each
        ``timeoutSeconds``; a broken watch waits a random delay before it reconnects, an
        expired one (410) has the publisher list again."""
        rng = self.rngs[scope.name]
        failures = 0
        while not self._stopping.is_set():
            with self._cond:
                self._cond.wait_for(lambda: self._stopping.is_set() or self._watchable(scope),
                                    timeout=self._t.resync_period)
                if self._stopping.is_set() or not self._watchable(scope):
                    continue
                rv = self._rv[scope.name]
            after_failure = failures > 0
            timeout = int(self._t.watch_timeout * (1 + rng()))
            try:
                watch = self.api.watch_slices(self.driver, scope.node, rv, timeout,
                                              label_selector=scope.label_selector)
            except Exception as exc:
                if not self._stopping.is_set():
                    failures = self._broken(scope, exc, failures, after_failure, rng)
                continue
            failures = 0
            try:
                self._stream(scope, watch, after_failure, rng)
            except Exception as exc:
                if not self._stopping.is_set():
                    failures = self._broken(scope, exc, failures, after_failure, rng)

    def _stream(self, scope: Scope, watch: SliceWatch, after_failure: bool, rng: Rng) -> None:
        """Feed the events of an open ``watch`` into the view until it ends."""
        opened = time.monotonic()
        with self._cond:
            self._open[scope.name] = watch
            self._last_seen[scope.name] = opened
            self.watches += 1
            self._cond.notify_all()
        try:
            if self._stopping.is_set():
                return
            if after_failure:
                # back after a broken watch: once the events since rv are in, the view is
                # current again; verify it (no request unless something differs)
                self._schedule(self._t.watch_delay)
            events = 0
            for event in watch:
                events += 1
                self._on_event(scope, event, rng)
            if events == 0 and not self._stopping.is_set() \
                    and time.monotonic() - opened < min(1.0, self._t.watch_idle_timeout / 2):
                raise ConnectionError("the watch ended at once")
        finally:
            watch.close()
            with self._cond:
                if self._open.get(scope.name) is watch:
                    del self._open[scope.name]

    def _on_event(self, scope: Scope, event: WatchEvent, rng: Rng) -> None:
        with self._cond:
            self._last_seen[scope.name] = time.monotonic()
            if event.resource_version:
                self._rv[scope.name] = newer_rv(self._rv.get(scope.name, ""),
                                                event.resource_version)
        if event.type == "BOOKMARK":
            return
        own = self._own.is_own(event.type, event.object, event.resource_version)
        if event.type == "DELETED":
            self._view.deleted(event.object)
        elif scope.holds(event.object):
            self._view.stored(event.object)
        if not own:
            self._on_foreign(scope, event, rng)

    def _broken(self, scope: Scope, exc: BaseException, failures: int, after_failure: bool,
                rng: Rng) -> int:
        """Handle a failed or broken watch; returns the new count of failures in a row."""
        with self._cond:
            self.restarts["expired" if classify(exc) is ErrorKind.EXPIRED else "error"] += 1
        if classify(exc) is ErrorKind.EXPIRED:
            # the resourceVersion is gone: the publisher lists again, right away when this
            # watch already followed a random reconnect delay, else after one
            delay = self._t.watch_delay if after_failure else rng() * self._t.recovery_spread
            with self._cond:
                self._current[scope.name] = False
                self._rv[scope.name] = ""
            log.info("the %s ResourceSlice watch expired (%s); listing again in %.1fs",
                     scope.name, describe(exc), delay)
            self._schedule(delay)
            return 0
        failures += 1
        delay = self._t.broken_watch_delay(exc, failures, rng)
        self._supervisor.report(f"slice-watch-{scope.name}", exc, retry_in=delay,
                                trace=False)
        self._stopping.wait(delay)
        return failures

    def _idle_loop(self) -> None:
        """Close every watch that carried nothing for ``watch_idle_timeout`` seconds (its
        thread resumes it from its last resourceVersion)."""
        while not self._stopping.is_set():
            with self._cond:
                now = time.monotonic()
                due, idle = float("inf"), []
                for name, watch in self._open.items():
                    at = self._last_seen.get(name, now) + self._t.watch_idle_timeout
                    if at <= now:
                        idle.append(watch)
                        self._last_seen[name] = at = now + self._t.watch_idle_timeout
                        log.info("the %s ResourceSlice watch carried nothing for %.0fs; "
                                 "replacing it", name, self._t.watch_idle_timeout)
                    due = min(due, at)
                if not idle:
                    self._cond.wait(None if due == float("inf") else due - now)
            for watch in idle:
                watch.close()

