"""The AllocatedDeviceStatus a claim still owes the API server, kept in its checkpoint record.

A claim's status is as durable as the claim: the wish to apply this driver's
``status.devices`` entries (resource.k8s.io/v1 ``AllocatedDeviceStatus``, KEP-4817) is the
``status_owed`` flag of its ``PrepareCompleted`` record, written in the same checkpoint write
that records the claim prepared; the wish to remove them is the ``status_owed`` flag of the
``unprepared`` mark, written in the same write that drops the record. The status writer
clears a flag once the server holds what it asked for
(:func:`drakit.plugin.claims.lifecycle.settle`, batched); an agent
instance that starts and finds a flag set finishes the job (:func:`resume`). Nothing is set,
so nothing is sent at start-up, when every status was settled.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from functools import partial
from typing import Protocol

from drakit.discovery.plugin import ClaimRef
from drakit.plugin.claims.checkpoint import Checkpoint, CheckpointState, ClaimRecord
from drakit.plugin.claims.lifecycle import settle

log = logging.getLogger("drakit.plugin.claims.status")


class StatusQueue(Protocol):
    """Where a claim's AllocatedDeviceStatus work is queued (the status writer,
    :class:`drakit.plugin.claims.status.StatusWriter`): ``write`` the entries of a
    ``PrepareCompleted`` record (``resumed``: owed from before the start), ``remove`` them."""

    def write(self, claim: ClaimRef, record: ClaimRecord, *, resumed: bool = False) -> None: ...
    def remove(self, claim: ClaimRef) -> None: ...


def owed(state: CheckpointState) -> tuple[list[ClaimRecord], list[ClaimRef]]:
    """(records whose entries are owed, claims whose removal is owed) in ``state``."""
    applies = [rec for rec in state.claims.values()
               if rec.status_owed and rec.phase == "PrepareCompleted"]
    removals = [ClaimRef(namespace=mark.namespace, name=mark.name, uid=uid)
                for uid, mark in state.unprepared.items()
                if mark.status_owed and mark.namespace and mark.name
                and uid not in state.claims]
    return applies, removals


class CheckpointLedger:
    """Settles the status writer's finished work in ``checkpoint``: one write per batch, none
    when no flag is set any more (another instance settled it, the claim is gone)."""

    def __init__(self, checkpoint: Checkpoint) -> None:
        self.checkpoint = checkpoint

    def settled(self, applied: Mapping[str, float], removed: Collection[str]) -> None:
        """Raises CheckpointError when the checkpoint cannot be read or written."""
        if not settle(self.checkpoint.state(), applied, removed):
            return
        self.checkpoint.change(partial(settle, applied=applied, removed=removed))


def resume(checkpoint: Checkpoint, status: StatusQueue) -> tuple[int, int]:
    """Queue the status work a previous instance left owed (start-up). Returns (applies,
    removals) queued. Raises CheckpointError while the checkpoint is corrupt."""
    applies, removals = owed(checkpoint.state())
    for rec in applies:
        status.write(ClaimRef(namespace=rec.namespace, name=rec.name, uid=rec.uid), rec,
                     resumed=True)
    for ref in removals:
        status.remove(ref)
    if applies or removals:
        log.info("AllocatedDeviceStatus owed from before the start: %d apply(ies), %d "
                 "removal(s) queued", len(applies), len(removals))
    return len(applies), len(removals)
