"""Orphan claims: checkpointed claims whose ResourceClaim is gone or was re-created with a new
UID. The kubelet normally unprepares every claim, but a lost kubelet checkpoint or a forced
pod deletion can leave devices prepared forever. After ``grace`` seconds of being seen
missing, such a claim is unprepared locally (driver hooks, CDI spec, checkpoint entry) -
but only when no pod on this node still references it: the kubelet is the authority on what
runs here, and a force-deleted claim may still be in use by a running container. Pods are
read from the API (``GET /api/v1/pods?fieldSelector=spec.nodeName=<node>``); a pod
references claim ``<ns>/<name>`` by ``spec.resourceClaims[].resourceClaimName`` or
``status.resourceClaimStatuses[].resourceClaimName``, and a pod with a template claim whose
generated name is not in its status yet may use any claim of its namespace. Pods in phase
Succeeded or Failed do not count (their containers are done). When the pods cannot be
listed, nothing is unprepared in that pass. Its AllocatedDeviceStatus is left alone (the
claim is gone, or a new claim holds the name). Each pass also rolls back claims left
``PrepareStarted`` by a crashed instance (rolling update) and removes this driver's CDI specs
that no checkpoint entry owns (a spec whose removal failed during an unprepare).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

from drakit.plugin.claims.checkpoint import (
    Checkpoint,
    CheckpointFullError,
    CheckpointWriteError,
)

log = logging.getLogger(__name__)

#: Seconds one pass may spend on the API (claim reads and the pod list).
SWEEP_API_SECONDS = 30.0


class _Reader(Protocol):
    def get_claim(self, namespace: str, name: str,
                  deadline: float | None = None) -> dict[str, Any] | None: ...


class _Node(Protocol):
    def unprepare_claims(self, claims: list[Any], write_status: bool = True) -> dict[str, str]: ...
    def sweep_orphan_specs(self) -> list[str]: ...
    def rollback_dead_owners(self) -> int: ...


class _PodLister(Protocol):
    def list_node_pods(self, node: str, timeout: float | None = None) -> list[dict[str, Any]]: ...


ANY_CLAIM = "*"
"""A claim name in :meth:`NodePods.claims_in_use` standing for every claim of a namespace."""


def pod_claims(pod: dict[str, Any]) -> set[tuple[str, str]]:
    """(namespace, claim name) pairs a pod references; ``(ns, ANY_CLAIM)`` when it has a
    template claim not yet resolved in ``status.resourceClaimStatuses``. Empty for a pod in
    phase Succeeded or Failed."""
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
    ns = str((meta or {}).get("namespace") or "")
    status = pod.get("status") if isinstance(pod.get("status"), dict) else {}
    if (status or {}).get("phase") in ("Succeeded", "Failed"):
        return set()
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    out: set[tuple[str, str]] = set()
    resolved: set[str] = set()
    for st in (status or {}).get("resourceClaimStatuses") or []:
        if isinstance(st, dict) and isinstance(st.get("resourceClaimName"), str):
            out.add((ns, st["resourceClaimName"]))
            resolved.add(str(st.get("name")))
    for rc in (spec or {}).get("resourceClaims") or []:
        if not isinstance(rc, dict):
            continue
        if isinstance(rc.get("resourceClaimName"), str):
            out.add((ns, rc["resourceClaimName"]))
        elif rc.get("resourceClaimTemplateName") and str(rc.get("name")) not in resolved:
            out.add((ns, ANY_CLAIM))
    return out


class NodePods:
    """The claims pods on ``node`` reference, from the API (``pods`` get/list RBAC)."""

    def __init__(self, api: _PodLister, node: str) -> None:
        self.api = api
        self.node = node

    def claims_in_use(self, timeout: float | None = None) -> set[tuple[str, str]]:
        """(namespace, name) of every claim referenced by a pod on this node (see
        :func:`pod_claims`); raises what the API call raises."""
        used: set[tuple[str, str]] = set()
        for pod in self.api.list_node_pods(self.node, timeout=timeout):
            used |= pod_claims(pod)
        return used


class _Pods(Protocol):
    def claims_in_use(self, timeout: float | None = None) -> set[tuple[str, str]]: ...


class OrphanSweeper:
    """One pass per :meth:`sweep`; remembers when each claim was first seen missing.
    ``pods`` tells which claims pods on this node use; without it (tests of old callers)
    no claim is ever unprepared by the sweep."""

    def __init__(self, node: _Node, checkpoint: Checkpoint, claims: _Reader, grace: float,
                 pods: _Pods | None = None) -> None:
        self.node = node
        self.checkpoint = checkpoint
        self.claims = claims
        self.grace = grace
        self.pods = pods
        self._missing_since: dict[str, float] = {}

    def sweep(self, now: float | None = None) -> list[str]:
        """Check every completed claim against the API; unprepare those missing for longer
        than the grace period that no pod on this node references. Returns the UIDs
        unprepared. API errors skip the claim (or, for the pod list, the pass)."""
        from drakit.discovery.plugin import ClaimRef

        now = time.monotonic() if now is None else now
        deadline = time.monotonic() + SWEEP_API_SECONDS
        done: list[str] = []
        records = self.checkpoint.claims()
        for uid in list(self._missing_since):
            if uid not in records:
                del self._missing_since[uid]
        due = []
        for uid, rec in records.items():
            if rec.phase != "PrepareCompleted":
                continue
            try:
                claim = self.claims.get_claim(rec.namespace, rec.name, deadline=deadline)
            except Exception as e:
                log.debug("orphan check of %s/%s skipped: %s", rec.namespace, rec.name, e)
                continue
            gone = claim is None or (claim.get("metadata") or {}).get("uid") != uid
            if not gone:
                self._missing_since.pop(uid, None)
                continue
            first = self._missing_since.setdefault(uid, now)
            if now - first >= self.grace:
                due.append(rec)
        used: set[tuple[str, str]] | None = None
        if due and self.pods is not None:
            try:
                used = self.pods.claims_in_use(timeout=max(1.0, deadline - time.monotonic()))
            except Exception as e:
                log.warning("orphan sweep: listing the pods of this node failed (%s); no "
                            "orphan claim is unprepared in this pass", e)
        for rec in due if used is not None else []:
            assert used is not None
            uid = rec.uid
            if (rec.namespace, rec.name) in used or (rec.namespace, ANY_CLAIM) in used:
                log.info("ResourceClaim %s/%s (uid %s) is gone but a pod on this node still "
                         "references it; left prepared", rec.namespace, rec.name, uid,
                         extra={"claim_uid": uid})
                continue
            log.warning("ResourceClaim %s/%s (uid %s) is gone and no pod on this node "
                        "references it; unpreparing it locally",
                        rec.namespace, rec.name, uid, extra={"claim_uid": uid})
            ref = ClaimRef(namespace=rec.namespace, name=rec.name, uid=uid)
            if not self.node.unprepare_claims([ref], write_status=False)[uid]:
                done.append(uid)
                self._missing_since.pop(uid, None)
        try:
            self.node.rollback_dead_owners()
            self.node.sweep_orphan_specs()
        except CheckpointWriteError:
            raise  # fatal: the supervisor of this sweep stops the agent
        except CheckpointFullError as e:
            log.error("rolling back crashed prepares / sweeping orphan CDI specs: %s; tried "
                      "again in the next sweep", e)
        except Exception:
            log.exception("rolling back crashed prepares / sweeping orphan CDI specs failed")
        return done
