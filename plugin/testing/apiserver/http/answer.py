"""The answer to one request of the embedded API server: the request is recorded once,
before its answer leaves (so a client that got the answer always finds the record), then
a JSON body with the request's ``Warning: 299`` headers, or a chunked stream (watch).
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any

from drakit.plugin.testing.apiserver.request import current_request
from drakit.plugin.testing.apiserver.requestlog import RequestLog, RequestRecord

__all__ = ["Answer"]


class Answer:
    """Writes the answer of one request on ``connection`` and records the request (its
    fields in ``record``) in ``log`` once."""

    def __init__(self, connection: BaseHTTPRequestHandler, log: RequestLog,
                 record: dict[str, Any]) -> None:
        self._connection = connection
        self._log = log
        self._record: dict[str, Any] | None = record

    def log_once(self, code: int) -> None:
        """Record the request with ``code`` unless it was recorded already."""
        record, self._record = self._record, None
        if record is not None:
            self._log.add(RequestRecord(**{**record, "status_code": code}))

    def send_json(self, code: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload, separators=(",", ":")).encode("utf-8")
        self.log_once(code)
        conn = self._connection
        conn.send_response(code)
        conn.send_header("Content-Type", "application/json")
        conn.send_header("Content-Length", str(len(data)))
        conn.send_header("Cache-Control", "no-cache, private")
        for key, value in (headers or {}).items():
            conn.send_header(key, value)
        for text in current_request().warnings:
            conn.send_header("Warning", "299 - " + json.dumps(text))
        conn.end_headers()
        conn.wfile.write(data)

    def start_stream(self) -> None:
        """A 200 with a chunked JSON body (watch)."""
        self.log_once(200)
        conn = self._connection
        conn.send_response(200)
        conn.send_header("Content-Type", "application/json")
        conn.send_header("Transfer-Encoding", "chunked")
        conn.send_header("Cache-Control", "no-cache, private")
        conn.end_headers()

    def write_chunk(self, data: bytes) -> None:
        wfile = self._connection.wfile
        wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        wfile.flush()

    def end_stream(self) -> None:
        wfile = self._connection.wfile
        wfile.write(b"0\r\n\r\n")
        wfile.flush()
