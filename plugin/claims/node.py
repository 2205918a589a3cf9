"""The node service of one driver (the node half of DRA): NodePrepareResources and
NodeUnprepareResources as the kubelet calls them, version-neutral.

Per call (one pod, one driver, one or more claims of distinct UIDs: the gRPC servicer
answers a UID listed twice once, :mod:`drakit.plugin.kubelet.dra`): claim references are
checked (UID, namespace, name); single flight (:mod:`drakit.plugin.claims.inflight`)
gives each claim to one call at a time; the claims this call runs go to
:class:`drakit.plugin.claims.prepare.Prepare` or
:class:`drakit.plugin.claims.unprepare.Unprepare`; the answer lists, per device, its base
request name, pool, device and CDI device IDs. An error for one claim is that claim's ``error``
string; it never fails the others. Across two instances (rolling update) the checkpoint's
``PrepareStarted`` owner decides (:mod:`drakit.plugin.claims.lifecycle`).

Deadlines: a kubelet call's work ends by its gRPC deadline minus a margin to answer
(:func:`drakit.plugin.api.retry.call_deadline`); claim reads are bounded by it and run
concurrently; a caller waiting for another call's run of the same claim waits at most until
its own deadline and does not take a result produced after that call's deadline (its caller
had given up): it runs the claim afresh.

Logging (:class:`drakit.plugin.klog.ClaimLines`): one line per claim and outcome, here
and nowhere else on the claim path: a claim prepared or unprepared at V(2) (``-v 2``), a
failed claim once, at WARNING, its error in ``err`` (naming plugin, hook and device when a
vendor hook failed) and a vendor hook's traceback in the same line; keys ``claim``
(namespace/name) and ``claimUID``. A call logs at most
:data:`drakit.plugin.klog.MAX_CLAIM_LINES` claim lines, then one line counting the rest.
The call itself is one line at V(6) (its claim count, failures and milliseconds). At the
default verbosity a successful call writes nothing (a line per call is a measurable part of
a prepare → unprepare pair: ``make bench``); the ``drakit_*_claims`` metrics count claims at
any verbosity.

Crash recovery and the sweeps: :mod:`drakit.plugin.claims.recovery`. Crash tests: ``crash_hook``
(a constructor argument, never set in production) is called at each of :data:`CRASH_POINTS`;
tests/contract/crash_agent.py runs ``drakit run`` with a hook that kills the process there.
"""
from __future__ import annotations

import logging
import threading
import time

from drakit.discovery.plugin import ClaimRef
from drakit.plugin.api.retry import call_deadline
from drakit.plugin.claims import owedstatus
from drakit.plugin.claims.checkpoint import Checkpoint, CheckpointError
from drakit.plugin.claims.claimdevices import (
    CRASH_POINTS,
    ClaimDevices,
    CrashHook,
    SpecWriter,
    no_crash,
)
from drakit.plugin.claims.inflight import KubeletCalls, SingleFlight
from drakit.plugin.claims.lifecycle import Reservations
from drakit.plugin.claims.owedstatus import StatusQueue
from drakit.plugin.claims.prepare import ClaimSource, LatePrepare, Prepare
from drakit.plugin.claims.recovery import Recovery
from drakit.plugin.claims.unprepare import Unprepare
from drakit.plugin.events import Events
from drakit.plugin.klog import ClaimLines, V, keys_of
from drakit.plugin.names import (
    InvalidNameError,
    check_claim_uid,
    check_namespace,
    check_object_name,
)
from drakit.plugin.slices.inventory import Inventory
from drakit.plugin.types import PrepareResult

__all__ = ["CRASH_POINTS", "ClaimSource", "CrashHook", "NodeLogic", "SpecWriter",
           "StatusQueue"]

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
        status: StatusQueue | None = None,
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
    def hooks_running(self) -> list[str]:
        """The claims whose prepare hooks still run (past their call's deadline, or in a
        call still in flight): one ``<claim>: the <hook> hook of plugin <p> for device
        <pool>/<device> (<n>s)`` each."""
        return self._prepare.workers.running()

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
        :func:`drakit.plugin.api.retry.call_deadline` of a call without one) bounds every API
        call and every wait for another call's run of the same claim; a claim not done by
        then gets a retryable per-claim error."""
        if deadline is None:
            deadline = call_deadline(None)
        started = time.monotonic()
        with self.calls.call():
            results, joined = self._prepare_claims(claims, deadline, started)
        lines = ClaimLines(log, "prepare")
        for ref in claims:
            got = results.get(ref.uid)
            if got is None or got.error:
                lines.failed(ref, got.error if got else "no result", got.cause if got else None)
            elif ref.uid in joined:
                lines.done(ref, "claim prepared by a concurrent call for it")
            elif got.reused:
                lines.done(ref, "claim already prepared; answered from its checkpoint record")
            else:
                lines.done(ref, "prepared claim with %d device(s)", len(got.devices))
        lines.close()
        _log_call("NodePrepareResources", claims, lines.failures, started)
        return results

    def _prepare_claims(self, claims: list[ClaimRef], deadline: float,
                        started: float) -> tuple[dict[str, PrepareResult], set[str]]:
        """The results, and the UIDs of the claims answered by another call's run."""
        results: dict[str, PrepareResult] = {}
        joined: set[str] = set()
        refs: list[ClaimRef] = []
        for ref in claims:
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
            late: dict[str, LatePrepare] = {}
            try:
                out = self._prepare.run(mine, deadline)
                results.update(out.results)
                late = out.late
            finally:
                # a claim whose hook still runs keeps its flight until the hook ends
                self.flights.release(results, [r for r in mine if r.uid not in late])
            for uid, unfinished in late.items():
                self.flights.hold(uid, unfinished)
                threading.Thread(target=self._settle_late, args=(unfinished,),
                                 name=f"late-prepare-{uid[:8]}", daemon=True).start()
            elapsed = time.monotonic() - started
            for ref in mine:
                got = results.get(ref.uid)
                self.events.claim_prepared(got is not None and not got.error, elapsed)
            refs = []
            for uid, flight in waiting.items():
                ok, got = self.flights.wait(flight, deadline)
                if ok and isinstance(got, PrepareResult):
                    results[uid] = got  # the first caller's answer
                    joined.add(uid)
                elif time.monotonic() >= deadline:
                    ref = next(r for r in claims if r.uid == uid)
                    held = flight.unfinished
                    results[uid] = PrepareResult(error=held.still_running() if held else (
                        f"ResourceClaim {ref.namespace}/{ref.name}: an earlier call for this "
                        "claim was still running when this call's deadline came; retry"))
                else:
                    # The running call was an unprepare, failed, or its caller had given up
                    # (a stale result): prepare afresh.
                    refs.extend(r for r in claims if r.uid == uid and r.uid not in results)
        return results, joined

    def _settle_late(self, late: LatePrepare) -> None:
        """On a thread of its own: wait for a claim's hooks that outlived their call,
        settle what they did (:meth:`drakit.plugin.claims.prepare.Prepare.settle_late`),
        then end the claim's flight (a waiting retry takes the answer, or prepares the
        claim afresh)."""
        ref = late.plan.ref
        result: PrepareResult | None = None
        try:
            late.run.wait(None)  # as long as the vendor's hook takes: it holds its worker
            result = self._prepare.settle_late(late)
        except Exception:
            log.exception("settling a late prepare failed", extra=keys_of(ref))
        finally:
            self.flights.release({ref.uid: result} if result is not None else {}, [ref])

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
        causes: dict[str, BaseException] = {}
        with self.calls.call():
            results = self._unprepare_claims(claims, write_status, deadline, started, causes)
        lines = ClaimLines(log, "unprepare")
        for ref in claims:
            error = results.get(ref.uid, "no result")
            if error:
                lines.failed(ref, error, causes.get(ref.uid))
            else:
                lines.done(ref, "unprepared claim")
        lines.close()
        _log_call("NodeUnprepareResources", claims, lines.failures, started)
        return results

    def _unprepare_claims(self, claims: list[ClaimRef], write_status: bool,
                          deadline: float, started: float,
                          causes: dict[str, BaseException]) -> dict[str, str]:
        """The results; ``causes`` gets the exceptions vendor hooks raised, by claim UID."""
        results: dict[str, str] = {}
        refs: list[ClaimRef] = []
        for ref in claims:
            try:
                check_claim_uid(ref.uid)
            except InvalidNameError as e:
                results[ref.uid] = str(e)
                continue
            refs.append(ref)
        while refs:
            mine, waiting = self.flights.claim(refs, deadline)
            try:
                answers, raised = self._unprepare.run(mine, write_status)
                results.update(answers)
                causes.update(raised)
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

    # -- recovery and sweeps (drakit.plugin.claims.recovery) -----------------------------------

    def recover(self) -> tuple[int, int]:
        """Start-up recovery (:meth:`drakit.plugin.claims.recovery.Recovery.recover`): returns
        (claims rolled back, specs removed); raises CheckpointError while corrupt. Then the
        AllocatedDeviceStatus applies and removals
        an earlier instance left owed are queued (:func:`drakit.plugin.claims.owedstatus.resume`;
        nothing is sent when none is owed)."""
        got = self.recovery.recover()
        if self.status is not None:
            owedstatus.resume(self.checkpoint, self.status)
        return got

    def rollback_dead_owners(self) -> int:
        """:meth:`drakit.plugin.claims.recovery.Recovery.rollback_dead_owners`."""
        return self.recovery.rollback_dead_owners()

    def sweep_orphan_specs(self) -> list[str]:
        """:meth:`drakit.plugin.claims.recovery.Recovery.sweep_orphan_specs`."""
        return self.recovery.sweep_orphan_specs()


def _log_call(what: str, claims: list[ClaimRef], failed: int, started: float) -> None:
    """The one line of a kubelet call, at V(6): how many claims (and the first names),
    how many failed, milliseconds. The claims have their own lines (:class:`ClaimLines`)."""
    if not log.isEnabledFor(V(6)):
        return
    refs = claims
    names = ", ".join(f"{r.namespace}/{r.name}" for r in refs[:3])
    log.log(V(6), "%s: %d claim(s) (%s%s), %d failed, %.1f ms", what, len(refs), names,
            ", …" if len(refs) > 3 else "", failed, (time.monotonic() - started) * 1e3)


