"""Helpers for the deploy/ checks: load and render the manifests, find objects, evaluate
CEL the way the API server's environments present their inputs.

Rendering: the kustomize base is transformer-free, so its rendering is the concatenation of
its ``resources`` in order (:func:`render_base`). Overlays use patches and replacements,
which only real kustomize applies: :func:`kustomize_build` runs ``kubectl kustomize``
(kustomize v5 is built into kubectl) and returns None when kubectl is not installed.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
BASE = DEPLOY / "kustomize" / "base"
OVERLAYS = DEPLOY / "kustomize" / "overlays"
EXAMPLES = DEPLOY / "examples"
CONTAINERFILE = DEPLOY / "Containerfile"

def _load_gen() -> Any:
    """scripts/gen_kustomize_base.py as a module (its helm lookup and render)."""
    spec = importlib.util.spec_from_file_location("gen_kustomize_base",
                                                  REPO / "scripts" / "gen_kustomize_base.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _load_gen()
"""scripts/gen_kustomize_base.py: ``gen.find_helm()``, ``gen.render(helm, ...)``."""

DRIVER_NAME = "drakit.example.com"
NAMESPACE = "drakit"
SERVICE_ACCOUNT = "drakit-kubelet-plugin"
DAEMONSET = "drakit-kubelet-plugin"
CONTAINER = "plugin"

SUPPORTED_KUBERNETES = ("1.34", "1.35", "1.36", "1.37")
"""Kubernetes minor versions drakit supports (resource.k8s.io/v1 is served from 1.34 on)."""

Manifest = dict[str, Any]


def load_docs(path: Path) -> list[Manifest]:
    """All non-empty YAML documents of ``path`` (a fresh copy each call)."""
    return copy.deepcopy(_parsed(path.resolve(), path.stat().st_mtime_ns))


@functools.cache
def _parsed(path: Path, _mtime_ns: int) -> list[Manifest]:
    with path.open() as f:
        return [d for d in yaml.safe_load_all(f) if d]


def kustomization(directory: Path) -> Manifest:
    doc = load_docs(directory / "kustomization.yaml")
    assert len(doc) == 1, f"{directory}/kustomization.yaml: expected one document"
    return doc[0]


def render_base(directory: Path = BASE) -> list[Manifest]:
    """The base's rendering: its ``resources`` files concatenated in order. Raises
    AssertionError when the kustomization uses anything but ``resources`` (then the
    concatenation would no longer be its rendering)."""
    k = kustomization(directory)
    extra = set(k) - {"apiVersion", "kind", "resources"}
    assert not extra, f"the base must stay transformer-free; found {sorted(extra)}"
    docs: list[Manifest] = []
    for name in k["resources"]:
        path = directory / name
        assert path.is_file(), f"{directory}/kustomization.yaml names missing file {name}"
        docs.extend(load_docs(path))
    return docs


def kubectl() -> str | None:
    return shutil.which("kubectl")


def kustomize_build(directory: Path) -> list[Manifest] | None:
    """``kubectl kustomize directory`` parsed (a fresh copy each call); None when kubectl is
    not installed."""
    text = _kustomize_output(directory.resolve())
    return None if text is None else [d for d in yaml.safe_load_all(text) if d]


@functools.cache
def _kustomize_output(directory: Path) -> str | None:
    exe = kubectl()
    if exe is None:
        return None
    out = subprocess.run([exe, "kustomize", str(directory)], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0, f"kubectl kustomize {directory} failed:\n{out.stderr}"
    return out.stdout


def key(doc: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = doc.get("metadata", {})
    return doc["kind"], meta.get("namespace", ""), meta["name"]


def find(docs: Iterable[Manifest], kind: str, name: str | None = None) -> list[Manifest]:
    return [d for d in docs
            if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def one(docs: Iterable[Manifest], kind: str, name: str | None = None) -> Manifest:
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def plugin_container(daemonset: Manifest) -> Manifest:
    containers = daemonset["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == CONTAINER)


def overlay_dirs() -> list[Path]:
    return sorted(p for p in OVERLAYS.iterdir() if (p / "kustomization.yaml").is_file())


def example_files() -> list[Path]:
    return sorted(EXAMPLES.glob("*.yaml"))


# -- CEL ---------------------------------------------------------------------------------


@functools.cache
def cel_program(expression: str) -> Any:
    """Compile ``expression`` with cel-python (a CEL implementation independent of the API
    server's cel-go; used here for syntax and for behaviour on sample inputs). Programs are
    cached: compiling is the slow part."""
    env = _cel_environment()
    return env.program(env.compile(expression))


@functools.cache
def _cel_environment() -> Any:
    import celpy

    return celpy.Environment()


def cel_eval(expression: str, activation: Mapping[str, Any]) -> Any:
    """Evaluate ``expression`` on JSON-like inputs; the result as a plain Python value
    (bool, int, str; other types as cel-python returns them). A CEL runtime error (e.g. a
    missing map key) raises ``celpy.CELEvalError``."""
    import celpy

    values = {k: celpy.json_to_cel(v) for k, v in activation.items()}
    result = cel_program(expression).evaluate(values)
    if isinstance(result, celpy.CELEvalError):
        raise result
    return _plain(result)


def device_input(driver: str, device_api: Mapping[str, Any]) -> dict[str, Any]:
    """The ``device`` object a DeviceClass or claim selector sees for a resource.k8s.io/v1
    device JSON: attributes grouped by domain (no domain = the driver's), typed values.
    The driver's domain and ``resource.kubernetes.io`` are always present (the API server
    answers an unknown domain with an empty map)."""
    attributes: dict[str, dict[str, Any]] = {driver: {}, "resource.kubernetes.io": {}}
    for name, value in device_api.get("attributes", {}).items():
        domain, _, ident = name.rpartition("/")
        (member, v), = value.items()
        attributes.setdefault(domain or driver, {})[ident] = v if member != "version" else str(v)
    capacity: dict[str, dict[str, Any]] = {driver: {}}
    for name, value in device_api.get("capacity", {}).items():
        domain, _, ident = name.rpartition("/")
        capacity.setdefault(domain or driver, {})[ident] = str(value["value"])
    return {"driver": driver, "attributes": attributes, "capacity": capacity,
            "allowMultipleAllocations": bool(device_api.get("allowMultipleAllocations"))}


def evaluate_policy(policy: Manifest, request: Mapping[str, Any], obj: Any,
                    old_obj: Any) -> tuple[bool, list[str]]:
    """Evaluate a ValidatingAdmissionPolicy on one admission request the way the API server
    does: matchConditions (all true, else the policy does not apply), then ``variables`` in
    order, then every validation. Returns (applies, messages of failed validations)."""
    spec = policy["spec"]
    base = {"request": dict(request), "object": obj, "oldObject": old_obj}
    for condition in spec.get("matchConditions", []):
        if cel_eval(condition["expression"], base) is not True:
            return False, []
    variables: dict[str, Any] = {}
    for var in spec.get("variables", []):
        variables[var["name"]] = cel_eval(var["expression"], {**base, "variables": variables})
    failed = []
    for validation in spec["validations"]:
        activation = {**base, "variables": variables}
        if cel_eval(validation["expression"], activation) is not True:
            if "messageExpression" in validation:
                failed.append(str(cel_eval(validation["messageExpression"], activation)))
            else:
                failed.append(validation["message"])
    return True, failed


def _plain(value: Any) -> Any:
    """A cel-python result back to JSON-like Python (strings, bools, numbers)."""
    from celpy import celtypes

    if isinstance(value, celtypes.BoolType | bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str):
        return str(value)
    return value
