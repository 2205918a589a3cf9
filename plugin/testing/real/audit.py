"""The real kube-apiserver's audit log read back as the embedded server's request log
(:class:`~drakit.plugin.testing.apiserver.requestlog.RequestRecord`): the audit policy the server is
started with, one audit event as a record, and ``requests`` / ``write_counts`` over the log.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from typing import Any

from drakit.plugin.testing.apiserver.requestlog import RequestRecord
from drakit.plugin.testing.real.rest import ClusterREST

__all__ = ["AUDIT_POLICY", "ClusterAuditLog", "record_from_audit_event"]

#: Metadata level for every request, logged once when the response is complete.
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
  - level: Metadata
"""


def record_from_audit_event(event: Mapping[str, Any]) -> RequestRecord:
    """One request as the real server's audit log saw it (stage ResponseComplete), in the
    embedded server's :class:`RequestRecord` shape (``method`` is not logged: ``""``)."""
    ref = event.get("objectRef") or {}
    return RequestRecord(
        verb=event.get("verb", ""),
        resource=ref.get("resource", ""),
        subresource=ref.get("subresource", ""),
        namespace=ref.get("namespace", ""),
        name=ref.get("name", ""),
        api_group=ref.get("apiGroup", ""),
        api_version=ref.get("apiVersion", ""),
        user_agent=event.get("userAgent", ""),
        status_code=int((event.get("responseStatus") or {}).get("code", 0)),
        method="",
        path=event.get("requestURI", ""),
        user=(event.get("user") or {}).get("username", ""),
    )


class ClusterAuditLog:
    """Requests read from ``workdir/audit.log`` from an offset that :meth:`clear_requests`
    moves to the end (the real server's counterpart of the embedded one's request log)."""

    def __init__(self, rest: ClusterREST) -> None:
        self._rest = rest
        self._audit_offset = 0

    def audit_records(self, timeout: float = 5.0) -> list[RequestRecord]:
        """Every request since the last :meth:`clear_requests`, oldest first (audit stage
        ResponseComplete). The server logs a request just after answering it, so this first
        sends a marker request and reads until the marker is logged (at most ``timeout``
        seconds); the marker itself is left out."""
        marker = f"/version?drakit-audit-marker={uuid.uuid4().hex}"
        self._rest.request("GET", marker)
        deadline = time.monotonic() + timeout
        while True:
            out: list[RequestRecord] = []
            seen = False
            with contextlib.suppress(FileNotFoundError), \
                    open(self._rest.workdir / "audit.log", "rb") as f:
                f.seek(self._audit_offset)
                for line in f:
                    if not line.endswith(b"\n"):
                        break
                    with contextlib.suppress(ValueError):
                        record = record_from_audit_event(json.loads(line))
                        if "drakit-audit-marker=" in record.path:
                            seen = seen or record.path == marker
                            continue
                        out.append(record)
            if seen or time.monotonic() >= deadline:
                return out
            time.sleep(0.02)

    def clear_requests(self) -> None:
        """Forget the requests logged so far (only later ones are returned)."""
        with contextlib.suppress(FileNotFoundError):
            self._audit_offset = (self._rest.workdir / "audit.log").stat().st_size

    def requests(self, *, verb: str | None = None, resource: str | None = None,
                 user: str | None = None) -> list[RequestRecord]:
        """Logged requests, optionally of one RBAC ``verb``, ``resource`` (``resourceclaims``
        matches its subresources too, ``resourceclaims/status`` only that) and ``user``."""
        return [r for r in self.audit_records()
                if (verb is None or r.verb == verb)
                and (resource is None or resource in (r.resource, r.full_resource))
                and (user is None or r.user == user)]

    def write_counts(self, *, successful_only: bool = True,
                     user: str | None = None) -> Counter[str]:
        """Write requests per resource (``{"resourceslices": 2, ...}``), optionally of one
        user, as the embedded server's ``write_counts``."""
        return Counter(r.full_resource for r in self.requests(user=user)
                       if r.is_write
                       and (not successful_only or 200 <= r.status_code < 300))
