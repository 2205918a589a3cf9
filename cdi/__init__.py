"""Container Device Interface: spec model, minimum cdiVersion, name rules, atomic spec store.

Knows nothing about Kubernetes. Facts: CDI spec v0.3.0 … v1.1.0
(github.com/cncf-tags/container-device-interface SPEC.md and its Go library).

Typical use (one file per claim)::

    store = SpecStore("/var/run/cdi", "example.com", "gpu", max_version="0.5.0")
    ids = store.write(claim_uid, [Device(name=..., container_edits=ContainerEdits(...))])
    ...
    store.remove(claim_uid)
"""

if __name__ != "drakit.cdi":  # the checkout's top-level folder, imported by its own name
    raise ImportError(f"{__name__} is a folder of the drakit checkout, not a package of its "
                      f"own (a second copy of every module): import drakit.cdi instead")

from drakit.cdi.atomic import atomic_write, remove_durably
from drakit.cdi.errors import (
    CDIError,
    CDINameError,
    CDIVersionError,
    FieldError,
    HostNodeError,
    SpecConflictError,
    SpecValidationError,
)
from drakit.cdi.hostnodes import HostNodes
from drakit.cdi.names import (
    claim_device_name,
    is_qualified_name,
    parse_kind,
    parse_qualified_name,
    qualified_name,
    validate_claim_uid,
    validate_class,
    validate_device_name,
    validate_vendor,
)
from drakit.cdi.spec import (
    ContainerEdits,
    Device,
    DeviceNode,
    Hook,
    IntelRdt,
    Mount,
    NetDevice,
    Spec,
)
from drakit.cdi.store import DEFAULT_CDI_ROOT, DEFAULT_SPEC_DIRS, STATIC_CDI_ROOT, SpecStore
from drakit.cdi.validate import (
    load_spec,
    load_spec_file,
    spec_errors,
    spec_from_dict,
    validate_spec,
)
from drakit.cdi.version import (
    CDI_VERSIONS,
    LATEST_VERSION,
    VersionRequirement,
    minimum_version,
    resolve_version,
    version_requirements,
)

__all__ = [
    "CDI_VERSIONS",
    "DEFAULT_CDI_ROOT",
    "DEFAULT_SPEC_DIRS",
    "LATEST_VERSION",
    "STATIC_CDI_ROOT",
    "CDIError",
    "CDINameError",
    "CDIVersionError",
    "ContainerEdits",
    "Device",
    "DeviceNode",
    "FieldError",
    "Hook",
    "HostNodeError",
    "HostNodes",
    "IntelRdt",
    "Mount",
    "NetDevice",
    "Spec",
    "SpecConflictError",
    "SpecStore",
    "SpecValidationError",
    "VersionRequirement",
    "atomic_write",
    "claim_device_name",
    "is_qualified_name",
    "load_spec",
    "load_spec_file",
    "minimum_version",
    "parse_kind",
    "parse_qualified_name",
    "qualified_name",
    "remove_durably",
    "resolve_version",
    "spec_errors",
    "spec_from_dict",
    "validate_claim_uid",
    "validate_class",
    "validate_device_name",
    "validate_spec",
    "validate_vendor",
    "version_requirements",
]
