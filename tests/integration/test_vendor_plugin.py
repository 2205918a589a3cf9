"""The extension path end to end: an external package's plugin, found through its
``drakit.discovery`` entry point, publishes and prepares through the fake kubelet with its
typed opaque config (class configs first, then claim configs; unknown fields refused)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from drakit.discovery import SysfsBuilder
from drakit.plugin.testing.apiserver import AllocatedDevice
from drakit.plugin.testing.harness import DriverHarness


def acme_config(source: str, **params: Any) -> dict[str, Any]:
    return {"source": source, "requests": [], "opaque": {
        "driver": "acme.example.com",
        "parameters": {"apiVersion": "acme.example.com/v1", "kind": "AcmeConfig", **params}}}


def test_vendor_plugin_through_the_kubelet(
    acme_installed: Path, tmp_path: Path, harness_factory: Callable[..., DriverHarness]
) -> None:
    tree = SysfsBuilder(tmp_path / "sys")
    tree.pci_device("0000:3b:00.0", vendor=0x1ACE, device=0x0001, pci_class=0x120000,
                    extra={"serial": "ACM0001\n", "fw_version": "2.4.1\n",
                           "mem_bytes": "17179869184\n"})
    h = harness_factory(driver_name="acme.example.com", discovery=["acme"],
                        settings={"sysfs_root": tree.root})
    assert ("node-1", "acme-acm0001") in h.devices()
    dev = AllocatedDevice(driver="acme.example.com", pool="node-1", device="acme-acm0001",
                          request="acc")
    claim = h.apiserver.create_claim("default", "acc", [dev], node_name="node-1", config=[
        acme_config("FromClaim", powerLimitWatts=150),
        acme_config("FromClass", powerLimitWatts=100, mode="performance"),
    ])
    uid = claim["metadata"]["uid"]
    result = h.prepare(claim)[uid]
    assert result.error == ""
    spec = json.loads(h.cdi_files()[0].read_text())
    env = spec["devices"][0]["containerEdits"]["env"]
    assert "ACME_POWER_LIMIT_WATTS=150" in env  # the claim config wins over the class config
    assert "ACME_VISIBLE_DEVICES=ACM0001" in env
    assert h.unprepare(claim) == {uid: ""}

    bad = h.apiserver.create_claim("default", "bad", [dev], node_name="node-1",
                                   config=[acme_config("FromClaim", turbo=True)])
    err = h.prepare(bad)[bad["metadata"]["uid"]].error
    assert "turbo" in err and "config[0]" in err
    assert h.cdi_files() == []
