"""The AllocatedDeviceStatus writer gives way to kubelet calls in flight: a write waits for a
moment without one, and never longer than ``defer_seconds`` after its claim was queued."""

from __future__ import annotations

import threading
import time
from typing import Any

from urllib3.exceptions import ProtocolError

from drakit.discovery.plugin import ClaimRef
from drakit.plugin.claims.checkpoint import ClaimRecord, PreparedDeviceRecord
from drakit.plugin.claims.inflight import KubeletCalls
from drakit.plugin.claims.status import StatusWriter


class RecordingAPI:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, float]] = []
        self.lock = threading.Lock()

    def apply_claim_status_devices(self, namespace: str, name: str,
                                   entries: list[dict[str, Any]], field_manager: str,
                                   uid: str | None = None) -> Any:
        with self.lock:
            self.calls.append(("apply", name, time.monotonic()))

    def remove_claim_status_devices(self, namespace: str, name: str, field_manager: str,
                                    uid: str | None = None) -> Any:
        with self.lock:
            self.calls.append(("remove", name, time.monotonic()))


def _claim(i: int) -> tuple[ClaimRef, ClaimRecord]:
    ref = ClaimRef(namespace="ns", name=f"c{i}", uid=f"u{i}")
    rec = ClaimRecord(uid=ref.uid, namespace="ns", name=ref.name, phase="PrepareCompleted",
                      devices=[PreparedDeviceRecord(request="r", pool="p", device=f"d{i}")])
    return ref, rec


def test_kubelet_calls_counts_and_wakes_waiters() -> None:
    calls = KubeletCalls()
    assert calls.wait_quiet(time.monotonic())  # nothing in flight
    entered, leave = threading.Event(), threading.Event()

    def call() -> None:
        with calls.call():
            entered.set()
            leave.wait(10)

    t = threading.Thread(target=call)
    t.start()
    assert entered.wait(10) and calls.in_flight == 1
    assert not calls.wait_quiet(time.monotonic() + 0.05)  # deadline passes first
    threading.Timer(0.05, leave.set).start()
    assert calls.wait_quiet(time.monotonic() + 10)
    t.join(10)
    assert calls.in_flight == 0


def test_write_waits_for_the_call_in_flight() -> None:
    api, calls = RecordingAPI(), KubeletCalls()
    writer = StatusWriter(api, "drv.example.com", calls=calls, defer_seconds=10.0)
    try:
        with calls.call():
            writer.write(*_claim(0))
            time.sleep(0.2)
            assert api.calls == []  # held back while the call runs
            ended = time.monotonic()
        assert writer.flush(10)
        assert [c[:2] for c in api.calls] == [("apply", "c0")]
        assert api.calls[0][2] >= ended
    finally:
        writer.stop()


def test_write_is_deferred_at_most_defer_seconds() -> None:
    """Under a steady stream of kubelet calls, status still goes out."""
    api, calls = RecordingAPI(), KubeletCalls()
    writer = StatusWriter(api, "drv.example.com", calls=calls, defer_seconds=0.2)
    try:
        with calls.call():
            queued = time.monotonic()
            writer.write(*_claim(0))
            writer.write(*_claim(1))
            deadline = time.monotonic() + 10
            while len(api.calls) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert [c[1] for c in api.calls] == ["c0", "c1"]
            assert api.calls[0][2] - queued >= 0.2
    finally:
        writer.stop()


def test_newest_state_wins_after_waiting() -> None:
    """A claim unprepared while its status write waited gets no request at all: nothing of
    ours was applied to it, so there is nothing to remove."""
    api, calls = RecordingAPI(), KubeletCalls()
    writer = StatusWriter(api, "drv.example.com", calls=calls, defer_seconds=10.0)
    try:
        with calls.call():
            ref, rec = _claim(0)
            writer.write(ref, rec)
            time.sleep(0.1)
            writer.remove(ref)
        assert writer.flush(10)
        assert api.calls == []
    finally:
        writer.stop()


def test_without_calls_nothing_waits() -> None:
    api = RecordingAPI()
    writer = StatusWriter(api, "drv.example.com")
    try:
        writer.write(*_claim(0))
        assert writer.flush(5)
        assert len(api.calls) == 1
    finally:
        writer.stop()


class FlakyAPI(RecordingAPI):
    """Fails the first ``failures`` applies of claim ``c0`` with a transient error."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def apply_claim_status_devices(self, namespace: str, name: str,
                                   entries: list[dict[str, Any]], field_manager: str,
                                   uid: str | None = None) -> Any:
        with self.lock:
            if name == "c0" and self.failures:
                self.failures -= 1
                self.calls.append(("failed", name, time.monotonic()))
                raise ProtocolError("connection reset")
        super().apply_claim_status_devices(namespace, name, entries, field_manager, uid)


def test_a_retry_waits_its_backoff_behind_the_claims_queued_after_it() -> None:
    """Claims go out in queue order; one whose apply failed is due again after its backoff,
    so the claims queued meanwhile go first, and its retries still come."""
    api = FlakyAPI(failures=2)
    writer = StatusWriter(api, "drv.example.com")
    try:
        for i in range(6):
            writer.write(*_claim(i))
        assert writer.flush(10)
        applied = [c[1] for c in api.calls if c[0] == "apply"]
        assert applied == ["c1", "c2", "c3", "c4", "c5", "c0"], api.calls
        assert [c[1] for c in api.calls if c[0] == "failed"] == ["c0", "c0"]
        assert writer.writes == 6 and writer.behind == 0
    finally:
        writer.stop()
