"""Unit tests of the embedded API server's pure parts: selectors, patches, Status
objects, the store's watch history and the fault injector."""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from typing import Any

import pytest

from drakit.plugin.testing.apiserver.convert import from_internal
from drakit.plugin.testing.apiserver.errors import ApiError, invalid, invalid_object, required
from drakit.plugin.testing.apiserver.faults import FaultInjector, FaultPlan
from drakit.plugin.testing.apiserver.patch import json_patch, merge_patch
from drakit.plugin.testing.apiserver.resources import RESOURCE_SLICES
from drakit.plugin.testing.apiserver.selectors import parse_field_selector, parse_label_selector
from drakit.plugin.testing.apiserver.store import Store

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


def test_store_select_copies_and_does_not_hold_the_lock() -> None:
    store = Store()
    for name in "ba":
        store.put(("resourceslices", "", name),
                  {"metadata": {"name": name}, "spec": {"devices": [{"name": "d"}]}})
    store.put(("nodes", "", "n"), {"metadata": {"name": "n"}})
    items, rv = store.select("resourceslices", None)
    assert [i["metadata"]["name"] for i in items] == ["a", "b"] and rv == store.resource_version
    items[0]["spec"]["devices"].append({"name": "mine"})         # a copy: the store keeps its own
    shared, _ = store.select("resourceslices", None, copy=False)
    assert shared[0]["spec"]["devices"] == [{"name": "d"}]
    assert store.select("resourceslices", None, copy=False)[0][0] is shared[0]

    # filtering (and copying) happens after the lock is released: a writer in another
    # thread is not held up by a list in progress
    written = []

    def predicate(obj: Mapping[str, Any]) -> bool:
        name = obj["metadata"]["name"]
        t = threading.Thread(target=lambda: written.append(
            store.put(("resourceslices", "", name + "-new"), {"metadata": {"name": "x"}})))
        t.start()
        t.join(timeout=5)
        return not t.is_alive()

    items, _ = store.select("resourceslices", None, predicate)
    assert len(items) == 2 and len(written) == 2    # the list is of the state it started in


def test_from_internal_shared_for_encoding_does_not_change_the_object() -> None:
    obj = {"metadata": {"name": "s", "resourceVersion": "7"},
           "spec": {"driver": "d", "devices": [{"name": "a", "attributes": {"x": {"int": 1}}}]}}
    before = copy.deepcopy(obj)
    for version in ("v1", "v1beta2", "v1beta1"):
        shared = from_internal(RESOURCE_SLICES, version, obj, copy=False)
        assert shared == from_internal(RESOURCE_SLICES, version, obj)
        assert obj == before
    v1beta1 = from_internal(RESOURCE_SLICES, "v1beta1", obj, copy=False)
    assert v1beta1["spec"]["devices"] == [{"name": "a", "basic": {"attributes": {"x": {"int": 1}}}}]
    assert v1beta1["spec"]["devices"][0]["basic"]["attributes"] is obj["spec"]["devices"][0][
        "attributes"]                                        # shared, not copied
    copied = from_internal(RESOURCE_SLICES, "v1beta1", obj)
    assert copied["spec"]["devices"][0]["basic"]["attributes"] is not obj["spec"]["devices"][0][
        "attributes"]


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
