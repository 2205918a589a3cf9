"""Field errors in the API server's shape: a field path, an error type, a value and a detail.

Rendering follows apimachinery ``field.Error`` (k8s.io/apimachinery
pkg/util/validation/field/errors.go): ``<path>: <Type>[: <value>][: <detail>]``. Strings are
quoted, int/bool printed bare, other values as JSON; ``Too long`` prints no value; ``Required``
/ ``Forbidden`` print only the detail; ``Too many`` prints ``<n>: must have at most <max>
items``.

Paths join field names with ``.`` and write list indexes and map keys in brackets without
quotes (``spec.devices[3].attributes[dra.example.com/model].string``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

REQUIRED: Final = "Required value"
INVALID: Final = "Invalid value"
NOT_SUPPORTED: Final = "Unsupported value"
DUPLICATE: Final = "Duplicate value"
FORBIDDEN: Final = "Forbidden"
TOO_LONG: Final = "Too long"
TOO_MANY: Final = "Too many"
NOT_FOUND: Final = "Not found"


class _Omitted:
    def __repr__(self) -> str:
        return "<omitted>"


OMITTED: Final = _Omitted()
"""Marker for "no value printed" (Required, Forbidden, Too long)."""


def render_value(value: Any) -> str:
    """A value the way apimachinery prints it in an error message."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


@dataclass(frozen=True)
class FieldError:
    """One validation error: ``type`` is one of the type words above, ``field`` the path."""

    type: str
    field: str
    value: Any = OMITTED
    detail: str = ""

    def __str__(self) -> str:
        parts = [f"{self.field}: {self.type}"]
        if self.value is not OMITTED:
            parts.append(render_value(self.value))
        if self.detail:
            parts.append(self.detail)
        return ": ".join(parts)

    def key(self) -> tuple[str, str]:
        """(path, type): what a client should match on (the detail text varies by server)."""
        return (self.field, self.type)


def required(path: str, detail: str = "") -> FieldError:
    return FieldError(REQUIRED, path, OMITTED, detail)


def invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError(INVALID, path, value, detail)


def forbidden(path: str, detail: str) -> FieldError:
    return FieldError(FORBIDDEN, path, OMITTED, detail)


def duplicate(path: str, value: Any) -> FieldError:
    return FieldError(DUPLICATE, path, value, "")


def too_long(path: str, limit: int) -> FieldError:
    return FieldError(TOO_LONG, path, OMITTED, f"may not be more than {limit} bytes")


def too_many(path: str, count: int, limit: int) -> FieldError:
    return FieldError(TOO_MANY, path, count, f"must have at most {limit} items")


def not_supported(path: str, value: Any, supported: list[str]) -> FieldError:
    quoted = ", ".join(json.dumps(s) for s in sorted(supported))
    return FieldError(NOT_SUPPORTED, path, value, f"supported values: {quoted}")


def child(path: str, name: str) -> str:
    """``path.name`` (or ``name`` at the root)."""
    return f"{path}.{name}" if path else name


def index(path: str, i: int) -> str:
    return f"{path}[{i}]"


def key(path: str, k: str, max_len: int) -> str:
    """``path[k]`` with an over-long key shortened the way the server does for map paths:
    keys longer than ``max_len`` (raised to at least 16) keep their first and last characters
    around ``...``."""
    max_len = max(max_len, 16)
    if len(k) > max_len:
        remaining = max_len - 3
        k = k[: (remaining + 1) // 2] + "..." + k[len(k) - remaining // 2 :]
    return f"{path}[{k}]"
