"""Fixtures for the ResourceSlice publisher tests: the embedded API server over real HTTP."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from slices_helpers import DRIVER, NODE, SleepRecorder

from drakit.plugin.api.resourceapi import Backoff, ResourceAPI
from drakit.plugin.slices.publisher import SlicePublisher
from drakit.plugin.testing.apiserver import EmbeddedAPIServer
from drakit.plugin.testing.apiserver.fixtures import (  # noqa: F401 - fixtures
    embedded_apiserver,
    embedded_apiserver_factory,
)


@pytest.fixture
def sleeps() -> SleepRecorder:
    return SleepRecorder()


@pytest.fixture
def make_publisher(
    sleeps: SleepRecorder,
) -> Iterator[Callable[..., SlicePublisher]]:
    made: list[SlicePublisher] = []

    def make(server: EmbeddedAPIServer, **kwargs: Any) -> SlicePublisher:
        kwargs.setdefault("sleep", sleeps)
        kwargs.setdefault("backoff", Backoff(initial=0.01, max_delay=0.05, attempts=4))
        kwargs.setdefault("min_retry_delay", 0.05)
        kwargs.setdefault("recovery_spread", 0.05)
        api = ResourceAPI(server.api_client(), request_timeout=10)
        pub = SlicePublisher(api, kwargs.pop("driver_name", DRIVER),
                             kwargs.pop("node_name", NODE), **kwargs)
        made.append(pub)
        return pub

    yield make
    for pub in made:
        pub.stop()


@pytest.fixture
def server(
    embedded_apiserver_factory: Callable[..., EmbeddedAPIServer],  # noqa: F811
    harness_apiserver: Any,
) -> EmbeddedAPIServer:
    """A server with Node NODE: a new embedded one, or (the ``real`` run of a test marked
    both_apiservers) the session's real kube-apiserver, reset."""
    if harness_apiserver is not None:
        if harness_apiserver.get_object("nodes", NODE) is None:
            harness_apiserver.create_node(NODE)
        return harness_apiserver  # type: ignore[no-any-return]
    srv = embedded_apiserver_factory(("v1",))
    srv.create_node(NODE)
    return srv
