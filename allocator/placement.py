"""Where a pod may go before its devices are looked at: kube-scheduler's filters that run
ahead of DynamicResources, in the order of its default plugins (Kubernetes 1.37
``pkg/scheduler/apis/config/v1/default_plugins.go``): NodeName, NodeUnschedulable,
TaintToleration, NodeAffinity. Each rejection carries the scheduler's reason text (what its
"0/N nodes are available" line counts) and what exactly failed on the node.

The PreFilter step is modelled too: a pod's ``spec.nodeName`` (NodeName) and the
``metadata.name`` ``In`` requirements of its required node affinity (NodeAffinity) limit the
nodes looked at; every other node counts as "node(s) didn't satisfy plugin(s) [...]".

Not modelled: the filters that judge what runs on a node (NodePorts, NodeResourcesFit,
volumes, PodTopologySpread, InterPodAffinity) and scheduler profiles' added affinity.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from drakit.allocator.engine import blocking_taint, describe_taint, tolerates
from drakit.allocator.nodes import selector_matches

#: the scheduler's reason texts (the plugins' ErrReason constants)
NODE_NAME: Final = "node(s) didn't match the requested node name"
UNSCHEDULABLE: Final = "node(s) were unschedulable"
TAINTS: Final = "node(s) had untolerated taint(s)"
AFFINITY: Final = "node(s) didn't match Pod's node affinity/selector"

_UNSCHEDULABLE_TAINT: Final = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


@dataclass(frozen=True)
class Rejection:
    """Why a filter rejects a node: ``plugin`` (NodeName, NodeUnschedulable, TaintToleration,
    NodeAffinity, or the PreFilter's list), ``reason`` the scheduler's text, ``detail`` what
    on this node."""

    plugin: str
    reason: str
    detail: str


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("spec") or {}


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _required(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    affinity = (_spec(pod).get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    return required if isinstance(required, Mapping) else None


def prefilter(pod: Mapping[str, Any]) -> tuple[set[str] | None, list[str]]:
    """(the only node names the pod may go to, or None for all; the plugins that said so,
    sorted). An empty set: no node satisfies them together."""
    allowed: set[str] | None = None
    plugins: list[str] = []
    if _spec(pod).get("nodeName"):
        allowed, plugins = {_spec(pod)["nodeName"]}, ["NodeName"]
    required = _required(pod)
    terms = (required or {}).get("nodeSelectorTerms") or []
    names: set[str] | None = None
    for term in terms:
        term_names: set[str] | None = None
        for req in term.get("matchFields") or []:
            if req.get("key") == "metadata.name" and req.get("operator") == "In":
                vals = set(req.get("values") or [])
                term_names = vals if term_names is None else term_names & vals
        if term_names is None:  # a term without a name requirement: every node may match
            names = None
            break
        names = term_names if names is None else names | term_names
    if names is not None:
        allowed = names if allowed is None else allowed & names
        plugins.append("NodeAffinity")
    return allowed, sorted(plugins)


def prefilter_reason(plugins: Iterable[str]) -> str:
    """The scheduler's reason for a node the PreFilter step left out."""
    return f"node(s) didn't satisfy plugin(s) [{' '.join(sorted(plugins))}]"


def prefilter_conflict(plugins: Iterable[str]) -> str:
    """The scheduler's message when the PreFilter step leaves no node at all."""
    names = sorted(plugins)
    if len(names) == 1:
        return f"node(s) didn't satisfy plugin {names[0]}"
    return f"node(s) didn't satisfy plugin(s) [{' '.join(names)}] simultaneously"


def _affinity_detail(pod: Mapping[str, Any], node: Mapping[str, Any]) -> str | None:
    labels = (node.get("metadata") or {}).get("labels") or {}
    for key, want in (_spec(pod).get("nodeSelector") or {}).items():
        if labels.get(key) != want:
            have = f"{key}={labels[key]}" if key in labels else f"no label {key}"
            return f"nodeSelector {key}={want}: the node has {have}"
    required = _required(pod)
    if required is not None and not selector_matches(required, node):
        return "no nodeSelectorTerm of the required node affinity matches the node"
    return None


def reject(pod: Mapping[str, Any], node: Mapping[str, Any]) -> Rejection | None:
    """The first of NodeName, NodeUnschedulable, TaintToleration (NoSchedule and NoExecute
    taints, core/v1 toleration rules) and NodeAffinity (``nodeSelector`` and required node
    affinity) that rejects ``node`` for ``pod``; None when all let it pass."""
    spec, node_spec = _spec(pod), _spec(node)
    if spec.get("nodeName") and spec["nodeName"] != _name(node):
        return Rejection("NodeName", NODE_NAME, f"the pod is bound to {spec['nodeName']}")
    if node_spec.get("unschedulable") and not any(
            tolerates(t, _UNSCHEDULABLE_TAINT) for t in spec.get("tolerations") or []):
        return Rejection("NodeUnschedulable", UNSCHEDULABLE, "the node is cordoned "
                         "(spec.unschedulable)")
    taint = blocking_taint(node_spec, spec)
    if taint is not None:
        return Rejection("TaintToleration", TAINTS, describe_taint(taint))
    detail = _affinity_detail(pod, node)
    if detail is not None:
        return Rejection("NodeAffinity", AFFINITY, detail)
    return None
