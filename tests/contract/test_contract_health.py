"""dra-health end to end: fake kubelet ← health stream ← App ← Inventory ← discovery plugins."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from contract_helpers import DRIVER, POOL, ControlledPlugin, uid_of

from drakit.discovery.model import DeviceHealth
from drakit.plugin.kubelet.protocol import HEALTH_V1, HEALTH_V1ALPHA1
from drakit.plugin.testing.harness import DriverHarness
from drakit.plugin.testing.kubelet import DeviceHealthReport, HealthWatch, KubeletCheckError

Reports = list[DeviceHealthReport]


def wait_health(watch: HealthWatch, pred: Callable[[Reports], bool], timeout: float = 20.0,
                what: str = "health message") -> Reports:
    """Read messages until one satisfies ``pred``; TimeoutError naming the last one seen."""
    deadline = time.monotonic() + timeout
    last: Reports | None = None
    while time.monotonic() < deadline:
        try:
            last = watch.next(timeout=max(0.1, deadline - time.monotonic()))
        except TimeoutError:
            break
        if pred(last):
            return last
    raise TimeoutError(f"no {what} within {timeout}s; last: {last}")


def by_device(reports: Reports) -> dict[str, DeviceHealthReport]:
    return {r.device_name: r for r in reports}


def test_stream_carries_complete_list_healthy(
    harness_factory: Callable[..., DriverHarness],
) -> None:
    h = harness_factory()
    reg = h.kubelet.registered_plugins(DRIVER)[-1]
    assert reg.health_versions == (HEALTH_V1, HEALTH_V1ALPHA1)
    for version in (HEALTH_V1, HEALTH_V1ALPHA1):
        watch = h.kubelet.watch_health(DRIVER, version)
        try:
            msg = watch.next(timeout=10)
        finally:
            watch.cancel()
        assert sorted((r.pool_name, r.device_name) for r in msg) == sorted(h.devices())
        assert len(msg) == 11
        assert {r.health for r in msg} == {"Healthy"}
        assert all(r.health_check_timeout_seconds > 0 for r in msg)
        assert all(r.last_updated_time > 0 for r in msg)


def test_device_removed_from_yaml_is_unhealthy_before_it_leaves(
    harness_factory: Callable[..., DriverHarness], tmp_path: Path
) -> None:
    inventory = tmp_path / "devices.yaml"
    inventory.write_text(yaml.safe_dump({"pool": "yaml-pool", "devices": [
        {"name": "dev-a"}, {"name": "dev-b"}, {"name": "dev-c"}]}))
    h = harness_factory(plugin_options={"example": {"file": str(inventory)}})
    assert sorted(d for _, d in h.devices()) == ["dev-a", "dev-b", "dev-c"]
    watch = h.kubelet.watch_health(DRIVER)
    first = watch.next(timeout=10)
    assert {r.device_name: r.health for r in first} == {
        "dev-a": "Healthy", "dev-b": "Healthy", "dev-c": "Healthy"}

    inventory.write_text(yaml.safe_dump({"pool": "yaml-pool", "devices": [
        {"name": "dev-a"}, {"name": "dev-c"}]}))
    later = time.time() + 5
    os.utime(inventory, (later, later))
    assert h.app.refresh_inventory() is True
    msg = wait_health(watch, lambda m: by_device(m).get("dev-b", None) is not None
                      and by_device(m)["dev-b"].health == "Unhealthy", what="dev-b Unhealthy")
    assert by_device(msg)["dev-a"].health == "Healthy"
    assert "removed" in by_device(msg)["dev-b"].message
    h.wait_for(lambda: sorted(d for _, d in h.devices()) == ["dev-a", "dev-c"], 10,
               "dev-b to leave the ResourceSlices")
    # Only after the grace period does it leave the list.
    h.app.inventory.removed_grace = 0.0
    msg = wait_health(watch, lambda m: "dev-b" not in by_device(m), what="dev-b to leave")
    assert sorted(by_device(msg)) == ["dev-a", "dev-c"]
    watch.cancel()


def test_plugin_health_hook_flows_through(harness_factory: Callable[..., DriverHarness]) -> None:
    plugin = ControlledPlugin(["d0", "d1"])
    h = harness_factory(plugins=[plugin])
    watch = h.kubelet.watch_health(DRIVER)
    assert {r.health for r in watch.next(timeout=10)} == {"Healthy"}
    plugin.unhealthy[(POOL, "d1")] = DeviceHealth(state="Unhealthy", message="ECC errors: 7")
    h.app.inventory.refresh_health()
    msg = wait_health(watch, lambda m: by_device(m)["d1"].health == "Unhealthy")
    assert by_device(msg)["d1"].message == "ECC errors: 7"
    assert by_device(msg)["d0"].health == "Healthy"
    plugin.unhealthy.clear()
    h.app.inventory.refresh_health()
    wait_health(watch, lambda m: {r.health for r in m} == {"Healthy"}, what="all Healthy again")
    watch.cancel()


def test_health_disabled_advertises_neither(harness_factory: Callable[..., DriverHarness]) -> None:
    h = harness_factory(settings={"health": False})
    reg = h.kubelet.registered_plugins(DRIVER)[-1]
    assert reg.health_versions == ()
    assert HEALTH_V1 not in reg.supported_versions
    assert HEALTH_V1ALPHA1 not in reg.supported_versions
    with pytest.raises(KubeletCheckError, match="no health service"):
        h.kubelet.watch_health(DRIVER)


def test_device_removed_while_prepared(harness_factory: Callable[..., DriverHarness]) -> None:
    plugin = ControlledPlugin(["d0", "d1"])
    h = harness_factory(plugins=[plugin])
    claim = h.allocate("held", [(POOL, "d0")])
    assert h.prepare(claim)[uid_of(claim)].error == ""
    watch = h.kubelet.watch_health(DRIVER)
    watch.next(timeout=10)

    plugin.names = ["d1"]
    h.app.inventory.removed_grace = 0.0  # would drop it at once if it were not prepared
    assert h.app.refresh_inventory() is True
    wait_health(watch, lambda m: by_device(m).get("d0") is not None
                and by_device(m)["d0"].health == "Unhealthy", what="d0 Unhealthy")
    h.wait_for(lambda: h.devices() == [(POOL, "d1")], 10, "d0 to leave the ResourceSlices")
    for _ in range(3):  # still reported while a claim holds it
        h.app.inventory.refresh_health()
        snap = {e.device_name: e.state for e in h.app.inventory.health_snapshot()}
        assert snap == {"d0": "Unhealthy", "d1": "Healthy"}
    # Not offered again: a new claim for it is refused.
    other = h.allocate("other", [(POOL, "d0")])
    assert "not in this node's inventory" in h.prepare(other)[uid_of(other)].error

    assert h.unprepare(claim) == {uid_of(claim): ""}
    h.app.inventory.refresh_health()
    wait_health(watch, lambda m: sorted(by_device(m)) == ["d1"], what="d0 to leave the list")
    watch.cancel()
