"""``drakit explain --pod`` when what the pod names is missing: a ResourceClaim that does not
exist, a ResourceClaimTemplate the server cannot give (the embedded server serves no
templates: the same 404 a missing one gets). The error names the pod, its claim entry and
the object, not only the API's answer."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from drakit.plugin.ops.cli import main
from drakit.plugin.testing.apiserver.server import EmbeddedAPIServer


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with EmbeddedAPIServer() as api:
        api.create_node("node-1")
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
