"""Device health on a real node (KEP-4680): a device drakit reports Unhealthy over the
dra-health stream shows in the pod's ``status.containerStatuses[].allocatedResourcesStatus``
(kubelet feature gate ResourceHealthStatus, switched on by drakit.plugin.testing.real.node)."""

from __future__ import annotations

import time
from typing import Any

from drakit.plugin.testing.real.node import DrakitProcess, RealNode
from drakit.plugin.testing.real.process import wait_until

from .healthplugin import DEVICE, POOL
from .node_helpers import (
    DRIVER,
    Drivers,
    allocated,
    apply_and_wait_ready,
    attr,
    claim_template,
    new_namespace,
    pod,
    pod_claim,
    record,
    request,
    wait_no_specs,
)


def health_of(node: RealNode, ns: str, name: str) -> dict[str, str]:
    """resourceID → health from the pod's allocatedResourcesStatus (the resourceID is the
    device's first CDI device ID, else ``<driver>/<pool>/<device>``: kubelet manager.go
    buildResourceHealth)."""
    p: dict[str, Any] = node.pod(ns, name) or {}
    out = {}
    for status in (p.get("status") or {}).get("containerStatuses") or []:
        for entry in status.get("allocatedResourcesStatus") or []:
            for res in entry.get("resources") or []:
                out[res["resourceID"]] = res.get("health", "")
    return out


def test_unhealthy_device_in_pod_status(node: RealNode, drivers: Drivers,
                                        drakit: DrakitProcess) -> None:
    ns = new_namespace(node, "health")
    docs = [claim_template(ns, "flaky", request("dev", f"{attr('flaky')} == true")),
            pod(node, ns, "p", template="flaky")]
    apply_and_wait_ready(node, docs, [(ns, "p")])
    [result] = allocated(pod_claim(node, ns, "p"))
    assert (result["driver"], result["pool"], result["device"]) == (DRIVER, POOL, DEVICE)

    def health() -> set[str]:
        return set(health_of(node, ns, "p").values())
    try:
        wait_until(lambda: health() == {"Healthy"}, 60, f"{DEVICE} Healthy in the pod status")
        t0 = time.monotonic()
        drivers.state_file.write_text("Unhealthy")
        wait_until(lambda: health() == {"Unhealthy"}, 60,
                   f"{DEVICE} Unhealthy in the pod status")
        record("health: Unhealthy in pod status after the device turned unhealthy",
               time.monotonic() - t0)
        t0 = time.monotonic()
        drivers.state_file.write_text("Healthy")
        wait_until(lambda: health() == {"Healthy"}, 60,
                   f"{DEVICE} Healthy again in the pod status")
        record("health: Healthy again in pod status", time.monotonic() - t0)
    finally:
        drivers.state_file.write_text("Healthy")
        node.delete_pod(ns, "p")
    wait_no_specs(node)
