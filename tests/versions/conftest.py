"""Fixtures of the version matrix: for each release of :data:`version_helpers.MATRIX` that
runs (``$DRAKIT_VERSIONS``), one real etcd + kube-apiserver + kube-scheduler of that release
(module scope: every test of a release shares it), configured from what the release has
(its resource.k8s.io versions served, its DRA feature gates on but the ones the matrix
measures at their default), with deploy/'s RBAC, admission policy and DeviceClasses.

A release whose binaries are missing skips with the reason (build them with
``K8S_VERSION=<version> scripts/build-k8s.sh kube-apiserver etcd kube-scheduler``), and fails
under ``CI=true``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from version_helpers import (
    DRIVER,
    MATRIX,
    REPO,
    Release,
    ReleaseServer,
    load_release,
    missing_binaries,
    wanted_versions,
    write_facts,
)

from drakit.plugin.testing.apiserver.errors import ApiError
from drakit.plugin.testing.harness import DriverHarness
from drakit.plugin.testing.pytest_plugin import short_tmp_path  # noqa: F401 - fixture
from drakit.plugin.testing.real.controlplane import RealClusterError
from drakit.plugin.testing.real.process import wait_until

BASE = REPO / "deploy" / "kustomize" / "base"
FAST = {"health_resend_seconds": 2.0, "resync_seconds": 2.0}


def skip_or_fail(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and the version matrix cannot run: {reason}")
    pytest.skip(reason)


def _start(release: Release, workdir: Path) -> tuple[ReleaseServer, dict[str, str]]:
    """Start the release's server; a gate its start-up refuses (a dependency on a gate
    outside DRA) is left at its default and named in the returned map."""
    gates = release.matrix_gates()
    refused: dict[str, str] = {}
    for _attempt in range(3):
        server = ReleaseServer(workdir, release, gates)
        try:
            return server.start(), refused
        except RealClusterError as e:
            named = [g for g in gates if g in str(e)]
            if not named:
                raise
            for g in named:
                refused[g] = str(e).strip().splitlines()[-1][:300]
                gates.pop(g)
    raise RealClusterError(f"Kubernetes {release.version} did not start with gates {gates}")


def _install(server: ReleaseServer) -> None:
    """deploy/'s base without the DaemonSet; DeviceClasses in the server's newest version."""
    k = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    docs = [d for name in k["resources"] for d in yaml.safe_load_all((BASE / name).read_text())
            if d and d.get("kind") not in ("DaemonSet", "DeviceClass")]
    server.ensure_namespace("default")
    server.apply_manifests(docs)
    version = server.served_versions[0]
    for d in yaml.safe_load_all((BASE / "deviceclasses.yaml").read_text()):
        if d and d.get("kind") == "DeviceClass":
            body = {**d, "apiVersion": f"resource.k8s.io/{version}"}
            server.request("POST", f"/apis/resource.k8s.io/{version}/deviceclasses", body)
    probe = server.node_agent_token("policy-probe")
    body = {"apiVersion": f"resource.k8s.io/{version}", "kind": "ResourceSlice",
            "metadata": {"generateName": "probe-"},
            "spec": {"driver": DRIVER, "nodeName": "some-other-node",
                     "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                     "devices": []}}

    def denied() -> bool:
        try:
            server.request("POST", f"/apis/resource.k8s.io/{version}/resourceslices", body,
                           token=probe, query={"dryRun": "All"})
        except ApiError as e:
            return e.code == 403 and "may write only" in e.message
        return False

    wait_until(denied, 30, "the ValidatingAdmissionPolicy of deploy/ to be in force", 0.25)


@pytest.fixture(scope="module", params=wanted_versions(),
                ids=lambda v: f"k8s-{v}")
def release(request: pytest.FixtureRequest) -> Release:
    """One release of the matrix (its binaries exist, or the test skips / fails in CI)."""
    version: str = request.param
    missing = missing_binaries(version)
    if missing:
        skip_or_fail(f"Kubernetes {version}: {', '.join(missing)} not built (run "
                     f"K8S_VERSION={version} scripts/build-k8s.sh kube-apiserver etcd "
                     "kube-scheduler)")
    return load_release(version)


@pytest.fixture(scope="module")
def facts(release: Release) -> Iterator[dict[str, Any]]:
    """What the tests of this release measured; written to the matrix directory at the
    end (scripts/gen_compatibility.py makes docs/compatibility.md from it)."""
    got: dict[str, Any] = {"version": release.version,
                           "resource_versions": list(release.resource_versions),
                           "gates": {g.name: [g.stage, g.default]
                                     for g in release.gates.values()
                                     if g.name.startswith("DRA")
                                     or g.name in ("DynamicResourceAllocation",
                                                   "ResourceHealthStatus")}}
    yield got
    write_facts(release.version, got)


@pytest.fixture(scope="module")
def control_plane(release: Release, facts: dict[str, Any]) -> Iterator[ReleaseServer]:
    """The release's etcd + kube-apiserver with deploy/ installed (the scheduler:
    :func:`scheduling`)."""
    workdir = Path(tempfile.mkdtemp(prefix=f"drk-v{release.minor}-"))
    server, refused = _start(release, workdir)
    facts["gates_on"] = sorted(server.feature_gates)
    facts["gates_refused_at_start"] = refused
    try:
        _install(server)
        yield server
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def scheduling(control_plane: ReleaseServer) -> ReleaseServer:
    """The release's server with its kube-scheduler running."""
    control_plane.start_scheduler()
    return control_plane


@pytest.fixture
def node_name() -> str:
    return f"node-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def harness_factory(control_plane: ReleaseServer, release: Release,
                    short_tmp_path: Path,  # noqa: F811
                    ) -> Iterator[Callable[..., DriverHarness]]:
    """make(node_name, **DriverHarness kwargs): a started node agent on the release's server,
    as deploy/'s ServiceAccount bound to a Pod on its node, with a fake kubelet of the
    release's minor version."""
    made: list[DriverHarness] = []

    def make(node_name: str, **kwargs: Any) -> DriverHarness:
        if control_plane.get_object("nodes", node_name) is None:
            control_plane.create_node(node_name)
        kwargs.setdefault("kubelet_version", release.minor)
        kwargs["settings"] = {**FAST, **kwargs.get("settings", {})}
        h = DriverHarness(short_tmp_path / f"h{len(made)}", node_name=node_name,
                          apiserver=control_plane,
                          api_token=control_plane.node_agent_token(node_name), **kwargs)
        made.append(h)
        return h.start()

    yield make
    for h in made:
        h.stop()


__all__ = ["MATRIX"]
