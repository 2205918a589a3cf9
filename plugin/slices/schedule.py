"""When the publisher's background loop syncs next.

Two clocks: the periodic verification, every ``resync_period`` times a random factor in
[0.5, 1.5) (each publisher draws from its own generator, so agents started together do not
run in lockstep), and a resync asked for (a trigger, someone else's change, a reconnected
watch; the earliest one asked for wins). After a failed sync both wait for the failure's
backoff: nothing asked for meanwhile (a trigger included) makes the next attempt sooner.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def jittered(seconds: float, rng: Callable[[], float]) -> float:
    """``seconds`` times a uniform factor in [0.5, 1.5)."""
    return seconds * (0.5 + rng())


class ResyncSchedule:
    """Times in ``time.monotonic()`` seconds. Thread-safe."""

    def __init__(self, resync_period: float, rng: Callable[[], float]) -> None:
        self._period = resync_period
        self._rng = rng
        self._cond = threading.Condition()
        self._verify_at = float("inf")
        self._asked_at: float | None = None
        self._not_before = 0.0       # the end of the last failure's backoff

    def next_syncs(self) -> tuple[float, float | None]:
        """(the next periodic verification, the next resync asked for or None); neither
        before the end of a failure's backoff."""
        with self._cond:
            asked = None if self._asked_at is None else max(self._asked_at, self._not_before)
            return max(self._verify_at, self._not_before), asked

    def start(self, now: bool) -> None:
        """The loop starts: the first verification after a jittered period; a resync at
        once when ``now``."""
        with self._cond:
            self._verify_at = time.monotonic() + jittered(self._period, self._rng)
            if now:
                self._asked_at = time.monotonic()
            self._cond.notify_all()

    def ask(self, delay: float) -> None:
        """A resync in ``delay`` seconds (unless one is asked for sooner)."""
        with self._cond:
            at = time.monotonic() + delay
            if self._asked_at is None or at < self._asked_at:
                self._asked_at = at
            self._cond.notify_all()

    def succeeded(self) -> None:
        """A sync ended well (or had nothing to do): the next verification a jittered
        period from now, no backoff."""
        with self._cond:
            self._not_before = 0.0
            self._verify_at = time.monotonic() + jittered(self._period, self._rng)

    def failed(self, delay: float) -> None:
        """A sync failed: the next one in ``delay`` seconds, and none sooner."""
        with self._cond:
            self._not_before = time.monotonic() + delay
            self._asked_at = self._not_before
            self._cond.notify_all()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def wait_due(self, stopping: threading.Event) -> bool:
        """Block until a sync is due (True; the asked-for resync is taken) or ``stopping``
        is set (False; :meth:`wake` ends the wait)."""
        with self._cond:
            while not stopping.is_set():
                now = time.monotonic()
                due = min(self._verify_at,
                          self._asked_at if self._asked_at is not None else float("inf"))
                due = max(due, self._not_before)
                if now >= due:
                    self._asked_at = None
                    return True
                self._cond.wait(None if due == float("inf") else due - now)
            return False
