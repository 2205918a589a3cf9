"""Identities on the real control plane
(:class:`~drakit.plugin.testing.real.controlplane.RealAPIServer`): kubeconfigs and API
clients for a bearer token, kubectl as a token, node-bound ServiceAccount tokens (a node
agent's projected token) and ``whoami``.

Errors: :class:`~drakit.plugin.testing.real.process.RealClusterError` when kubectl is
missing or fails; :class:`~drakit.plugin.testing.apiserver.errors.ApiError` for a failed call.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from drakit.cdi.atomic import atomic_write
from drakit.plugin.testing.real.objects import ClusterObjects
from drakit.plugin.testing.real.process import RealClusterError
from drakit.plugin.testing.real.rest import ClusterREST

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

__all__ = ["ClusterIdentities"]


class ClusterIdentities:
    """Kubeconfigs, clients and tokens; the kubeconfig files live in ``workdir/kubeconfigs``
    (one per token, cached until
    :meth:`~drakit.plugin.testing.real.controlplane.RealAPIServer.stop`)."""

    def __init__(self, rest: ClusterREST, objects: ClusterObjects) -> None:
        self._rest = rest
        self._objects = objects
        self._kubeconfigs: dict[str | None, Path] = {}

    def forget_kubeconfigs(self) -> None:
        """Drop the cached kubeconfig files' paths (the server's certificates change on a
        restart)."""
        self._kubeconfigs.clear()

    def kubeconfig_dict(self, token: str | None = None,
                        namespace: str = "default") -> dict[str, Any]:
        """A kubeconfig document for ``token`` (default: the admin token)."""
        name = "drakit-real"
        return {
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": name, "cluster": {
                "server": self._rest.url, "certificate-authority": str(self._rest.ca_file)}}],
            "users": [{"name": name, "user": {"token": token or self._rest.admin_token}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name,
                                                    "namespace": namespace}}],
            "current-context": name, "preferences": {},
        }

    def write_kubeconfig(self, path: str | os.PathLike[str], token: str | None = None,
                         namespace: str = "default") -> Path:
        """Write a kubeconfig for ``token`` (default admin) atomically (0600); its path."""
        target = Path(path)
        data = yaml.safe_dump(self.kubeconfig_dict(token, namespace), sort_keys=False)
        atomic_write(target, data.encode(), mode=0o600)
        return target

    def kubeconfig(self, token: str | None = None) -> Path:
        """A kubeconfig file in the workdir for ``token`` (default: the admin token)."""
        if token not in self._kubeconfigs:
            path = self._rest.workdir / "kubeconfigs" / f"{uuid.uuid4().hex[:12]}.yaml"
            path.parent.mkdir(exist_ok=True)
            self._kubeconfigs[token] = self.write_kubeconfig(path, token)
        return self._kubeconfigs[token]

    def api_client(self, token: str | None = None) -> ApiClient:
        """A ``kubernetes.client.ApiClient`` for ``token`` (default admin), verifying the CA."""
        from kubernetes import client

        configuration = client.Configuration(host=self._rest.url)
        configuration.ssl_ca_cert = str(self._rest.ca_file)
        configuration.api_key = {"BearerToken": token or self._rest.admin_token}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
        return client.ApiClient(configuration)

    def kubectl(self, *args: str, token: str | None = None, input: str | None = None,
                check: bool = True, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run ``kubectl --kubeconfig <token's kubeconfig> ARGS``; raises RealClusterError on a
        non-zero exit when ``check`` (with its stderr)."""
        binary = self._rest.bin_dir / "kubectl"
        if not os.access(binary, os.X_OK):
            raise RealClusterError(f"kubectl not found in {self._rest.bin_dir}")
        r = subprocess.run([str(binary), "--kubeconfig", str(self.kubeconfig(token)), *args],
                           input=input, capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise RealClusterError(f"kubectl {' '.join(args)} failed ({r.returncode}): "
                                   f"{r.stderr.strip()}")
        return r

    def node_agent_token(
        self, node_name: str, *, namespace: str = "drakit",
        service_account: str = "drakit-kubelet-plugin", pod_name: str | None = None,
        expiration_seconds: int = 3600,
    ) -> str:
        """A ServiceAccount token bound to a Pod with ``spec.nodeName: node_name``, so it
        carries ``authentication.kubernetes.io/node-name`` like a node agent's projected
        token. Creates the namespace, the ServiceAccount (deploy/'s names by default), the
        Node (when absent) and the Pod (never run: no kubelet). Rights come from RBAC the
        caller applies (e.g. deploy/kustomize/base)."""
        self._objects.ensure_namespace(namespace)
        if self._objects.get_object("serviceaccounts", service_account, namespace) is None:
            self._objects.create_object("serviceaccounts", {"metadata": {
                "name": service_account, "namespace": namespace}})
        if self._objects.get_object("nodes", node_name) is None:
            self._objects.create_node(node_name)
        pod_name = pod_name or f"{service_account}-{node_name}"[:63].rstrip("-.")
        pod = self._objects.get_object("pods", pod_name, namespace)
        if pod is None:
            pod = self._objects.create_object("pods", {
                "metadata": {"name": pod_name, "namespace": namespace},
                "spec": {"nodeName": node_name, "serviceAccountName": service_account,
                         "automountServiceAccountToken": False,
                         "containers": [{"name": "agent", "image": "drakit.invalid/agent"}]},
            })
        answer = self._rest.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": expiration_seconds,
                      "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": pod_name,
                                         "uid": pod["metadata"]["uid"]}}})
        return str(answer["status"]["token"])

    def whoami(self, token: str) -> dict[str, Any]:
        """The user info the server sees for ``token`` (SelfSubjectReview)."""
        answer = self._rest.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                              {"apiVersion": "authentication.k8s.io/v1",
                               "kind": "SelfSubjectReview"}, token=token)
        return dict(answer["status"]["userInfo"])
