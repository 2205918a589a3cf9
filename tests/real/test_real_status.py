"""AllocatedDeviceStatus on a real kube-apiserver 1.37, written by a node agent's identity
(granular status authorization: resourceclaims/driver associated-node:patch): networkData
applied at prepare and withdrawn at unprepare; a claim deleted and re-created under the same
name is left alone, without an error logged or counted."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from drakit.discovery.builtin.example import ExampleDiscovery
from drakit.discovery.plugin import (
    DeviceRequest,
    DeviceStatus,
    DiscoveryContext,
    NetworkData,
    PreparedDevice,
)
from drakit.plugin.testing.harness import DriverHarness
from drakit.plugin.testing.real.controlplane import RealAPIServer

pytestmark = pytest.mark.slow


class NetworkedExample(ExampleDiscovery):
    """The example devices, each reporting networkData at prepare."""

    def prepare(self, request: DeviceRequest) -> PreparedDevice:
        prepared = super().prepare(request)
        prepared.status = DeviceStatus(network_data=NetworkData(
            interface_name=f"net-{request.device.name}"[:15],
            hardware_address="02:00:00:00:00:01",
            ips=["192.0.2.5/24", "2001:db8::5/64"]))
        return prepared


def _entries(h: DriverHarness, claim: dict[str, Any]) -> list[dict[str, Any]]:
    return list(((h.claim(claim) or {}).get("status") or {}).get("devices") or [])


def test_network_data_applied_and_withdrawn(
    real: RealAPIServer, node_name: str, real_harness_factory: Callable[..., DriverHarness],
) -> None:
    plugin = NetworkedExample(DiscoveryContext(driver_name="drakit.example.com",
                                               node_name=node_name, options={}))
    h = real_harness_factory(node_name, plugins=[plugin])
    claim = h.allocate("net-claim", [h.devices()[0]])
    uid = claim["metadata"]["uid"]
    assert h.prepare(claim)[uid].error == ""
    assert h.app.status.flush(timeout=20)
    [entry] = _entries(h, claim)
    assert entry["driver"] == "drakit.example.com"
    assert entry["networkData"] == {"interfaceName": f"net-{h.devices()[0][1]}"[:15],
                                    "hardwareAddress": "02:00:00:00:00:01",
                                    "ips": ["192.0.2.5/24", "2001:db8::5/64"]}
    assert [c["type"] for c in entry["conditions"]] == ["Ready"]
    managers = {m["manager"] for m in (h.claim(claim) or {})["metadata"]["managedFields"]
                if m.get("subresource") == "status"}
    assert "drakit/drakit.example.com" in managers
    assert h.unprepare(claim) == {uid: ""}
    assert h.app.status.flush(timeout=20)
    assert _entries(h, claim) == []
    assert h.app.status.failures == 0


def test_claim_recreated_under_the_same_name_is_left_alone(
    real: RealAPIServer, node_name: str, real_harness_factory: Callable[..., DriverHarness],
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = real_harness_factory(node_name)
    pool, device = h.devices()[0]
    old = h.allocate("recreated", [(pool, device)])
    old_uid = old["metadata"]["uid"]
    assert h.prepare(old)[old_uid].error == ""
    assert h.app.status.flush(timeout=20)
    assert real.delete_object("resourceclaims", "recreated", "default")
    new = h.allocate("recreated", [(pool, device)])
    assert new["metadata"]["uid"] != old_uid
    caplog.set_level(logging.WARNING, logger="plugin")
    assert h.unprepare(old) == {old_uid: ""}
    assert h.app.status.flush(timeout=20)
    assert _entries(h, new) == []  # the new claim was not touched
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []
    assert h.app.status.failures == 0
    assert h.app.metrics.status_errors._value.get() == 0
