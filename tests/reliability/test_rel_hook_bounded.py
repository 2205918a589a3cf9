"""Each claim's vendor hooks run on a worker of their own, bounded by the kubelet
call's deadline. A hook that does not return fails only its own claim: the call answers
before its deadline with the other claims' results, and for the stuck claim an error naming
the plugin, the hook and the device and saying it is still running; retries get that answer
until the hook ends; then its result is recorded (or, for a plugin that declares its prepare
changes nothing on the node, dropped and prepared afresh by the retry)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, ClassVar

import pytest

from drakit.discovery.model import Device, Pool
from drakit.discovery.plugin import DeviceRequest, DiscoveryContext, DiscoveryPlugin, PreparedDevice
from drakit.plugin.claims.checkpoint import Checkpoint
from drakit.plugin.testing.harness import DriverHarness

DRIVER = "drakit.example.com"
NODE = "node-1"
POOL = "pool-b"


class GatePlugin(DiscoveryPlugin):
    """Devices ok-0, ok-1 and stuck; prepare of ``stuck`` waits until :attr:`gate` is set."""

    name: ClassVar[str] = "gated"

    def __init__(self) -> None:
        super().__init__(DiscoveryContext(driver_name=DRIVER, node_name=NODE))
        self.gate = threading.Event()
        self.entered = threading.Event()

    def discover(self) -> list[Pool]:
        return [Pool(name=POOL, devices=[Device(name=n) for n in ("ok-0", "ok-1", "stuck")])]

    def prepare(self, request: DeviceRequest) -> PreparedDevice:
        if request.device.name == "stuck":
            self.entered.set()
            self.gate.wait(120)
        return super().prepare(request)


class PureGatePlugin(GatePlugin):
    name: ClassVar[str] = "puregated"
    prepare_changes_node: ClassVar[bool] = False


def uid(claim: dict[str, Any]) -> str:
    return str(claim["metadata"]["uid"])


@pytest.mark.parametrize("plugin_type", [GatePlugin, PureGatePlugin])
def test_a_stuck_hook_fails_only_its_claim_within_the_deadline(
        short_tmp_path: Path, plugin_type: type[GatePlugin]) -> None:
    plugin = plugin_type()
    h = DriverHarness(short_tmp_path / "h", plugins=[plugin],
                      settings={"orphan_check_seconds": 3600.0})
    h.start()
    try:
        healthy = h.allocate("healthy", [(POOL, "ok-0")])
        stuck = h.allocate("stuck", [(POOL, "stuck")])
        got = h.prepare(healthy, stuck, timeout=4)  # one pod, two claims: answered in time
        assert got[uid(healthy)].error == "" and got[uid(healthy)].devices
        err = got[uid(stuck)].error
        assert f"the prepare hook of plugin {plugin.name} for device {POOL}/stuck" in err, err
        assert "still running" in err and "ResourceClaim default/stuck" in err
        # another call meanwhile prepares, and a retry of the stuck claim gets the same answer
        other = h.allocate("other", [(POOL, "ok-1")])
        assert h.prepare(other, timeout=4)[uid(other)].error == ""
        again = h.prepare(stuck, timeout=2)[uid(stuck)].error
        assert "still running" in again and f"plugin {plugin.name}" in again, again
        plugin.gate.set()  # the hook ends: recorded (two-write path) or dropped (pure)
        if plugin_type is GatePlugin:
            h.wait_for(lambda: (rec := h.app.checkpoint.get(uid(stuck))) is not None
                       and rec.phase == "PrepareCompleted", 20,
                       "the late hook's result to be recorded")
        h.wait_for(lambda: h.prepare(stuck, timeout=5)[uid(stuck)].error == "", 20,
                   "a retry to prepare the claim")
        rec = h.app.checkpoint.get(uid(stuck))
        assert rec is not None and rec.phase == "PrepareCompleted"
        assert h.unprepare(stuck, healthy, other) == {uid(c): "" for c in (stuck, healthy, other)}
        assert h.cdi_files() == []
    finally:
        plugin.gate.set()
        h.stop()


def test_a_restart_rolls_back_what_a_late_hook_left(short_tmp_path: Path) -> None:
    """The hook of a plugin that changes the node outlives its call; the agent is SIGKILLed
    while it still runs: the restarted agent rolls the ``PrepareStarted`` claim back
    through the plugin's unprepare, and the kubelet's retry prepares it afresh."""
    gate, undone = short_tmp_path / "gate", short_tmp_path / "unprepared"
    gate.touch()
    h = DriverHarness(short_tmp_path / "h", subprocess=True,
                      discovery=["late_hook_plugin:LateHookDiscovery"],
                      plugin_options={"late": {"generate": {"count": 1, "prefix": "dev"}}},
                      env={"PYTHONPATH": str(Path(__file__).resolve().parent),
                           "LATE_HOOK_GATE": str(gate), "LATE_HOOK_LOG": str(undone)})
    h.start()
    try:
        [(pool, device)] = h.devices()
        claim = h.allocate("late", [(pool, device)])
        err = h.prepare(claim, timeout=3)[uid(claim)].error
        assert (f"the prepare hook of plugin late for device {pool}/{device}" in err
                and "still running" in err), err
        rec = Checkpoint(h.checkpoint_path).get(uid(claim))
        assert rec is not None and rec.phase == "PrepareStarted"
        h.stop_plugin(kill=True)
        gate.unlink()
        h.start_plugin()
        h.wait_for(lambda: undone.exists() and undone.read_text().split() ==
                   [uid(claim), f"{pool}/{device}"], 20, "the rollback by the restart")
        assert Checkpoint(h.checkpoint_path).get(uid(claim)) is None
        assert h.prepare(claim, timeout=10)[uid(claim)].error == ""
        assert h.unprepare(claim) == {uid(claim): ""}
        assert h.cdi_files() == []
    finally:
        h.stop()
