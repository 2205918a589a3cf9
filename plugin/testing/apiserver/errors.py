"""Kubernetes ``Status`` error objects for the embedded API server.

Every failure the embedded API server answers is a ``Status`` object (``kind: Status``,
``apiVersion: v1``, ``status: Failure``) with ``reason``, ``message``, ``code`` and
``details`` the way kube-apiserver writes them (k8s.io/apimachinery ``StatusReason``
values). Handlers raise :class:`ApiError`; the HTTP layer turns it into the answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

# Cause ``reason`` values used by kube-apiserver for field errors (metav1.CauseType).
CAUSE_REQUIRED = "FieldValueRequired"
CAUSE_INVALID = "FieldValueInvalid"
CAUSE_DUPLICATE = "FieldValueDuplicate"
CAUSE_TOO_LONG = "FieldValueTooLong"
CAUSE_TOO_MANY = "FieldValueTooMany"
CAUSE_NOT_SUPPORTED = "FieldValueNotSupported"
CAUSE_FORBIDDEN = "FieldValueForbidden"
CAUSE_CONFLICT = "FieldManagerConflict"


@dataclass(frozen=True)
class Cause:
    """One ``details.causes[]`` entry: ``field`` is the field path (``spec.devices[3].name``),
    ``reason`` a cause type (``FieldValueInvalid``...), ``message`` the text after the path."""

    field: str
    reason: str
    message: str

    def to_api(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.message, "field": self.field}

    def render(self) -> str:
        """``<field>: <message>`` as the server prints it inside the Status message."""
        return f"{self.field}: {self.message}" if self.field else self.message


def render_value(value: Any) -> str:
    """Render a bad value like the Go field error printer: strings quoted, int/bool bare,
    everything else as compact JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def required(path: str, detail: str = "") -> Cause:
    return Cause(path, CAUSE_REQUIRED, "Required value" + (f": {detail}" if detail else ""))


def invalid(path: str, value: Any, detail: str) -> Cause:
    return Cause(path, CAUSE_INVALID, f"Invalid value: {render_value(value)}: {detail}")


def duplicate(path: str, value: Any) -> Cause:
    return Cause(path, CAUSE_DUPLICATE, f"Duplicate value: {render_value(value)}")


def too_long(path: str, limit: int) -> Cause:
    return Cause(path, CAUSE_TOO_LONG, f"Too long: may not be more than {limit} bytes")


def too_many(path: str, count: int, limit: int) -> Cause:
    return Cause(path, CAUSE_TOO_MANY, f"Too many: {count}: must have at most {limit} items")


def not_supported(path: str, value: Any, supported: list[str]) -> Cause:
    values = ", ".join(json.dumps(s) for s in sorted(supported))
    return Cause(
        path,
        CAUSE_NOT_SUPPORTED,
        f"Unsupported value: {render_value(value)}: supported values: {values}",
    )


def forbidden(path: str, detail: str) -> Cause:
    return Cause(path, CAUSE_FORBIDDEN, f"Forbidden: {detail}")


@dataclass
class ApiError(Exception):
    """An error answer: HTTP ``code``, Status ``reason`` and ``message``; ``details`` is the
    Status ``details`` object (name, group, kind, causes, retryAfterSeconds); ``headers``
    are extra HTTP headers (``Retry-After``)."""

    code: int
    reason: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.code} {self.reason}: {self.message}"

    def to_status(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            status["details"] = self.details
        return status


def _qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def not_found(resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{_qualified(resource, group)} "{name}" not found',
        {"name": name, "group": group, "kind": resource},
    )


def path_not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource")


def already_exists(resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{_qualified(resource, group)} "{name}" already exists',
        {"name": name, "group": group, "kind": resource},
    )


def conflict(resource: str, group: str, name: str, detail: str | None = None) -> ApiError:
    text = detail or (
        "the object has been modified; please apply your changes to the latest version "
        "and try again"
    )
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_qualified(resource, group)} "{name}": {text}',
        {"name": name, "group": group, "kind": resource},
    )


def apply_conflict(name: str, group: str, kind: str, causes: list[Cause]) -> ApiError:
    lines = "\n".join(f"- {c.message}" for c in causes)
    return ApiError(
        409,
        "Conflict",
        f"Apply failed with {len(causes)} conflict{'s' if len(causes) != 1 else ''}: {lines}",
        {"name": name, "group": group, "kind": kind, "causes": [c.to_api() for c in causes]},
    )


def invalid_object(kind: str, group: str, name: str, causes: list[Cause]) -> ApiError:
    rendered = [c.render() for c in causes]
    text = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
    qualified_kind = f"{kind}.{group}" if group else kind
    return ApiError(
        422,
        "Invalid",
        f'{qualified_kind} "{name}" is invalid: {text}',
        {"name": name, "group": group, "kind": kind, "causes": [c.to_api() for c in causes]},
    )


def admission_forbidden(resource: str, group: str, name: str, detail: str) -> ApiError:
    """403 from admission: ``<resource>.<group> "<name>" is forbidden: <detail>``."""
    return ApiError(
        403,
        "Forbidden",
        f'{_qualified(resource, group)} "{name}" is forbidden: {detail}',
        {"name": name, "group": group, "kind": resource},
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def method_not_allowed() -> ApiError:
    return ApiError(
        405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
    )


PATCH_MEDIA_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)
"""What kube-apiserver accepts on PATCH, in its order (apiserver endpoints/installer.go)."""
BODY_MEDIA_TYPES = ("application/json", "application/yaml")
"""What the embedded server decodes on POST and PUT. kube-apiserver also decodes
``application/vnd.kubernetes.protobuf`` (and CBOR behind a gate); the embedded server
speaks JSON only and answers those with this 415."""


def unsupported_media_type(accepted: tuple[str, ...] = PATCH_MEDIA_TYPES) -> ApiError:
    """415 in kube-apiserver's words (apiserver handlers/negotiation errUnsupportedMediaType)."""
    return ApiError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(accepted),
    )


def too_many_requests(retry_after_seconds: int) -> ApiError:
    return ApiError(
        429,
        "TooManyRequests",
        "Too many requests, please try again later.",
        {"retryAfterSeconds": retry_after_seconds},
        {"Retry-After": str(retry_after_seconds)},
    )


def internal_error(detail: str) -> ApiError:
    return ApiError(
        500,
        "InternalError",
        f"Internal error occurred: {detail}",
        {"causes": [{"message": detail}]},
    )


def gone(detail: str) -> ApiError:
    return ApiError(410, "Expired", detail)
