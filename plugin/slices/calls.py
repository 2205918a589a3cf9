"""The publisher's one way to send an API call: drakit's retry policy
(:func:`drakit.plugin.api.retry.call_with_retries`) behind a Retry-After hold-back.

A 429/503 with ``Retry-After`` asks the client to wait; :func:`call_with_retries` does so for
the call that got it. :class:`ApiCalls` also holds back every *later* call sent through it
(the next sync's LIST, a parallel write, a cleanup) until that delay has passed, so no call
reaches the server sooner than a retry of the throttled one would. Every wait, the hold-back
included, is bounded by the caller's deadline.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from drakit.plugin.api.retry import Backoff, Deadline, call_with_retries, retry_after_seconds

log = logging.getLogger(__name__)
T = TypeVar("T")


class ApiCalls:
    """Sends calls with ``backoff`` (per call), waiting with ``sleep`` and drawing jitter
    from ``rng``. Thread-safe."""

    def __init__(self, backoff: Backoff | None = None, *,
                 sleep: Callable[[float], Any] = time.sleep,
                 rng: Callable[[], float] = random.random) -> None:
        self.backoff = backoff or Backoff()
        self._sleep = sleep
        self._rng = rng
        self._lock = threading.Lock()
        self._throttled_until = 0.0   # time.monotonic() before which no call is sent

    def held_back(self) -> float:
        """Seconds until the last Retry-After has passed (0 when none is pending)."""
        with self._lock:
            return max(0.0, self._throttled_until - time.monotonic())

    def __call__(self, fn: Callable[[], T], what: str,
                 deadline: Deadline | float | None = None) -> T:
        """``fn()`` with the retry policy, after the hold-back. ``deadline``
        (``time.monotonic()`` seconds) bounds every wait and attempt; TimeoutError when the
        hold-back alone would outlast it. Errors: those of :func:`call_with_retries`."""
        dl = deadline if isinstance(deadline, Deadline) else Deadline(deadline)
        left = self.held_back()
        if left > 0:
            remaining = dl.remaining()
            if remaining is not None and left >= remaining:
                raise TimeoutError(f"{what}: the API server's Retry-After ({left:.2f}s) "
                                   f"outlasts the caller's deadline ({remaining:.2f}s)")
            log.info("%s waits %.2fs for the API server's Retry-After", what, left)
            self._sleep(left)

        def attempt() -> T:
            try:
                return fn()
            except Exception as exc:
                after = retry_after_seconds(exc)
                if after is not None:
                    until = time.monotonic() + min(after, self.backoff.max_retry_after)
                    with self._lock:
                        self._throttled_until = max(self._throttled_until, until)
                raise

        return call_with_retries(attempt, self.backoff, deadline=dl, sleep=self._sleep,
                                 rng=self._rng, what=what)
