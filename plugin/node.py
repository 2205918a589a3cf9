"""The node service of one driver (the node half of DRA): NodePrepareResources and
NodeUnprepareResources as the kubelet calls them, version-neutral.

Per call (one pod, one driver, one or more claims): claim references are checked (UID,
namespace, name) and de-duplicated; single flight (:mod:`drakit.plugin.singleflight`) gives
each claim to one call at a time; the claims this call runs go to
:class:`drakit.plugin.prepare.Prepare` or :class:`drakit.plugin.unprepare.Unprepare`; the
answer lists, per device, its base request name, pool, device and CDI device IDs. An error
for one claim is that claim's ``error`` string; it never fails the others. Across two
instances (rolling update) the checkpoint's ``PrepareStarted`` owner decides
(:mod:`drakit.plugin.admission`).

Deadlines: a kubelet call's work ends by its gRPC deadline minus a margin to answer
(:func:`drakit.plugin.retry.call_deadline`); claim reads are bounded by it and run
concurrently; a caller waiting for another call's run of the same claim waits at most until
its own deadline and does not take a result produced after that call's deadline (its caller
had given up): it runs the claim afresh.

Logging: one line per kubelet call (its claims, how many failed, milliseconds; the claims
also as log context): INFO when a claim failed, DEBUG (``-v 1``) when all succeeded, as the
Go helper logs its calls only at a high verbosity (the ``drakit_claims_*`` metrics count
them at any level). One INFO line per call cost ~7 % of a prepare → unprepare pair's
latency and agent CPU (issue 18, ``make bench``'s ``go`` group: A/B blocks of 100 pairs,
prepare p50 4.89 → 4.60 ms, unprepare 3.13 → 2.91 ms, CPU per pair 5.30 → 4.94 ms).
Per-claim detail at DEBUG, per-claim failures at WARNING.

Crash recovery and the sweeps: :mod:`drakit.plugin.recovery`. Crash tests: ``crash_hook``
(a constructor argument, never set in production) is called at each of :data:`CRASH_POINTS`;
tests/contract/crash_agent.py runs ``drakit run`` with a hook that kills the process there.
"""
from __future__ import annotations

import logging
import time

from drakit.discovery.plugin import ClaimRef
from drakit.plugin.activity import KubeletCalls
from drakit.plugin.checkpoint import Checkpoint, CheckpointError
from drakit.plugin.claimdevices import CRASH_POINTS, ClaimDevices, CrashHook, SpecWriter, no_crash
from drakit.plugin.events import Events
from drakit.plugin.inventory import Inventory
from drakit.plugin.names import (
    InvalidNameError,
    check_claim_uid,
    check_namespace,
    check_object_name,
)
from drakit.plugin.prepare import ClaimSource, Prepare, Reservations, StatusWriter
from drakit.plugin.recovery import Recovery
from drakit.plugin.retry import call_deadline
from drakit.plugin.singleflight import SingleFlight
from drakit.plugin.types import PrepareResult
from drakit.plugin.unprepare import Unprepare

__all__ = ["CRASH_POINTS", "ClaimSource", "CrashHook", "NodeLogic", "SpecWriter",
           "StatusWriter"]

log = logging.getLogger(__name__)


class NodeLogic:
    """Implements :class:`drakit.plugin.types.NodeService` for one driver on one node.

    ``events`` hears of every claim answered and every checkpoint failure
    (:class:`drakit.plugin.events.Events`; default: none). ``calls`` counts the prepare and
    unprepare calls in flight (background status writes give way to them; default: a
    counter of its own). ``crash_hook(point)`` is called at each of :data:`CRASH_POINTS`
    (crash tests only; default: nothing).
    """

    def __init__(
        self,
        driver_name: str,
        inventory: Inventory,
        claims: ClaimSource,
        specs: SpecWriter,
        checkpoint: Checkpoint,
        status: StatusWriter | None = None,
        events: Events | None = None,
        crash_hook: CrashHook | None = None,
        calls: KubeletCalls | None = None,
    ) -> None:
        self.driver_name = driver_name
        self.calls = calls if calls is not None else KubeletCalls()
        self.inventory = inventory
        self.claim_source = claims
        self.specs = specs
        self.checkpoint = checkpoint
        self.status = status
        self.events = events if events is not None else Events()
        self.flights = SingleFlight()
        devices = ClaimDevices(inventory, specs, crash_hook or no_crash)
        seen = Reservations()
        self._prepare = Prepare(driver_name, inventory, claims, checkpoint, devices, status,
                                self.events, seen)
        self._unprepare = Unprepare(checkpoint, devices, status, self.events, seen)
        self.recovery = Recovery(checkpoint, specs, devices, self.flights)
        inventory.set_in_use(self.prepared_devices)

    @property
    def single_flight_waiters(self) -> int:
        """Callers currently waiting for another caller's run of the same claim."""
        return self.flights.waiters

    def prepared_devices(self) -> set[tuple[str, str]]:
        """(pool, device) of every device recorded in the checkpoint (empty while corrupt)."""
        try:
            return {(d.pool, d.device) for rec in self.checkpoint.claims().values()
                    for d in rec.devices}
        except CheckpointError:
            return set()

    # -- prepare -------------------------------------------------------------------------

    def prepare_claims(self, claims: list[ClaimRef], *,
                       deadline: float | None = None) -> dict[str, PrepareResult]:
        """NodePrepareResources: one PrepareResult per distinct claim UID in ``claims``.

        ``deadline`` (``time.monotonic()`` seconds; default
        :func:`drakit.plugin.retry.call_deadline` of a call without one) bounds every API
        call and every wait for another call's run of the same claim; a claim not done by
        then gets a retryable per-claim error."""
        if deadline is None:
            deadline = call_deadline(None)
        started = time.monotonic()
        with self.calls.call():
            results = self._prepare_claims(claims, deadline, started)
        _log_call("NodePrepareResources: prepared claim(s)", claims,
                  sum(1 for r in results.values() if r.error), started)
        return results

    def _prepare_claims(self, claims: list[ClaimRef], deadline: float,
                        started: float) -> dict[str, PrepareResult]:
        results: dict[str, PrepareResult] = {}
        refs: list[ClaimRef] = []
        for ref in _dedupe(claims):
            try:
                check_claim_uid(ref.uid)
                check_namespace(ref.namespace)
                check_object_name(ref.name)
            except InvalidNameError as e:
                results[ref.uid] = PrepareResult(error=str(e))
                continue
            refs.append(ref)
        while refs:
            mine, waiting = self.flights.claim(refs, deadline)
            try:
                results.update(self._prepare.run(mine, deadline))
            finally:
                self.flights.release(results, mine)
            elapsed = time.monotonic() - started
            for ref in mine:
                got = results.get(ref.uid)
                self.events.claim_prepared(got is not None and not got.error, elapsed)
            refs = []
            for uid, flight in waiting.items():
                ok, got = self.flights.wait(flight, deadline)
                if ok and isinstance(got, PrepareResult):
                    results[uid] = got  # the first caller's answer
                elif time.monotonic() >= deadline:
                    ref = next(r for r in claims if r.uid == uid)
                    results[uid] = PrepareResult(error=(
                        f"ResourceClaim {ref.namespace}/{ref.name}: an earlier call for this "
                        "claim was still running when this call's deadline came; retry"))
                else:
                    # The running call was an unprepare, failed, or its caller had given up
                    # (a stale result): prepare afresh.
                    refs.extend(r for r in claims if r.uid == uid and r.uid not in results)
            refs = _dedupe(refs)
        return results

    # -- unprepare -----------------------------------------------------------------------

    def unprepare_claims(self, claims: list[ClaimRef], write_status: bool = True, *,
                         deadline: float | None = None) -> dict[str, str]:
        """NodeUnprepareResources from the checkpoint alone: claim UID → error ("" = ok).
        Unknown claims are success once no CDI spec of theirs is left. A claim succeeds only
        when its device is released: every unprepare hook done and its CDI spec removed;
        otherwise its error names what failed and its checkpoint entry stays (the device
        stays busy), so the kubelet's retry finishes the job. ``write_status=False`` leaves
        the claim's AllocatedDeviceStatus alone (the orphan sweep: the claim is gone or
        replaced). ``deadline`` (monotonic seconds) bounds the wait for another call's run
        of the same claim."""
        if deadline is None:
            deadline = call_deadline(None)
        started = time.monotonic()
        with self.calls.call():
            results = self._unprepare_claims(claims, write_status, deadline, started)
        _log_call("NodeUnprepareResources: unprepared claim(s)", claims,
                  sum(1 for e in results.values() if e), started)
        return results

    def _unprepare_claims(self, claims: list[ClaimRef], write_status: bool,
                          deadline: float, started: float) -> dict[str, str]:
        results: dict[str, str] = {}
        refs: list[ClaimRef] = []
        for ref in _dedupe(claims):
            try:
                check_claim_uid(ref.uid)
            except InvalidNameError as e:
                results[ref.uid] = str(e)
                continue
            refs.append(ref)
        while refs:
            mine, waiting = self.flights.claim(refs, deadline)
            try:
                results.update(self._unprepare.run(mine, write_status))
            finally:
                self.flights.release(results, mine)
            elapsed = time.monotonic() - started
            for ref in mine:
                self.events.claim_unprepared(results.get(ref.uid) == "", elapsed)
            # A prepare or unprepare of these claims was running: run ours after it.
            late = False
            for flight in waiting.values():
                self.flights.wait(flight, deadline)
                late = late or time.monotonic() >= deadline
            if late:
                for ref in refs:
                    if ref.uid in waiting:
                        results[ref.uid] = (f"claim {ref.uid}: an earlier call for this claim "
                                            "was still running when this call's deadline "
                                            "came; retry")
                break
            refs = [r for r in refs if r.uid in waiting]
        return results

    # -- recovery and sweeps (drakit.plugin.recovery) -----------------------------------

    def recover(self, spec_claim_uids: list[str] | None = None) -> tuple[int, int]:
        """Start-up recovery (:meth:`drakit.plugin.recovery.Recovery.recover`): returns
        (claims rolled back, specs removed); raises CheckpointError while corrupt. The spec
        list is taken under the checkpoint lock: ``spec_claim_uids`` is ignored (kept for
        callers of the old signature)."""
        return self.recovery.recover()

    def rollback_dead_owners(self) -> int:
        """:meth:`drakit.plugin.recovery.Recovery.rollback_dead_owners`."""
        return self.recovery.rollback_dead_owners()

    def sweep_orphan_specs(self) -> list[str]:
        """:meth:`drakit.plugin.recovery.Recovery.sweep_orphan_specs`."""
        return self.recovery.sweep_orphan_specs()


def _log_call(what: str, claims: list[ClaimRef], failed: int, started: float) -> None:
    """The one line of a kubelet call (INFO when a claim failed, else DEBUG), with its
    claims as log context (``claim_uid``, ``claim``: comma-separated when the call has
    several)."""
    level = logging.INFO if failed else logging.DEBUG
    if not log.isEnabledFor(level):
        return
    refs = _dedupe(claims)
    names = ",".join(f"{r.namespace}/{r.name}" for r in refs)
    log.log(level, "%s %s: %d failed, %.1f ms", what, names, failed,
            (time.monotonic() - started) * 1e3,
            extra={"claim_uid": ",".join(r.uid for r in refs), "claim": names})


def _dedupe(claims: list[ClaimRef]) -> list[ClaimRef]:
    seen: dict[str, ClaimRef] = {}
    for c in claims:
        seen.setdefault(c.uid, c)
    return list(seen.values())
