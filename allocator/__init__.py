"""A node-local DRA allocator: what kube-scheduler's DRA plugin decides for one node's devices
(k8s.io/dynamic-resource-allocation ``structured``, Kubernetes 1.37), with the reasons.

Plain API dicts in (ResourceSlices, DeviceClasses, ResourceClaims in resource.k8s.io v1,
v1beta2 or v1beta1 shape), plain dicts out. Used by ``drakit explain`` and the test kit; the
node agent (``drakit run``) never imports it, nor the CEL runtime it needs.
"""

from __future__ import annotations

if __name__ != "drakit.allocator":  # the checkout's top-level folder, imported by its own name
    raise ImportError(f"{__name__} is a folder of the drakit checkout, not a package of its "
                      f"own (a second copy of every module): import drakit.allocator instead")

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["AllocationFailed", "allocate", "explain"]


class AllocationFailed(Exception):
    """The claims cannot be allocated on the node; ``explanation`` says why."""

    def __init__(self, message: str, explanation: Any = None) -> None:
        super().__init__(message)
        self.explanation = explanation


def explain(claim: Mapping[str, Any], slices: Iterable[Mapping[str, Any]],
            classes: Iterable[Mapping[str, Any]], node: Mapping[str, Any] | str,
            other_claims: Iterable[Mapping[str, Any]] = ()) -> Any:
    """:class:`drakit.allocator.explanation.Explanation` of ``claim`` on ``node``."""
    from drakit.allocator.explanation import explain as run

    return run(claim, slices, classes, node, other_claims)


def allocate(claims: Sequence[Mapping[str, Any]], slices: Iterable[Mapping[str, Any]],
             classes: Iterable[Mapping[str, Any]], node: Mapping[str, Any] | str,
             other_claims: Iterable[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    """The ``status.allocation`` (AllocationResult) of each claim, as the scheduler would
    choose for ``node``; raises :class:`AllocationFailed` (with the explanation of the first
    claim that cannot be allocated) when they cannot all be allocated there."""
    from drakit.allocator import objects
    from drakit.allocator.engine import Allocator
    from drakit.allocator.explanation import explain as run
    from drakit.allocator.state import from_claims

    node_obj = node if isinstance(node, Mapping) else {"metadata": {"name": node}}
    slices, classes, other_claims = list(slices), list(classes), list(other_claims)
    mine = [objects.claim_v1(c) for c in claims]
    uids = {(c.get("metadata") or {}).get("uid") for c in mine} - {None, ""}
    others = [c for c in other_claims if (c.get("metadata") or {}).get("uid") not in uids]
    alloc = Allocator([objects.slice_v1(s) for s in slices],
                      {k["metadata"]["name"]: k for k in map(objects.class_v1, classes)},
                      node_obj, from_claims(others))
    outcome = alloc.allocate(mine)
    if outcome.results is None:
        why = None
        for c in mine:
            why = run(c, slices, classes, node_obj, others)
            if not why.allocatable:
                break
        reasons = why.reasons if why is not None else []
        text = outcome.error or "; ".join(reasons) or "cannot allocate all claims"
        raise AllocationFailed(f"cannot allocate claim(s) on node "
                               f"{(node_obj.get('metadata') or {}).get('name')}: {text}", why)
    return outcome.results
