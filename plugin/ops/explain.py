"""``drakit explain``: can this claim be allocated on this node, and if not, why?

The claim comes from the API server (``NAMESPACE/NAME``), a file (``-f``, YAML or JSON,
a ResourceClaim or ResourceClaimTemplate in any resource.k8s.io version) or a
ResourceClaimTemplate on the server (``--template NAMESPACE/NAME``); ``--pod NAMESPACE/NAME``
explains all claims of a pod, which the scheduler allocates together, on every node of the
cluster unless ``--node`` is given (one line per node and the scheduler's summary). The
ResourceSlices come from the API server, or from a file (``--slices-file``, a list, a
``kind: List`` or a multi-document YAML); DeviceClasses and the other claims (their
allocations hold devices) from the API server unless ``--classes-file`` is given and
``--no-cluster-claims`` is set. The answer is drakit.allocator's, the scheduler's rules:
per request the matching devices, per other device the rule that rules it out.

Exit status: 0 allocatable on the node (with --pod alone: on some node), 1 not, 2 usage or
API error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

GROUP = "resource.k8s.io"


class UsageError(Exception):
    pass


def _documents(path: str) -> list[dict[str, Any]]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as e:
        raise UsageError(f"{path}: {e.strerror}") from None
    try:
        docs = [d for d in yaml.safe_load_all(text) if d]
    except yaml.YAMLError as e:
        raise UsageError(f"{path}: not YAML or JSON: {e}") from None
    out: list[dict[str, Any]] = []
    for d in docs:
        if isinstance(d, list):
            out.extend(x for x in d if isinstance(x, dict))
        elif isinstance(d, dict) and isinstance(d.get("items"), list):
            out.extend(x for x in d["items"] if isinstance(x, dict))
        elif isinstance(d, dict):
            out.append(d)
        else:
            raise UsageError(f"{path}: a document is not an object")
    return out


class _Cluster:
    def __init__(self, kubeconfig: str | None) -> None:
        from drakit.plugin.api.resourceapi import ResourceAPI
        from drakit.plugin.ops.app import kube_api_client

        self.api = ResourceAPI(kube_api_client(kubeconfig))

    def _path(self, plural: str, name: str = "", namespace: str = "") -> str:
        ns = f"/namespaces/{namespace}" if namespace else ""
        return f"/apis/{GROUP}/{self.api.version}{ns}/{plural}" + (f"/{name}" if name else "")

    def get(self, plural: str, name: str, namespace: str = "") -> dict[str, Any]:
        obj: dict[str, Any] = self.api.http.json("GET", self._path(plural, name, namespace))
        return obj

    def list(self, plural: str, core: bool = False) -> list[dict[str, Any]]:
        """Every object of a resource.k8s.io resource (``core``: of /api/v1), in pages."""
        path = f"/api/v1/{plural}" if core else self._path(plural)
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            page = self.api.http.json("GET", path, query={"limit": 500, "continue": token})
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue") or None
            if not token:
                return items

    def node(self, name: str) -> dict[str, Any]:
        obj: dict[str, Any] = self.api.http.json("GET", f"/api/v1/nodes/{name}")
        return obj


@dataclass
class _Inputs:
    claim: Any  # one claim or template; with --pod, the pod's claims
    slices: list[dict[str, Any]]
    classes: list[dict[str, Any]]
    others: list[dict[str, Any]]
    node: dict[str, Any] | None = None  # None: --pod across all nodes
    pod: dict[str, Any] = field(default_factory=dict)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # said on stderr before the answer


def _ns_name(text: str, what: str, namespace: str) -> tuple[str, str]:
    """(namespace, name) of ``NAMESPACE/NAME``, or of ``NAME`` in ``namespace``."""
    ns, sep, name = text.rpartition("/")
    if not name:
        raise UsageError(f"{what} {text!r}: expected NAMESPACE/NAME")
    return (ns if sep else namespace), name


def default_kubeconfig() -> str | None:
    """The kubeconfig kubectl would use: the first existing file of ``$KUBECONFIG`` (a list
    separated by ``:``), else ``~/.kube/config`` when it exists; None (the in-cluster
    config) otherwise."""
    listed = [f for f in os.environ.get("KUBECONFIG", "").split(os.pathsep) if f]
    for f in listed or [str(Path.home() / ".kube" / "config")]:
        if Path(f).expanduser().is_file():
            return str(Path(f).expanduser())
    return listed[0] if listed else None


def _context_namespace(kubeconfig: str | None) -> str:
    """The namespace of the kubeconfig's current context (in a pod: the pod's own), else
    ``default``."""
    try:
        if kubeconfig is None:
            return Path(_SA_NAMESPACE).read_text().strip() or "default"
        from kubernetes import config

        _, current = config.list_kube_config_contexts(config_file=kubeconfig)
        return str(((current or {}).get("context") or {}).get("namespace") or "default")
    except Exception:  # no context, no file: NAMESPACE/NAME still works
        return "default"


_SA_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def _parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Why a pod is pending or a ResourceClaim cannot be allocated, as "
        "kube-scheduler would decide: a pod on every node of the cluster (--pod), or claims on "
        "one node (--node) with the reason of every device. Exit 0: allocatable (with --pod "
        "alone: on some node); 1: not; 2: usage or API error.", allow_abbrev=False)
    p.add_argument("claim", nargs="?", help="NAMESPACE/NAME of a ResourceClaim on the server")
    p.add_argument("-f", "--filename", help="a ResourceClaim or ResourceClaimTemplate file "
                   "(YAML or JSON; - for stdin)")
    p.add_argument("--template", help="NAMESPACE/NAME of a ResourceClaimTemplate on the server")
    p.add_argument("--pod", help="NAMESPACE/NAME of a Pod: all its claims, allocated together "
                   "as the scheduler does; without --node, on every node of the cluster "
                   "(its nodeSelector, node affinity and tolerations as the scheduler "
                   "applies them), one line per node")
    p.add_argument("--node", help="the node [NODE_NAME, except with --pod]")
    p.add_argument("--slices-file", help="ResourceSlices from this file instead of the server")
    p.add_argument("--classes-file", help="DeviceClasses from this file instead of the server")
    p.add_argument("--no-cluster-claims", action="store_true",
                   help="do not read the server's claims (no device is held by another claim)")
    p.add_argument("-n", "--namespace", help="the namespace of a NAME given without one "
                   "[the kubeconfig context's namespace, else default]")
    p.add_argument("--kubeconfig", default=default_kubeconfig(),
                   help="kubeconfig [the first file of KUBECONFIG, else ~/.kube/config, else "
                   "the in-cluster config]")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    return p


def _pod_claims(cluster: _Cluster, text: str, default_ns: str
                ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The pod and its claims (from its status for template-made ones; the template itself
    when the claim is not made yet)."""
    namespace, name = _ns_name(text, "--pod", default_ns)
    pod: dict[str, Any] = cluster.api.http.json(
        "GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    spec = pod.get("spec") or {}
    made = {s.get("name"): s.get("resourceClaimName")
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
    def fetch(plural: str, kind: str, obj: str, ref: dict[str, Any]) -> dict[str, Any]:
        try:
            return cluster.get(plural, obj, namespace)
        except Exception as e:   # a missing claim or template: name it and the pod's entry
            from drakit.plugin.api.resourceapi import describe

            raise UsageError(f"pod {namespace}/{name}, claim {ref.get('name')!r}: {kind} "
                             f"{namespace}/{obj}: {' '.join(describe(e).split())}") from None

    claims = []
    for ref in spec.get("resourceClaims") or []:
        claim_name = ref.get("resourceClaimName") or made.get(ref.get("name"))
        if claim_name:
            claims.append(fetch("resourceclaims", "ResourceClaim", claim_name, ref))
        elif ref.get("resourceClaimTemplateName"):
            claims.append({"kind": "ResourceClaimTemplate", **fetch(
                "resourceclaimtemplates", "ResourceClaimTemplate",
                ref["resourceClaimTemplateName"], ref)})
    if not claims:
        raise UsageError(f"pod {namespace}/{name} has no resource claims")
    return pod, claims


def _inputs(ns: argparse.Namespace) -> _Inputs:
    given = [x for x in (ns.claim, ns.filename, ns.template, ns.pod) if x]
    if len(given) != 1:
        raise UsageError("give exactly one of NAMESPACE/NAME, -f FILE, --template NS/NAME, "
                         "--pod NS/NAME")
    node_name = ns.node or (None if ns.pod else os.environ.get("NODE_NAME"))
    if not ns.pod and not node_name:
        raise UsageError("--node is required (or NODE_NAME)")
    need_cluster = not (ns.filename and ns.slices_file and ns.classes_file
                        and ns.no_cluster_claims)
    cluster = _Cluster(ns.kubeconfig) if need_cluster else None
    default_ns = ns.namespace or _context_namespace(ns.kubeconfig)
    pod: dict[str, Any] = {}
    claim: Any
    if ns.pod:
        assert cluster is not None
        pod, claim = _pod_claims(cluster, ns.pod, default_ns)
    elif ns.filename:
        docs = _documents(ns.filename)
        if len(docs) != 1:
            raise UsageError(f"{ns.filename}: expected one ResourceClaim or "
                             f"ResourceClaimTemplate, found {len(docs)} objects")
        claim = docs[0]
    elif ns.template:
        assert cluster is not None
        namespace, name = _ns_name(ns.template, "--template", default_ns)
        claim = {"kind": "ResourceClaimTemplate",
                 **cluster.get("resourceclaimtemplates", name, namespace)}
    else:
        assert cluster is not None
        namespace, name = _ns_name(ns.claim, "claim", default_ns)
        claim = cluster.get("resourceclaims", name, namespace)
    out = _Inputs(
        claim,
        _documents(ns.slices_file) if ns.slices_file else
        (cluster.list("resourceslices") if cluster else []),
        _documents(ns.classes_file) if ns.classes_file else
        (cluster.list("deviceclasses") if cluster else []),
        [] if ns.no_cluster_claims or cluster is None else cluster.list("resourceclaims"),
        pod=pod)
    if node_name is None:
        assert cluster is not None
        try:
            out.nodes = cluster.list("nodes", core=True)
        except Exception as e:
            from drakit.plugin.api.resourceapi import describe

            raise UsageError(f"listing the nodes to judge them all: {' '.join(describe(e).split())}"
                             " (give --node NODE to judge one node)") from None
        return out
    out.node = {"metadata": {"name": node_name}}
    if cluster is not None:
        # no read access to nodes (or no Node): slices by nodeName still match
        try:
            out.node = cluster.node(node_name)
        except Exception as e:
            if getattr(e, "status", None) == 404:   # a misspelt --node, most likely
                out.notes.append(f"no Node {node_name} on the server: judged by the "
                                 "ResourceSlices that name it alone")
    return out


def explain_main(argv: Sequence[str], prog: str = "drakit explain") -> int:
    """``drakit explain`` (``prog``: the name in usage and error lines)."""
    parser = _parser(prog)
    ns = parser.parse_args(argv)
    try:
        from drakit.allocator.cluster import explain_cluster
        from drakit.allocator.explanation import explain, explain_pod
        from drakit.allocator.objects import ObjectError

        got = _inputs(ns)
        for note in got.notes:
            print(f"{prog}: {note}", file=sys.stderr)
        result: Any
        if got.node is None:
            result = explain_cluster(got.pod, got.claim, got.slices, got.classes, got.nodes,
                                     got.others)
        elif ns.pod:
            result = explain_pod(ns.pod, got.claim, got.slices, got.classes, got.node,
                                 got.others)
        else:
            result = explain(got.claim, got.slices, got.classes, got.node, got.others)
    except (UsageError, ObjectError, ImportError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # the API's answer, one line
        from drakit.plugin.api.resourceapi import describe

        print(f"{prog}: {' '.join(describe(e).split())}", file=sys.stderr)
        return 2
    print(json.dumps(result.to_dict(), indent=2) if ns.output == "json" else result)
    return 0 if result.allocatable else 1
