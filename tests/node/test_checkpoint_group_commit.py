"""Group commit: changes queued while a write is in flight are applied in order and made
durable by one write; a failing change writes nothing for its caller only; a failed write
fails every caller of the batch."""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import ValidationError

import drakit.plugin.claims.checkpointlog as checkpointlog
from drakit.plugin.claims.checkpoint import Checkpoint, CheckpointFullError, ClaimRecord


def _rec(uid: str) -> ClaimRecord:
    return ClaimRecord(uid=uid, namespace="ns", name=f"c-{uid}")


def _wait_queued(cp: Checkpoint, n: int) -> None:
    deadline = time.monotonic() + 10
    while len(cp._queue) < n:
        assert time.monotonic() < deadline, "callers did not queue"
        time.sleep(0.005)


def _start(fn: Callable[[], None], errors: dict[str, BaseException], name: str) -> threading.Thread:
    def run() -> None:
        try:
            fn()
        except BaseException as e:
            errors[name] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_queued_changes_share_one_write(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path / "cp.json")
    cp.change(lambda s: s.claims.__setitem__("base", _rec("base")))
    gate, entered = threading.Event(), threading.Event()
    errors: dict[str, BaseException] = {}

    def first(c: dict[str, ClaimRecord]) -> None:
        entered.set()  # the first change is being committed: the others queue up
        assert gate.wait(10)
        c["first"] = _rec("first")

    def bad(c: dict[str, ClaimRecord]) -> None:
        c["base"] = c["base"].model_copy(update={"name": "half-done"})
        c.pop("first")
        raise RuntimeError("boom")

    def good(i: int) -> Callable[[dict[str, ClaimRecord]], None]:
        def change(c: dict[str, ClaimRecord]) -> None:
            assert "first" in c  # sees the earlier change
            c[f"g{i}"] = _rec(f"g{i}")
        return change

    threads = [_start(lambda: cp.change(lambda s: first(s.claims)), errors, "first")]
    assert entered.wait(10)
    writes = cp.writes
    threads.append(_start(lambda: cp.change(lambda s: bad(s.claims)), errors, "bad"))
    for i in range(4):
        threads.append(_start(lambda i=i: cp.change(lambda s: good(i)(s.claims)), errors, f"g{i}"))
    _wait_queued(cp, 5)
    gate.set()
    for t in threads:
        t.join(10)
    assert set(errors) == {"bad"} and isinstance(errors["bad"], RuntimeError)
    assert cp.writes - writes == 2  # "first" alone, then the five queued ones together
    fresh = Checkpoint(cp.path)
    fresh.load()
    for got in (fresh.claims(), cp.claims()):
        assert sorted(got) == ["base", "first", "g0", "g1", "g2", "g3"]
        assert got["base"].name == "c-base"


def test_failed_write_fails_the_whole_batch(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    cp = Checkpoint(tmp_path / "cp.json")
    cp.change(lambda s: s.claims.__setitem__("base", _rec("base")))
    log = cp.log_path(1)
    before = (cp.path.read_bytes(), log.read_bytes())
    gate = threading.Event()
    real = checkpointlog.append

    def failing_append(fd: int, line: bytes) -> None:
        assert gate.wait(10)
        real(fd, line[:7])  # part of the line got in before the disk filled up
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpointlog, "append", failing_append)
    errors: dict[str, BaseException] = {}
    threads = [_start(lambda i=i: cp.change(lambda s: s.claims.__setitem__(f"x{i}", _rec(f"x{i}"))),
                      errors, f"x{i}") for i in range(5)]
    _wait_queued(cp, 4)
    gate.set()
    for t in threads:
        t.join(10)
    assert len(errors) == 5 and all(isinstance(e, CheckpointFullError)
                                    for e in errors.values())
    assert "No space left on device" in str(errors["x0"])
    assert (cp.path.read_bytes(), log.read_bytes()) == before  # the part taken back
    assert sorted(cp.claims()) == ["base"]
    assert sorted(Checkpoint(cp.path).claims()) == ["base"]


def test_assigned_records_cannot_be_changed_by_the_caller(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path / "cp.json")
    rec = _rec("u")
    cp.change(lambda s: s.claims.__setitem__("u", rec))
    with pytest.raises(ValidationError):
        rec.name = "changed later"  # type: ignore[misc]
    got = cp.get("u")
    assert got is not None and got.name == "c-u"
    assert Checkpoint(cp.path).get("u") == got
