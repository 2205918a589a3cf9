"""The CDI spec data model (Container Device Interface, specs-go up to v1.1.0).

JSON keys are exactly the CDI spec's camelCase names; Python attributes are snake_case.
Unknown keys are rejected (runtimes parse strictly: one unknown key rejects the whole file).
Optional fields left unset are omitted on output, so a spec only declares what it uses; the
minimum ``cdiVersion`` is computed from what is present (see :mod:`drakit.cdi.version`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

_ALIAS_EXCEPTIONS = {"clos_id": "closID", "enable_cmt": "enableCMT", "enable_mbm": "enableMBM"}


def _cdi_alias(name: str) -> str:
    """The CDI JSON key of a snake_case attribute (camelCase, with the spec's irregular keys)."""
    return _ALIAS_EXCEPTIONS.get(name) or to_camel(name)


class _CDIModel(BaseModel):
    model_config = ConfigDict(
        extra="forbid", populate_by_name=True, alias_generator=_cdi_alias, frozen=False
    )

    def to_json_dict(self) -> dict[str, Any]:
        """The object as the CDI file spells it: camelCase keys, unset fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class DeviceNode(_CDIModel):
    """A device node to create in the container (CDI ``DeviceNode``).

    ``path`` is the path inside the container; ``host_path`` (CDI 0.5.0+) the host node,
    defaulting to ``path``. ``type`` is one of ``b``, ``c``, ``u``, ``p``; ``file_mode`` is
    the permission bits as an integer (0o666), written in decimal.
    """

    path: str
    host_path: str | None = None
    type: str | None = None
    major: int | None = None
    minor: int | None = None
    file_mode: int | None = None
    permissions: str | None = None
    uid: int | None = None
    gid: int | None = None


class Mount(_CDIModel):
    """A bind (or typed, CDI 0.4.0+) mount: ``host_path`` on the host, ``container_path`` inside."""

    host_path: str
    container_path: str
    type: str | None = None
    options: list[str] | None = None


class Hook(_CDIModel):
    """An OCI hook: ``hook_name`` is the OCI hook point (e.g. ``createContainer``)."""

    hook_name: str
    path: str
    args: list[str] | None = None
    env: list[str] | None = None
    timeout: int | None = None


class IntelRdt(_CDIModel):
    """Intel RDT settings (CDI 0.7.0+; ``schemata``/``enable_monitoring`` need 1.1.0).

    ``enable_cmt``/``enable_mbm`` exist only in 0.7.0 to 1.0.0: a 1.1.0 reader rejects them.
    """

    clos_id: str | None = None
    l3_cache_schema: str | None = None
    mem_bw_schema: str | None = None
    schemata: list[str] | None = None
    enable_monitoring: bool | None = None
    enable_cmt: bool | None = None
    enable_mbm: bool | None = None


class NetDevice(_CDIModel):
    """A host network interface moved into the container's netns (CDI 1.1.0+)."""

    host_interface_name: str
    name: str


class ContainerEdits(_CDIModel):
    """Edits a runtime applies to a container (CDI ``ContainerEdits``).

    ``env`` entries are ``NAME=value`` strings. An edits block is *empty* when none of its
    seven fields holds anything; CDI libraries reject a device whose own edits are empty.
    """

    env: list[str] | None = None
    device_nodes: list[DeviceNode] | None = None
    hooks: list[Hook] | None = None
    mounts: list[Mount] | None = None
    intel_rdt: IntelRdt | None = None
    additional_gids: list[int] | None = None
    net_devices: list[NetDevice] | None = None

    def is_empty(self) -> bool:
        """True when no field holds anything (``intelRdt`` counts when set, even ``{}``)."""
        return not (
            self.env
            or self.device_nodes
            or self.hooks
            or self.mounts
            or self.intel_rdt is not None
            or self.additional_gids
            or self.net_devices
        )

    def compacted(self) -> ContainerEdits:
        """A copy without empty values, so no key forces a version or trips an old reader.

        Empty lists become unset; in device nodes an empty ``hostPath``, ``type`` or
        ``permissions`` becomes unset; in mounts an empty ``type`` and empty ``options``;
        in hooks empty ``args``/``env``. ``intelRdt`` is kept even when ``{}`` and
        ``intelRdt.schemata`` even when ``[]`` (both are meaningful, CDI 0.7.0 / 1.1.0).
        """
        nodes = [
            n.model_copy(
                update={
                    "host_path": n.host_path or None,
                    "type": n.type or None,
                    "permissions": n.permissions or None,
                }
            )
            for n in self.device_nodes or []
        ]
        mounts = [
            m.model_copy(update={"type": m.type or None, "options": m.options or None})
            for m in self.mounts or []
        ]
        hooks = [
            h.model_copy(update={"args": h.args or None, "env": h.env or None})
            for h in self.hooks or []
        ]
        return ContainerEdits(
            env=list(self.env) if self.env else None,
            device_nodes=nodes or None,
            hooks=hooks or None,
            mounts=mounts or None,
            intel_rdt=self.intel_rdt.model_copy() if self.intel_rdt is not None else None,
            additional_gids=list(self.additional_gids) if self.additional_gids else None,
            net_devices=[d.model_copy() for d in self.net_devices] if self.net_devices else None,
        )

    def merged(self, other: ContainerEdits) -> ContainerEdits:
        """A new edits block with ``other``'s list entries appended after this one's."""
        out: dict[str, Any] = {}
        for field in type(self).model_fields:
            mine, theirs = getattr(self, field), getattr(other, field)
            if isinstance(mine, list) or isinstance(theirs, list):
                combined = list(mine or []) + list(theirs or [])
                out[field] = combined or None
            else:
                out[field] = theirs if theirs is not None else mine
        return ContainerEdits(**out)


class Device(_CDIModel):
    """A named device in a spec; its qualified name is ``<kind>=<name>``."""

    name: str
    annotations: dict[str, str] | None = None
    container_edits: ContainerEdits


class Spec(_CDIModel):
    """A whole CDI spec file. ``cdi_version`` is filled by the writer when left empty."""

    cdi_version: str = ""
    kind: str
    annotations: dict[str, str] | None = None
    devices: list[Device]
    container_edits: ContainerEdits | None = None

    def compacted(self) -> Spec:
        """A copy with empty values left out (see :meth:`ContainerEdits.compacted`); empty
        annotations and an empty spec-level ``containerEdits`` become unset."""
        edits = self.container_edits.compacted() if self.container_edits is not None else None
        return Spec(
            cdi_version=self.cdi_version,
            kind=self.kind,
            annotations=dict(self.annotations) if self.annotations else None,
            devices=[
                Device(
                    name=d.name,
                    annotations=dict(d.annotations) if d.annotations else None,
                    container_edits=d.container_edits.compacted(),
                )
                for d in self.devices
            ],
            container_edits=edits if edits is not None and not edits.is_empty() else None,
        )
