"""The checkpoint's encoding: the file is byte for byte what encoding the whole document with
``json.dumps(sort_keys=True)`` gives, replaced records are re-encoded (records are frozen: a
change replaces them), a failed change leaves memory equal to the file, another instance's
change is always seen, and a file written by the previous version (a node upgraded in
place) is read."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from drakit.plugin.claims.checkpoint import (
    Checkpoint,
    CheckpointState,
    ClaimRecord,
    Encoder,
    PreparedDeviceRecord,
    UnpreparedRecord,
)

FIXTURES = Path(__file__).parent / "fixtures"


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _file_of(claims: dict[str, ClaimRecord], marks: dict[str, UnpreparedRecord] | None = None
             ) -> bytes:
    """The reference encoding of a whole snapshot naming log 1 (the slow way; fields added
    since version 2 are left out while they hold their default)."""
    body = {"claims": {k: _json(r) for k, r in claims.items()}, "log": 1,
            "unprepared": {k: _json(u) for k, u in (marks or {}).items()}}
    digest = hashlib.sha256(canonical(body).encode()).hexdigest()
    return canonical({"checksum": digest, **body, "version": 3}).encode()


def _content(raw: bytes) -> dict[str, Any]:
    """The records of a snapshot file."""
    doc = json.loads(raw)
    return {"claims": doc["claims"], "unprepared": doc.get("unprepared", {})}


def _json(rec: ClaimRecord | UnpreparedRecord) -> dict[str, Any]:
    later = {"status_owed": False, "namespace": None, "name": None}
    omit = type(rec).OMIT_WHEN_DEFAULT
    return {k: v for k, v in rec.model_dump(mode="json").items()
            if not (k in omit and later.get(k, object()) == v)}


def _with_state(rec: ClaimRecord, state: dict[str, Any]) -> ClaimRecord:
    return rec.model_copy(update={"devices": [
        rec.devices[0].model_copy(update={"state": state})]})

json_leaf = st.none() | st.booleans() | st.integers() | st.text(max_size=5) | st.floats()
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                  max_size=3),
    max_leaves=8,
)


def _record(uid: str, state: dict[str, Any] | None = None) -> ClaimRecord:
    return ClaimRecord(uid=uid, namespace="ns", name=f"c-{uid}", phase="PrepareCompleted",
                       devices=[PreparedDeviceRecord(request="r", pool="p", device=f"d-{uid}",
                                                     state=state or {})])


def _body_checksum(doc: dict[str, Any]) -> str:
    """The checksum of a snapshot document (its log's number included from version 3)."""
    body = {k: doc[k] for k in ("claims", "log", "unprepared") if k in doc}
    return hashlib.sha256(canonical(body).encode()).hexdigest()


def _expected(path: Path) -> bytes:
    """The file re-encoded the slow way (the reference format)."""
    doc = json.loads(path.read_bytes())
    return canonical(doc).encode()


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(max_size=6), json_value, max_size=4),
       st.dictionaries(st.text(max_size=6), json_value, max_size=4))
def test_encoder_matches_json_dumps(first: dict[str, Any], second: dict[str, Any]) -> None:
    enc = Encoder()
    recs = {"b": _record("b", first), "a\u00e9": _record("a", second)}
    assert enc.encode(CheckpointState(dict(recs)), log=1) == _file_of(recs)
    # A replaced record: the kept JSON of the old one must not be reused.
    recs["b"] = _with_state(recs["b"], {**second, "new": [1.5, None]})
    assert enc.encode(CheckpointState(dict(recs)), log=1) == _file_of(recs)


def test_records_are_frozen() -> None:
    rec = _record("u")
    with pytest.raises(ValidationError):
        rec.owner = "someone"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        rec.devices[0].state = {}  # type: ignore[misc]
    with pytest.raises(ValidationError):
        UnpreparedRecord(fingerprint="f").at = 1.0  # type: ignore[misc]


def test_non_finite_floats_are_told_apart() -> None:
    enc = Encoder()
    rec = _record("u", {"x": float("inf")})
    assert b"Infinity" in enc.encode(CheckpointState({"u": rec}), log=1)
    rec = _with_state(rec, {"x": None})
    assert enc.encode(CheckpointState({"u": rec}), log=1) == _file_of({"u": rec})
    rec = _with_state(rec, {"x": float("nan")})
    assert b"NaN" in enc.encode(CheckpointState({"u": rec}), log=1)


def test_file_is_canonical_after_updates(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path / "checkpoint.json")
    cp.load()
    for i in range(5):
        cp.change(lambda s, i=i: s.claims.__setitem__(f"uid-{i}", _record(f"uid-{i}")))
    assert cp.path.read_bytes() == _expected(cp.path)

    def mutate(c: dict[str, ClaimRecord]) -> None:
        c["uid-2"] = c["uid-2"].model_copy(update={"owner": "someone"})  # top level
        c["uid-3"] = _with_state(c["uid-3"], {"k": 1})                   # nested
        del c["uid-4"]

    cp.change(lambda s: mutate(s.claims))
    cp.compact()  # the log's lines into a new snapshot
    assert cp.path.read_bytes() == _expected(cp.path)
    fresh = Checkpoint(cp.path)
    fresh.load()
    got = fresh.claims()
    assert got["uid-2"].owner == "someone"
    assert got["uid-3"].devices[0].state == {"k": 1}
    assert "uid-4" not in got

    def marks(s: CheckpointState) -> None:
        s.unprepared["uid-4"] = UnpreparedRecord(fingerprint="f", at=1e12)

    cp.change(marks)
    cp.compact()
    assert cp.path.read_bytes() == _expected(cp.path)
    assert fresh.state().unprepared["uid-4"].fingerprint == "f"


def test_failed_change_leaves_memory_as_the_file(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path / "checkpoint.json")
    cp.load()
    cp.change(lambda s: s.claims.__setitem__("u", _record("u")))
    before = cp.path.read_bytes()

    def broken(c: dict[str, ClaimRecord]) -> None:
        c["u"] = _with_state(c["u"], {"x": 1}).model_copy(update={"owner": "half-done"})
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        cp.change(lambda s: broken(s.claims))
    assert cp.path.read_bytes() == before
    rec = cp.get("u")
    assert rec is not None and rec.owner is None and rec.devices[0].state == {}
    # The next write starts from the file's content, not from the half-done change.
    cp.change(lambda s: s.claims.__setitem__("v", _record("v")))
    fresh = Checkpoint(cp.path)
    fresh.load()
    assert fresh.claims()["u"].owner is None


@pytest.mark.parametrize("before,after", [(1.0, -0.0), (0.0, -0.0), (1.0, float("nan")),
                                          (float("inf"), float("nan"))])
def test_scalar_records_replaced(before: float, after: float) -> None:
    enc = Encoder()
    mark = UnpreparedRecord(fingerprint="f", at=before)
    enc.encode(CheckpointState({}, {"u": mark}), log=1)
    mark = mark.model_copy(update={"at": after})
    assert enc.encode(CheckpointState({}, {"u": mark}), log=1) == _file_of({}, {"u": mark})
    mark = mark.model_copy(update={"fingerprint": None})
    assert enc.encode(CheckpointState({}, {"u": mark}), log=1) == _file_of({}, {"u": mark})


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_another_instance_change_is_seen_in_any_chunk(tmp_path: Path, where: str) -> None:
    """The unchanged-file check looks at the file's inode, size and mtime only: a change
    of one record at the start, the middle or the end of a large file, and a file that only
    grew or shrank, are all seen by the other instance."""
    path = tmp_path / "checkpoint.json"
    a, b = Checkpoint(path), Checkpoint(path)
    uids = [f"uid-{i:04d}" for i in range(800)]
    a.change(lambda s: s.claims.update({u: _record(u) for u in uids}))
    assert path.stat().st_size > 3 * 64 * 1024
    assert len(b.claims()) == 800
    target = {"first": uids[0], "middle": uids[400], "last": uids[-1]}[where]
    a.change(lambda s: s.claims.__setitem__(target, _record(target, {"x": 1})))
    assert b.claims()[target].devices[0].state == {"x": 1}
    a.change(lambda s: s.claims.__setitem__("uid-9999", _record("uid-9999")))
    assert "uid-9999" in b.claims()
    a.change(lambda s: s.claims.pop(uids[-1]))
    assert uids[-1] not in b.claims() and len(b.claims()) == 800


def test_unchanged_file_is_not_parsed_again(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "checkpoint.json"
    a, b = Checkpoint(path), Checkpoint(path)
    a.change(lambda s: s.claims.update({u: _record(u) for u in ("u1", "u2")}))
    parses: list[int] = []
    real = Checkpoint._parse

    def counting(self: Checkpoint, raw: bytes) -> Any:
        parses.append(len(raw))
        return real(self, raw)

    monkeypatch.setattr(Checkpoint, "_parse", counting)
    for _ in range(3):
        assert set(b.claims()) == {"u1", "u2"}
        assert set(a.claims()) == {"u1", "u2"}
    assert len(parses) == 1  # b read a's write once; a knows its own write
    b.change(lambda s: s.claims.pop("u1"))  # one line appended to the log
    assert set(a.claims()) == {"u2"} and len(parses) == 1  # a reads that line alone
    b.compact()  # a new snapshot: read once by a
    assert set(a.claims()) == {"u2"} and len(parses) == 2
    assert set(a.claims()) == {"u2"} and len(parses) == 2


def test_file_in_another_layout_is_read_and_its_changes_seen(tmp_path: Path) -> None:
    """A valid file not in the canonical layout (e.g. pretty-printed by hand, edited in
    place) is read, and an edit of it in place is seen; the next change rewrites it in the
    canonical layout."""
    path = tmp_path / "checkpoint.json"
    Checkpoint(path).change(lambda s: s.claims.__setitem__("u1", _record("u1")))
    doc = json.loads(path.read_text())
    path.write_text(json.dumps(doc, indent=2))
    cp = Checkpoint(path)
    assert set(cp.claims()) == {"u1"}
    doc["claims"]["u1"]["name"] = "changed"
    doc["checksum"] = _body_checksum(doc)
    path.write_text(json.dumps(doc, indent=2))
    assert cp.claims()["u1"].name == "changed"
    cp.change(lambda s: s.claims.__setitem__("u2", _record("u2")))
    assert set(Checkpoint(path).claims()) == {"u1", "u2"}
    cp.compact()
    assert path.read_bytes() == _expected(path)
    assert set(Checkpoint(path).claims()) == {"u1", "u2"}


def test_same_size_edit_in_place_is_seen(tmp_path: Path) -> None:
    """An edit in place that keeps the size (same inode) is seen by its mtime."""
    path = tmp_path / "checkpoint.json"
    Checkpoint(path).change(lambda s: s.claims.__setitem__("u1", _record("u1")))
    cp = Checkpoint(path)
    assert cp.claims()["u1"].name == "c-u1"
    doc = json.loads(path.read_text())
    doc["claims"]["u1"]["name"] = "c-u9"
    doc["checksum"] = _body_checksum(doc)
    before = path.stat()
    with open(path, "r+b") as f:  # same inode, same size
        f.write(canonical(doc).encode())
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000))
    assert path.stat().st_ino == before.st_ino and path.stat().st_size == before.st_size
    assert cp.claims()["u1"].name == "c-u9"


def test_file_of_the_previous_version_is_read_and_rewritten(tmp_path: Path) -> None:
    """A checkpoint written by the code before records were frozen (commit 603dcd8, kept as
    a fixture) is read as it was, answers every field, and the next change keeps it."""
    path = tmp_path / "checkpoint.json"
    old = (FIXTURES / "checkpoint-v2-603dcd8.json").read_bytes()
    path.write_bytes(old)
    cp = Checkpoint(path)
    cp.load()
    state = cp.state()
    done = state.claims["11111111-2222-3333-4444-555555555555"]
    assert done.phase == "PrepareCompleted" and done.owner == "0123456789abcdef"
    assert done.configs[0]["opaque"]["parameters"] == {"sharing": {"strategy": "TimeSlicing"}}
    dev = done.devices[0]
    assert (dev.pool, dev.device, dev.consumed_capacity) == ("node-1", "gpu-0", {"memory": "4Gi"})
    assert dev.edits == {"env": ["DRAKIT_DEVICE_GPU_0=node-1/gpu-0"]}
    assert dev.status == {"data": {"\u00fc": "\u00df"}} and dev.state == {"x": 1}
    half = state.claims["66666666-7777-8888-9999-000000000000"]
    assert half.phase == "PrepareStarted" and half.devices[0].share_id == "abc"
    assert half.devices[0].admin_access is True and half.devices[0].request == "r/sub"
    assert state.unprepared["aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"].reservations == "c" * 32
    assert state.unprepared["bbbbbbbb-bbbb-cccc-dddd-eeeeeeeeeeee"].fingerprint is None
    # This version writes the same content (as a version 3 snapshot).
    assert _content(Encoder().encode(state, log=1)) == _content(old)
    cp.change(lambda s: s.claims.pop("66666666-7777-8888-9999-000000000000"))
    again = Checkpoint(path).state()
    assert set(again.claims) == {"11111111-2222-3333-4444-555555555555"}
    assert again.claims["11111111-2222-3333-4444-555555555555"] == done
    assert len(again.unprepared) == 2
