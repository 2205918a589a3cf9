"""SlicePublisher against the embedded API server (real HTTP, the unchanged kubernetes
client): writes only differences, generation rules, restoration, old API versions, errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from slices_helpers import DRIVER, NODE, SleepRecorder, wait_for

from drakit.discovery.model import CounterSet, Device, DeviceTaint, Pool
from drakit.plugin.api.resourceapi import ResourceAPI
from drakit.plugin.events import RecordedEvents
from drakit.plugin.ops.cleanup import delete_slices, driver_slices
from drakit.plugin.slices.publisher import (
    PUBLISHER_NODE_LABEL,
    PublishError,
    SlicePublisher,
)
from drakit.plugin.slices.validate import SliceValidationError, ValidationIssue
from drakit.plugin.testing.apiserver import EmbeddedAPIServer, FaultPlan

MakePublisher = Callable[..., SlicePublisher]


def pool(n: int, name: str = NODE, **kw: Any) -> Pool:
    return Pool(name=name, devices=[Device(name=f"dev-{i}", attributes={"index": i},
                                           capacity={"memory": "16Gi"}) for i in range(n)],
                **kw)


def slices(server: EmbeddedAPIServer, pool_name: str | None = None) -> list[dict[str, Any]]:
    items = server.list_objects("resourceslices", field_selector=f"spec.driver={DRIVER}")
    if pool_name is not None:
        items = [s for s in items if s["spec"]["pool"]["name"] == pool_name]
    return items


def slice_writes(server: EmbeddedAPIServer) -> int:
    return server.write_counts().get("resourceslices", 0)


def generations(items: list[dict[str, Any]]) -> set[int]:
    return {s["spec"]["pool"]["generation"] for s in items}


@pytest.mark.both_apiservers
def test_publish_creates_owned_slices(server: EmbeddedAPIServer,
                                      make_publisher: MakePublisher) -> None:
    pub = make_publisher(server)
    report = pub.publish([pool(3)])
    assert report is not None and report.creates == 1 and report.writes == 1
    [s] = slices(server)
    node_uid = server.get_object("nodes", NODE)["metadata"]["uid"]  # type: ignore[index]
    assert s["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node_uid, "controller": True}]
    assert s["metadata"]["labels"][PUBLISHER_NODE_LABEL] == NODE
    assert s["metadata"]["name"].startswith("node-a-gpu-example-com-")
    assert s["spec"]["nodeName"] == NODE and s["spec"]["driver"] == DRIVER
    assert s["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    assert [d["name"] for d in s["spec"]["devices"]] == ["dev-0", "dev-1", "dev-2"]
    stats = pub.stats
    assert stats.published_once and stats.devices_published == 3
    assert stats.slices_published == 1 and stats.slice_writes == 1
    assert stats.last_publish_time is not None and stats.generations == {NODE: 1}


@pytest.mark.both_apiservers
def test_unchanged_resync_makes_no_writes(server: EmbeddedAPIServer,
                                          make_publisher: MakePublisher) -> None:
    pub = make_publisher(server)
    pub.publish([pool(300), pool(5, name="second")])
    assert slice_writes(server) == 4
    server.clear_requests()
    assert pub.sync().writes == 0
    assert pub.publish([pool(300), pool(5, name="second")]).writes == 0  # type: ignore[union-attr]
    assert slice_writes(server) == 0
    assert {r.verb for r in server.requests(resource="resourceslices")} == {"list"}


def test_resync_keys_only_slices_whose_resource_version_changed(
        server: EmbeddedAPIServer, make_publisher: MakePublisher,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A resync with nothing changed computes no content key of a listed slice (they are
    reused by uid and resourceVersion); a slice edited by someone is keyed and fixed."""
    import drakit.plugin.slices.compare as compare_module

    pub = make_publisher(server)
    pub.publish([pool(300)])
    pub.sync()  # the slices as listed after their creation
    keyed: list[int] = []
    real = compare_module.content_key

    def counting(spec: dict[str, Any]) -> str:
        keyed.append(len(spec.get("devices") or []))
        return real(spec)

    monkeypatch.setattr(compare_module, "content_key", counting)
    assert pub.sync().writes == 0
    assert keyed == []
    first = sorted(slices(server), key=lambda o: o["metadata"]["name"])[0]
    edited = {**first, "spec": {**first["spec"], "devices": first["spec"]["devices"][:1]}}
    server.update_object("resourceslices", edited)
    assert pub.sync().writes > 0
    assert keyed and keyed[0] == 1  # only the edited slice was keyed again
    assert sorted(len(s["spec"]["devices"]) for s in slices(server)) == [44, 128, 128]


@pytest.mark.both_apiservers
def test_content_change_bumps_generation_of_every_slice(server: EmbeddedAPIServer,
                                                        make_publisher: MakePublisher) -> None:
    pub = make_publisher(server)
    pub.publish([pool(200)])
    assert generations(slices(server)) == {1}
    changed = pool(200)
    changed.devices[150].attributes["index"] = changed.devices[150].attributes["index"].of(999)
    report = pub.publish([changed])
    assert report is not None and report.updates == 2 and report.creates == 0
    items = slices(server)
    assert len(items) == 2 and generations(items) == {2}
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in items} == {2}


@pytest.mark.both_apiservers
def test_restart_continues_generation(server: EmbeddedAPIServer,
                                      make_publisher: MakePublisher) -> None:
    first = make_publisher(server)
    first.publish([pool(2)])
    first.publish([pool(3)])
    assert generations(slices(server)) == {2}
    server.clear_requests()
    second = make_publisher(server)          # a restarted plugin: no memory
    assert second.publish([pool(3)]).writes == 0  # type: ignore[union-attr]
    second.publish([pool(4)])
    assert generations(slices(server)) == {3}


@pytest.mark.both_apiservers
def test_stale_pools_and_surplus_slices_deleted(server: EmbeddedAPIServer,
                                                make_publisher: MakePublisher) -> None:
    pub = make_publisher(server)
    pub.publish([pool(200), pool(1, name="gone")])
    assert len(slices(server, NODE)) == 2 and len(slices(server, "gone")) == 1
    report = pub.publish([pool(10)])
    assert report is not None and report.deletes == 2 and report.updates == 1
    [s] = slices(server)
    assert s["spec"]["pool"] == {"name": NODE, "generation": 2, "resourceSliceCount": 1}
    assert pub.stats.generations == {NODE: 2}


@pytest.mark.both_apiservers
def test_foreign_slice_on_our_node_is_removed(server: EmbeddedAPIServer,
                                              make_publisher: MakePublisher) -> None:
    pub = make_publisher(server)
    pub.publish([pool(1)])
    server.create_object("resourceslices", {
        "metadata": {"name": "leftover"},
        "spec": {"driver": DRIVER, "nodeName": NODE, "devices": [],
                 "pool": {"name": "old-pool", "generation": 7, "resourceSliceCount": 1}}})
    report = pub.sync()
    assert report.deletes == 1 and server.get_object("resourceslices", "leftover") is None


def test_invalid_device_left_out_rest_published(server: EmbeddedAPIServer,
                                                make_publisher: MakePublisher) -> None:
    events = RecordedEvents()
    pub = make_publisher(server, events=events)
    inventory = pool(3)
    inventory.devices.append(Device(name="Not_A_Label"))
    pub.publish([inventory])
    [s] = slices(server)
    assert [d["name"] for d in s["spec"]["devices"]] == ["dev-0", "dev-1", "dev-2"]
    seen: list[ValidationIssue] = [a[0] for a in events.named("slice_validation_issue")]
    assert [i.field for i in seen] == ["spec.devices[3].name"]
    assert pub.stats.validation_drops == 1
    assert events.named("slice_write") == [("create", NODE)]
    pub.publish([inventory])
    assert len(events.named("slice_validation_issue")) == 1  # the same issue reported once
    assert events.named("publish_error") == []


def test_strict_mode_refuses_everything(server: EmbeddedAPIServer,
                                        make_publisher: MakePublisher) -> None:
    pub = make_publisher(server, strict=True)
    inventory = pool(2)
    inventory.devices.append(Device(name="Bad", attributes={"x": "y" * 65}))
    with pytest.raises(SliceValidationError) as err:
        pub.publish([inventory])
    assert {i.field for i in err.value.issues} == {"spec.devices[2].name",
                                                    "spec.devices[2].attributes[x].string"}
    assert slices(server) == [] and slice_writes(server) == 0


@pytest.mark.both_apiservers
def test_partitionable_pool(server: EmbeddedAPIServer, make_publisher: MakePublisher) -> None:
    sets = [CounterSet(name=f"gpu-{g}", counters={"memory": "80Gi", "compute": "98"})
            for g in range(9)]
    devices = [Device(name=f"gpu-{g}-mig-{p}", consumes_counters=[
        {"counter_set": f"gpu-{g}", "counters": {"memory": "10Gi", "compute": "14"}}])
        for g in range(9) for p in range(7)]
    pub = make_publisher(server)
    pub.publish([Pool(name=NODE, devices=devices, counter_sets=sets)])
    items = slices(server)
    counter_slices = [s for s in items if "sharedCounters" in s["spec"]]
    device_slices = [s for s in items if s["spec"].get("devices")]
    assert sorted(len(s["spec"]["sharedCounters"]) for s in counter_slices) == [1, 8]
    assert sorted(len(s["spec"]["devices"]) for s in device_slices) == [63]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in items} == {3}
    assert pub.sync().writes == 0


@pytest.mark.both_apiservers
def test_not_node_local_pool(server: EmbeddedAPIServer, make_publisher: MakePublisher) -> None:
    pub = make_publisher(server)
    pub.publish([pool(1), pool(2, name="shared", all_nodes=True)])
    [shared] = slices(server, "shared")
    assert shared["spec"].get("allNodes") is True and "nodeName" not in shared["spec"]
    assert shared["metadata"]["labels"][PUBLISHER_NODE_LABEL] == NODE
    assert pub.sync().writes == 0
    report = pub.publish([pool(1)])
    assert report is not None and report.deletes == 1 and slices(server, "shared") == []


def test_missing_node_then_owner_added_without_generation_bump(
        embedded_apiserver_factory: Callable[..., EmbeddedAPIServer],
        make_publisher: MakePublisher) -> None:
    server = embedded_apiserver_factory(("v1",))
    pub = make_publisher(server)
    pub.publish([pool(1)])
    [s] = slices(server)
    assert "ownerReferences" not in s["metadata"]
    server.create_node(NODE)
    report = pub.sync()
    assert report.updates == 1
    [s] = slices(server)
    assert s["metadata"]["ownerReferences"][0]["kind"] == "Node"
    assert s["spec"]["pool"]["generation"] == 1


@pytest.mark.parametrize("versions", [("v1beta1",), ("v1beta2", "v1beta1")])
def test_older_api_versions(embedded_apiserver_factory: Callable[..., EmbeddedAPIServer],
                            make_publisher: MakePublisher, versions: tuple[str, ...]) -> None:
    server = embedded_apiserver_factory(versions)
    server.create_node(NODE)
    pub = make_publisher(server)
    inventory = pool(2)
    inventory.devices[0].taints = [DeviceTaint(key="example.com/unhealthy", effect="NoSchedule")]
    pub.publish([inventory])
    assert {r.api_version for r in server.requests(resource="resourceslices")} == {versions[0]}
    [s] = slices(server)                     # stored in the v1 shape
    assert s["spec"]["devices"][1] == {"name": "dev-1", "attributes": {"index": {"int": 1}},
                                       "capacity": {"memory": {"value": "16Gi"}}}
    assert s["spec"]["devices"][0]["taints"][0]["key"] == "example.com/unhealthy"
    server.clear_requests()
    assert pub.sync().writes == 0
    pub.publish([pool(3)])
    assert generations(slices(server)) == {2}


def test_conflict_once_then_success(server: EmbeddedAPIServer,
                                    make_publisher: MakePublisher) -> None:
    pub = make_publisher(server)
    pub.publish([pool(1)])
    server.set_faults(FaultPlan(conflict_rate=1.0, max_faults=1,
                                resources=frozenset({"resourceslices"})))
    report = pub.publish([pool(2)])
    assert report is not None
    assert server.faults_injected == 1
    wait_for(lambda: [r.status_code for r in server.requests(verb="update")] == [409, 200],
             what="request log")
    [s] = slices(server)
    assert len(s["spec"]["devices"]) == 2 and s["spec"]["pool"]["generation"] == 2


def test_retry_after_is_honoured(server: EmbeddedAPIServer, make_publisher: MakePublisher,
                                 sleeps: SleepRecorder) -> None:
    pub = make_publisher(server)
    server.set_faults(FaultPlan(throttle_rate=1.0, retry_after_seconds=3, max_faults=1,
                                verbs=frozenset({"create"})))
    pub.publish([pool(1)])
    assert sleeps.calls == [3.0]
    wait_for(lambda: [r.status_code for r in server.requests(verb="create")] == [429, 201],
             what="request log")


def test_retries_are_bounded(server: EmbeddedAPIServer, make_publisher: MakePublisher,
                             sleeps: SleepRecorder) -> None:
    pub = make_publisher(server)
    server.set_faults(FaultPlan(error_rate=1.0, verbs=frozenset({"create"})))
    with pytest.raises(PublishError):
        pub.publish([pool(1)])
    wait_for(lambda: len(server.requests(verb="create")) == 4, what="request log")
    assert len(server.requests(verb="create")) == 4          # Backoff.attempts in conftest
    assert len(sleeps.calls) == 3
    assert all(0 < s <= 0.06 for s in sleeps.calls)
    stats = pub.stats
    assert stats.publish_errors == 1 and not stats.published_once and stats.last_error
    server.set_faults(None)
    assert pub.sync().creates == 1 and pub.stats.published_once


@pytest.mark.both_apiservers
def test_background_watch_restores_deleted_and_edited_slices(
        server: EmbeddedAPIServer, make_publisher: MakePublisher) -> None:
    pub = make_publisher(server, resync_period=3600, watch_delay=0.05)
    pub.publish([pool(3)])
    pub.start()
    wait_for(lambda: pub.watching, what="watch to open")
    [s] = slices(server)
    server.delete_object("resourceslices", s["metadata"]["name"])   # as the kubelet does
    restored = wait_for(lambda: slices(server), what="slice restored")
    assert restored[0]["spec"]["pool"]["generation"] == 2
    edited = dict(restored[0])
    edited["spec"] = {**edited["spec"], "devices": edited["spec"]["devices"][:1]}
    server.update_object("resourceslices", edited)
    wait_for(lambda: len(slices(server)[0]["spec"]["devices"]) == 3, what="edit undone")
    assert generations(slices(server)) == {3}
    # the server shows a write before the publisher has counted it: wait for the sync's end
    wait_for(lambda: pub.stats.generations == {NODE: 3}, what="the restoring sync to end")
    writes = pub.stats.slice_writes
    pub.stop()
    assert pub.stats.slice_writes == writes


def test_background_periodic_resync_and_trigger(server: EmbeddedAPIServer,
                                                make_publisher: MakePublisher) -> None:
    pub = make_publisher(server, resync_period=0.1, watch_delay=3600)
    pub.publish([pool(1)], wait=False)       # stored only; the loop publishes it
    pub.start()
    wait_for(lambda: pub.stats.published_once, what="first background publish")
    for s in slices(server):
        server.delete_object("resourceslices", s["metadata"]["name"])
    wait_for(lambda: slices(server), what="periodic resync restores")
    pub.stop()
    quiet = make_publisher(server, resync_period=3600, watch_delay=3600)
    quiet.publish([pool(1)])
    quiet.start()
    quiet.publish([pool(4)], wait=False)
    wait_for(lambda: len(slices(server)[0]["spec"]["devices"]) == 4, what="triggered publish")


@pytest.mark.both_apiservers
def test_cleanup_removes_this_nodes_slices_only(server: EmbeddedAPIServer,
                                                make_publisher: MakePublisher) -> None:
    make_publisher(server).publish([pool(200), pool(1, name="shared", all_nodes=True)])
    other = make_publisher(server, node_name="node-b")
    other.publish([pool(1, name="node-b")])
    assert delete_slices(other.api, driver_slices(other.api, DRIVER, NODE)) == 3
    assert [s["spec"]["pool"]["name"] for s in slices(server)] == ["node-b"]
    assert delete_slices(other.api, driver_slices(other.api, DRIVER, "node-b")) == 1
    assert slices(server) == []


class _GateOffAPI(ResourceAPI):
    """Behaves like a server with DRADeviceTaints off: taints vanish on write."""

    @staticmethod
    def _strip(obj: dict[str, Any]) -> dict[str, Any]:
        spec = dict(obj["spec"])
        spec["devices"] = [{k: v for k, v in d.items() if k != "taints"}
                           for d in spec.get("devices") or []]
        return {**obj, "spec": spec}

    def create_slice(self, obj: dict[str, Any]) -> dict[str, Any]:
        return super().create_slice(self._strip(obj))

    def update_slice(self, obj: dict[str, Any]) -> dict[str, Any]:
        return super().update_slice(self._strip(obj))


def test_fields_dropped_by_the_server_do_not_cause_rewrites(
        server: EmbeddedAPIServer, caplog: pytest.LogCaptureFixture) -> None:
    pub = SlicePublisher(_GateOffAPI(server.api_client()), DRIVER, NODE)
    inventory = pool(2)
    inventory.devices[0].taints = [DeviceTaint(key="example.com/unhealthy", effect="NoSchedule")]
    with caplog.at_level("WARNING"):
        pub.publish([inventory])
    assert "devices[].taints" in caplog.text
    assert "taints" not in slices(server)[0]["spec"]["devices"][0]
    assert pub.sync().writes == 0
    assert pub.publish([inventory]).writes == 0  # type: ignore[union-attr]


@pytest.mark.both_apiservers
def test_per_device_node_selection_pool(server: EmbeddedAPIServer,
                                        make_publisher: MakePublisher) -> None:
    pub = make_publisher(server)
    devices = [Device(name="a", node_name=NODE), Device(name="b", all_nodes=True),
               Device(name="c")]
    pub.publish([Pool(name="fabric", per_device_node_selection=True, devices=devices)])
    [s] = slices(server, "fabric")
    assert s["spec"]["perDeviceNodeSelection"] is True
    assert [d["name"] for d in s["spec"]["devices"]] == ["a", "b"]
    assert [i.field for i in pub.issues] == ["spec.devices[2]"]
    assert pub.sync().writes == 0


@pytest.mark.both_apiservers
def test_pool_turning_non_node_local_replaces_its_slices(
        server: EmbeddedAPIServer, make_publisher: MakePublisher) -> None:
    pub = make_publisher(server)
    pub.publish([pool(2, name="p")])
    [before] = slices(server, "p")
    report = pub.publish([pool(2, name="p", all_nodes=True)])   # nodeName is immutable
    assert report is not None and (report.deletes, report.creates) == (1, 1)
    [after] = slices(server, "p")
    assert after["spec"].get("allNodes") is True and "nodeName" not in after["spec"]
    assert after["metadata"]["name"] != before["metadata"]["name"]
    assert after["spec"]["pool"]["generation"] == 2
