"""The publisher's seams on their own: the resync schedule (a trigger never shortens a
failure's backoff) and the cleanup through the publisher's calls (Retry-After hold-back,
the caller's deadline)."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes.client import ApiException
from slices_helpers import DRIVER, NODE, SleepRecorder, wait_for

from drakit.discovery.model import Device, Pool
from drakit.plugin.api.resourceapi import ResourceAPI
from drakit.plugin.api.retry import Backoff
from drakit.plugin.ops.cleanup import driver_slices
from drakit.plugin.slices.calls import ApiCalls
from drakit.plugin.slices.publisher import SlicePublisher
from drakit.plugin.slices.schedule import ResyncSchedule
from drakit.plugin.testing.apiserver import EmbeddedAPIServer, FaultPlan

MakePublisher = Callable[..., SlicePublisher]


def pool(n: int) -> Pool:
    return Pool(name=NODE, devices=[Device(name=f"dev-{i}") for i in range(n)])


def slices(server: EmbeddedAPIServer) -> list[dict[str, Any]]:
    return server.list_objects("resourceslices", field_selector=f"spec.driver={DRIVER}")


def test_a_trigger_does_not_shorten_the_failure_backoff() -> None:
    schedule = ResyncSchedule(3600, random.Random(1).random)
    schedule.start(now=False)
    schedule.failed(5.0)
    failed_at = time.monotonic()
    schedule.ask(0.0)                        # a trigger, a foreign change
    verify, asked = schedule.next_syncs()
    assert asked is not None and asked >= failed_at + 4.9
    assert verify >= failed_at + 4.9
    stopping = threading.Event()
    due: list[bool] = []
    waiter = threading.Thread(target=lambda: due.append(schedule.wait_due(stopping)))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive()                 # still in the backoff
    stopping.set()
    schedule.wake()
    waiter.join(5)
    assert due == [False]
    schedule.succeeded()                     # after a good sync a trigger is at once again
    schedule.ask(0.0)
    asked = schedule.next_syncs()[1]
    assert asked is not None and asked <= time.monotonic()


def test_publisher_trigger_after_a_failed_sync_waits_for_the_backoff(
        server: EmbeddedAPIServer, make_publisher: MakePublisher) -> None:
    pub = make_publisher(server, resync_period=3600, min_retry_delay=3.0,
                         recovery_spread=0.0, backoff=Backoff(initial=0.01, attempts=1))
    server.set_faults(FaultPlan(error_rate=1.0, verbs=frozenset({"list"}),
                                resources=frozenset({"resourceslices"})))
    pub.publish([pool(1)], wait=False)
    pub.start()
    wait_for(lambda: pub.stats.publish_errors >= 1, what="the first sync to fail")
    failed_at = time.monotonic()
    lists = len(server.requests(verb="list", resource="resourceslices"))
    pub.trigger()
    time.sleep(1.0)
    assert len(server.requests(verb="list", resource="resourceslices")) == lists
    asked = pub.next_syncs[1]
    assert asked is not None and asked >= failed_at + 1.5
    server.set_faults(None)
    wait_for(lambda: slices(server), 15, "the retry after the backoff")


def test_cleanup_gives_up_at_the_callers_deadline(server: EmbeddedAPIServer,
                                                  sleeps: SleepRecorder) -> None:
    api = ResourceAPI(server.api_client(), request_timeout=10)
    server.set_faults(FaultPlan(throttle_rate=1.0, retry_after_seconds=5,
                                verbs=frozenset({"list"})))
    with pytest.raises(ApiException) as err:
        driver_slices(api, DRIVER, NODE, calls=ApiCalls(sleep=sleeps),
                      deadline=time.monotonic() + 1.0)
    assert err.value.status == 429
    assert sleeps.calls == []                # a 5 s wait would end past the deadline
    assert len(server.requests(verb="list", resource="resourceslices")) == 1
