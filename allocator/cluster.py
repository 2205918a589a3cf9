"""Why a pod is pending, across the whole cluster: every node judged as kube-scheduler 1.37
judges it for a pod with ResourceClaims. First the filters ahead of DynamicResources
(:mod:`drakit.allocator.placement`: NodeName, NodeUnschedulable, TaintToleration,
NodeAffinity), then DynamicResources: allocated claims must be available on the node
(``allocation.nodeSelector``), the pending ones allocated together from the slices the node
sees (``nodeName``, ``nodeSelector``, ``allNodes``, ``perDeviceNodeSelection``).

The answer has one verdict per node, the nodes where the pod fits first, then those closest
to fitting (most requests with enough matching devices, then most matching devices toward
the requests' counts), then those the filters rejected;
and the scheduler's summary line, ``0/N nodes are available: <count> <reason>, ...``
(FitError.Error of pkg/scheduler/framework: reasons counted per node and sorted as text).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from drakit.allocator import objects, placement
from drakit.allocator.celenv import Environment
from drakit.allocator.engine import AllocationError, namespaced_name
from drakit.allocator.explanation import (
    Context,
    PodExplanation,
    explain_pod_v1,
    explain_v1,
    pod_state,
    progress,
    together,
)
from drakit.allocator.nodes import selector_matches
from drakit.allocator.state import AllocatedState

#: the DynamicResources plugin's reasons (pkg/scheduler/framework/plugins/dynamicresources)
CANNOT_ALLOCATE: Final = "cannot allocate all claims"
INVALID_POOLS: Final = "invalid resource pools were encountered"
NOT_AVAILABLE: Final = "resourceclaim not available on the node"


@dataclass
class NodeVerdict:
    """One node: ``fits``; else ``plugin`` and ``reason`` (the scheduler's text) and
    ``detail`` (what failed there: the taint, the label, the first claim-level reason);
    ``satisfied`` of ``requests``: the pod's pending requests with enough matching devices on
    the node, each judged alone; ``devices`` of ``wanted``: their matching devices counted up
    to each request's count (DynamicResources only)."""

    node: str
    fits: bool
    plugin: str = ""
    reason: str = ""
    detail: str = ""
    satisfied: int = 0
    requests: int = 0
    devices: int = 0
    wanted: int = 0


@dataclass
class ClusterExplanation:
    """A pod across the cluster: ``nodes`` in the order shown (fits, closest, rejected);
    ``summary`` the scheduler's line when the pod fits nowhere; ``error`` what the scheduler
    fails the pod with (a selector's CEL error; the nodes after the one it came from are not
    judged, as the scheduler stops there too); ``only_node`` the full answer of the one node
    left when only one passes the filters ahead of DynamicResources."""

    pod: str
    nodes: list[NodeVerdict] = field(default_factory=list)
    summary: str = ""
    error: str = ""
    only_node: PodExplanation | None = None

    @property
    def allocatable(self) -> bool:
        return not self.error and any(v.fits for v in self.nodes)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "allocatable": self.allocatable}

    def __str__(self) -> str:
        """The text ``drakit explain --pod`` prints without ``--node``."""
        fit = sum(v.fits for v in self.nodes)
        head = (f"pod {self.pod}: ALLOCATABLE on {fit} of {len(self.nodes)} node(s)"
                if self.allocatable else f"pod {self.pod}: NOT ALLOCATABLE")
        lines = [head]
        if self.error:
            lines.append(f"  error (the scheduler fails the pod with it): {self.error}")
        if self.summary:
            lines.append(f"  {self.summary}")
        width = max((len(v.node) for v in self.nodes), default=0)
        for v in self.nodes:
            if v.fits:
                text = "allocatable" + (f": {v.detail}" if v.detail else "")
            else:
                text = v.reason.removeprefix("node(s) ")
                if v.requests:
                    text += (f" ({v.satisfied}/{v.requests} requests, {v.devices}/{v.wanted} "
                             "devices)")
                if v.detail:
                    text += f": {v.detail}"
            lines.append(f"  {v.node.ljust(width)}  {text}")
        if self.only_node is not None:
            lines.append("")
            lines += str(self.only_node).splitlines()
        return "\n".join(lines)


class _SliceIndex:
    """The slices a node may see, without testing every slice on every node: all slices of
    the pools that have a slice for the node by ``nodeName``, and of the pools with a slice
    for nodes by ``allNodes``, ``nodeSelector`` or ``perDeviceNodeSelection`` (a pool's other
    slices are needed to judge whether it is complete)."""

    def __init__(self, slices: Sequence[dict[str, Any]]) -> None:
        self.slices = slices
        self._pools: dict[tuple[str, str], list[int]] = {}
        self._named: dict[str, set[tuple[str, str]]] = {}
        self._shared: set[tuple[str, str]] = set()
        for i, s in enumerate(slices):
            spec = s.get("spec") or {}
            key = (spec.get("driver", ""), (spec.get("pool") or {}).get("name", ""))
            self._pools.setdefault(key, []).append(i)
            if spec.get("nodeName"):
                self._named.setdefault(spec["nodeName"], set()).add(key)
            else:
                self._shared.add(key)

    def for_node(self, name: str) -> list[dict[str, Any]]:
        keys = self._named.get(name, set()) | self._shared
        return [self.slices[i] for i in sorted(i for k in keys for i in self._pools[k])]


_DIGITS: Final = re.compile(r"(\d+)")


def _natural(name: str) -> list[Any]:
    """node-2 before node-10."""
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in _DIGITS.split(name)]


def summary(verdicts: Iterable[NodeVerdict], total: int) -> str:
    """The scheduler's line when the pod fits nowhere (FitError.Error)."""
    counts: dict[str, int] = {}
    for v in verdicts:
        if not v.fits:
            counts[v.reason] = counts.get(v.reason, 0) + 1
    return f"0/{total} nodes are available: " + ", ".join(
        sorted(f"{n} {reason}" for reason, n in counts.items())) + "."


def _class_missing(ctx: Context, claims: Sequence[Mapping[str, Any]]) -> str:
    """DynamicResources' PreFilter: a request whose DeviceClass does not exist."""
    for c in claims:
        for req in c["spec"]["devices"]["requests"]:
            for spec in req.get("firstAvailable") or [req.get("exactly") or {}]:
                name = spec.get("deviceClassName") or ""
                if name and name not in ctx.classes:
                    return f"request {req['name']}: device class {name} does not exist"
    return ""


def _judge(ctx: Context, mine: Sequence[Mapping[str, Any]],
           pending: Sequence[Mapping[str, Any]], slices: Sequence[dict[str, Any]],
           node: Mapping[str, Any], state: AllocatedState) -> NodeVerdict:
    """DynamicResources' Filter on one node."""
    name = (node.get("metadata") or {}).get("name", "")
    verdict = NodeVerdict(name, True)
    if pending:
        outcome = ctx.allocator(slices, node, state).allocate(pending)
        if outcome.error:
            raise AllocationError(outcome.error)
        if outcome.results is None:
            verdict.fits = False
            verdict.plugin = "DynamicResources"
            verdict.reason = INVALID_POOLS if outcome.invalid_pools else CANNOT_ALLOCATE
            alone = [explain_v1(ctx, c, slices, node, state,
                                outcome if len(pending) == 1 else None) for c in pending]
            for e in alone:
                ok, of, matched, wanted = progress(e)
                verdict.satisfied += ok
                verdict.requests += of
                verdict.devices += matched
                verdict.wanted += wanted
            bad = [e for e in alone if not e.allocatable]
            verdict.detail = (f"claim {bad[0].claim}: " + "; ".join(bad[0].reasons[:1])
                              if bad else together(ctx, pending, alone, slices, node, state))
            return verdict
        picked = [f"{r['request']}={r['driver']}/{r['pool']}/{r['device']}"
                  for res in outcome.results for r in res["devices"]["results"]]
        verdict.detail = "would allocate " + ", ".join(picked)
    for c in mine:  # allocated claims, checked after the allocation as the plugin does
        selector = ((c.get("status") or {}).get("allocation") or {}).get("nodeSelector")
        if selector and not selector_matches(selector, node):
            verdict.fits = False
            verdict.plugin, verdict.reason = "DynamicResources", NOT_AVAILABLE
            verdict.detail = f"claim {(c.get('metadata') or {}).get('name')} is allocated " \
                             "on other node(s)"
            return verdict
    return verdict


def _order(v: NodeVerdict) -> tuple[Any, ...]:
    if v.fits:
        return (0, 0, 0, _natural(v.node))
    if v.plugin == "DynamicResources":
        return (1, -v.satisfied, -v.devices, _natural(v.node))
    return (2, 0, 0, _natural(v.node))


def explain_cluster(pod: Mapping[str, Any], claims: Iterable[Mapping[str, Any]],
                    slices: Iterable[Mapping[str, Any]], classes: Iterable[Mapping[str, Any]],
                    nodes: Iterable[Mapping[str, Any]],
                    other_claims: Iterable[Mapping[str, Any]] = (),
                    env: Environment | None = None) -> ClusterExplanation:
    """Judge every node of ``nodes`` (Node objects) for ``pod`` (a Pod object) whose
    ResourceClaims are ``claims`` (any supported version; a template stands for a claim not
    made yet), given the cluster's ResourceSlices, DeviceClasses and other claims."""
    out = ClusterExplanation(namespaced_name(pod))
    ctx = Context.of(classes, env)
    mine = [objects.claim_v1(c) for c in claims]
    pending = [c for c in mine if not (c.get("status") or {}).get("allocation")]
    state = pod_state(mine, other_claims)
    index = _SliceIndex([objects.slice_v1(s) for s in slices])
    nodes = sorted(nodes, key=lambda n: _natural((n.get("metadata") or {}).get("name", "")))
    allowed, plugins = placement.prefilter(pod)
    missing = _class_missing(ctx, pending)
    if (allowed is not None and not allowed) or missing:
        why = missing or placement.prefilter_conflict(plugins)
        out.nodes = [NodeVerdict((n.get("metadata") or {}).get("name", ""), False,
                                 "PreFilter", why) for n in nodes]
        out.summary = f"0/{len(nodes)} nodes are available: {why}."
        return out
    passed: list[Mapping[str, Any]] = []
    for node in nodes:
        name = (node.get("metadata") or {}).get("name", "")
        if allowed is not None and name not in allowed:
            out.nodes.append(NodeVerdict(name, False, " ".join(plugins),
                                         placement.prefilter_reason(plugins)))
            continue
        rejected = placement.reject(pod, node)
        if rejected is not None:
            out.nodes.append(NodeVerdict(name, False, rejected.plugin, rejected.reason,
                                         rejected.detail))
            continue
        passed.append(node)
        try:
            out.nodes.append(_judge(ctx, mine, pending, index.for_node(name), node, state))
        except AllocationError as e:
            out.error = str(e)
            break
    out.nodes.sort(key=_order)
    if not out.error and not out.allocatable:
        out.summary = summary(out.nodes, len(out.nodes))
    if len(passed) == 1 and not out.error:
        out.only_node = explain_pod_v1(ctx, out.pod, mine, index.for_node(
            (passed[0].get("metadata") or {}).get("name", "")), passed[0], state)
    return out
