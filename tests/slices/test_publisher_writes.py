"""SlicePublisher's writes of a pool sync (creates, updates, deletes): one at a time, the DRA
pool rules kept, stopped at a failure, and the watch events of its own writes not taken
for someone else's."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes.client import ApiException
from slices_helpers import DRIVER, NODE, wait_for

from drakit.discovery.model import Device, Pool
from drakit.plugin.api.resourceapi import ResourceAPI
from drakit.plugin.api.retry import Backoff
from drakit.plugin.slices.publisher import PublishError, SlicePublisher
from drakit.plugin.testing.apiserver import EmbeddedAPIServer

MakePublisher = Callable[..., SlicePublisher]


def pool(n: int, name: str = NODE, value: int = 0) -> Pool:
    """``n`` devices: 128 per slice, so ``n = 1000`` is 8 slices."""
    return Pool(name=name, devices=[Device(name=f"dev-{i}", attributes={"index": i,
                                                                        "value": value})
                                    for i in range(n)])


def slices(server: EmbeddedAPIServer) -> list[dict[str, Any]]:
    return server.list_objects("resourceslices", field_selector=f"spec.driver={DRIVER}")


def pool_fields(server: EmbeddedAPIServer) -> set[tuple[int, int]]:
    """(generation, resourceSliceCount) of every slice."""
    return {(s["spec"]["pool"]["generation"], s["spec"]["pool"]["resourceSliceCount"])
            for s in slices(server)}


class SlowAPI(ResourceAPI):
    """Every slice write takes ``delay`` seconds on top of the request; records how many
    writes were in flight at once and can fail chosen creates (by call number)."""

    def __init__(self, server: EmbeddedAPIServer, delay: float = 0.05,
                 fail_creates: frozenset[int] = frozenset()) -> None:
        super().__init__(server.api_client(), request_timeout=10)
        self.delay = delay
        self.fail_creates = fail_creates
        self.lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        self.calls: dict[str, int] = {"create": 0, "update": 0, "delete": 0}

    def _timed(self, verb: str, fn: Callable[[], Any]) -> Any:
        with self.lock:
            self.calls[verb] += 1
            number = self.calls[verb]
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if verb == "create" and number in self.fail_creates:
                raise ApiException(status=422, reason="Invalid")
            time.sleep(self.delay)
            return fn()
        finally:
            with self.lock:
                self.in_flight -= 1

    def create_slice(self, obj: dict[str, Any]) -> dict[str, Any]:
        create = super().create_slice
        answer: dict[str, Any] = self._timed("create", lambda: create(obj))
        return answer

    def update_slice(self, obj: dict[str, Any]) -> dict[str, Any]:
        update = super().update_slice
        answer: dict[str, Any] = self._timed("update", lambda: update(obj))
        return answer

    def delete_slice(self, name: str, *, uid: str | None = None,
                     resource_version: str | None = None) -> None:
        delete = super().delete_slice
        self._timed("delete", lambda: delete(name, uid=uid, resource_version=resource_version))


def publisher(api: ResourceAPI, **kwargs: Any) -> SlicePublisher:
    kwargs.setdefault("sleep", lambda _s: None)
    kwargs.setdefault("recovery_spread", 0.05)
    return SlicePublisher(api, DRIVER, NODE, **kwargs)


def test_creates_one_at_a_time_keep_one_generation(server: EmbeddedAPIServer) -> None:
    api = SlowAPI(server, delay=0.02)
    pub = publisher(api)
    report = pub.publish([pool(1000)])
    assert report is not None and report.creates == 8
    assert api.max_in_flight == 1
    # every slice of the pool: one generation, the pool's slice count, all devices once
    assert pool_fields(server) == {(1, 8)}
    names = [d["name"] for s in slices(server) for d in s["spec"]["devices"]]
    assert sorted(names) == sorted(f"dev-{i}" for i in range(1000))
    assert pub.stats.creates == 8 and pub.stats.slice_writes == 8
    assert pub.sync().writes == 0


def test_updates_and_deletes_keep_one_generation(server: EmbeddedAPIServer) -> None:
    api = SlowAPI(server, delay=0.02)
    pub = publisher(api)
    pub.publish([pool(1000)])
    api.max_in_flight = 0
    report = pub.publish([pool(1000, value=1)])   # every slice's content changes
    assert report is not None and (report.updates, report.creates) == (8, 0)
    assert api.max_in_flight == 1
    assert pool_fields(server) == {(2, 8)}
    api.max_in_flight = 0
    report = pub.publish([pool(300, value=1)])    # 3 slices: 5 surplus deleted
    assert report is not None and report.deletes == 5
    assert api.max_in_flight == 1
    assert pool_fields(server) == {(3, 3)}
    assert pub.stats.generations == {NODE: 3}


def test_a_failed_create_stops_the_pool_and_is_raised(server: EmbeddedAPIServer) -> None:
    api = SlowAPI(server, delay=0.02, fail_creates=frozenset({2}))
    pub = publisher(api)
    with pytest.raises(PublishError, match="422"):
        pub.publish([pool(1000)])
    # no write starts after the failure
    assert api.calls["create"] == 2
    assert len(slices(server)) == 1
    assert pub.stats.publish_errors == 1 and not pub.stats.published_once
    api.fail_creates = frozenset()
    pub.sync()                                    # the half-written pool is completed
    assert len(slices(server)) == 8
    assert pool_fields(server) == {(2, 8)}        # one generation above the partial one


class AnswerLateAPI(ResourceAPI):
    """Creates answer ``delay`` seconds after the server stored the slice, so the watch
    event of the create arrives before its answer (with the resourceVersion) does."""

    def __init__(self, server: EmbeddedAPIServer, delay: float) -> None:
        super().__init__(server.api_client(), request_timeout=10)
        self.delay = delay

    def create_slice(self, obj: dict[str, Any]) -> dict[str, Any]:
        answer = super().create_slice(obj)
        time.sleep(self.delay)
        return answer


def test_own_create_seen_by_the_watch_before_its_answer_is_not_foreign(
        server: EmbeddedAPIServer, caplog: pytest.LogCaptureFixture) -> None:
    pub = publisher(AnswerLateAPI(server, delay=0.3), resync_period=3600, watch_delay=0.05)
    pub.publish([pool(1)])
    pub.start()
    try:
        wait_for(lambda: pub.watching, what="watch to open")
        server.clear_requests()
        with caplog.at_level("INFO", logger="drakit.plugin.slices.publisher"):
            report = pub.publish([pool(1), pool(1, name="second")])   # one create
            assert report is not None and report.creates == 1
            time.sleep(0.5)                       # a resync would come 0.05 s after the event
        assert "by someone else" not in caplog.text
        lists = server.requests(verb="list", resource="resourceslices")
        assert len(lists) == 2                    # the publish's own sync, no resync after it
        # someone else's change is still noticed and undone
        [second] = [s for s in slices(server) if s["spec"]["pool"]["name"] == "second"]
        server.delete_object("resourceslices", second["metadata"]["name"])
        wait_for(lambda: len(slices(server)) == 2, what="deleted slice restored")
    finally:
        pub.stop()


class StuckCreateAPI(ResourceAPI):
    """A create that does not answer until :attr:`release` is set (a write of ours that
    stays in flight); it sends nothing to the server."""

    def __init__(self, server: EmbeddedAPIServer) -> None:
        super().__init__(server.api_client(), request_timeout=10)
        self.release = threading.Event()
        self.stuck = threading.Event()

    def create_slice(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.stuck.set()
        self.release.wait(30)
        raise ApiException(status=503, reason="ServiceUnavailable")


def test_stop_does_not_hang_on_an_event_waiting_for_writes(
        server: EmbeddedAPIServer) -> None:
    api = StuckCreateAPI(server)
    pub = publisher(api, resync_period=3600, watch_delay=3600,
                    backoff=Backoff(initial=0.01, attempts=1))
    pub.start()
    writer = threading.Thread(target=_publish_quietly, args=(pub, [pool(1)]), daemon=True)
    try:
        writer.start()
        assert api.stuck.wait(10), "the create never started"
        wait_for(lambda: pub.watching, what="watch to open")
        server.create_object("resourceslices", {
            "metadata": {"name": "foreign"},
            "spec": {"driver": DRIVER, "nodeName": NODE, "devices": [],
                     "pool": {"name": "x", "generation": 1, "resourceSliceCount": 1}}})
        time.sleep(0.2)                           # the watch thread now waits for the write
        started = time.monotonic()
        pub.stop(timeout=5)
        assert time.monotonic() - started < 2
    finally:
        api.release.set()
        writer.join(10)


def _publish_quietly(pub: SlicePublisher, pools: list[Pool]) -> None:
    with contextlib.suppress(PublishError):
        pub.publish(pools)
