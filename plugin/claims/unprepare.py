"""Unprepare of the claims one kubelet call runs, from the checkpoint alone.

Order: the devices' unprepare hooks; then the claims' CDI specs are removed, while their
records still name them; then ONE checkpoint write drops the records and leaves
``unprepared`` marks (for the stale-prepare rule and the owed AllocatedDeviceStatus
removal: :func:`drakit.plugin.claims.lifecycle.release`). When a spec cannot be removed (an
immutable or read-only CDI directory) its claim keeps its record and its error says so: the
device stays busy while a spec still names it, and the kubelet's retry finishes the job.
Nothing runs under the checkpoint's file lock but that write.

A crash between the spec's removal and the write leaves a ``PrepareCompleted`` record
without its spec, which the start-up recovery writes again
(:mod:`drakit.plugin.claims.recovery`) until the kubelet's retry unprepares the claim; a
spec is never removed from under a record another call or instance has just written (the
records are dropped only after their specs are gone).

The spec's removal is not made durable (no directory fsync: one fsync less per unprepare);
the record's removal after it is. After a power loss the spec may be back, with no record
naming it, and the start-up recovery removes it (the orphan-spec sweep, under the file
lock, before the kubelet can call).
"""

from __future__ import annotations

import logging
import time
from functools import partial

from drakit.cdi.errors import CDINameError
from drakit.discovery.plugin import ClaimRef
from drakit.plugin.claims.checkpoint import Checkpoint, CheckpointError, ClaimRecord
from drakit.plugin.claims.claimdevices import ClaimDevices, HookFailed, claim_ref
from drakit.plugin.claims.lifecycle import (
    Reservations,
    held_elsewhere,
    held_elsewhere_error,
    release,
)
from drakit.plugin.claims.owedstatus import StatusQueue
from drakit.plugin.events import Events
from drakit.plugin.klog import keys_of

log = logging.getLogger("drakit.plugin.claims.node")


class Unprepare:
    """The unprepare of owned claims (see the module docstring)."""

    def __init__(self, checkpoint: Checkpoint, devices: ClaimDevices,
                 status: StatusQueue | None, events: Events,
                 reservations: Reservations) -> None:
        self.checkpoint = checkpoint
        self.devices = devices
        self.status = status
        self.events = events
        self.reservations = reservations

    def run(self, refs: list[ClaimRef],
            write_status: bool) -> tuple[dict[str, str], dict[str, BaseException]]:
        """Claim UID → error ("" = released) for ``refs`` (validated, distinct), and the
        exception a vendor's unprepare hook raised, by claim UID (its traceback goes into
        the claim's one failure line: :mod:`drakit.plugin.claims.node`)."""
        results: dict[str, str] = {}
        causes: dict[str, BaseException] = {}
        drop: dict[str, ClaimRecord] = {}
        unknown: list[str] = []
        try:
            owner = self.checkpoint.owner
            dead = self.checkpoint.dead_owners([r.uid for r in refs])
        except CheckpointError as e:
            return {r.uid: self.events.checkpoint_failed(e) for r in refs}, causes
        for ref in refs:
            try:
                rec = self.checkpoint.get(ref.uid)
            except CheckpointError as e:
                results[ref.uid] = self.events.checkpoint_failed(e)
                continue
            if rec is None:
                unknown.append(ref.uid)
                results[ref.uid] = ""
                continue
            if held_elsewhere(rec, owner, dead):
                results[ref.uid] = held_elsewhere_error(f"claim {ref.uid}", rec)
                continue
            try:
                self.devices.unprepare(rec)
            except Exception as e:
                what = str(e) if isinstance(e, HookFailed) else f"{type(e).__name__}: {e}"
                results[ref.uid] = (f"ResourceClaim {rec.namespace}/{rec.name}: {what}; "
                                    "the claim stays prepared")
                causes[ref.uid] = e.__cause__ if isinstance(e, HookFailed) and e.__cause__ else e
                continue
            drop[ref.uid] = rec
            results[ref.uid] = ""
        if not (drop or unknown):
            return results, causes
        try:
            failed = self._drop(drop, unknown, write_status and self.status is not None)
        except CheckpointError as e:
            msg = self.events.checkpoint_failed(e)
            return results | dict.fromkeys(drop, msg), causes
        results.update(failed)
        for uid, rec in drop.items():
            if uid in failed:
                continue
            if write_status and self.status is not None and rec.phase == "PrepareCompleted":
                try:
                    self.status.remove(claim_ref(rec))
                except Exception:
                    log.exception("removing AllocatedDeviceStatus failed",
                                  extra=keys_of(rec))
        return results, causes

    def _drop(self, drop: dict[str, ClaimRecord], unknown: list[str],
              owe_status: bool) -> dict[str, str]:
        """Remove the CDI specs of ``drop`` (and any spec an ``unknown`` UID still has),
        then ONE checkpoint write: the records of ``drop`` whose spec is gone removed and
        marked unprepared with the ``unknown`` UIDs, each completed one owing the removal of
        its AllocatedDeviceStatus entries when ``owe_status``. Returns claim UID → error for
        the claims whose spec could not be removed (their records stay). Raises
        CheckpointError when the write fails."""
        failed = self._remove_specs(drop, unknown)
        self.checkpoint.change(partial(
            release, records={u: r for u, r in drop.items() if u not in failed},
            unknown=[u for u in unknown if u not in failed], now=time.time(),
            reservations=self.reservations.of([*drop, *unknown]), owe_status=owe_status))
        return failed

    def _remove_specs(self, drop: dict[str, ClaimRecord],
                      unknown: list[str]) -> dict[str, str]:
        failed: dict[str, str] = {}
        for uid in [*drop, *unknown]:
            try:
                self.devices.specs.remove(uid, durable=False)
            except Exception as e:
                if isinstance(e, CDINameError) and uid not in drop:
                    continue  # an unknown UID no spec file can be named after
                rec = drop.get(uid)
                what = f"ResourceClaim {rec.namespace}/{rec.name}" if rec else f"claim {uid}"
                failed[uid] = (f"{what}: removing its CDI spec failed: "
                               f"{type(e).__name__}: {e}; the claim stays prepared, retry")
        return failed
