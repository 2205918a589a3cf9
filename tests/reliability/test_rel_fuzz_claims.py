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

import copy
import itertools
import os
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from reliability_helpers import CASES, fuzz_settings, hostile_strings, json_values, weighted

from drakit.cdi.store import SpecStore
from drakit.cdi.validate import load_spec_file
from drakit.discovery.builtin.example import ExampleDiscovery
from drakit.discovery.plugin import ClaimRef, DiscoveryContext
from drakit.plugin.claims.checkpoint import Checkpoint, ClaimRecord
from drakit.plugin.claims.node import NodeLogic
from drakit.plugin.claims.status import build_entries
from drakit.plugin.slices.inventory import Inventory

DRIVER = "drakit.example.com"
NODE = "node-1"
REF = ClaimRef(namespace="default", name="fuzzed", uid="0b5e5e4c-7d1f-4b39-9f0b-6f2d3b8f1a11")
CONFIG_API = "drakit.example.com/v1alpha1"
CONFIG_KIND = "ExampleDeviceConfig"


class StubClaims:
    """Returns whatever claim object the test sets (or raises it, when it is an exception)."""

    def __init__(self) -> None:
        self.claim: Any = None

    def get_claim(self, namespace: str, name: str,
                  deadline: float | None = None) -> dict[str, Any] | None:
        if isinstance(self.claim, BaseException):
            raise self.claim
        return self.claim


class EntryBuildingStatus:
    """Builds the AllocatedDeviceStatus entries exactly as StatusWriter.write does."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []

    def write(self, claim: ClaimRef, record: ClaimRecord, *, resumed: bool = False) -> None:
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


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path inside a JSON object (dict keys and list indices), parents first."""
    out: list[tuple[Any, ...]] = []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) \
        if isinstance(obj, list) else []
    for k, v in items:
        out.append((*prefix, k))
        out += _paths(v, (*prefix, k))
    return out


def mutate(obj: Any, mutations: list[tuple[int, str, Any]]) -> Any:
    """Apply mutations to ``obj`` in place: each picks a path (index modulo the number of
    paths) and deletes it, replaces it with an arbitrary JSON value, or wraps it in a list."""
    for pick, how, value in mutations:
        paths = _paths(obj)
        if not paths:
            return value
        path = paths[pick % len(paths)]
        parent = obj
        for k in path[:-1]:
            parent = parent[k]
        key = path[-1]
        if how == "delete":
            del parent[key]
        elif how == "wrap":
            parent[key] = [parent[key]]
        else:
            parent[key] = value
    return obj


def claim_strategy(devices: list[str]) -> st.SearchStrategy[Any]:
    """Mostly valid claims for our devices, then 0-3 mutations anywhere in the object; now
    and then something that is not a claim at all, or an API error."""
    result = st.fixed_dictionaries(
        {
            "driver": st.sampled_from([DRIVER] * 6 + ["gpu.other.com"]),
            "pool": st.sampled_from([NODE] * 6 + ["other-pool"]),
            "device": st.sampled_from([*devices, "nope", "GPU-0"]),
            "request": st.sampled_from(["req-0", "req-1", "main/sub"]),
        },
        optional={
            "shareID": st.uuids().map(str),
            "adminAccess": st.booleans(),
            "consumedCapacity": st.dictionaries(
                st.sampled_from(["memory", "cores", "x" * 70]),
                st.sampled_from(["1", "10Gi", "0.5"]), max_size=2),
        },
    )
    params = st.fixed_dictionaries(
        {},
        optional={
            "apiVersion": st.sampled_from([CONFIG_API] * 4 + ["v1"]),
            "kind": st.sampled_from([CONFIG_KIND] * 4 + ["Other"]),
            "sharing": st.fixed_dictionaries(
                {"strategy": st.sampled_from(["Exclusive", "TimeSlicing", "Bogus"])},
                optional={"timeSlicing": st.fixed_dictionaries(
                    {"interval": st.sampled_from(["Default", "Short", "Long", "Forever"])})}),
        },
    )
    config = st.fixed_dictionaries(
        {"source": st.sampled_from(["FromClass", "FromClaim"]),
         "opaque": st.fixed_dictionaries({
             "driver": st.sampled_from([DRIVER] * 4 + ["gpu.other.com"]),
             "parameters": params})},
        optional={"requests": st.lists(st.sampled_from(["req-0", "main", "x"]), max_size=2)},
    )
    base = st.fixed_dictionaries({
        "apiVersion": st.just("resource.k8s.io/v1"),
        "kind": st.just("ResourceClaim"),
        "metadata": st.just({"uid": REF.uid, "namespace": REF.namespace, "name": REF.name}),
        "spec": st.just({"devices": {"requests": [
            {"name": "req-0", "exactly": {"allocationMode": "ExactCount", "count": 1}}]}}),
        "status": st.fixed_dictionaries({"allocation": st.fixed_dictionaries({
            "devices": st.fixed_dictionaries(
                {"results": st.lists(result, min_size=1, max_size=4)},
                optional={"config": st.lists(config, max_size=3)}),
        })}),
    })
    mutation = st.tuples(
        st.integers(0, 10**6),
        st.sampled_from(["delete", "replace", "replace", "wrap"]),
        st.one_of(json_values, hostile_strings),
    )
    mutated = st.builds(lambda c, ms: mutate(copy.deepcopy(c), ms), base,
                        st.lists(mutation, max_size=3))
    return weighted(
        (12, mutated), (1, json_values),
        (1, st.sampled_from([None, RuntimeError("API down"), OSError("connection reset")])),
    )


_SERIAL = itertools.count()


def _with_uid(obj: Any, uid: str) -> Any:
    """``obj`` with every occurrence of REF.uid replaced by ``uid``."""
    if isinstance(obj, dict):
        return {k: _with_uid(v, uid) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_with_uid(v, uid) for v in obj]
    return uid if isinstance(obj, str) and obj == REF.uid else obj


def check_one(bench: Bench, claim: Any) -> str:
    """Run one claim through prepare (and unprepare) under a fresh claim UID (a UID that
    was unprepared is never prepared again); return "ok" or "error"."""
    ref = REF.model_copy(update={"uid": f"{REF.uid[:-6]}{next(_SERIAL):06d}"})
    bench.claims.claim = _with_uid(claim, ref.uid)
    results = bench.node.prepare_claims([ref])
    assert set(results) == {ref.uid}
    result = results[ref.uid]
    files = bench.files()
    assert not any(f.endswith(".tmp") for f in files), files
    if result.error:
        assert isinstance(result.error, str)
        assert f"ResourceClaim {ref.namespace}/{ref.name}: " in result.error, result.error
        assert not result.devices
        assert bench.checkpoint.get(ref.uid) is None
        assert not bench.specs.exists(ref.uid)
    else:
        rec = bench.checkpoint.get(ref.uid)
        assert rec is not None and rec.phase == "PrepareCompleted"
        spec = load_spec_file(bench.specs.path_for(ref.uid))
        names = {f"{bench.specs.kind}={d.name}" for d in spec.devices}
        assert result.devices
        for dev in result.devices:
            assert set(dev.cdi_device_ids) <= names
            assert dev.pool_name == NODE and dev.device_name in bench.devices
        assert bench.node.unprepare_claims([ref]) == {ref.uid: ""}
    assert {u for u, r in bench.checkpoint.claims().items()
            if r.phase != "Unprepared"} == set()
    assert not bench.specs.exists(ref.uid)
    assert {f for f in bench.files() if not f.startswith("data/")} == set()
    return "error" if result.error else "ok"


def test_fuzz_claim_objects(tmp_path: Path) -> None:
    bench = Bench(tmp_path)
    outcomes = {"ok": 0, "error": 0}

    @fuzz_settings(300)
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
