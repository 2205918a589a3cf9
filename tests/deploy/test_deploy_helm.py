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

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_helpers import REPO, SUPPORTED_KUBERNETES, gen, one, plugin_container

CHART = REPO / "deploy" / "helm" / "drakit"

Manifest = dict[str, Any]

# value sets an operator uses (name → --set values); each is rendered, linted and validated
CASES: dict[str, tuple[str, ...]] = {
    "pci": ("discovery.plugins={pci}",),
    "pci-options": ("discovery.plugins={pci}", "discovery.config.pci.vendors={10de}",
                    "discovery.config.pci.classes={0302}"),
    "net-hostnetwork": ("discovery.plugins={net}", "hostNetwork=true", "metrics.port=9469"),
    "example": ("discovery.plugins={example}",),
    "hostdev": ("discovery.plugins={hostdev,example}", "driverName=hostdev.drakit.dev",
                "discovery.config.hostdev.rules[0].name=kvm",
                "discovery.config.hostdev.rules[0].match=/dev/kvm",
                "discovery.config.hostdev.rules[0].sharing=shared",
                "discovery.config.hostdev.rules[1].name=fuse",
                "discovery.config.hostdev.rules[1].match=/dev/fuse"),
    "k0s": ("discovery.plugins={pci}", "kubeletRootDir=/var/lib/k0s/kubelet"),
    "driver-name": ("discovery.plugins={pci}", "driverName=gpu.acme.example"),
    "monitoring": ("discovery.plugins={pci,net}", "metrics.serviceMonitor.enabled=true",
                   "metrics.serviceMonitor.labels.release=prom"),
    "everything": ("discovery.plugins={pci}",
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
                   "image.tag=0.1.0-rc1", "podAnnotations.team=infra",
                   "cdiClass=gpu", "resyncSeconds=45", "orphanGraceSeconds=600",
                   "orphanCheckSeconds=20", "terminationGracePeriodSeconds=90",
                   "extraEnv[0].name=VENDOR_DEBUG", "extraEnv[0].value=on",
                   "extraArgs={--strict}", "securityContext.readOnlyRootFilesystem=false",
                   "podSecurityContext.fsGroup=2000",
                   "updateStrategy.rollingUpdate.maxUnavailable=20%",
                   "serviceAccount.annotations.iam=role-a", "fullnameOverride=gpu-agent"),
    "existing-account": ("discovery.plugins={pci}", "serviceAccount.create=false",
                         "serviceAccount.name=node-agents", "nameOverride=acme"),
    "vendor-only": ("discovery.plugins={acme.gpu:Discoverer}", "deviceStatus=false"),
    "on-delete": ("discovery.plugins={net}", "updateStrategy.type=OnDelete"),
    "umbrella": ("discovery.plugins={pci}", "namespaceOverride=gpu-system",
                 "selectorLabelsOverride.app=gpu-agent",
                 "metrics.serviceMonitor.enabled=true"),
}
CRD_KINDS = {"ServiceMonitor"}  # not in Kubernetes' OpenAPI (Prometheus Operator CRD)


def render(helm: str, *set_values: str, namespace: str = "drakit",
           release: str = "drakit") -> list[Manifest]:
    text = gen.render(helm, namespace=namespace, release=release, set_values=set_values)
    return [d for d in yaml.safe_load_all(text) if d]


def env_of(docs: list[Manifest]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom"))
            for e in plugin_container(one(docs, "DaemonSet"))["env"]}


@pytest.mark.parametrize("case", CASES)
def test_helm_lint(helm: str, case: str) -> None:
    """`helm lint --strict` passes, and lints what was rendered: in lint mode a template's
    fail() is only an "[INFO] Fail" line, so a case that renders nothing would pass too.
    --namespace as for an install (lint's own default, `default`, is refused)."""
    argv = [helm, "lint", "--strict", "--namespace", "drakit", "--kube-version",
            gen.KUBE_VERSION, str(CHART)]
    for s in CASES[case]:
        argv += ["--set", s]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Fail:" not in r.stdout + r.stderr, r.stdout + r.stderr


def test_helm_lint_in_the_default_namespace_reports_the_refusal(helm: str) -> None:
    """Without --namespace, lint renders for `default`, which the chart refuses: helm shows
    the refusal only as [INFO] and exits 0 (lint mode), so the message must be there."""
    r = subprocess.run([helm, "lint", "--kube-version", gen.KUBE_VERSION, str(CHART),
                        "--set", "discovery.plugins={pci}"],
                       capture_output=True, text=True, timeout=120)
    assert "[INFO] Fail: namespace:" in r.stdout + r.stderr, r.stdout + r.stderr
    assert "allowDefaultNamespace" in r.stdout + r.stderr


def test_no_default_discovery(helm: str) -> None:
    """Without discovery.plugins the chart does not render (no fake or unchosen devices):
    helm install and template stop naming the value, and `helm lint` of the defaults fails
    (the schema's minItems; a template's fail() is only [INFO] in lint mode)."""
    with pytest.raises(subprocess.CalledProcessError) as e:
        render(helm)
    assert "discovery" in e.value.stderr and "plugins" in e.value.stderr
    r = subprocess.run([helm, "lint", "--kube-version", gen.KUBE_VERSION, str(CHART)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "plugins" in r.stdout + r.stderr, r.stdout + r.stderr
    assert "1 chart(s) failed" in r.stdout + r.stderr


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
        ("DeviceClass", "pci.drakit.example.com"),
    ])
    monitoring = {d["kind"] for d in render(helm, *CASES["monitoring"])}
    assert {"Service", "ServiceMonitor"} <= monitoring
    # the release namespace comes from `helm install --namespace … --create-namespace` or
    # exists: a Namespace object in the release collides with either
    assert not [d for case in CASES for d in render(helm, *CASES[case]) if d["kind"] == "Namespace"]


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
    assert env["CDI_CLASS"] == "gpu" and env["RESYNC_SECONDS"] == "45"
    assert env["ORPHAN_GRACE_SECONDS"] == "600" and env["ORPHAN_CHECK_SECONDS"] == "20"
    assert env["VENDOR_DEBUG"] == "on" and list(env)[-1] == "VENDOR_DEBUG"  # after the chart's
    assert c["args"] == ["run", "--strict"]
    assert pod["terminationGracePeriodSeconds"] == 90
    # securityContext values merge key by key with the chart's defaults
    assert c["securityContext"]["readOnlyRootFilesystem"] is False
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"] == {"fsGroup": 2000, "seccompProfile": {"type": "RuntimeDefault"}}
    assert ds["spec"]["updateStrategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "20%"}}
    assert ds["metadata"]["name"] == "gpu-agent-kubelet-plugin"
    account = one(docs, "ServiceAccount")
    assert account["metadata"] == {**account["metadata"], "name": "gpu-agent-kubelet-plugin",
                                   "annotations": {"iam": "role-a"}}
    assert pod["serviceAccountName"] == "gpu-agent-kubelet-plugin"
    assert {d["metadata"]["name"] for d in docs} == {
        "gpu-agent-kubelet-plugin", "gpu-agent-config", "gpu-agent-node-critical-pods",
        "gpu-agent-resourceslices-own-node", "pci.drakit.example.com"}


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
    assert {c["metadata"]["name"] for c in classes} == {f"pci.{name}"}
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
    from drakit.plugin.ops.config import read_config_file

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
    # misspelt keys, at every level: the schema is closed
    ("nodeSelecter.gpu=true", "nodeSelecter"),
    ("tolerration=x", "tolerration"),
    ("image.tagg=1", "tagg"),
    ("updateStrategy.rollingUpdate.maxSurg=1", "maxSurg"),
    ("metrics.serviceMonitor.enable=true", "enable"),
    ("securityContext.readOnlyRootFileSystem=false", "readOnlyRootFileSystem"),
    ("namespace.create=true", "namespace"),  # gone: --create-namespace or an existing one
    ("updateStrategy.rollingUpdate.maxUnavailable=ten", "maxUnavailable"),
    ("updateStrategy.type=Recreate", "type"),
    ("verbosity=11", "verbosity"),
    ("resyncSeconds=0", "resyncSeconds"),
    ("namespaceOverride=GPU_System", "namespaceOverride"),
    ("allowDefaultNamespace=maybe", "allowDefaultNamespace"),
    ("selectorLabelsOverride.app=not a label value", "selectorLabelsOverride"),
    ("selectorLabelsOverride.bad/key/x=a", "selectorLabelsOverride"),
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
    # the defaults alone choose no discoverer: they cannot install, so they do not validate
    with pytest.raises(jsonschema.ValidationError) as e:
        jsonschema.validate(defaults, schema)
    assert list(e.value.path) == ["discovery", "plugins"]
    jsonschema.validate({**defaults, "discovery": {"plugins": ["pci"], "config": {}}}, schema)
    base_values = yaml.safe_load(gen.VALUES.read_text())
    jsonschema.validate({**defaults, **base_values,
                         "deviceClasses": {"create": True, "discoverers": ["net", "pci"]}},
                        schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**defaults, "logFormat": "xml"}, schema)


def _strategy(helm: str, *values: str) -> Manifest:
    return dict(one(render(helm, *values), "DaemonSet")["spec"]["updateStrategy"])


@pytest.mark.parametrize("values,want", [
    ((), {"maxSurge": 1, "maxUnavailable": 0}),
    (("discovery.plugins={net}",), {"maxSurge": 0, "maxUnavailable": 1}),
    (("updateStrategy.rollingUpdate.maxUnavailable=100%",),
     {"maxSurge": 0, "maxUnavailable": "100%"}),
    (("updateStrategy.rollingUpdate.maxUnavailable=5",), {"maxSurge": 0, "maxUnavailable": 5}),
    (("updateStrategy.rollingUpdate.maxUnavailable=0",), {"maxSurge": 1, "maxUnavailable": 0}),
    (("updateStrategy.rollingUpdate.maxSurge=10%",), {"maxSurge": "10%", "maxUnavailable": 0}),
    (("updateStrategy.rollingUpdate.maxSurge=0",), {"maxSurge": 0, "maxUnavailable": 1}),
    (("updateStrategy.rollingUpdate.maxSurge=2",
      "updateStrategy.rollingUpdate.maxUnavailable=25%"),
     {"maxSurge": 2, "maxUnavailable": "25%"}),
    (("discovery.plugins={net}", "updateStrategy.rollingUpdate.maxUnavailable=30%"),
     {"maxSurge": 0, "maxUnavailable": "30%"}),
])
def test_update_strategy_follows_the_values(helm: str, values: tuple[str, ...],
                                            want: Manifest) -> None:
    plugins = () if any(v.startswith("discovery.") for v in values) else (
        "discovery.plugins={pci}",)
    assert _strategy(helm, *plugins, *values) == {"type": "RollingUpdate", "rollingUpdate": want}


def test_on_delete_update_strategy(helm: str) -> None:
    assert _strategy(helm, *CASES["on-delete"]) == {"type": "OnDelete"}


@pytest.mark.parametrize("values,message", [
    (("discovery.plugins={net}", "updateStrategy.rollingUpdate.maxSurge=1"),
     "host network namespace"),
    (("discovery.plugins={pci}", "hostNetwork=true", "updateStrategy.rollingUpdate.maxSurge=1"),
     "host network namespace"),
    (("discovery.plugins={pci}", "updateStrategy.rollingUpdate.maxSurge=0",
      "updateStrategy.rollingUpdate.maxUnavailable=0%"), "both 0"),
    (("discovery.plugins={net}", "hostNetwork=false"), "needs the host network namespace"),
    (("discovery.plugins={pci}", "serviceAccount.create=false"),
     "name the existing ServiceAccount"),
])
def test_values_that_cannot_work_do_not_render(helm: str, values: tuple[str, ...],
                                               message: str) -> None:
    with pytest.raises(subprocess.CalledProcessError) as e:
        render(helm, *values)
    assert message in e.value.stderr, e.value.stderr


def test_host_network_follows_the_discoverers(helm: str) -> None:
    def pod(*values: str) -> Manifest:
        return dict(one(render(helm, *values), "DaemonSet")["spec"]["template"]["spec"])

    assert pod("discovery.plugins={net}")["hostNetwork"] is True
    assert pod("discovery.plugins={net}")["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert pod("discovery.plugins={pci,net}")["hostNetwork"] is True
    assert "hostNetwork" not in pod("discovery.plugins={pci}")
    assert pod("discovery.plugins={pci}", "hostNetwork=true")["hostNetwork"] is True


def test_device_classes_follow_the_discoverers(helm: str) -> None:
    def classes(*values: str) -> set[str]:
        return {d["metadata"]["name"].split(".")[0] for d in render(helm, *values)
                if d["kind"] == "DeviceClass"}

    assert classes("discovery.plugins={pci}") == {"pci"}
    assert classes("discovery.plugins={net,example}") == {"net", "example"}
    assert classes(*CASES["vendor-only"]) == set()
    assert classes("discovery.plugins={pci}", "deviceClasses.discoverers={net}") == {"pci", "net"}
    assert classes("discovery.plugins={pci}", "deviceClasses.create=false") == set()


def test_status_rbac_follows_device_status(helm: str) -> None:
    from rbac_coverage import granted_triples

    def resources(*values: str) -> set[str]:
        return {r for _, r, _ in granted_triples(one(render(helm, *values),
                                                     "ClusterRole")["rules"])}

    on = resources("discovery.plugins={pci}")
    assert {"resourceclaims/status", "resourceclaims/driver"} <= on
    off = resources(*CASES["vendor-only"])
    assert on - off == {"resourceclaims/status", "resourceclaims/driver"}
    assert env_of(render(helm, *CASES["vendor-only"]))["DISABLE_DEVICE_STATUS"] == "true"


def test_existing_service_account_and_name_override(helm: str) -> None:
    docs = render(helm, *CASES["existing-account"], release="r1")
    assert not [d for d in docs if d["kind"] == "ServiceAccount"]
    ds = one(docs, "DaemonSet")
    assert ds["spec"]["template"]["spec"]["serviceAccountName"] == "node-agents"
    assert one(docs, "ClusterRoleBinding")["subjects"][0]["name"] == "node-agents"
    policy = one(docs, "ValidatingAdmissionPolicy")
    assert "system:serviceaccount:drakit:node-agents" in policy["spec"]["matchConditions"][0][
        "expression"]
    assert ds["metadata"]["name"] == "r1-acme-kubelet-plugin"
    assert ds["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] == "acme"
    assert {d["metadata"]["labels"]["app.kubernetes.io/name"] for d in docs} == {"acme"}


def test_every_agent_flag_has_a_value(helm: str) -> None:
    """Each environment variable `drakit run` reads is set by the chart, except the
    in-cluster kubeconfig, CDI_VERSION_MAX's "no cap" (empty value, left out) and DEV_ROOT
    (a stand-in directory of device nodes is for tests only)."""
    import argparse
    import re

    from drakit.plugin.ops.config import add_run_arguments

    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    read = {n for a in parser._actions for n in re.findall(r"\[([A-Z][A-Z0-9_]*)\]", a.help or "")}
    env = env_of(render(helm, *CASES["pci"]))
    assert read - set(env) == {"KUBECONFIG", "CDI_VERSION_MAX", "DEV_ROOT"}
    assert "CDI_VERSION_MAX" in env_of(render(helm, *CASES["everything"]))


NAMESPACED = {"ServiceAccount", "ConfigMap", "DaemonSet", "ResourceQuota", "Service",
              "ServiceMonitor"}


def test_namespace_override_reaches_every_namespaced_object(helm: str) -> None:
    """namespaceOverride (as in the NVIDIA and dra-example-driver charts) moves every
    namespaced object and every reference to the namespace: the binding's subject, the
    admission policy's user name, the ServiceMonitor's namespaceSelector."""
    docs = render(helm, *CASES["umbrella"], namespace="platform", release="acme")
    namespaced = [d for d in docs if d["kind"] in NAMESPACED]
    assert {d["kind"] for d in namespaced} == NAMESPACED
    assert {d["metadata"]["namespace"] for d in namespaced} == {"gpu-system"}
    assert not [d for d in docs if d["kind"] not in NAMESPACED and "namespace" in d["metadata"]]
    assert one(docs, "ClusterRoleBinding")["subjects"][0]["namespace"] == "gpu-system"
    policy = one(docs, "ValidatingAdmissionPolicy")
    assert ("system:serviceaccount:gpu-system:acme-kubelet-plugin"
            in policy["spec"]["matchConditions"][0]["expression"])
    assert one(docs, "ServiceMonitor")["spec"]["namespaceSelector"] == {
        "matchNames": ["gpu-system"]}
    assert "platform" not in yaml.safe_dump_all(docs)


def test_default_namespace_needs_allow_default_namespace(helm: str) -> None:
    """A `helm install` without --namespace lands in `default`: refused with the way out,
    unless allowDefaultNamespace or a namespaceOverride says otherwise."""
    with pytest.raises(subprocess.CalledProcessError) as e:
        render(helm, "discovery.plugins={pci}", namespace="default")
    assert "allowDefaultNamespace" in e.value.stderr and "--namespace" in e.value.stderr
    with pytest.raises(subprocess.CalledProcessError) as e:
        render(helm, "discovery.plugins={pci}", "namespaceOverride=default")
    assert "allowDefaultNamespace" in e.value.stderr
    docs = render(helm, "discovery.plugins={pci}", "allowDefaultNamespace=true",
                  namespace="default")
    assert one(docs, "DaemonSet")["metadata"]["namespace"] == "default"
    docs = render(helm, "discovery.plugins={pci}", "namespaceOverride=drakit",
                  namespace="default")
    assert one(docs, "DaemonSet")["metadata"]["namespace"] == "drakit"


def test_selector_labels_override(helm: str) -> None:
    """selectorLabelsOverride replaces the DaemonSet's selector; the pods carry it (the API
    server refuses a template that does not match its selector) and so does the metrics
    Service's selector; the chart's own labels stay on the pods."""
    docs = render(helm, *CASES["umbrella"], "podLabels.team=infra")
    ds = one(docs, "DaemonSet")
    assert ds["spec"]["selector"]["matchLabels"] == {"app": "gpu-agent"}
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    assert pod_labels["app"] == "gpu-agent" and pod_labels["team"] == "infra"
    assert pod_labels["app.kubernetes.io/component"] == "kubelet-plugin"
    assert pod_labels["app.kubernetes.io/name"] == "drakit"
    assert one(docs, "Service")["spec"]["selector"] == {"app": "gpu-agent"}
    assert one(docs, "ServiceMonitor")["spec"]["selector"]["matchLabels"] == {"app": "gpu-agent"}
    # without it: name, component, instance; a podLabels key never displaces a selector label
    ds = one(render(helm, "discovery.plugins={pci}",
                    "podLabels.app\\.kubernetes\\.io/instance=other"), "DaemonSet")
    selector = ds["spec"]["selector"]["matchLabels"]
    assert selector == {"app.kubernetes.io/name": "drakit",
                        "app.kubernetes.io/component": "kubelet-plugin",
                        "app.kubernetes.io/instance": "drakit"}
    assert selector.items() <= ds["spec"]["template"]["metadata"]["labels"].items()
