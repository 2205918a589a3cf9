"""``drakit cleanup``: after an uninstall, delete the ResourceSlices a driver's node agents
left behind, for one node or for every node at once, or only list them (dry run).

The agent does not delete its slices on SIGTERM (a rolling update's next pod takes them
over). Once the DaemonSet is gone for good, the slices still advertise devices the
scheduler may allocate: slices with a Node owner reference go with their Node, but the
nodes stay. Which slices are the driver's: ``spec.driver`` (field selector) and, for one
node, ``spec.nodeName`` plus the publisher's node label for pools without a node name
(:data:`~drakit.plugin.slices.publisher.PUBLISHER_NODE_LABEL`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from drakit.plugin.api.resourceapi import ResourceAPI
from drakit.plugin.api.retry import Deadline
from drakit.plugin.slices.calls import ApiCalls
from drakit.plugin.slices.publisher import PUBLISHER_NODE_LABEL, node_label_value

#: Seconds one ``drakit cleanup`` may take in all (lists, deletes and their retries).
CLEANUP_SECONDS = 300.0


@dataclass(frozen=True)
class SliceRef:
    """One ResourceSlice to delete: its name, node (``spec.nodeName``, or the publisher's
    node label of a pool without one; "" when neither) and pool."""

    name: str
    node: str
    pool: str


def driver_slices(api: ResourceAPI, driver: str, node: str | None = None, *,
                  calls: ApiCalls | None = None,
                  deadline: Deadline | float | None = None) -> list[SliceRef]:
    """The ResourceSlices of ``driver``: on ``node`` when given (node-local ones and those
    its agent published for pools without a node name), else every one of the driver,
    sorted by node, pool and name."""
    call = calls or ApiCalls()
    what = "ResourceSlice cleanup"
    if node is None:
        found = call(lambda: api.list_slices(driver), what, deadline).items
    else:
        local = call(lambda: api.list_slices(driver, node), what, deadline).items
        labelled = call(lambda: api.list_slices(
            driver, label_selector=f"{PUBLISHER_NODE_LABEL}={node_label_value(node)}"),
            what, deadline).items
        found = local + [o for o in labelled if not o["spec"].get("nodeName")]
    refs = {}
    for o in found:
        meta, spec = o["metadata"], o.get("spec", {})
        where = spec.get("nodeName") or meta.get("labels", {}).get(PUBLISHER_NODE_LABEL, "")
        refs[meta["name"]] = SliceRef(meta["name"], str(where),
                                      str(spec.get("pool", {}).get("name", "")))
    return sorted(refs.values(), key=lambda r: (r.node, r.pool, r.name))


def delete_slices(api: ResourceAPI, refs: list[SliceRef], *, calls: ApiCalls | None = None,
                  deadline: Deadline | float | None = None) -> int:
    """Delete ``refs``; one already gone counts as deleted by someone else (not counted).
    Returns how many this call deleted; the first other error is raised."""
    from drakit.plugin.api.retry import ErrorKind, classify

    call = calls or ApiCalls()
    deleted = 0
    for ref in refs:
        try:
            call(lambda n=ref.name: api.delete_slice(n), "ResourceSlice cleanup",  # type: ignore[misc]
                 deadline)
            deleted += 1
        except Exception as exc:
            if classify(exc) is not ErrorKind.NOT_FOUND:
                raise
    return deleted


def default_deadline() -> float:
    return time.monotonic() + CLEANUP_SECONDS
