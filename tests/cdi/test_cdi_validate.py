"""Spec validation rules with their field paths, strict decoding, and the schema's own data."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cdi_helpers import env_device, spec_with

from drakit.cdi.errors import SpecValidationError
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
from drakit.cdi.validate import (
    load_spec,
    load_spec_file,
    spec_errors,
    spec_from_dict,
    validate_spec,
)


def _valid(spec: Spec, version: str = "0.3.0") -> Spec:
    spec.cdi_version = version
    return spec


def _paths(spec: Spec, max_version: str | None = None) -> dict[str, str]:
    return {e.path: e.message for e in spec_errors(spec, max_version)}


def _third_device(**edits: Any) -> Spec:
    """Three devices; the third (index 2) carries ``edits``."""
    return _valid(
        spec_with(
            env_device("a"),
            env_device("b"),
            Device(name="c", container_edits=ContainerEdits(**edits)),
        ),
        "1.1.0",
    )


def test_valid_spec_has_no_errors() -> None:
    spec = _valid(
        spec_with(
            Device(
                name="gpu0",
                container_edits=ContainerEdits(
                    env=["A=1", "EMPTY="],
                    device_nodes=[
                        DeviceNode(path="/dev/x", type="c", major=1, minor=3, permissions="rw")
                    ],
                    mounts=[Mount(host_path="/a", container_path="/b", options=["ro", "bind"])],
                    hooks=[Hook(hook_name="createContainer", path="/bin/true", timeout=5)],
                ),
            ),
            container_edits=ContainerEdits(env=["B=2"]),
        )
    )
    assert spec_errors(spec) == []
    validate_spec(spec)


BASE = "devices[2].containerEdits"
NODE_CASES = [
    (DeviceNode(path="dev/x"), f"{BASE}.deviceNodes[0].path", "absolute"),
    (DeviceNode(path=""), f"{BASE}.deviceNodes[0].path", "empty"),
    (DeviceNode(path="/d", host_path="null"), f"{BASE}.deviceNodes[0].hostPath", "absolute"),
    (DeviceNode(path="/d", type="x"), f"{BASE}.deviceNodes[0].type", "b, c, u, p"),
    (DeviceNode(path="/d", type="cc"), f"{BASE}.deviceNodes[0].type", "b, c, u, p"),
    (DeviceNode(path="/d", permissions="rwx"), f"{BASE}.deviceNodes[0].permissions", "rwm"),
    (DeviceNode(path="/d", permissions="none"), f"{BASE}.deviceNodes[0].permissions", "rwm"),
    (DeviceNode(path="/d", file_mode=0o20666), f"{BASE}.deviceNodes[0].fileMode", "bits"),
    (DeviceNode(path="/d", file_mode=-1), f"{BASE}.deviceNodes[0].fileMode", "bits"),
    (DeviceNode(path="/d", uid=-1), f"{BASE}.deviceNodes[0].uid", "range"),
    (DeviceNode(path="/d", gid=2**32), f"{BASE}.deviceNodes[0].gid", "range"),
    (DeviceNode(path="/d", major=-1), f"{BASE}.deviceNodes[0].major", "range"),
    (DeviceNode(path="/d", minor=2**63), f"{BASE}.deviceNodes[0].minor", "range"),
]


@pytest.mark.parametrize(("node", "path", "fragment"), NODE_CASES)
def test_device_node_rules(node: DeviceNode, path: str, fragment: str) -> None:
    errors = _paths(_third_device(device_nodes=[node]))
    assert path in errors, errors
    assert fragment in errors[path]


@pytest.mark.parametrize("node_type", ["", "b", "c", "u", "p"])
def test_device_node_types_allowed(node_type: str) -> None:
    node = DeviceNode(path="/d", type=node_type, major=1, minor=1, uid=2**32 - 1, file_mode=0o7777)
    assert _paths(_third_device(device_nodes=[node])) == {}


@pytest.mark.parametrize("env", ["=x", "NOEQUALS", "", "A=\x00"])
def test_env_rules(env: str) -> None:
    errors = _paths(_third_device(env=["OK=1", env]))
    assert f"{BASE}.env[1]" in errors


OTHER_CASES = [
    ({"mounts": [Mount(host_path="/a", container_path="b")]}, "mounts[0].containerPath"),
    ({"mounts": [Mount(host_path="a", container_path="/b")]}, "mounts[0].hostPath"),
    ({"mounts": [Mount(host_path="", container_path="/b", type="tmpfs")]}, "mounts[0].hostPath"),
    (
        {"mounts": [Mount(host_path="rel", container_path="/b", type="x", options=["rbind"])]},
        "mounts[0].hostPath",
    ),
    ({"hooks": [Hook(hook_name="preStart", path="/bin/x")]}, "hooks[0].hookName"),
    ({"hooks": [Hook(hook_name="poststop", path="bin/x")]}, "hooks[0].path"),
    ({"hooks": [Hook(hook_name="poststop", path="/x", timeout=0)]}, "hooks[0].timeout"),
    ({"hooks": [Hook(hook_name="poststop", path="/x", env=["bad"])]}, "hooks[0].env[0]"),
    ({"intel_rdt": IntelRdt(clos_id="a/b")}, "intelRdt.closID"),
    ({"intel_rdt": IntelRdt(clos_id="..")}, "intelRdt.closID"),
    ({"intel_rdt": IntelRdt(clos_id="x" * 4096)}, "intelRdt.closID"),
    ({"additional_gids": [1, 2**32]}, "additionalGids[1]"),
    ({"additional_gids": [-1]}, "additionalGids[0]"),
    (
        {"net_devices": [NetDevice(host_interface_name="", name="n")]},
        "netDevices[0].hostInterfaceName",
    ),
    ({"net_devices": [NetDevice(host_interface_name="e", name="a" * 16)]}, "netDevices[0].name"),
    (
        {
            "net_devices": [
                NetDevice(host_interface_name="eth1", name="n1"),
                NetDevice(host_interface_name="eth1", name="n2"),
            ]
        },
        "netDevices[1].hostInterfaceName",
    ),
    (
        {
            "net_devices": [
                NetDevice(host_interface_name="eth1", name="n1"),
                NetDevice(host_interface_name="eth2", name="n1"),
            ]
        },
        "netDevices[1].name",
    ),
]


@pytest.mark.parametrize(("edits", "path"), OTHER_CASES)
def test_edit_rules(edits: dict[str, Any], path: str) -> None:
    errors = _paths(_third_device(env=["A=1"], **edits))
    assert f"{BASE}.{path}" in errors, errors


def test_allowed_edges() -> None:
    spec = _third_device(
        mounts=[Mount(host_path="tmpfs", container_path="/t", type="tmpfs")],
        hooks=[Hook(hook_name=h, path="/x") for h in ("prestart", "startContainer", "poststart")],
        intel_rdt=IntelRdt(clos_id="/"),
        additional_gids=[0, 2**32 - 1],
    )
    assert _paths(spec) == {}


def test_spec_level_edits_are_checked_and_may_be_empty() -> None:
    spec = _valid(spec_with(container_edits=ContainerEdits(env=["bad"])))
    assert "containerEdits.env[0]" in _paths(spec)
    assert _paths(_valid(spec_with(container_edits=ContainerEdits()))) == {}


def test_spec_structure_rules() -> None:
    spec = _valid(spec_with(env_device("a"), env_device("a")))
    assert "duplicate device name" in _paths(spec)["devices[1].name"]
    empty = _valid(spec_with(Device(name="e", container_edits=ContainerEdits(env=[]))))
    assert "must not be empty" in _paths(empty)["devices[0].containerEdits"]
    no_devices = _valid(Spec(kind="example.com/gpu", devices=[]))
    assert "at least one device" in _paths(no_devices)["devices"]
    bad_name = _valid(spec_with(env_device("a/b")))
    assert "devices[0].name" in _paths(bad_name)
    assert "kind" in _paths(_valid(spec_with(kind="example.com")))
    assert "kind" in _paths(_valid(spec_with(kind="e/gpu")))


def test_annotation_rules_paths() -> None:
    spec = _valid(
        spec_with(
            Device(
                name="a", annotations={"-bad": "x"}, container_edits=ContainerEdits(env=["A=1"])
            ),
            annotations={"ok": "1", "bad key": "2"},
        ),
        "0.6.0",
    )
    errors = _paths(spec)
    assert "annotations['bad key']" in errors
    assert "devices[0].annotations['-bad']" in errors


def test_version_rules() -> None:
    assert "cdiVersion" in _paths(spec_with())  # unset
    assert "unknown" in _paths(_valid(spec_with(), "v0.3.0"))["cdiVersion"]
    assert "needs 0.5.0" in _paths(_valid(spec_with(env_device("0"))))["cdiVersion"]
    assert "maximum 0.5.0" in _paths(_valid(spec_with(), "0.6.0"), "0.5.0")["cdiVersion"]
    assert _paths(_valid(spec_with(), "0.5.0"), "0.5.0") == {}


def test_validate_spec_raises_with_all_errors() -> None:
    spec = _third_device(env=["bad"], device_nodes=[DeviceNode(path="rel")])
    with pytest.raises(SpecValidationError) as exc:
        validate_spec(spec)
    paths = [e.path for e in exc.value.errors]
    assert paths == [f"{BASE}.env[0]", f"{BASE}.deviceNodes[0].path"]
    assert f"{BASE}.deviceNodes[0].path" in str(exc.value)


# strict decoding, as runtimes decode


def _doc(**device_edits: Any) -> dict[str, Any]:
    return {
        "cdiVersion": "0.3.0",
        "kind": "example.com/gpu",
        "devices": [{"name": "gpu0", "containerEdits": {"env": ["A=1"], **device_edits}}],
    }


@pytest.mark.parametrize(
    ("doc", "path", "fragment"),
    [
        (_doc(bogus=1), "devices[0].containerEdits.bogus", "unknown field"),
        ({**_doc(), "extra": True}, "extra", "unknown field"),
        (
            _doc(deviceNodes=[{"path": "/d", "major": "3"}]),
            "devices[0].containerEdits.deviceNodes[0].major",
            "integer",
        ),
        (
            _doc(deviceNodes=[{"path": "/d", "major": 3.0}]),
            "devices[0].containerEdits.deviceNodes[0].major",
            "integer",
        ),
        (
            _doc(deviceNodes=[{"path": "/d", "hostpath": "/x"}]),
            "devices[0].containerEdits.deviceNodes[0].hostpath",
            "unknown",
        ),
        (
            {**_doc(), "devices": [{"name": 0, "containerEdits": {"env": ["A=1"]}}]},
            "devices[0].name",
            "string",
        ),
        ({"cdiVersion": "0.3.0", "devices": []}, "kind", "required"),
    ],
)
def test_strict_decoding(doc: dict[str, Any], path: str, fragment: str) -> None:
    with pytest.raises(SpecValidationError) as exc:
        spec_from_dict(doc)
    errors = {e.path: e.message for e in exc.value.errors}
    assert path in errors, errors
    assert fragment.lower() in errors[path].lower()


def test_load_spec_json_and_yaml(tmp_path: Path) -> None:
    doc = _doc()
    spec = load_spec(json.dumps(doc))
    assert spec.devices[0].name == "gpu0"
    yaml_text = (
        "cdiVersion: '0.3.0'\nkind: example.com/gpu\n"
        "devices:\n- name: '0'\n  containerEdits:\n    env: [A=1]\n"
    )
    assert load_spec(yaml_text, "yaml").devices[0].name == "0"
    with pytest.raises(SpecValidationError, match="string"):
        load_spec(yaml_text.replace("'0'", "0"), "yaml")  # YAML pitfall: name: 0 is an int
    with pytest.raises(SpecValidationError, match="cannot decode json"):
        load_spec("{not json")
    (tmp_path / "x.json").write_text(yaml_text)  # YAML content in a .json file: as the library
    assert load_spec_file(tmp_path / "x.json").kind == "example.com/gpu"


# the schema's own test data


def _schema_files(schema_dir: Path, kind: str) -> list[Path]:
    return sorted((schema_dir / "testdata" / kind).glob("*.json"))


def test_schema_good_testdata_passes_schema_and_our_rules(
    schema_dir: Path, schema_errors: Callable[[Any], list[str]]
) -> None:
    files = _schema_files(schema_dir, "good")
    assert files
    for path in files:
        assert schema_errors(json.loads(path.read_text())) == [], path
        spec = load_spec_file(path)
        validate_spec(spec)


def test_schema_bad_testdata_fails_schema_and_our_loader(
    schema_dir: Path, schema_errors: Callable[[Any], list[str]]
) -> None:
    files = _schema_files(schema_dir, "bad")
    assert files
    for path in files:
        text = path.read_text()
        if text.strip():
            assert schema_errors(json.loads(text)), path
        with pytest.raises(SpecValidationError):
            load_spec_file(path)


def test_our_rules_are_stricter_than_the_schema(schema_errors: Callable[[Any], list[str]]) -> None:
    """Things the schema lets through but runtimes reject (CDI pkg/cdi, v0.5-v1.1)."""
    for doc in (
        {**_doc(), "devices": []},
        {**_doc(), "devices": [{"name": "gpu0", "containerEdits": {}}]},
        _doc(hooks=[{"hookName": "createContainer", "path": "/x", "timeout": 0}]),
    ):
        assert schema_errors(doc) == []
        assert spec_errors(spec_from_dict(doc))
    with pytest.raises(SpecValidationError):
        spec_from_dict(_doc(unknownKey=1))
    assert schema_errors(_doc(unknownKey=1)) == []


def test_json_keys_match_the_schema(schema_dir: Path) -> None:
    """Every attribute serialises under the schema's key (closID, enableCMT are irregular)."""
    defs = json.loads((schema_dir / "defs.json").read_text())["definitions"]
    edits = ContainerEdits(
        env=["A=1"],
        device_nodes=[
            DeviceNode(
                path="/d",
                host_path="/h",
                type="c",
                major=1,
                minor=2,
                file_mode=0o666,
                permissions="rw",
                uid=1,
                gid=2,
            )
        ],
        mounts=[Mount(host_path="/a", container_path="/b", type="bind", options=["ro"])],
        hooks=[Hook(hook_name="poststop", path="/x", args=["x"], env=["E=1"], timeout=3)],
        intel_rdt=IntelRdt(
            clos_id="c",
            l3_cache_schema="l",
            mem_bw_schema="m",
            schemata=["s"],
            enable_monitoring=True,
        ),
        additional_gids=[1],
        net_devices=[NetDevice(host_interface_name="eth1", name="n")],
    )
    data = edits.to_json_dict()
    assert set(data) == set(defs["containerEdits"]["properties"])
    assert set(data["intelRdt"]) == set(
        defs["containerEdits"]["properties"]["intelRdt"]["properties"]
    )
    node_keys = set(defs["DeviceNode"]["properties"]) | {"fileMode"}  # schema omits fileMode
    assert set(data["deviceNodes"][0]) == node_keys
    assert set(data["mounts"][0]) == set(defs["Mount"]["properties"])
    assert set(data["hooks"][0]) == set(defs["Hook"]["properties"])
    assert set(data["netDevices"][0]) == set(defs["LinuxNetDevice"]["properties"])
    assert ContainerEdits.model_validate(data, strict=True) == edits
    legacy = IntelRdt(enable_cmt=True, enable_mbm=False).to_json_dict()
    assert legacy == {"enableCMT": True, "enableMBM": False}
