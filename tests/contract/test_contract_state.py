"""Crash safety and state, in-process through the real sockets: corrupt checkpoint, unprepare
without the API, device busy, stale prepare retries, orphans, the start-up sweep, recovery of
half-prepared claims, and callers that give up."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable

import pytest
from contract_helpers import DRIVER, POOL, ControlledPlugin, check_invariants, uid_of

from drakit.cdi.spec import ContainerEdits
from drakit.cdi.spec import Device as CDIDevice
from drakit.cdi.store import SpecStore
from drakit.discovery.plugin import DeviceRequest
from drakit.plugin.api.resourceapi import ClaimReader
from drakit.plugin.claims.checkpoint import Checkpoint, ClaimRecord, PreparedDeviceRecord
from drakit.plugin.claims.orphans import NodePods, OrphanSweeper
from drakit.plugin.testing.apiserver import AllocatedDevice
from drakit.plugin.testing.harness import DriverHarness

CONFIG = [{"source": "FromClaim", "requests": [], "opaque": {"driver": DRIVER, "parameters": {
    "apiVersion": "drakit.example.com/v1alpha1", "kind": "ExampleDeviceConfig",
    "sharing": {"strategy": "TimeSlicing", "timeSlicing": {"interval": "Long"}}}}}]


def checkpoint_errors(h: DriverHarness) -> float:
    value = h.app.metrics.registry.get_sample_value(
        "drakit_checkpoint_errors_total", {"driver": DRIVER})
    return float(value or 0.0)


def stray_spec(h: DriverHarness, uid: str, vendor: str = DRIVER) -> None:
    store = SpecStore(h.cdi_dir, vendor, "device")
    store.write(uid, [CDIDevice(name=f"{uid}-x", container_edits=ContainerEdits(env=["A=1"]))])


# -- corrupt checkpoint -------------------------------------------------------------------


@pytest.mark.parametrize("content,problem", [
    (b"{half a file", "not valid JSON"),
    (b'{"version": 2, "checksum": "00", "claims": {}, "unprepared": {}}', "checksum mismatch"),
    (b'{"version": 7, "claims": {}}', "unsupported format version"),
])
def test_corrupt_checkpoint(harness_factory: Callable[..., DriverHarness], content: bytes,
                           problem: str) -> None:
    h = harness_factory(start=False)
    h.data_dir.mkdir(parents=True)
    h.checkpoint_path.write_bytes(content)
    h.start()  # starts, registers, publishes
    ready, reasons = h.app.readiness()
    assert not ready
    assert any(problem in r and str(h.checkpoint_path) in r for r in reasons)
    errors_at_start = checkpoint_errors(h)
    assert errors_at_start >= 1

    claim = h.allocate("c", [h.devices()[0]])
    err = h.prepare(claim)[uid_of(claim)].error
    assert problem in err and str(h.checkpoint_path) in err
    err = h.unprepare(claim)[uid_of(claim)]
    assert problem in err
    assert h.checkpoint_path.read_bytes() == content  # never reset
    assert h.cdi_files() == []
    assert checkpoint_errors(h) >= errors_at_start + 2

    h.checkpoint_path.unlink()  # the operator fixes it
    assert h.prepare(claim)[uid_of(claim)].error == ""
    h.wait_for(lambda: h.app.readiness()[0], 10, "ready after the fix")


# -- unprepare from the checkpoint alone ----------------------------------------------------


def test_unprepare_needs_no_api(harness_factory: Callable[..., DriverHarness]) -> None:
    h = harness_factory()
    claim = h.allocate("cfg", [("node-1", "gpu-0")], config=CONFIG)
    assert h.prepare(claim)[uid_of(claim)].error == ""
    rec = h.app.checkpoint.get(uid_of(claim))
    assert rec is not None and rec.phase == "PrepareCompleted"
    (dev,) = rec.devices
    assert (dev.request, dev.pool, dev.device) == ("req-0", "node-1", "gpu-0")
    assert dev.config == {"sharing": {"strategy": "TimeSlicing",
                                      "time_slicing": {"interval": "Long"}}}
    assert rec.configs[0]["opaque"]["parameters"]["sharing"]["strategy"] == "TimeSlicing"
    assert rec.fingerprint

    h.app.status.flush()
    assert h.apiserver.delete_object("resourceclaims", "cfg", "default")
    h.apiserver.clear_requests()
    assert h.unprepare(claim) == {uid_of(claim): ""}
    assert h.cdi_files() == []
    assert h.app.checkpoint.claims() == {}
    assert h.apiserver.requests(verb="get", resource="resourceclaims") == []


# -- device busy ----------------------------------------------------------------------------


@pytest.mark.both_apiservers
def test_device_busy_until_unprepared(harness_factory: Callable[..., DriverHarness]) -> None:
    h = harness_factory()
    a = h.allocate("a", [("node-1", "gpu-0")])
    b = h.allocate("b", [("node-1", "gpu-0")])
    assert h.prepare(a)[uid_of(a)].error == ""
    err = h.prepare(b)[uid_of(b)].error
    assert f"still prepared for claim {uid_of(a)}" in err and "retry" in err
    assert uid_of(b) not in h.app.checkpoint.claims()
    assert len(h.cdi_files()) == 1
    # adminAccess results may share it
    admin = h.allocate("admin", [AllocatedDevice(driver=DRIVER, pool="node-1", device="gpu-0",
                                                 admin_access=True)])
    assert h.prepare(admin)[uid_of(admin)].error == ""
    assert h.unprepare(a) == {uid_of(a): ""}
    assert h.prepare(b)[uid_of(b)].error == ""  # the kubelet's retry
    assert not check_invariants(h.checkpoint_path, h.cdi_dir, {uid_of(b), uid_of(admin)})


@pytest.mark.both_apiservers
def test_multiple_allocations_device_is_shared(
    harness_factory: Callable[..., DriverHarness],
) -> None:
    h = harness_factory()
    shares = [h.allocate(f"s{i}", [AllocatedDevice(
        driver=DRIVER, pool="node-1", device="shared-gpu-0", share_id=str(uuid.uuid4()))])
        for i in range(3)]
    for c in shares:
        assert h.prepare(c)[uid_of(c)].error == ""
    assert len(h.cdi_files()) == 3


# -- stale prepare retries ------------------------------------------------------------------


def unreserve(h: DriverHarness, name: str) -> None:
    h.app.status.flush()  # unprepare's status write first (a real server answers 409 else)
    claim = h.apiserver.get_object("resourceclaims", name, "default")
    assert claim is not None
    claim["status"].pop("reservedFor", None)
    h.apiserver.update_object("resourceclaims", claim, subresource="status")


@pytest.mark.both_apiservers
def test_stale_prepare_after_unprepare_is_refused(
    harness_factory: Callable[..., DriverHarness],
) -> None:
    h = harness_factory()
    claim = h.allocate("stale", [("node-1", "gpu-0")])
    assert h.prepare(claim)[uid_of(claim)].error == ""
    assert h.unprepare(claim) == {uid_of(claim): ""}
    unreserve(h, "stale")  # the pod is gone: the controller cleared reservedFor
    err = h.prepare(claim)[uid_of(claim)].error
    assert "stale prepare" in err and "reservedFor" in err
    assert h.cdi_files() == []
    assert h.app.checkpoint.claims() == {}

    # An unprepare that overtook its prepare (nothing recorded yet) marks the UID too.
    late = h.allocate("late", [("node-1", "gpu-1")])
    assert h.unprepare(late) == {uid_of(late): ""}
    unreserve(h, "late")
    assert "stale prepare" in h.prepare(late)[uid_of(late)].error
    assert h.cdi_files() == []


@pytest.mark.both_apiservers
def test_legitimate_reprepare_after_unprepare(
    harness_factory: Callable[..., DriverHarness],
) -> None:
    h = harness_factory()
    claim = h.allocate("reused", [("node-1", "gpu-0")])
    for i in range(3):  # pod after pod using one claim: reservedFor names the new pod
        if i:
            assert h.app.status.flush(10)  # our status withdrawal is in: no write races
            cur = h.claim(claim)
            assert cur is not None
            cur["status"]["reservedFor"] = [{"resource": "pods", "name": f"pod-{i}",
                                             "uid": f"00000000-0000-4000-8000-00000000000{i}"}]
            h.apiserver.update_object("resourceclaims", cur, subresource="status")
        assert h.prepare(claim)[uid_of(claim)].error == ""
        assert len(h.cdi_files()) == 1
        assert h.unprepare(claim) == {uid_of(claim): ""}
    assert h.cdi_files() == []


# -- orphans --------------------------------------------------------------------------------


def test_orphan_sweep_direct(harness_factory: Callable[..., DriverHarness]) -> None:
    plugin = ControlledPlugin(["d0", "d1", "d2"])
    h = harness_factory(plugins=[plugin])
    gone = h.allocate("gone", [(POOL, "d0")])
    replaced = h.allocate("replaced", [(POOL, "d1")])
    alive = h.allocate("alive", [(POOL, "d2")])
    for c in (gone, replaced, alive):
        assert h.prepare(c)[uid_of(c)].error == ""
    h.app.status.flush()
    h.apiserver.delete_object("resourceclaims", "gone", "default")
    h.apiserver.delete_object("resourceclaims", "replaced", "default")
    new = h.allocate("replaced", [(POOL, "d1")])  # same name, new UID
    assert uid_of(new) != uid_of(replaced)

    pods = NodePods(h.app.resource_api, h.node_name)  # no pod on the node uses them
    sweeper = OrphanSweeper(h.app.node, h.app.checkpoint, ClaimReader(h.app.resource_api),
                            grace=100.0, pods=pods)
    assert sweeper.sweep(now=1000.0) == []  # first seen missing: grace starts
    assert sweeper.sweep(now=1099.0) == []
    assert sorted(sweeper.sweep(now=1101.0)) == sorted([uid_of(gone), uid_of(replaced)])
    assert set(h.app.checkpoint.claims()) == {uid_of(alive)}
    assert {p.name for p in h.cdi_files()} == {f"{DRIVER}-device_{uid_of(alive)}.json"}
    assert sorted(plugin.unprepared) == sorted([(uid_of(gone), "d0"), (uid_of(replaced), "d1")])
    # The new claim of the same name was not touched and prepares.
    assert h.prepare(new)[uid_of(new)].error == ""

    # grace 0, and a stray spec (its removal failed during an unprepare) is swept too
    stray_spec(h, "0badc0de-0000-4000-8000-000000000001")
    h.apiserver.delete_object("resourceclaims", "alive", "default")
    assert OrphanSweeper(h.app.node, h.app.checkpoint, ClaimReader(h.app.resource_api),
                         grace=0.0, pods=pods).sweep() == [uid_of(alive)]
    assert {p.name for p in h.cdi_files()} == {f"{DRIVER}-device_{uid_of(new)}.json"}


def test_orphan_sweep_through_app(harness_factory: Callable[..., DriverHarness]) -> None:
    h = harness_factory(settings={"orphan_grace_seconds": 0.0, "orphan_check_seconds": 0.1})
    claim = h.allocate("orphan", [("node-1", "gpu-0")])
    assert h.prepare(claim)[uid_of(claim)].error == ""
    h.app.status.flush()
    h.apiserver.delete_object("resourceclaims", "orphan", "default")
    h.wait_for(lambda: not h.app.checkpoint.claims() and not h.cdi_files(), 15,
               "the orphan to be unprepared")
    assert h.unprepare(claim) == {uid_of(claim): ""}  # the kubelet's late call is fine


# -- start-up recovery ----------------------------------------------------------------------


def test_startup_removes_unowned_specs_and_rolls_back_dead_owner(
    harness_factory: Callable[..., DriverHarness],
) -> None:
    h = harness_factory()
    kept = h.allocate("kept", [("node-1", "gpu-0")])
    assert h.prepare(kept)[uid_of(kept)].error == ""
    h.stop_plugin()

    stray = "0badc0de-0000-4000-8000-000000000002"
    half_dead = "0badc0de-0000-4000-8000-000000000003"
    half_live = "0badc0de-0000-4000-8000-000000000004"
    stray_spec(h, stray)
    stray_spec(h, stray, vendor="other.example.com")  # another driver's file stays
    (h.cdi_dir / "notes.txt").write_text("not a spec")
    for uid in (half_dead, half_live):
        stray_spec(h, uid)
    other = Checkpoint(h.checkpoint_path, owner="live-instance")
    assert other.owner == "live-instance"  # holds its owner lock

    def started(uid: str, owner: str) -> ClaimRecord:
        return ClaimRecord(uid=uid, namespace="default", name=uid[-4:], phase="PrepareStarted",
                           owner=owner, devices=[PreparedDeviceRecord(
                               request="r", pool="node-1", device="gpu-1", plugin="example")])

    other.change(lambda s: s.claims.update({half_dead: started(half_dead, "crashed-instance"),
                                     half_live: started(half_live, "live-instance")}))
    # A completed claim whose spec vanished (tmpfs /var/run/cdi after a reboot).
    (h.cdi_dir / f"{DRIVER}-device_{uid_of(kept)}.json").unlink()
    # Temp files of writes a SIGKILL interrupted.
    temps = [h.data_dir / ".checkpoint.json.k1ll3d.tmp",
             h.cdi_dir / f".{DRIVER}-device_{stray}.json.k1ll3d.tmp"]
    for t in temps:
        t.write_text("{")
    fresh_other = h.cdi_dir / f".{DRIVER}-device_{half_live}.json.busy.tmp"
    fresh_other.write_text("{")  # a live instance may be writing it right now

    h.start_plugin()
    names = {p.name for p in h.cdi_files()}
    assert names == {
        f"{DRIVER}-device_{uid_of(kept)}.json",  # re-written from the checkpoint
        f"{DRIVER}-device_{half_live}.json",  # a live instance is preparing it
        f"other.example.com-device_{stray}.json", "notes.txt",
    }
    assert set(h.app.checkpoint.claims()) == {uid_of(kept), half_live}
    assert not any(t.exists() for t in temps)
    assert fresh_other.exists()
    fresh_other.unlink()
    other.close()  # that instance dies too
    assert h.app.node.recover() == (1, 0)
    assert set(h.app.checkpoint.claims()) == {uid_of(kept)}
    assert not check_invariants(h.checkpoint_path, h.cdi_dir, {uid_of(kept)})


# -- callers that give up -----------------------------------------------------------------


@pytest.mark.parametrize("outcome", ["completes", "fails"])
def test_prepare_after_caller_gave_up(harness_factory: Callable[..., DriverHarness],
                                      outcome: str) -> None:
    plugin = ControlledPlugin(["d0"])
    entered, release = threading.Event(), threading.Event()

    def gate(_r: DeviceRequest) -> None:
        entered.set()
        release.wait(30)
        if outcome == "fails":
            raise RuntimeError("device reset failed")

    plugin.gate = gate
    h = harness_factory(plugins=[plugin])
    claim = h.allocate("slow", [(POOL, "d0")])
    # the hook outlives the call: the call still answers in time, naming the running hook
    err = h.prepare(claim, timeout=0.5)[uid_of(claim)].error
    assert "prepare hook of plugin" in err and "still running" in err, err
    assert entered.wait(10)
    release.set()
    if outcome == "completes":
        h.wait_for(lambda: (r := h.app.checkpoint.get(uid_of(claim))) is not None
                   and r.phase == "PrepareCompleted", 10, "the prepare to be recorded")
        believed = {uid_of(claim)}
    else:
        h.wait_for(lambda: len(plugin.unprepared) == 1, 10, "the rollback")
        h.wait_for(lambda: h.app.checkpoint.claims() == {}, 10, "the entry to go")
        believed = set()
    assert not check_invariants(h.checkpoint_path, h.cdi_dir, believed)
    plugin.gate = None
    first = h.prepare(claim)[uid_of(claim)]  # the kubelet's retry
    assert first.error == ""
    assert h.prepare(claim)[uid_of(claim)] == first
    assert len(plugin.prepared) == (1 if outcome == "completes" else 2)
    assert not check_invariants(h.checkpoint_path, h.cdi_dir, {uid_of(claim)})
    spec = json.loads(h.cdi_files()[0].read_text())
    assert spec["devices"][0]["name"] == f"{uid_of(claim)}-d0"
