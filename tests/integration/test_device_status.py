"""AllocatedDeviceStatus end to end: server-side apply with this driver's field manager,
other drivers' entries untouched, retries, real networkData of a real interface."""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
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
from drakit.plugin.testing.apiserver import AllocatedDevice, FaultPlan
from drakit.plugin.testing.harness import DriverHarness


def devices_of(h: DriverHarness, claim: dict[str, Any]) -> list[dict[str, Any]]:
    return list((h.claim(claim) or {}).get("status", {}).get("devices") or [])


@pytest.mark.both_apiservers
def test_other_drivers_entries_survive(harness: DriverHarness) -> None:
    other = AllocatedDevice(driver="other.example.com", pool="p", device="nic", request="net")
    mine = AllocatedDevice(driver=harness.driver_name, pool="node-1", device="gpu-0",
                           request="gpu")
    claim = harness.apiserver.create_claim("default", "mixed", [other, mine],
                                           node_name=harness.node_name)
    api = harness.app.resource_api
    api.apply_claim_status_devices("default", "mixed", [{
        "driver": "other.example.com", "pool": "p", "device": "nic",
        "conditions": [{"type": "Ready", "status": "True", "reason": "Up", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    }], field_manager="other-driver")
    uid = claim["metadata"]["uid"]
    assert harness.prepare(claim)[uid].error == ""
    harness.app.status.flush()
    assert sorted(d["driver"] for d in devices_of(harness, claim)) == [
        "drakit.example.com", "other.example.com"]
    assert harness.unprepare(claim) == {uid: ""}
    harness.app.status.flush()
    assert [d["driver"] for d in devices_of(harness, claim)] == ["other.example.com"]


def test_conflict_once_then_written(harness: DriverHarness) -> None:
    claim = harness.allocate("c409", [("node-1", "gpu-0")])
    harness.apiserver.set_faults(FaultPlan(conflict_rate=1.0, max_faults=1,
                                           resources=frozenset({"resourceclaims/status"})))
    assert harness.prepare(claim)[claim["metadata"]["uid"]].error == ""
    assert harness.app.status.flush(timeout=15)
    harness.apiserver.set_faults(None)
    assert [d["device"] for d in devices_of(harness, claim)] == ["gpu-0"]
    codes = [r.status_code for r in harness.apiserver.requests(resource="resourceclaims/status")]
    assert codes[0] == 409 and codes[-1] == 200


@pytest.mark.both_apiservers
def test_missing_claim_at_unprepare_is_fine(harness: DriverHarness) -> None:
    claim = harness.allocate("gone", [("node-1", "gpu-1")])
    uid = claim["metadata"]["uid"]
    assert harness.prepare(claim)[uid].error == ""
    harness.app.status.flush()
    harness.apiserver.delete_object("resourceclaims", "gone", "default")
    assert harness.unprepare(claim) == {uid: ""}
    assert harness.app.status.flush()
    assert harness.app.status.failures == 0
    assert harness.cdi_files() == []


def _root_with_ip() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create a veth pair"
    if shutil.which("ip") is None:
        return "needs iproute2 (ip)"
    return None


@pytest.fixture
def veth() -> Iterator[str]:
    reason = _root_with_ip()
    if reason:
        pytest.skip(reason)
    name = f"drs{uuid.uuid4().hex[:6]}"
    peer = name + "p"
    subprocess.run(["ip", "link", "add", name, "type", "veth", "peer", "name", peer], check=True)
    try:
        subprocess.run(["ip", "addr", "add", "198.51.100.7/24", "dev", name], check=True)
        subprocess.run(["ip", "addr", "add", "2001:db8:5::7/64", "dev", name], check=True)
        subprocess.run(["ip", "link", "set", name, "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "link", "del", name], check=False)


def test_network_data_of_a_real_interface(
    harness_factory: Callable[..., DriverHarness], veth: str
) -> None:
    h = harness_factory(discovery=["net"], plugin_options={
        "net": {"include": [veth], "includeVirtual": True}})
    assert (h.node_name, veth) in h.devices()
    claim = h.allocate("nic", [(h.node_name, veth)])
    assert h.prepare(claim)[claim["metadata"]["uid"]].error == ""
    h.app.status.flush()
    (entry,) = devices_of(h, claim)
    nd = entry["networkData"]
    mac = Path(f"/sys/class/net/{veth}/address").read_text().strip()
    assert nd["interfaceName"] == veth and nd["hardwareAddress"] == mac
    assert "198.51.100.7/24" in nd["ips"] and "2001:db8:5::7/64" in nd["ips"]
    for ip in nd["ips"]:
        iface = ipaddress.ip_interface(ip)
        assert f"{iface.ip}/{iface.network.prefixlen}" == ip


def test_unprepare_never_clears_a_recreated_claims_status(harness: DriverHarness) -> None:
    claim = harness.allocate("same", [("node-1", "gpu-0")])
    uid = claim["metadata"]["uid"]
    assert harness.prepare(claim)[uid].error == ""
    harness.app.status.flush()
    harness.apiserver.delete_object("resourceclaims", "same", "default")
    newer = harness.allocate("same", [("node-1", "gpu-0")])
    harness.app.resource_api.apply_claim_status_devices("default", "same", [{
        "driver": harness.driver_name, "pool": "node-1", "device": "gpu-0",
        "conditions": [{"type": "Ready", "status": "True", "reason": "Other", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}],
        field_manager=harness.app.status.field_manager)
    assert harness.unprepare(claim) == {uid: ""}
    assert harness.app.status.flush()
    assert [d["device"] for d in devices_of(harness, newer)] == ["gpu-0"]
    assert harness.app.status.failures == 0  # refused by the UID precondition, not an error


class _BadStatusPlugin(ExampleDiscovery):
    """A vendor plugin whose prepare reports a networkData the API would refuse."""

    name = "badstatus"

    def prepare(self, request: DeviceRequest) -> PreparedDevice:
        prepared = super().prepare(request)
        prepared.status = DeviceStatus(network_data=NetworkData(
            interface_name="eth0", ips=["2001:0db8::1/64"]))  # not in canonical form
        return prepared


def test_invalid_status_fails_the_vendors_prepare_naming_the_field(
        harness_factory: Callable[..., DriverHarness]) -> None:
    """A status that breaks an API rule is refused where the vendor builds it: the claim
    fails with an error naming the field, nothing is left prepared, nothing is applied."""
    plugin = _BadStatusPlugin(DiscoveryContext(driver_name="drakit.example.com",
                                               node_name="node-1"))
    h = harness_factory(plugins=[plugin])
    claim = h.allocate("badstatus", [("node-1", "gpu-0")])
    uid = claim["metadata"]["uid"]
    error = h.prepare(claim)[uid].error
    assert "ValidationError" in error and "ips" in error
    assert "must be in canonical form ('2001:db8::1/64')" in error
    assert h.cdi_files() == []
    assert h.app.status.flush()
    assert h.apiserver.requests(resource="resourceclaims/status") == []
    assert devices_of(h, claim) == []


@pytest.mark.both_apiservers
def test_device_status_off_writes_nothing(
        harness_factory: Callable[..., DriverHarness]) -> None:
    """``--no-device-status`` (Settings.device_status=False): prepare and unprepare work and
    answer as usual, and no AllocatedDeviceStatus request reaches the API server."""
    h = harness_factory(settings={"device_status": False})
    claim = h.allocate("quiet", [("node-1", "gpu-0")])
    uid = claim["metadata"]["uid"]
    result = h.prepare(claim)[uid]
    assert result.error == "" and [d.device_name for d in result.devices] == ["gpu-0"]
    assert h.app.status.flush()
    assert devices_of(h, claim) == []
    assert h.unprepare(claim) == {uid: ""}
    assert h.app.status.flush()
    assert h.app.status.writes == 0 and h.app.status.behind == 0
    # the embedded server records every request, the real one its audit log; the test's own
    # allocation is an update of the status, the agent's writes are applies (patch)
    applies = [r for r in h.apiserver.requests(resource="resourceclaims/status")
               if r.verb == "patch"]
    assert applies == []


def test_device_status_on_by_default(harness: DriverHarness) -> None:
    """The counterpart of the test above: the default writes the entry and removes it."""
    claim = harness.allocate("loud", [("node-1", "gpu-0")])
    uid = claim["metadata"]["uid"]
    assert harness.prepare(claim)[uid].error == ""
    assert harness.app.status.flush()
    assert [d["device"] for d in devices_of(harness, claim)] == ["gpu-0"]
    assert harness.unprepare(claim) == {uid: ""}
    assert harness.app.status.flush()
    assert devices_of(harness, claim) == [] and harness.app.status.writes == 2
    applies = [r for r in harness.apiserver.requests(resource="resourceclaims/status")
               if r.verb == "patch"]
    assert len(applies) == 2  # what the test above finds none of
