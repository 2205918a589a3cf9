"""The Helm chart (deploy/helm/drakit): ``helm lint``, ``helm template`` with the values an
operator sets, every rendering valid against the OpenAPI schemas of every supported
Kubernetes version (kubernetes-validate, strict), the values reaching every place they must,
no default that publishes devices nobody chose, the kustomize base generated from the chart
(one source of truth), and ``kubectl apply --dry-run=server`` of renderings on the real
kube-apiserver where that tier is available.

helm is built from Go modules by scripts/build-k8s.sh (``helm``); without it these tests
skip with the reason (under CI=true they fail).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_helpers import REPO, SUPPORTED_KUBERNETES, one, plugin_container

CHART = REPO / "deploy" / "helm" / "drakit"
_spec = importlib.util.spec_from_file_location("gen_kustomize_base",
                                               REPO / "scripts" / "gen_kustomize_base.py")
assert _spec and _spec.loader
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)

Manifest = dict[str, Any]

# value sets an operator uses (name → --set values); each is rendered, linted and validated
CASES: dict[str, tuple[str, ...]] = {
    "pci": ("discovery.plugins={pci}",),
    "pci-options": ("discovery.plugins={pci}", "discovery.config.pci.vendors={10de}",
                    "discovery.config.pci.classes={0302}"),
    "net-hostnetwork": ("discovery.plugins={net}", "hostNetwork=true", "metrics.port=9469"),
    "example": ("discovery.plugins={example}",),
    "k0s": ("discovery.plugins={pci}", "kubeletRootDir=/var/lib/k0s/kubelet"),
    "driver-name": ("discovery.plugins={pci}", "driverName=gpu.acme.example"),
    "monitoring": ("discovery.plugins={pci,net}", "metrics.serviceMonitor.enabled=true",
                   "metrics.serviceMonitor.labels.release=prom"),
    "everything": ("discovery.plugins={pci}", "namespace.create=true",
                   "priorityClassName=system-cluster-critical", "logFormat=text",
                   "verbosity=2", "cdiVersionMax=0.5.0", "strict=true", "health=false",
                   "deviceStatus=false",
                   "nodeSelector.gpu=a100", "tolerations[0].key=gpu",
                   "tolerations[0].operator=Exists",
                   "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                   ".nodeSelectorTerms[0].matchExpressions[0].key=gpu",
                   "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                   ".nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
                   "resources.limits.memory=512Mi", "image.repository=registry.internal/drakit",
                   "image.tag=0.1.0-rc1", "podAnnotations.team=infra"),
}
CRD_KINDS = {"ServiceMonitor"}  # not in Kubernetes' OpenAPI (Prometheus Operator CRD)


@pytest.fixture(scope="module")
def helm() -> str:
    found = gen.find_helm()
    if found is None or not Path(found).exists():
        reason = "helm not built (scripts/build-k8s.sh helm)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the Helm chart tests: {reason}")
        pytest.skip(reason)
    return str(found)


def render(helm: str, *set_values: str, namespace: str = "drakit",
           release: str = "drakit") -> list[Manifest]:
    text = gen.render(helm, namespace=namespace, release=release, set_values=set_values)
    return [d for d in yaml.safe_load_all(text) if d]


def env_of(docs: list[Manifest]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom"))
            for e in plugin_container(one(docs, "DaemonSet"))["env"]}


@pytest.mark.parametrize("case", CASES)
def test_helm_lint(helm: str, case: str) -> None:
    argv = [helm, "lint", "--strict", "--kube-version", gen.KUBE_VERSION, str(CHART)]
    for s in CASES[case]:
        argv += ["--set", s]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_no_default_discovery(helm: str) -> None:
    """Without discovery.plugins the chart does not render (no fake or unchosen devices);
    helm install and template stop with the message."""
    with pytest.raises(subprocess.CalledProcessError) as e:
        render(helm)
    assert "discovery.plugins: choose the discoverers" in e.value.stderr
    r = subprocess.run([helm, "lint", "--kube-version", gen.KUBE_VERSION, str(CHART)],
                       capture_output=True, text=True, timeout=120)
    # helm lint runs in lint mode, where fail() is reported, not fatal
    assert "discovery.plugins: choose the discoverers" in r.stdout + r.stderr


@pytest.mark.parametrize("version", SUPPORTED_KUBERNETES)
@pytest.mark.parametrize("case", CASES)
def test_rendering_is_valid(helm: str, case: str, version: str) -> None:
    kv = pytest.importorskip("kubernetes_validate")
    docs = render(helm, *CASES[case])
    assert docs
    for doc in docs:
        if doc["kind"] not in CRD_KINDS:
            kv.validate(doc, version, strict=True)


def test_object_list(helm: str) -> None:
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in render(helm, *CASES["pci"]))
    assert kinds == sorted([
        ("ServiceAccount", "drakit-kubelet-plugin"),
        ("ClusterRole", "drakit-kubelet-plugin"),
        ("ClusterRoleBinding", "drakit-kubelet-plugin"),
        ("ResourceQuota", "drakit-node-critical-pods"),
        ("ValidatingAdmissionPolicy", "drakit-resourceslices-own-node"),
        ("ValidatingAdmissionPolicyBinding", "drakit-resourceslices-own-node"),
        ("ConfigMap", "drakit-config"),
        ("DaemonSet", "drakit-kubelet-plugin"),
        ("DeviceClass", "net.drakit.example.com"),
        ("DeviceClass", "pci.drakit.example.com"),
        ("DeviceClass", "example.drakit.example.com"),
    ])
    monitoring = {d["kind"] for d in render(helm, *CASES["monitoring"])}
    assert {"Service", "ServiceMonitor"} <= monitoring
    assert "Namespace" in {d["kind"] for d in render(helm, *CASES["everything"])}


def test_values_reach_the_daemonset(helm: str) -> None:
    docs = render(helm, *CASES["everything"])
    ds = one(docs, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    c = plugin_container(ds)
    env = env_of(docs)
    assert env["DISCOVERY"] == "pci" and env["LOG_FORMAT"] == "text"
    assert env["VERBOSITY"] == "2" and env["CDI_VERSION_MAX"] == "0.5.0"
    assert env["STRICT"] == "true" and env["DISABLE_HEALTH"] == "true"
    assert env["DISABLE_DEVICE_STATUS"] == "true"
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux", "gpu": "a100"}
    assert pod["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    assert "nodeAffinity" in pod["affinity"]
    assert c["resources"]["limits"]["memory"] == "512Mi"
    assert c["image"] == "registry.internal/drakit:0.1.0-rc1"
    assert ds["spec"]["template"]["metadata"]["annotations"] == {"team": "infra"}
    quota = one(docs, "ResourceQuota")
    assert quota["spec"]["scopeSelector"]["matchExpressions"][0]["values"] == [
        "system-cluster-critical"]
    ns = one(docs, "Namespace")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


def test_http_endpoint_is_the_pod_ip(helm: str) -> None:
    docs = render(helm, *CASES["net-hostnetwork"])
    env = env_of(docs)
    assert env["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env["HTTP_ENDPOINT"] == "$(POD_IP):9469"
    c = plugin_container(one(docs, "DaemonSet"))
    assert c["ports"] == [{"name": "http", "containerPort": 9469, "protocol": "TCP"}]
    ds = one(docs, "DaemonSet")
    assert ds["spec"]["template"]["spec"]["hostNetwork"] is True
    assert ds["spec"]["updateStrategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}


def test_kubelet_root_dir_moves_every_kubelet_path(helm: str) -> None:
    docs = render(helm, *CASES["k0s"])
    ds = one(docs, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    env = env_of(docs)
    root = "/var/lib/k0s/kubelet"
    assert env["KUBELET_REGISTRAR_DIRECTORY_PATH"] == f"{root}/plugins_registry"
    assert env["KUBELET_PLUGINS_DIRECTORY_PATH"] == f"{root}/plugins"
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    mounts = {m["name"]: m["mountPath"] for m in plugin_container(ds)["volumeMounts"]}
    assert host["plugins-registry"] == mounts["plugins-registry"] == f"{root}/plugins_registry"
    assert host["plugin-data"] == mounts["plugin-data"] == f"{root}/plugins/drakit.example.com"
    text = yaml.safe_dump_all(docs)
    assert "/var/lib/kubelet" not in text


def test_driver_name_reaches_every_place(helm: str) -> None:
    docs = render(helm, *CASES["driver-name"])
    name = "gpu.acme.example"
    assert env_of(docs)["DRIVER_NAME"] == name
    assert one(docs, "ClusterRole")["rules"][3]["resourceNames"] == [name]
    policy = one(docs, "ValidatingAdmissionPolicy")
    driver_var = next(v for v in policy["spec"]["variables"] if v["name"] == "driverName")
    assert driver_var["expression"] == f'"{name}"'
    classes = [d for d in docs if d["kind"] == "DeviceClass"]
    assert {c["metadata"]["name"] for c in classes} == {f"{k}.{name}" for k in
                                                        ("net", "pci", "example")}
    for c in classes:
        assert c["spec"]["selectors"][0]["cel"]["expression"] == f'device.driver == "{name}"'
    ds = one(docs, "DaemonSet")
    data = next(v for v in ds["spec"]["template"]["spec"]["volumes"] if v["name"] == "plugin-data")
    assert data["hostPath"]["path"].endswith(f"/plugins/{name}")
    assert "drakit.example.com" not in yaml.safe_dump(one(docs, "ClusterRole"))


def test_release_namespace_and_name_reach_the_admission_policy(helm: str) -> None:
    docs = render(helm, *CASES["pci"], namespace="gpu-system", release="acme")
    policy = one(docs, "ValidatingAdmissionPolicy")
    assert ("system:serviceaccount:gpu-system:acme-kubelet-plugin"
            in policy["spec"]["matchConditions"][0]["expression"])
    binding = one(docs, "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "acme-kubelet-plugin",
                                    "namespace": "gpu-system"}]


def test_example_devices_only_on_labelled_nodes(helm: str) -> None:
    pod = one(render(helm, *CASES["example"]), "DaemonSet")["spec"]["template"]["spec"]
    assert pod["nodeSelector"]["drakit-example-devices"] == "true"
    pod = one(render(helm, *CASES["pci"]), "DaemonSet")["spec"]["template"]["spec"]
    assert "drakit-example-devices" not in pod["nodeSelector"]


def test_plugin_options_become_the_config_file(helm: str) -> None:
    docs = render(helm, *CASES["pci-options"])
    config = yaml.safe_load(one(docs, "ConfigMap")["data"]["config.yaml"])
    assert config == {"discovery": {"pci": {"vendors": ["10de"], "classes": ["0302"]}}}
    from drakit.plugin.config import read_config_file

    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"drakit-helm-{os.getpid()}.yaml"
    path.write_text(one(docs, "ConfigMap")["data"]["config.yaml"])
    try:
        assert read_config_file(str(path)) == {"pci": {"vendors": ["10de"], "classes": ["0302"]}}
    finally:
        path.unlink()


def test_service_monitor_selects_the_metrics_service(helm: str) -> None:
    docs = render(helm, *CASES["monitoring"])
    monitor, service = one(docs, "ServiceMonitor"), one(docs, "Service")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"][
        "labels"].items()
    pod_labels = one(docs, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert monitor["spec"]["endpoints"] == [{"port": "http", "path": "/metrics",
                                             "interval": "30s"}]


def test_kustomize_base_is_generated_from_the_chart(helm: str) -> None:
    r = subprocess.run([os.sys.executable, str(REPO / "scripts" / "gen_kustomize_base.py"),
                        "--check"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "HELM": helm})
    assert r.returncode == 0, (r.stderr + "\nrun: python scripts/gen_kustomize_base.py")


def test_split_by_template_groups_documents() -> None:
    text = ("---\n# Source: drakit/templates/a.yaml\n# c\nkind: A\n"
            "---\n# Source: drakit/templates/b.yaml\nkind: B1\n"
            "---\n# Source: drakit/templates/b.yaml\nkind: B2\n"
            "---\n# Source: drakit/templates/empty.yaml\n# only a comment\n")
    assert gen.split_by_template(text) == {"a.yaml": "# c\nkind: A\n",
                                           "b.yaml": "kind: B1\n---\nkind: B2\n"}


@pytest.mark.slow
@pytest.mark.parametrize("case", ["pci", "net-hostnetwork", "everything"])
def test_rendering_passes_server_dry_run(helm: str, real_apiserver: Any, case: str) -> None:
    """The real kube-apiserver 1.37 admits each rendering (schema, defaulting, CEL of the
    policy and DeviceClasses compiled by the server)."""
    namespace = f"helm-{case}"
    real_apiserver.ensure_namespace(namespace)
    docs = [d for d in render(helm, *CASES[case], namespace=namespace, release=f"h-{case}")
            if d["kind"] not in CRD_KINDS and d["kind"] != "Namespace"]
    r = real_apiserver.kubectl("apply", "--dry-run=server", "-f", "-",
                               input=yaml.safe_dump_all(docs))
    lines = [line for line in r.stdout.splitlines() if line.strip()]
    assert len(lines) == len(docs) and all(line.endswith("(server dry run)") for line in lines), (
        r.stdout)


@pytest.mark.parametrize("bad,field", [
    ("logFormat=xml", "logFormat"),
    ("verbosity=-1", "verbosity"),
    ("metrics.port=70000", "port"),
    ("driverName=Not_A_DNS_Name", "driverName"),
    ("kubeletRootDir=relative/dir", "kubeletRootDir"),
    ("nodeSelector.gpu=true", "nodeSelector"),  # a boolean: use --set-string
])
def test_values_schema_rejects_bad_values(helm: str, bad: str, field: str) -> None:
    with pytest.raises(subprocess.CalledProcessError) as e:
        render(helm, "discovery.plugins={pci}", bad)
    assert field in e.value.stderr


def test_default_values_and_base_values_fit_the_schema() -> None:
    """values.yaml and the kustomize base's values satisfy values.schema.json (what helm
    checks on install); no helm needed."""
    import json

    import jsonschema

    schema = json.loads((CHART / "values.schema.json").read_text())
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.validate(defaults, schema)
    base_values = yaml.safe_load(gen.VALUES.read_text())
    jsonschema.validate({**defaults, **base_values}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**defaults, "logFormat": "xml"}, schema)
