"""``drakit explain`` when what it is asked about is missing: with ``--pod``, a ResourceClaim
that does not exist, a ResourceClaimTemplate the server cannot give (the embedded server
serves no templates: the same 404 a missing one gets), named with the pod's claim entry;
with ``--node``, a node the server has no Node of (said, then judged by its slices)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from drakit.plugin.ops.cli import main
from drakit.plugin.testing.apiserver.server import EmbeddedAPIServer


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with EmbeddedAPIServer() as api:
        api.create_node("node-1")
        api.create_object("resourceclaims", {
            "metadata": {"name": "c", "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {
                "deviceClassName": "none.example.com"}}]}}}, "default")
        for pod, ref in (("lost", {"name": "disk", "resourceClaimName": "nosuch"}),
                         ("templated", {"name": "kvm", "resourceClaimTemplateName": "kvm"})):
            api.create_object("pods", {"metadata": {"name": pod, "namespace": "default"},
                                       "spec": {"resourceClaims": [ref], "containers": [
                                           {"name": "app", "image": "x"}]}}, "default")
        yield str(api.write_kubeconfig(tmp_path_factory.mktemp("kc") / "kubeconfig"))


@pytest.mark.parametrize(("pod", "names"), [
    ("lost", "pod default/lost, claim 'disk': ResourceClaim default/nosuch: HTTP 404"),
    ("templated", "pod default/templated, claim 'kvm': ResourceClaimTemplate default/kvm: "
                  "HTTP 404"),
])
def test_the_missing_object_is_named(kubeconfig: str, pod: str, names: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--kubeconfig", kubeconfig, "--pod", f"default/{pod}"]) == 2
    assert names in capsys.readouterr().err


@pytest.mark.parametrize(("node", "said"), [("node-x", True), ("node-1", False)])
def test_a_node_without_a_node_object_is_said(kubeconfig: str, node: str, said: bool,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    main(["explain", "--kubeconfig", kubeconfig, "default/c", "--node", node])
    out, err = capsys.readouterr()
    assert f"on node {node}: NOT ALLOCATABLE" in out
    assert (f"drakit explain: no Node {node} on the server: judged by the ResourceSlices "
            "that name it alone" in err) is said, err
