"""The ClusterRole against the API requests the node agent makes.

:func:`rbac_coverage.compare` is tested on synthetic request logs (drakit.plugin.testing's real
RequestRecord type). The harness test runs the real agent (drakit.plugin.ops.app.App) against the
embedded API server and the fake kubelet, through registration, ResourceSlice publishing,
prepare (claim GET, status apply) and unprepare, and fails when the ClusterRole misses a
request it made or grants a write verb it never used. It skips while drakit.plugin.ops.app cannot be
imported.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from deploy_helpers import DRIVER_NAME, one, render_base
from rbac_coverage import CoverageReport, Permission, compare, required_permissions

from drakit.plugin.testing.apiserver.requestlog import RequestRecord

RG = "resource.k8s.io"


def _rules() -> list[dict[str, Any]]:
    return one(render_base(), "ClusterRole", "drakit-kubelet-plugin")["rules"]


def rec(verb: str, resource: str, subresource: str = "", name: str = "", group: str = RG,
        namespace: str = "") -> RequestRecord:
    return RequestRecord(verb=verb, resource=resource, subresource=subresource,
                         namespace=namespace, name=name, api_group=group, api_version="v1",
                         user_agent="drakit", status_code=200, method="GET", path="/x")


def agent_run() -> list[RequestRecord]:
    """What one node agent does in a normal life: publish, prepare, status, unprepare."""
    return [
        rec("get", "", group=""),  # discovery
        rec("get", "nodes", name="node-a", group=""),
        rec("watch", "nodes", group=""),  # its own Node (field selector metadata.name)
        rec("list", "pods", group=""),  # the orphan sweep
        rec("list", "resourceslices"),
        rec("watch", "resourceslices"),
        rec("create", "resourceslices"),
        rec("update", "resourceslices", name="node-a-drakit.example.com-abcde"),
        rec("delete", "resourceslices", name="node-a-drakit.example.com-fghij"),
        rec("get", "resourceclaims", name="c1", namespace="default"),
        rec("patch", "resourceclaims", "status", name="c1", namespace="default"),
    ]


def test_the_cluster_role_covers_a_normal_agent_run() -> None:
    report = compare(_rules(), agent_run(), DRIVER_NAME)
    assert report.ok, report.describe()
    assert report.unused_reads == []


def test_status_writes_need_the_driver_permission_of_136() -> None:
    needed = required_permissions([rec("patch", "resourceclaims", "status", name="c1")],
                                  DRIVER_NAME)
    assert Permission(RG, "resourceclaims/driver", "associated-node:patch", DRIVER_NAME) in needed
    rules = [r for r in _rules() if r["resources"] != ["resourceclaims/driver"]]
    report = compare(rules, agent_run(), DRIVER_NAME)
    assert report.missing == [
        Permission(RG, "resourceclaims/driver", "associated-node:patch", DRIVER_NAME)]


def test_a_request_the_role_does_not_grant_is_missing() -> None:
    extra = [rec("get", "resourceslices", name="s"), rec("deletecollection", "resourceslices"),
             rec("update", "resourceclaims", "status", name="c1", namespace="default"),
             rec("list", "resourceclaims", namespace="default")]
    report = compare(_rules(), agent_run() + extra, DRIVER_NAME)
    assert not report.ok
    assert set(report.missing) == {
        Permission(RG, "resourceslices", "get", "s"),
        Permission(RG, "resourceslices", "deletecollection"),
        Permission(RG, "resourceclaims/status", "update", "c1"),
        Permission(RG, "resourceclaims/driver", "associated-node:update", DRIVER_NAME),
        Permission(RG, "resourceclaims", "list"),
    }
    assert "deletecollection resource.k8s.io/resourceslices" in report.describe()


def test_a_write_grant_the_run_never_used_is_reported() -> None:
    run = [r for r in agent_run() if r.subresource != "status"]
    report = compare(_rules(), run, DRIVER_NAME)
    assert report.missing == []
    assert report.unused_writes == [(RG, "resourceclaims/driver", "associated-node:patch"),
                                    (RG, "resourceclaims/status", "patch")]
    assert not report.ok


def test_unused_reads_are_informational() -> None:
    run = [r for r in agent_run() if r.resource != "nodes"]
    report = compare(_rules(), run, DRIVER_NAME)
    assert report.ok
    assert report.unused_reads == [("", "nodes", "get"), ("", "nodes", "watch")]


def test_resource_names_and_wildcards() -> None:
    other_driver = compare(_rules(), agent_run(), "gpu.other.example")
    assert Permission(RG, "resourceclaims/driver", "associated-node:patch",
                      "gpu.other.example") in other_driver.missing
    wild = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]
    report = compare(wild, agent_run(), DRIVER_NAME)
    assert report.missing == [] and report.unused_writes == [("*", "*", "*")]
    sub = [{"apiGroups": [RG], "resources": ["resourceclaims/*"], "verbs": ["patch"]}]
    assert compare(sub, [rec("patch", "resourceclaims", "status", name="c")],
                   DRIVER_NAME).missing == [
        Permission(RG, "resourceclaims/driver", "associated-node:patch", DRIVER_NAME)]


def test_report_describes_success() -> None:
    assert CoverageReport().describe() == "ok"


# -- the real agent ------------------------------------------------------------------------

NODE = "node-a"


def _wait(what: str, predicate: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout}s")
        time.sleep(0.05)


def test_harness_run_is_covered_by_the_cluster_role(short_tmp_path: Path) -> None:
    app_module = pytest.importorskip(
        "drakit.plugin.ops.app",
        reason="drakit.plugin.ops.app (the lead's node agent) is not importable yet")
    from drakit.discovery.builtin.example import ExampleDiscovery
    from drakit.discovery.model import Device, Pool
    from drakit.discovery.plugin import DiscoveryContext, DiscoveryPlugin
    from drakit.plugin.ops.config import Settings
    from drakit.plugin.testing.apiserver import AllocatedDevice, EmbeddedAPIServer
    from drakit.plugin.testing.kubelet.fake import FakeKubelet

    class Resizable(DiscoveryPlugin):
        """``count`` plain devices in pool ``resizable``: more than one slice holds (128)
        at first, then few, so the agent updates one slice and deletes the other."""

        name = "resizable"
        count = 130

        def discover(self) -> list[Pool]:
            return [Pool(name="resizable",
                         devices=[Device(name=f"dev-{i}") for i in range(self.count)])]

    tmp_path = short_tmp_path  # a short link to tmp_path: unix socket paths are ≤ 107 bytes
    settings = Settings(
        driver_name=DRIVER_NAME, node_name=NODE,
        registrar_dir=tmp_path / "plugins_registry", plugins_dir=tmp_path / "plugins",
        cdi_root=tmp_path / "cdi", discovery=["example"], sysfs_root=tmp_path / "sys",
        pod_uid=str(uuid.uuid4()),
    )
    (tmp_path / "sys").mkdir()
    context = DiscoveryContext(driver_name=DRIVER_NAME, node_name=NODE,
                               sysfs_root=settings.sysfs_root)
    resizable = Resizable(context)

    def pool_slices(pool: str) -> list[dict[str, Any]]:
        return [s for s in api.list_objects("resourceslices",
                                            field_selector=f"spec.nodeName={NODE}")
                if s["spec"]["pool"]["name"] == pool]

    with EmbeddedAPIServer() as api:
        api.create_node(NODE)
        kubelet = FakeKubelet(settings.registrar_dir).start()
        app = app_module.App(settings, api_client=api.api_client(),
                             plugins=[ExampleDiscovery(context), resizable])
        try:
            app.start()
            kubelet.wait_registered(DRIVER_NAME, timeout=20)
            _wait("two slices of pool resizable", lambda: len(pool_slices("resizable")) == 2)
            example = _wait("example slices", lambda: pool_slices(NODE))
            device = next(s for s in example if s["spec"].get("devices"))
            allocated = AllocatedDevice(DRIVER_NAME, NODE, device["spec"]["devices"][0]["name"])
            claim = api.create_claim("default", "c1", [allocated], node_name=NODE)
            ref = ("default", "c1", claim["metadata"]["uid"])
            result = kubelet.node_prepare_resources(DRIVER_NAME, [ref])
            assert result[ref[2]].error == ""
            assert app.status.flush(timeout=10)
            assert kubelet.node_unprepare_resources(DRIVER_NAME, [ref]) == {ref[2]: ""}
            assert app.status.flush(timeout=10)
            resizable.count = 3  # what a hot-plug does: rediscover, publish the new state
            assert app.inventory.refresh()
            app.publisher.publish(app.inventory.pools(), wait=True)
            assert len(pool_slices("resizable")) == 1
        finally:
            app.stop()
            kubelet.stop()
        records = api.requests()
    used = {(r.verb, r.full_resource) for r in records}
    assert {("patch", "resourceclaims/status"), ("get", "resourceclaims"),
            ("delete", "resourceslices")} <= used, used
    report = compare(_rules(), records, DRIVER_NAME)
    assert report.ok, report.describe()


@pytest.mark.slow
def test_real_agent_run_is_covered_by_the_cluster_role(real_apiserver: Any,
                                                       short_tmp_path: Path) -> None:
    """The same on a real kube-apiserver 1.37: deploy/'s base applied, the agent using a
    token bound to a Pod on its node. The real authorizer must allow every call (no 401/403
    in the audit log) and the ClusterRole must grant no write the agent did not use."""
    from drakit.discovery.builtin.example import ExampleDiscovery
    from drakit.discovery.model import Device, Pool
    from drakit.discovery.plugin import DiscoveryContext, DiscoveryPlugin
    from drakit.plugin.testing.harness import DriverHarness

    class Resizable(DiscoveryPlugin):
        """130 devices (two slices), then 3 (one slice updated, one deleted)."""

        name = "resizable"
        count = 130

        def discover(self) -> list[Pool]:
            return [Pool(name=f"{self.context.node_name}-resizable",
                         devices=[Device(name=f"dev-{i}") for i in range(self.count)])]

    server = real_apiserver
    server.apply_manifests([d for d in render_base() if d["kind"] != "DaemonSet"])
    node = f"rbac-{uuid.uuid4().hex[:8]}"
    token = server.node_agent_token(node)
    user = "system:serviceaccount:drakit:drakit-kubelet-plugin"
    context = DiscoveryContext(driver_name=DRIVER_NAME, node_name=node)
    resizable = Resizable(context)
    server.clear_requests()
    with DriverHarness(short_tmp_path / "h", node_name=node, apiserver=server, api_token=token,
                       plugins=[ExampleDiscovery(context), resizable],
                       settings={"resync_seconds": 2.0}) as h:
        claim = h.allocate("rbac-c1", [h.devices()[0]])
        ref = ("default", "rbac-c1", claim["metadata"]["uid"])
        assert h.prepare(ref)[ref[2]].error == ""
        assert h.app.status.flush(timeout=20)
        assert h.unprepare(ref) == {ref[2]: ""}
        assert h.app.status.flush(timeout=20)
        resizable.count = 3
        assert h.app.inventory.refresh()
        h.app.publisher.publish(h.app.inventory.pools(), wait=True)
        assert h.app.status.failures == 0
    records = server.requests(user=user)
    assert [(r.verb, r.full_resource, r.status_code) for r in records
            if r.status_code in (401, 403)] == []
    used = {(r.verb, r.full_resource) for r in records}
    assert {("patch", "resourceclaims/status"), ("get", "resourceclaims"),
            ("update", "resourceslices"), ("delete", "resourceslices")} <= used, used
    report = compare(_rules(), records, DRIVER_NAME)
    assert report.ok, report.describe()
