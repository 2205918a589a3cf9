"""A server without AllocatedDeviceStatus (Kubernetes 1.32 with the
DRAResourceClaimDeviceStatus feature gate at its default, off) takes the status apply and
drops ``status.devices``: the writer says so once, naming the server's version and the
field, and goes on preparing and writing."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from drakit.discovery.plugin import ClaimRef
from drakit.plugin.claims.checkpoint import ClaimRecord, PreparedDeviceRecord
from drakit.plugin.claims.status import StatusWriter
from drakit.plugin.events import RecordedEvents

DRIVER = "drv.example.com"


class DroppingAPI:
    """Answers every apply like kube-apiserver 1.32.13 with the gate off: accepted, and the
    returned claim has no status.devices (``kept`` False)."""

    def __init__(self, kept: bool | None) -> None:
        self.kept = kept
        self.applies: list[str] = []
        self.removes: list[str] = []

    def server_version(self) -> str:
        return "v1.32.13"

    def apply_claim_status_devices(self, namespace: str, name: str,
                                   entries: list[dict[str, Any]], field_manager: str,
                                   uid: str | None = None) -> bool | None:
        self.applies.append(name)
        return self.kept

    def remove_claim_status_devices(self, namespace: str, name: str, field_manager: str,
                                    uid: str | None = None) -> bool:
        self.removes.append(name)
        return True


def _claim(i: int) -> tuple[ClaimRef, ClaimRecord]:
    ref = ClaimRef(namespace="ns", name=f"c{i}", uid=f"u{i}")
    rec = ClaimRecord(uid=ref.uid, namespace="ns", name=ref.name, phase="PrepareCompleted",
                      devices=[PreparedDeviceRecord(request="r", pool="p", device=f"d{i}")])
    return ref, rec


def test_dropped_status_is_said_once_naming_version_and_field(
        caplog: pytest.LogCaptureFixture) -> None:
    api, events = DroppingAPI(kept=False), RecordedEvents()
    writer = StatusWriter(api, DRIVER, events=events)
    try:
        with caplog.at_level(logging.WARNING, logger="drakit.plugin.claims.status"):
            for i in range(3):
                ref, rec = _claim(i)
                writer.write(ref, rec)
                assert writer.flush(10)
                writer.remove(ref)
                assert writer.flush(10)
    finally:
        writer.stop()
    assert api.applies == ["c0", "c1", "c2"]  # it goes on: one apply per transition
    assert api.removes == ["c0", "c1", "c2"]
    said = events.named("status_unsupported")
    assert len(said) == 1
    message = said[0][0]
    assert "Kubernetes v1.32.13" in message and "status.devices" in message
    assert "DRAResourceClaimDeviceStatus" in message and "ns/c0" in message
    warnings = [r for r in caplog.records if "dropped status.devices" in r.getMessage()]
    assert len(warnings) == 1
    assert writer.failures == 0 and events.named("status_error") == []


@pytest.mark.parametrize("kept", [True, None], ids=["kept", "no-answer"])
def test_kept_status_says_nothing(kept: bool | None) -> None:
    api, events = DroppingAPI(kept=kept), RecordedEvents()
    writer = StatusWriter(api, DRIVER, events=events)
    try:
        ref, rec = _claim(0)
        writer.write(ref, rec)
        assert writer.flush(10)
    finally:
        writer.stop()
    assert api.applies == ["c0"]
    assert events.named("status_unsupported") == []
