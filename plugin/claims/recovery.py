"""Recovery after a crash and the sweeps that keep the checkpoint and the CDI directory in
step: what a process killed at any moment of a prepare or unprepare can leave behind.

- ``PrepareStarted`` records whose owner process is gone (here or another instance during a
  rolling update: its owner lock is free) are rolled back: adopted under the file lock,
  their unprepare hooks run, their CDI spec removed, the record dropped.
- ``PrepareCompleted`` records missing their CDI spec get it re-written from the record.
- CDI specs of this driver that no record (of any phase) owns are removed, under the
  checkpoint's file lock: a prepare records its claim before it writes the spec, so a
  prepare in another instance is never hit.
- Temp files of spec writes a crash left: those of claims without a record (nobody can be
  writing them: specs are written only while a record exists) and any older than
  :data:`TEMP_FILE_AGE`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Collection
from functools import partial

from drakit.plugin.api.retry import call_deadline
from drakit.plugin.claims.checkpoint import Checkpoint
from drakit.plugin.claims.claimdevices import (
    ClaimDevices,
    SpecRewriteError,
    SpecWriter,
    claim_ref,
)
from drakit.plugin.claims.inflight import SingleFlight
from drakit.plugin.claims.lifecycle import adopt, drop_started

log = logging.getLogger("drakit.plugin.claims.node")

#: Seconds after which a CDI temp file (``.<spec file>.<random>.tmp``) is surely abandoned.
TEMP_FILE_AGE = 60.0


class Recovery:
    """Start-up recovery, dead-owner rollback and the sweeps (see the module docstring) of
    one driver. Claims running in this process (``flights``) are never touched."""

    def __init__(self, checkpoint: Checkpoint, specs: SpecWriter, devices: ClaimDevices,
                 flights: SingleFlight) -> None:
        self.checkpoint = checkpoint
        self.specs = specs
        self.devices = devices
        self.flights = flights

    def recover(self) -> tuple[int, int]:
        """Start-up recovery: every step of the module docstring. Returns (claims rolled
        back, specs removed). Raises CheckpointError while the checkpoint is corrupt."""
        rolled = self.rollback_dead_owners()
        self.checkpoint.forget_dead_owners()
        rewritten = 0
        for rec in self.checkpoint.claims().values():
            if rec.phase == "PrepareCompleted":
                try:
                    rewritten += self.devices.ensure_spec(rec)
                except SpecRewriteError as e:
                    log.warning("recovery: %s", e, extra={"claim_uid": rec.uid})
        removed = self.sweep_orphan_specs()
        if rolled or removed or rewritten:
            log.warning("recovery: rolled back %d half-prepared claim(s), re-wrote %d missing "
                        "CDI spec(s), removed %d orphan CDI spec(s)",
                        rolled, rewritten, len(removed))
        return rolled, len(removed)

    def rollback_dead_owners(self) -> int:
        """Roll back ``PrepareStarted`` claims whose owner process is gone. Returns how many
        were rolled back. Raises CheckpointError while the checkpoint is corrupt."""
        owner = self.checkpoint.owner
        dead = self.checkpoint.dead_owners()
        if not dead:
            return 0
        candidates = [claim_ref(r) for r in self.checkpoint.claims().values()
                      if r.phase == "PrepareStarted" and r.owner in dead]
        if not candidates:
            return 0
        mine, _busy = self.flights.claim(candidates, call_deadline(None))
        try:
            uids = {r.uid for r in mine}
            if not uids:  # each one is being run by a call here: nothing to write
                return 0
            adopted = self.checkpoint.change(partial(adopt, uids=uids, owner=owner, dead=dead))
            for rec in adopted:
                self.devices.rollback(claim_ref(rec), rec.devices)
            if adopted:
                done = {r.uid for r in adopted}
                self.checkpoint.change(partial(drop_started, uids=done, owner=owner))
                log.warning("rolled back %d claim(s) left half-prepared by a crashed instance",
                            len(adopted))
        finally:
            self.flights.release({}, mine)  # waiters (none expected) run their own call afresh
        return len(adopted)

    def sweep_orphan_specs(self) -> list[str]:
        """Remove this driver's CDI specs that no record owns and abandoned temp files (see
        the module docstring). Returns the claim UIDs whose spec was removed."""
        removed: list[str] = []
        with self.checkpoint.locked() as state:
            for uid in self.specs.list_specs():
                if uid not in state.claims:
                    try:
                        if self.specs.remove(uid):
                            removed.append(uid)
                    except Exception:
                        log.exception("removing orphan CDI spec failed", extra={"claim_uid": uid})
            self._remove_stale_temp_files(state.claims)
        return removed

    def _remove_stale_temp_files(self, claims: Collection[str]) -> None:
        prefix = f".{self.specs.file_prefix}"
        now = time.time()
        try:
            entries = list(os.scandir(self.specs.root_dir))
        except OSError:
            return
        for entry in entries:
            name = entry.name
            if not (name.startswith(prefix) and name.endswith(".tmp")):
                continue
            uid = name[len(prefix):].split(".json.", 1)[0]
            try:
                old = now - entry.stat(follow_symlinks=False).st_mtime > TEMP_FILE_AGE
                if uid not in claims or old:
                    os.unlink(entry.path)
                    log.info("removed abandoned CDI temp file %s", entry.path)
            except OSError:
                continue
