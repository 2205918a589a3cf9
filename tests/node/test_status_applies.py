"""One status apply per claim transition at most: queued states of a claim
coalesce, and a removal is only sent when an apply of ours may have reached the claim."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes.client import ApiException

from drakit.discovery.plugin import ClaimRef
from drakit.plugin.claims.checkpoint import ClaimRecord, PreparedDeviceRecord
from drakit.plugin.claims.inflight import KubeletCalls
from drakit.plugin.claims.status import StatusWriter

DRIVER = "drv.example.com"
Writers = Callable[..., StatusWriter]


class ScriptedAPI:
    """Records every call as (verb, claim name, devices applied); the first ``fail`` calls
    raise a 503 (which the server may still have applied)."""

    def __init__(self, fail: int = 0) -> None:
        self.calls: list[tuple[str, str, list[str]]] = []
        self.fail = fail
        self.lock = threading.Lock()
        self.hold = threading.Event()     # cleared: a call waits (in flight) until set
        self.hold.set()
        self.entered = threading.Event()  # set once a call is in flight

    def _call(self, verb: str, name: str, entries: list[dict[str, Any]]) -> None:
        with self.lock:
            self.calls.append((verb, name, [e["device"] for e in entries]))
        self.entered.set()
        self.hold.wait(10)
        with self.lock:
            if self.fail:
                self.fail -= 1
                raise ApiException(status=503, reason="Service Unavailable")

    def apply_claim_status_devices(self, namespace: str, name: str,
                                   entries: list[dict[str, Any]], field_manager: str,
                                   uid: str | None = None) -> Any:
        self._call("apply", name, entries)

    def remove_claim_status_devices(self, namespace: str, name: str, field_manager: str,
                                    uid: str | None = None) -> Any:
        self._call("remove", name, [])


def _claim(*devices: str, status: dict[str, Any] | None = None) -> tuple[ClaimRef, ClaimRecord]:
    ref = ClaimRef(namespace="ns", name="c0", uid="u0")
    rec = ClaimRecord(uid=ref.uid, namespace="ns", name=ref.name, phase="PrepareCompleted",
                      devices=[PreparedDeviceRecord(request="r", pool="p", device=d,
                                                    status=status) for d in devices])
    return ref, rec


@pytest.fixture
def writers() -> Iterator[Writers]:
    """make(api, **StatusWriter kwargs) → a running writer, stopped after the test."""
    made: list[StatusWriter] = []

    def make(api: ScriptedAPI, **kwargs: Any) -> StatusWriter:
        made.append(StatusWriter(api, DRIVER, **kwargs))
        return made[-1]

    yield make
    for writer in made:
        writer.stop()


def _prepared_then_unprepared(writer: StatusWriter, ref: ClaimRef, rec: ClaimRecord) -> None:
    """What the node service asks of the writer for one claim, each state flushed."""
    writer.write(ref, rec)
    assert writer.flush(10)
    writer.remove(ref)
    assert writer.flush(10)


def test_prepare_then_unprepare_is_one_apply_each(writers: Writers) -> None:
    api = ScriptedAPI()
    writer = writers(api)
    _prepared_then_unprepared(writer, *_claim("d0"))
    assert api.calls == [("apply", "c0", ["d0"]), ("remove", "c0", [])]


def test_queued_writes_of_one_claim_coalesce_to_the_newest(writers: Writers) -> None:
    api, calls = ScriptedAPI(), KubeletCalls()
    writer = writers(api, calls=calls, defer_seconds=10.0)
    with calls.call():  # the worker holds every write while a kubelet call runs
        for devices in (["d0"], ["d0", "d1"], ["d2"]):
            writer.write(*_claim(*devices))
        assert writer.behind == 1
    assert writer.flush(10)
    assert api.calls == [("apply", "c0", ["d2"])]


def test_no_removal_for_a_claim_whose_status_was_never_applied(writers: Writers) -> None:
    """Every entry invalid: neither the prepare nor the unprepare sends anything."""
    api = ScriptedAPI()
    writer = writers(api)
    # data not a JSON object (an older drakit's checkpoint): the entry is left out
    _prepared_then_unprepared(writer, *_claim("d0", status={"data": [1]}))
    assert api.calls == []


def test_a_claim_not_prepared_by_this_process_is_always_cleaned(writers: Writers) -> None:
    """After a restart the writer has not seen the claim: its removal is sent."""
    api = ScriptedAPI()
    writer = writers(api)
    writer.remove(ClaimRef(namespace="ns", name="c0", uid="u0"))
    assert writer.flush(10)
    assert api.calls == [("remove", "c0", [])]


def test_a_failed_apply_counts_as_sent(writers: Writers) -> None:
    """A 503 may come after the server applied: the unprepare still removes."""
    api = ScriptedAPI(fail=1)
    api.hold.clear()  # the first apply waits in flight until the unprepare is queued
    writer = writers(api)
    ref, rec = _claim("d0")
    writer.write(ref, rec)
    assert api.entered.wait(10)
    writer.remove(ref)
    api.hold.set()
    assert writer.flush(10)
    assert api.calls == [("apply", "c0", ["d0"]), ("remove", "c0", [])]


def test_a_write_after_the_removal_was_sent_is_applied_again(writers: Writers) -> None:
    api = ScriptedAPI()
    writer = writers(api)
    ref, rec = _claim("d0")
    _prepared_then_unprepared(writer, ref, rec)
    _prepared_then_unprepared(writer, ref, rec)  # prepared again (same claim UID)
    assert [c[0] for c in api.calls] == ["apply", "remove", "apply", "remove"]
