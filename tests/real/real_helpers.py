"""Helpers of the real-server tier: deploy/'s manifests, installing them, skip-or-fail."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from drakit.plugin.testing.apiserver.errors import ApiError
from drakit.plugin.testing.real.controlplane import RealAPIServer
from drakit.plugin.testing.real.process import wait_until

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "deploy" / "kustomize" / "base"
DRIVER = "drakit.example.com"
AGENT_USER = "system:serviceaccount:drakit:drakit-kubelet-plugin"

FAST = {"health_resend_seconds": 2.0, "resync_seconds": 2.0}


def base_manifests(skip_kinds: tuple[str, ...] = ("DaemonSet",)) -> list[dict[str, Any]]:
    """deploy/kustomize/base rendered (transformer-free: its resources in order)."""
    k = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    docs: list[dict[str, Any]] = []
    for name in k["resources"]:
        docs += [d for d in yaml.safe_load_all((BASE / name).read_text())
                 if d and d.get("kind") not in skip_kinds]
    return docs


def install_deploy(server: RealAPIServer, skip_kinds: tuple[str, ...] = ("DaemonSet",)) -> None:
    """Apply deploy/'s base (without the DaemonSet: no controller would run it) and wait
    until the admission policy is in force (it is loaded asynchronously)."""
    server.ensure_namespace("default")
    server.apply_manifests(base_manifests(skip_kinds))
    probe_node = "policy-probe"
    token = server.node_agent_token(probe_node)
    version = server.served_versions[0]
    body = {"apiVersion": f"resource.k8s.io/{version}", "kind": "ResourceSlice",
            "metadata": {"generateName": "probe-"},
            "spec": {"driver": DRIVER, "nodeName": "some-other-node",
                     "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                     "devices": []}}

    def denied() -> bool:
        try:
            server.request("POST", f"/apis/resource.k8s.io/{version}/resourceslices", body,
                           token=token, query={"dryRun": "All"})
        except ApiError as e:  # 403 once the policy is loaded
            return e.code == 403 and "may write only" in e.message
        return False

    wait_until(denied, 30, "the ValidatingAdmissionPolicy of deploy/ to be in force", 0.25)


def skip_or_fail(reason: str) -> None:
    """Skip with ``reason``; under CI=true the real-server tier must run, so fail."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and the real-server tier cannot run: {reason}")
    pytest.skip(reason)
