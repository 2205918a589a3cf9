"""The checkpoint's incremental encoding: the file is byte for byte what encoding the whole
document with ``json.dumps(sort_keys=True)`` gives, records changed in place are re-encoded,
and a failed change leaves memory equal to the file."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drakit.plugin.canonical_json import CanonicalMapEncoder, canonical
from drakit.plugin.checkpoint import (
    Checkpoint,
    CheckpointState,
    ClaimRecord,
    PreparedDeviceRecord,
    UnpreparedRecord,
)

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


def _expected(path: Path) -> bytes:
    """The file re-encoded the slow way (the reference format)."""
    doc = json.loads(path.read_bytes())
    return canonical(doc).encode()


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(max_size=6), json_value, max_size=4),
       st.dictionaries(st.text(max_size=6), json_value, max_size=4))
def test_encoder_matches_json_dumps(first: dict[str, Any], second: dict[str, Any]) -> None:
    enc = CanonicalMapEncoder()
    recs = {"b": _record("b", first), "a\u00e9": _record("a", second)}
    want = canonical({k: r.model_dump(mode="json") for k, r in recs.items()})
    assert enc.encode(recs) == want.encode()
    # Changed in place: the cached fragment must not be reused.
    recs["b"].devices[0].state = dict(second)
    recs["b"].devices[0].state["new"] = [1.5, None]
    want = canonical({k: r.model_dump(mode="json") for k, r in recs.items()})
    assert enc.encode(recs) == want.encode()


def test_non_finite_floats_are_told_apart() -> None:
    enc = CanonicalMapEncoder()
    rec = _record("u", {"x": float("inf")})
    assert b"Infinity" in enc.encode({"u": rec})
    rec.devices[0].state["x"] = None
    assert enc.encode({"u": rec}) == canonical({"u": rec.model_dump(mode="json")}).encode()
    rec.devices[0].state["x"] = float("nan")
    assert b"NaN" in enc.encode({"u": rec})


def test_file_is_canonical_after_updates(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path / "checkpoint.json")
    cp.load()
    for i in range(5):
        cp.update(lambda c, i=i: c.__setitem__(f"uid-{i}", _record(f"uid-{i}")))
    assert cp.path.read_bytes() == _expected(cp.path)

    def mutate(c: dict[str, ClaimRecord]) -> None:
        c["uid-2"].owner = "someone"          # in place, top level
        c["uid-3"].devices[0].state["k"] = 1  # in place, nested
        del c["uid-4"]

    cp.update(mutate)
    assert cp.path.read_bytes() == _expected(cp.path)
    fresh = Checkpoint(cp.path)
    fresh.load()
    got = fresh.claims()
    assert got["uid-2"].owner == "someone"
    assert got["uid-3"].devices[0].state == {"k": 1}
    assert "uid-4" not in got

    def marks(s: CheckpointState) -> None:
        s.unprepared["uid-4"] = UnpreparedRecord(fingerprint="f", at=1e12)

    cp.update_state(marks)
    assert cp.path.read_bytes() == _expected(cp.path)
    assert fresh.state().unprepared["uid-4"].fingerprint == "f"


def test_failed_change_leaves_memory_as_the_file(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path / "checkpoint.json")
    cp.load()
    cp.update(lambda c: c.__setitem__("u", _record("u")))
    before = cp.path.read_bytes()

    def broken(c: dict[str, ClaimRecord]) -> None:
        c["u"].owner = "half-done"
        c["u"].devices[0].state["x"] = 1
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        cp.update(broken)
    assert cp.path.read_bytes() == before
    rec = cp.get("u")
    assert rec is not None and rec.owner is None and rec.devices[0].state == {}
    # The next write starts from the file's content, not from the half-done change.
    cp.update(lambda c: c.__setitem__("v", _record("v")))
    fresh = Checkpoint(cp.path)
    fresh.load()
    assert fresh.claims()["u"].owner is None


@pytest.mark.parametrize("before,after", [(1.0, -0.0), (0.0, -0.0), (1.0, float("nan")),
                                          (float("inf"), float("nan"))])
def test_scalar_records_changed_in_place(before: float, after: float) -> None:
    enc = CanonicalMapEncoder()
    mark = UnpreparedRecord(fingerprint="f", at=before)
    enc.encode({"u": mark})
    mark.at = after
    assert enc.encode({"u": mark}) == canonical({"u": mark.model_dump(mode="json")}).encode()
    mark.fingerprint = None
    assert enc.encode({"u": mark}) == canonical({"u": mark.model_dump(mode="json")}).encode()


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_another_instance_change_is_seen_in_any_chunk(tmp_path: Path, where: str) -> None:
    """The unchanged-file check reads only the checksum at the start of the file: a change
    of one record at the start, the middle or the end of a large file, and a file that only
    grew or shrank, are all seen by the other instance."""
    path = tmp_path / "checkpoint.json"
    a, b = Checkpoint(path), Checkpoint(path)
    uids = [f"uid-{i:04d}" for i in range(800)]
    a.update(lambda c: c.update({u: _record(u) for u in uids}))
    assert path.stat().st_size > 3 * 64 * 1024
    assert len(b.claims()) == 800
    target = {"first": uids[0], "middle": uids[400], "last": uids[-1]}[where]
    a.update(lambda c: c.__setitem__(target, _record(target, {"x": 1})))
    assert b.claims()[target].devices[0].state == {"x": 1}
    a.update(lambda c: c.__setitem__("uid-9999", _record("uid-9999")))
    assert "uid-9999" in b.claims()
    a.update(lambda c: c.pop(uids[-1]))
    assert uids[-1] not in b.claims() and len(b.claims()) == 800


def test_unchanged_file_is_not_parsed_again(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "checkpoint.json"
    a, b = Checkpoint(path), Checkpoint(path)
    a.update(lambda c: c.update({u: _record(u) for u in ("u1", "u2")}))
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
    b.update(lambda c: c.pop("u1"))
    assert set(a.claims()) == {"u2"} and len(parses) == 2


def test_file_in_another_layout_is_read_and_its_changes_seen(tmp_path: Path) -> None:
    """A valid file not in the canonical layout (e.g. pretty-printed by hand) has no
    identifying first bytes: it is parsed at every access until this module rewrites it."""
    path = tmp_path / "checkpoint.json"
    Checkpoint(path).update(lambda c: c.__setitem__("u1", _record("u1")))
    doc = json.loads(path.read_text())
    path.write_text(json.dumps(doc, indent=2))
    cp = Checkpoint(path)
    assert set(cp.claims()) == {"u1"}
    doc["claims"]["u1"]["name"] = "changed"
    doc["checksum"] = hashlib.sha256(json.dumps(
        {"claims": doc["claims"], "unprepared": doc["unprepared"]}, sort_keys=True,
        separators=(",", ":")).encode()).hexdigest()
    path.write_text(json.dumps(doc, indent=2))
    assert cp.claims()["u1"].name == "changed"
    cp.update(lambda c: c.__setitem__("u2", _record("u2")))
    assert path.read_bytes().startswith(b'{"checksum":"')
    assert set(Checkpoint(path).claims()) == {"u1", "u2"}
