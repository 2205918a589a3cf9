"""The Node owner of the published slices follows the Node: read again when our
slices were deleted by someone else or the Node is absent; re-creation after foreign
deletions backs off. Against the embedded API server (real HTTP), with a garbage collector
that deletes slices whose Node owner (by UID) is gone, as kube-controller-manager does."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from slices_helpers import DRIVER, NODE, wait_for

from drakit.discovery.model import Device, Pool
from drakit.plugin.slices.owner import NodeOwner, RecreateBackoff
from drakit.plugin.slices.publisher import SlicePublisher
from drakit.plugin.testing.apiserver import EmbeddedAPIServer

MakePublisher = Callable[..., SlicePublisher]


def pool(n: int) -> Pool:
    return Pool(name=NODE, devices=[Device(name=f"dev-{i}") for i in range(n)])


def slices(server: EmbeddedAPIServer) -> list[dict[str, Any]]:
    return server.list_objects("resourceslices", field_selector=f"spec.driver={DRIVER}")


def owner_uids(server: EmbeddedAPIServer) -> list[str | None]:
    out: list[str | None] = []
    for s in slices(server):
        refs = [r["uid"] for r in s["metadata"].get("ownerReferences") or []
                if r.get("kind") == "Node"]
        out.append(refs[0] if refs else None)
    return out


def node_uid(server: EmbeddedAPIServer) -> str:
    node = server.get_object("nodes", NODE)
    assert node is not None
    return str(node["metadata"]["uid"])


def reregister_node(server: EmbeddedAPIServer) -> str:
    """Delete the Node and create it again (what a kubelet restart after a Node deletion
    does); returns the new UID."""
    old = node_uid(server)
    assert server.delete_object("nodes", NODE)
    server.create_node(NODE)
    new = node_uid(server)
    assert new != old
    return new


class GarbageCollector:
    """Deletes every ResourceSlice whose Node owner reference names a UID that no Node has
    (the garbage collector's rule for a dependent whose owner is gone), polling every
    10 ms; counts what it deleted."""

    def __init__(self, server: EmbeddedAPIServer) -> None:
        self.server = server
        self.deleted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> GarbageCollector:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            uids = {n["metadata"]["uid"] for n in self.server.list_objects("nodes")}
            for s in slices(self.server):
                refs = s["metadata"].get("ownerReferences") or []
                gone = any(r.get("kind") == "Node" and r["uid"] not in uids for r in refs)
                if gone and self.server.delete_object("resourceslices", s["metadata"]["name"]):
                    self.deleted += 1


@pytest.fixture
def gc(server: EmbeddedAPIServer) -> Iterator[GarbageCollector]:
    with GarbageCollector(server) as collector:
        yield collector


def test_sync_after_foreign_deletion_reads_the_new_node_uid(
        server: EmbeddedAPIServer, make_publisher: MakePublisher) -> None:
    pub = make_publisher(server)
    pub.publish([pool(2)])
    new = reregister_node(server)
    for s in slices(server):                       # as the garbage collector does
        server.delete_object("resourceslices", s["metadata"]["name"])
    report = pub.sync()
    assert report.creates == 1
    assert owner_uids(server) == [new]


def test_node_gone_slices_are_written_without_owner_then_adopted(
        server: EmbeddedAPIServer, make_publisher: MakePublisher) -> None:
    pub = make_publisher(server)
    pub.publish([pool(1)])
    assert server.delete_object("nodes", NODE)
    for s in slices(server):
        server.delete_object("resourceslices", s["metadata"]["name"])
    pub.sync()
    assert owner_uids(server) == [None]            # never the gone UID
    server.create_node(NODE)
    assert pub.sync().updates == 1                 # Node absent last time: read again
    assert owner_uids(server) == [node_uid(server)]


def test_background_follows_reregistered_node_and_stops_churning(
        server: EmbeddedAPIServer, make_publisher: MakePublisher, gc: GarbageCollector) -> None:
    pub = make_publisher(server, resync_period=3600, watch_delay=0.05)
    pub.publish([pool(3)])
    pub.start()
    wait_for(lambda: pub.watching, what="watch to open")
    new = reregister_node(server)
    # the Node watch moves the owner reference (an update), or the collector was quicker
    # and the publisher re-creates the slice: either way once
    wait_for(lambda: owner_uids(server) == [new], what="slices owned by the new Node")
    time.sleep(0.3)  # the server shows a write before the publisher has counted it
    writes = pub.stats.slice_writes
    assert gc.deleted <= 1 and writes <= 3, (gc.deleted, writes)
    time.sleep(1.0)                                # a churning publisher writes ~20 times
    assert pub.stats.slice_writes == writes
    assert owner_uids(server) == [new]


def test_recreation_after_repeated_foreign_deletion_backs_off(
        server: EmbeddedAPIServer, make_publisher: MakePublisher) -> None:
    """Someone deletes the pool's slice as soon as it appears: the publisher writes it again
    after 0.05, 0.1, 0.2, 0.4, 0.8 s, … (capped at the resync period), not every 0.05 s."""
    pub = make_publisher(server, resync_period=1.0, watch_delay=0.05)
    pub.publish([pool(1)])
    pub.start()
    wait_for(lambda: pub.watching, what="watch to open")
    deleted = 0
    until = time.monotonic() + 1.6
    while time.monotonic() < until:
        for s in slices(server):
            if server.delete_object("resourceslices", s["metadata"]["name"]):
                deleted += 1
        time.sleep(0.01)
    pub.stop()
    # without back-off: one re-creation per 0.05 s watch delay (~30 in 1.6 s)
    assert 2 <= deleted <= 10, deleted


def test_recreate_backoff_rounds() -> None:
    now = [100.0]
    b = RecreateBackoff(1.0, 8.0, 20.0, clock=lambda: now[0])
    assert b.delay() == 1.0
    now[0] += 0.5
    assert b.delay() == 0.5                        # same sweep: same resync
    for expected in (2.0, 4.0, 8.0, 8.0):
        now[0] += 1.5 if expected == 2.0 else 9.0
        assert b.delay() == expected
    now[0] += 21.0                                 # quiet period: start again
    assert b.delay() == 1.0 and b.rounds == 1


def test_node_owner_reads_again_only_when_invalidated() -> None:
    uids = iter(["uid-1", "uid-2"])
    owner = NodeOwner(NODE, lambda: next(uids))
    ref = owner.reference()
    assert ref is not None and ref["uid"] == "uid-1" and ref["controller"] is True
    assert owner.reference() == ref and owner.lookups == 1
    owner.invalidate("test")
    new = owner.reference()
    assert new is not None and new["uid"] == "uid-2" and owner.lookups == 2
