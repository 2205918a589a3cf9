"""Hot-plug end to end: a real veth appears as a device in the published ResourceSlices (new
generation) and disappears when deleted, through kernel uevents → re-discovery → publish."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Callable

import pytest

from drakit.plugin.testing.harness import DriverHarness

pytestmark = pytest.mark.root


@pytest.mark.skipif(os.geteuid() != 0, reason="creating a veth pair needs root")
@pytest.mark.skipif(shutil.which("ip") is None, reason="needs iproute2 (ip)")
def test_veth_appears_and_disappears(harness_factory: Callable[..., DriverHarness]) -> None:
    name = f"drh{uuid.uuid4().hex[:6]}"
    h = harness_factory(discovery=["net"], plugin_options={"net": {"include": ["drh*"]}},
                        settings={"rescan_seconds": 300.0})
    assert h.app.hotplug.mode == "udev"

    def generation() -> int:
        return max((s["spec"]["pool"]["generation"] for s in h.slices()), default=0)

    def names() -> set[str]:
        return {d for _, d in h.devices()}

    before = generation()
    subprocess.run(["ip", "link", "add", name, "type", "veth", "peer", "name", name + "p"],
                   check=True)
    try:
        h.wait_for(lambda: {name, name + "p"} <= names(), 10, f"{name} to be published")
        assert generation() > before
    finally:
        subprocess.run(["ip", "link", "del", name], check=False)
    h.wait_for(lambda: not ({name, name + "p"} & names()), 10, f"{name} to be withdrawn")
