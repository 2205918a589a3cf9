"""CDI container edits from plugins, random but ContainerEdits-shaped, into
drakit.cdi.store.SpecStore
and through NodeLogic (a plugin whose prepare returns them).

Property: the model either refuses the data (pydantic ValidationError, raised inside the
plugin: the claim fails with a message naming it) or the store writes a spec that passes the
official CDI JSON schema and decodes again, or refuses it with a CDIError naming the field;
no other exception, no temp file left, no file outside the CDI directory.
"""

from __future__ import annotations

import itertools
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from reliability_helpers import CASES, fuzz_settings, hostile_strings, json_values, weighted

from drakit.cdi.errors import CDIError
from drakit.cdi.spec import ContainerEdits
from drakit.cdi.spec import Device as CDIDevice
from drakit.cdi.store import SpecStore
from drakit.cdi.testing import schema_validator
from drakit.cdi.validate import load_spec_file
from drakit.discovery.builtin.example import ExampleDiscovery
from drakit.discovery.plugin import ClaimRef, DeviceRequest, DiscoveryContext, PreparedDevice
from drakit.plugin.claims.checkpoint import Checkpoint
from drakit.plugin.claims.node import NodeLogic
from drakit.plugin.slices.inventory import Inventory

DRIVER = "drakit.example.com"
#: The official CDI JSON schema, carried in the repository (provenance: its PROVENANCE.md)
SCHEMA_DIR = Path(__file__).resolve().parents[1] / "data" / "cdi-schema"

_good_paths = st.sampled_from(["/dev/null", "/dev/drkfuzz0", "/mnt/x", "/opt/lib/a.so",
                               "/a/../../etc/shadow"])
paths = weighted((6, _good_paths), (1, st.sampled_from(["relative/p", "", "/dev/\x00x"])),
                 (2, hostile_strings))
small_ints = st.one_of(st.integers(-5, 70000), st.integers(-(2**70), 2**70))
_good_env = st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}=[ -~]{0,12}", fullmatch=True)
str_lists = st.lists(weighted((6, _good_env), (1, hostile_strings),
                              (1, st.sampled_from(["A=1", "B=", "=x", "C"]))), max_size=4)


def _maybe(s: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """The right type mostly, any JSON value now and then."""
    return weighted((7, s), (1, json_values))


def _edits(_maybe: Any) -> st.SearchStrategy[dict[str, Any]]:
    """ContainerEdits-shaped dicts; ``_maybe`` wraps every field's strategy."""
    return st.fixed_dictionaries({}, optional={
        "env": _maybe(str_lists),
        "deviceNodes": _maybe(st.lists(st.fixed_dictionaries({"path": _maybe(paths)}, optional={
            "hostPath": _maybe(paths), "type": _maybe(st.sampled_from(["b", "c", "u", "p", "x"])),
            "major": _maybe(small_ints), "minor": _maybe(small_ints),
            "fileMode": _maybe(small_ints), "permissions": _maybe(st.sampled_from(
                ["rw", "rwm", "r", "z", ""])), "uid": _maybe(small_ints), "gid": _maybe(small_ints),
        }), max_size=3)),
        "mounts": _maybe(st.lists(st.fixed_dictionaries(
            {"hostPath": _maybe(paths), "containerPath": _maybe(paths)},
            optional={"type": _maybe(st.sampled_from(["bind", "tmpfs", ""])),
                      "options": _maybe(str_lists)}), max_size=3)),
        "hooks": _maybe(st.lists(st.fixed_dictionaries(
            {"hookName": _maybe(st.sampled_from(["createContainer", "prestart", "bogus", ""])),
             "path": _maybe(paths)},
            optional={"args": _maybe(str_lists), "env": _maybe(str_lists),
                      "timeout": _maybe(small_ints)}), max_size=2)),
        "additionalGids": _maybe(st.lists(small_ints, max_size=3)),
        "netDevices": _maybe(st.lists(st.fixed_dictionaries(
            {"hostInterfaceName": _maybe(hostile_strings), "name": _maybe(hostile_strings)}),
            max_size=2)),
        "intelRdt": _maybe(st.fixed_dictionaries({}, optional={
            "closID": _maybe(hostile_strings), "schemata": _maybe(str_lists),
            "enableMonitoring": _maybe(st.booleans())})),
    })


_typed = _edits(lambda s: s)  # right types, hostile values
_loose = _edits(_maybe)  # now and then a wrong type anywhere
edits_data = weighted(
    (6, _typed), (2, _loose),
    (1, st.builds(lambda d, v: {**d, "bogusField": v}, _typed, json_values)),
    (1, json_values),
)
device_names = weighted((3, st.sampled_from(["dev0", "0dev", "a.b", "a_b-c", "X_1"])),
                        (1, hostile_strings))


class EditsPlugin(ExampleDiscovery):
    """The example inventory; prepare answers with whatever edits the test sets."""

    name = "example"
    data: Any = None

    def prepare(self, request: DeviceRequest) -> PreparedDevice:
        return PreparedDevice(edits=ContainerEdits.model_validate(self.data))


class Claims:
    def __init__(self) -> None:
        self.claim: dict[str, Any] = {}

    def get_claim(self, namespace: str, name: str,
                  deadline: float | None = None) -> dict[str, Any] | None:
        return self.claim


@pytest.fixture(scope="module")
def schema_check() -> Any:
    return schema_validator(SCHEMA_DIR)


def _listing(root: Path) -> list[str]:
    return sorted(os.listdir(root)) if root.is_dir() else []


def test_fuzz_cdi_edits(schema_check: Any) -> None:
    serial = itertools.count()
    with tempfile.TemporaryDirectory(prefix="drk-cdi-") as tmp:
        root = Path(tmp)
        host = root / "host"
        (host / "dev").mkdir(parents=True)
        (host / "dev" / "null").write_text("")  # a regular file: not a device node
        cdi_dir = root / "cdi"
        store = SpecStore(cdi_dir, DRIVER, "device", host_root=host)
        plugin = EditsPlugin(DiscoveryContext(driver_name=DRIVER, node_name="node-1"))
        inventory = Inventory([plugin])
        inventory.refresh()
        claims = Claims()
        checkpoint = Checkpoint(root / "data" / "checkpoint.json")
        node = NodeLogic(DRIVER, inventory, claims, store, checkpoint)

        @fuzz_settings(200)
        @given(edits_data, device_names)
        def run(data: dict[str, Any], dev_name: str) -> None:
            with CASES.case("cdi-edits"):
                uid = f"cdi-fuzz-{next(serial)}"
                # 1. straight into the store
                try:
                    edits = ContainerEdits.model_validate(data)
                except ValidationError:
                    edits = None
                if edits is not None:
                    try:
                        ids = store.write(uid, [CDIDevice(name=dev_name, container_edits=edits)])
                    except CDIError as e:
                        assert str(e)
                        assert not store.exists(uid)
                    else:
                        assert ids == [f"{DRIVER}/device={dev_name}"]
                        raw = json.loads(store.path_for(uid).read_bytes())
                        assert schema_check(raw) == [], (raw, schema_check(raw))
                        load_spec_file(store.path_for(uid))
                        assert oct(store.path_for(uid).stat().st_mode & 0o777) == "0o644"
                        assert store.remove(uid)
                # 2. through the node logic, from a plugin's prepare
                plugin.data = data
                ref = ClaimRef(namespace="ns", name="cdi-claim", uid=uid + "-n")
                claims.claim = {
                    "metadata": {"namespace": "ns", "name": "cdi-claim", "uid": ref.uid},
                    "status": {"allocation": {"devices": {"results": [
                        {"driver": DRIVER, "pool": "node-1", "device": "gpu-0",
                         "request": "r"}]}}},
                }
                result = node.prepare_claims([ref])[ref.uid]
                if result.error:
                    assert result.error.startswith("ResourceClaim ns/cdi-claim: "), result.error
                    assert not store.exists(ref.uid)
                else:
                    raw = json.loads(store.path_for(ref.uid).read_bytes())
                    assert schema_check(raw) == [], (raw, schema_check(raw))
                    assert node.unprepare_claims([ref]) == {ref.uid: ""}
                assert _listing(cdi_dir) == [], _listing(cdi_dir)
                assert sorted(os.listdir(root)) == ["cdi", "data", "host"] or \
                    sorted(os.listdir(root)) == ["data", "host"]

        run()
