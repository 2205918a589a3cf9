"""A claim's AllocatedDeviceStatus is as durable as the claim.

``drakit run`` (a child process, so it can be SIGKILLed) talks to the API server through a
:class:`drakit.plugin.testing.faultproxy.FaultProxy`. The status PATCH is answered 500 while
the claim is prepared (or unprepared), the agent is killed, the API heals, and the agent
started again finishes the apply (or the removal) that the killed one owed: the checkpoint
record carried it. A restart with nothing owed sends no status request. Each test runs on
the embedded API server and on a real kube-apiserver 1.37 (skipped without its binaries).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from drakit.cdi.atomic import atomic_write
from drakit.plugin.claims.checkpoint import Checkpoint, Encoder
from drakit.plugin.testing.faultproxy import Fault, FaultProxy
from drakit.plugin.testing.harness import DriverHarness

pytestmark = [pytest.mark.slow, pytest.mark.both_apiservers]
STATUS_PATCH = r"/resourceclaims/[^/]+/status$"


@pytest.fixture
def server(apiserver_kind: str, harness_apiserver: Any) -> Iterator[Any]:
    """The embedded API server (own, started) or the session's real one (reset)."""
    if harness_apiserver is not None:
        yield harness_apiserver
        return
    from drakit.plugin.testing.apiserver import EmbeddedAPIServer

    api = EmbeddedAPIServer().start()
    try:
        yield api
    finally:
        api.stop()


@pytest.fixture
def proxied(server: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultProxy]:
    """A FaultProxy in front of ``server``; every kubeconfig the harness writes points at it."""
    ca = getattr(server, "ca_file", None)
    token = getattr(server, "admin_token", None) or server.token
    with FaultProxy(server.url, ca_file=str(ca) if ca else None) as proxy:
        def write_kubeconfig(path: str | Path, token_: str | None = None,
                             namespace: str = "default") -> Path:
            doc = {"apiVersion": "v1", "kind": "Config",
                   "clusters": [{"name": "p", "cluster": {"server": proxy.url}}],
                   "users": [{"name": "p", "user": {"token": token_ or token}}],
                   "contexts": [{"name": "p", "context": {"cluster": "p", "user": "p",
                                                          "namespace": namespace}}],
                   "current-context": "p"}
            atomic_write(Path(path), yaml.safe_dump(doc).encode(), mode=0o600)
            return Path(path)

        monkeypatch.setattr(server, "write_kubeconfig", write_kubeconfig)
        yield proxy


@pytest.fixture
def agent(server: Any, proxied: FaultProxy, short_tmp_path: Path) -> Iterator[DriverHarness]:
    """``drakit run`` (example discovery) on a node of this test's own, through the proxy."""
    h = DriverHarness(short_tmp_path / "h", node_name=f"node-{uuid.uuid4().hex[:8]}",
                      apiserver=server, subprocess=True, discovery=["example"])
    h.start()
    try:
        yield h
    finally:
        h.stop()


def ours(h: DriverHarness, claim: dict[str, Any]) -> list[dict[str, Any]]:
    got = h.claim(claim) or {}
    return [d for d in (got.get("status") or {}).get("devices") or []
            if d.get("driver") == h.driver_name]


def checkpoint(h: DriverHarness) -> dict[str, Any]:
    """The whole checkpoint (snapshot and log) as the JSON of one snapshot."""
    doc: dict[str, Any] = json.loads(Encoder().encode(Checkpoint(h.checkpoint_path).state(), log=1))
    return doc


def uid_of(claim: dict[str, Any]) -> str:
    return str(claim["metadata"]["uid"])


def test_status_apply_failing_around_a_sigkill_is_done_by_the_next_agent(
        agent: DriverHarness, proxied: FaultProxy) -> None:
    h = agent
    failing = proxied.add(Fault(method="PATCH", path=STATUS_PATCH, status=500))
    claim = h.allocate("durable-apply", [h.devices()[0]])
    assert h.prepare(claim)[uid_of(claim)].error == ""
    h.wait_for(lambda: failing.hits >= 1, 20, "the status apply to be tried (and fail)")
    h.stop_plugin(kill=True)
    assert checkpoint(h)["claims"][uid_of(claim)]["status_owed"] is True
    assert ours(h, claim) == []
    proxied.clear()  # the API heals
    h.start_plugin()
    h.wait_for(lambda: len(ours(h, claim)) == 1, 30, "the restarted agent to apply the status")
    h.wait_for(lambda: "status_owed" not in checkpoint(h)["claims"][uid_of(claim)], 15,
               "the applied status to be settled in the checkpoint")


def test_status_removal_failing_around_a_sigkill_is_done_by_the_next_agent(
        agent: DriverHarness, proxied: FaultProxy) -> None:
    h = agent
    claim = h.allocate("durable-removal", [h.devices()[0]])
    assert h.prepare(claim)[uid_of(claim)].error == ""
    h.wait_for(lambda: len(ours(h, claim)) == 1, 20, "the status to be applied")
    failing = proxied.add(Fault(method="PATCH", path=STATUS_PATCH, status=500))
    assert h.unprepare(claim) == {uid_of(claim): ""}
    h.wait_for(lambda: failing.hits >= 1, 20, "the status removal to be tried (and fail)")
    h.stop_plugin(kill=True)
    mark = checkpoint(h)["unprepared"][uid_of(claim)]
    assert mark["status_owed"] is True and mark["name"] == "durable-removal"
    assert len(ours(h, claim)) == 1  # the entry the removal failed to take away
    proxied.clear()
    h.start_plugin()
    h.wait_for(lambda: ours(h, claim) == [], 30, "the restarted agent to remove the status")
    h.wait_for(lambda: "status_owed" not in checkpoint(h)["unprepared"][uid_of(claim)], 15,
               "the removal to be settled in the checkpoint")


def test_a_restart_with_nothing_owed_sends_no_status_request(
        agent: DriverHarness, proxied: FaultProxy) -> None:
    h = agent
    first, second = (h.allocate(f"settled-{i}", [d]) for i, d in enumerate(h.devices()[:2]))
    assert h.prepare(first)[uid_of(first)].error == ""
    h.wait_for(lambda: len(ours(h, first)) == 1, 20, "the status to be applied")
    h.stop_plugin()  # SIGTERM: the writer settles what it finished before the exit
    assert "status_owed" not in checkpoint(h)["claims"][uid_of(first)]
    patches = proxied.add(Fault(method="PATCH", path=STATUS_PATCH))  # counts, forwards
    h.start_plugin()
    assert h.prepare(second)[uid_of(second)].error == ""
    h.wait_for(lambda: len(ours(h, second)) == 1, 20, "the second claim's status")
    # status writes go out in the order they were queued: anything the start-up had queued
    # would have been sent before the second claim's apply
    assert patches.hits == 1
