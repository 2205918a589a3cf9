"""SpecStore's conflict check with its per-file summary cache and in-flight reservations:
the rule (no qualified device name in two files of one directory) holds when foreign files
change, appear or vanish between writes, and for concurrent writes."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from cdi_helpers import env_device

import drakit.cdi.store as store_module
from drakit.cdi.errors import SpecConflictError
from drakit.cdi.store import SpecStore

UIDS = [f"c0ffee00-0000-4000-8000-{i:012d}" for i in range(8)]


@pytest.fixture
def store(tmp_path: Path) -> SpecStore:
    return SpecStore(tmp_path / "cdi", "k8s.gpu.example.com", "gpu")


def _foreign(store: SpecStore, name: str, *devices: str) -> Path:
    path = store.root_dir / name
    path.write_text(json.dumps({"cdiVersion": "0.3.0", "kind": store.kind,
                                "devices": [{"name": d} for d in devices]}))
    return path


def test_foreign_file_rewritten_in_place_is_read_again(store: SpecStore) -> None:
    store.write(UIDS[0], [env_device("a")])
    path = _foreign(store, "static.json", "x")
    with pytest.raises(SpecConflictError):
        store.write(UIDS[1], [env_device("x")])
    # Same size, new content: the stamp (mtime/ctime) differs, so it is parsed again.
    path.write_text(path.read_text().replace('"x"', '"w"'))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert store.write(UIDS[1], [env_device("x")]) == ["k8s.gpu.example.com/gpu=x"]
    with pytest.raises(SpecConflictError, match=r"static\.json"):
        store.write(UIDS[2], [env_device("w")])


def test_removed_and_added_files_are_seen(store: SpecStore) -> None:
    store.write(UIDS[0], [env_device("a")])
    with pytest.raises(SpecConflictError):
        store.write(UIDS[1], [env_device("a")])
    store.remove(UIDS[0])
    store.write(UIDS[1], [env_device("a")])
    _foreign(store, "late.yaml", "b")
    with pytest.raises(SpecConflictError, match=r"late\.yaml"):
        store.write(UIDS[2], [env_device("b")])


def test_parses_each_unchanged_file_once(store: SpecStore,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(4):
        store.write(UIDS[i], [env_device(f"d{i}")])
    reads: list[str] = []
    real = store_module.read_spec_summary

    def counting(path: Path) -> tuple[str, list[str]] | None:
        reads.append(path.name)
        return real(path)

    monkeypatch.setattr(store_module, "read_spec_summary", counting)
    store.write(UIDS[4], [env_device("d4")])
    store.write(UIDS[5], [env_device("d5")])
    # Unchanged files are not parsed again, nor the files this store wrote itself.
    assert reads == []
    _foreign(store, "static.json", "x")
    store.write(UIDS[6], [env_device("d6")])
    store.write(UIDS[7], [env_device("d7")])
    assert reads == ["static.json"]


def test_concurrent_writes_of_one_name_to_two_files(store: SpecStore,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Two claims race for the same device name: exactly one file defines it."""
    inside = threading.Event()
    release = threading.Event()
    real = store_module.atomic_write

    def slow(path: str | os.PathLike[str], data: bytes, mode: int = 0o644,
             **kw: bool) -> os.stat_result:
        inside.set()
        assert release.wait(10)
        return real(path, data, mode, **kw)

    monkeypatch.setattr(store_module, "atomic_write", slow)
    errors: list[BaseException] = []

    def first() -> None:
        try:
            store.write(UIDS[0], [env_device("shared")])
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    t = threading.Thread(target=first)
    t.start()
    assert inside.wait(10)
    try:
        with pytest.raises(SpecConflictError, match=store.path_for(UIDS[0]).name):
            store.write(UIDS[1], [env_device("shared")])
    finally:
        release.set()
        t.join(10)
    assert not errors
    assert store.exists(UIDS[0]) and not store.exists(UIDS[1])


def test_files_named_like_this_stores_are_not_statted_again(
        store: SpecStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write costs one scandir: this store's files are known by (name, inode) and only
    new entries and foreign files are stat'ed."""
    for i in range(5):
        store.write(UIDS[i], [env_device(f"d{i}")])
    _foreign(store, "static.json", "x")
    statted: list[str] = []
    real = store_module._stamp_of

    def counting(entry: os.DirEntry[str]) -> tuple[int, int, int, int, int] | None:
        statted.append(entry.name)
        return real(entry)

    monkeypatch.setattr(store_module, "_stamp_of", counting)
    store.write(UIDS[5], [env_device("d5")])
    store.write(UIDS[6], [env_device("d6")])
    own = {store.path_for(u).name for u in UIDS[:5]}
    assert not own.intersection(statted)
    assert statted.count("static.json") == 3  # first seen, then once per write
    # written by this store: known from the write itself
    assert store.path_for(UIDS[5]).name not in statted


def test_rewriting_a_claims_spec_keeps_its_names(store: SpecStore) -> None:
    store.write(UIDS[0], [env_device("a"), env_device("b")])
    store.write(UIDS[0], [env_device("a")])  # the old version's names are dropped ...
    store.write(UIDS[1], [env_device("b")])
    with pytest.raises(SpecConflictError):  # ... the new version's are kept
        store.write(UIDS[2], [env_device("a")])


def test_own_file_replaced_by_another_writer_is_read_again(store: SpecStore) -> None:
    """Another instance replacing a file of this store (atomic rename: a new inode) is
    seen, even with the same size."""
    store.write(UIDS[0], [env_device("a")])
    store.write(UIDS[1], [env_device("b")])
    path = store.path_for(UIDS[0])
    tmp = path.with_name(".replacement.tmp")
    tmp.write_text(path.read_text().replace("=a", "=z").replace('"a"', '"z"'))
    os.replace(tmp, path)
    with pytest.raises(SpecConflictError, match=path.name):
        store.write(UIDS[2], [env_device("z")])
    assert store.write(UIDS[2], [env_device("a")]) == ["k8s.gpu.example.com/gpu=a"]


def test_directories_and_dangling_links_are_ignored(store: SpecStore) -> None:
    store.write(UIDS[0], [env_device("a")])
    (store.root_dir / "dir.json").mkdir()
    (store.root_dir / "dangling.json").symlink_to(store.root_dir / "missing.json")
    link = store.root_dir / "link.yaml"
    target = _foreign(store, "target.txt", "t")
    link.symlink_to(target)
    with pytest.raises(SpecConflictError, match=r"link\.yaml"):
        store.write(UIDS[1], [env_device("t")])
    # A link is foreign: its target edited in place is seen.
    target.write_text(target.read_text().replace('"t"', '"u"'))
    st = target.stat()
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert store.write(UIDS[1], [env_device("t")])
