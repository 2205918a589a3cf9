"""Unit tests of the embedded API server's pure parts: selectors, patches, Status
objects, the store's watch history and the fault injector."""

from __future__ import annotations

import pytest

from plugin.testing.apiserver_errors import ApiError, invalid, invalid_object, required
from plugin.testing.apiserver_faults import FaultInjector, FaultPlan
from plugin.testing.apiserver_patch import json_patch, merge_patch
from plugin.testing.apiserver_selectors import parse_field_selector, parse_label_selector
from plugin.testing.apiserver_store import Store

SLICE = {"metadata": {"name": "s", "labels": {"tier": "gpu", "zone": "a"}},
         "spec": {"driver": "gpu.example.com", "nodeName": "node-a"}}
NO_NODE = {"metadata": {"name": "t"}, "spec": {"driver": "gpu.example.com", "allNodes": True}}
FIELDS = ("metadata.name", "spec.nodeName", "spec.driver")


@pytest.mark.parametrize(("selector", "expected"), [
    ("", [True, True]),
    ("spec.nodeName=node-a", [True, False]),
    ("spec.nodeName==node-a", [True, False]),
    ("spec.nodeName=", [False, True]),
    ("spec.nodeName!=node-a,spec.driver=gpu.example.com", [False, True]),
    ("metadata.name=t", [False, True]),
])
def test_field_selector(selector: str, expected: list[bool]) -> None:
    match = parse_field_selector(selector, FIELDS)
    assert [match(SLICE), match(NO_NODE)] == expected


def test_field_selector_errors() -> None:
    with pytest.raises(ApiError) as info:
        parse_field_selector("spec.pool.name=x", FIELDS)
    assert info.value.code == 400
    with pytest.raises(ApiError):
        parse_field_selector("nonsense", FIELDS)


@pytest.mark.parametrize(("selector", "expected"), [
    ("tier=gpu", [True, False]),
    ("tier==gpu,zone=a", [True, False]),
    ("tier!=gpu", [False, True]),
    ("tier in (gpu, nic)", [True, False]),
    ("tier notin (gpu)", [False, True]),
    ("zone", [True, False]),
    ("!zone", [False, True]),
])
def test_label_selector(selector: str, expected: list[bool]) -> None:
    match = parse_label_selector(selector)
    assert [match(SLICE), match(NO_NODE)] == expected


def test_merge_patch_rfc7386() -> None:
    target = {"a": {"b": 1, "c": 2}, "l": [1, 2]}
    assert merge_patch(target, {"a": {"b": None, "d": 3}, "l": [3]}) == {
        "a": {"c": 2, "d": 3}, "l": [3]}
    assert target == {"a": {"b": 1, "c": 2}, "l": [1, 2]}


def test_json_patch_rfc6902() -> None:
    doc = {"spec": {"devices": [{"name": "a"}], "x": 1}}
    out = json_patch(doc, [
        {"op": "add", "path": "/spec/devices/-", "value": {"name": "b"}},
        {"op": "replace", "path": "/spec/x", "value": 2},
        {"op": "copy", "from": "/spec/x", "path": "/spec/y"},
        {"op": "remove", "path": "/spec/devices/0"},
        {"op": "test", "path": "/spec/y", "value": 2},
    ])
    assert out == {"spec": {"devices": [{"name": "b"}], "x": 2, "y": 2}}
    with pytest.raises(ApiError) as info:
        json_patch(doc, [{"op": "test", "path": "/spec/x", "value": 5}])
    assert info.value.code == 422
    with pytest.raises(ApiError) as info:
        json_patch(doc, [{"op": "remove", "path": "/spec/missing"}])
    assert info.value.code == 400


def test_invalid_status_object() -> None:
    one = invalid_object("ResourceSlice", "resource.k8s.io", "s",
                         [required("spec.driver")]).to_status()
    assert one["message"] == 'ResourceSlice.resource.k8s.io "s" is invalid: spec.driver: ' \
                             "Required value"
    two = invalid_object("ResourceSlice", "resource.k8s.io", "s",
                         [required("spec.driver"), invalid("spec.pool.generation", -1, "x")])
    assert two.to_status()["message"].endswith(
        "[spec.driver: Required value, spec.pool.generation: Invalid value: -1: x]")
    assert two.to_status()["details"]["causes"][1] == {
        "reason": "FieldValueInvalid", "message": "Invalid value: -1: x",
        "field": "spec.pool.generation"}


def test_store_history_and_compaction() -> None:
    store = Store(history_limit=3)
    start = store.resource_version
    for name in "abcd":
        store.put(("resourceslices", "", name), {"metadata": {"name": name}})
    store.remove(("resourceslices", "", "a"))
    events = store.events_after(start + 2, timeout=0)
    assert [(e.type, e.key[2]) for e in events] == [("ADDED", "c"), ("ADDED", "d"),
                                                     ("DELETED", "a")]
    assert store.is_compacted(start)
    assert not store.is_compacted(start + 2)
    assert store.events_after(store.resource_version, timeout=0) == []


def test_fault_injector_max_faults_and_filters() -> None:
    injector = FaultInjector()
    injector.set_plan(FaultPlan(conflict_rate=1.0, max_faults=2,
                                verbs=frozenset({"patch"})))
    assert injector.decide("get", "resourceclaims", "resource.k8s.io", "c").error is None
    codes = [injector.decide("patch", "resourceclaims/status", "resource.k8s.io", "c")
             for _ in range(3)]
    assert [d.error.code if d.error else None for d in codes] == [409, 409, None]
    assert injector.decide("patch", "", "", "").error is None  # discovery never matches
    injector.set_plan(FaultPlan(conflict_rate=1.0))
    assert injector.decide("list", "resourceslices", "resource.k8s.io", "").error is None
