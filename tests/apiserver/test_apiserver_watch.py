"""Watch through kubernetes.watch.Watch over a real socket; every stream is bounded by
timeoutSeconds (and a thread join timeout)."""

from __future__ import annotations

import json
import threading
import urllib.request
from typing import Any

from apiserver_helpers import DRIVER, make_slice
from kubernetes import client, watch

from drakit.plugin.testing.apiserver import EmbeddedAPIServer


def collect(func: Any, stop_after: int, timeout: int = 5, return_type: Any = None,
            **kwargs: Any) -> list[tuple[str, str, str]]:
    """(type, name, resourceVersion) of events until ``stop_after`` arrived or the server's
    timeoutSeconds ended the stream."""
    w = watch.Watch(return_type=return_type)
    seen: list[tuple[str, str, str]] = []
    for event in w.stream(func, timeout_seconds=timeout, **kwargs):
        raw = event["raw_object"]
        seen.append((event["type"], raw["metadata"].get("name", ""),
                     raw["metadata"]["resourceVersion"]))
        if len(seen) >= stop_after:
            w.stop()
    return seen


def test_watch_from_resource_version_sees_writes(server: EmbeddedAPIServer,
                                                 resource_api: client.ResourceV1Api) -> None:
    start = resource_api.list_resource_slice().metadata.resource_version
    created = resource_api.create_resource_slice(make_slice("a"))
    body = created.to_dict(serialize=True)
    body["spec"]["pool"]["generation"] = 2
    resource_api.replace_resource_slice("a", body)
    resource_api.delete_resource_slice("a")

    events = collect(resource_api.list_resource_slice, 3, resource_version=start)
    assert [(t, n) for t, n, _ in events] == [("ADDED", "a"), ("MODIFIED", "a"),
                                              ("DELETED", "a")]
    rvs = [int(rv) for _, _, rv in events]
    assert rvs == sorted(rvs) and len(set(rvs)) == 3


def test_watch_without_resource_version_starts_with_existing(
    server: EmbeddedAPIServer, resource_api: client.ResourceV1Api
) -> None:
    resource_api.create_resource_slice(make_slice("a"))
    resource_api.create_resource_slice(make_slice("b", node="node-b"))
    events = collect(resource_api.list_resource_slice, 1, field_selector="spec.nodeName=node-a")
    assert [(t, n) for t, n, _ in events] == [("ADDED", "a")]


def test_watch_streams_live_events_and_typed_objects(
    server: EmbeddedAPIServer, resource_api: client.ResourceV1Api
) -> None:
    start = resource_api.list_resource_slice().metadata.resource_version
    received: list[Any] = []
    w = watch.Watch()

    def consume() -> None:
        for event in w.stream(resource_api.list_resource_slice, resource_version=start,
                              timeout_seconds=5):
            received.append(event)
            w.stop()

    thread = threading.Thread(target=consume)
    thread.start()
    server.create_object("resourceslices", make_slice("live"))
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert len(received) == 1
    assert received[0]["type"] == "ADDED"
    assert isinstance(received[0]["object"], client.V1ResourceSlice)
    assert received[0]["object"].spec.driver == DRIVER


def test_selector_transitions_become_added_and_deleted(
    server: EmbeddedAPIServer, resource_api: client.ResourceV1Api
) -> None:
    start = resource_api.list_resource_slice().metadata.resource_version
    body = make_slice("a")
    body["metadata"]["labels"] = {"state": "old"}
    created = resource_api.create_resource_slice(body).to_dict(serialize=True)
    created["metadata"]["labels"] = {"state": "new"}
    moved = resource_api.replace_resource_slice("a", created).to_dict(serialize=True)
    moved["metadata"]["labels"] = {"state": "old"}
    resource_api.replace_resource_slice("a", moved)

    events = collect(resource_api.list_resource_slice, 3, timeout=1, resource_version=start,
                     label_selector="state=new")
    assert [t for t, _, _ in events] == ["ADDED", "DELETED"]


def test_namespaced_claim_watch_and_timeout(server: EmbeddedAPIServer,
                                            resource_api: client.ResourceV1Api) -> None:
    start = server.resource_version
    server.create_claim("ns1", "one")
    server.create_claim("ns2", "two")
    # kubernetes 37's Watch cannot infer the v1 claim model's name; it must be given.
    claim_type = client.ResourceV1ResourceClaim
    events = collect(resource_api.list_namespaced_resource_claim, 5, timeout=1,
                     return_type=claim_type, namespace="ns1", resource_version=start)
    # The stream ended by timeoutSeconds with only the ns1 claim in it.
    assert [(t, n) for t, n, _ in events] == [("ADDED", "one")]
    everything = collect(resource_api.list_resource_claim_for_all_namespaces, 2,
                         return_type=claim_type, resource_version=start)
    assert sorted(n for _, n, _ in everything) == ["one", "two"]


def test_raw_watch_is_newline_delimited_json(server: EmbeddedAPIServer) -> None:
    server.create_object("resourceslices", make_slice("a"))
    url = server.url + "/apis/resource.k8s.io/v1/resourceslices?watch=true&timeoutSeconds=1"
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.headers["Transfer-Encoding"] == "chunked"
        lines = response.read().decode().splitlines()
    events = [json.loads(line) for line in lines]
    assert [e["type"] for e in events] == ["ADDED"]
    assert events[0]["object"]["kind"] == "ResourceSlice"
    assert events[0]["object"]["apiVersion"] == "resource.k8s.io/v1"


def test_watch_ends_when_server_stops(embedded_apiserver_factory: Any) -> None:
    server = embedded_apiserver_factory()
    api = server.api_client()
    first = threading.Event()
    done = threading.Event()

    def consume() -> None:
        w = watch.Watch()
        try:
            for _ in w.stream(client.ResourceV1Api(api).list_resource_slice,
                              timeout_seconds=30):
                first.set()
        finally:
            done.set()

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    server.create_object("resourceslices", make_slice("a"))
    assert first.wait(timeout=10)
    server.stop()
    thread.join(timeout=10)
    api.close()
    assert done.is_set()


def test_watch_list_ends_initial_events_with_bookmark(server: EmbeddedAPIServer) -> None:
    server.create_object("resourceslices", make_slice("a"))
    url = (server.url + "/apis/resource.k8s.io/v1/resourceslices?watch=1&timeoutSeconds=1"
           "&sendInitialEvents=true&allowWatchBookmarks=true"
           f"&resourceVersion={server.resource_version}&resourceVersionMatch=NotOlderThan")
    with urllib.request.urlopen(url, timeout=10) as response:
        events = [json.loads(line) for line in response.read().decode().splitlines()]
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    marker = events[1]["object"]["metadata"]
    assert marker["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert marker["resourceVersion"] == server.resource_version
