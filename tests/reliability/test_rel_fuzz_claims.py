"""Malformed and hostile ResourceClaim objects (as the API might return them) through the
real NodeLogic: real Inventory (example discoverer), real Checkpoint, real CDI SpecStore,
the real AllocatedDeviceStatus entry builder; only the claim source is a stub.

Claims are built from pieces that are mostly right and sometimes wrong: missing fields,
wrong JSON types, foreign drivers, unknown devices and pools, hostile names, duplicated
results, unknown allocation modes, odd opaque configs, long lists. Property: prepare never
raises, answers exactly the one claim, an error names the claim, a success has a valid
CDI spec and a completed checkpoint record, and unprepare undoes it completely.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from reliability_helpers import CASES, fuzz_settings, hostile_strings, json_values

from cdi.store import SpecStore
from cdi.validate import load_spec_file
from discovery.builtin.example import ExampleDiscovery
from discovery.plugin import ClaimRef, DiscoveryContext
from plugin.checkpoint import Checkpoint, ClaimRecord
from plugin.inventory import Inventory
from plugin.node import NodeLogic
from plugin.status import build_entries

DRIVER = "drakit.example.com"
NODE = "node-1"
REF = ClaimRef(namespace="default", name="fuzzed", uid="0b5e5e4c-7d1f-4b39-9f0b-6f2d3b8f1a11")
CONFIG_API = "drakit.example.com/v1alpha1"
CONFIG_KIND = "ExampleDeviceConfig"


class StubClaims:
    """Returns whatever claim object the test sets (or raises it, when it is an exception)."""

    def __init__(self) -> None:
        self.claim: Any = None

    def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        if isinstance(self.claim, BaseException):
            raise self.claim
        return self.claim  # type: ignore[no-any-return]


class EntryBuildingStatus:
    """Builds the AllocatedDeviceStatus entries exactly as StatusWriter.write does."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []

    def write(self, claim: ClaimRef, record: ClaimRecord) -> None:
        self.entries = build_entries(DRIVER, record)

    def remove(self, claim: ClaimRef) -> None:
        self.entries = []


class Bench:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.cdi = root / "cdi"
        self.data = root / "data"
        plugin = ExampleDiscovery(DiscoveryContext(driver_name=DRIVER, node_name=NODE))
        self.inventory = Inventory([plugin])
        self.inventory.refresh()
        self.devices = [d.name for p in self.inventory.pools() for d in p.devices]
        self.claims = StubClaims()
        self.checkpoint = Checkpoint(self.data / "checkpoint.json")
        self.checkpoint.load()
        self.specs = SpecStore(self.cdi, DRIVER, "device", host_root=None)
        self.status = EntryBuildingStatus()
        self.node = NodeLogic(DRIVER, self.inventory, self.claims, self.specs, self.checkpoint,
                              self.status)

    def files(self) -> set[str]:
        out = set()
        for d, _, names in os.walk(self.root):
            out |= {os.path.relpath(os.path.join(d, n), self.root) for n in names}
        return out


def _one_of_mostly(good: st.SearchStrategy[Any], *bad: st.SearchStrategy[Any]) -> Any:
    """``good`` about three times in four."""
    return st.one_of(good, good, good, *bad) if bad else good


def claim_strategy(devices: list[str]) -> st.SearchStrategy[Any]:
    result = st.fixed_dictionaries(
        {
            "driver": _one_of_mostly(st.just(DRIVER), st.sampled_from(
                ["gpu.other.com", DRIVER.upper(), DRIVER + " "]), json_values),
            "pool": _one_of_mostly(st.just(NODE), hostile_strings, json_values),
            "device": _one_of_mostly(st.sampled_from(devices), hostile_strings, json_values),
            "request": _one_of_mostly(st.sampled_from(["req-0", "req-1", "main/sub"]),
                                      hostile_strings, json_values),
        },
        optional={
            "shareID": st.one_of(st.uuids().map(str), hostile_strings, json_values),
            "adminAccess": st.one_of(st.booleans(), json_values),
            "consumedCapacity": st.one_of(
                st.dictionaries(hostile_strings, st.sampled_from(["1", "10Gi", "0.5"]),
                                max_size=3), json_values),
            "tolerations": json_values,
            "bindingConditions": json_values,
        },
    )
    good_params = st.fixed_dictionaries(
        {},
        optional={
            "apiVersion": st.one_of(st.just(CONFIG_API), hostile_strings),
            "kind": st.one_of(st.just(CONFIG_KIND), hostile_strings),
            "sharing": st.one_of(
                st.fixed_dictionaries({"strategy": st.sampled_from(
                    ["Exclusive", "TimeSlicing", "SpacePartitioning", "Bogus"])},
                    optional={"timeSlicing": st.one_of(
                        st.fixed_dictionaries({"interval": st.sampled_from(
                            ["Default", "Short", "Long", "Forever"])}), json_values)}),
                json_values),
        },
    )
    params = _one_of_mostly(good_params, st.dictionaries(hostile_strings, json_values,
                                                         max_size=4), json_values)
    config = st.fixed_dictionaries(
        {"opaque": _one_of_mostly(
            st.fixed_dictionaries({"driver": st.just(DRIVER), "parameters": params}),
            st.fixed_dictionaries({"driver": st.just("gpu.other.com"),
                                   "parameters": json_values}),
            json_values)},
        optional={
            "source": st.one_of(st.sampled_from(["FromClass", "FromClaim"]), json_values),
            "requests": st.one_of(st.lists(st.sampled_from(["req-0", "main", "x"]),
                                           max_size=3), json_values),
        },
    )
    devices_obj = st.fixed_dictionaries(
        {"results": _one_of_mostly(st.lists(result, min_size=1, max_size=6), json_values)},
        optional={"config": st.one_of(st.lists(config, max_size=4), json_values)},
    )
    allocation = _one_of_mostly(
        st.fixed_dictionaries(
            {"devices": _one_of_mostly(devices_obj, json_values)},
            optional={"nodeSelector": json_values, "allocationTimestamp": json_values},
        ),
        json_values,
    )
    spec = st.fixed_dictionaries({"devices": st.fixed_dictionaries({"requests": st.lists(
        st.fixed_dictionaries({"name": hostile_strings, "exactly": st.fixed_dictionaries(
            {"allocationMode": st.sampled_from(["ExactCount", "All", "Some", "Bogus"]),
             "count": json_values})}), max_size=3)})})
    metadata = _one_of_mostly(
        st.fixed_dictionaries({
            "uid": _one_of_mostly(st.just(REF.uid), hostile_strings, json_values),
            "namespace": _one_of_mostly(st.just(REF.namespace), json_values),
            "name": _one_of_mostly(st.just(REF.name), json_values),
        }),
        json_values,
    )
    claim = st.fixed_dictionaries(
        {"metadata": metadata},
        optional={
            "status": _one_of_mostly(
                st.fixed_dictionaries({"allocation": allocation},
                                      optional={"reservedFor": json_values,
                                                "devices": json_values}),
                json_values),
            "spec": st.one_of(spec, json_values),
            "apiVersion": json_values,
            "kind": json_values,
        },
    )
    return st.one_of(claim, claim, claim, json_values, st.none(),
                     st.sampled_from([RuntimeError("API down"), OSError("connection reset")]))


def check_one(bench: Bench, claim: Any) -> str:
    """Run one claim through prepare (and unprepare); return "ok" or "error"."""
    bench.claims.claim = claim
    results = bench.node.prepare_claims([REF])
    assert set(results) == {REF.uid}
    result = results[REF.uid]
    files = bench.files()
    assert not any(f.endswith(".tmp") for f in files), files
    if result.error:
        assert isinstance(result.error, str)
        assert f"{REF.namespace}/{REF.name}" in result.error or REF.uid in result.error, \
            result.error
        assert not result.devices
        assert bench.checkpoint.get(REF.uid) is None
        assert not bench.specs.exists(REF.uid)
    else:
        rec = bench.checkpoint.get(REF.uid)
        assert rec is not None and rec.phase == "PrepareCompleted"
        spec = load_spec_file(bench.specs.path_for(REF.uid))
        names = {f"{bench.specs.kind}={d.name}" for d in spec.devices}
        assert result.devices
        for dev in result.devices:
            assert set(dev.cdi_device_ids) <= names
            assert dev.pool_name == NODE and dev.device_name in bench.devices
        assert bench.node.unprepare_claims([REF]) == {REF.uid: ""}
    assert bench.checkpoint.claims() == {}
    assert not bench.specs.exists(REF.uid)
    assert {f for f in bench.files() if not f.startswith("data/")} == set()
    return "error" if result.error else "ok"


def test_fuzz_claim_objects(tmp_path: Path) -> None:
    bench = Bench(tmp_path)
    outcomes = {"ok": 0, "error": 0}

    @fuzz_settings(500)
    @given(claim_strategy(bench.devices))
    def run(claim: Any) -> None:
        with CASES.case("claim-objects"):
            outcomes[check_one(bench, claim)] += 1

    run()
    assert outcomes["ok"] > 0 and outcomes["error"] > 0, outcomes


def test_valid_claim_prepares(tmp_path: Path) -> None:
    """The fuzz property holds for a plainly valid claim too (the fuzz is not all errors)."""
    bench = Bench(tmp_path)
    bench.claims.claim = {
        "metadata": {"uid": REF.uid, "namespace": REF.namespace, "name": REF.name},
        "status": {"allocation": {"devices": {
            "results": [{"driver": DRIVER, "pool": NODE, "device": "gpu-0", "request": "r"}],
            "config": [{"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": {
                "apiVersion": CONFIG_API, "kind": CONFIG_KIND,
                "sharing": {"strategy": "TimeSlicing", "timeSlicing": {"interval": "Long"}}}}}],
        }}},
    }
    result = bench.node.prepare_claims([REF])[REF.uid]
    assert not result.error
    assert bench.status.entries and bench.status.entries[0]["device"] == "gpu-0"
    spec = load_spec_file(bench.specs.path_for(REF.uid))
    env = spec.devices[0].container_edits.env or []
    assert "DRAKIT_EXAMPLE_GPU_0_TIMESLICE=Long" in env
    assert bench.node.unprepare_claims([REF]) == {REF.uid: ""}


def test_huge_lists_in_claim(tmp_path: Path) -> None:
    """Thousands of allocation results and configs: a clear error, quickly, nothing kept."""
    bench = Bench(tmp_path)
    bench.claims.claim = {
        "metadata": {"uid": REF.uid, "namespace": REF.namespace, "name": REF.name},
        "status": {"allocation": {"devices": {
            "results": [{"driver": DRIVER, "pool": NODE, "device": f"nope-{i}",
                         "request": f"r{i}"} for i in range(5000)],
            "config": [{"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": {
                "sharing": {"strategy": "Exclusive"}}}}] * 5000,
        }}},
    }
    result = bench.node.prepare_claims([REF])[REF.uid]
    assert "not in this node's inventory" in result.error
    assert "default/fuzzed" in result.error
    assert bench.checkpoint.claims() == {}


def test_foreign_driver_only(tmp_path: Path) -> None:
    bench = Bench(tmp_path)
    bench.claims.claim = {
        "metadata": {"uid": REF.uid, "namespace": REF.namespace, "name": REF.name},
        "status": {"allocation": {"devices": {"results": [
            {"driver": "gpu.other.com", "pool": NODE, "device": "gpu-0", "request": "r"}]}}},
    }
    result = bench.node.prepare_claims([REF])[REF.uid]
    assert "no allocation results for driver 'drakit.example.com'" in result.error
