"""``drakit run`` rides out a full disk under its data directory: the checkpoint writes that
find no room fail their claims alone (the kubelet retries them), the status writer keeps
its finished applies until it can record them, a restart while the disk is full comes up,
and all goes on once there is room, the process never exiting by itself.

Runs the agent as a process on a 1 MiB tmpfs mounted for the test (:mod:`fullfs`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fullfs import fill, mounted_tmpfs

from drakit.plugin.claims.checkpoint import Checkpoint
from drakit.plugin.testing.apiserver.faults import FaultPlan
from drakit.plugin.testing.harness import DriverHarness

NO_ROOM = "[Errno 28] No space left on device"


@pytest.fixture
def harness_on_small_fs(short_tmp_path: Path) -> Iterator[DriverHarness]:
    """A subprocess harness whose data directory (DRA socket, checkpoint) is a 1 MiB tmpfs."""
    inventory = short_tmp_path / "devices.yaml"
    inventory.write_text(yaml.safe_dump({"devices": [{"name": "gpu-0"}, {"name": "gpu-1"}]}))
    h = DriverHarness(short_tmp_path / "h", subprocess=True, discovery=["example"],
                      plugin_options={"example": {"file": str(inventory)}})
    with mounted_tmpfs(h.data_dir, "1m"):
        try:
            yield h
        finally:
            h.stop()


def _uid(claim: dict[str, Any]) -> str:
    return str(claim["metadata"]["uid"])


def test_drakit_rides_out_a_full_disk_under_its_checkpoint(
        harness_on_small_fs: DriverHarness) -> None:
    h = harness_on_small_fs
    h.start()
    first = h.allocate("c1", [("node-1", "gpu-0")])
    # its AllocatedDeviceStatus cannot be applied yet: still owed when the disk fills up
    h.apiserver.set_faults(FaultPlan(error_rate=1.0, resources=frozenset({"resourceclaims"}),
                                     verbs=frozenset({"patch", "update"})))
    assert h.prepare(first)[_uid(first)].error == ""
    filler = fill(h.data_dir)
    h.apiserver.set_faults(None)
    h.wait_for(lambda: bool(((h.claim(first) or {}).get("status") or {}).get("devices")), 30,
               "the status apply once the API server answers")

    def status_lines() -> list[str]:
        return [line for line in h.log_path.read_text().splitlines()
                if '"status' in line and NO_ROOM in line]

    h.wait_for(lambda: len(status_lines()) >= 2, 30,
               "the status writer failing to record its apply")
    assert h.process is not None and h.process.poll() is None, status_lines()
    assert "status failed again: CheckpointFullError" in status_lines()[-1]  # tried again

    second = h.allocate("c2", [("node-1", "gpu-1")])
    assert NO_ROOM in h.prepare(second)[_uid(second)].error  # fails alone; the kubelet retries
    assert NO_ROOM in h.unprepare(first)[_uid(first)]
    assert h.process is not None and h.process.poll() is None

    h.stop_plugin(kill=True)
    h.start_plugin()  # a start while the disk is still full: registers and publishes

    filler.unlink()  # room again: the kubelet's retries go through, no restart needed
    assert h.prepare(second)[_uid(second)].error == ""
    assert h.unprepare(first)[_uid(first)] == ""

    def settled() -> bool:
        claims = Checkpoint(h.checkpoint_path).claims()
        return list(claims) == [_uid(second)] and not claims[_uid(second)].status_owed

    h.wait_for(settled, 30, "c2 prepared with its status recorded, c1 gone")
    assert h.process is not None and h.process.poll() is None
    assert "fatal" not in h.log_path.read_text()
