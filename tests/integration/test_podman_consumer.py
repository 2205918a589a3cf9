"""A real container runtime consumes the CDI spec that a real prepare wrote (podman + runc)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from drakit.cdi.testing import PodmanCDI
from drakit.plugin.testing.harness import DriverHarness

pytestmark = pytest.mark.podman


def test_container_sees_prepared_devices(harness: DriverHarness, podman_cdi: PodmanCDI) -> None:
    claim = harness.allocate("gpus", [("node-1", "gpu-0"), ("node-1", "gpu-1")])
    uid = claim["metadata"]["uid"]
    result = harness.prepare(claim)[uid]
    assert result.error == ""
    ids = [i for d in result.devices for i in d.cdi_device_ids]
    run = podman_cdi.run(
        harness.cdi_dir, ids, "ls -l /dev/example-gpu0 /dev/example-gpu1; env"
    ).check()
    # /dev/null is char 1:3: the nodes were filled from the host node
    assert "1,   3" in run.stdout or "1, 3" in run.stdout
    assert run.env["EXAMPLE_GPU_INDEX"] in ("0", "1")
    assert run.env["DRAKIT_DEVICE_GPU_0"] == "node-1/gpu-0"
    assert run.env["DRAKIT_DEVICE_GPU_1"] == "node-1/gpu-1"
    assert harness.unprepare(claim) == {uid: ""}
    gone = podman_cdi.run(harness.cdi_dir, ids[:1], "true")
    assert gone.returncode != 0  # spec removed: the device is unresolvable


def test_capped_spec_loads_in_podman_43(
    harness_factory: Callable[..., DriverHarness], podman_cdi: PodmanCDI
) -> None:
    h = harness_factory(settings={"cdi_version_max": "0.5.0"})
    claim = h.allocate("c", [("node-1", "gpu-0")])
    result = h.prepare(claim)[claim["metadata"]["uid"]]
    assert result.error == ""
    run = podman_cdi.run(h.cdi_dir, list(result.devices[0].cdi_device_ids), "env").check()
    assert run.env["DRAKIT_DEVICE_GPU_0"] == "node-1/gpu-0"
