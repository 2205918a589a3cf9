"""The slices follow a re-registered Node: the Node deleted and created
again under the same name (a new metadata.uid, as the kubelet registers it) moves the
ResourceSlices' owner reference to the new UID within 5 s, through the watch on the node's
own Node object; between such events the watch costs no request per resync."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from slices_helpers import DRIVER, NODE, wait_for

from drakit.discovery.model import Device, Pool
from drakit.plugin.slices.publisher import SlicePublisher
from drakit.plugin.testing.apiserver import EmbeddedAPIServer

MakePublisher = Callable[..., SlicePublisher]


def pool(n: int) -> Pool:
    return Pool(name=NODE, devices=[Device(name=f"dev-{i}") for i in range(n)])


def owners(server: EmbeddedAPIServer) -> set[str | None]:
    out: set[str | None] = set()
    for s in server.list_objects("resourceslices", field_selector=f"spec.driver={DRIVER}"):
        if s["spec"].get("nodeName") != NODE:
            continue
        refs = [r["uid"] for r in s["metadata"].get("ownerReferences") or []
                if r.get("kind") == "Node" and r.get("controller")]
        out.add(refs[0] if refs else None)
    return out


def node_requests(server: Any) -> list[Any]:
    """The requests on nodes not made by this test's own writes."""
    return [r for r in server.requests(resource="nodes") if r.verb in ("get", "list", "watch")]


@pytest.mark.both_apiservers
def test_slices_follow_a_reregistered_node_within_5s(server: EmbeddedAPIServer,
                                                     make_publisher: MakePublisher) -> None:
    pub = make_publisher(server, resync_period=0.2, watch_delay=0.05)
    pub.publish([pool(3)], wait=False)
    pub.start()
    old = server.get_object("nodes", NODE)["metadata"]["uid"]  # type: ignore[index]
    wait_for(lambda: pub.stats.published_once and pub.watching and pub.node_watching
             and owners(server) == {old}, what="slices owned by the Node, both watches open")

    assert server.delete_object("nodes", NODE)
    new = server.create_node(NODE)["metadata"]["uid"]
    assert new != old
    t0 = time.monotonic()
    wait_for(lambda: owners(server) == {new}, 5.0, "the slices owned by the new Node")
    took = time.monotonic() - t0
    print(f"slices owned by the re-registered Node after {took:.2f}s")

    # no request per resync: five verifications later, no GET/LIST/WATCH of the Node and no
    # LIST of slices by the publisher
    server.clear_requests()
    lists = pub.stats.lists
    started = time.time()
    seen: set[float] = set()

    def five_syncs() -> bool:
        t = pub.stats.last_publish_time
        if t is not None and t > started:
            seen.add(t)
        return len(seen) >= 5

    wait_for(five_syncs, what="five verifications")
    assert node_requests(server) == []
    assert pub.stats.lists == lists
    assert owners(server) == {new}
