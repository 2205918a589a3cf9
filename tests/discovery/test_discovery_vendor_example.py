"""The external example package (examples/drakit-example-vendor): pip-installed into a temp
dir, found through its ``drakit.discovery`` entry point, run over a synthetic sysfs tree."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from drakit.discovery import DiscoveryContext, Pool, SysfsBuilder, available_plugins, load_plugins

Ctx = Callable[..., DiscoveryContext]


def test_loads_by_entry_point_name(acme_installed: Path, sysfs: SysfsBuilder, make_ctx: Ctx,
                                   api_valid: Callable[[list[Pool]], None]) -> None:
    assert (acme_installed / "drakit_acme" / "plugin.py").exists()
    assert available_plugins()["acme"] == "drakit_acme.plugin:AcmeDiscovery"
    sysfs.numa_node(0)
    sysfs.pci_device("0000:3b:00.0", vendor=0x1ACE, device=0x0001, pci_class=0x120000,
                     numa_node=0, extra={"serial": "ACM0001\n", "fw_version": "2.4.1\n",
                                         "mem_bytes": "17179869184\n"})
    sysfs.pci_device("0000:3c:00.0", vendor=0x1ACE, device=0x0002, pci_class=0x120000)
    sysfs.pci_device("0000:3d:00.0", vendor=0x10DE)  # not ACME
    [plugin] = load_plugins(["acme"], lambda name: make_ctx(sysfs.root))
    assert type(plugin).__module__ == "drakit_acme.plugin"
    pools = plugin.discover()
    api_valid(pools)
    devs = {d.name: d for d in pools[0].devices}
    assert set(devs) == {"acme-acm0001", "acme-0000-3c-00-0"}
    a = devs["acme-acm0001"].to_api()
    assert a["attributes"]["firmwareVersion"] == {"version": "2.4.1"}
    assert a["attributes"]["resource.kubernetes.io/pcieRoot"] == {"string": "pci0000:3b"}
    assert a["capacity"]["memory"] == {"value": "17179869184"}
    # its opaque config model is strict and reaches prepare
    from drakit.discovery import ClaimRef, DeviceRequest
    cfg_model = type(plugin).config_model
    assert cfg_model is not None
    cfg = cfg_model.model_validate({"powerLimitWatts": 150})
    with pytest.raises(ValueError):
        cfg_model.model_validate({"powerLimitWatts": 150, "turbo": True})
    out = plugin.prepare(DeviceRequest(claim=ClaimRef(namespace="n", name="c", uid="u"),
                                       request="acc", pool="node-1",
                                       device=devs["acme-acm0001"], config=cfg))
    assert "ACME_POWER_LIMIT_WATTS=150" in (out.edits.env or [])
    assert "ACME_VISIBLE_DEVICES=ACM0001" in (out.edits.env or [])
