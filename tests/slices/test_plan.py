"""plan_pool: the pure planning step of the publisher (desired specs vs. existing slices)."""

from __future__ import annotations

from typing import Any

from drakit.plugin.slices.compare import content_key
from drakit.plugin.slices.plan import plan_pool


def spec(devices: list[str], node: str | None = "n1") -> dict[str, Any]:
    out: dict[str, Any] = {"driver": "d.example.com", "pool": {"name": "p",
                                                               "resourceSliceCount": 1},
                           "devices": [{"name": d} for d in devices]}
    if node is not None:
        out["nodeName"] = node
    return out


def existing(name: str, s: dict[str, Any], generation: int, count: int = 1) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": name, "resourceVersion": "1"},
            "spec": {**s, "pool": {**s["pool"], "generation": generation,
                                   "resourceSliceCount": count}}}


def plan(specs: list[dict[str, Any]] | None, objs: list[dict[str, Any]], **kw: Any) -> Any:
    return plan_pool("p", specs, lambda: [content_key(s) for s in specs or []], objs,
                     key_of=lambda o: content_key(o["spec"]), **kw)


def test_cold_pool_is_all_creates_at_generation_one() -> None:
    p = plan([spec(["a"]), spec(["b"])], [])
    assert not p.in_sync and p.generation == 1
    assert [c["pool"]["generation"] for c in p.creates] == [1, 1]
    assert p.updates == [] and p.deletes == []


def test_in_sync_pool_writes_nothing_unless_metadata_is_off() -> None:
    objs = [existing("s1", spec(["a"]), 4)]
    assert plan([spec(["a"])], objs).writes == 0
    p = plan([spec(["a"])], objs, metadata_ok=lambda _o: False)
    assert p.in_sync and p.generation == 4 and p.metadata_only == objs


def test_change_bumps_every_slice_above_seen_and_remembered() -> None:
    objs = [existing("s1", spec(["a"]), 2, count=2), existing("s2", spec(["b"]), 2, count=2)]
    p = plan([spec(["a"]), spec(["c"])], objs, remembered=6)
    assert p.generation == 7 and not p.creates and not p.deletes
    assert sorted(o["metadata"]["name"] for o, _ in p.updates) == ["s1", "s2"]
    assert {f["pool"]["generation"] for _, f in p.updates} == {7}


def test_left_over_slice_reused_only_with_the_same_node_name() -> None:
    objs = [existing("s1", spec(["a"], node="n1"), 1)]
    p = plan([spec(["a"], node=None)], objs)               # nodeName is immutable
    assert [o["metadata"]["name"] for o in p.deletes] == ["s1"] and len(p.creates) == 1


def test_pool_gone_deletes_unless_protected() -> None:
    objs = [existing("s1", spec(["a"]), 1)]
    assert plan(None, objs).deletes == objs
    assert plan(None, objs, protected=True).writes == 0
