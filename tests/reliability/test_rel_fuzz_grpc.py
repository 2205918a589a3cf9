"""Hostile gRPC requests to the real node agent's DRA socket (v1 and v1beta1).

Requests hold empty, duplicated, unicode, path-like, NUL-carrying and over-long claim UIDs,
namespaces and names, mixed with real allocated claims. Property: the RPC never fails, the
answer has exactly one entry per distinct UID, every failed claim has a clear bounded error
that names the claim, real claims prepare, and the agent keeps serving.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from reliability_helpers import CASES, RawDRA, fuzz_settings, hostile_strings, reserve_anew

from drakit.plugin.kubelet.dra import MAX_CLAIMS_PER_REQUEST, MAX_ERROR_BYTES
from drakit.plugin.kubelet.protocol import DRA_V1, DRA_V1BETA1
from drakit.plugin.names import (
    InvalidNameError,
    check_claim_uid,
    check_namespace,
    check_object_name,
)
from drakit.plugin.testing.harness import DriverHarness

Triple = tuple[str, str, str]


@pytest.fixture(scope="module")
def real_claims(agent: DriverHarness) -> list[Triple]:
    """Four allocated claims on distinct devices of the agent's inventory."""
    out = []
    for i, dev in enumerate(agent.devices()[:4]):
        c = agent.allocate(f"fuzz-real-{i}", [dev])
        out.append((c["metadata"]["namespace"], c["metadata"]["name"], c["metadata"]["uid"]))
    return out


@pytest.fixture(scope="module", params=[DRA_V1, DRA_V1BETA1])
def raw(agent: DriverHarness, request: Any) -> Iterator[RawDRA]:
    client = RawDRA(agent.app.server.paths.dra, request.param)
    yield client
    client.close()


def _valid(ns: str, name: str, uid: str) -> bool:
    try:
        check_claim_uid(uid)
        check_namespace(ns)
        check_object_name(name)
    except InvalidNameError:
        return False
    return True


def _valid_uid(uid: str) -> bool:
    try:
        check_claim_uid(uid)
    except InvalidNameError:
        return False
    return True


def _claims_strategy(real: list[Triple]) -> st.SearchStrategy[list[Triple]]:
    hostile = st.tuples(hostile_strings, hostile_strings, hostile_strings)
    # a real claim with one field swapped for a hostile value
    mangled = st.builds(
        lambda c, i, v: tuple(v if k == i else c[k] for k in range(3)),
        st.sampled_from(real), st.integers(0, 2), hostile_strings,
    )
    one = st.one_of(hostile, mangled, st.sampled_from(real))
    return st.lists(one, max_size=12).flatmap(
        # duplicate some entries (same UID twice, possibly with other names)
        lambda xs: st.lists(st.sampled_from(xs), max_size=4).map(lambda d: xs + d)
        if xs else st.just(xs)
    )


def check_prepare_answer(sent: list[Triple], response: Any, real: list[Triple]) -> None:
    first: dict[str, Triple] = {}
    for t in sent:
        first.setdefault(t[2], t)
    assert set(response.claims) == set(first), "exactly one entry per distinct claim UID"
    for uid, (ns, name, _) in first.items():
        entry = response.claims[uid]
        if entry.error:
            assert len(entry.error.encode()) <= MAX_ERROR_BYTES
            assert "claim" in entry.error.lower(), entry.error
            assert not entry.devices
            if not _valid(ns, name, uid):
                # rejected before anything else: the message names the field
                assert any(f in entry.error for f in ("claim.uid", "claim.namespace",
                                                      "claim.name", "required field")), entry.error
        else:
            assert _valid(ns, name, uid), f"invalid claim {first[uid]!r} was prepared"
            assert (ns, name, uid) in real
            assert entry.devices and all(d.cdi_device_ids for d in entry.devices)
        if (ns, name, uid) in real:
            assert not entry.error, entry.error


def test_fuzz_grpc_requests(agent: DriverHarness, raw: RawDRA, real_claims: list[Triple]) -> None:
    @fuzz_settings(100)
    @given(_claims_strategy(real_claims))
    def run(sent: list[Triple]) -> None:
        with CASES.case("grpc"):
            response = raw.prepare(sent)
            check_prepare_answer(sent, response, real_claims)
            undo = raw.unprepare(sent)
            assert set(undo.claims) == {t[2] for t in sent}
            # unprepare works from the checkpoint by UID: only the UID must be safe (and
            # no field empty); unknown claims are success
            for ns, name, uid in {t[2]: t for t in reversed(sent)}.values():
                if ns and name and _valid_uid(uid):
                    assert not undo.claims[uid].error, undo.claims[uid].error
                else:
                    assert "claim" in undo.claims[uid].error
            # unprepare is by UID (a mangled entry too): the next pod reserves those claims
            reserve_anew(agent, [c for c in real_claims if c[2] in {t[2] for t in sent}])

    run()
    # still serving, nothing left prepared, no temp files
    ok = agent.prepare(real_claims[0])
    assert not ok[real_claims[0][2]].error
    assert agent.unprepare(real_claims[0]) == {real_claims[0][2]: ""}
    reserve_anew(agent, [real_claims[0]])  # the next DRA version's cases play the next pod
    assert agent.app.checkpoint.claims() == {}
    assert [p.name for p in agent.cdi_dir.iterdir()] == []


def test_huge_fields_are_answered(agent: DriverHarness, raw: RawDRA,
                                  real_claims: list[Triple]) -> None:
    """Fields of a megabyte each: answered with a bounded error, the RPC does not fail."""
    reserve_anew(agent, [real_claims[1]])  # earlier cases prepared and unprepared it
    big = "x" * (1024 * 1024)
    sent = [(big, "n", "u1"), ("default", big, "u2"), ("default", "n", big), real_claims[1]]
    response = raw.prepare(sent)
    check_prepare_answer(sent, response, real_claims)
    assert response.ByteSize() < 1024 * 1024 + 64 * 1024  # the echoed UID key, not more
    raw.unprepare([real_claims[1]])
    reserve_anew(agent, [real_claims[1]])  # later cases play the next pod


def test_empty_and_all_duplicates(agent: DriverHarness, raw: RawDRA,
                                  real_claims: list[Triple]) -> None:
    assert dict(raw.prepare([]).claims) == {}
    assert dict(raw.unprepare([]).claims) == {}
    c = real_claims[2]
    reserve_anew(agent, [c])  # earlier cases prepared and unprepared it
    response = raw.prepare([c] * (MAX_CLAIMS_PER_REQUEST * 3))  # one distinct claim
    assert list(response.claims) == [c[2]] and not response.claims[c[2]].error
    assert not raw.unprepare([c] * 5).claims[c[2]].error
    reserve_anew(agent, [c])  # later cases play the next pod
