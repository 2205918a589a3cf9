"""The minimum cdiVersion table (specs-go v1.1.0 ``MinimumRequiredVersion``) row by row, and the
cap."""

from __future__ import annotations

from typing import Any

import pytest
from cdi_helpers import env_device, spec_with

from drakit.cdi.errors import CDIVersionError
from drakit.cdi.spec import ContainerEdits, Device, DeviceNode, IntelRdt, Mount, NetDevice, Spec
from drakit.cdi.version import (
    CDI_VERSIONS,
    declared_version_errors,
    minimum_version,
    resolve_version,
    version_key,
    version_requirements,
)


def _dev_edits(**edits: Any) -> Spec:
    """One device whose edits are env plus ``edits``."""
    return spec_with(Device(name="gpu0", container_edits=ContainerEdits(env=["A=1"], **edits)))


def _spec_edits(**edits: Any) -> Spec:
    """One env device plus spec-level edits ``edits``."""
    return spec_with(env_device("gpu0"), container_edits=ContainerEdits(**edits))


NODE = DeviceNode(path="/dev/x", type="c", major=1, minor=3)

# (case id, spec, expected minimum version)
TABLE = [
    ("floor", spec_with(), "0.3.0"),
    ("plain device node", _dev_edits(device_nodes=[NODE]), "0.3.0"),
    (
        "mount without type",
        _dev_edits(mounts=[Mount(host_path="/a", container_path="/b")]),
        "0.3.0",
    ),
    (
        "mount empty type",
        _dev_edits(mounts=[Mount(host_path="/a", container_path="/b", type="")]),
        "0.3.0",
    ),
    # 0.4.0: a mount type, at device or spec level
    (
        "device mount type",
        _dev_edits(mounts=[Mount(host_path="/a", container_path="/b", type="bind")]),
        "0.4.0",
    ),
    (
        "spec mount type",
        _spec_edits(mounts=[Mount(host_path="tmpfs", container_path="/t", type="tmpfs")]),
        "0.4.0",
    ),
    # 0.5.0: hostPath, device name starting with a digit
    (
        "device hostPath",
        _dev_edits(device_nodes=[DeviceNode(path="/dev/x", host_path="/dev/null")]),
        "0.5.0",
    ),
    (
        "spec hostPath",
        _spec_edits(device_nodes=[DeviceNode(path="/dev/x", host_path="/dev/null")]),
        "0.5.0",
    ),
    (
        "empty hostPath",
        _dev_edits(device_nodes=[DeviceNode(path="/dev/x", host_path="")]),
        "0.3.0",
    ),
    ("digit device name", spec_with(env_device("0")), "0.5.0"),
    ("digit later in name", spec_with(env_device("gpu0")), "0.3.0"),
    # 0.6.0: annotations (spec or device), '.' in class
    ("spec annotations", spec_with(annotations={"a": "b"}), "0.6.0"),
    ("empty spec annotations", spec_with(annotations={}), "0.3.0"),
    (
        "device annotations",
        spec_with(
            Device(name="d", annotations={"a": "b"}, container_edits=ContainerEdits(env=["A=1"]))
        ),
        "0.6.0",
    ),
    ("dot in class", spec_with(kind="example.com/gpu.v1"), "0.6.0"),
    ("dot in vendor only", spec_with(kind="vendor.example.com/gpu"), "0.3.0"),
    # 0.7.0: intelRdt present (even {}), additionalGids non-empty
    ("device intelRdt {}", _dev_edits(intel_rdt=IntelRdt()), "0.7.0"),
    ("spec intelRdt", _spec_edits(intel_rdt=IntelRdt(clos_id="c1")), "0.7.0"),
    ("intelRdt enableCMT", _dev_edits(intel_rdt=IntelRdt(enable_cmt=True)), "0.7.0"),
    ("enableMonitoring false", _dev_edits(intel_rdt=IntelRdt(enable_monitoring=False)), "0.7.0"),
    ("additionalGids", _dev_edits(additional_gids=[44]), "0.7.0"),
    ("spec additionalGids", _spec_edits(additional_gids=[44]), "0.7.0"),
    ("empty additionalGids", _dev_edits(additional_gids=[]), "0.3.0"),
    # 1.1.0: netDevices, schemata (even []), enableMonitoring true
    (
        "device netDevices",
        _dev_edits(net_devices=[NetDevice(host_interface_name="eth1", name="net0")]),
        "1.1.0",
    ),
    (
        "spec netDevices",
        _spec_edits(net_devices=[NetDevice(host_interface_name="eth1", name="net0")]),
        "1.1.0",
    ),
    ("empty netDevices", _dev_edits(net_devices=[]), "0.3.0"),
    ("schemata []", _dev_edits(intel_rdt=IntelRdt(schemata=[])), "1.1.0"),
    ("schemata", _dev_edits(intel_rdt=IntelRdt(schemata=["L3:0=f"])), "1.1.0"),
    ("enableMonitoring true", _dev_edits(intel_rdt=IntelRdt(enable_monitoring=True)), "1.1.0"),
    # the highest requirement wins
    (
        "hostPath and mount type",
        _dev_edits(
            device_nodes=[DeviceNode(path="/dev/x", host_path="/dev/null")],
            mounts=[Mount(host_path="/a", container_path="/b", type="bind")],
        ),
        "0.5.0",
    ),
    (
        "annotations and gids",
        spec_with(
            Device(name="0", annotations={"a": "b"}, container_edits=ContainerEdits(env=["A=1"])),
            env_device("x", "B=2"),
            container_edits=ContainerEdits(additional_gids=[5]),
        ),
        "0.7.0",
    ),
]


@pytest.mark.parametrize(("spec", "expected"), [t[1:] for t in TABLE], ids=[t[0] for t in TABLE])
def test_minimum_version_table(spec: Spec, expected: str) -> None:
    assert minimum_version(spec) == expected
    assert resolve_version(spec) == expected


@pytest.mark.parametrize(("spec", "expected"), [t[1:] for t in TABLE], ids=[t[0] for t in TABLE])
def test_never_forced_versions(spec: Spec, expected: str) -> None:
    assert minimum_version(spec) not in ("0.8.0", "1.0.0")


def test_requirements_name_the_fields() -> None:
    spec = spec_with(
        Device(
            name="0",
            container_edits=ContainerEdits(
                device_nodes=[DeviceNode(path="/dev/x", host_path="/dev/null")]
            ),
        ),
        env_device("b"),
        kind="example.com/gpu.v1",
    )
    reqs = {(r.version, r.path) for r in version_requirements(spec)}
    assert reqs == {
        ("0.6.0", "kind"),
        ("0.5.0", "devices[0].name"),
        ("0.5.0", "devices[0].containerEdits.deviceNodes[0].hostPath"),
    }


def test_cap_allows_content_at_the_cap() -> None:
    spec = spec_with(env_device("0"))
    assert resolve_version(spec, "0.5.0") == "0.5.0"
    assert resolve_version(spec_with(), "0.3.0") == "0.3.0"


def test_cap_rejects_content_above_it_naming_field_and_version() -> None:
    spec = spec_with(env_device("0"), annotations={"a": "b"})
    with pytest.raises(CDIVersionError) as exc:
        resolve_version(spec, "0.5.0")
    msg = str(exc.value)
    assert "0.6.0" in msg and "annotations" in msg and "0.5.0" in msg
    assert exc.value.requirements == [("0.6.0", "annotations", "spec annotations")]


@pytest.mark.parametrize(
    ("spec", "cap"),
    [
        (_dev_edits(mounts=[Mount(host_path="/a", container_path="/b", type="bind")]), "0.3.0"),
        (spec_with(env_device("1")), "0.4.0"),
        (spec_with(kind="example.com/gpu.v1"), "0.5.0"),
        (_dev_edits(additional_gids=[1]), "0.6.0"),
        (_dev_edits(net_devices=[NetDevice(host_interface_name="e", name="n")]), "1.0.0"),
    ],
)
def test_cap_one_below_each_row(spec: Spec, cap: str) -> None:
    with pytest.raises(CDIVersionError):
        resolve_version(spec, cap)
    nxt = CDI_VERSIONS[CDI_VERSIONS.index(cap) + 1]
    assert version_key(resolve_version(spec, "1.1.0")) >= version_key(nxt)


@pytest.mark.parametrize("cap", ["v0.5.0", "0.5", "2.0.0", ""])
def test_unknown_cap_is_an_error(cap: str) -> None:
    with pytest.raises(CDIVersionError, match="unknown cdiVersion"):
        resolve_version(spec_with(), cap)


@pytest.mark.parametrize("field", ["enable_cmt", "enable_mbm"])
def test_enable_cmt_mbm_incompatible_with_1_1(field: str) -> None:
    flag: dict[str, Any] = {field: True}
    rdt = IntelRdt(schemata=["L3:0=f"], **flag)
    with pytest.raises(CDIVersionError, match="removed enableCMT/enableMBM"):
        resolve_version(_dev_edits(intel_rdt=rdt))
    # with 0.7-level content they are fine
    off: dict[str, Any] = {field: False}
    assert resolve_version(_dev_edits(intel_rdt=IntelRdt(**off))) == "0.7.0"


def test_enable_cmt_with_net_devices_elsewhere_is_incompatible() -> None:
    spec = spec_with(
        Device(name="a", container_edits=ContainerEdits(intel_rdt=IntelRdt(enable_mbm=True))),
        Device(
            name="b",
            container_edits=ContainerEdits(
                net_devices=[NetDevice(host_interface_name="eth1", name="n")]
            ),
        ),
    )
    with pytest.raises(CDIVersionError, match=r"devices\[0\]\.containerEdits\.intelRdt\.enableMBM"):
        resolve_version(spec)


@pytest.mark.parametrize(
    ("declared", "spec", "fragment"),
    [
        ("v0.5.0", spec_with(), "unknown cdiVersion"),
        ("0.9.0", spec_with(), "unknown cdiVersion"),
        ("0.2.0", spec_with(), "needs 0.3.0"),
        ("0.4.0", spec_with(env_device("0")), "needs 0.5.0"),
        ("1.1.0", _dev_edits(intel_rdt=IntelRdt(enable_cmt=True)), "removed in 1.1.0"),
    ],
)
def test_declared_version_errors(declared: str, spec: Spec, fragment: str) -> None:
    spec.cdi_version = declared
    errors = declared_version_errors(spec)
    assert errors and fragment in errors[0]


@pytest.mark.parametrize("declared", CDI_VERSIONS)
def test_any_declared_version_at_or_above_minimum_is_fine(declared: str) -> None:
    spec = spec_with()
    spec.cdi_version = declared
    assert declared_version_errors(spec) == []
