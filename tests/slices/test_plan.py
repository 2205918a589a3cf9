"""plan_pool and plan_sync: the pure planning of the publisher (desired vs. existing slices)."""

from __future__ import annotations

from typing import Any

from drakit.discovery.model import Device, Pool
from drakit.plugin.slices.compare import content_key
from drakit.plugin.slices.plan import desired_state, plan_pool, plan_sync
from drakit.plugin.slices.rules import DRAKIT_DEFAULT


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


# -- plan_sync: the whole node's desired state against what is listed, with no server ------

def served(plans: list[Any]) -> list[dict[str, Any]]:
    """What a server would hold after the plans' creates (names and uids made up)."""
    return [{"metadata": {"name": f"s{i}", "uid": f"u{i}", "resourceVersion": "1"},
             "spec": full} for i, full in enumerate(c for p in plans for c in p.creates)]


def node_pools() -> list[Pool]:
    return [Pool(name="a", devices=[Device(name=f"d{i}") for i in range(200)]),
            Pool(name="b", devices=[Device(name="x")])]


def test_plan_sync_cold_then_unchanged_then_removed_pool() -> None:
    desired = desired_state(node_pools(), "d.example.com", "n1", DRAKIT_DEFAULT)
    cold = plan_sync(desired, [])
    assert [(p.pool, p.generation, len(p.creates)) for p in cold] == [("a", 1, 2), ("b", 1, 1)]
    assert all(c["pool"]["resourceSliceCount"] == len(p.creates) for p in cold
               for c in p.creates)
    listed = served(cold)
    again = plan_sync(desired, listed, generations={"a": 1, "b": 1})
    assert all(p.in_sync and p.writes == 0 for p in again)
    fewer = desired_state(node_pools()[:1], "d.example.com", "n1", DRAKIT_DEFAULT)
    [a, b] = plan_sync(fewer, listed)
    assert a.in_sync and a.writes == 0
    assert b.generation is None and [o["metadata"]["name"] for o in b.deletes] == ["s2"]


def test_plan_sync_protects_an_invalid_pool_and_resumes_remembered_generations() -> None:
    desired = desired_state(node_pools(), "d.example.com", "n1", DRAKIT_DEFAULT)
    listed = served(plan_sync(desired, []))
    broken = [node_pools()[0], Pool(name="b", devices=[Device(name="x")], all_nodes=True,
                                    per_device_node_selection=True)]  # two selections
    state = desired_state(broken, "d.example.com", "n1", DRAKIT_DEFAULT)
    assert state.protected == {"b"} and state.issues
    [_, b] = plan_sync(state, listed)
    assert b.in_sync and b.writes == 0           # its slice is left as it is
    # pool "a" deleted by someone else after this publisher wrote generation 5
    [a, _] = plan_sync(desired, [o for o in listed if o["spec"]["pool"]["name"] == "b"],
                       generations={"a": 5, "b": 1})
    assert a.generation == 6 and len(a.creates) == 2
