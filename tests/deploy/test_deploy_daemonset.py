"""The DaemonSet wires what ``drakit run`` reads: every environment variable the CLI knows is
set (or deliberately left to its default), the settings built from that environment by the
real CLI parser point at mounted host directories with identical paths inside and outside,
the sockets are per pod, and the pod has the update strategy, probes, priority, tolerations,
resources and security context the README promises. Checked on the base and on every
overlay."""

from __future__ import annotations

import argparse
import re
import uuid
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from deploy_helpers import (
    DRIVER_NAME,
    kubectl,
    kustomize_build,
    one,
    overlay_dirs,
    plugin_container,
    render_base,
)

from drakit.discovery.builtin import BUILTIN_PLUGINS
from drakit.plugin.kubelet.sockets import SocketPaths
from drakit.plugin.ops.config import Settings, add_run_arguments, settings_from_args

# CLI variables the DaemonSet leaves unset on purpose, and why.
LEFT_TO_DEFAULT = {
    "KUBECONFIG": "in-cluster configuration from the service account",
    "CDI_VERSION_MAX": "no cap: the minimum cdiVersion a spec needs is written",
    "DEV_ROOT": "/dev, the default: a stand-in directory of device nodes is for tests only",
}

NODE = "node-a"
POD_UID = str(uuid.UUID(int=0x1234))
POD_IP = "10.244.1.7"


def _cli_env_vars() -> set[str]:
    """The environment variables ``drakit run`` reads, from its flags' help (``[NAME]``)."""
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    names = set()
    for action in parser._actions:
        names.update(re.findall(r"\[([A-Z][A-Z0-9_]*)\]", action.help or ""))
    assert len(names) >= 15, f"could not read the CLI's environment variables: {names}"
    return names


def _manifests() -> list[tuple[str, list[dict[str, Any]]]]:
    out = [("base", render_base())]
    if kubectl() is not None:
        for overlay in overlay_dirs():
            built = kustomize_build(overlay)
            assert built is not None
            out.append((overlay.name, built))
    return out


MANIFESTS = _manifests()
IDS = [name for name, _ in MANIFESTS]


def _pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return one(docs, "DaemonSet")["spec"]["template"]["spec"]


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container["env"]}


def _settings(docs: list[dict[str, Any]], tmp_path: Path,
              monkeypatch: pytest.MonkeyPatch) -> tuple[Settings, str]:
    """Settings the agent builds from the DaemonSet's environment (downward API values
    filled in), with the config file read from the ConfigMap the pod mounts. Returns the
    settings and DRAKIT_CONFIG as the container sees it."""
    container = plugin_container(one(docs, "DaemonSet"))
    for name in _cli_env_vars():
        monkeypatch.delenv(name, raising=False)
    env = _env(container)
    config_path = ""
    expanded: dict[str, str] = {}
    for name, e in env.items():
        if "value" in e:  # $(VAR) of an earlier variable, expanded as the kubelet does
            value = re.sub(r"\$\((\w+)\)", lambda m: expanded.get(m[1], m[0]), e["value"])
        else:
            field = e["valueFrom"]["fieldRef"]["fieldPath"]
            value = {"spec.nodeName": NODE, "metadata.uid": POD_UID, "status.podIP": POD_IP}[field]
        expanded[name] = value
        if name == "DRAKIT_CONFIG":
            config_path = value
            value = str(_config_file(docs, value, tmp_path))
        monkeypatch.setenv(name, value)
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    return settings_from_args(parser.parse_args([])), config_path


def _config_file(docs: list[dict[str, Any]], path: str, tmp_path: Path) -> Path:
    """Write the ConfigMap key that the container sees at ``path`` into tmp_path."""
    pod = _pod(docs)
    mount = _mount_for(pod, path)
    volume = _volume(pod, mount["name"])
    cm = one(docs, "ConfigMap", volume["configMap"]["name"])
    key = str(PurePosixPath(path).relative_to(mount["mountPath"]))
    out = tmp_path / "config.yaml"
    out.write_text(cm["data"][key])
    return out


def _mount_for(pod: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """The volume mount of the plugin container that contains ``path`` (deepest wins)."""
    container = next(c for c in pod["containers"] if c["name"] == "plugin")
    p = PurePosixPath(str(path))
    found = [m for m in container["volumeMounts"]
             if p == PurePosixPath(m["mountPath"]) or PurePosixPath(m["mountPath"]) in p.parents]
    assert found, f"{path} is not on any volume mount"
    return max(found, key=lambda m: len(m["mountPath"]))


def _volume(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(v for v in pod["volumes"] if v["name"] == name)


def _host_dir(pod: dict[str, Any], path: str | Path, *, writable: bool) -> dict[str, Any]:
    """Assert ``path`` is a hostPath mount at the same path on the host; return the mount."""
    mount = _mount_for(pod, path)
    volume = _volume(pod, mount["name"])
    assert "hostPath" in volume, f"{path}: volume {volume['name']} is not a hostPath"
    assert volume["hostPath"]["path"] == mount["mountPath"], (
        f"{path}: host path {volume['hostPath']['path']} != container path {mount['mountPath']}")
    assert bool(mount.get("readOnly")) is not writable, f"{path}: readOnly={mount.get('readOnly')}"
    return mount


def test_the_cli_reads_the_variables_the_brief_names() -> None:
    assert {"DRIVER_NAME", "NODE_NAME", "KUBECONFIG", "KUBELET_REGISTRAR_DIRECTORY_PATH",
            "KUBELET_PLUGINS_DIRECTORY_PATH", "CDI_ROOT", "CDI_VERSION_MAX", "DISCOVERY",
            "DRAKIT_CONFIG", "SYSFS_ROOT", "POD_UID", "DISABLE_HEALTH", "DISABLE_DEVICE_STATUS",
            "HTTP_ENDPOINT",
            "STRICT", "LOG_FORMAT", "VERBOSITY"} <= _cli_env_vars()


@pytest.mark.parametrize(("name", "docs"), MANIFESTS, ids=IDS)
def test_every_cli_variable_is_wired_or_deliberately_defaulted(
        name: str, docs: list[dict[str, Any]]) -> None:
    env = _env(plugin_container(one(docs, "DaemonSet")))
    cli = _cli_env_vars()
    # variables only other values refer to, as $(NAME) (POD_IP in HTTP_ENDPOINT)
    # (the kubelet expands $(NAME) only from variables earlier in the list)
    referenced: set[str] = set()
    for i, (var, e) in enumerate(env.items()):
        for ref in re.findall(r"\$\((\w+)\)", e.get("value", "")):
            assert ref in list(env)[:i], f"{name}: {var} refers to $({ref}) defined later or not"
            referenced.add(ref)
    unknown = set(env) - cli - referenced
    assert not unknown, f"{name}: DaemonSet sets variables the CLI does not read: {unknown}"
    assert cli - set(env) == set(LEFT_TO_DEFAULT), (
        f"{name}: unset variables {sorted(cli - set(env))}; wire them or add them to "
        "LEFT_TO_DEFAULT with a reason")
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["POD_UID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"


@pytest.mark.parametrize(("name", "docs"), MANIFESTS, ids=IDS)
def test_settings_point_at_mounted_host_dirs(name: str, docs: list[dict[str, Any]],
                                             tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    s, config_path = _settings(docs, tmp_path, monkeypatch)
    pod = _pod(docs)
    assert s.node_name == NODE and s.pod_uid == POD_UID
    assert s.kubeconfig is None
    assert s.health and s.device_status  # both on unless a value turns them off
    assert set(s.discovery) <= set(BUILTIN_PLUGINS), s.discovery
    # kubelet-facing directories: host paths, same inside, writable
    _host_dir(pod, s.registrar_dir, writable=True)
    data = _host_dir(pod, s.data_dir, writable=True)
    assert PurePosixPath(data["mountPath"]).name == s.driver_name
    _host_dir(pod, s.cdi_root, writable=True)
    _host_dir(pod, s.sysfs_root, writable=False)
    assert _volume(pod, _mount_for(pod, s.sysfs_root)["name"])["hostPath"]["path"] == "/sys"
    # per-pod sockets (rolling update), each in its mounted directory
    paths = SocketPaths.for_instance(s.driver_name, s.registrar_dir, s.plugins_dir, s.pod_uid)
    assert POD_UID in paths.dra.name and POD_UID in paths.registration.name
    assert paths.dra.parent == s.data_dir
    assert paths.registration.parent == s.registrar_dir
    # the config file comes from the ConfigMap and parses
    assert config_path and _mount_for(pod, config_path).get("readOnly") is True
    assert s.plugin_options == {}


@pytest.mark.parametrize(("name", "docs"), MANIFESTS, ids=IDS)
def test_probes_and_port_use_the_http_endpoint(name: str, docs: list[dict[str, Any]],
                                               tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    s, _ = _settings(docs, tmp_path, monkeypatch)
    container = plugin_container(one(docs, "DaemonSet"))
    assert s.http_endpoint is not None
    host, _, port_text = s.http_endpoint.rpartition(":")
    assert host == POD_IP, f"{name}: the unauthenticated endpoint listens on {host or 'all'}"
    port = int(port_text)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": port}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}


@pytest.mark.parametrize(("name", "docs"), MANIFESTS, ids=IDS)
def test_update_strategy_fits_the_network_mode(name: str, docs: list[dict[str, Any]]) -> None:
    ds = one(docs, "DaemonSet")
    rolling = ds["spec"]["updateStrategy"]["rollingUpdate"]
    assert ds["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    if ds["spec"]["template"]["spec"].get("hostNetwork"):
        # two pods on one node would share the metrics port: no surge
        assert rolling == {"maxSurge": 0, "maxUnavailable": 1}
    else:
        assert rolling == {"maxSurge": 1, "maxUnavailable": 0}


def test_base_defaults() -> None:
    docs = render_base()
    ds = one(docs, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    container = plugin_container(ds)
    env = _env(container)
    assert env["DRIVER_NAME"]["value"] == DRIVER_NAME
    assert pod["priorityClassName"] == "system-node-critical"
    assert {"operator": "Exists"} in pod["tolerations"]
    # the example discoverer's fake devices only where a node was labelled for them
    assert env["DISCOVERY"]["value"] == "example"
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux",
                                   "drakit-example-devices": "true"}
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
    res = container["resources"]
    assert set(res["requests"]) == {"cpu", "memory"} and set(res["limits"]) == {"cpu", "memory"}
    assert ds["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"][
        "labels"].items()
    # critical pods outside kube-system need a quota scoped to the priority class
    quota = one(docs, "ResourceQuota")
    assert quota["metadata"]["namespace"] == ds["metadata"]["namespace"]
    assert quota["spec"]["scopeSelector"]["matchExpressions"] == [
        {"scopeName": "PriorityClass", "operator": "In", "values": ["system-node-critical"]}]


@pytest.mark.parametrize(("name", "docs"), MANIFESTS, ids=IDS)
def test_least_privilege_security_context(name: str, docs: list[dict[str, Any]]) -> None:
    pod = _pod(docs)
    container = plugin_container(one(docs, "DaemonSet"))
    sc = container["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["privileged"] is False
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["runAsUser"] == 0  # owner of the kubelet's root-owned dirs; no capabilities
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    host_paths = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert not any(p in host_paths for p in ("/", "/dev", "/var/lib/kubelet", "/proc", "/run"))
    for mount in container["volumeMounts"]:
        if mount["mountPath"] == "/tmp":
            assert _volume(pod, mount["name"])["emptyDir"]["medium"] == "Memory"


def test_a_wrongly_mounted_dir_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import copy

    docs = copy.deepcopy(render_base())
    pod = _pod(docs)
    _volume(pod, "cdi")["hostPath"]["path"] = "/run/cdi"  # differs from the mount path
    s, _ = _settings(docs, tmp_path, monkeypatch)
    with pytest.raises(AssertionError, match="host path /run/cdi"):
        _host_dir(pod, s.cdi_root, writable=True)
