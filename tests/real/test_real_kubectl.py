"""deploy/ against a real kube-apiserver 1.37 with kubectl: every manifest (the base, each
overlay, each example) passes ``kubectl apply --dry-run=server`` (schema, defaulting, CEL of
the admission policy and DeviceClasses compiled by the server), and the example claims are
created with kubectl's validation on (it needs the server's OpenAPI)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from real_helpers import REPO, skip_or_fail

from drakit.plugin.testing.real.controlplane import RealAPIServer

pytestmark = pytest.mark.slow

DEPLOY = REPO / "deploy"
KUSTOMIZATIONS = sorted(p.parent for p in DEPLOY.glob("kustomize/**/kustomization.yaml"))
EXAMPLES = sorted((DEPLOY / "examples").glob("*.yaml"))


@pytest.fixture
def kubectl_server(real: RealAPIServer) -> RealAPIServer:
    if not (real.bin_dir / "kubectl").is_file():
        skip_or_fail(f"kubectl not built in {real.bin_dir} (scripts/build-k8s.sh kubectl)")
    return real


def _rel(p: Path) -> str:
    return str(p.relative_to(REPO))


def test_deploy_has_what_this_test_expects() -> None:
    assert {_rel(p) for p in KUSTOMIZATIONS} >= {"deploy/kustomize/base",
                                                 "deploy/kustomize/overlays/net"}
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=_rel)
def test_kustomization_passes_server_dry_run(kubectl_server: RealAPIServer,
                                             directory: Path) -> None:
    r = kubectl_server.kubectl("apply", "--dry-run=server", "-k", str(directory))
    lines = [line for line in r.stdout.splitlines() if line.strip()]
    assert lines and all(line.endswith("(server dry run)") for line in lines), r.stdout
    assert any(line.startswith("daemonset.apps/") for line in lines)
    assert any("validatingadmissionpolicy" in line for line in lines)


@pytest.mark.parametrize("example", EXAMPLES, ids=_rel)
def test_example_passes_server_dry_run(kubectl_server: RealAPIServer, example: Path) -> None:
    r = kubectl_server.kubectl("apply", "--dry-run=server", "-n", "default", "-f", str(example))
    assert "resourceclaimtemplate.resource.k8s.io/" in r.stdout, r.stdout


def test_example_claims_are_created_with_validation_on(kubectl_server: RealAPIServer) -> None:
    namespace = f"examples-{uuid.uuid4().hex[:6]}"
    kubectl_server.ensure_namespace(namespace)
    try:
        for example in EXAMPLES:
            r = kubectl_server.kubectl("create", "--validate=strict", "-n", namespace,
                                       "-f", str(example))
            assert "resourceclaimtemplate.resource.k8s.io/" in r.stdout, r.stdout
        names = kubectl_server.kubectl("get", "resourceclaimtemplates", "-n", namespace,
                                       "-o", "name").stdout.split()
        assert len(names) == len(EXAMPLES)
    finally:
        for example in EXAMPLES:
            kubectl_server.kubectl("delete", "--wait=false", "--ignore-not-found", "-n",
                                   namespace, "-f", str(example), check=False)


def test_kubectl_validation_rejects_an_unknown_field(kubectl_server: RealAPIServer) -> None:
    """The other half: validation really is on (a typo in a claim is refused)."""
    bad = """apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: typo}
spec:
  devices:
    requests:
      - name: gpu
        exactly: {deviceClassName: example.drakit.example.com, allocatonMode: ExactCount}
"""
    r = kubectl_server.kubectl("create", "--validate=strict", "--dry-run=server", "-n",
                               "default", "-f", "-", input=bad, check=False)
    assert r.returncode != 0
    assert "allocatonMode" in r.stderr
