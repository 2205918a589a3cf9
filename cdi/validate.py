"""Validation of CDI specs before they are written, matching what CDI runtimes enforce.

Rules (CDI SPEC.md; Go ``internal/validation`` and ``pkg/cdi`` of v0.5-v1.1):

- ``kind`` is ``vendor/class`` under the name rules of :mod:`drakit.cdi.names`;
- at least one device; device names valid and unique in the file; every device has a
  non-empty ``containerEdits`` ("invalid device, empty device edits");
- env entries ``NAME=value`` (an ``=`` not at position 0), also in hooks;
- device nodes: absolute ``path`` (and ``hostPath``), ``type`` in ``b c u p`` (or empty),
  ``permissions`` a subset of ``rwm``, ``fileMode`` permission bits only;
- mounts: non-empty ``hostPath``, absolute ``containerPath`` (and an absolute ``hostPath``
  for bind mounts); hooks: OCI hook name, absolute ``path``, ``timeout`` > 0;
- intelRdt ``closID`` usable as a file name; netDevices non-empty, unique, valid Linux
  interface names;
- uint32 / int64 ranges; annotation keys (Kubernetes rule) and total size;
- the declared ``cdiVersion`` known, not below the content's minimum, not above a cap.

Unknown fields are rejected by the model (``extra="forbid"``) and by :func:`load_spec`.
Every problem is reported with its JSON path, e.g. ``devices[2].containerEdits.env[0]``.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import ValidationError

from drakit.cdi.errors import CDIVersionError, FieldError, SpecValidationError
from drakit.cdi.names import annotations_errors, device_name_error, kind_error
from drakit.cdi.spec import ContainerEdits, Spec
from drakit.cdi.version import declared_version_errors, version_key

UINT32_MAX = 2**32 - 1
INT64_MAX = 2**63 - 1
HOOK_NAMES: frozenset[str] = frozenset(
    {"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}
)
"""OCI hook points a CDI hook may name (``prestart`` is deprecated in OCI but accepted)."""
DEVICE_NODE_TYPES: frozenset[str] = frozenset({"", "b", "c", "u", "p"})
"""Device node types: block, char, unbuffered char, fifo; empty = taken from the host."""
SPEC_FILE_EXTENSIONS: tuple[str, ...] = (".json", ".yaml")
"""The only extensions runtimes read (case-sensitive; ``.yml`` is ignored)."""
_BIND_TYPES = frozenset({"", "bind", "rbind", "none"})


def _env_errors(entries: Sequence[str], path: str) -> list[FieldError]:
    out = []
    for i, entry in enumerate(entries):
        if entry.find("=") <= 0:
            out.append(FieldError(f"{path}[{i}]", f"env entry {entry!r} must be NAME=value"))
        elif "\x00" in entry:
            out.append(FieldError(f"{path}[{i}]", "env entry must not contain NUL"))
    return out


def _abs_path_error(value: str, what: str) -> str | None:
    if not value:
        return f"{what} must not be empty"
    if "\x00" in value:
        return f"{what} must not contain NUL"
    if not posixpath.isabs(value):
        return f"{what} {value!r} must be an absolute path"
    return None


def _range_error(value: int | None, low: int, high: int, what: str) -> str | None:
    if value is None or low <= value <= high:
        return None
    return f"{what} {value} out of range [{low}, {high}]"


def _ifname_error(name: str, what: str) -> str | None:
    if not name:
        return f"{what} must not be empty"
    if len(name) > 15:
        return f"{what} {name!r} longer than 15 characters (Linux IFNAMSIZ)"
    if name in (".", "..") or any(c in name for c in "/:") or any(c.isspace() for c in name):
        return f"{what} {name!r} is not a valid Linux interface name"
    return None


def edits_errors(edits: ContainerEdits, base: str) -> list[FieldError]:
    """Problems inside one containerEdits block at JSON path ``base``."""
    errs: list[FieldError] = []

    def add(path: str, message: str | None) -> None:
        if message:
            errs.append(FieldError(path, message))

    errs += _env_errors(edits.env or [], f"{base}.env")
    for j, node in enumerate(edits.device_nodes or []):
        p = f"{base}.deviceNodes[{j}]"
        add(f"{p}.path", _abs_path_error(node.path, "deviceNode path"))
        if node.host_path:
            add(f"{p}.hostPath", _abs_path_error(node.host_path, "deviceNode hostPath"))
        if node.type is not None and node.type not in DEVICE_NODE_TYPES:
            add(f"{p}.type", f"deviceNode type {node.type!r} must be one of b, c, u, p")
        add(f"{p}.major", _range_error(node.major, 0, INT64_MAX, "major"))
        add(f"{p}.minor", _range_error(node.minor, 0, INT64_MAX, "minor"))
        if node.file_mode is not None and not 0 <= node.file_mode <= 0o7777:
            add(
                f"{p}.fileMode",
                f"fileMode {node.file_mode} must hold permission bits only (0..4095, "
                "e.g. 438 for 0o666)",
            )
        if node.permissions and (set(node.permissions) - set("rwm")):
            add(f"{p}.permissions", f"permissions {node.permissions!r} must be a subset of 'rwm'")
        add(f"{p}.uid", _range_error(node.uid, 0, UINT32_MAX, "uid"))
        add(f"{p}.gid", _range_error(node.gid, 0, UINT32_MAX, "gid"))
    for j, mount in enumerate(edits.mounts or []):
        p = f"{base}.mounts[{j}]"
        is_bind = (mount.type or "") in _BIND_TYPES or any(
            o in ("bind", "rbind") for o in mount.options or []
        )
        if is_bind:
            add(f"{p}.hostPath", _abs_path_error(mount.host_path, "bind mount hostPath"))
        elif not mount.host_path:
            add(f"{p}.hostPath", "mount hostPath must not be empty")
        add(f"{p}.containerPath", _abs_path_error(mount.container_path, "mount containerPath"))
    for j, hook in enumerate(edits.hooks or []):
        p = f"{base}.hooks[{j}]"
        if hook.hook_name not in HOOK_NAMES:
            add(
                f"{p}.hookName",
                f"hookName {hook.hook_name!r} must be one of {', '.join(sorted(HOOK_NAMES))}",
            )
        add(f"{p}.path", _abs_path_error(hook.path, "hook path"))
        errs += _env_errors(hook.env or [], f"{p}.env")
        if hook.timeout is not None and not 0 < hook.timeout <= 2**31 - 1:
            add(f"{p}.timeout", f"hook timeout {hook.timeout} must be > 0 seconds")
    if edits.intel_rdt is not None and edits.intel_rdt.clos_id is not None:
        clos = edits.intel_rdt.clos_id
        if clos != "/" and (
            len(clos) >= 4096 or clos in (".", "..") or "/" in clos or "\n" in clos
        ):
            add(f"{base}.intelRdt.closID", f"closID {clos!r} must be usable as a file name")
    for k, gid in enumerate(edits.additional_gids or []):
        add(f"{base}.additionalGids[{k}]", _range_error(gid, 0, UINT32_MAX, "gid"))
    host_names: set[str] = set()
    names: set[str] = set()
    for k, net in enumerate(edits.net_devices or []):
        p = f"{base}.netDevices[{k}]"
        add(f"{p}.hostInterfaceName", _ifname_error(net.host_interface_name, "hostInterfaceName"))
        add(f"{p}.name", _ifname_error(net.name, "name"))
        if net.host_interface_name in host_names:
            add(
                f"{p}.hostInterfaceName", f"duplicate hostInterfaceName {net.host_interface_name!r}"
            )
        if net.name in names:
            add(f"{p}.name", f"duplicate netDevice name {net.name!r}")
        host_names.add(net.host_interface_name)
        names.add(net.name)
    return errs


def _annotation_errors(annotations: dict[str, str] | None, base: str) -> list[FieldError]:
    return [
        FieldError(f"{base}[{key!r}]" if key else base, msg)
        for key, msg in annotations_errors(annotations or {})
    ]


def spec_errors(spec: Spec, max_version: str | None = None) -> list[FieldError]:
    """Every rule ``spec`` breaks, as :class:`FieldError` entries (empty when valid).

    ``max_version`` (e.g. ``"0.5.0"``) also rejects a declared cdiVersion above the cap.
    """
    errs: list[FieldError] = []
    if not spec.cdi_version:
        errs.append(FieldError("cdiVersion", "cdiVersion must be set"))
    else:
        errs += [FieldError("cdiVersion", m) for m in declared_version_errors(spec)]
        if max_version is not None:
            try:
                if version_key(spec.cdi_version) > version_key(max_version):
                    errs.append(
                        FieldError(
                            "cdiVersion",
                            f"cdiVersion {spec.cdi_version} is above the maximum {max_version}",
                        )
                    )
            except CDIVersionError:
                pass  # the unknown version is already reported
    kerr = kind_error(spec.kind)
    if kerr:
        errs.append(FieldError("kind", kerr))
    errs += _annotation_errors(spec.annotations, "annotations")
    if not spec.devices:
        errs.append(FieldError("devices", "a spec needs at least one device"))
    seen: dict[str, int] = {}
    for i, device in enumerate(spec.devices):
        p = f"devices[{i}]"
        nerr = device_name_error(device.name)
        if nerr:
            errs.append(FieldError(f"{p}.name", nerr))
        if device.name in seen:
            errs.append(
                FieldError(
                    f"{p}.name",
                    f"duplicate device name {device.name!r} (also devices[{seen[device.name]}])",
                )
            )
        seen.setdefault(device.name, i)
        errs += _annotation_errors(device.annotations, f"{p}.annotations")
        if device.container_edits.is_empty():
            errs.append(
                FieldError(f"{p}.containerEdits",
                           f"device {device.name!r}: containerEdits must not be empty")
            )
        errs += edits_errors(device.container_edits, f"{p}.containerEdits")
    if spec.container_edits is not None:
        errs += edits_errors(spec.container_edits, "containerEdits")
    return errs


def validate_spec(spec: Spec, max_version: str | None = None, subject: str = "CDI spec") -> None:
    """Raise :class:`SpecValidationError` listing every problem in ``spec``."""
    errs = spec_errors(spec, max_version)
    if errs:
        raise SpecValidationError(errs, subject)


def _loc_path(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def spec_from_dict(data: Any, subject: str = "CDI spec") -> Spec:
    """Build a :class:`Spec` from decoded JSON/YAML strictly, as runtimes decode it.

    Unknown fields, wrong types (``"5"`` or ``5.0`` for an integer, ``0`` for a string)
    are errors. Raises :class:`SpecValidationError` naming each field path.
    """
    if not isinstance(data, dict):
        raise SpecValidationError(
            [FieldError("", f"a spec must be an object, got {type(data).__name__}")], subject
        )
    try:
        return Spec.model_validate(data, strict=True)
    except ValidationError as exc:
        errs = []
        for e in exc.errors():
            msg = "unknown field" if e["type"] == "extra_forbidden" else e["msg"]
            errs.append(FieldError(_loc_path(e["loc"]), msg))
        raise SpecValidationError(errs, subject) from None


Format = Literal["json", "yaml"]


def load_spec(data: str | bytes, fmt: Format = "json", subject: str = "CDI spec") -> Spec:
    """Decode a spec file's content (``fmt`` ``json`` or ``yaml``) strictly into a Spec.

    Raises :class:`SpecValidationError` on syntax errors, wrong types and unknown fields
    (it does not run :func:`validate_spec`).
    """
    decode: Callable[[str | bytes], Any] = json.loads if fmt == "json" else yaml.safe_load
    try:
        decoded = decode(data)
    except (ValueError, yaml.YAMLError) as exc:
        raise SpecValidationError(
            [FieldError("", f"cannot decode {fmt}: {exc}")], subject
        ) from None
    return spec_from_dict(decoded, subject)


def load_spec_file(path: str | Path) -> Spec:
    """Read and decode a spec file strictly into a Spec (no rule checks).

    ``.json`` files are decoded as JSON (falling back to YAML, as the CDI library parses
    both with one YAML/JSON decoder); anything else as YAML. Raises
    :class:`SpecValidationError` or ``OSError``."""
    p = Path(path)
    raw = p.read_bytes()
    subject = f"CDI spec {p}"
    if p.suffix == ".json":
        try:
            decoded = json.loads(raw)
        except ValueError:
            return load_spec(raw, "yaml", subject)
        return spec_from_dict(decoded, subject)
    return load_spec(raw, "yaml", subject)
