"""Helpers shared by the built-in plugins: strict options, attribute maps."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel

from drakit.discovery.model import DeviceAttribute
from drakit.discovery.names import is_dns_subdomain
from drakit.discovery.plugin import parse_plugin_options

MAX_STRING_BYTES = 64
"""DeviceAttributeMaxValueLength: string and version values, UTF-8 bytes (resource.k8s.io/v1)."""
POOL_NAME_MAX = 253
"""ResourceSlice ``spec.pool.name``: at most 253 bytes (resource.k8s.io/v1)."""


def _pool_name(value: str) -> str:
    if value and (len(value.encode()) > POOL_NAME_MAX or
                  not all(is_dns_subdomain(part) for part in value.split("/"))):
        raise ValueError(f"{value!r} is not a pool name: DNS subdomains (lower-case letters, "
                         f"digits, '-', '.') joined by '/', at most {POOL_NAME_MAX} bytes "
                         "(ResourceSlice spec.pool.name)")
    return value


PoolName = Annotated[str, AfterValidator(_pool_name)]
"""The ``pool`` option of a built-in plugin, checked as ``spec.pool.name`` is, so a bad one
stops ``drakit run`` instead of leaving the pool unpublished (empty: the node name)."""


def put(
    attrs: dict[str, DeviceAttribute],
    key: str,
    value: Any,
    *,
    device: str,
    log: logging.Logger,
) -> None:
    """Set ``attrs[key]`` from a plain value; ``None`` is skipped, and a string longer than
    64 UTF-8 bytes is left out with a warning naming ``device`` and ``key``."""
    if value is None:
        return
    if isinstance(value, str) and len(value.encode()) > MAX_STRING_BYTES:
        log.warning("device %s: attribute %s is longer than %d bytes; left out",
                    device, key, MAX_STRING_BYTES)
        return
    attrs[key] = DeviceAttribute.of(value)


def parse_options(model: type[BaseModel], plugin: str, options: dict[str, Any]) -> Any:
    """The public :func:`drakit.discovery.plugin.parse_plugin_options` (kept for the built-ins;
    vendors call ``context.parse_options(Model)``)."""
    return parse_plugin_options(model, plugin, options)
