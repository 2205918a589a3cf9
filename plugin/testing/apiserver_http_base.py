"""What every part of the embedded API server's request handler
(:class:`~drakit.plugin.testing.apiserver_http.APIRequestHandler`) uses: reading the body,
recording the request once before its answer leaves, and sending a JSON answer with the
request's ``Warning: 299`` headers.
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any

from .apiserver_log import RequestRecord
from .apiserver_registry import current_request

if TYPE_CHECKING:
    from .apiserver_http import EmbeddedHTTPServer

__all__ = ["HandlerBase"]


class HandlerBase(BaseHTTPRequestHandler):
    """Plumbing of one HTTP/1.1 connection of an
    :class:`~drakit.plugin.testing.apiserver_http.EmbeddedHTTPServer`."""

    server: EmbeddedHTTPServer
    _record: dict[str, Any] | None = None

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _log_once(self, code: int) -> None:
        """Record the request (once), before its answer leaves, so a client that got the
        answer always finds the record."""
        record = self._record
        if record is not None:
            self._record = None
            self.server.ctx.log.add(RequestRecord(**{**record, "status_code": code}))

    def _send_json(self, code: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload, separators=(",", ":")).encode("utf-8")
        self._log_once(code)
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        for text in current_request().warnings:
            self.send_header("Warning", "299 - " + json.dumps(text))
        self.end_headers()
        self.wfile.write(data)
