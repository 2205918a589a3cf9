"""The kustomize base renders to the concatenation of its resources; kustomize agrees; every
overlay renders."""

from __future__ import annotations

from pathlib import Path

import pytest
from deploy_helpers import (
    BASE,
    DRIVER_NAME,
    key,
    kubectl,
    kustomize_build,
    overlay_dirs,
    render_base,
)

EXPECTED_KINDS = {
    "Namespace": 1, "ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1,
    "ResourceQuota": 1, "ValidatingAdmissionPolicy": 1, "ValidatingAdmissionPolicyBinding": 1,
    "ConfigMap": 1, "DaemonSet": 1, "DeviceClass": 3,
}


def test_base_renders_every_expected_object_once() -> None:
    docs = render_base()
    kinds: dict[str, int] = {}
    for d in docs:
        kinds[d["kind"]] = kinds.get(d["kind"], 0) + 1
    assert kinds == EXPECTED_KINDS
    keys = [key(d) for d in docs]
    assert len(keys) == len(set(keys)), "duplicate objects in the base"


def test_namespaced_objects_are_in_the_drakit_namespace() -> None:
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding", "DeviceClass",
                      "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    for d in render_base():
        ns = d["metadata"].get("namespace")
        if d["kind"] in cluster_scoped:
            assert ns is None, f"{d['kind']} {d['metadata']['name']} is cluster-scoped"
        else:
            assert ns == "drakit", f"{d['kind']} {d['metadata']['name']}: namespace {ns}"


def test_render_refuses_transformers_in_the_base(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("kind: ConfigMap\nmetadata: {name: a}\n")
    (tmp_path / "kustomization.yaml").write_text(
        "resources: [a.yaml]\nnamespace: other\n")
    with pytest.raises(AssertionError, match="transformer-free"):
        render_base(tmp_path)


@pytest.mark.skipif(kubectl() is None, reason="kubectl (with built-in kustomize) not installed")
def test_kustomize_renders_the_base_as_the_concatenation() -> None:
    built = kustomize_build(BASE)
    assert built is not None
    assert {key(d): d for d in built} == {key(d): d for d in render_base()}


@pytest.mark.skipif(kubectl() is None, reason="kubectl (with built-in kustomize) not installed")
@pytest.mark.parametrize("overlay", overlay_dirs(), ids=lambda p: p.name)
def test_overlay_renders_the_same_objects(overlay: Path) -> None:
    built = kustomize_build(overlay)
    assert built is not None
    assert sorted(key(d) for d in built) == sorted(key(d) for d in render_base())


@pytest.mark.skipif(kubectl() is None, reason="kubectl (with built-in kustomize) not installed")
def test_driver_name_overlay_leaves_no_trace_of_the_default_name() -> None:
    import yaml

    built = kustomize_build(BASE.parent / "overlays" / "driver-name")
    assert built is not None
    for d in built:
        if d["kind"] == "DeviceClass":  # class names are the operator's choice
            d = {**d, "metadata": {**d["metadata"], "name": "x"}}
        text = yaml.safe_dump(d)
        assert DRIVER_NAME not in text, f"{d['kind']} still names {DRIVER_NAME}"
    new = "gpu.acme.example"
    whole = yaml.safe_dump_all(built)
    # DRIVER_NAME env, data dir (hostPath + mount), ClusterRole, VAP, 3 DeviceClasses
    assert whole.count(new) == 8, whole
