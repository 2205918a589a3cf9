"""Concurrent kubelet calls: many claims in parallel, single flight per claim, no global lock
around driver work."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import pytest
from contract_helpers import DRIVER, POOL, ControlledPlugin, check_invariants, uid_of

from drakit.discovery.plugin import DeviceRequest
from drakit.plugin.testing.harness import DriverHarness
from drakit.plugin.testing.kubelet import ClaimPrepareResult


def run_all(fns: list[Callable[[], Any]], timeout: float = 90.0) -> list[Any]:
    """Run every fn on its own thread, released together; results in order."""
    out: list[Any] = [None] * len(fns)
    start = threading.Barrier(len(fns), timeout=30)

    def run(i: int) -> None:
        start.wait()
        try:
            out[i] = fns[i]()
        except Exception as e:  # surfaces in the assertions
            out[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "calls did not finish"
    return out


@pytest.mark.slow
def test_100_claims_prepared_concurrently(harness_factory: Callable[..., DriverHarness]) -> None:
    h = harness_factory(plugin_options={"example": {"generate": {"count": 100}}})
    devices = h.devices()
    claims = [h.allocate(f"c-{i}", [devices[i]]) for i in range(100)]

    results = run_all([functools.partial(h.prepare, c) for c in claims])
    for claim, res in zip(claims, results, strict=True):
        assert isinstance(res, dict), res
        assert res[uid_of(claim)].error == ""
    uids = {uid_of(c) for c in claims}
    assert set(h.app.checkpoint.claims()) == uids
    assert len(h.cdi_files()) == 100
    assert not check_invariants(h.checkpoint_path, h.cdi_dir, uids)

    results = run_all([functools.partial(h.unprepare, c) for c in claims])
    assert all(r == {uid_of(c): ""} for c, r in zip(claims, results, strict=True))
    assert h.app.checkpoint.claims() == {}
    assert h.cdi_files() == []


def test_one_claim_from_10_callers_single_flight(
    harness_factory: Callable[..., DriverHarness],
) -> None:
    plugin = ControlledPlugin(["d0"])
    release = threading.Event()

    def gate(_r: DeviceRequest) -> None:
        release.wait(30)

    plugin.gate = gate
    h = harness_factory(plugins=[plugin])
    claim = h.allocate("shared", [(POOL, "d0")])
    results: list[ClaimPrepareResult | None] = [None] * 10

    def call(i: int) -> None:
        results[i] = h.prepare(claim)[uid_of(claim)]

    threads = [threading.Thread(target=call, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    try:
        # One caller runs the plugin; the nine others wait for its answer.
        h.wait_for(lambda: h.app.node.single_flight_waiters == 9 and plugin.prepared, 20,
                   "9 waiting callers and the first one inside the plugin")
        assert len(plugin.prepared) == 1
    finally:
        release.set()
        for t in threads:
            t.join(30)
    first = results[0]
    assert first is not None and first.error == ""
    assert all(r == first for r in results)
    assert plugin.prepared == [(uid_of(claim), "d0")]
    assert len(h.cdi_files()) == 1


def test_different_claims_prepare_in_parallel(
    harness_factory: Callable[..., DriverHarness],
) -> None:
    """Both prepares must be inside the plugin at the same time to pass the barrier; a
    global lock around driver work would break it (BrokenBarrierError → claim error)."""
    plugin = ControlledPlugin(["d0", "d1"])
    both_inside = threading.Barrier(2, timeout=10)

    def gate(_r: DeviceRequest) -> None:
        both_inside.wait()

    plugin.gate = gate
    h = harness_factory(plugins=[plugin])
    c0 = h.allocate("p0", [(POOL, "d0")])
    c1 = h.allocate("p1", [(POOL, "d1")])
    r0, r1 = run_all([lambda: h.prepare(c0), lambda: h.prepare(c1)])
    assert r0[uid_of(c0)].error == ""
    assert r1[uid_of(c1)].error == ""
    assert h.kubelet.registered_plugins(DRIVER)
