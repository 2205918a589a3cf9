"""Helpers shared by the built-in plugins: strict options, attribute maps."""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel

from drakit.discovery.model import DeviceAttribute
from drakit.discovery.plugin import parse_plugin_options

MAX_STRING_BYTES = 64
"""DeviceAttributeMaxValueLength: string and version values, UTF-8 bytes (resource.k8s.io/v1)."""


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
