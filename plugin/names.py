"""Validation of names that become part of file paths or CDI names.

Claim UIDs, namespaces, claim names, driver names, pools and device names arrive from the
kubelet or the API server; before any of them touches a path it must pass these checks.
Rules follow the Kubernetes API: namespaces and device names are DNS labels, claim names
DNS subdomains, pool names ``/``-joined DNS subdomains, driver names lower-cased DNS
subdomains ≤ 63 bytes. The formats and the claim UID rule have one home, :mod:`drakit.cdi.names`
(UUIDs as the API server issues them, and readable test UIDs; never ``/``, NUL, ``..``, a
leading ``.``/``-`` or a trailing ``-``); this module gives them the kubelet-facing
``field: Invalid value`` errors.
"""

from __future__ import annotations

import re

from drakit.cdi.names import (
    CLAIM_UID,
    CLAIM_UID_MAX_LENGTH,
    DNS_LABEL_FMT,
    DNS_SUBDOMAIN_FMT,
    claim_uid_error,
)

DNS_LABEL = re.compile(DNS_LABEL_FMT, re.ASCII)
DNS_SUBDOMAIN = re.compile(DNS_SUBDOMAIN_FMT, re.ASCII)
UID = CLAIM_UID
"""The claim UID pattern (:data:`drakit.cdi.names.CLAIM_UID`); ``..`` is refused besides."""


class InvalidNameError(ValueError):
    """A name that is unsafe or invalid for its field; the message names the field."""


def _check(field: str, value: object, pattern: re.Pattern[str], max_len: int, rule: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidNameError(f"{field}: Required value: must be a non-empty string")
    if len(value.encode()) > max_len:
        raise InvalidNameError(f"{field}: Too long: may not be more than {max_len} bytes")
    if "\x00" in value or ".." in value or "/" in value or not pattern.fullmatch(value):
        raise InvalidNameError(f"{field}: Invalid value: {value!r}: {rule}")
    return value


def check_claim_uid(value: object, field: str = "claim.uid") -> str:
    """A claim UID by the one rule, :func:`drakit.cdi.names.claim_uid_error` (1-128
    characters; every ``metadata.uid`` the API server issues, an RFC 4122 UUID, passes),
    with the error naming ``field``."""
    if not isinstance(value, str) or not value:
        raise InvalidNameError(f"{field}: Required value: must be a non-empty string")
    if len(value) > CLAIM_UID_MAX_LENGTH:
        raise InvalidNameError(
            f"{field}: Too long: may not be more than {CLAIM_UID_MAX_LENGTH} bytes")
    if claim_uid_error(value) is not None:
        raise InvalidNameError(
            f"{field}: Invalid value: {value!r}: must start and end with a letter or digit, "
            "hold only letters, digits, '-', '_' and '.', and contain no '..'")
    return value


def check_namespace(value: object, field: str = "claim.namespace") -> str:
    """A namespace: DNS label ≤ 63 bytes."""
    return _check(field, value, DNS_LABEL, 63, "must be a lowercase RFC 1123 label")


def check_object_name(value: object, field: str = "claim.name") -> str:
    """An object name: DNS subdomain ≤ 253 bytes."""
    return _check(field, value, DNS_SUBDOMAIN, 253, "must be a lowercase RFC 1123 subdomain")


def check_device_name(value: object, field: str = "device") -> str:
    """A device name: DNS label ≤ 63 bytes (ResourceSlice ``spec.devices[].name``)."""
    return _check(field, value, DNS_LABEL, 63, "must be a lowercase RFC 1123 label")


def check_driver_name(value: object, field: str = "driver") -> str:
    """A driver name: ≤ 63 bytes, lower-case DNS subdomain (upper case is refused here even
    though the API lower-cases before checking: a driver name also names sockets)."""
    return _check(field, value, DNS_SUBDOMAIN, 63, "must be a lowercase RFC 1123 subdomain")


def check_pool_name(value: object, field: str = "pool") -> str:
    """A pool name: DNS subdomains joined by ``/``, ≤ 253 bytes in total."""
    if not isinstance(value, str) or not value:
        raise InvalidNameError(f"{field}: Required value: must be a non-empty string")
    if len(value.encode()) > 253:
        raise InvalidNameError(f"{field}: Too long: may not be more than 253 bytes")
    for part in value.split("/"):
        if not DNS_SUBDOMAIN.fullmatch(part):
            raise InvalidNameError(
                f"{field}: Invalid value: {value!r}: every '/'-separated part must be a "
                "lowercase RFC 1123 subdomain"
            )
    return value
