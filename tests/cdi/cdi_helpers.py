"""Small builders shared by the cdi tests (imported by name; tests/cdi is on sys.path)."""

from __future__ import annotations

from typing import Any

from drakit.cdi.spec import ContainerEdits, Device, Spec


def env_device(name: str, *env: str) -> Device:
    """A device whose only edit is env entries (default ``DRAKIT_<name>=1``)."""
    entries = list(env) or [f"DRAKIT_{name.upper().replace('-', '_').replace('.', '_')}=1"]
    return Device(name=name, container_edits=ContainerEdits(env=entries))


def spec_with(*devices: Device, kind: str = "example.com/gpu", **fields: Any) -> Spec:
    """A spec of ``kind`` with ``devices`` (default one env device) and extra fields."""
    return Spec(kind=kind, devices=list(devices) or [env_device("gpu0")], **fields)
