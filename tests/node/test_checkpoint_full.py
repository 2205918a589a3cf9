"""A checkpoint on a full file system: a write that fails for want of room leaves the files
exactly as they were and raises CheckpointFullError; the next write once there is room
succeeds. Other write errors, and a part of a line that cannot be taken back, stay
CheckpointWriteError.

The real cases run on a tmpfs of 256 KiB mounted for the test (:mod:`fullfs`)."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fullfs import fill, mounted_tmpfs

import drakit.plugin.claims.checkpoint as checkpoint_module
import drakit.plugin.claims.checkpointlog as checkpointlog
from drakit.plugin.claims.checkpoint import (
    Checkpoint,
    CheckpointFullError,
    CheckpointWriteError,
    ClaimRecord,
)


def _rec(uid: str, size: int = 0) -> ClaimRecord:
    return ClaimRecord(uid=uid, namespace="ns", name=f"c-{uid}",
                       configs=[{"pad": "x" * size}] if size else [])


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs at ``tmp_path/fs``."""
    with mounted_tmpfs(tmp_path / "fs", "256k") as mnt:
        yield mnt


def _files(cp: Checkpoint) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(cp.path.parent.glob("checkpoint.json*"))}


def test_a_full_disk_fails_the_append_and_leaves_the_files_as_they_were(small_fs: Path) -> None:
    cp = Checkpoint(small_fs / "checkpoint.json")
    cp.change(lambda s: s.claims.__setitem__("a", _rec("a")))
    cp.change(lambda s: s.claims.__setitem__("b", _rec("b")))  # appended to the log
    before = _files(cp)
    filler = fill(small_fs)
    # a line of several pages: the first part fits the log's last page, the rest does not
    with pytest.raises(CheckpointFullError, match=r"checkpoint\.json\.1\.log: write failed: "
                                                  r"\[Errno 28\] No space left on device"):
        cp.change(lambda s: s.claims.__setitem__("big", _rec("big", 20000)))
    assert _files(cp) == before  # the part of the line that got in was taken back
    assert sorted(cp.claims()) == ["a", "b"]
    with pytest.raises(CheckpointFullError):
        cp.change(lambda s: s.claims.__setitem__("big", _rec("big", 9000)))
    assert _files(cp) == before
    assert sorted(Checkpoint(cp.path).claims()) == ["a", "b"]  # what another instance reads

    filler.unlink()  # room again: the next write goes through, on the same instance
    cp.change(lambda s: s.claims.__setitem__("big", _rec("big", 20000)))
    cp.change(lambda s: s.claims.pop("a"))
    assert sorted(cp.claims()) == ["b", "big"]
    assert sorted(Checkpoint(cp.path).claims()) == ["b", "big"]


def test_a_full_disk_fails_the_first_snapshot_and_a_compaction_alike(small_fs: Path) -> None:
    cp = Checkpoint(small_fs / "checkpoint.json")
    filler = fill(small_fs)
    with pytest.raises(CheckpointFullError, match=r"checkpoint\.json: write failed: "):
        cp.change(lambda s: s.claims.__setitem__("a", _rec("a", 5000)))
    assert not cp.path.exists() and not list(small_fs.glob(".checkpoint.json.*.tmp"))
    assert cp.claims() == {}
    filler.unlink()

    cp.change(lambda s: s.claims.__setitem__("a", _rec("a", 5000)))
    before = _files(cp)
    filler = fill(small_fs)
    with pytest.raises(CheckpointFullError):
        cp.compact()
    assert _files(cp) == before
    assert sorted(Checkpoint(cp.path).claims()) == ["a"]
    filler.unlink()
    cp.compact()
    assert sorted(_files(cp)) == ["checkpoint.json", "checkpoint.json.2.log",
                                  "checkpoint.json.lock"]
    assert sorted(Checkpoint(cp.path).claims()) == ["a"]


def test_a_line_written_whole_whose_sync_failed_for_room_is_taken_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cp = Checkpoint(tmp_path / "checkpoint.json")
    cp.change(lambda s: s.claims.__setitem__("a", _rec("a")))
    before = _files(cp)

    def sync_fails(fd: int) -> None:  # e.g. thin provisioning or NFS: ENOSPC at fdatasync
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpointlog.os, "fdatasync", sync_fails)
    with pytest.raises(CheckpointFullError):
        cp.change(lambda s: s.claims.__setitem__("b", _rec("b")))
    monkeypatch.undo()
    assert _files(cp) == before
    assert sorted(Checkpoint(cp.path).claims()) == ["a"]


def test_other_write_errors_and_a_part_not_taken_back_stay_write_errors(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cp = Checkpoint(tmp_path / "checkpoint.json")
    cp.change(lambda s: s.claims.__setitem__("a", _rec("a")))
    real_append = checkpointlog.append

    def failing_disk(fd: int, line: bytes) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(checkpointlog, "append", failing_disk)
    with pytest.raises(CheckpointWriteError, match=r"\[Errno 5\] Input/output error"):
        cp.change(lambda s: s.claims.__setitem__("b", _rec("b")))

    def full_after_the_whole_line(fd: int, line: bytes) -> None:
        os.write(fd, line)  # the line got in whole, then the sync failed ...
        raise OSError(errno.ENOSPC, "No space left on device")

    def truncate_fails(fd: int, length: int) -> None:  # ... and cannot be taken back
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(checkpointlog, "append", full_after_the_whole_line)
    monkeypatch.setattr(checkpoint_module.os, "ftruncate", truncate_fails)
    with pytest.raises(CheckpointWriteError, match="No space left on device"):
        cp.change(lambda s: s.claims.__setitem__("c", _rec("c")))
    monkeypatch.setattr(checkpointlog, "append", real_append)
    monkeypatch.undo()
    # the line nobody was told of is in the checkpoint: why this error stops background work
    cp.change(lambda s: s.claims.__setitem__("d", _rec("d")))
    assert sorted(Checkpoint(cp.path).claims()) == ["a", "c", "d"]
