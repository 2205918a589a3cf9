"""Claims whose devices have no prepare hook that changes the node (the plugin declares
prepare_changes_node = False; nothing is inferred from overridden methods): one checkpoint
write per prepare (no PrepareStarted write: the admission write records them
PrepareCompleted), the CDI spec written after it, outside the file lock; the same admission
rules (drakit.plugin.claims.prepare). Kills at each crash point:
test_contract_kill.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import pytest
from contract_helpers import (
    DRIVER,
    NODE,
    POOL,
    ControlledPlugin,
    check_invariants,
    lock_free,
    uid_of,
)

from drakit.discovery.model import Device, Pool
from drakit.discovery.plugin import DiscoveryContext, DiscoveryPlugin
from drakit.plugin.testing.harness import DriverHarness


class NoHookPlugin(DiscoveryPlugin):
    """Devices d0..d2 of POOL; prepare and unprepare are the defaults, declared not to
    change the node."""

    name: ClassVar[str] = "nohook"
    prepare_changes_node: ClassVar[bool] = False

    def __init__(self) -> None:
        super().__init__(DiscoveryContext(driver_name=DRIVER, node_name=NODE))

    def discover(self) -> list[Pool]:
        return [Pool(name=POOL, devices=[Device(name=f"d{i}") for i in range(3)])]


def test_one_checkpoint_write_per_prepare(harness_factory: Callable[..., DriverHarness]) -> None:
    h = harness_factory(plugins=[NoHookPlugin()])
    claim = h.allocate("c", [(POOL, "d0")])
    writes = h.app.checkpoint.writes
    res = h.prepare(claim)[uid_of(claim)]
    assert res.error == "" and len(res.devices) == 1
    assert h.app.checkpoint.writes - writes == 1
    rec = h.app.checkpoint.get(uid_of(claim))
    assert rec is not None and rec.phase == "PrepareCompleted" and rec.devices[0].edits
    assert not check_invariants(h.checkpoint_path, h.cdi_dir, {uid_of(claim)})
    assert h.prepare(claim)[uid_of(claim)] == res  # answered from the record
    # The same admission: the device is busy for another claim.
    other = h.allocate("other", [(POOL, "d0")])
    assert "still prepared for claim" in h.prepare(other)[uid_of(other)].error
    assert h.unprepare(claim) == {uid_of(claim): ""}
    assert h.cdi_files() == [] and h.app.checkpoint.claims() == {}


def test_a_plugin_with_a_prepare_hook_keeps_the_started_write(
        harness_factory: Callable[..., DriverHarness]) -> None:
    h = harness_factory(plugins=[ControlledPlugin(["d0"])])
    claim = h.allocate("c", [(POOL, "d0")])
    writes = h.app.checkpoint.writes
    assert h.prepare(claim)[uid_of(claim)].error == ""
    assert h.app.checkpoint.writes - writes == 2


class DeclaredPlugin(NoHookPlugin):
    """Overrides prepare (edits computed only) and says so."""

    name: ClassVar[str] = "declared"
    prepare_changes_node: ClassVar[bool] = False

    def prepare(self, request: Any) -> Any:
        prepared = super().prepare(request)
        prepared.edits.env = [*(prepared.edits.env or []), "DECLARED=1"]
        return prepared


class ChangingPlugin(NoHookPlugin):
    """Keeps the default prepare, but declares that it changes the node."""

    name: ClassVar[str] = "changing"
    prepare_changes_node: ClassVar[bool] = True


class UndeclaredPlugin(DiscoveryPlugin):
    """Keeps the default prepare and declares nothing: the safe two-write path (nothing is
    inferred from the prepare it did not override)."""

    name: ClassVar[str] = "undeclared"

    def __init__(self) -> None:
        super().__init__(DiscoveryContext(driver_name=DRIVER, node_name=NODE))

    def discover(self) -> list[Pool]:
        return [Pool(name=POOL, devices=[Device(name=f"d{i}") for i in range(3)])]


@pytest.mark.parametrize(("plugin", "writes"),
                         [(DeclaredPlugin, 1), (ChangingPlugin, 2), (UndeclaredPlugin, 2)])
def test_prepare_changes_node_decides_the_started_write(
        harness_factory: Callable[..., DriverHarness], plugin: type[DiscoveryPlugin],
        writes: int) -> None:
    h = harness_factory(plugins=[plugin()])
    claim = h.allocate("c", [(POOL, "d0")])
    before = h.app.checkpoint.writes
    res = h.prepare(claim)[uid_of(claim)]
    assert res.error == ""
    assert h.app.checkpoint.writes - before == writes
    assert not check_invariants(h.checkpoint_path, h.cdi_dir, {uid_of(claim)})
    assert h.unprepare(claim) == {uid_of(claim): ""}


def test_failed_spec_write_leaves_nothing(harness_factory: Callable[..., DriverHarness],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    h = harness_factory(plugins=[NoHookPlugin()])
    claim, fine = h.allocate("c", [(POOL, "d0")]), h.allocate("fine", [(POOL, "d1")])
    real = h.app.specs.write

    def write(claim_uid: str, devices: list[Any], **kw: Any) -> list[str]:
        if claim_uid == uid_of(claim):
            raise OSError("read-only file system")
        return real(claim_uid, devices, **kw)

    monkeypatch.setattr(h.app.specs, "write", write)
    res = h.prepare(claim, fine)
    assert "read-only file system" in res[uid_of(claim)].error
    assert res[uid_of(fine)].error == ""
    assert set(h.app.checkpoint.claims()) == {uid_of(fine)}
    assert not check_invariants(h.checkpoint_path, h.cdi_dir, {uid_of(fine)})


def test_a_prepare_makes_the_spec_content_and_the_record_durable_not_the_spec_rename(
        harness_factory: Callable[..., DriverHarness], monkeypatch: pytest.MonkeyPatch) -> None:
    """Two syncs per prepare: the CDI spec's content (before its rename) and the checkpoint
    log's new line; none for a directory (the log was created, and its directory entry made
    durable, when the checkpoint's first write made the snapshot naming it). A spec lost with
    its rename to a power loss is re-written from the record at start-up
    (test_contract_state.py, test_startup_removes_unowned_specs_and_rolls_back_dead_owner)."""
    import os

    h = harness_factory(plugins=[NoHookPlugin()])
    first = h.allocate("first", [(POOL, "d1")])
    assert h.prepare(first)[uid_of(first)].error == ""  # the checkpoint's first write
    claim = h.allocate("c", [(POOL, "d0")])
    synced: list[str] = []
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def counting(real: Callable[[int], None]) -> Callable[[int], None]:
        def sync(fd: int) -> None:
            synced.append(os.readlink(f"/proc/self/fd/{fd}"))
            real(fd)
        return sync

    monkeypatch.setattr(os, "fsync", counting(real_fsync))
    monkeypatch.setattr(os, "fdatasync", counting(real_fdatasync))
    assert h.prepare(claim)[uid_of(claim)].error == ""
    monkeypatch.setattr(os, "fsync", real_fsync)
    monkeypatch.setattr(os, "fdatasync", real_fdatasync)
    cdi_dir, ck = str(h.cdi_dir.resolve()), h.checkpoint_path.resolve()
    assert len(synced) == 2, synced
    assert cdi_dir not in synced and str(ck.parent) not in synced
    assert sum(p.startswith(cdi_dir + "/") for p in synced) == 1  # the spec's temp file
    assert str(h.app.checkpoint.log_path(1).resolve()) in synced


def test_an_unprepare_makes_the_record_durable_not_the_spec_removal(
        harness_factory: Callable[..., DriverHarness], monkeypatch: pytest.MonkeyPatch) -> None:
    """One sync per unprepare (the checkpoint log's new line), none for the CDI spec's
    unlink: a spec back after a power loss has no record and is swept at start-up
    (test_contract_kill covers the sweep)."""
    import os

    h = harness_factory(plugins=[NoHookPlugin()])
    claim = h.allocate("c", [(POOL, "d0")])
    assert h.prepare(claim)[uid_of(claim)].error == ""
    calls: list[str] = []
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def counting(real: Callable[[int], None]) -> Callable[[int], None]:
        def sync(fd: int) -> None:
            calls.append(os.readlink(f"/proc/self/fd/{fd}"))
            real(fd)
        return sync

    monkeypatch.setattr(os, "fsync", counting(real_fsync))
    monkeypatch.setattr(os, "fdatasync", counting(real_fdatasync))
    assert h.unprepare(claim) == {uid_of(claim): ""}
    monkeypatch.setattr(os, "fsync", real_fsync)
    monkeypatch.setattr(os, "fdatasync", real_fdatasync)
    assert h.cdi_files() == []
    assert calls == [str(h.app.checkpoint.log_path(1).resolve())], calls


def test_a_declared_pure_prepare_runs_outside_the_checkpoint_lock(
        harness_factory: Callable[..., DriverHarness]) -> None:
    """A vendor's prepare that declares prepare_changes_node = False runs before admission,
    not under the checkpoint's file lock: a slow hook never holds up other claims' writes."""
    seen: list[bool] = []
    lock_path: list[str] = []

    class Probing(DeclaredPlugin):
        name: ClassVar[str] = "probing"

        def prepare(self, request: Any) -> Any:
            seen.append(lock_free(lock_path[0]))
            return super().prepare(request)

    h = harness_factory(plugins=[Probing()])
    lock_path.append(str(h.app.checkpoint.lock_path))
    claim = h.allocate("c", [(POOL, "d0")])
    before = h.app.checkpoint.writes
    assert h.prepare(claim)[uid_of(claim)].error == ""
    assert seen == [True]
    assert h.app.checkpoint.writes - before == 1
    assert h.unprepare(claim) == {uid_of(claim): ""}


class FailingOnD1(DeclaredPlugin):
    """A declared-pure prepare that raises for device d1."""

    name: ClassVar[str] = "failing"

    def prepare(self, request: Any) -> Any:
        if request.device.name == "d1":
            raise RuntimeError("d1 is broken")
        return super().prepare(request)


def test_a_failed_admission_write_keeps_the_hook_errors_of_the_same_call(
        harness_factory: Callable[..., DriverHarness], monkeypatch: pytest.MonkeyPatch) -> None:
    """Every claim of the call gets its own answer: the claim whose pure hook failed before
    the write keeps that error, the others get the checkpoint's."""
    from drakit.plugin.claims.checkpoint import CheckpointError

    h = harness_factory(plugins=[FailingOnD1()])
    good, bad = h.allocate("good", [(POOL, "d0")]), h.allocate("bad", [(POOL, "d1")])

    def broken(*_a: Any, **_k: Any) -> Any:
        raise CheckpointError("checkpoint /x: write failed: disk full")

    monkeypatch.setattr(h.app.checkpoint, "change", broken)
    res = h.prepare(good, bad)
    assert "d1 is broken" in res[uid_of(bad)].error
    assert "disk full" in res[uid_of(good)].error
    monkeypatch.undo()
    assert h.cdi_files() == [] and h.app.checkpoint.claims() == {}


def test_a_failed_admission_write_leaves_no_spec(
        harness_factory: Callable[..., DriverHarness], monkeypatch: pytest.MonkeyPatch) -> None:
    """The CDI specs come after the admission write that records the claims
    PrepareCompleted: when the disk refuses that write, no spec was written; the call
    answers the checkpoint's error for every claim and once the disk heals the retry
    prepares them."""
    from drakit.plugin.claims import checkpoint, checkpointlog

    h = harness_factory(plugins=[NoHookPlugin()])
    first, second = h.allocate("c1", [(POOL, "d0")]), h.allocate("c2", [(POOL, "d1")])
    written: list[list[str]] = []

    def full(*_a: Any, **_k: Any) -> None:
        written.append([p.name for p in h.cdi_files()])  # the specs when the write came
        raise OSError("no space left on device")

    monkeypatch.setattr(checkpointlog, "append", full)
    monkeypatch.setattr(checkpoint, "atomic_write", full)
    res = h.prepare(first, second)
    assert all("no space left on device" in r.error for r in res.values()), res
    assert written == [[]], written  # no spec before the record
    assert h.cdi_files() == [] and h.app.checkpoint.claims() == {}
    monkeypatch.undo()
    res = h.prepare(first, second)
    assert all(not r.error for r in res.values()), res
    assert len(h.cdi_files()) == 2
    assert not check_invariants(h.checkpoint_path, h.cdi_dir, {uid_of(first), uid_of(second)})
