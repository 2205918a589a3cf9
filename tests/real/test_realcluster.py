"""The real-control-plane kit itself (drakit.plugin.testing.real.controlplane): finding
the binaries, TLS that is really verified, tokens that really authenticate (and those without rights
really get 403), the audit-log request records, and a teardown that leaves no process and
no directory behind."""

from __future__ import annotations

import os
import ssl
import stat
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from drakit.plugin.testing.apiserver.errors import ApiError
from drakit.plugin.testing.real.binaries import find_k8s_bin_dir
from drakit.plugin.testing.real.controlplane import (
    DRA_FEATURE_GATES,
    RealAPIServer,
    start_real_apiserver,
)
from drakit.plugin.testing.real.process import RealClusterError, wait_until

pytestmark = pytest.mark.slow


def _fake_bin(directory: Path, names: tuple[str, ...]) -> Path:
    directory.mkdir(parents=True)
    for name in names:
        path = directory / name
        path.write_text("#!/bin/sh\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return directory


def test_find_k8s_bin_dir_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env_dir = _fake_bin(tmp_path / "env", ("kube-apiserver", "etcd"))
    cache_dir = _fake_bin(tmp_path / "cache" / "k8s-v1.37.2" / "bin", ("kube-apiserver", "etcd"))
    monkeypatch.setenv("DRAKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DRAKIT_K8S_BIN", str(env_dir))
    assert find_k8s_bin_dir() == env_dir
    (env_dir / "etcd").unlink()  # incomplete: the cache is used
    assert find_k8s_bin_dir() == cache_dir
    assert find_k8s_bin_dir(("kube-apiserver", "etcd", "kubectl")) is None
    monkeypatch.setenv("DRAKIT_CACHE", str(tmp_path / "nothing"))
    assert find_k8s_bin_dir() is None


def test_tls_is_verified_and_tokens_authenticate(real_apiserver: RealAPIServer) -> None:
    server = real_apiserver
    # the server's certificate chains to our CA, for 127.0.0.1 ...
    ok = ssl.create_default_context(cafile=str(server.ca_file))
    req = urllib.request.Request(f"{server.url}/version")
    with urllib.request.urlopen(req, context=ok, timeout=10) as r:
        assert r.status == 200
    # ... and not to the system's trust store
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(req, context=ssl.create_default_context(), timeout=10)
    assert server.whoami(server.admin_token)["groups"][:1] == ["system:masters"]
    with pytest.raises(ApiError) as forbidden:
        server.request("GET", "/api/v1/nodes", token=server.nobody_token)
    assert forbidden.value.code == 403
    with pytest.raises(ApiError) as unauthorized:
        server.request("GET", "/api/v1/nodes", token="not-a-token")
    assert unauthorized.value.code == 401


def test_every_resource_version_and_the_gates(real_apiserver: RealAPIServer) -> None:
    group = real_apiserver.request("GET", "/apis/resource.k8s.io")
    assert group["preferredVersion"]["version"] == "v1"
    assert {v["version"] for v in group["versions"]} == {"v1", "v1beta2", "v1beta1", "v1alpha3"}
    scheduling = real_apiserver.request("GET", "/apis/scheduling.k8s.io")
    assert "v1beta1" in {v["version"] for v in scheduling["versions"]}
    metrics = real_apiserver.request_text("/metrics")
    for gate in DRA_FEATURE_GATES:
        assert f'kubernetes_feature_enabled{{name="{gate}",stage="' in metrics
        line = next(x for x in metrics.splitlines()
                    if x.startswith(f'kubernetes_feature_enabled{{name="{gate}"'))
        assert line.endswith(" 1"), line


def test_audit_records_and_write_counts(real_apiserver: RealAPIServer) -> None:
    server = real_apiserver
    server.clear_requests()
    node = server.create_node("audit-node")
    assert server.get_object("nodes", "audit-node") is not None
    assert server.delete_object("nodes", "audit-node")
    assert not server.delete_object("nodes", "audit-node")
    records = server.requests(resource="nodes")
    assert [(r.verb, r.status_code) for r in records if r.name == "audit-node"][-2:] == [
        ("delete", 200), ("delete", 404)]
    assert server.write_counts()["nodes"] >= 2  # create (+ status, taint removal), delete
    assert server.write_counts(successful_only=False)["nodes"] == (
        server.write_counts()["nodes"] + 1)
    assert {r.user for r in records} == {"drakit-admin"}
    assert node["metadata"]["uid"]


def test_teardown_kills_everything_and_removes_the_workdir(tmp_path: Path) -> None:
    if find_k8s_bin_dir() is None:
        pytest.skip("real kube-apiserver/etcd not found (scripts/build-k8s.sh builds them into "
                    "~/.cache/drakit; or set DRAKIT_K8S_BIN)")
    workdir = tmp_path / "cp"
    server = start_real_apiserver(workdir)
    pids = [p.popen.pid for p in (server._apiserver, server._etcd) if p]
    assert len(pids) == 2 and all(_alive(pid) for pid in pids)
    assert (workdir / "etcd-data").is_dir()
    server.stop()
    assert not any(_alive(pid) for pid in pids)
    assert not workdir.exists()
    server.stop()  # idempotent


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped) is not alive
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ", 1)[1][0] != "Z"


def test_killed_components_come_back_on_their_ports_with_their_data(tmp_path: Path) -> None:
    """SIGKILL of kube-apiserver, then of etcd: each started again by restart_component
    answers on the same URL (clients keep their kubeconfigs) and etcd kept its data."""
    if find_k8s_bin_dir() is None:
        pytest.skip("real kube-apiserver/etcd not found (scripts/build-k8s.sh builds them into "
                    "~/.cache/drakit; or set DRAKIT_K8S_BIN)")
    with start_real_apiserver(tmp_path / "cp") as server:
        server.ensure_namespace("kept")
        url, etcd_url = server.url, server.etcd_url
        for component in ("kube-apiserver", "etcd"):
            server.kill_component(component)
            assert not server.component_alive(component)
            assert server.restart_component(component, timeout=90) < 90
            assert server.component_alive(component)
            assert (server.url, server.etcd_url) == (url, etcd_url)

            def kept() -> bool:
                try:
                    return server.get_object("namespaces", "kept") is not None
                except (ApiError, OSError):
                    return False
            wait_until(kept, 60, f"namespace kept readable after {component} came back")
        with pytest.raises(RealClusterError, match="kube-scheduler is not a started"):
            server.kill_component("kube-scheduler")
