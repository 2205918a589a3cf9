"""The real tiers: a real control plane and a real node, by job.

- the control plane (:class:`RealAPIServer`, :mod:`~.controlplane`): etcd + kube-apiserver
  (and kube-scheduler) on loopback; it *has* a REST client (:mod:`~.rest`), the object
  helpers (:mod:`~.objects`), the identities (:mod:`~.identity`) and the audit log
  (:mod:`~.audit`); the binaries are found or built by :mod:`~.binaries`, the child
  processes and PKI are :mod:`~.process`;
- the node (:class:`RealNode`, :mod:`~.node`): it *has* a containerd (:mod:`~.containerd`),
  a kubelet (:mod:`~.kubelet`), a pod helper (:mod:`~.pods`), the host state it restores
  (:mod:`~.host`), the images it imports (:mod:`~.images`) and the drakit agents it starts
  (:mod:`~.agent`), all under one directory layout (:mod:`~.layout`).
"""

from drakit.plugin.testing.real.agent import DrakitProcess
from drakit.plugin.testing.real.binaries import K8S_VERSION, build_k8s_binaries, find_k8s_bin_dir
from drakit.plugin.testing.real.controlplane import RealAPIServer, start_real_apiserver
from drakit.plugin.testing.real.node import RealNode, node_unavailable_reason
from drakit.plugin.testing.real.process import RealClusterError

__all__ = [
    "K8S_VERSION",
    "DrakitProcess",
    "RealAPIServer",
    "RealClusterError",
    "RealNode",
    "build_k8s_binaries",
    "find_k8s_bin_dir",
    "node_unavailable_reason",
    "start_real_apiserver",
]
