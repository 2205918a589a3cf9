"""What runs under the checkpoint's file lock: its writes, nothing of the caller.
A CDI spec is written only while a record names its claim and removed before its record
goes, both outside the lock (drakit.plugin.claims.prepare, drakit.plugin.claims.unprepare), so
the orphan-spec sweep, which runs under the lock, never meets a claim in progress."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from contract_helpers import POOL, ControlledPlugin, check_invariants, lock_free, uid_of
from test_contract_hookless import NoHookPlugin

from drakit.plugin.claims.checkpoint import Checkpoint, CheckpointError
from drakit.plugin.testing.harness import DriverHarness


def _on_disk(h: DriverHarness, uid: str) -> str | None:
    """The claim's phase in the checkpoint files, read by a fresh reader (None: no record)."""
    rec = Checkpoint(h.checkpoint_path).get(uid)
    return rec.phase if rec is not None else None


@pytest.mark.parametrize("plugin", [NoHookPlugin, lambda: ControlledPlugin(["d0"])],
                         ids=["one-write", "two-writes"])
def test_specs_are_written_after_the_record_and_removed_before_it_outside_the_lock(
        harness_factory: Callable[..., DriverHarness], monkeypatch: pytest.MonkeyPatch,
        plugin: Callable[[], Any]) -> None:
    h = harness_factory(plugins=[plugin()])
    claim = h.allocate("c", [(POOL, "d0")])
    uid = uid_of(claim)
    seen: list[tuple[str, bool, str | None]] = []
    write, remove = h.app.specs.write, h.app.specs.remove

    def probing_write(claim_uid: str, *a: Any, **k: Any) -> Any:
        seen.append(("write", lock_free(h.app.checkpoint.lock_path), _on_disk(h, claim_uid)))
        return write(claim_uid, *a, **k)

    def probing_remove(claim_uid: str, *a: Any, **k: Any) -> Any:
        seen.append(("remove", lock_free(h.app.checkpoint.lock_path), _on_disk(h, claim_uid)))
        return remove(claim_uid, *a, **k)

    monkeypatch.setattr(h.app.specs, "write", probing_write)
    monkeypatch.setattr(h.app.specs, "remove", probing_remove)
    assert h.prepare(claim)[uid].error == ""
    # One write: recorded PrepareCompleted by the admission write, then the spec; two
    # writes: recorded PrepareStarted, the hook and the spec, then PrepareCompleted.
    first = "PrepareCompleted" if plugin is NoHookPlugin else "PrepareStarted"
    assert seen == [("write", True, first)], seen
    seen.clear()
    assert h.unprepare(claim) == {uid: ""}
    assert seen == [("remove", True, "PrepareCompleted")], seen
    assert _on_disk(h, uid) is None and h.cdi_files() == []


def test_a_spec_that_cannot_be_written_after_its_record_drops_the_record(
        harness_factory: Callable[..., DriverHarness], monkeypatch: pytest.MonkeyPatch) -> None:
    """The one-write path records the claim before its spec: a spec write that fails takes
    the record back (a second write), and the other claims of the call are prepared."""
    h = harness_factory(plugins=[NoHookPlugin()])
    bad, fine = h.allocate("bad", [(POOL, "d0")]), h.allocate("fine", [(POOL, "d1")])
    write = h.app.specs.write

    def failing(claim_uid: str, *a: Any, **k: Any) -> Any:
        if claim_uid == uid_of(bad):
            assert _on_disk(h, claim_uid) == "PrepareCompleted"
            raise OSError(28, "No space left on device")
        return write(claim_uid, *a, **k)

    monkeypatch.setattr(h.app.specs, "write", failing)
    before = h.app.checkpoint.writes
    res = h.prepare(bad, fine)
    assert "No space left on device" in res[uid_of(bad)].error
    assert res[uid_of(fine)].error == ""
    assert h.app.checkpoint.writes - before == 2  # admission, then the record taken back
    assert _on_disk(h, uid_of(bad)) is None
    assert not check_invariants(h.checkpoint_path, h.cdi_dir, {uid_of(fine)})
    monkeypatch.undo()
    assert h.prepare(bad)[uid_of(bad)].error == ""  # the kubelet's retry
    assert not check_invariants(h.checkpoint_path, h.cdi_dir, {uid_of(bad), uid_of(fine)})


def test_an_unprepare_whose_write_fails_keeps_the_record_and_its_retry_finishes(
        harness_factory: Callable[..., DriverHarness], monkeypatch: pytest.MonkeyPatch) -> None:
    """The spec is removed before the record: when the checkpoint then refuses the write,
    the claim's error says so and its record stays (without its spec, which a restart would
    write again); the kubelet's retry unprepares it."""
    h = harness_factory(plugins=[NoHookPlugin()])
    claim = h.allocate("c", [(POOL, "d0")])
    uid = uid_of(claim)
    assert h.prepare(claim)[uid].error == ""

    def broken(*_a: Any, **_k: Any) -> Any:
        raise CheckpointError("checkpoint /x: write failed: disk full")

    monkeypatch.setattr(h.app.checkpoint, "change", broken)
    assert "disk full" in h.unprepare(claim)[uid]
    monkeypatch.undo()
    assert _on_disk(h, uid) == "PrepareCompleted" and h.cdi_files() == []
    assert h.unprepare(claim) == {uid: ""}
    assert _on_disk(h, uid) is None
    assert not check_invariants(h.checkpoint_path, h.cdi_dir, set())
