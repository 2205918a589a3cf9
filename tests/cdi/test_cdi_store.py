"""SpecStore: file naming, atomic writes, removal, listing, conflicts, path safety. Every
file the store writes is checked against the official CDI schema and read back strictly."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from cdi_helpers import env_device

from drakit.cdi.errors import (
    CDINameError,
    CDIVersionError,
    HostNodeError,
    SpecConflictError,
    SpecValidationError,
)
from drakit.cdi.spec import ContainerEdits, Device, DeviceNode, Mount
from drakit.cdi.store import SpecStore
from drakit.cdi.validate import load_spec_file, validate_spec

UID = "3f2a9c1e-0b7d-4c52-9a8e-1d2c3b4a5f60"
UID2 = "c0ffee00-0000-4000-8000-000000000002"

SchemaCheck = Callable[[Path], None]


@pytest.fixture
def store(tmp_path: Path) -> SpecStore:
    return SpecStore(tmp_path / "cdi", "k8s.gpu.example.com", "gpu")


def _node_device(name: str, host: str = "/dev/null") -> Device:
    return Device(
        name=name,
        container_edits=ContainerEdits(
            env=[f"DEV_{name.replace('-', '_')}=1"],
            device_nodes=[DeviceNode(path=f"/dev/{name}", host_path=host)],
        ),
    )


def _files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def test_write_names_file_and_returns_ids(
    store: SpecStore, assert_schema_valid: SchemaCheck
) -> None:
    ids = store.write(UID, [env_device("gpu0"), env_device("gpu1")])
    assert ids == ["k8s.gpu.example.com/gpu=gpu0", "k8s.gpu.example.com/gpu=gpu1"]
    path = store.path_for(UID)
    assert path.name == f"k8s.gpu.example.com-gpu_{UID}.json"
    assert _files(store.root_dir) == [path.name]
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert stat.S_IMODE(store.root_dir.stat().st_mode) == 0o755
    assert_schema_valid(path)
    spec = load_spec_file(path)
    validate_spec(spec)
    assert spec.cdi_version == "0.3.0" and spec.kind == "k8s.gpu.example.com/gpu"
    assert store.exists(UID) and store.read(UID) == spec


def test_written_content_is_minimal_json(
    store: SpecStore, assert_schema_valid: SchemaCheck
) -> None:
    edits = ContainerEdits(env=["A=1"], mounts=[], hooks=[], additional_gids=[])
    store.write(UID, [Device(name="d", container_edits=edits)], spec_edits=ContainerEdits())
    data = json.loads(store.path_for(UID).read_text())
    assert data == {
        "cdiVersion": "0.3.0",
        "kind": "k8s.gpu.example.com/gpu",
        "devices": [{"name": "d", "containerEdits": {"env": ["A=1"]}}],
    }
    assert_schema_valid(store.path_for(UID))


def test_host_nodes_filled_and_version_computed(
    store: SpecStore, assert_schema_valid: SchemaCheck
) -> None:
    store.write(UID, [_node_device("drakit0")], spec_edits=ContainerEdits(env=["S=1"]))
    spec = load_spec_file(store.path_for(UID))
    node = spec.devices[0].container_edits.device_nodes[0]  # type: ignore[index]
    assert (node.type, node.major, node.minor) == ("c", 1, 3)
    assert spec.cdi_version == "0.5.0"  # hostPath
    assert spec.container_edits is not None and spec.container_edits.env == ["S=1"]
    assert_schema_valid(store.path_for(UID))


def test_every_version_level_passes_the_schema(
    tmp_path: Path, assert_schema_valid: SchemaCheck
) -> None:
    store = SpecStore(tmp_path, "example.com", "gpu.v1")
    store.write(
        UID,
        [
            Device(
                name="0",
                annotations={"example.com/model": "x"},
                container_edits=ContainerEdits(
                    env=["A=1"],
                    mounts=[Mount(host_path="tmpfs", container_path="/t", type="tmpfs")],
                    additional_gids=[44],
                ),
            )
        ],
        annotations={"a": "b"},
    )
    assert load_spec_file(store.path_for(UID)).cdi_version == "0.7.0"
    assert_schema_valid(store.path_for(UID))


def test_rewrite_replaces_and_zero_devices_removes(store: SpecStore) -> None:
    store.write(UID, [env_device("a"), env_device("b")])
    store.write(UID, [env_device("a")])
    assert [d.name for d in store.read(UID).devices] == ["a"]  # type: ignore[union-attr]
    assert store.write(UID, []) == []
    assert not store.exists(UID)
    assert _files(store.root_dir) == []
    assert store.write(UID, []) == []  # idempotent


def test_remove(store: SpecStore) -> None:
    store.write(UID, [env_device("a")])
    assert store.remove(UID) is True
    assert store.remove(UID) is False
    assert store.read(UID) is None


def test_invalid_spec_writes_nothing(store: SpecStore) -> None:
    store.write(UID, [env_device("a")])
    before = store.path_for(UID).read_bytes()
    with pytest.raises(SpecValidationError, match=r"devices\[1\]\.containerEdits"):
        store.write(UID, [env_device("a"), Device(name="b", container_edits=ContainerEdits())])
    with pytest.raises(SpecValidationError, match="duplicate device name"):
        store.write(UID, [env_device("a"), env_device("a")])
    with pytest.raises(HostNodeError):
        store.write(UID, [_node_device("x", host="/dev/drakit-does-not-exist")])
    assert store.path_for(UID).read_bytes() == before
    assert _files(store.root_dir) == [store.path_for(UID).name]


def test_cap_refuses_newer_content(tmp_path: Path) -> None:
    store = SpecStore(tmp_path, "example.com", "gpu", max_version="0.5.0")
    assert store.write(UID, [_node_device("0")]) == ["example.com/gpu=0"]  # 0.5.0 is fine
    with pytest.raises(CDIVersionError, match=r"annotations needs cdiVersion 0\.6\.0"):
        store.write(UID2, [env_device("a")], annotations={"a": "b"})
    assert not store.exists(UID2)
    with pytest.raises(CDIVersionError):
        SpecStore(tmp_path, "example.com", "gpu", max_version="v0.5.0")
    dotted = SpecStore(tmp_path, "example.com", "gpu.v1", max_version="0.5.0")
    with pytest.raises(CDIVersionError, match="kind"):
        dotted.write(UID2, [env_device("a")])


def test_host_root_none_writes_nodes_as_given(tmp_path: Path) -> None:
    store = SpecStore(tmp_path, "example.com", "gpu", host_root=None)
    store.write(UID, [_node_device("x", host="/dev/drakit-does-not-exist")])
    node = store.read(UID).devices[0].container_edits.device_nodes[0]  # type: ignore[union-attr,index]
    assert node.type is None and node.major is None


def test_host_root_prefix(tmp_path: Path) -> None:
    root = tmp_path / "host"
    (root / "dev").mkdir(parents=True)
    (root / "dev" / "accel0").symlink_to("/dev/null")
    store = SpecStore(tmp_path / "cdi", "example.com", "gpu", host_root=root)
    store.write(UID, [_node_device("a", host="/dev/accel0")])
    node = store.read(UID).devices[0].container_edits.device_nodes[0]  # type: ignore[union-attr,index]
    assert (node.host_path, node.type, node.major, node.minor) == ("/dev/accel0", "c", 1, 3)


@pytest.mark.parametrize(
    "uid", ["", "..", "../escape", "a/b", "/abs", "a\x00b", "x" * 129, ".hidden", "a b"]
)
def test_unsafe_claim_uids_never_touch_a_path(tmp_path: Path, uid: str) -> None:
    store = SpecStore(tmp_path / "cdi", "example.com", "gpu")
    for call in (
        lambda: store.write(uid, [env_device("a")]),
        lambda: store.write(uid, []),
        lambda: store.remove(uid),
        lambda: store.exists(uid),
        lambda: store.path_for(uid),
    ):
        with pytest.raises(CDINameError):
            call()
    assert _files(tmp_path) == []


def test_over_long_file_name_rejected(tmp_path: Path) -> None:
    store = SpecStore(tmp_path, "v" * 120, "c" * 63)
    with pytest.raises(CDINameError, match="too long"):
        store.path_for("u" * 80)


@pytest.mark.parametrize(("vendor", "cls"), [("e", "gpu"), ("Example.com", "gpu"), ("ex.com", "g")])
def test_bad_vendor_or_class_rejected(tmp_path: Path, vendor: str, cls: str) -> None:
    with pytest.raises(CDINameError):
        SpecStore(tmp_path, vendor, cls)


# atomicity


def test_failed_rename_leaves_old_content_and_no_temp(
    store: SpecStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.write(UID, [env_device("a")])
    before = store.path_for(UID).read_bytes()

    def fail_replace(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail_replace)
    with pytest.raises(OSError, match="No space"):
        store.write(UID, [env_device("a"), env_device("b")])
    monkeypatch.undo()
    assert store.path_for(UID).read_bytes() == before
    assert _files(store.root_dir) == [store.path_for(UID).name]


def test_failed_write_midway_leaves_nothing(
    store: SpecStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = os.write
    calls = {"n": 0}

    def half_write(fd: int, data: bytes | memoryview) -> int:
        calls["n"] += 1
        if calls["n"] > 1:
            raise OSError(5, "Input/output error")
        return real_write(fd, bytes(data[:10]))

    monkeypatch.setattr(os, "write", half_write)
    with pytest.raises(OSError, match="Input/output"):
        store.write(UID, [env_device("a")])
    monkeypatch.undo()
    assert calls["n"] == 2
    assert _files(store.root_dir) == []
    assert not store.exists(UID)


def test_temp_file_is_in_same_dir_and_not_a_spec_name(
    store: SpecStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, str]] = []
    real_replace = os.replace

    def spy(src: str, dst: str) -> None:
        seen.append((str(src), str(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    store.write(UID, [env_device("a")])
    (src, dst) = seen[0]
    assert Path(src).parent == Path(dst).parent == store.root_dir
    assert not src.endswith((".json", ".yaml"))


# conflicts and listing


def test_same_qualified_name_in_two_files_is_refused(store: SpecStore) -> None:
    store.write(UID, [env_device("shared"), env_device("a")])
    with pytest.raises(SpecConflictError) as exc:
        store.write(UID2, [env_device("b"), env_device("shared")])
    assert exc.value.qualified_name == "k8s.gpu.example.com/gpu=shared"
    assert exc.value.other_file == str(store.path_for(UID))
    assert store.path_for(UID).name in str(exc.value)
    assert not store.exists(UID2)
    store.write(UID, [env_device("shared")])  # rewriting the owner is fine


def test_conflict_checks_foreign_files_of_same_kind_only(store: SpecStore) -> None:
    store.root_dir.mkdir()
    static = {"cdiVersion": "0.3.0", "kind": store.kind, "devices": [{"name": "x"}]}
    (store.root_dir / "static.yaml").write_text(json.dumps(static))
    other_kind = {**static, "kind": "other.com/gpu"}
    (store.root_dir / "other.json").write_text(
        json.dumps({**other_kind, "devices": [{"name": "y"}]})
    )
    (store.root_dir / "garbage.json").write_text("{")
    (store.root_dir / "ignored.yml").write_text(json.dumps({**static, "devices": [{"name": "z"}]}))
    with pytest.raises(SpecConflictError, match=r"static\.yaml"):
        store.write(UID, [env_device("x")])
    assert store.write(UID, [env_device("y"), env_device("z")])


def test_list_specs_only_this_drivers_files(store: SpecStore, tmp_path: Path) -> None:
    assert store.list_specs() == []  # missing dir
    store.write(UID, [env_device("a")])
    store.write(UID2, [env_device("b")])
    d = store.root_dir
    (d / f".{store.path_for(UID).name}.123.tmp").write_text("{}")
    (d / "k8s.gpu.example.com-gpu_bad uid.json").write_text("{}")
    (d / "k8s.gpu.example.com-gpu_x.yaml").write_text("{}")
    (d / "other.com-gpu_abc.json").write_text("{}")
    # same file-name prefix, different kind (class 'gpu_x' → k8s.gpu.example.com-gpu_x_zzz.json)
    SpecStore(d, "k8s.gpu.example.com", "gpu_x").write("zzz", [env_device("q")])
    assert store.list_specs() == sorted([UID, UID2])
    assert store.remove_orphans([UID]) == [UID2]
    assert store.list_specs() == [UID]


def test_ensure_ready_creates_dir_and_reports_unwritable(tmp_path: Path) -> None:
    store = SpecStore(tmp_path / "a" / "cdi", "example.com", "gpu")
    store.ensure_ready()
    assert store.root_dir.is_dir() and _files(store.root_dir) == []
    assert stat.S_IMODE(store.root_dir.stat().st_mode) == 0o755
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OSError, match="not writable"):
        SpecStore(blocker / "cdi", "example.com", "gpu").ensure_ready()
