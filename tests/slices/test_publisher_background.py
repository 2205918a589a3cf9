"""The publisher's background against the embedded API server: one LIST, then the watch as
the source of truth (steady state sends no request), own writes kept in the local view,
an idle watch replaced and resumed, an expired one re-listed, and two agents started
together (in one process, and as two processes) not resyncing in the same second."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slices_helpers import DRIVER, NODE, wait_for

from drakit.discovery.model import Device, Pool
from drakit.plugin.api.retry import Backoff
from drakit.plugin.slices.publisher import SlicePublisher
from drakit.plugin.testing.apiserver import EmbeddedAPIServer, FaultPlan

MakePublisher = Callable[..., SlicePublisher]
REPO = Path(__file__).resolve().parents[2]


def pool(n: int, name: str = NODE) -> Pool:
    return Pool(name=name, devices=[Device(name=f"dev-{i}") for i in range(n)])


def slices(server: EmbeddedAPIServer) -> list[dict[str, Any]]:
    return server.list_objects("resourceslices", field_selector=f"spec.driver={DRIVER}")


def slice_requests(server: EmbeddedAPIServer, verb: str) -> int:
    return len(server.requests(verb=verb, resource="resourceslices"))


def syncs_done(pub: SlicePublisher, after: float, count: int) -> Callable[[], bool]:
    """True once ``count`` background syncs ended after ``after`` (time.time())."""
    seen: set[float] = set()

    def check() -> bool:
        t = pub.stats.last_publish_time
        if t is not None and t > after:
            seen.add(t)
        return len(seen) >= count
    return check


def test_steady_state_sends_no_request(server: EmbeddedAPIServer,
                                       make_publisher: MakePublisher) -> None:
    """After the start (one LIST per scope, one watch) periodic verifications compare
    against the local view: no LIST, no write, however many of them run."""
    pub = make_publisher(server, resync_period=0.1, watch_delay=0.05)
    pub.publish([pool(3)], wait=False)
    pub.start()
    wait_for(lambda: pub.stats.published_once and pub.watching, what="publish and watch")
    started = time.time()
    lists, writes = slice_requests(server, "list"), server.write_counts()["resourceslices"]
    assert lists == 2 and writes == 1            # this node's slices + the unscoped ones
    wait_for(syncs_done(pub, started, 5), what="five verifications")
    assert slice_requests(server, "list") == lists
    assert server.write_counts()["resourceslices"] == writes
    assert slice_requests(server, "watch") == 1
    assert pub.stats.last_verified_time is not None and pub.stats.last_verified_time > started


def test_own_writes_update_the_view_without_a_list(server: EmbeddedAPIServer,
                                                   make_publisher: MakePublisher) -> None:
    pub = make_publisher(server, resync_period=3600, watch_delay=0.05)
    pub.publish([pool(1)], wait=False)
    pub.start()
    wait_for(lambda: pub.stats.published_once and pub.watching, what="publish and watch")
    server.clear_requests()
    pub.publish([pool(4)], wait=False)
    wait_for(lambda: len(slices(server)[0]["spec"]["devices"]) == 4, what="the new state")
    pub.publish([pool(2)], wait=False)
    wait_for(lambda: len(slices(server)[0]["spec"]["devices"]) == 2, what="the next state")
    wait_for(lambda: pub.stats.generations == {NODE: 3}, what="the second sync to end")
    # the second update was planned from the answer of the first: no LIST, no conflict
    assert slice_requests(server, "list") == 0
    assert [r.status_code for r in server.requests(verb="update")] == [200, 200]


def test_foreign_deletion_restored_from_the_view(server: EmbeddedAPIServer,
                                                 make_publisher: MakePublisher) -> None:
    pub = make_publisher(server, resync_period=3600, watch_delay=0.05)
    pub.publish([pool(2)], wait=False)
    pub.start()
    wait_for(lambda: pub.stats.published_once and pub.watching, what="publish and watch")
    server.clear_requests()
    [s] = slices(server)
    server.delete_object("resourceslices", s["metadata"]["name"])   # as the kubelet does
    wait_for(lambda: slices(server), what="slice restored")
    assert slice_requests(server, "list") == 0
    assert slices(server)[0]["spec"]["pool"]["generation"] == 2


def test_idle_watch_is_replaced_and_resumed(server: EmbeddedAPIServer,
                                            make_publisher: MakePublisher) -> None:
    """The embedded server sends no periodic bookmark: with a short idle bound the watch is
    replaced again and again, each time resuming from its resourceVersion (no LIST)."""
    pub = make_publisher(server, resync_period=3600, watch_idle_timeout=0.3)
    pub.publish([pool(1)], wait=False)
    pub.start()
    wait_for(lambda: pub.stats.watches >= 3, what="the watch replaced twice")
    assert slice_requests(server, "list") == 2
    assert slice_requests(server, "watch") == pub.stats.watches


def test_expired_watch_lists_again(server: EmbeddedAPIServer,
                                   make_publisher: MakePublisher) -> None:
    """A resourceVersion the server no longer has (410) makes the publisher list again
    (this node's slices only: it publishes none without nodeName), and write nothing."""
    pub = make_publisher(server, resync_period=3600, watch_idle_timeout=0.5)
    pub.publish([pool(1)], wait=False)
    pub.start()
    wait_for(lambda: pub.stats.published_once and pub.watching, what="publish and watch")
    server.clear_requests()
    server._store._history_limit = 2          # the watch history keeps two events
    for i in range(5):                        # unrelated writes push ours out of it
        server.create_node(f"other-{i}")
    wait_for(lambda: slice_requests(server, "list") >= 1, what="a LIST after the 410")
    assert slice_requests(server, "list") == 1
    wait_for(lambda: pub.watching and pub.stats.watches >= 2, what="the watch again")
    assert server.write_counts()["resourceslices"] == 0


def test_two_agents_started_together_do_not_resync_in_the_same_second(
        server: EmbeddedAPIServer, make_publisher: MakePublisher) -> None:
    """Each publisher draws its delays from a generator seeded from its own identity: two
    agents started in the same instant have their verifications, and their resyncs after
    a shared event (every slice deleted at once), more than a second apart."""
    server.create_node("node-b")
    pubs = [make_publisher(server, node_name=n, resync_period=30, watch_delay=1.0,
                           recovery_spread=10.0) for n in (NODE, "node-b")]
    for pub in pubs:
        pub.publish([pool(1, name=pub.node)])
    for pub in pubs:
        pub.start()
    wait_for(lambda: all(p.watching for p in pubs), what="both watches")
    verify = [p.next_syncs[0] for p in pubs]
    assert abs(verify[0] - verify[1]) >= 1.0
    for s in slices(server):
        server.delete_object("resourceslices", s["metadata"]["name"])
    wait_for(lambda: all(p.next_syncs[1] is not None for p in pubs), what="both resyncs due")
    due = [p.next_syncs[1] for p in pubs]
    assert due[0] is not None and due[1] is not None
    assert abs(due[0] - due[1]) >= 1.0


AGENT = """
import json, sys, time
from kubernetes import client, config
from drakit.discovery.model import Device, Pool
from drakit.plugin.api.resourceapi import ResourceAPI
from drakit.plugin.slices.publisher import SlicePublisher
kubeconfig, node, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
api = ResourceAPI(config.new_client_from_config(kubeconfig))
pub = SlicePublisher(api, "gpu.example.com", node, resync_period=30, watch_delay=0.5,
                     recovery_spread=8.0)
pub.publish([Pool(name=node, devices=[Device(name="dev-0")])], wait=False)
pub.start()
creates, end = 0, time.monotonic() + seconds
print(json.dumps({"ready": time.time()}), flush=True)
while time.monotonic() < end:
    if pub.stats.creates != creates:
        creates = pub.stats.creates
        print(json.dumps({"create": time.time(), "creates": creates}), flush=True)
    time.sleep(0.01)
pub.stop()
"""


def test_two_agent_processes_restore_a_mass_deletion_seconds_apart(
        server: EmbeddedAPIServer, tmp_path: Path) -> None:
    """Two real agent processes (own interpreters, own generators) publish; every slice is
    deleted at once; they recreate theirs more than a second apart."""
    server.create_node("node-b")
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-c", AGENT, str(kubeconfig), n, "30"],
                              stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)
             for n in (NODE, "node-b")]
    try:
        lines: list[list[dict[str, float]]] = [[], []]

        def read(count: int) -> None:
            for i, proc in enumerate(procs):
                while len(lines[i]) < count:
                    assert proc.stdout is not None
                    line = proc.stdout.readline()
                    assert line, f"agent {i} ended early"
                    lines[i].append(json.loads(line))
        read(2)                                   # ready, first create
        assert all(ln[1]["creates"] == 1 for ln in lines)
        wait_for(lambda: slice_requests(server, "watch") >= 2, what="both watches")
        time.sleep(0.2)
        for s in slices(server):
            server.delete_object("resourceslices", s["metadata"]["name"])
        read(3)                                   # the restoring create of each
        restored = [ln[2]["create"] for ln in lines]
        assert all(ln[2]["creates"] == 2 for ln in lines)
        assert abs(restored[0] - restored[1]) >= 1.0, restored
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)


def test_retry_after_holds_back_the_next_sync(server: EmbeddedAPIServer,
                                              make_publisher: MakePublisher) -> None:
    """A sync that ends on a 429 (its attempts used up) while a resync is already asked
    for (a trigger, a foreign change) must not start the next one before the server's
    Retry-After has passed: no slice request but the watch comes sooner after that 429."""
    retry_after = 1
    pub = make_publisher(server, sleep=None, resync_period=3600, watch_delay=0.05,
                         backoff=Backoff(initial=0.01, max_delay=0.05, attempts=2))
    pub.publish([pool(1)], wait=False)
    pub.start()
    wait_for(lambda: pub.stats.published_once and pub.watching, what="publish and watch")
    server.clear_requests()
    server.set_faults(FaultPlan(throttle_rate=1.0, retry_after_seconds=retry_after,
                                max_faults=2, verbs=frozenset({"update"})))
    pub.publish([pool(2)], wait=False)
    wait_for(lambda: server.faults_injected >= 1, what="the first 429")
    pub.trigger()  # asked for while the failing sync waits out the Retry-After
    wait_for(lambda: len(slices(server)[0]["spec"]["devices"]) == 2, 20, "the new state")
    records = [r for r in server.requests(resource="resourceslices") if r.verb != "watch"]
    assert [r.status_code for r in records if r.verb == "update"][:2] == [429, 429]
    last_429 = max(i for i, r in enumerate(records) if r.status_code == 429)
    after = records[last_429 + 1:]
    assert after, "no request after the last 429"
    gap = after[0].received_at - records[last_429].received_at
    assert gap >= retry_after, (gap, [(r.verb, r.status_code, r.query) for r in after])
