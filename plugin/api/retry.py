"""The one retry policy of drakit's API calls: claim reads, status writes and publishing.

An error from the kubernetes client is sorted by :func:`classify` (429, 5xx and connection
errors are worth retrying; 409, 404, 410 and the rest are for the caller to handle). A
retryable error is retried after the server's ``Retry-After`` (429/503, API Priority and
Fairness) capped at :attr:`Backoff.max_retry_after`, or else after an exponential backoff
with jitter. With a ``deadline`` (``time.monotonic()`` seconds; for a kubelet call the
call's gRPC deadline minus :func:`answer_margin`), no wait and no request outlasts it: each
attempt gets :meth:`Deadline.timeout` as its HTTP timeout, and a wait that would end past
the deadline is not started (the last error is raised instead).

The HTTP client does not retry on its own: :class:`drakit.plugin.api.kubehttp.Transport` sends
every request with urllib3 retries off (urllib3's default ``Retry`` honours ``Retry-After``
without a cap and sleeps inside the request, outside any deadline).
"""

from __future__ import annotations

import enum
import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import urllib3
from kubernetes.client import ApiException

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Seconds a kubelet call may take when its gRPC request carries no deadline (the kubelet
#: sets 45 s on NodePrepareResources / NodeUnprepareResources).
DEFAULT_CALL_SECONDS: Final = 45.0
#: Longest Retry-After honoured for an API call made for a kubelet call (seconds).
CLAIM_READ_MAX_RETRY_AFTER: Final = 10.0


class ErrorKind(enum.Enum):
    RETRYABLE = "retryable"
    CONFLICT = "conflict"
    NOT_FOUND = "not found"
    EXPIRED = "expired"
    FATAL = "fatal"


_CONNECTION_ERRORS: Final = (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError)


class ResponseTooLarge(Exception):
    """An API answer larger than the client accepts (never retried: it will not shrink)."""


def classify(exc: BaseException) -> ErrorKind:
    """Sort an error from the client: 429/5xx/connection problems are retryable, 409 is a
    conflict (re-read and retry), 404 not found, 410 an expired resourceVersion (re-list),
    anything else (400, 401, 403, 422, an oversized answer, …) fatal for this request."""
    if isinstance(exc, ApiException):
        status = exc.status or 0
        if status == 0 or status == 429 or status >= 500:
            return ErrorKind.RETRYABLE
        if status == 409:
            return ErrorKind.CONFLICT
        if status == 404:
            return ErrorKind.NOT_FOUND
        if status == 410:
            return ErrorKind.EXPIRED
        return ErrorKind.FATAL
    if isinstance(exc, _CONNECTION_ERRORS):
        return ErrorKind.RETRYABLE
    return ErrorKind.FATAL


def retry_after_seconds(exc: BaseException) -> float | None:
    """The ``Retry-After`` delay of a 429/503 answer, in seconds (None when absent)."""
    headers = getattr(exc, "headers", None)
    if not headers:
        return None
    raw = headers.get("Retry-After") if hasattr(headers, "get") else None
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except (TypeError, ValueError):
        return None


def _connection_problem(exc: BaseException) -> str | None:
    """urllib3's connection failures in words, naming the API server's host:port (their
    own text carries object reprs and a float timeout); None for anything else."""
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        exc = exc.reason
    what = {  # NewConnectionError is a ConnectTimeoutError in urllib3 2: it goes first
        urllib3.exceptions.NewConnectionError: "cannot connect",
        urllib3.exceptions.ConnectTimeoutError: "connecting timed out",
        urllib3.exceptions.ReadTimeoutError: "no answer before the read timeout",
        urllib3.exceptions.ProtocolError: "the connection broke",
    }
    text = next((t for kind, t in what.items() if isinstance(exc, kind)), None)
    if text is None:
        return None
    if isinstance(exc, urllib3.exceptions.NewConnectionError):
        holder: Any = exc.conn
    elif isinstance(exc, urllib3.exceptions.ReadTimeoutError):
        holder = exc.pool
    else:
        holder = next((a for a in exc.args if hasattr(a, "host") and hasattr(a, "port")), None)
    where = f" at {holder.host}:{holder.port}" if holder is not None else ""
    cause = exc.args[-1] if exc.args and isinstance(exc.args[-1], (str, BaseException)) else ""
    errno = getattr(exc, "__context__", None)
    detail = f" ({errno.strerror})" if isinstance(errno, OSError) and errno.strerror else ""
    if not detail and isinstance(cause, BaseException):
        detail = f" ({cause})"
    return f"API server{where}: {text}{detail}"


def describe(exc: BaseException) -> str:
    """A one-line description: HTTP status, reason and the Status message (with causes);
    for a connection failure, what failed and the API server's host:port."""
    problem = _connection_problem(exc)
    if problem is not None:
        return problem
    if isinstance(exc, ApiException):
        text = f"HTTP {exc.status} {exc.reason or ''}".strip()
        try:
            body = json.loads(exc.body) if exc.body else {}
        except (TypeError, ValueError):
            body = {}
        if isinstance(body, dict) and body.get("message"):
            text += f": {body['message']}"
        return text
    return f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with jitter: attempt ``n`` (1-based) waits
    ``min(max_delay, initial · factor^(n-1))``, spread by ±``jitter`` (a fraction).
    ``attempts`` bounds the calls per operation; ``max_retry_after`` caps a server's
    Retry-After (seconds)."""

    initial: float = 0.2
    factor: float = 2.0
    max_delay: float = 10.0
    jitter: float = 0.2
    attempts: int = 5
    max_retry_after: float = 60.0

    def delay(self, attempt: int, rng: Callable[[], float] = random.random) -> float:
        base = min(self.max_delay, self.initial * self.factor ** max(0, attempt - 1))
        return max(0.0, base * (1 + self.jitter * (2 * rng() - 1)))

    def wait_after(self, exc: BaseException, attempt: int,
                   rng: Callable[[], float] = random.random) -> float:
        """Seconds to wait before the next attempt after ``exc`` failed attempt ``attempt``:
        the server's Retry-After capped at :attr:`max_retry_after`, else :meth:`delay`."""
        after = retry_after_seconds(exc)
        if after is not None:
            return min(after, self.max_retry_after)
        return self.delay(attempt, rng)


#: Claim reads for a kubelet call: fast first retries, Retry-After capped at 10 s; the
#: call's deadline ends them.
CLAIM_READS: Final = Backoff(initial=0.1, max_delay=2.0, jitter=0.3, attempts=50,
                             max_retry_after=CLAIM_READ_MAX_RETRY_AFTER)


class Deadline:
    """A point in ``time.monotonic()`` seconds (None: no deadline)."""

    def __init__(self, at: float | None) -> None:
        self.at = at

    @classmethod
    def after(cls, seconds: float | None) -> Deadline:
        return cls(None if seconds is None else time.monotonic() + seconds)

    def remaining(self) -> float | None:
        """Seconds left (≥ 0), or None without a deadline."""
        return None if self.at is None else max(0.0, self.at - time.monotonic())

    def expired(self) -> bool:
        return self.at is not None and time.monotonic() >= self.at

    def timeout(self, cap: float) -> float:
        """The HTTP timeout of one attempt: ``cap``, or less when the deadline is nearer
        (at least 10 ms, so a request is still sent)."""
        left = self.remaining()
        return cap if left is None else max(0.01, min(cap, left))


def answer_margin(remaining: float) -> float:
    """Seconds kept back from a kubelet call's remaining time to build and send the answer:
    10 % of it, between 0.1 s and 2 s."""
    return min(2.0, max(0.1, remaining * 0.1))


def call_deadline(time_remaining: float | None) -> float:
    """The deadline (monotonic seconds) for the work of a kubelet call with
    ``time_remaining`` seconds left (gRPC ``context.time_remaining()``; None: no deadline,
    :data:`DEFAULT_CALL_SECONDS` assumed), minus :func:`answer_margin`."""
    left = DEFAULT_CALL_SECONDS if time_remaining is None else max(0.0, time_remaining)
    return time.monotonic() + left - answer_margin(left)


def call_with_retries(fn: Callable[[], T], backoff: Backoff, *,
                      deadline: Deadline | float | None = None,
                      sleep: Callable[[float], Any] = time.sleep,
                      rng: Callable[[], float] = random.random,
                      what: str = "API call") -> T:
    """Call ``fn``; on a retryable error wait (:meth:`Backoff.wait_after`) and try again, at
    most ``backoff.attempts`` calls and never past ``deadline``. Other errors, and the last
    retryable one, are raised unchanged; a deadline already passed before the first
    attempt raises TimeoutError."""
    dl = deadline if isinstance(deadline, Deadline) else Deadline(deadline)
    attempt = 0
    while True:
        attempt += 1
        if dl.expired():
            raise TimeoutError(f"{what}: the caller's deadline passed before attempt {attempt}")
        try:
            return fn()
        except Exception as exc:
            if classify(exc) is not ErrorKind.RETRYABLE or attempt >= backoff.attempts:
                raise
            wait = backoff.wait_after(exc, attempt, rng)
            left = dl.remaining()
            if left is not None and wait >= left:
                log.info("%s failed (%s); no retry: the next one (in %.2fs) would start past "
                         "the caller's deadline (%.2fs left)", what, describe(exc), wait, left)
                raise
            log.info("%s failed (%s), retry %d/%d in %.2fs", what, describe(exc), attempt,
                     backoff.attempts - 1, wait)
            sleep(wait)
