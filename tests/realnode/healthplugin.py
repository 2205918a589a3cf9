"""A discovery plugin for the real-node tests: one device whose health a file decides.

``discovery.healthflip.stateFile`` names a file; while it holds ``Unhealthy`` the device
``flaky-0`` of pool ``health`` is reported so by :meth:`HealthFlip.health` (drakit streams
it to the kubelet over dra-health, KEP-4680). Loaded by ``drakit run --discovery
healthplugin:HealthFlip`` with this folder on PYTHONPATH.
"""

from __future__ import annotations

from pathlib import Path

from drakit.discovery.model import Device, DeviceAttribute, DeviceHealth, Pool
from drakit.discovery.plugin import DiscoveryContext, DiscoveryPlugin

POOL = "health"
DEVICE = "flaky-0"


class HealthFlip(DiscoveryPlugin):
    name = "healthflip"

    def __init__(self, context: DiscoveryContext) -> None:
        super().__init__(context)
        self.state_file = Path(str(context.options["stateFile"]))

    def discover(self) -> list[Pool]:
        device = Device(name=DEVICE, attributes={"flaky": DeviceAttribute(bool=True)},
                        env={"FLAKY_DEVICE": "0"})
        return [Pool(name=POOL, devices=[device])]

    def health(self) -> dict[tuple[str, str], DeviceHealth]:
        try:
            state = self.state_file.read_text().strip()
        except OSError:
            return {}
        if state == "Unhealthy":
            return {(POOL, DEVICE): DeviceHealth(state="Unhealthy", message="test says so")}
        return {}
