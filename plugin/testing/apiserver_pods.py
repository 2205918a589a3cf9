"""Core ``pods`` in the embedded API server, minimally: stored as given (no validation,
no defaulting), namespaced, a ``status`` subresource, and the field selectors
``metadata.name``, ``metadata.namespace``, ``spec.nodeName`` and ``status.phase`` (what a
node agent lists its node's pods by). Enough for the orphan sweep's "which claims do pods on
this node still use" (``spec.resourceClaims``, ``status.resourceClaimStatuses``)."""

from __future__ import annotations

from .apiserver_resources import ResourceInfo

PODS = ResourceInfo(
    plural="pods",
    singular="pod",
    kind="Pod",
    group="",
    namespaced=True,
    has_status=True,
    tracks_generation=False,
    field_labels=("metadata.name", "metadata.namespace", "spec.nodeName", "status.phase"),
    returns_deleted_object=True,
)
