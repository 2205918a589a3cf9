"""Older clusters, for real: kube-apiserver 1.37 serving only resource.k8s.io/v1beta1 (like
1.32) or only v1beta2 (+v1beta1, like 1.33). drakit must find the version, publish, read
the claim and write its status there, as a least-privilege node agent."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from real_helpers import AGENT_USER, install_deploy

from drakit.plugin.testing.harness import DriverHarness
from drakit.plugin.testing.pytest_plugin import RealAPIServerFactory
from drakit.plugin.testing.real.controlplane import RealAPIServer, resource_versions_config

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("versions", [("v1beta1",), ("v1beta2", "v1beta1")],
                         ids=["v1beta1-only", "v1beta2-newest"])
def test_older_cluster(
    versions: tuple[str, ...], real_apiserver_factory: RealAPIServerFactory,
    node_name: str, real_harness_factory: Callable[..., DriverHarness],
) -> None:
    server: RealAPIServer = real_apiserver_factory(
        runtime_config=resource_versions_config(versions))
    assert server.served_versions == versions
    install_deploy(server, skip_kinds=("DaemonSet", "DeviceClass"))
    server.clear_requests()  # install_deploy's probe of the policy is a denied write
    h = real_harness_factory(node_name, server=server)
    assert h.app.resource_api.version == versions[0]
    devices = h.devices()
    assert len(devices) >= 3  # published, and read back (in the v1 shape) by the harness
    claim = h.allocate("old-cluster", [devices[0]])
    uid = claim["metadata"]["uid"]
    assert h.prepare(claim)[uid].error == ""
    assert h.app.status.flush(timeout=20)
    assert [d["device"] for d in (h.claim(claim) or {})["status"]["devices"]] == [devices[0][1]]
    assert h.unprepare(claim) == {uid: ""}
    assert h.app.status.flush(timeout=20)
    assert h.app.status.failures == 0
    served = {r.api_version for r in server.requests(user=AGENT_USER)
              if r.api_group == "resource.k8s.io"}
    assert served == {versions[0]}
    assert [r for r in server.requests(user=AGENT_USER) if r.status_code == 403] == []
