"""Logging set-up: text or JSON lines, with the DRA context (claim UID, claim, driver, pool,
device) carried on every record that has it (pass ``extra={...}``)."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

CONTEXT_KEYS = ("claim_uid", "claim", "driver", "pool", "device", "plugin")


class JSONFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, msg, the context keys, exc."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in CONTEXT_KEYS:
            if hasattr(record, key):
                out[key] = getattr(record, key)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out)


class TextFormatter(logging.Formatter):
    """``time level logger: msg key=value …``"""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        base = super().format(record)
        ctx = " ".join(f"{k}={getattr(record, k)}" for k in CONTEXT_KEYS if hasattr(record, k))
        return f"{base} {ctx}" if ctx else base


def setup_logging(fmt: str = "text", verbosity: int = 0, driver: str | None = None) -> None:
    """Configure the root logger on stderr. ``verbosity`` ≥ 1 enables debug."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter() if fmt == "json" else TextFormatter())
    if driver:
        handler.addFilter(_DriverFilter(driver))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbosity >= 1 else logging.INFO)
    for noisy in ("urllib3", "kubernetes"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


class _DriverFilter(logging.Filter):
    def __init__(self, driver: str) -> None:
        super().__init__()
        self.driver = driver

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "driver"):
            record.driver = self.driver
        return True
