"""Logging set-up: text or JSON lines, with the DRA context (claim UID, claim, driver, pool,
device) carried on every record that has it (pass ``extra={...}``).

JSON lines come from python-json-logger: ``time`` (UTC, ISO 8601, milliseconds),
``level`` (lower case), ``logger``, ``msg``, then every extra field of the record (the DRA
context keys and anything a vendor plugin passes, e.g. ``extra={"serial": "…"}``), and
``exc`` with the traceback. Non-ASCII text is written as is (UTF-8), not escaped.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Any

from pythonjsonlogger.json import JsonFormatter

CONTEXT_KEYS = ("claim_uid", "claim", "driver", "pool", "device", "plugin")


class JSONFormatter(JsonFormatter):
    """One JSON object per line: time, level, logger, msg, the record's extra fields, exc."""

    def __init__(self) -> None:
        super().__init__(
            "%(name)s %(levelname)s %(message)s",
            rename_fields={"name": "logger", "levelname": "level", "message": "msg",
                           "exc_info": "exc"},
            json_ensure_ascii=False,
        )

    def add_fields(
        self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]
    ) -> None:
        log_data["time"] = datetime.fromtimestamp(record.created, UTC).isoformat(
            timespec="milliseconds")
        super().add_fields(log_data, record, message_dict)
        log_data["level"] = record.levelname.lower()


class TextFormatter(logging.Formatter):
    """``time level logger: msg key=value …``"""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        base = super().format(record)
        ctx = " ".join(f"{k}={getattr(record, k)}" for k in CONTEXT_KEYS if hasattr(record, k))
        return f"{base} {ctx}" if ctx else base


def setup_logging(fmt: str = "text", verbosity: int = 0, driver: str | None = None) -> None:
    """Configure the root logger on stderr. ``verbosity`` ≥ 1 enables debug. urllib3's own
    warnings (``Retrying (…) after connection broken``) are silenced: drakit logs one line
    per failed API attempt itself."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter() if fmt == "json" else TextFormatter())
    if driver:
        handler.addFilter(_DriverFilter(driver))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbosity >= 1 else logging.INFO)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.DEBUG if verbosity >= 2 else logging.ERROR)


class _DriverFilter(logging.Filter):
    def __init__(self, driver: str) -> None:
        super().__init__()
        self.driver = driver

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "driver"):
            record.driver = self.driver
        return True
