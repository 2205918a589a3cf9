"""The prepared-claims checkpoint: atomic, versioned, checksummed, never silently reset."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from drakit.plugin.claims.checkpoint import (
    Checkpoint,
    CheckpointError,
    ClaimRecord,
    PreparedDeviceRecord,
)


def rec(uid: str) -> ClaimRecord:
    return ClaimRecord(
        uid=uid,
        namespace="ns",
        name="c",
        phase="PrepareCompleted",
        devices=[PreparedDeviceRecord(request="r", pool="p", device="d")],
    )


def test_roundtrip_and_mode(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path / "checkpoint.json")
    cp.load()
    cp.change(lambda s: s.claims.__setitem__("u1", rec("u1")))
    assert (os.stat(tmp_path / "checkpoint.json").st_mode & 0o777) == 0o600
    again = Checkpoint(tmp_path / "checkpoint.json")
    again.load()
    assert again.get("u1") == rec("u1")
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_two_instances_see_each_others_changes(tmp_path: Path) -> None:
    a = Checkpoint(tmp_path / "cp.json")
    b = Checkpoint(tmp_path / "cp.json")
    a.change(lambda s: s.claims.__setitem__("u1", rec("u1")))
    b.change(lambda s: s.claims.__setitem__("u2", rec("u2")))
    assert set(a.claims()) == {"u1", "u2"}
    b.change(lambda s: s.claims.pop("u1"))
    assert set(a.claims()) == {"u2"}


@pytest.mark.parametrize("content", [b"{not json", b"[]", b'{"version": 99, "claims": {}}'])
def test_corrupt_file_is_an_error_and_left_untouched(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "cp.json"
    path.write_bytes(content)
    cp = Checkpoint(path)
    with pytest.raises(CheckpointError, match=str(path)):
        cp.load()
    assert cp.error
    with pytest.raises(CheckpointError):
        cp.change(lambda s: s.claims.__setitem__("u1", rec("u1")))
    assert path.read_bytes() == content


def test_checksum_mismatch_detected(tmp_path: Path) -> None:
    path = tmp_path / "cp.json"
    cp = Checkpoint(path)
    cp.change(lambda s: s.claims.__setitem__("u1", rec("u1")))
    doc = json.loads(path.read_text())
    doc["claims"]["u1"]["name"] = "tampered"
    path.write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        Checkpoint(path).load()


def test_recovers_when_file_is_fixed(tmp_path: Path) -> None:
    path = tmp_path / "cp.json"
    path.write_text("garbage")
    cp = Checkpoint(path)
    with pytest.raises(CheckpointError):
        cp.load()
    path.unlink()
    assert cp.claims() == {}
    assert cp.error is None


def test_failed_change_writes_nothing(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path / "cp.json")
    cp.change(lambda s: s.claims.__setitem__("u1", rec("u1")))

    def boom(c: dict[str, ClaimRecord]) -> None:
        c.pop("u1")
        raise RuntimeError("x")

    with pytest.raises(RuntimeError):
        cp.change(lambda s: boom(s.claims))
    assert set(cp.claims()) == {"u1"}
