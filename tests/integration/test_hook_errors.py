"""A discovery plugin's hook that raises what is not an ``Exception`` (``SystemExit``,
``KeyboardInterrupt``) fails its own claim with an error naming what it raised; the other
claims of the same kubelet call are prepared and unprepared as usual, and nothing is left
half-prepared (one bad claim never fails the others)."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import pytest

from drakit.discovery.model import Device, Pool
from drakit.discovery.plugin import (
    DeviceRequest,
    DiscoveryContext,
    DiscoveryPlugin,
    PreparedDevice,
    UnprepareRequest,
)
from drakit.plugin.testing.harness import DriverHarness

DRIVER = "hooks.example.com"
POOL = "node-1"


class ExitingPlugin(DiscoveryPlugin):
    """d-exit / d-interrupt raise SystemExit / KeyboardInterrupt in prepare; d-ok is fine;
    d-unexit raises SystemExit in unprepare."""

    name: ClassVar[str] = "exiting"

    def __init__(self) -> None:
        super().__init__(DiscoveryContext(driver_name=DRIVER, node_name=POOL))

    def discover(self) -> list[Pool]:
        names = ("d-exit", "d-interrupt", "d-ok", "d-unexit")
        return [Pool(name=POOL, devices=[Device(name=n) for n in names])]

    def prepare(self, request: DeviceRequest) -> PreparedDevice:
        if request.device.name == "d-exit":
            raise SystemExit(3)
        if request.device.name == "d-interrupt":
            raise KeyboardInterrupt
        return super().prepare(request)

    def unprepare(self, request: UnprepareRequest) -> None:
        if request.device == "d-unexit":
            raise SystemExit("vendor gave up")


@pytest.fixture
def h(harness_factory: Callable[..., DriverHarness]) -> DriverHarness:
    return harness_factory(driver_name=DRIVER, plugins=[ExitingPlugin()])


def uid(claim: dict[str, object]) -> str:
    meta = claim["metadata"]
    assert isinstance(meta, dict)
    return str(meta["uid"])


def test_a_hook_raising_systemexit_fails_only_its_claim(h: DriverHarness) -> None:
    bad = h.allocate("bad", [(POOL, "d-exit")])
    worse = h.allocate("worse", [(POOL, "d-interrupt")])
    ok = h.allocate("ok", [(POOL, "d-ok")])
    got = h.prepare(bad, worse, ok, timeout=20)
    assert "SystemExit raised: 3" in got[uid(bad)].error
    assert "default/bad" in got[uid(bad)].error
    assert "KeyboardInterrupt raised" in got[uid(worse)].error
    assert got[uid(ok)].error == "" and got[uid(ok)].devices
    claims = h.app.checkpoint.claims()
    assert set(claims) == {uid(ok)} and claims[uid(ok)].phase == "PrepareCompleted"
    specs = h.cdi_files()
    assert len(specs) == 1 and uid(ok) in specs[0].name
    assert h.unprepare(bad, worse, ok) == {uid(bad): "", uid(worse): "", uid(ok): ""}
    assert h.cdi_files() == []


def test_an_unprepare_hook_raising_systemexit_fails_only_its_claim(h: DriverHarness) -> None:
    stuck = h.allocate("stuck", [(POOL, "d-unexit")])
    ok = h.allocate("ok", [(POOL, "d-ok")])
    got = h.prepare(stuck, ok, timeout=20)
    assert got[uid(stuck)].error == "" and got[uid(ok)].error == ""
    errors = h.unprepare(stuck, ok, timeout=20)
    assert "SystemExit raised: vendor gave up" in errors[uid(stuck)]
    assert "the unprepare hook of plugin exiting for device node-1/d-unexit failed" in errors[
        uid(stuck)]
    assert errors[uid(ok)] == ""
    assert set(h.app.checkpoint.claims()) == {uid(stuck)}  # kept for the kubelet's retry
