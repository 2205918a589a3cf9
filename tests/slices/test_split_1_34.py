"""Kubernetes ≤ 1.34 counter set layout (KEP-4815 alpha): a device consumes only from the
counter sets of its own ResourceSlice, so drakit puts each counter set beside the devices
that consume it there, and keeps 1.35+'s separate counter set slices everywhere else."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from slices_helpers import DRIVER, NODE

from drakit.discovery.model import CounterSet, Device, Pool
from drakit.plugin.api.resourceapi import ResourceAPI
from drakit.plugin.slices.publisher import SlicePublisher
from drakit.plugin.slices.rules import (
    DRAKIT_DEFAULT,
    MAX_SHARED_COUNTERS_1_34,
    for_server,
    server_minor,
)
from drakit.plugin.slices.split import split_pool
from drakit.plugin.slices.validate import ValidatedPool, validate_pool
from drakit.plugin.testing.apiserver import EmbeddedAPIServer
from drakit.plugin.testing.apiserver.validation import validate_resource_slice


def _partitioned(cards: int, parts: int, *, counters: int = 2,
                 plain: int = 0) -> ValidatedPool:
    names = [f"c{k}" for k in range(counters)]
    sets = [CounterSet(name=f"card-{g}", counters={n: "80Gi" for n in names})
            for g in range(cards)]
    devices = [Device(name=f"card-{g}-part-{p}", consumes_counters=[
        {"counter_set": f"card-{g}", "counters": {n: "10Gi" for n in names}}])
        for g in range(cards) for p in range(parts)]
    devices += [Device(name=f"plain-{i}") for i in range(plain)]
    res = validate_pool(Pool(name="pool", devices=devices, counter_sets=sets), DRIVER, NODE)
    assert res.issues == [] and res.pool is not None
    return res.pool


def _check_1_34(specs: list[dict[str, Any]]) -> None:
    """Every spec is valid under the ≤ 1.34 rule of the embedded server's validation."""
    for spec in specs:
        assert validate_resource_slice({"spec": spec}, None,
                                       counter_sets_beside_devices=True) == []


@pytest.mark.parametrize(("git_version", "minor", "beside"), [
    ("v1.32.13", 32, True), ("v1.33.13", 33, True), ("v1.34.4", 34, True),
    ("v1.35.4", 35, False), ("v1.38.0-beta.0", 38, False), ("unknown", None, False),
    ("v1.37.0-drakit-embedded", 37, False)])
def test_rules_follow_the_release(git_version: str, minor: int | None, beside: bool) -> None:
    assert server_minor(git_version) == minor
    got = for_server(DRAKIT_DEFAULT, git_version)
    assert got.counter_sets_with_devices is beside
    assert got.max_taints == (4 if beside else 16)
    assert got.reject_driver_qualified_names  # drakit's own rules stay


def test_each_counter_set_beside_its_devices() -> None:
    specs = split_pool(_partitioned(3, 4, plain=2), DRIVER, NODE, with_devices=True)
    _check_1_34(specs)
    # 3 sets of 2 counters = 6 shared counters: one slice for all partitions, one plain slice
    assert [(len(s.get("sharedCounters") or []), len(s.get("devices") or []))
            for s in specs] == [(3, 12), (0, 2)]
    assert {s["pool"]["resourceSliceCount"] for s in specs} == {2}
    # the 1.35+ layout of the same pool is refused by the 1.34 rule and vice versa
    later = split_pool(_partitioned(3, 4, plain=2), DRIVER, NODE)
    assert any(validate_resource_slice({"spec": s}, None, counter_sets_beside_devices=True)
               for s in later)
    assert any(validate_resource_slice({"spec": s}, None) for s in specs)


def test_groups_packed_within_the_1_34_limits() -> None:
    # 20 cards, 4 counters each = 80 shared counters: at most 32 per slice, whole cards only
    specs = split_pool(_partitioned(20, 2, counters=4), DRIVER, NODE, with_devices=True)
    _check_1_34(specs)
    shared = [sum(len(c["counters"]) for c in s["sharedCounters"]) for s in specs]
    assert max(shared) <= MAX_SHARED_COUNTERS_1_34 and sum(shared) == 80
    for spec in specs:
        own = {c["name"] for c in spec["sharedCounters"]}
        assert {u["counterSet"] for d in spec["devices"] for u in d["consumesCounters"]} == own
    assert sorted(d["name"] for s in specs for d in s["devices"]) == sorted(
        f"card-{g}-part-{p}" for g in range(20) for p in range(2))


def test_a_device_consuming_two_sets_joins_them() -> None:
    sets = [CounterSet(name=f"s{i}", counters={"m": "8"}) for i in range(40)]
    devices = [Device(name=f"d{i}", consumes_counters=[
        {"counter_set": f"s{i}", "counters": {"m": "1"}}]) for i in range(40)]
    devices.append(Device(name="bridge", consumes_counters=[
        {"counter_set": "s0", "counters": {"m": "1"}},
        {"counter_set": "s39", "counters": {"m": "1"}}]))
    res = validate_pool(Pool(name="p", devices=devices, counter_sets=sets), DRIVER, NODE)
    assert res.pool is not None
    specs = split_pool(res.pool, DRIVER, NODE, with_devices=True)
    _check_1_34(specs)
    home = next(s for s in specs if any(d["name"] == "bridge" for d in s["devices"]))
    assert {"s0", "s39"} <= {c["name"] for c in home["sharedCounters"]}


def test_the_1_34_rule_refuses_a_set_from_another_slice() -> None:
    spec = split_pool(_partitioned(1, 2), DRIVER, NODE)[1]  # devices only (1.35+ layout)
    causes = validate_resource_slice({"spec": spec}, None, counter_sets_beside_devices=True)
    assert [(c.field, c.message) for c in causes] == [
        (f"spec.devices[{i}].consumesCounters[0].counterSet",
         'Invalid value: "card-0": must reference a counterSet defined in the ResourceSlice '
         "sharedCounters") for i in range(2)]


@pytest.mark.parametrize(("minor", "layout"), [(34, [(1, 2)]), (37, [(1, 0), (0, 2)])])
def test_publisher_splits_by_the_servers_release(
        embedded_apiserver_factory: Callable[..., EmbeddedAPIServer],
        make_publisher: Callable[..., SlicePublisher], minor: int,
        layout: list[tuple[int, int]]) -> None:
    server = embedded_apiserver_factory(("v1",), kubernetes_minor=minor)
    server.create_node(NODE)
    pub = make_publisher(server)
    pool = Pool(name=NODE, counter_sets=[CounterSet(name="card-0", counters={"m": "8"})],
                devices=[Device(name=f"p{i}", consumes_counters=[
                    {"counter_set": "card-0", "counters": {"m": "4"}}]) for i in range(2)])
    pub.publish([pool])
    got = sorted(((len(s["spec"].get("sharedCounters") or []),
                   len(s["spec"].get("devices") or []))
                  for s in server.list_objects("resourceslices")), reverse=True)
    assert got == layout
    assert pub.sync().writes == 0


def test_publisher_without_counter_sets_does_not_ask_the_version(
        embedded_apiserver_factory: Callable[..., EmbeddedAPIServer],
        make_publisher: Callable[..., SlicePublisher]) -> None:
    server = embedded_apiserver_factory(("v1",), kubernetes_minor=34)
    server.create_node(NODE)
    pub = make_publisher(server)
    pub.publish([Pool(name=NODE, devices=[Device(name="d0")])])
    assert not [r for r in server.requests() if r.path == "/version"]


def test_publisher_splits_again_once_the_release_is_known(
        embedded_apiserver_factory: Callable[..., EmbeddedAPIServer],
        make_publisher: Callable[..., SlicePublisher]) -> None:
    server = embedded_apiserver_factory(("v1",), kubernetes_minor=33)
    server.create_node(NODE)
    pub = make_publisher(server)
    api: ResourceAPI = pub.api
    real = api.server_version
    answers = iter(["unknown"])
    api.server_version = lambda: next(answers, None) or real()  # type: ignore[method-assign]
    pool = Pool(name=NODE, counter_sets=[CounterSet(name="card-0", counters={"m": "8"})],
                devices=[Device(name="p0", consumes_counters=[
                    {"counter_set": "card-0", "counters": {"m": "4"}}])])
    pub.publish([pool], wait=False)  # split while the release could not be read
    pub.sync()
    [only] = server.list_objects("resourceslices")
    assert only["spec"]["sharedCounters"][0]["name"] == "card-0"
    assert [d["name"] for d in only["spec"]["devices"]] == ["p0"]
