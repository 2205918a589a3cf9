"""The node agent under API faults injected by the embedded API server (500s, 409s, 429s
with Retry-After, dropped connections, added latency).

- About 20 % faults: every prepare answers per claim (success or an error naming the
  claim), the kubelet's retries get every claim prepared, the gRPC server keeps answering,
  AllocatedDeviceStatus writes land or are given up with a counted error.
- ResourceSlices converge to the inventory once faults stop, whatever happened meanwhile.
- No hot loop: with every request failing, the requests in a fixed window stay bounded.
- Retry-After is honoured: the next request of the same kind comes no earlier.

Figures (request counts, Retry-After gaps) are printed with ``-s``; the assertions use
generous bounds (noisy machines) that a hot loop or an ignored Retry-After would still break.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from reliability_helpers import tree

from drakit.plugin.testing.apiserver import FaultPlan
from drakit.plugin.testing.apiserver.requestlog import RequestRecord
from drakit.plugin.testing.harness import DriverHarness

TWENTY_PERCENT: dict[str, Any] = dict(
    error_rate=0.06, conflict_rate=0.05, throttle_rate=0.04, drop_rate=0.05,
    retry_after_seconds=0, latency_seconds=0.002)
"""Injected faults on every resource: 20 % of the requests (409s only on writes)."""


@pytest.fixture
def h(agent: DriverHarness) -> Iterator[DriverHarness]:
    """The module's agent, with its slices converged before each test and faults switched
    off again after it (a failed test leaves neither to the next one)."""
    agent.wait_for(lambda: set(_published(agent)) == _inventory(agent), 60,
                   "ResourceSlices to hold the inventory")
    try:
        yield agent
    finally:
        agent.apiserver.set_faults(None)


def _inventory(h: DriverHarness) -> set[tuple[str, str]]:
    return {(p.name, d.name) for p in h.app.inventory.pools() for d in p.devices}


def _published(h: DriverHarness) -> list[tuple[str, str]]:
    return h.devices()


def _status_entries(h: DriverHarness, claim: dict[str, Any]) -> list[dict[str, Any]]:
    got = h.claim(claim) or {}
    return [d for d in (got.get("status") or {}).get("devices") or []
            if d.get("driver") == h.driver_name]


def _cycle(h: DriverHarness, cycle: int, devices: list[tuple[str, str]],
           stats: Counter[str]) -> None:
    """One kubelet-like cycle under faults: prepare 8 new claims (two per call, retrying
    failed ones like the kubelet), wait for their status, unprepare them."""
    claims = [h.allocate(f"faulty-{cycle}-{i}", [d]) for i, d in enumerate(devices)]
    uids = {c["metadata"]["uid"]: c for c in claims}
    failures_before = h.app.status.failures
    prepared: set[str] = set()
    rounds = 0
    while len(prepared) < len(claims) and rounds < 15:
        rounds += 1
        pending = [c for uid, c in uids.items() if uid not in prepared]
        for pair in (pending[i:i + 2] for i in range(0, len(pending), 2)):  # two per "pod"
            answer = h.prepare(*pair)  # a gRPC failure would raise here
            assert set(answer) == {c["metadata"]["uid"] for c in pair}
            for c in pair:
                uid, meta = c["metadata"]["uid"], c["metadata"]
                if answer[uid].error:
                    assert answer[uid].error.startswith(
                        f"ResourceClaim {meta['namespace']}/{meta['name']}: "), answer[uid].error
                    assert "\n" not in answer[uid].error
                    stats["per-claim errors"] += 1
                else:
                    assert answer[uid].cdi_device_ids
                    prepared.add(uid)
    assert len(prepared) == len(claims), f"cycle {cycle}: not prepared after {rounds} rounds"
    stats["rounds"] = max(stats["rounds"], rounds)
    # status writes (background, retrying) land or are given up and counted
    assert h.app.status.flush(timeout=90)
    missing = [uid for uid, c in uids.items() if not _status_entries(h, c)]
    given_up = h.app.status.failures - failures_before
    assert len(missing) <= given_up, (missing, given_up)
    stats["status landed"] += len(claims) - len(missing)
    stats["status given up"] += given_up
    # unprepare under faults: from the checkpoint, never needs the API to answer
    for c in claims:
        assert h.unprepare(c) == {c["metadata"]["uid"]: ""}
    stats["claims"] += len(claims)


def test_prepare_under_20_percent_faults(h: DriverHarness) -> None:
    devices = _published(h)[:8]
    h.apiserver.clear_requests()
    h.apiserver.set_faults(FaultPlan(seed=11, **TWENTY_PERCENT))
    stats: Counter[str] = Counter()
    for cycle in range(5):
        _cycle(h, cycle, devices, stats)
    injected = h.apiserver.faults_injected
    records = h.apiserver.requests()
    h.apiserver.set_faults(None)
    print(f"\nunder 20% faults: {dict(stats)}; {injected} faults injected in "
          f"{len(records)} API requests ({100 * injected / max(1, len(records)):.0f} %)")
    assert injected >= 10
    assert h.app.status.flush(timeout=90)
    assert not [r for r in h.app.checkpoint.claims().values()
                if r.phase in ("PrepareStarted", "PrepareCompleted")]
    assert h.cdi_files() == []
    assert h.app.server.running
    # still answering normally
    again = h.allocate("after-faults", [devices[0]])
    assert not h.prepare(again)[again["metadata"]["uid"]].error
    assert h.unprepare(again) == {again["metadata"]["uid"]: ""}


def test_slices_converge_after_faults(h: DriverHarness) -> None:
    want = _inventory(h)
    assert set(_published(h)) == want
    # every slice request fails (a mix of 500, 409, 429, dropped connections) while someone
    # deletes one of our slices, edits another and adds a stray one
    h.apiserver.set_faults(FaultPlan(
        seed=5, error_rate=0.3, conflict_rate=0.2, throttle_rate=0.2, drop_rate=0.3,
        retry_after_seconds=0, resources=frozenset({"resourceslices"})))
    slices = h.slices()
    deleted = slices[0]["metadata"]["name"]
    h.apiserver.delete_object("resourceslices", deleted)
    # slice names are random, so which one holds devices (not only shared counters) varies
    editable = [s for s in slices[1:] if s["spec"].get("devices")]
    if editable:
        edited = editable[0]
        edited["spec"]["devices"] = edited["spec"]["devices"][1:]
        h.apiserver.update_object("resourceslices", edited)
    stray = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": "stray-slice"},
        "spec": {"driver": h.driver_name, "nodeName": h.node_name,
                 "pool": {"name": h.node_name, "generation": 0, "resourceSliceCount": 1},
                 "devices": [{"name": "ghost"}]},
    }
    h.apiserver.create_object("resourceslices", stray)
    h.app.publisher.trigger()
    h.wait_for(lambda: h.apiserver.faults_injected >= 5, 30, "the publisher to hit faults")
    assert set(_published(h)) != want  # nothing could be repaired yet
    injected = h.apiserver.faults_injected
    h.apiserver.set_faults(None)
    started = time.monotonic()
    h.wait_for(lambda: sorted(_published(h)) == sorted(want), 60,
               "ResourceSlices to converge to the inventory")
    print(f"\nslices converged {time.monotonic() - started:.1f}s after faults stopped "
          f"({injected} faults injected meanwhile)")
    # the stray slice is gone or was re-used for our devices (no "ghost" left)
    assert all(d["name"] != "ghost" for s in h.slices() for d in s["spec"].get("devices", []))
    gens = {s["spec"]["pool"]["generation"] for s in h.slices()}
    counts = {s["spec"]["pool"]["resourceSliceCount"] for s in h.slices()}
    assert len(gens) == 1 and counts == {len(h.slices())}


def _window(records: list[RequestRecord], start: float, end: float) -> list[RequestRecord]:
    return [r for r in records if start <= r.received_at < end]


def test_no_hot_loop_when_every_request_fails(h: DriverHarness) -> None:
    window = 6.0
    dev = _published(h)[0]
    claim = h.allocate("hot-loop", [dev])
    h.apiserver.set_faults(FaultPlan(error_rate=0.5, drop_rate=0.5))
    start = time.monotonic()
    h.apiserver.delete_object("resourceslices", h.slices()[0]["metadata"]["name"])
    h.app.publisher.trigger()
    answer = h.prepare(claim)[claim["metadata"]["uid"]]
    assert "cannot read it from the API" in answer.error
    time.sleep(max(0.0, start + window - time.monotonic()))
    records = _window(h.apiserver.requests(), start, start + window)
    h.apiserver.set_faults(None)
    by_kind = Counter(f"{r.verb} {r.full_resource}" for r in records)
    print(f"\nrequests in {window:.0f}s with every request failing: {len(records)} "
          f"({dict(by_kind)})")
    # The publisher's backoff (0.2 s doubling, then >= 1 s between syncs), the watch backoff
    # and urllib3's 3 retries of a dropped GET bound this to a few dozen; a hot loop makes
    # thousands.
    assert len(records) <= 80, dict(by_kind)
    assert all(n <= 50 for n in by_kind.values()), dict(by_kind)
    h.wait_for(lambda: set(_published(h)) == _inventory(h), 60, "slices to come back")


def _gaps_after_throttle(records: list[RequestRecord]) -> list[tuple[str, float]]:
    """(kind, seconds) from each 429 answer to the next request of the same kind."""
    gaps = []
    for i, r in enumerate(records):
        if r.status_code != 429:
            continue
        kind = (r.verb, r.full_resource, r.name)
        nxt = next((n for n in records[i + 1:] if (n.verb, n.full_resource, n.name) == kind),
                   None)
        if nxt is not None:
            gaps.append((f"{r.verb} {r.full_resource}", nxt.received_at - r.received_at))
    return gaps


def test_retry_after_is_honoured(h: DriverHarness) -> None:
    retry_after = 1
    dev = _published(h)[1]
    claim = h.allocate("throttled", [dev])
    h.apiserver.clear_requests()
    # status writes (PATCH, retried by StatusWriter) and slice writes/lists (publisher,
    # urllib3 for GETs) are throttled a few times each
    h.apiserver.set_faults(FaultPlan(
        throttle_rate=1.0, retry_after_seconds=retry_after, max_faults=6,
        resources=frozenset({"resourceclaims/status", "resourceslices"}),
        verbs=frozenset({"patch", "list", "create", "update", "delete"})))
    h.apiserver.delete_object("resourceslices", h.slices()[0]["metadata"]["name"])
    h.app.publisher.trigger()
    assert not h.prepare(claim)[claim["metadata"]["uid"]].error
    assert h.app.status.flush(timeout=60)
    h.wait_for(lambda: h.apiserver.faults_injected >= 6, 30, "six throttled requests")
    h.wait_for(lambda: set(_published(h)) == _inventory(h), 60, "slices to converge")
    gaps = _gaps_after_throttle(h.apiserver.requests())
    print("\nRetry-After gaps (s): " + ", ".join(f"{k} {g:.2f}" for k, g in gaps))
    assert gaps, "no 429 was followed by a retry"
    kinds = {k for k, _ in gaps}
    assert "patch resourceclaims/status" in kinds
    assert all(g >= retry_after for _, g in gaps), gaps
    assert _status_entries(h, claim)
    assert h.unprepare(claim) == {claim["metadata"]["uid"]: ""}


def test_no_files_left_by_fault_tests(h: DriverHarness) -> None:
    """Claims prepared (the kubelet retrying the failed ones) and unprepared while 20 % of
    the API requests fail leave no temp file and no CDI spec behind. It makes its own
    claims and faults, so it checks the same run alone as after the tests above: the specs
    exist while the claims are prepared, and faults were injected."""
    claims = {c["metadata"]["uid"]: c
              for c in (h.allocate(f"leftover-{i}", [d])
                        for i, d in enumerate(_published(h)[:4]))}
    h.apiserver.set_faults(FaultPlan(seed=23, **TWENTY_PERCENT))
    pending = dict(claims)
    for _ in range(15):
        answer = h.prepare(*pending.values())
        pending = {uid: c for uid, c in pending.items() if answer[uid].error}
        if not pending:
            break
    assert not pending, "not prepared after 15 rounds"
    assert len(h.cdi_files()) == len(claims)
    for c in claims.values():
        assert h.unprepare(c) == {c["metadata"]["uid"]: ""}
    assert h.app.status.flush(timeout=90)
    injected = h.apiserver.faults_injected
    h.apiserver.set_faults(None)
    assert injected > 0
    assert {p for p in tree(h.root) if p.endswith(".tmp")} == set()
    assert h.cdi_files() == []


def test_status_write_given_up_is_counted(h: DriverHarness) -> None:
    """Every status write fails: after its attempts the writer reports it once (counted)
    and keeps the claim behind, retrying (status is reconciled, never given up
    while the claim is prepared); the claim stays prepared (status is best effort) and the
    metric counts it too. Once the server answers again the status is applied."""
    from drakit.plugin.claims.checkpoint import ClaimRecord, PreparedDeviceRecord
    from drakit.plugin.claims.status import StatusWriter
    from drakit.plugin.events import RecordedEvents

    dev = _published(h)[2]
    claim = h.allocate("status-fails", [dev])
    meta = claim["metadata"]
    events = RecordedEvents()
    writer = StatusWriter(h.app.resource_api, h.driver_name, max_attempts=3, events=events)
    try:
        h.apiserver.set_faults(FaultPlan(error_rate=0.5, drop_rate=0.5,
                                         resources=frozenset({"resourceclaims/status"})))
        rec = ClaimRecord(uid=meta["uid"], namespace=meta["namespace"], name=meta["name"],
                          phase="PrepareCompleted",
                          devices=[PreparedDeviceRecord(request="req-0", pool=dev[0],
                                                        device=dev[1])])
        from drakit.discovery.plugin import ClaimRef

        writer.write(ClaimRef(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"]),
                     rec)
        h.wait_for(lambda: writer.failures == 1, 60, "the writer to report the failing claim")
        assert not writer.flush(timeout=2)  # still behind: retried, not given up
        assert writer.behind == 1
        errors = events.named("status_error")
        assert writer.failures == 1 and len(errors) == 1
        assert "after 3 attempts" in errors[0][0]
        attempts = [r for r in h.apiserver.requests(resource="resourceclaims/status")
                    if r.name == meta["name"]]
        assert len(attempts) >= 3  # urllib3 does not retry PATCH; drops may add none
        assert not _status_entries(h, claim)
        h.apiserver.set_faults(None)
        assert writer.flush(timeout=60)
        assert _status_entries(h, claim)
        assert writer.failures == 1  # reported once
    finally:
        writer.stop()
        h.apiserver.set_faults(None)
    # the app's own writer counts give-ups in its metric
    before = h.app.metrics.status_errors._value.get()
    h.app.status.events.status_error("test")  # the wiring: App's events → metrics counter
    assert h.app.metrics.status_errors._value.get() == before + 1
