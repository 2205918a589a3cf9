"""A fatal error of background work stops ``drakit run`` with a non-zero exit and a message
naming the work and the error: ``--strict`` validation failing in the periodic
re-discovery after a device gained an attribute the API refuses, and a failing disk under the
checkpoint when the status writer records its finished applies. A full disk is not fatal:
the work is tried again, the claims whose writes fail meanwhile fail alone, and all goes on
once there is room."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest
import yaml

from drakit.plugin.claims import checkpoint as checkpoint_module
from drakit.plugin.events import Severity
from drakit.plugin.testing.harness import DriverHarness


def _owes_status(h: DriverHarness, uid: str) -> bool:
    rec = h.app.checkpoint.get(uid)
    return rec is not None and rec.status_owed


def test_a_failing_checkpoint_disk_stops_the_agent_naming_it(
        harness: DriverHarness, monkeypatch: pytest.MonkeyPatch) -> None:
    h = harness
    stopped: list[int] = []
    h.app.on_fatal = lambda: stopped.append(1)  # drakit run: its stop event
    claim = h.allocate("c1", [("node-1", "gpu-0")])
    assert h.prepare(claim)[claim["metadata"]["uid"]].error == ""  # owes its status

    def failing_disk(*_a: Any, **_k: Any) -> None:
        raise OSError(errno.EIO, "Input/output error")

    # the status apply reaches the server; recording that in the checkpoint cannot be done
    # (neither its log line nor a new snapshot)
    monkeypatch.setattr(checkpoint_module.checkpointlog, "append", failing_disk)
    monkeypatch.setattr(checkpoint_module, "atomic_write", failing_disk)
    h.wait_for(lambda: h.app.failure is not None, 20, "the fatal error")
    assert stopped == [1]
    assert h.app.failure is not None
    assert h.app.failure.startswith("status: CheckpointWriteError: checkpoint "), h.app.failure
    assert "write failed: [Errno 5] Input/output error" in h.app.failure
    fatal = h.app.metrics.registry.get_sample_value(
        "drakit_background_errors_total",
        {"driver": h.driver_name, "work": "status", "severity": Severity.FATAL.value})
    assert fatal == 1.0


def test_a_full_checkpoint_disk_is_retried_until_there_is_room(
        harness: DriverHarness, monkeypatch: pytest.MonkeyPatch) -> None:
    h = harness
    stopped: list[int] = []
    h.app.on_fatal = lambda: stopped.append(1)

    def full_disk(*_a: Any, **_k: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    def fill() -> None:  # neither a log line nor a new snapshot can be written
        monkeypatch.setattr(checkpoint_module.checkpointlog, "append", full_disk)
        monkeypatch.setattr(checkpoint_module, "atomic_write", full_disk)

    fill()
    first = h.allocate("c1", [("node-1", "gpu-0")])
    uid = first["metadata"]["uid"]
    failed = h.prepare(first)[uid].error  # the kubelet is told, and retries
    assert "write failed: [Errno 28] No space left on device" in failed, failed
    monkeypatch.undo()
    assert h.prepare(first)[uid].error == ""  # room for the prepare, owes its status

    fill()
    errors = {"driver": h.driver_name, "work": "status", "severity": Severity.ERROR.value}
    h.wait_for(lambda: (h.app.metrics.registry.get_sample_value(
        "drakit_background_errors_total", errors) or 0) >= 2, 20,
        "the status writer's settle failing and tried again")
    assert _owes_status(h, uid)
    assert h.app.failure is None and stopped == []
    second = h.allocate("c2", [("node-1", "gpu-1")])  # other claims fail alone meanwhile
    assert "No space left on device" in h.prepare(second)[second["metadata"]["uid"]].error

    monkeypatch.undo()  # room again
    h.wait_for(lambda: not _owes_status(h, uid), 20, "the settle recorded once there is room")
    assert h.prepare(second)[second["metadata"]["uid"]].error == ""
    assert h.app.failure is None and stopped == []
    assert h.app.readiness()[0], h.app.readiness()


@pytest.mark.slow


def test_strict_validation_failing_at_run_time_exits_non_zero_naming_it(
        short_tmp_path: Path) -> None:
    inventory = short_tmp_path / "devices.yaml"
    inventory.write_text(yaml.safe_dump({"devices": [{"name": "gpu-0"}]}))
    h = DriverHarness(short_tmp_path / "h", subprocess=True, discovery=["example"],
                      plugin_options={"example": {"file": str(inventory)}},
                      extra_args=["--strict"])
    h.start()
    try:
        assert h.process is not None
        inventory.write_text(yaml.safe_dump(
            {"devices": [{"name": "gpu-0", "attributes": {"model": "x" * 100}}]}))
        code = h.process.wait(90)  # the re-discovery runs every 30 s (Settings.rescan_seconds)
        h.process = None
        log = h.log_path.read_text()
        assert code == 1, log[-2000:]
        assert "drakit run stopped by a fatal error in rescan: SliceValidationError" in log
        assert "attributes[model]" in log
        assert not list(h.registrar_dir.glob("*.sock"))  # stopped: its sockets are gone
    finally:
        h.stop()
