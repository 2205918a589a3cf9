"""The admission kube-apiserver runs on ResourceSlices that the embedded API server runs too:
NodeDeclaredFeatures for ``nodeAllocatableResources`` (Kubernetes 1.37,
DRANodeAllocatableResources gate).

Errors: :class:`~drakit.plugin.testing.apiserver.errors.ApiError` (403).
"""

from __future__ import annotations

from typing import Any

from drakit.plugin.testing.apiserver import errors as errors
from drakit.plugin.testing.apiserver.resources import NODES, RESOURCE_SLICES
from drakit.plugin.testing.apiserver.store import Store

__all__ = ["NODE_ALLOCATABLE_FEATURE", "admit_node_allocatable"]

NODE_ALLOCATABLE_FEATURE = "DRANodeAllocatableResources"
"""The node feature (``Node.status.declaredFeatures``) nodeAllocatableResources needs."""


def admit_node_allocatable(store: Store, obj: dict[str, Any]) -> None:
    """The NodeDeclaredFeatures admission plugin (kube-apiserver 1.37, with the
    DRANodeAllocatableResources gate): a device with ``nodeAllocatableResources`` on one
    node (``spec.nodeName``, or the device's ``nodeName`` under perDeviceNodeSelection)
    needs that Node to exist and to list ``DRANodeAllocatableResources`` in
    ``status.declaredFeatures``; otherwise 403. Devices on several nodes (nodeSelector,
    allNodes) are not checked here."""
    spec = obj.get("spec") or {}
    name = obj["metadata"].get("name", "")
    per_device = spec.get("perDeviceNodeSelection") is True
    for dev in spec.get("devices") or []:
        if not isinstance(dev, dict) or not dev.get("nodeAllocatableResources"):
            continue
        node_name = dev.get("nodeName") if per_device else spec.get("nodeName")
        if not node_name:
            continue
        node = store.get((NODES.plural, "", node_name))
        refused = None
        if node is None:
            refused = f'node "{node_name}" not found for device "{dev.get("name")}"'
        elif NODE_ALLOCATABLE_FEATURE not in ((node.get("status") or {}).get(
                "declaredFeatures") or []):
            refused = f'node "{node_name}" does not support {NODE_ALLOCATABLE_FEATURE} feature'
        if refused is not None:
            raise errors.admission_forbidden(RESOURCE_SLICES.plural, RESOURCE_SLICES.group,
                                             name, refused)
