"""Logging set-up in the shape Kubernetes components write (klog / component-base logs).

Verbosity is klog's: ``V(0)`` is always on, ``V(1)`` … ``V(7)`` are opt-in (``-v N``), as
the Go drivers use them: V(1) start-up detail, V(2) one line per claim and outcome (a
successful prepare), V(4) to V(5) debug (Python's ``logging.DEBUG`` is V(5)), V(6) each API
request and kubelet call, V(7) everything. :func:`V` gives the ``logging`` level of
``V(n)``: ``log.log(V(2), "prepared claim", extra=claim_keys(ns, name, uid))``.

JSON lines (``--log-format json``, serialized by python-json-logger) carry klog's JSON keys
(Kubernetes' structured logging, KEP-1602): ``ts`` (Unix seconds, float), ``v`` (the
verbosity of an info line; absent on errors), ``caller`` (``path/file.py:line``), ``logger``
(the Python logger's name, as klog writes a named logger's), ``msg``,
``err`` (the error, on an error line or when passed as ``extra={"err": e}``), then the
record's keys: the Kubernetes object keys (``claim`` as ``namespace/name``, ``claimUID``,
``node``, ``pool``, ``device``, ``driver``) and anything else passed in ``extra``. Text lines
are ``<RFC 3339 time with zone> <level> <logger> <file:line>] "<msg>" key="value" …``.

Every value — the message after ``%`` formatting, each key, each traceback line — is escaped
(:func:`escape`: no raw control, line-separator or bidi-override characters) and bounded
(:data:`VALUE_MAX`, :data:`MSG_MAX`), and a line as a whole is bounded (:data:`LINE_MAX`):
text from a request or the API server cannot forge a log line or fill a disk.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pythonjsonlogger.json import JsonFormatter

# re-exported: the levels and keys are the floor's (drakit.plugin.klog), used by every room
from drakit.plugin.klog import MAX_VERBOSITY as MAX_VERBOSITY
from drakit.plugin.klog import V as V
from drakit.plugin.klog import claim_keys as claim_keys

#: Longest message (after formatting and escaping), in characters.
MSG_MAX = 2048
#: Longest value of one key, in characters.
VALUE_MAX = 512
#: Most keys (and items of one nested map or list) on one line.
KEYS_MAX = 32
#: Longest traceback kept, in characters (its last part: where it was raised).
TRACE_MAX = 4096
#: Longest line, in characters.
LINE_MAX = 8192

#: ``extra`` names call sites use → the key written (klog's object keys).
KEY_NAMES = {"claim_uid": "claimUID", "pod_uid": "podUID"}
#: The DRA context keys the text format puts first, in this order.
CONTEXT_KEYS = ("claim", "claim_uid", "driver", "node", "pool", "device", "plugin")

_RECORD_ATTRS = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message", "asctime", "taskName"}
_PKG_ROOT = Path(__file__).resolve().parents[2]  # the directory holding plugin/, cdi/, …


def verbosity_of(levelno: int) -> int:
    """klog's verbosity of an info-or-lower record (0 for INFO and above)."""
    if levelno >= logging.INFO:
        return 0
    return min((logging.INFO - levelno + 1) // 2, 10)


# -- escaping and bounding ----------------------------------------------------------------

_ESCAPES = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r", 0x5C: "\\\\"}
_TABLE: dict[int, str] = {
    c: _ESCAPES.get(c, f"\\x{c:02x}") for c in [*range(0x20), 0x5C, *range(0x7F, 0xA0)]
}
# line and paragraph separators, bidi embeddings/overrides/isolates (CVE-2021-42574), BOM
for _c in (0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A), 0xFEFF):
    _TABLE[_c] = f"\\u{_c:04x}"


def bound(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    marker = f"…[{len(text) - limit} more chars]"
    return text[: max(0, limit - len(marker))] + marker


def escape(value: object, limit: int = VALUE_MAX) -> str:
    """``str(value)`` with no raw control characters (``\\n``, ``\\x1b``, …; a backslash is
    doubled, so an escape cannot be forged either), cut to ``limit`` characters."""
    text = value if isinstance(value, str) else str(value)
    # cut before escaping (a 4 MiB field costs no 4 MiB translate), then again after
    return bound(bound(text, limit).translate(_TABLE), limit)


def _value(value: Any, limit: int, depth: int = 0) -> Any:
    """A JSON-safe, escaped and bounded form of a key's value (maps and lists kept as such,
    to a depth of 2; numbers, booleans and None as they are)."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, Mapping) and depth < 2:
        out = {}
        for i, (k, v) in enumerate(value.items()):
            if i == KEYS_MAX:
                out["truncated"] = f"{len(value) - KEYS_MAX} more keys"
                break
            out[escape(k, 64)] = _value(v, limit, depth + 1)
        return out
    if isinstance(value, (list, tuple, set, frozenset)) and depth < 2:
        items = list(value)
        shown = [_value(v, limit, depth + 1) for v in items[:KEYS_MAX]]
        if len(items) > KEYS_MAX:
            shown.append(f"… {len(items) - KEYS_MAX} more")
        return shown
    if isinstance(value, Path):
        return escape(str(value), limit)
    if isinstance(value, BaseException):
        return escape(_error_text(value), limit)
    return escape(value, limit)


def _error_text(e: BaseException) -> str:
    text = str(e)
    return text if text else type(e).__name__


def _caller(record: logging.LogRecord) -> str:
    """``plugin/claims/node.py:255`` for drakit's own files, ``urllib3/connectionpool.py:247`` for
    an installed package's, the file name for anything else."""
    parts = Path(record.pathname).parts
    if "site-packages" in parts:
        shown = "/".join(parts[len(parts) - parts[::-1].index("site-packages"):])
    else:
        try:
            shown = Path(record.pathname).resolve().relative_to(_PKG_ROOT).as_posix()
        except (ValueError, OSError):
            shown = Path(record.pathname).name
    return f"{shown}:{record.lineno}"


def _fields(record: logging.LogRecord, scale: int) -> tuple[str, dict[str, Any], str, str | None]:
    """(msg, keys, err, traceback) of ``record``, escaped and bounded; ``scale`` divides the
    limits (the line bound's second and later tries)."""
    try:
        msg = record.getMessage()
    except Exception as e:  # a call site's bad format string must not lose the line
        msg = f"{record.msg!s} (log message formatting failed: {type(e).__name__})"
    msg = escape(msg, MSG_MAX // scale)
    keys: dict[str, Any] = {}
    extra = [k for k in record.__dict__ if k not in _RECORD_ATTRS and not k.startswith("_")]
    order = [k for k in CONTEXT_KEYS if k in extra] + [k for k in extra if k not in CONTEXT_KEYS]
    for i, k in enumerate(order):
        if k == "err":
            continue
        if i == KEYS_MAX:
            keys["truncated"] = f"{len(order) - KEYS_MAX} more keys"
            break
        keys[KEY_NAMES.get(k, escape(k, 64))] = _value(record.__dict__[k], VALUE_MAX // scale)
    err = ""
    if "err" in record.__dict__ and record.__dict__["err"] is not None:
        err = _value(record.__dict__["err"], MSG_MAX // scale)
        err = err if isinstance(err, str) else escape(err, MSG_MAX // scale)
    trace = None
    if record.exc_info and record.exc_info[1] is not None:
        exc = record.exc_info[1]
        if not err:
            err = escape(f"{type(exc).__name__}: {_error_text(exc)}", MSG_MAX // scale)
        if scale < 8:
            text = record.exc_text or "".join(traceback.format_exception(*record.exc_info))
            lines = [escape(x, 512) for x in text.rstrip("\n").split("\n")]
            trace = "\n".join(lines)
            if len(trace) > TRACE_MAX // scale:
                trace = "…" + trace[-(TRACE_MAX // scale):]
    elif record.exc_text and scale < 8:
        trace = "\n".join(escape(x, 512) for x in record.exc_text.split("\n"))[-TRACE_MAX:]
    return msg, keys, str(err), trace


def _bounded(record: logging.LogRecord, render: Any) -> str:
    """``render(fields)`` with the limits divided by 1, 2, 4, … until the line fits; past
    that, the keys are left out (the line stays well-formed: no cut inside JSON)."""
    scale = 1
    while True:
        msg, keys, err, trace = _fields(record, scale)
        line: str = render(msg, keys, err, trace)
        if len(line) <= LINE_MAX:
            return line
        if scale >= 16:
            return str(render(msg, {"truncated": f"{len(keys)} keys left out: line too long"},
                              err, None))
        scale *= 2


# -- formatters ---------------------------------------------------------------------------


class JSONFormatter(JsonFormatter):
    """One klog-shaped JSON object per line: ts, v, caller, msg, err, the record's keys,
    stacktrace. Non-ASCII text is written as is (UTF-8); control characters never are."""

    def __init__(self) -> None:
        super().__init__(json_ensure_ascii=False)

    def format(self, record: logging.LogRecord) -> str:
        def render(msg: str, keys: dict[str, Any], err: str, trace: str | None) -> str:
            doc: dict[str, Any] = {"ts": round(record.created, 6)}
            if record.levelno < logging.WARNING:
                doc["v"] = verbosity_of(record.levelno)
            elif record.levelno < logging.ERROR:
                doc["v"] = 0
                doc["severity"] = "warning"
            doc["caller"] = _caller(record)
            doc["logger"] = record.name
            doc["msg"] = msg
            if err:
                doc["err"] = err
            for k, v in keys.items():
                doc.setdefault(k, v)
            if trace:
                doc["stacktrace"] = trace
            return self.jsonify_log_record(doc)

        return _bounded(record, render)


def _quote(value: Any) -> str:
    if isinstance(value, str):
        return '"' + value.replace('"', '\\"') + '"'
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    """``2026-12-03T08:01:10.123+00:00 INFO drakit.plugin.ops.app app.py:12] "msg" key="value"``:
    the time with its zone (UTC), the level (``V2`` for a V(2) line), the logger, the caller;
    the message and each value quoted; a traceback on following lines, each indented by a
    tab (so no line of it can pass for a log line)."""

    def format(self, record: logging.LogRecord) -> str:
        def render(msg: str, keys: dict[str, Any], err: str, trace: str | None) -> str:
            ts = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
            level = (record.levelname if record.levelno >= logging.INFO
                     else f"V{verbosity_of(record.levelno)}")
            parts = [f"{ts} {level} {record.name} {_caller(record)}] {_quote(msg)}"]
            if err:
                parts.append(f"err={_quote(err)}")
            parts += [f"{k}={_quote(v)}" for k, v in keys.items()]
            line = " ".join(parts)
            if trace:
                line += "\n" + "\n".join("\t" + x for x in trace.split("\n"))
            return line

        return _bounded(record, render)


def setup_logging(fmt: str = "text", verbosity: int = 0, driver: str | None = None) -> None:
    """Configure the root logger on stderr at ``V(verbosity)``. Library loggers stay quiet
    below their warnings: urllib3's (``Retrying (…) after connection broken``) and the
    kubernetes client's, since drakit logs one line per failed API attempt itself; urllib3's
    request lines appear from ``-v 7``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter() if fmt == "json" else TextFormatter())
    if driver:
        handler.addFilter(_DriverFilter(driver))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(V(verbosity))
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(
        logging.DEBUG if verbosity >= MAX_VERBOSITY else logging.ERROR)


class _DriverFilter(logging.Filter):
    def __init__(self, driver: str) -> None:
        super().__init__()
        self.driver = driver

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "driver"):
            record.driver = self.driver
        return True


for _n in range(1, MAX_VERBOSITY + 1):
    if logging.getLevelName(V(_n)).startswith("Level "):
        logging.addLevelName(V(_n), f"V{_n}")
