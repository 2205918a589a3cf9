"""ResourceSlices with every device feature drakit publishes, on a real kube-apiserver 1.37:
accepted as sent (server defaults aside), and no write churn afterwards (the server's
``taints[].timeAdded`` and canonical quantities must not look like a change)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from real_helpers import AGENT_USER

from drakit.plugin.testing.harness import DriverHarness
from drakit.plugin.testing.real.controlplane import RealAPIServer

pytestmark = pytest.mark.slow

#: The example discoverer's inventory with every feature: attributes of each type, capacity
#: (plain and consumable with request policies), taints (all three effects, with and
#: without a value), shared counters with partitions.
EVERY_FEATURE: dict[str, Any] = {
    "devices": [
        {"name": "plain-0",
         "attributes": {"model": "LATEST-GPU-MODEL", "index": 0, "fast": True,
                        "driverVersion": {"version": "1.2.3"}},
         "capacity": {"memory": "1024Mi"}},
        {"name": "shared-0", "allowMultipleAllocations": True,
         "attributes": {"model": "SHARED"},
         "capacity": {
             "memory": {"value": "40Gi", "requestPolicy": {
                 "default": "1Gi", "validRange": {"min": "1Gi", "max": "40Gi", "step": "1Gi"}}},
             "compute": {"value": "100", "requestPolicy": {
                 "default": "10", "validValues": ["10", "25", "50", "100"]}}}},
        {"name": "tainted-0", "attributes": {"model": "TAINTED"},
         "taints": [{"key": "example.com/broken", "effect": "NoSchedule"},
                    {"key": "example.com/flaky", "value": "yes", "effect": "NoExecute"},
                    {"key": "example.com/slow", "effect": "None"}]},
    ],
    "partitionable": [
        {"name": "mig-0", "attributes": {"model": "MIG"},
         "counters": {"memory": "40Gi", "compute": "98"}, "whole": True,
         "partitions": [{"profile": "1g-10gb", "count": 2,
                         "counters": {"memory": "10Gi", "compute": "14"}},
                        {"profile": "4g-40gb", "count": 1,
                         "counters": {"memory": "40Gi", "compute": "56"}}]},
    ],
}


def _strip_defaults(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec without what the server adds: taints' timeAdded."""
    out = json.loads(json.dumps(spec))
    for d in out.get("devices", []):
        for t in d.get("taints", []):
            t.pop("timeAdded", None)
    return out


def test_every_feature_is_accepted_unchanged_and_not_rewritten(
    real: RealAPIServer, node_name: str, real_harness_factory: Callable[..., DriverHarness],
    tmp_path: Path,
) -> None:
    h = real_harness_factory(node_name, plugin_options={"example": EVERY_FEATURE})
    stored = h.slices()
    assert stored, "no slices published"
    by_name = {d["name"]: d for s in stored for d in s["spec"].get("devices", [])}
    assert {"plain-0", "shared-0", "tainted-0", "mig-0", "mig-0-1g-10gb-0",
            "mig-0-4g-40gb-0"} <= set(by_name)
    # the server filled in timeAdded and kept every taint
    taints = by_name["tainted-0"]["taints"]
    assert [t["effect"] for t in taints] == ["NoSchedule", "NoExecute", "None"]
    assert all(t.get("timeAdded") for t in taints)
    assert by_name["shared-0"]["allowMultipleAllocations"] is True
    assert by_name["shared-0"]["capacity"]["compute"]["requestPolicy"]["validValues"] == [
        "10", "25", "50", "100"]
    assert by_name["plain-0"]["capacity"]["memory"]["value"] == "1Gi"  # canonical form
    assert any(s["spec"].get("sharedCounters") for s in stored)
    # what drakit sends (the embedded server stores it verbatim) is what the real one
    # stored, but for the server's defaults: timeAdded and canonical quantities
    sent = _published_by_embedded(tmp_path, node_name)
    assert _by_device(stored) == _by_device(sent)
    assert _shared_counters(stored) == _shared_counters(sent)
    # no churn: several resyncs (resync_seconds=2) and the watch, not one write
    real.clear_requests()
    versions = {s["metadata"]["name"]: s["metadata"]["resourceVersion"] for s in stored}
    time.sleep(7)
    assert real.write_counts(user=AGENT_USER, successful_only=False)["resourceslices"] == 0
    assert {s["metadata"]["name"]: s["metadata"]["resourceVersion"]
            for s in h.slices()} == versions


def _published_by_embedded(root: Path, node_name: str) -> list[dict[str, Any]]:
    with DriverHarness(root / "embedded", node_name=node_name,
                       plugin_options={"example": EVERY_FEATURE}) as h:
        slices = h.slices()
    for s in slices:  # the real server's canonical quantity (the inventory says 1024Mi)
        for d in s["spec"].get("devices", []):
            if d.get("capacity", {}).get("memory", {}).get("value") == "1024Mi":
                d["capacity"]["memory"]["value"] = "1Gi"
    return slices


def _by_device(slices: list[dict[str, Any]]) -> dict[str, Any]:
    return {d["name"]: d for s in slices for d in _strip_defaults(s["spec"]).get("devices", [])}


def _shared_counters(slices: list[dict[str, Any]]) -> dict[str, Any]:
    return {c["name"]: c for s in slices for c in s["spec"].get("sharedCounters", [])}


def test_an_edited_taint_is_rewritten_once(
    real: RealAPIServer, node_name: str, real_harness_factory: Callable[..., DriverHarness],
) -> None:
    """The publisher's comparison must still see real changes: an admin's edit of a taint
    (a field drakit owns) is reverted by the next resync, and then writes stop."""
    h = real_harness_factory(node_name, plugin_options={"example": EVERY_FEATURE})
    target = next(s for s in h.slices()
                  if any(d["name"] == "tainted-0" for d in s["spec"].get("devices", [])))
    for d in target["spec"]["devices"]:
        if d["name"] == "tainted-0":
            d["taints"][0]["effect"] = "NoExecute"
    real.update_object("resourceslices", target)

    def reverted() -> bool:
        now = next(s for s in h.slices() if s["metadata"]["name"] == target["metadata"]["name"])
        dev = next(d for d in now["spec"]["devices"] if d["name"] == "tainted-0")
        return bool(dev["taints"][0]["effect"] == "NoSchedule")
    h.wait_for(reverted, 20, "drakit to restore its taint", interval=0.2)
    real.clear_requests()
    time.sleep(5)
    assert real.write_counts(user=AGENT_USER, successful_only=False)["resourceslices"] == 0
