"""The AllocatedDeviceStatus a claim owes is in its checkpoint record; the status
writer settles it in batches; start-up resumes what is owed (nothing when nothing is)."""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from kubernetes.client import ApiException

from drakit.discovery.plugin import ClaimRef
from drakit.plugin.claims import lifecycle, owedstatus
from drakit.plugin.claims.checkpoint import (
    UNPREPARED_MAX,
    UNPREPARED_TTL,
    Checkpoint,
    CheckpointState,
    ClaimRecord,
    PreparedDeviceRecord,
    UnpreparedRecord,
)
from drakit.plugin.claims.status import StatusWriter

DRIVER = "drv.example.com"


class API:
    """Answers every apply and removal; the first ``fail`` calls get ``status``."""

    def __init__(self, fail: int = 0, status: int = 503) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail, self.status = fail, status

    def _call(self, verb: str, name: str) -> None:
        self.calls.append((verb, name))
        if self.fail:
            self.fail -= 1
            raise ApiException(status=self.status, reason="no")

    def apply_claim_status_devices(self, namespace: str, name: str, entries: Any,
                                   field_manager: str, uid: str | None = None) -> None:
        self._call("apply", name)

    def remove_claim_status_devices(self, namespace: str, name: str, field_manager: str,
                                    uid: str | None = None) -> None:
        self._call("remove", name)


class Ledger:
    def __init__(self) -> None:
        self.batches: list[tuple[dict[str, float], set[str]]] = []

    def settled(self, applied: Mapping[str, float], removed: Collection[str]) -> None:
        self.batches.append((dict(applied), set(removed)))


def record(uid: str, owed: bool = True, at: float = 5.0) -> ClaimRecord:
    return ClaimRecord(uid=uid, namespace="ns", name=f"c-{uid}", phase="PrepareCompleted",
                       devices=[PreparedDeviceRecord(request="r", pool="p", device="d")],
                       prepared_at=at, status_owed=owed)


def ref(rec: ClaimRecord) -> ClaimRef:
    return ClaimRef(namespace=rec.namespace, name=rec.name, uid=rec.uid)


def test_settle_clears_only_what_the_server_holds() -> None:
    state = CheckpointState(
        {"a": record("a", at=1.0), "b": record("b", at=2.0)},
        {"m": UnpreparedRecord(at=time.time(), namespace="ns", name="c-m", status_owed=True)})
    # b was prepared again (new prepared_at) after the apply that settles: it keeps its flag
    assert lifecycle.settle(state, {"a": 1.0, "b": 1.5}, {"m"}) is True
    assert not state.claims["a"].status_owed and state.claims["b"].status_owed
    assert not state.unprepared["m"].status_owed
    assert lifecycle.settle(state, {"a": 1.0}, {"m"}) is False  # nothing left to clear


def test_owed_lists_the_applies_and_removals() -> None:
    state = CheckpointState(
        {"a": record("a"), "b": record("b", owed=False)},
        {"m": UnpreparedRecord(at=1.0, namespace="ns", name="c-m", status_owed=True),
         "n": UnpreparedRecord(at=1.0)})
    applies, removals = owedstatus.owed(state)
    assert [r.uid for r in applies] == ["a"]
    assert removals == [ClaimRef(namespace="ns", name="c-m", uid="m")]


def test_marks_owing_a_removal_outlive_their_age_and_count_limits(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path / "checkpoint.json")
    old = time.time() - UNPREPARED_TTL - 60

    def fill(state: CheckpointState) -> None:
        state.unprepared["owed"] = UnpreparedRecord(at=old, namespace="ns", name="c",
                                                    status_owed=True)
        state.unprepared["old"] = UnpreparedRecord(at=old)
        for i in range(UNPREPARED_MAX + 10):
            state.unprepared[f"new-{i}"] = UnpreparedRecord(at=time.time())

    cp.change(fill)
    marks = Checkpoint(tmp_path / "checkpoint.json").state().unprepared
    assert "owed" in marks and "old" not in marks and len(marks) <= UNPREPARED_MAX + 1


def test_flags_at_their_default_are_not_in_the_file(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path / "checkpoint.json")
    cp.change(lambda s: s.claims.update(a=record("a", owed=False), b=record("b")))
    raw = (tmp_path / "checkpoint.json").read_text()
    assert raw.count("status_owed") == 1
    assert Checkpoint(tmp_path / "checkpoint.json").state().claims["b"].status_owed


def test_the_writer_tells_its_ledger_what_it_finished() -> None:
    api, ledger = API(fail=1), Ledger()
    writer = StatusWriter(api, DRIVER, ledger=ledger, settle_seconds=60.0)
    try:
        a = record("a", at=7.0)
        writer.write(ref(a), a)
        assert writer.flush(20.0)  # the 503 is retried, then the apply holds
        assert ledger.batches == [({"a": 7.0}, set())]
        writer.remove(ref(a))
        assert writer.flush(20.0)
        assert ledger.batches[-1] == ({}, {"a"})
        assert api.calls == [("apply", "c-a"), ("apply", "c-a"), ("remove", "c-a")]
    finally:
        writer.stop()


def test_a_removal_with_nothing_applied_is_settled_without_a_request() -> None:
    api, ledger = API(), Ledger()
    writer = StatusWriter(api, DRIVER, ledger=ledger, settle_seconds=60.0)
    try:
        writer.remove(ClaimRef(namespace="ns", name="c-x", uid="x"))  # not this process's
        assert writer.flush(10.0)
        assert api.calls == [("remove", "c-x")]
        a = record("a")
        writer.write(ref(a), a, resumed=False)
        writer.remove(ref(a))  # before the apply was sent: nothing of ours on the claim
        assert writer.flush(10.0)
        assert ({}, {"a"}) in ledger.batches
    finally:
        writer.stop()


def test_a_write_given_up_is_settled_too() -> None:
    api, ledger = API(fail=1, status=403), Ledger()
    writer = StatusWriter(api, DRIVER, ledger=ledger, settle_seconds=60.0)
    try:
        a = record("a", at=3.0)
        writer.write(ref(a), a)
        assert writer.flush(10.0)
        assert ledger.batches == [({"a": 3.0}, set())]
    finally:
        writer.stop()


def test_resume_queues_the_owed_work_and_nothing_else(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path / "checkpoint.json")
    api = API()
    writer = StatusWriter(api, DRIVER, ledger=owedstatus.CheckpointLedger(cp),
                          settle_seconds=60.0)
    try:
        assert owedstatus.resume(cp, writer) == (0, 0)
        assert writer.flush(5.0) and api.calls == []

        def owe(state: CheckpointState) -> None:
            state.claims["a"] = record("a")
            state.claims["b"] = record("b", owed=False)
            state.unprepared["m"] = UnpreparedRecord(at=time.time(), namespace="ns",
                                                     name="c-m", status_owed=True)

        cp.change(owe)
        assert owedstatus.resume(cp, writer) == (1, 1)
        assert writer.flush(10.0)
        assert sorted(api.calls) == [("apply", "c-a"), ("remove", "c-m")]
        state = cp.state()
        assert owedstatus.owed(state) == ([], [])
        # the resumed claim's history is unknown here: its removal is sent
        writer.remove(ref(state.claims["a"]))
        assert writer.flush(10.0) and api.calls[-1] == ("remove", "c-a")
    finally:
        writer.stop()
