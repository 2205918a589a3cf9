"""``kubectl drakit``: the package installs an executable ``kubectl-drakit`` (its
[project.scripts]), which kubectl runs from PATH with the words after ``drakit`` and its
environment. Here it runs as kubectl would start it: found on PATH, KUBECONFIG in the
environment; the real kubectl runs it in tests/real/test_real_explain.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from drakit.plugin.testing.apiserver.server import EmbeddedAPIServer
from tests.allocator.alloc_helpers import claim, dclass, device, request, rslice

REPO = Path(__file__).resolve().parents[2]


def test_the_package_declares_the_plugin() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kubectl-drakit"] == "drakit.plugin.ops.cli:kubectl_main"


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedAPIServer]:
    with EmbeddedAPIServer() as api:
        for name in ("node-1", "node-2"):
            api.create_node(name)
        api.create_object("resourceslices", rslice([device("gpu-0")], pool="node-1",
                                                   node="node-1"))
        api.create_object("deviceclasses", dclass())
        for ns in ("default", "team-a"):
            api.create_object("resourceclaims", {**claim(request()), "metadata": {
                "name": "c1", "namespace": ns}}, ns)
            api.create_object("pods", {"metadata": {"name": "p", "namespace": ns}, "spec": {
                "resourceClaims": [{"name": "c", "resourceClaimName": "c1"}],
                "containers": [{"name": "app", "image": "x"}]}}, ns)
        yield api


@pytest.fixture(scope="module")
def env(server: EmbeddedAPIServer, tmp_path_factory: pytest.TempPathFactory
        ) -> dict[str, str]:
    kc = server.write_kubeconfig(tmp_path_factory.mktemp("kc") / "kubeconfig")
    bin_dir = str(Path(sys.executable).parent)  # where the package put its scripts
    return {**os.environ, "KUBECONFIG": str(kc),
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}


def _run(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=120, env=env)


def test_kubectl_drakit_explain_from_path(env: dict[str, str]) -> None:
    found = shutil.which("kubectl-drakit", path=env["PATH"])
    assert found is not None and os.access(found, os.X_OK)
    plugin = _run(env, "kubectl-drakit", "explain", "--pod", "default/p")
    assert plugin.returncode == 0, plugin.stderr
    assert plugin.stdout.splitlines()[:3] == [
        "pod default/p: ALLOCATABLE on 1 of 2 node(s)",
        "  node-1  allocatable: would allocate gpu=gpu.example.com/node-1/gpu-0",
        "  node-2  cannot allocate all claims (0/1 requests, 0/1 devices): claim default/c1: "
        "no "
        "ResourceSlice publishes devices for node node-2"]
    assert plugin.stdout == _run(env, "drakit", "explain", "--pod", "default/p").stdout


def test_kubectl_drakit_usage(env: dict[str, str]) -> None:
    r = _run(env, "kubectl-drakit")
    assert r.returncode == 2 and r.stdout.startswith("usage: kubectl drakit explain")
    r = _run(env, "kubectl-drakit", "run")
    assert r.returncode == 2 and "kubectl drakit: unknown command 'run'" in r.stderr
    r = _run(env, "kubectl-drakit", "explain", "--pod", "default/nosuch")
    assert r.returncode == 2 and r.stderr.startswith("kubectl drakit explain: ")
    r = _run(env, "kubectl-drakit", "explain", "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: kubectl drakit explain")


def test_kubeconfig_and_namespace_as_kubectl_finds_them(server: EmbeddedAPIServer,
                                                        env: dict[str, str],
                                                        tmp_path: Path) -> None:
    """Without KUBECONFIG: ~/.kube/config; a NAME without namespace: the current context's
    namespace, or -n."""
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    server.write_kubeconfig(home / ".kube" / "config", namespace="team-a")
    bare = {k: v for k, v in env.items() if k != "KUBECONFIG"} | {"HOME": str(home)}
    r = _run(bare, "kubectl-drakit", "explain", "--pod", "p")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("pod team-a/p: ALLOCATABLE on 1 of 2 node(s)\n")
    r = _run(bare, "kubectl-drakit", "explain", "-n", "default", "--pod", "p", "-o", "json")
    assert r.returncode == 0 and json.loads(r.stdout)["pod"] == "default/p"
    r = _run(env | {"KUBECONFIG": f"{tmp_path}/nosuch{os.pathsep}{env['KUBECONFIG']}"},
             "kubectl-drakit", "explain", "--pod", "team-a/p")
    assert r.returncode == 0, r.stderr
