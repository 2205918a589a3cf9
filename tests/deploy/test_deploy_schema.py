"""Every manifest (base, overlays, examples) is valid against the Kubernetes OpenAPI schemas
of every supported Kubernetes version, with kubernetes-validate in strict mode (unknown
fields are errors)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from deploy_helpers import (
    SUPPORTED_KUBERNETES,
    example_files,
    kubectl,
    kustomize_build,
    load_docs,
    one,
    overlay_dirs,
    plugin_container,
    render_base,
)

kv = pytest.importorskip("kubernetes_validate",
                         reason="pip install kubernetes-validate (dev extra)")


def _validate(doc: dict[str, Any], version: str) -> None:
    kv.validate(doc, version, strict=True)


def test_validator_has_schemas_for_every_supported_version() -> None:
    from kubernetes_validate.utils import all_versions

    available = {".".join(v.split(".")[:2]) for v in all_versions()}
    missing = [v for v in SUPPORTED_KUBERNETES if v not in available]
    assert not missing, f"kubernetes-validate {kv.__version__} has no schemas for {missing}"


@pytest.mark.parametrize("version", SUPPORTED_KUBERNETES)
def test_base_is_valid(version: str) -> None:
    for doc in render_base():
        _validate(doc, version)


@pytest.mark.parametrize("version", SUPPORTED_KUBERNETES)
@pytest.mark.parametrize("path", example_files(), ids=lambda p: p.name)
def test_examples_are_valid(path: Path, version: str) -> None:
    docs = load_docs(path)
    assert {d["kind"] for d in docs} == {"ResourceClaimTemplate", "Pod"}
    for doc in docs:
        _validate(doc, version)


@pytest.mark.skipif(kubectl() is None, reason="kubectl (with built-in kustomize) not installed")
@pytest.mark.parametrize("overlay", overlay_dirs(), ids=lambda p: p.name)
def test_overlays_are_valid(overlay: Path) -> None:
    built = kustomize_build(overlay)
    assert built is not None
    base = render_base()
    changed = [d for d in built if d not in base]
    assert changed, f"overlay {overlay.name} changes nothing"
    for version in SUPPORTED_KUBERNETES:
        for doc in changed:
            _validate(doc, version)


def test_validator_rejects_a_misspelt_field() -> None:
    daemonset = copy.deepcopy(one(render_base(), "DaemonSet"))
    plugin_container(daemonset)["securityContex"] = {"privileged": False}
    with pytest.raises(kv.ValidationError):
        _validate(daemonset, SUPPORTED_KUBERNETES[0])


def test_validator_rejects_a_wrong_type_in_a_device_class() -> None:
    device_class = copy.deepcopy(one(render_base(), "DeviceClass", "net.drakit.example.com"))
    device_class["spec"]["selectors"][0]["cel"]["expression"] = ["not", "a", "string"]
    with pytest.raises(kv.ValidationError):
        _validate(device_class, SUPPORTED_KUBERNETES[0])
