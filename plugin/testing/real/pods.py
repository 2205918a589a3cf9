"""Pods on a :class:`~drakit.plugin.testing.real.node.RealNode`: apply manifests (kubectl as
the admin), read, wait for Ready or gone, delete, and read a container's output from the
kubelet's ``podLogsDir`` (``kubectl logs`` does not work: the API server dials the node by
name).

Errors: :class:`~drakit.plugin.testing.real.process.RealClusterError` when a pod ends
or is not Ready in time (with the pod and the kubelet's log tail) or is absent;
TimeoutError from the plain waits.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from drakit.plugin.testing.apiserver.errors import ApiError
from drakit.plugin.testing.real.layout import NodeLayout
from drakit.plugin.testing.real.process import RealClusterError, wait_until

__all__ = ["NodePods"]


class NodePods:
    """Pod helpers over the node's control plane (as the admin)."""

    def __init__(self, layout: NodeLayout) -> None:
        self.layout = layout

    def apply(self, manifest: str | Sequence[Mapping[str, Any]]) -> None:
        """``kubectl apply`` a YAML string or documents (admin)."""
        text = manifest if isinstance(manifest, str) else yaml.safe_dump_all(list(manifest))
        self.layout.cp.kubectl("apply", "-f", "-", input=text)

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.layout.cp.get_object("pods", name, namespace)

    def wait_pod_ready(self, namespace: str, name: str, timeout: float = 60.0) -> float:
        """Wait until the pod's Ready condition is True; returns the seconds waited (polled
        every 0.1 s). Raises RealClusterError with the pod and the kubelet's log tail after
        ``timeout`` seconds, or when the pod ended."""
        t0 = time.monotonic()

        def ready() -> bool:
            pod = self.pod(namespace, name)
            if pod is None:
                return False
            status = pod.get("status") or {}
            if status.get("phase") in ("Failed", "Succeeded"):
                raise RealClusterError(f"pod {namespace}/{name} ended: {status}")
            return any(c.get("type") == "Ready" and c.get("status") == "True"
                       for c in status.get("conditions") or [])
        try:
            wait_until(ready, timeout, f"pod {namespace}/{name} Ready", interval=0.1)
        except TimeoutError as e:
            raise RealClusterError(f"{e}\npod: {json.dumps(self.pod(namespace, name))[:3000]}"
                                   f"\nkubelet:\n{self.layout.logs(lines=40)}") from None
        return time.monotonic() - t0

    def wait_pod_gone(self, namespace: str, name: str, timeout: float = 60.0) -> None:
        wait_until(lambda: self.pod(namespace, name) is None, timeout,
                   f"pod {namespace}/{name} deleted")

    def delete_pod(self, namespace: str, name: str, *, wait: bool = True,
                   timeout: float = 60.0) -> None:
        """Delete the pod (absent is fine; no kubectl needed); with ``wait``, until it is
        gone."""
        try:
            self.layout.cp.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}")
        except ApiError as e:
            if e.code != 404:  # gone already is fine; any other answer is not
                raise
        if wait:
            self.wait_pod_gone(namespace, name, timeout)

    def container_log(self, namespace: str, pod: str, container: str) -> str:
        """What the container wrote (stdout and stderr, CRI log format stripped), read from
        the kubelet's podLogsDir (``<ns>_<pod>_<uid>/<container>/<n>.log``)."""
        obj = self.pod(namespace, pod)
        if obj is None:
            raise RealClusterError(f"pod {namespace}/{pod} not found")
        d = self.layout.pod_logs_dir / f"{namespace}_{pod}_{obj['metadata']['uid']}" / container
        lines: list[str] = []
        for f in sorted(d.glob("*.log"), key=lambda p: int(p.stem) if p.stem.isdigit() else 0):
            for line in f.read_text(errors="replace").splitlines():
                parts = line.split(" ", 3)       # <time> <stream> <P|F> <text>
                lines.append(parts[3] if len(parts) == 4 else "")
        return "\n".join(lines)

    def wait_container_log(self, namespace: str, pod: str, container: str, marker: str,
                           timeout: float = 30.0) -> str:
        """Wait until the container's log holds ``marker``; returns the log."""
        def have() -> str:
            with contextlib.suppress(RealClusterError, OSError):
                text = self.container_log(namespace, pod, container)
                if marker in text:
                    return text
            return ""
        return str(wait_until(have, timeout, f"{marker!r} in {namespace}/{pod}/{container}"))

    def ensure_namespace(self, name: str, timeout: float = 30.0) -> None:
        """Create the namespace and wait for its ``default`` ServiceAccount (the pod
        admission needs it; kube-controller-manager creates it)."""
        cp = self.layout.cp
        cp.ensure_namespace(name)
        wait_until(lambda: cp.get_object("serviceaccounts", "default", name) is not None,
                   timeout, f"ServiceAccount {name}/default")
