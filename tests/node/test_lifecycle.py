"""A claim's transitions as pure functions (drakit.plugin.claims.lifecycle): checkpoint
content + one event (plans, records, the owners known gone) in, the new content and a
decision per claim out; no files, no checkpoint."""

from __future__ import annotations

import random
from typing import Any, cast

import pytest

from drakit.discovery.plugin import ClaimRef
from drakit.plugin.claims.checkpoint import (
    CheckpointState,
    ClaimRecord,
    PreparedDeviceRecord,
    UnpreparedRecord,
)
from drakit.plugin.claims.lifecycle import (
    Admission,
    DeviceHolders,
    admit,
    adopt,
    complete,
    decide,
    device_holders,
    drop_recorded,
    drop_started,
    record,
    release,
    settle,
)
from drakit.plugin.claims.resourceclaim import AllocatedDevice, Plan, PlanItem

ME, OTHER = "me000000000000aa", "other0000000000b"
NOW = 1_800_000_000.0


def plan(uid: str, *devices: str, shareable: bool = False, admin: bool = False,
         fingerprint: str = "fp", reserved: bool = True, reservations: str | None = "r1") -> Plan:
    items = []
    for i, dev in enumerate(devices):
        alloc = AllocatedDevice(index=i, request=f"req-{i}", driver="d", pool="p", device=dev,
                                admin_access=admin)
        rec = PreparedDeviceRecord(request=alloc.request, pool="p", device=dev,
                                   admin_access=admin, cdi_name=f"{uid}-{dev}")
        items.append(PlanItem(alloc, cast(Any, None), cast(Any, None), shareable or admin, rec))
    return Plan(ClaimRef(namespace="ns", name=f"c-{uid}", uid=uid), fingerprint=fingerprint,
                reserved=reserved, reservations=reservations, configs=[], items=items)


def held(uid: str, *devices: str, phase: Any = "PrepareCompleted", owner: str = ME,
         admin: bool = False) -> ClaimRecord:
    return ClaimRecord(uid=uid, namespace="ns", name=f"c-{uid}", phase=phase, owner=owner,
                       devices=[PreparedDeviceRecord(request="r", pool="p", device=d,
                                                     admin_access=admin) for d in devices])


def decided(plans: list[Plan], claims: dict[str, ClaimRecord] | None = None,
            marks: dict[str, UnpreparedRecord] | None = None,
            dead: frozenset[str] = frozenset({OTHER})) -> Admission:
    """The decision, checked to be the same with a :class:`DeviceHolders` that saw an
    unrelated map first as without one."""
    got = decide(claims or {}, marks or {}, plans, ME, dead, NOW)
    holders = DeviceHolders()
    holders.of({"x": held("x", "d0", "d9")})
    assert decide(claims or {}, marks or {}, plans, ME, dead, NOW, holders) == got
    return got


def test_free_device_is_admitted_with_its_planned_record() -> None:
    got = decided([plan("a", "d0", "d1")])
    assert not got.refused and not got.already_completed
    rec = got.started["a"]
    assert (rec.phase, rec.owner, rec.prepared_at, rec.fingerprint) == (
        "PrepareStarted", ME, NOW, "fp")
    assert [d.device for d in rec.devices] == ["d0", "d1"]
    assert rec.devices[0].cdi_name == "a-d0"


def test_completed_claim_is_answered_from_its_record() -> None:
    done = held("a", "d0")
    got = decided([plan("a", "d0")], {"a": done})
    assert got.already_completed == {"a": done} and not got.started and not got.refused


def test_live_instance_preparing_refuses_and_a_dead_one_is_taken_over() -> None:
    theirs = {"a": held("a", "d0", phase="PrepareStarted", owner=OTHER)}
    refused = decided([plan("a", "d0")], theirs, dead=frozenset())
    assert "being prepared by another instance of this plugin" in refused.refused["a"]
    assert OTHER in refused.refused["a"] and not refused.started
    taken = decided([plan("a", "d0")], theirs)
    assert taken.started["a"].owner == ME


@pytest.mark.parametrize("mark,p,refused", [
    (UnpreparedRecord(fingerprint="fp", at=NOW), plan("a", "d0", reserved=False), True),
    (UnpreparedRecord(fingerprint=None, at=NOW), plan("a", "d0", reserved=False), True),
    (UnpreparedRecord(fingerprint="old", at=NOW), plan("a", "d0", reserved=False), False),
    (UnpreparedRecord(fingerprint="fp", at=NOW, reservations="r1"), plan("a", "d0"), True),
    (UnpreparedRecord(fingerprint="fp", at=NOW, reservations="r0"), plan("a", "d0"), False),
    (UnpreparedRecord(fingerprint="fp", at=NOW, reservations=None), plan("a", "d0"), False),
    (UnpreparedRecord(fingerprint="fp", at=NOW, reservations="r1"),
     plan("a", "d0", reservations=None), False),
])
def test_stale_prepare_rule(mark: UnpreparedRecord, p: Plan, refused: bool) -> None:
    got = decided([p], marks={"a": mark})
    assert ("a" in got.refused) is refused
    assert ("a" in got.started) is not refused
    if refused:
        assert "stale prepare" in got.refused["a"]
        assert "2027-01-15T08:00:00Z" in got.refused["a"]  # the mark's time, UTC


def test_busy_device_is_refused_unless_shareable_or_admin_access() -> None:
    claims = {"x": held("x", "d0")}
    busy = decided([plan("a", "d0")], claims)
    assert busy.refused["a"] == (
        "ResourceClaim ns/c-a: status.allocation.devices.results[0]: device p/d0 is still "
        "prepared for claim x; retry after it is unprepared")
    assert "a" in decided([plan("a", "d0", shareable=True)], claims).started
    assert "a" in decided([plan("a", "d0", admin=True)], claims).started
    # A device held with adminAccess does not make it busy; a started record does.
    assert "a" in decided([plan("a", "d0")], {"x": held("x", "d0", admin=True)}).started
    started = {"x": held("x", "d0", phase="PrepareStarted", owner=OTHER)}
    assert "a" in decided([plan("a", "d0")], started, dead=frozenset()).refused


def test_claims_of_one_call_count_for_each_other() -> None:
    got = decided([plan("a", "d0"), plan("b", "d0"), plan("c", "d1")])
    assert set(got.started) == {"a", "c"}
    assert "still prepared for claim a" in got.refused["b"]


def test_decide_reads_only_and_record_writes_the_decision() -> None:
    claims = {"x": held("x", "d9")}
    marks = {"a": UnpreparedRecord(fingerprint="old", at=NOW), "z": UnpreparedRecord(at=NOW)}
    before = (dict(claims), dict(marks))
    got = decided([plan("a", "d0")], claims, marks)
    assert (claims, marks) == before
    state = CheckpointState(dict(claims), dict(marks))
    record(state, got)
    assert state.claims == {"x": claims["x"], "a": got.started["a"]}
    assert state.unprepared == {"z": marks["z"]}  # the admitted claim's mark is cleared
    # Claims prepared before the write (no prepare hook) are recorded completed at once.
    done = got.started["a"].model_copy(update={"phase": "PrepareCompleted"})
    state = CheckpointState(dict(claims), dict(marks))
    record(state, Admission(completed_now={"a": done}))
    assert state.claims == {"x": claims["x"], "a": done} and "a" not in state.unprepared


def test_admit_records_a_built_completed_record_only_when_the_claim_is_admitted() -> None:
    """The one-write path: the caller's PrepareCompleted record of an admitted claim is
    recorded instead of PrepareStarted; a refused claim's built record is not recorded."""
    busy = {"x": held("x", "d1")}
    a, b = plan("a", "d0"), plan("b", "d1")
    built = {uid: p.started(ME, NOW).model_copy(update={"phase": "PrepareCompleted"})
             for uid, p in (("a", a), ("b", b))}
    state = CheckpointState(dict(busy), {"a": UnpreparedRecord(at=NOW - 1)})
    got = admit(state, [a, b, plan("c", "d2")], ME, frozenset(), NOW, completed_now=built)
    assert got.completed_now == {"a": built["a"]} and set(got.started) == {"c"}
    assert "still prepared for claim x" in got.refused["b"]
    assert state.claims == {"x": busy["x"], "a": built["a"], "c": got.started["c"]}
    assert state.unprepared == {}


def test_complete_and_drop_recorded() -> None:
    done = held("a")
    state = CheckpointState({"a": held("a", phase="PrepareStarted"),
                             "b": held("b", phase="PrepareStarted"), "c": held("c")})
    complete(state, {"a": done}, ["b"], ME)
    assert state.claims == {"a": done, "c": held("c")}
    # only a record still as the caller wrote it is dropped
    drop_recorded(state, {"a": done, "c": held("c", "d7")})
    assert state.claims == {"c": held("c")}


def test_release_drops_the_records_and_leaves_marks() -> None:
    a, s = held("a", "d0"), held("s", "d1", phase="PrepareStarted")
    a = a.model_copy(update={"fingerprint": "fa"})
    state = CheckpointState({"a": a, "s": s, "k": held("k")},
                            {"m": UnpreparedRecord(fingerprint="old", at=NOW - 5)})
    release(state, {"a": a, "s": s}, ["u", "k", "m"], NOW, {"a": "ra", "u": "ru"}, True)
    assert set(state.claims) == {"k"}
    assert state.unprepared["a"] == UnpreparedRecord(
        fingerprint="fa", at=NOW, reservations="ra", namespace="ns", name="c-a",
        status_owed=True)
    assert state.unprepared["s"].status_owed is False  # never completed: nothing applied
    assert state.unprepared["u"] == UnpreparedRecord(fingerprint=None, at=NOW,
                                                     reservations="ru")
    assert "k" not in state.unprepared  # a record by now: no mark
    assert state.unprepared["m"].fingerprint == "old"  # an existing mark is kept


def test_drop_started_drops_only_this_owners_started_records() -> None:
    state = CheckpointState({"a": held("a", phase="PrepareStarted"), "b": held("b"),
                             "c": held("c", phase="PrepareStarted", owner=OTHER)})
    drop_started(state, ["a", "b", "c", "missing"], ME)
    assert set(state.claims) == {"b", "c"}


def test_adopt_takes_only_started_records_of_owners_known_gone() -> None:
    gone, live = "gone000000000000", OTHER
    state = CheckpointState({
        "a": held("a", phase="PrepareStarted", owner=gone),
        "b": held("b", phase="PrepareStarted", owner=live),
        "c": held("c", owner=gone),  # completed: nothing to roll back
        "d": held("d", phase="PrepareStarted", owner=ME)})
    got = adopt(state, ["a", "b", "c", "d", "missing"], ME, frozenset({gone}))
    assert [r.uid for r in got] == ["a"] and state.claims["a"].owner == ME
    assert state.claims["b"].owner == live and state.claims["c"].owner == gone


def test_settle_clears_only_what_the_server_holds() -> None:
    rec = held("a", "d0").model_copy(update={"status_owed": True, "prepared_at": 2.0})
    state = CheckpointState({"a": rec}, {"m": UnpreparedRecord(at=NOW, status_owed=True)})
    assert settle(state, {"a": 1.0}, []) is False  # a newer prepare keeps its own flag
    assert settle(state, {"a": 2.0}, ["m"]) is True
    assert not state.claims["a"].status_owed and not state.unprepared["m"].status_owed


def test_device_holders_follow_a_changing_map_like_a_fresh_walk() -> None:
    """Records added, replaced (new objects, other devices), kept (same object) and removed,
    in random order: the kept-up-to-date holders always equal a walk over the map."""
    rnd = random.Random(7)
    holders = DeviceHolders()
    claims: dict[str, ClaimRecord] = {}
    for step in range(400):
        uid = f"u{rnd.randrange(12)}"
        if uid in claims and rnd.random() < 0.35:
            del claims[uid]
        elif rnd.random() < 0.8:
            devices = rnd.sample([f"d{i}" for i in range(6)], rnd.randrange(0, 3))
            claims[uid] = held(uid, *devices, admin=rnd.random() < 0.2)
        want = {k: list(v) for k, v in device_holders(claims).items()}
        got = {k: sorted(v) for k, v in holders.of(dict(claims)).items()}
        assert got == {k: sorted(v) for k, v in want.items()}, step


def test_any_other_holder_makes_a_device_busy() -> None:
    """Two records hold d0 (a state no admission makes, e.g. a hand-edited checkpoint): a
    claim that is one of them is still refused for the other."""
    claims = {"a": held("a", "d0", phase="PrepareStarted"), "b": held("b", "d0")}
    got = decided([plan("a", "d0")], claims)
    assert "still prepared for claim b" in got.refused["a"]
