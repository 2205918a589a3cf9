"""The chart on a real kube-apiserver 1.37, as an operator runs Helm: ``helm install
--create-namespace`` into a namespace that does not exist, ``helm install`` into one that
does, ``helm upgrade`` with changed values, ``helm uninstall``, and what remains after it
(the namespace; no object of the release). There is no kubelet or controller manager here,
so no pod runs: what is tested is that the server admits every object of the release and
that the values land in them.

helm comes from scripts/build-k8s.sh (``helm``), the server from the real tier
(tests/real); without them these tests skip (under CI=true they fail).
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from deploy_helpers import REPO

from drakit.plugin.testing.real.controlplane import RealAPIServer

CHART = REPO / "deploy" / "helm" / "drakit"
pytestmark = pytest.mark.slow


class Helm:
    def __init__(self, binary: str, server: RealAPIServer, kubeconfig: Path) -> None:
        self.binary, self.server, self.kubeconfig = binary, server, kubeconfig

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        r = subprocess.run([self.binary, "--kubeconfig", str(self.kubeconfig), *args],
                           capture_output=True, text=True, timeout=180,
                           env={**os.environ, "HELM_CACHE_HOME": str(self.kubeconfig.parent),
                                "HELM_CONFIG_HOME": str(self.kubeconfig.parent),
                                "HELM_DATA_HOME": str(self.kubeconfig.parent)})
        if check:
            assert r.returncode == 0, f"helm {' '.join(args)}:\n{r.stdout}\n{r.stderr}"
        return r

    def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        args = ["get", kind, name, "-o", "json", "--ignore-not-found"]
        if namespace:
            args += ["-n", namespace]
        out = self.server.kubectl(*args).stdout.strip()
        return json.loads(out) if out else None


@pytest.fixture
def h(helm: str, real_apiserver: RealAPIServer, tmp_path: Path) -> Helm:
    return Helm(helm, real_apiserver, real_apiserver.write_kubeconfig(tmp_path / "kubeconfig"))


def _env(ds: dict[str, Any]) -> dict[str, Any]:
    c = ds["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in c["env"]}


def test_install_create_namespace_upgrade_uninstall(h: Helm) -> None:
    suffix = uuid.uuid4().hex[:6]
    ns, release = f"drakit-{suffix}", f"d{suffix}"
    driver = f"gpu-{suffix}.example.com"
    agent = f"{release}-kubelet-plugin"
    assert h.server.get_object("namespaces", ns) is None
    sets = ["--set", "discovery.plugins={pci}", "--set", f"driverName={driver}"]
    out = h("install", release, str(CHART), "--namespace", ns, "--create-namespace", *sets)
    assert "STATUS: deployed" in out.stdout, out.stdout
    ds = h.get("daemonset", agent, ns)
    assert ds is not None
    assert ds["spec"]["updateStrategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert _env(ds)["VERBOSITY"] == "0"
    for kind, name, namespace in [("serviceaccount", agent, ns), ("clusterrole", agent, ""),
                                  ("clusterrolebinding", agent, ""),
                                  ("configmap", f"{release}-config", ns),
                                  ("resourcequota", f"{release}-node-critical-pods", ns),
                                  ("validatingadmissionpolicy",
                                   f"{release}-resourceslices-own-node", ""),
                                  ("deviceclass", f"pci.{driver}", "")]:
        assert h.get(kind, name, namespace) is not None, (kind, name)
    assert h.get("deviceclass", f"net.{driver}") is None  # net does not run

    # upgrade with changed values: the DaemonSet follows, the release's revision is 2
    out = h("upgrade", release, str(CHART), "--namespace", ns, *sets,
            "--set", "verbosity=3", "--set", "updateStrategy.rollingUpdate.maxUnavailable=10%",
            "--set", "deviceStatus=false")
    assert "REVISION: 2" in out.stdout, out.stdout
    ds = h.get("daemonset", agent, ns)
    assert ds is not None and _env(ds)["VERBOSITY"] == "3"
    assert _env(ds)["DISABLE_DEVICE_STATUS"] == "true"
    assert ds["spec"]["updateStrategy"]["rollingUpdate"] == {"maxSurge": 0,
                                                             "maxUnavailable": "10%"}
    role = h.get("clusterrole", agent)
    assert role is not None
    assert not [r for r in role["rules"] if "resourceclaims/status" in r["resources"]]
    # an unknown key is refused before anything reaches the server
    bad = h("upgrade", release, str(CHART), "--namespace", ns, *sets,
            "--set", "tolerration=x", check=False)
    assert bad.returncode != 0 and "tolerration" in bad.stderr, bad.stderr

    out = h("uninstall", release, "--namespace", ns)
    assert "uninstalled" in out.stdout, out.stdout
    for kind, name, namespace in [("daemonset", agent, ns), ("serviceaccount", agent, ns),
                                  ("clusterrole", agent, ""), ("clusterrolebinding", agent, ""),
                                  ("validatingadmissionpolicy",
                                   f"{release}-resourceslices-own-node", ""),
                                  ("deviceclass", f"pci.{driver}", "")]:
        assert h.get(kind, name, namespace) is None, (kind, name)
    # what remains: the namespace --create-namespace made (Helm never deletes it)
    assert h.server.get_object("namespaces", ns) is not None
    assert h("list", "--namespace", ns, "--short").stdout.strip() == ""


def test_install_into_an_existing_namespace(h: Helm) -> None:
    suffix = uuid.uuid4().hex[:6]
    ns, release = f"drakit-{suffix}", f"e{suffix}"
    h.server.ensure_namespace(ns, {"pod-security.kubernetes.io/enforce": "privileged"})
    h("install", release, str(CHART), "--namespace", ns, "--set", "discovery.plugins={net}",
      "--set", f"driverName=net-{suffix}.example.com")
    ds = h.get("daemonset", f"{release}-kubelet-plugin", ns)
    assert ds is not None and ds["spec"]["template"]["spec"]["hostNetwork"] is True
    h("uninstall", release, "--namespace", ns)
    assert h.get("daemonset", f"{release}-kubelet-plugin", ns) is None


def test_default_namespace_refused_and_namespace_override(h: Helm) -> None:
    """`helm install` without --namespace lands in `default`: refused with the way out, and
    nothing reaches the server. namespaceOverride puts the objects into another (existing)
    namespace than the release's, and the admission policy and binding follow it."""
    suffix = uuid.uuid4().hex[:6]
    release, driver = f"n{suffix}", f"ns-{suffix}.example.com"
    sets = ["--set", "discovery.plugins={pci}", "--set", f"driverName={driver}"]
    bad = h("install", release, str(CHART), *sets, check=False)
    assert bad.returncode != 0 and "allowDefaultNamespace" in bad.stderr, bad.stderr
    assert h.get("clusterrole", f"{release}-kubelet-plugin") is None
    assert h("list", "--all-namespaces", "--short").stdout.split().count(release) == 0

    target, home = f"gpu-{suffix}", f"rel-{suffix}"
    h.server.ensure_namespace(target, {"pod-security.kubernetes.io/enforce": "privileged"})
    h("install", release, str(CHART), "--namespace", home, "--create-namespace", *sets,
      "--set", f"namespaceOverride={target}", "--set", "selectorLabelsOverride.app=gpu-agent")
    agent = f"{release}-kubelet-plugin"
    ds = h.get("daemonset", agent, target)
    assert ds is not None and h.get("daemonset", agent, home) is None
    assert ds["spec"]["selector"]["matchLabels"] == {"app": "gpu-agent"}
    binding = h.get("clusterrolebinding", agent)
    assert binding is not None and binding["subjects"][0]["namespace"] == target
    h("uninstall", release, "--namespace", home)
    assert h.get("daemonset", agent, target) is None
    assert h.get("serviceaccount", agent, target) is None
