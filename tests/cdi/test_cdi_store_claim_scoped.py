"""SpecStore with claim-scoped names (drakit's agent: every CDI device name is
``<claimUID>-<device>``): the conflict rule still holds against every other file of the
directory, learnt through inotify (drakit.cdi.dirwatch), while the store's own files are
never read and a write does not list the directory once the watch is set up."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cdi_helpers import env_device

import drakit.cdi.store as store_module
from drakit.cdi.dirwatch import DirWatch
from drakit.cdi.errors import CDINameError, SpecConflictError
from drakit.cdi.store import SpecStore

UIDS = [f"c0ffee00-0000-4000-8000-{i:012d}" for i in range(64)]


@pytest.fixture
def store(tmp_path: Path) -> SpecStore:
    return SpecStore(tmp_path / "cdi", "k8s.gpu.example.com", "gpu", claim_scoped_names=True)


def dev(uid: str, name: str = "gpu-0") -> object:
    return env_device(f"{uid}-{name}")


def _foreign(store: SpecStore, name: str, *devices: str) -> Path:
    path = store.root_dir / name
    tmp = path.with_name(f".{name}.tmp")
    tmp.write_text(json.dumps({"cdiVersion": "0.3.0", "kind": store.kind,
                               "devices": [{"name": d} for d in devices]}))
    os.replace(tmp, path)
    return path


def test_names_must_begin_with_the_claim_uid(store: SpecStore) -> None:
    with pytest.raises(CDINameError, match="begin with the claim UID"):
        store.write(UIDS[0], [env_device("gpu-0")])
    with pytest.raises(CDINameError, match=UIDS[1]):
        store.write(UIDS[0], [dev(UIDS[1])])  # another claim's name
    assert store.write(UIDS[0], [dev(UIDS[0])]) == [f"k8s.gpu.example.com/gpu={UIDS[0]}-gpu-0"]


def test_foreign_files_appearing_changing_and_vanishing_are_seen(store: SpecStore) -> None:
    store.write(UIDS[0], [dev(UIDS[0])])  # the watch is set up at this first check
    path = _foreign(store, "static.json", f"{UIDS[1]}-gpu-0")
    with pytest.raises(SpecConflictError, match=r"static\.json"):
        store.write(UIDS[1], [dev(UIDS[1])])
    # Rewritten in place, same size: inotify says it changed.
    path.write_text(path.read_text().replace(f"{UIDS[1]}-gpu-0", f"{UIDS[2]}-gpu-0"))
    assert store.write(UIDS[1], [dev(UIDS[1])])
    with pytest.raises(SpecConflictError, match=r"static\.json"):
        store.write(UIDS[2], [dev(UIDS[2])])
    path.unlink()
    assert store.write(UIDS[2], [dev(UIDS[2])])


def test_own_files_are_never_read_and_the_directory_is_listed_once(
        store: SpecStore, monkeypatch: pytest.MonkeyPatch) -> None:
    store.write(UIDS[0], [dev(UIDS[0])])
    _foreign(store, "static.json", "other-device")
    reads: list[Path] = []
    real_read = store_module.read_spec_summary
    monkeypatch.setattr(store_module, "read_spec_summary",
                        lambda p: (reads.append(p), real_read(p))[1])
    listings: list[object] = []
    real_scandir = os.scandir
    monkeypatch.setattr(store_module.os, "scandir",
                        lambda *a: (listings.append(a), real_scandir(*a))[1])
    for uid in UIDS[1:]:
        store.write(uid, [dev(uid)])
    for uid in UIDS[1:32]:
        store.remove(uid)
    # The first write made the directory; the next check set the watch up and listed it,
    # once; every later check read only what inotify said changed.
    assert len(listings) == 1
    assert [p.name for p in reads] == ["static.json"]  # the foreign file, once


def test_a_replaced_directory_and_a_foreign_link_are_seen(store: SpecStore,
                                                          tmp_path: Path) -> None:
    store.write(UIDS[0], [dev(UIDS[0])])
    store.root_dir.rename(tmp_path / "old")  # the watch is lost with it
    store.root_dir.mkdir()
    _foreign(store, "static.json", f"{UIDS[1]}-gpu-0")
    with pytest.raises(SpecConflictError, match=r"static\.json"):
        store.write(UIDS[1], [dev(UIDS[1])])
    # A link's target edited outside the directory: no event here, its stamp tells.
    target = tmp_path / "target.json"
    target.write_text(json.dumps({"cdiVersion": "0.3.0", "kind": store.kind,
                                  "devices": [{"name": "nobody"}]}))
    (store.root_dir / "static.json").unlink()
    (store.root_dir / "link.json").symlink_to(target)
    assert store.write(UIDS[1], [dev(UIDS[1])])
    target.write_text(target.read_text().replace("nobody", f"{UIDS[2]}-gpu-0"))
    st = target.stat()
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    with pytest.raises(SpecConflictError, match=r"link\.json"):
        store.write(UIDS[2], [dev(UIDS[2])])


def test_dirwatch_says_unknown_until_it_can_say(tmp_path: Path) -> None:
    watch = DirWatch(tmp_path / "d")
    assert watch.changed() is None  # missing directory
    (tmp_path / "d").mkdir()
    assert watch.changed() is None  # first look after the watch was set up
    assert watch.changed() == set()
    (tmp_path / "d" / "a.json").write_text("{}")
    assert watch.changed() == {"a.json"}
    (tmp_path / "d").rename(tmp_path / "e")
    assert watch.changed() is None
    watch.close()


def test_a_closed_store_still_checks_by_listing(store: SpecStore) -> None:
    store.write(UIDS[0], [dev(UIDS[0])])
    store.write(UIDS[1], [dev(UIDS[1])])
    store.close()
    _foreign(store, "static.json", f"{UIDS[2]}-gpu-0")
    with pytest.raises(SpecConflictError, match=r"static\.json"):
        store.write(UIDS[2], [dev(UIDS[2])])
