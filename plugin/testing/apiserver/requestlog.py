"""The embedded API server's request log.

Every HTTP request is recorded once it has been answered (or dropped) as a
:class:`RequestRecord` with its RBAC verb (get, list, watch, create, update, patch,
delete, deletecollection), so tests can check what a component asked for and that the
ClusterRole grants it.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

from drakit.plugin.testing.apiserver.faults import WRITE_VERBS


@dataclass(frozen=True)
class RequestRecord:
    """One request.

    ``resource`` is the plural (``resourceclaims``; ``""`` for discovery and unknown
    paths), ``subresource`` ``"status"`` or ``""``, ``api_group`` ``""`` for core,
    ``api_version`` the version in the path (``v1``, ``v1beta1``...). ``status_code`` is the
    HTTP status sent, or 0 when the connection was dropped by a fault. ``fault`` tells
    whether the answer was injected. ``field_manager`` and ``content_type`` are as sent.
    ``received_at`` is the server's monotonic clock when the request arrived.
    """

    verb: str
    resource: str
    subresource: str
    namespace: str
    name: str
    api_group: str
    api_version: str
    user_agent: str
    status_code: int
    method: str
    path: str
    field_manager: str = ""
    content_type: str = ""
    fault: bool = False
    received_at: float = 0.0
    """``time.monotonic()`` when the request arrived (gaps between retries, Retry-After)."""
    query: str = ""
    """The query string as sent (``fieldSelector=...&labelSelector=...``), without ``?``."""
    user: str = ""
    """The authenticated user name where the server knows it (the real kube-apiserver's
    audit log; ``""`` on the embedded server)."""

    @property
    def full_resource(self) -> str:
        """``resourceclaims/status`` or ``resourceslices`` (RBAC resource spelling)."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    @property
    def is_write(self) -> bool:
        return self.verb in WRITE_VERBS


class RequestLog:
    """Thread-safe append-only list of :class:`RequestRecord`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[RequestRecord] = []

    def add(self, record: RequestRecord) -> None:
        with self._lock:
            self._records.append(record)

    def records(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._records)

    def clear(self) -> None:
        with self._lock:
            self._records.clear()

    def write_counts(self, *, successful_only: bool = True) -> Counter[str]:
        """Write requests per ``full_resource`` (e.g. ``{"resourceslices": 3}``); by default
        only those answered 2xx."""
        counts: Counter[str] = Counter()
        for r in self.records():
            if r.is_write and (not successful_only or 200 <= r.status_code < 300):
                counts[r.full_resource] += 1
        return counts
