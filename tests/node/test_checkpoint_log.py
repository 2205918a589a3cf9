"""The checkpoint's snapshot and log: a write costs what it changes, the log survives kills
and torn tails, compaction and the migration from the single file are crash-safe, and two
instances see each other's changes through both."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

import drakit.plugin.claims.checkpoint as checkpoint_module
from drakit.plugin.claims.checkpoint import (
    Checkpoint,
    CheckpointError,
    CheckpointState,
    ClaimRecord,
    Encoder,
    PreparedDeviceRecord,
    UnpreparedRecord,
)

FIXTURES = Path(__file__).parent / "fixtures"


def rec(uid: str, name: str = "c") -> ClaimRecord:
    return ClaimRecord(uid=uid, namespace="ns", name=name, phase="PrepareCompleted",
                       devices=[PreparedDeviceRecord(request="r", pool="p", device=f"d-{uid}",
                                                     edits={"env": [f"A={uid}"]})])


def files(path: Path) -> list[str]:
    """The checkpoint's files in its directory (snapshot, logs, temp files), sorted."""
    return sorted(p.name for p in path.parent.iterdir()
                  if p.name.startswith((path.name, f".{path.name}"))
                  and not p.name.endswith(".lock"))


def put(r: ClaimRecord) -> Callable[[CheckpointState], None]:
    """A change that puts ``r`` under its UID."""
    return lambda state: state.claims.__setitem__(r.uid, r)


def held(n: int) -> dict[str, ClaimRecord]:
    return {f"uid-{i:04d}": rec(f"uid-{i:04d}") for i in range(n)}


def test_a_write_appends_only_what_it_changed(tmp_path: Path) -> None:
    """With 1,000 claims held, a change of one claim appends one line of about one record
    to the log, and the snapshot is not rewritten."""
    path = tmp_path / "checkpoint.json"
    cp = Checkpoint(path)
    cp.change(lambda s: s.claims.update(held(1000)))
    snapshot = path.stat()
    assert snapshot.st_size > 150_000
    one = len(json.dumps(rec("uid-0000").model_dump(mode="json")))
    log = cp.log_path(1)
    for change in (lambda s: s.claims.__setitem__("new", rec("new")),
                   lambda s: s.claims.__setitem__("uid-0500", rec("uid-0500", "renamed")),
                   lambda s: s.claims.pop("new")):
        before = log.stat().st_size
        cp.change(change)
        assert 0 < log.stat().st_size - before < one + 200
    assert path.stat().st_ino == snapshot.st_ino and path.stat().st_size == snapshot.st_size
    fresh = Checkpoint(path).claims()
    assert len(fresh) == 1000 and fresh["uid-0500"].name == "renamed" and "new" not in fresh
    assert files(path) == ["checkpoint.json", "checkpoint.json.1.log"]
    assert (log.stat().st_mode & 0o777) == 0o600


def test_a_change_of_nothing_writes_nothing(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path / "checkpoint.json")
    cp.change(lambda s: s.claims.__setitem__("u", rec("u")))
    writes, size = cp.writes, cp.log_path(1).stat().st_size
    cp.change(lambda s: s.claims.__setitem__("u", s.claims["u"]))  # the very same record
    assert (cp.writes, cp.log_path(1).stat().st_size) == (writes, size)


def test_a_batch_is_one_line_applied_whole(tmp_path: Path) -> None:
    """An unprepare's change (claim removed, mark added) is one line: a reader sees both or
    neither."""
    cp = Checkpoint(tmp_path / "checkpoint.json")
    cp.change(lambda s: s.claims.update(held(3)))

    def unprepare(s: CheckpointState) -> None:
        del s.claims["uid-0001"]
        s.unprepared["uid-0001"] = UnpreparedRecord(fingerprint="f", at=1e12)

    cp.change(unprepare)
    lines = cp.log_path(1).read_bytes().splitlines()
    assert len(lines) == 1
    payload = json.loads(lines[0].split(b" ", 1)[1])
    assert payload == {"claims": {"uid-0001": None},
                       "unprepared": {"uid-0001": {"at": 1e12, "fingerprint": "f",
                                                   "reservations": None}}}


def test_two_instances_follow_each_others_log_and_compactions(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    a, b = Checkpoint(path), Checkpoint(path)
    a.change(lambda s: s.claims.update(held(5)))
    assert len(b.claims()) == 5
    b.change(lambda s: s.claims.pop("uid-0000"))
    a.change(lambda s: s.claims.__setitem__("uid-0001", rec("uid-0001", "by-a")))
    assert "uid-0000" not in a.claims() and b.claims()["uid-0001"].name == "by-a"
    a.compact()
    assert files(path) == ["checkpoint.json", "checkpoint.json.2.log"]
    b.change(lambda s: s.claims.__setitem__("uid-0009", rec("uid-0009")))  # b catches up first
    assert set(a.claims()) == {f"uid-{i:04d}" for i in (1, 2, 3, 4, 9)}
    assert a.claims() == b.claims() == Checkpoint(path).claims()


def test_the_log_is_compacted_in_the_background_once_it_outgrew_the_snapshot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoint_module, "COMPACT_MIN_BYTES", 4096)
    path = tmp_path / "checkpoint.json"
    cp = Checkpoint(path)
    cp.change(lambda s: s.claims.update(held(2)))
    for i in range(40):
        cp.change(put(rec("uid-0001", f"n{i}")))
    cp.close()  # waits for a compaction in progress
    assert cp.compactions >= 1
    assert len(files(path)) == 2 and files(path)[0] == "checkpoint.json"
    assert Checkpoint(path).claims()["uid-0001"].name == "n39"


def test_a_torn_tail_is_ignored_and_never_appended_to(tmp_path: Path) -> None:
    """A kill during an append leaves part of a line: readers ignore it; the next write
    starts a new log rather than append after it."""
    path = tmp_path / "checkpoint.json"
    cp = Checkpoint(path)
    cp.change(lambda s: s.claims.update(held(2)))
    cp.change(lambda s: s.claims.pop("uid-0000"))
    log = cp.log_path(1)
    with open(log, "ab") as f:
        f.write(b'0123abcd {"claims":{"uid-0001":nu')
    other = Checkpoint(path)
    assert set(other.claims()) == {"uid-0001"}
    other.change(lambda s: s.claims.__setitem__("uid-0002", rec("uid-0002")))
    assert files(path) == ["checkpoint.json", "checkpoint.json.2.log"]
    assert set(cp.claims()) == {"uid-0001", "uid-0002"}
    # A whole last line that fails its checksum (power loss) is torn as well.
    with open(cp.log_path(2), "ab") as f:
        f.write(b"f" * 64 + b' {"claims":{},"unprepared":{}}\n')
    assert set(Checkpoint(path).claims()) == {"uid-0001", "uid-0002"}


def test_a_corrupt_line_before_valid_ones_is_an_error_and_left_untouched(
        tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    cp = Checkpoint(path)
    cp.change(lambda s: s.claims.update(held(1)))
    for i in range(3):
        cp.change(put(rec("uid-0000", f"n{i}")))
    log = cp.log_path(1)
    raw = bytearray(log.read_bytes())
    second = raw.index(b"\n") + 1
    raw[second + 70] ^= 1  # a bit flipped in the second of three lines
    log.write_bytes(bytes(raw))
    fresh = Checkpoint(path)
    with pytest.raises(CheckpointError, match=re.escape(f"{log}: line at byte {second}: ")):
        fresh.claims()
    assert fresh.error and str(log) in fresh.error
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        cp.load()  # reads everything again
    with pytest.raises(CheckpointError):
        cp.change(lambda s: s.claims.clear())
    assert log.read_bytes() == bytes(raw)


def test_a_missing_log_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    Checkpoint(path).change(lambda s: s.claims.update(held(1)))
    os.unlink(path.with_name("checkpoint.json.1.log"))
    with pytest.raises(CheckpointError, match=r"checkpoint\.json\.1\.log is missing"):
        Checkpoint(path).load()


def test_an_old_single_file_is_migrated_by_load(tmp_path: Path) -> None:
    """The checkpoint of the previous release (version 2: one file rewritten whole) is read
    and replaced by a version 3 snapshot of the same content with an empty log."""
    path = tmp_path / "checkpoint.json"
    old = (FIXTURES / "checkpoint-v2-603dcd8.json").read_bytes()
    path.write_bytes(old)
    want = Checkpoint(path).state()
    assert json.loads(Encoder().encode(want, log=1))["claims"] == json.loads(old)["claims"]
    cp = Checkpoint(path)
    cp.load()
    doc = json.loads(path.read_bytes())
    assert (doc["version"], doc["log"]) == (3, 1)
    assert files(path) == ["checkpoint.json", "checkpoint.json.1.log"]
    assert cp.log_path(1).read_bytes() == b""
    assert Checkpoint(path).state() == want
    cp.change(lambda s: s.claims.pop("66666666-7777-8888-9999-000000000000"))
    assert set(Checkpoint(path).claims()) == {"11111111-2222-3333-4444-555555555555"}


def test_an_old_single_file_is_migrated_by_the_first_change(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    path.write_bytes((FIXTURES / "checkpoint-v2-603dcd8.json").read_bytes())
    cp = Checkpoint(path)  # no load(): an instance that writes first
    cp.change(lambda s: s.claims.pop("66666666-7777-8888-9999-000000000000"))
    assert json.loads(path.read_bytes())["version"] == 3
    assert set(Checkpoint(path).claims()) == {"11111111-2222-3333-4444-555555555555"}
    assert len(Checkpoint(path).state().unprepared) == 2


# -- kill -9 at every step of a migration and of a compaction -------------------------------

#: Where the child kills itself: the functions of a compaction, in their order.
STEPS = ("create", "write", "replace", "fsync_dir", "unlink")

_CHILD = textwrap.dedent("""
    import os, signal, sys
    import drakit.cdi.atomic as atomic
    import drakit.plugin.claims.checkpoint as m
    from drakit.plugin.claims import checkpointlog
    path, step, action = sys.argv[1], sys.argv[2], sys.argv[3]

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    def before(owner, name):
        setattr(owner, name, lambda *a, **k: die())

    if step == "create":
        before(checkpointlog, "create")
    elif step == "write":  # half of the new snapshot's temp file written
        real_write = os.write
        def half(fd, data):
            real_write(fd, bytes(data)[: max(1, len(data) // 2)])
            die()
        os.write = half  # the first os.write of a compaction is the snapshot's
    elif step == "replace":
        before(os, "replace")
    elif step == "fsync_dir":
        before(atomic, "fsync_dir")
    elif step == "unlink":  # the old log's removal
        before(os, "unlink")
    cp = m.Checkpoint(path)
    if action == "load":
        cp.load()
    else:
        cp.compact()
    sys.exit(3)  # the step was never reached
""")


def _kill_at(path: Path, step: str, action: str) -> int:
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(path), step, action],
                          capture_output=True, timeout=60)
    return proc.returncode


@pytest.mark.parametrize("step", STEPS)
def test_a_kill_during_the_migration_loses_nothing(tmp_path: Path, step: str) -> None:
    path = tmp_path / "checkpoint.json"
    old = (FIXTURES / "checkpoint-v2-603dcd8.json").read_bytes()
    path.write_bytes(old)
    want = Checkpoint(path).state()
    code = _kill_at(path, step, "load")
    if step == "unlink":  # a migration has no old log to remove: it ran to its end
        assert code == 3
    else:
        assert code == -signal.SIGKILL
    assert Checkpoint(path).state() == want  # the old file, or the migrated one
    cp = Checkpoint(path)
    cp.load()  # finishes (or redoes) the migration, removes what the kill left
    assert json.loads(path.read_bytes())["version"] == 3
    assert files(path) == ["checkpoint.json", "checkpoint.json.1.log"]
    assert cp.state() == want


@pytest.mark.parametrize("step", STEPS)
def test_a_kill_during_a_compaction_loses_nothing(tmp_path: Path, step: str) -> None:
    path = tmp_path / "checkpoint.json"
    cp = Checkpoint(path)
    cp.change(lambda s: s.claims.update(held(50)))
    for i in range(10):
        cp.change(put(rec(f"uid-{i:04d}", f"n{i}")))
    cp.change(lambda s: s.claims.pop("uid-0049"))
    want = cp.state()
    cp.close()
    assert _kill_at(path, step, "compact") == -signal.SIGKILL
    assert Checkpoint(path).state() == want
    again = Checkpoint(path)
    again.load()
    assert again.state() == want
    again.change(lambda s: s.claims.__setitem__("after", rec("after")))
    assert set(Checkpoint(path).claims()) == set(want.claims) | {"after"}
    assert len([f for f in files(path) if f.endswith(".log")]) == 1
    assert not [f for f in files(path) if f.endswith(".tmp")]


def test_every_way_of_changing_the_maps_is_written(tmp_path: Path) -> None:
    """A write compares only the UIDs a change set or removed, through any dict method, or
    the whole map when the change put a map of its own in its place."""
    path = tmp_path / "checkpoint.json"
    cp = Checkpoint(path)
    cp.change(lambda s: s.claims.update(held(6)))
    cp.change(lambda s: s.claims.setdefault("sd", rec("sd")))
    cp.change(lambda s: s.claims.popitem())  # the last one put: "sd"
    cp.change(lambda s: s.claims.__delitem__("uid-0000"))
    cp.change(lambda s: s.claims.__ior__({"ior": rec("ior")}))

    def replace(s: CheckpointState) -> None:
        s.claims = {k: v for k, v in s.claims.items() if k != "uid-0001"}
        s.unprepared["m"] = UnpreparedRecord(fingerprint="f", at=1e12)

    cp.change(replace)
    want = {"uid-0002", "uid-0003", "uid-0004", "uid-0005", "ior"}
    assert set(Checkpoint(path).claims()) == want
    assert set(Checkpoint(path).state().unprepared) == {"m"}
    cp.change(lambda s: s.claims.clear())
    assert Checkpoint(path).claims() == {} and files(path)[-1] == "checkpoint.json.1.log"
