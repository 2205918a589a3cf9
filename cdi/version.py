"""The minimum ``cdiVersion`` a spec needs, and the cap for runtimes with older CDI libraries.

Rule (Go ``MinimumRequiredVersion`` of specs-go v1.1.0, specs-go/version.go): check the
versions from newest to oldest and take the first whose predicate holds; 0.3.0 otherwise.

=======  =====================================================================================
1.1.0    non-empty ``netDevices`` (any level); ``intelRdt.schemata`` present (even ``[]``);
         ``intelRdt.enableMonitoring: true``
1.0.0    never forced (API-only release)
0.8.0    never forced (API-only release)
0.7.0    ``intelRdt`` present (even ``{}``) at any level; non-empty ``additionalGids``
0.6.0    non-empty ``annotations`` on the spec or a device; ``.`` in the class of ``kind``
0.5.0    a device name starting with a digit; a device node with a non-empty ``hostPath``
0.4.0    a mount with a non-empty ``type``
0.3.0    floor for every file
=======  =====================================================================================

``intelRdt.enableCMT`` / ``enableMBM`` exist only in 0.7.0-1.0.x; a 1.1.0 reader rejects them
as unknown fields, so content needing 1.1.0 must not use them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from drakit.cdi.errors import CDIVersionError
from drakit.cdi.spec import ContainerEdits, Spec

CDI_VERSIONS: tuple[str, ...] = (
    "0.3.0",
    "0.4.0",
    "0.5.0",
    "0.6.0",
    "0.7.0",
    "0.8.0",
    "1.0.0",
    "1.1.0",
)
"""Released spec versions a writer may declare, oldest first."""

KNOWN_VERSIONS: tuple[str, ...] = ("0.1.0", "0.2.0", *CDI_VERSIONS)
"""Every version string CDI libraries know (0.1.0/0.2.0 always fail the minimum check)."""

FLOOR_VERSION = "0.3.0"
"""The lowest version the minimum computation ever gives."""

LATEST_VERSION = CDI_VERSIONS[-1]
"""The newest released spec version (CDI v1.1.0)."""


def version_key(version: str) -> tuple[int, int, int]:
    """``"0.5.0"`` → ``(0, 5, 0)``. Raises :class:`CDIVersionError` for unknown versions.

    Only the exact strings of :data:`KNOWN_VERSIONS` are accepted: no leading ``v``
    (rejected by podman 4.3's CDI v0.5.2).
    """
    if version not in KNOWN_VERSIONS:
        raise CDIVersionError(f"unknown cdiVersion {version!r}; known: {', '.join(CDI_VERSIONS)}")
    major, minor, patch = (int(p) for p in version.split("."))
    return major, minor, patch


@dataclass(frozen=True)
class VersionRequirement:
    """Something in a spec that needs at least ``version``: ``path`` names the field."""

    version: str
    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path} needs cdiVersion {self.version} ({self.reason})"


def _edits_blocks(spec: Spec) -> Iterator[tuple[str, ContainerEdits]]:
    if spec.container_edits is not None:
        yield "containerEdits", spec.container_edits
    for i, device in enumerate(spec.devices):
        yield f"devices[{i}].containerEdits", device.container_edits


def version_requirements(spec: Spec) -> list[VersionRequirement]:
    """Every field of ``spec`` that needs more than the 0.3.0 floor, with its version."""
    reqs: list[VersionRequirement] = []

    def need(version: str, path: str, reason: str) -> None:
        reqs.append(VersionRequirement(version, path, reason))

    _vendor, _, cls = spec.kind.partition("/")
    if "." in cls:
        need("0.6.0", "kind", f"'.' in class {cls!r}")
    if spec.annotations:
        need("0.6.0", "annotations", "spec annotations")
    for i, device in enumerate(spec.devices):
        if device.name[:1].isdigit():
            need("0.5.0", f"devices[{i}].name", f"device name {device.name!r} starts with a digit")
        if device.annotations:
            need("0.6.0", f"devices[{i}].annotations", "device annotations")
    for base, edits in _edits_blocks(spec):
        for j, node in enumerate(edits.device_nodes or []):
            if node.host_path:
                need("0.5.0", f"{base}.deviceNodes[{j}].hostPath", "deviceNode hostPath")
        for j, mount in enumerate(edits.mounts or []):
            if mount.type:
                need("0.4.0", f"{base}.mounts[{j}].type", "mount type")
        if edits.intel_rdt is not None:
            need("0.7.0", f"{base}.intelRdt", "intelRdt")
            if edits.intel_rdt.schemata is not None:
                need("1.1.0", f"{base}.intelRdt.schemata", "intelRdt schemata")
            if edits.intel_rdt.enable_monitoring:
                need("1.1.0", f"{base}.intelRdt.enableMonitoring", "intelRdt enableMonitoring")
        if edits.additional_gids:
            need("0.7.0", f"{base}.additionalGids", "additionalGids")
        if edits.net_devices:
            need("1.1.0", f"{base}.netDevices", "netDevices")
    return reqs


def minimum_version(spec: Spec) -> str:
    """The lowest cdiVersion that expresses ``spec``'s content (never below 0.3.0)."""
    best = FLOOR_VERSION
    for req in version_requirements(spec):
        if version_key(req.version) > version_key(best):
            best = req.version
    return best


def _removed_in_1_1(spec: Spec) -> list[str]:
    paths = []
    for base, edits in _edits_blocks(spec):
        rdt = edits.intel_rdt
        if rdt is None:
            continue
        if rdt.enable_cmt is not None:
            paths.append(f"{base}.intelRdt.enableCMT")
        if rdt.enable_mbm is not None:
            paths.append(f"{base}.intelRdt.enableMBM")
    return paths


def resolve_version(spec: Spec, max_version: str | None = None) -> str:
    """The cdiVersion to declare for ``spec``: its minimum, checked against ``max_version``.

    Raises :class:`CDIVersionError` when the content needs more than ``max_version``
    (naming each field and the version it needs), when ``max_version`` is unknown, or when
    content needing 1.1.0 also uses ``enableCMT``/``enableMBM`` (removed in 1.1.0).
    """
    if max_version is not None:
        version_key(max_version)
    reqs = version_requirements(spec)
    minimum = minimum_version(spec)
    if minimum == "1.1.0":
        removed = _removed_in_1_1(spec)
        if removed:
            needers = ", ".join(str(r) for r in reqs if r.version == "1.1.0")
            raise CDIVersionError(
                f"{', '.join(removed)} cannot be used with content that needs cdiVersion "
                f"1.1.0 ({needers}): CDI 1.1.0 removed enableCMT/enableMBM",
                [(r.version, r.path, r.reason) for r in reqs if r.version == "1.1.0"],
            )
    if max_version is not None and version_key(minimum) > version_key(max_version):
        over = [r for r in reqs if version_key(r.version) > version_key(max_version)]
        raise CDIVersionError(
            f"spec needs cdiVersion {minimum} but the maximum allowed is {max_version}: "
            + "; ".join(str(r) for r in over),
            [(r.version, r.path, r.reason) for r in over],
        )
    return minimum


def declared_version_errors(spec: Spec) -> list[str]:
    """Problems with the ``cdiVersion`` a spec declares (as a reader at CDI v1.1.0 sees it).

    Unknown version strings, a version below the content's minimum, and enableCMT/enableMBM
    under a declared 1.1.0.
    """
    try:
        declared = version_key(spec.cdi_version)
    except CDIVersionError as exc:
        return [str(exc)]
    errors = []
    minimum = minimum_version(spec)
    if declared < version_key(minimum):
        needers = "; ".join(
            str(r) for r in version_requirements(spec) if version_key(r.version) > declared
        )
        errors.append(
            f"declares {spec.cdi_version} but the content needs {minimum}"
            + (f": {needers}" if needers else "")
        )
    if declared >= version_key("1.1.0"):
        for path in _removed_in_1_1(spec):
            errors.append(f"{path} is not part of cdiVersion {spec.cdi_version} (removed in 1.1.0)")
    return errors
