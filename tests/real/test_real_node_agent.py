"""drakit as a least-privilege node agent on a real kube-apiserver 1.37: deploy/'s RBAC and
admission policy applied, the agent using a ServiceAccount token bound to a Pod on its node
(it carries authentication.kubernetes.io/node-name). Every call it makes must succeed; the
policy must stop it from writing another node's slices, and drakit must say so and go on."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import pytest
from real_helpers import AGENT_USER, DRIVER

from drakit.plugin.testing.apiserver.errors import ApiError
from drakit.plugin.testing.harness import DriverHarness
from drakit.plugin.testing.real.controlplane import RealAPIServer
from drakit.plugin.testing.real.process import wait_until

pytestmark = pytest.mark.slow


def test_node_bound_token_names_the_node(real: RealAPIServer, node_name: str) -> None:
    user = real.whoami(real.node_agent_token(node_name))
    assert user["username"] == AGENT_USER
    assert user["extra"]["authentication.kubernetes.io/node-name"] == [node_name]


def test_every_call_of_a_node_agent_succeeds(
    real: RealAPIServer, node_name: str, real_harness_factory: Callable[..., DriverHarness],
) -> None:
    real.clear_requests()
    h = real_harness_factory(node_name)
    devices = h.devices()
    assert len(devices) >= 3
    claim = h.allocate("agent-claim", [devices[0]], namespace="default")
    uid = claim["metadata"]["uid"]
    assert h.prepare(claim)[uid].error == ""
    assert h.app.status.flush(timeout=20)
    stored = h.claim(claim) or {}
    assert [d["device"] for d in stored["status"].get("devices", [])] == [devices[0][1]]
    assert h.unprepare(claim) == {uid: ""}
    assert h.app.status.flush(timeout=20)
    assert not (h.claim(claim) or {})["status"].get("devices")
    assert h.app.status.failures == 0
    time.sleep(0.3)  # the audit log is written while the answer goes out
    mine = real.requests(user=AGENT_USER)
    verbs = {(r.verb, r.full_resource) for r in mine}
    assert {("create", "resourceslices"), ("get", "resourceclaims"),
            ("patch", "resourceclaims/status")} <= verbs, verbs
    denied = [(r.verb, r.full_resource, r.status_code, r.path) for r in mine
              if r.status_code in (401, 403)]
    assert denied == []


def test_policy_denies_another_nodes_slices(
    real: RealAPIServer, node_name: str,
) -> None:
    token = real.node_agent_token(node_name)
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"generateName": "foreign-"},
            "spec": {"driver": DRIVER, "nodeName": f"{node_name}-other",
                     "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                     "devices": []}}
    with pytest.raises(ApiError) as info:
        real.request("POST", "/apis/resource.k8s.io/v1/resourceslices", body, token=token)
    assert info.value.code == 403
    assert f"may write only ResourceSlices with spec.nodeName {node_name}" in info.value.message


def test_agent_denied_by_the_policy_reports_it_and_keeps_running(
    real: RealAPIServer, node_name: str, real_harness_factory: Callable[..., DriverHarness],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The agent runs with --node-name OTHER but a token of node_name: every slice write is
    denied. It must log the policy's reason naming the slice write, keep serving the kubelet
    (prepare of an allocated claim works) and publish nothing."""
    other = f"{node_name}-x"
    real.create_node(other)
    h = real_harness_factory(other, start=False)
    h.api_token = real.node_agent_token(node_name)
    caplog.set_level(logging.WARNING)
    with pytest.raises(TimeoutError):
        h.start(wait=6)
    assert h.app is not None and h.kubelet.registration_count(h.driver_name) >= 1
    assert h.slices() == []
    wait_until(lambda: any("may write only ResourceSlices" in r.getMessage()
                           for r in caplog.records), 15, "the policy's denial in the log")
    denial = next(r for r in caplog.records if "may write only ResourceSlices" in r.getMessage())
    assert denial.levelno >= logging.WARNING
    assert "403" in denial.getMessage() or "Forbidden" in denial.getMessage()
    assert "Traceback" not in denial.getMessage()
    # still alive and serving: a claim allocated (by the admin) to a device of this node
    claim = h.allocate("denied-agent", [(other, "gpu-0")])
    uid = claim["metadata"]["uid"]
    assert h.prepare(claim)[uid].error == ""
