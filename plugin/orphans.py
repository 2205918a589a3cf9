"""Orphan claims: checkpointed claims whose ResourceClaim is gone or was re-created with a new
UID. The kubelet normally unprepares every claim, but a lost kubelet checkpoint or a forced
pod deletion can leave devices prepared forever. After ``grace`` seconds of being seen
missing, such a claim is unprepared locally (driver hooks, CDI spec, checkpoint entry); its
AllocatedDeviceStatus is left alone (the claim is gone, or a new claim holds the name). Each
pass also rolls back claims left ``PrepareStarted`` by a crashed instance (rolling update) and
removes this driver's CDI specs that no checkpoint entry owns (a spec whose removal failed
during an unprepare).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

from plugin.checkpoint import Checkpoint

log = logging.getLogger(__name__)


class _Reader(Protocol):
    def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None: ...


class _Node(Protocol):
    def unprepare_claims(self, claims: list[Any], write_status: bool = True) -> dict[str, str]: ...
    def sweep_orphan_specs(self) -> list[str]: ...
    def rollback_dead_owners(self) -> int: ...


class OrphanSweeper:
    """One pass per :meth:`sweep`; remembers when each claim was first seen missing."""

    def __init__(self, node: _Node, checkpoint: Checkpoint, claims: _Reader, grace: float) -> None:
        self.node = node
        self.checkpoint = checkpoint
        self.claims = claims
        self.grace = grace
        self._missing_since: dict[str, float] = {}

    def sweep(self, now: float | None = None) -> list[str]:
        """Check every completed claim against the API; unprepare those missing for longer
        than the grace period. Returns the UIDs unprepared. API errors skip the claim."""
        from discovery.plugin import ClaimRef

        now = time.monotonic() if now is None else now
        done: list[str] = []
        records = self.checkpoint.claims()
        for uid in list(self._missing_since):
            if uid not in records:
                del self._missing_since[uid]
        for uid, rec in records.items():
            if rec.phase != "PrepareCompleted":
                continue
            try:
                claim = self.claims.get_claim(rec.namespace, rec.name)
            except Exception as e:
                log.debug("orphan check of %s/%s skipped: %s", rec.namespace, rec.name, e)
                continue
            gone = claim is None or (claim.get("metadata") or {}).get("uid") != uid
            if not gone:
                self._missing_since.pop(uid, None)
                continue
            first = self._missing_since.setdefault(uid, now)
            if now - first < self.grace:
                continue
            log.warning("ResourceClaim %s/%s (uid %s) is gone; unpreparing it locally",
                        rec.namespace, rec.name, uid, extra={"claim_uid": uid})
            ref = ClaimRef(namespace=rec.namespace, name=rec.name, uid=uid)
            if not self.node.unprepare_claims([ref], write_status=False)[uid]:
                done.append(uid)
                self._missing_since.pop(uid, None)
        try:
            self.node.rollback_dead_owners()
            self.node.sweep_orphan_specs()
        except Exception:
            log.exception("rolling back crashed prepares / sweeping orphan CDI specs failed")
        return done
