"""AllocatedDeviceStatus on ResourceClaims (``status.devices[]``, resource.k8s.io/v1).

For every prepared device the discovery plugin may report conditions, ``data`` and
``networkData`` as a :class:`drakit.discovery.model.DeviceStatus`, which checks the API's rules
(k8s.io/kubernetes pkg/apis/resource/validation ValidateResourceClaimStatusUpdate) when the
plugin builds it, so a status the API would refuse fails that prepare. Here each entry is
converted to API JSON (and checked again, a cheap guard: driver/pool/device/shareID must be
unique) and written with server-side apply on the ``status`` subresource under this driver's
field manager. The list is a map keyed by (driver, pool, device, shareID), so entries of other
drivers and other field managers are never touched. An entry that still breaks a rule is left
out with a logged, counted reason (``events.status_invalid``): the device is usable.

Writes happen on a background worker (latest desired state per claim wins; 409 and transient
errors retry with capped backoff until the status holds, the claim is gone or replaced, or a
newer state supersedes it: reconciled, not fire-and-forget), so prepare never waits on the
API for status; ``flush`` waits for the queue to drain (tests, shutdown). With a
:class:`drakit.plugin.claims.inflight.KubeletCalls`, each write waits for a moment with no
kubelet call in flight, at most ``defer_seconds`` after its claim was queued (so a burst of
pod starts is not slowed by the status of the first pods).

What the writer finished (an apply that held, a removal done, a claim gone) is told to its
``ledger`` in batches (at most one per :data:`SETTLE_SECONDS`, and at :meth:`StatusWriter.flush`
and :meth:`StatusWriter.stop`): the checkpoint keeps what a claim still owes
(:mod:`drakit.plugin.claims.owedstatus`), so an agent killed before the server held the status
leaves the work to the next instance.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import ValidationError

from drakit.discovery.model import DeviceStatus, status_error_messages
from drakit.discovery.plugin import ClaimRef
from drakit.plugin.api.retry import Backoff, ErrorKind, classify, describe
from drakit.plugin.background import Supervisor
from drakit.plugin.claims.checkpoint import ClaimRecord, PreparedDeviceRecord
from drakit.plugin.claims.inflight import KubeletCalls
from drakit.plugin.events import Events

log = logging.getLogger(__name__)

#: Longest a status write waits for a moment without kubelet calls in flight (seconds).
DEFER_SECONDS = 1.0
#: Claims whose status history the writer remembers (the prepared claims, normally).
MAX_TRACKED = 65536
#: Longest the writer keeps finished work before telling its ledger (seconds): one
#: checkpoint write per batch instead of one per claim transition.
SETTLE_SECONDS = 1.0


class StatusAPI(Protocol):
    """What the writer needs of :class:`drakit.plugin.api.resourceapi.ResourceAPI`."""

    def apply_claim_status_devices(
        self, namespace: str, name: str, entries: list[dict[str, Any]], field_manager: str,
        uid: str | None = None,
    ) -> Any: ...

    def remove_claim_status_devices(
        self, namespace: str, name: str, field_manager: str, uid: str | None = None
    ) -> Any: ...


class StatusLedger(Protocol):
    """Where the writer records what the API server now holds
    (:class:`drakit.plugin.claims.owedstatus.CheckpointLedger`)."""

    def settled(self, applied: Mapping[str, float], removed: Collection[str]) -> None:
        """``applied``: claim UID → ``prepared_at`` of the record whose entries were applied
        (or given up); ``removed``: claim UIDs whose entries were removed (or need none)."""
        ...


class StatusError(ValueError):
    """An AllocatedDeviceStatus entry that breaks an API rule; names the field path."""


def build_entry(driver: str, d: PreparedDeviceRecord, path: str, now: str) -> dict[str, Any]:
    """The ``status.devices[]`` entry for one prepared device: its key (driver, pool,
    device, shareID) and the plugin's :class:`~drakit.discovery.model.DeviceStatus` as API
    JSON, ``now`` (RFC 3339) as the transition time of conditions without one. The status
    is checked again (it comes from the checkpoint, which an older drakit may have
    written): a broken rule raises :class:`StatusError` naming ``path`` and the field."""
    try:
        status = DeviceStatus.model_validate(d.status or {})
    except ValidationError as e:
        raise StatusError(status_error_messages(e, path)[0]) from None
    entry: dict[str, Any] = {"driver": driver, "pool": d.pool, "device": d.device}
    if d.share_id:
        entry["shareID"] = d.share_id
    entry.update(status.to_api(now))
    return entry


def build_entries(
    driver: str, rec: ClaimRecord, events: Events | None = None
) -> list[dict[str, Any]]:
    """Entries for every device of ``rec``; invalid ones are left out, logged and reported
    as ``events.status_invalid(reason)``. Duplicated keys keep the first entry."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    entries: list[dict[str, Any]] = []
    keys: set[tuple[str, str, str, str | None]] = set()
    for i, d in enumerate(rec.devices):
        path = f"ResourceClaim {rec.namespace}/{rec.name}: status.devices[{i}]"
        key = (driver, d.pool, d.device, d.share_id)
        try:
            if key in keys:
                raise StatusError(f"{path}: Duplicate value: {key}")
            entries.append(build_entry(driver, d, path, now))
            keys.add(key)
        except StatusError as e:
            log.warning("AllocatedDeviceStatus left out: %s", e, extra={"claim_uid": rec.uid})
            if events is not None:
                events.status_invalid(str(e))
    return entries


def _drop_reason(exc: BaseException) -> str | None:
    """Why a failed write is given up for good (None: retry it). A missing claim or one
    re-created under the same name needs nothing written: the UID precondition fails with
    409 ``Precondition failed: UID`` (the embedded server) or 422 ``metadata.uid: Invalid
    value: …: field is immutable`` (kube-apiserver's apply). 429, 5xx, other conflicts and
    connection errors are retried."""
    kind = classify(exc)
    if kind is ErrorKind.NOT_FOUND:
        return "gone"
    body = str(getattr(exc, "body", exc))
    if kind is ErrorKind.CONFLICT and "Precondition failed: UID" in body:
        return "replaced"
    if (getattr(exc, "status", None) == 422 and "metadata.uid" in body
            and "field is immutable" in body):
        return "replaced"
    if kind in (ErrorKind.RETRYABLE, ErrorKind.CONFLICT):
        return None
    return "failed"


@dataclass
class _Want:
    """The desired status of one claim: ``entries`` ([] = withdraw ours); ``since`` when it
    was first queued, ``due`` when to try next (monotonic seconds), ``attempts`` failed so
    far, ``behind_since`` when the first attempt failed."""

    claim: ClaimRef
    entries: list[dict[str, Any]]
    since: float
    due: float
    attempts: int = 0
    behind_since: float | None = None
    stamp: float = 0.0  # prepared_at of the record whose entries these are


class StatusWriter:
    """Reconciles this driver's AllocatedDeviceStatus entries in the background.

    What the checkpoint says a claim's status should be (:meth:`write` after prepare,
    :meth:`remove` after unprepare) is applied until it holds: a failed write (429, 5xx,
    409, connection errors) is tried again with backoff (0.1 s doubling to
    ``max_retry_seconds``, jitter; Retry-After honoured up to that) for as long as it
    fails, and is only given up when the claim is gone or was re-created under the same
    name, when a newer desired state replaces it, or on an error no retry can fix (400,
    403, 422 other than the UID precondition). After ``max_attempts`` failed attempts the
    claim is reported once (logged, ``events.status_error``); :attr:`behind` counts the claims whose
    status is not applied yet. ``field_manager`` defaults to ``drakit/<driver>``.

    One apply per claim transition at most: queued states of one claim coalesce
    (only the newest is sent), and a removal is not sent for a claim prepared by this
    process whose entries no apply has carried yet (nothing of ours is on it; a claim this
    process did not prepare, e.g. before a restart, is always cleaned). An apply that
    failed may still have reached the server, so it counts as sent.
    ``calls``: kubelet calls in flight; a write waits while there are any, at most
    ``defer_seconds`` (default :data:`DEFER_SECONDS`) after its claim was first queued.
    """

    def __init__(
        self,
        api: StatusAPI,
        driver: str,
        field_manager: str | None = None,
        max_attempts: int = 8,
        events: Events | None = None,
        calls: KubeletCalls | None = None,
        defer_seconds: float = DEFER_SECONDS,
        max_retry_seconds: float = 30.0,
        ledger: StatusLedger | None = None,
        settle_seconds: float = SETTLE_SECONDS,
        supervisor: Supervisor | None = None,
    ) -> None:
        self.api = api
        self.ledger = ledger
        self.settle_seconds = settle_seconds
        self.calls = calls
        self.defer_seconds = defer_seconds
        self.driver = driver
        self.field_manager = field_manager or f"drakit/{driver}"
        self.max_attempts = max_attempts
        self.backoff = Backoff(initial=0.1, max_delay=max_retry_seconds, jitter=0.5,
                               max_retry_after=max_retry_seconds)
        self.events = events if events is not None else Events()
        self._cond = threading.Condition()
        # claim UID → its desired status; in first-queued order
        self._pending: dict[str, _Want] = {}
        # (due, sequence, claim UID) of every desired state queued: a heap; an entry whose
        # claim is no longer pending with that due is skipped when it comes up
        self._due: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        # UIDs of claims queued by write() here (their whole history is known) and, of
        # those, the ones an apply with entries was sent for since their last removal
        self._written: set[str] = set()
        self._sent: set[str] = set()
        # finished since the last batch told to the ledger (see StatusLedger.settled)
        self._applied: dict[str, float] = {}
        self._removed: set[str] = set()
        self._settle_at: float | None = None
        self._settle_lock = threading.Lock()
        self._busy = False
        self._stopped = False
        self._supervisor = supervisor or Supervisor(self.events)
        self._thread = threading.Thread(target=self._supervisor.thread("status", self._run),
                                        name="status-writer", daemon=True)
        self._thread.start()
        self.writes = 0
        self.failures = 0
        self._said_not_served = False

    @property
    def behind(self) -> int:
        """Claims whose desired status is not applied yet (queued, retrying or in flight)."""
        with self._cond:
            return len(self._pending) + (1 if self._busy else 0)

    def write(self, claim: ClaimRef, record: ClaimRecord, *, resumed: bool = False) -> None:
        """Queue the entries of a claim this process just prepared (``resumed``: one an
        earlier instance prepared whose entries are still owed; its history is unknown
        here, so a later removal is always sent)."""
        entries = build_entries(self.driver, record, self.events)
        with self._cond:
            if len(self._written) >= MAX_TRACKED:  # a forgotten claim's removal is sent
                self._written.clear()
                self._sent.clear()
            if resumed:
                self._written.discard(claim.uid)
            else:
                self._written.add(claim.uid)
            if not entries and claim.uid not in self._sent:  # nothing to add, none to remove
                if self._pending.pop(claim.uid, None) is not None:
                    self._cond.notify_all()
                return
        self._enqueue(claim, entries, record.prepared_at)

    def remove(self, claim: ClaimRef) -> None:
        """Queue the removal of this driver's entries of ``claim`` (a missing claim is fine);
        nothing is sent when no apply of this process has carried entries to it (a write
        still queued is dropped)."""
        with self._cond:
            if claim.uid in self._written and claim.uid not in self._sent:
                self._written.discard(claim.uid)
                if self._pending.pop(claim.uid, None) is not None:
                    self._cond.notify_all()
                self._settled(claim.uid, None)
                log.debug("AllocatedDeviceStatus of ResourceClaim %s/%s: nothing applied, "
                          "nothing to remove", claim.namespace, claim.name,
                          extra={"claim_uid": claim.uid})
                return
        self._enqueue(claim, [])

    def _enqueue(self, claim: ClaimRef, entries: list[dict[str, Any]],
                 stamp: float = 0.0) -> None:
        now = time.monotonic()
        with self._cond:
            queued = self._pending.pop(claim.uid, None)
            since = queued.since if queued is not None else now
            self._queue(_Want(claim, entries, since, due=now, stamp=stamp))
            self._cond.notify_all()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued status is applied (or given up) and tell the ledger;
        False on timeout (a claim is still behind, e.g. the API server keeps failing)."""
        with self._cond:
            done = self._cond.wait_for(lambda: not self._pending and not self._busy, timeout)
        self._settle()
        return done

    def stop(self, timeout: float = 5.0) -> None:
        """Apply what is queued (at most ``timeout`` seconds), then end the worker; what is
        still behind then is left behind (still owed in the checkpoint)."""
        self.flush(timeout)
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def _queue(self, want: _Want) -> None:
        """Make ``want`` its claim's desired state (called with ``_cond`` held)."""
        self._pending[want.claim.uid] = want
        heapq.heappush(self._due, (want.due, next(self._seq), want.claim.uid))

    def _next_due(self) -> tuple[str | None, float]:
        """(UID of the earliest due claim, seconds until it is due); (None, inf) when empty.
        The earliest due of the first queued wins a tie. Called with ``_cond`` held."""
        while self._due:
            due, _, uid = self._due[0]
            want = self._pending.get(uid)
            if want is not None and want.due == due:
                return uid, due - time.monotonic()
            heapq.heappop(self._due)  # taken, replaced or rescheduled since
        return None, float("inf")

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped:
                    uid, wait = self._next_due()
                    if uid is not None and wait <= 0:
                        break
                    uid = None
                    if self._settle_at is not None:
                        wait = min(wait, self._settle_at - time.monotonic())
                        if wait <= 0:
                            break
                    self._cond.wait(None if wait == float("inf") else wait)
                if self._stopped:
                    return
                if uid is not None:
                    since = self._pending[uid].since
                    self._busy = True
            if uid is None:  # a batch of finished work is due
                self._settle()
                continue
            if self.calls is not None and self.calls.in_flight and not self._stopped:
                self.calls.wait_quiet(since + self.defer_seconds)
            with self._cond:
                # the newest desired state of that claim (a remove may have replaced it or
                # taken it back)
                want = self._pending.pop(uid, None)
                if want is None:
                    self._busy = False
                    self._cond.notify_all()
                    continue
                if want.entries:
                    self._sent.add(uid)  # before the request: a failed one may land too
            try:
                self._apply(want)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _apply(self, want: _Want) -> None:
        claim, entries = want.claim, want.entries
        try:
            # uid: never touch a claim re-created under the same name (dropped below)
            if entries:
                kept = self.api.apply_claim_status_devices(
                    claim.namespace, claim.name, entries, self.field_manager, uid=claim.uid)
                if kept is False:
                    self._not_served(claim)
            else:
                self.api.remove_claim_status_devices(
                    claim.namespace, claim.name, self.field_manager, uid=claim.uid)
        except Exception as e:
            self._retry_or_drop(want, e)
            return
        self.writes += 1
        self._settled(claim.uid, want.stamp if entries else None)
        if not entries:
            self._nothing_applied(claim.uid)
        if want.behind_since is not None:
            log.info("AllocatedDeviceStatus of ResourceClaim %s/%s applied after %d failed "
                     "attempt(s), %.1fs behind", claim.namespace, claim.name, want.attempts,
                     time.monotonic() - want.behind_since, extra={"claim_uid": claim.uid})

    def _retry_or_drop(self, want: _Want, e: Exception) -> None:
        claim = want.claim
        drop = _drop_reason(e)
        if drop in ("gone", "replaced"):
            self._nothing_applied(claim.uid)  # nothing of ours on this claim
        if drop is not None:  # nothing more to do for this state: it is settled
            self._settled(claim.uid, want.stamp if want.entries else None)
            if drop == "failed":
                self._failed(claim, describe(e))
            else:
                log.debug("AllocatedDeviceStatus of ResourceClaim %s/%s not written: the "
                          "claim is %s (%s)", claim.namespace, claim.name, drop, describe(e),
                          extra={"claim_uid": claim.uid})
            return
        now = time.monotonic()
        want.attempts += 1
        if want.behind_since is None:
            want.behind_since = now
        if want.attempts == self.max_attempts:
            self._failed(claim, f"still failing after {want.attempts} attempts, retrying "
                                f"every {self.backoff.max_delay:.0f}s at most: {describe(e)}")
        else:
            log.debug("AllocatedDeviceStatus of ResourceClaim %s/%s: attempt %d failed: %s",
                      claim.namespace, claim.name, want.attempts, describe(e))
        want.due = now + self.backoff.wait_after(e, want.attempts)
        with self._cond:
            if claim.uid not in self._pending:  # else a newer desired state replaced it
                self._queue(want)

    def _settled(self, uid: str, stamp: float | None) -> None:
        """The desired state of claim ``uid`` is done (``stamp``: the record whose entries
        were applied; None: the removal): queue it for the ledger unless a newer state is
        pending (that one settles in turn)."""
        if self.ledger is None:
            return
        with self._cond:
            if uid in self._pending:
                return
            if stamp is None:
                self._applied.pop(uid, None)
                self._removed.add(uid)
            else:
                self._removed.discard(uid)
                self._applied[uid] = stamp
            if self._settle_at is None:
                self._settle_at = time.monotonic() + self.settle_seconds
                self._cond.notify_all()

    def _settle(self) -> None:
        """Tell the ledger the finished work (one batch); on failure it is kept for the
        next batch."""
        if self.ledger is None:
            return
        with self._settle_lock:
            with self._cond:
                applied, removed = self._applied, self._removed
                self._applied, self._removed, self._settle_at = {}, set(), None
            if not (applied or removed):
                return
            try:
                self.ledger.settled(applied, removed)
                self._supervisor.succeeded("status")
            except Exception as e:
                # a checkpoint that cannot be written is fatal (the supervisor's owner says)
                if not self._supervisor.report("status", e, retry_in=self.settle_seconds):
                    return
                with self._cond:
                    for uid, stamp in applied.items():
                        if uid not in self._applied and uid not in self._removed:
                            self._applied[uid] = stamp
                    self._removed |= {u for u in removed if u not in self._applied}
                    self._settle_at = time.monotonic() + self.settle_seconds
                    self._cond.notify_all()

    def _not_served(self, claim: ClaimRef) -> None:
        """The server took the apply and dropped ``status.devices``: it has no such field.
        Said once per writer (logged and ``events.status_unsupported``); writes go on (one
        apply per claim transition, as before), so status appears once the server has it."""
        if self._said_not_served:
            return
        self._said_not_served = True
        version = getattr(self.api, "server_version", None)
        server = f"Kubernetes {version()}" if callable(version) else "the API server"
        why = (f"{server} dropped status.devices of ResourceClaim {claim.namespace}/"
               f"{claim.name}: the server does not have the field (feature gate "
               "DRAResourceClaimDeviceStatus: alpha and off by default in Kubernetes 1.32, "
               "on by default from 1.33); devices are prepared as usual, their "
               "AllocatedDeviceStatus is not shown on this cluster (said once)")
        log.warning("%s", why, extra={"claim_uid": claim.uid})
        self.events.status_unsupported(why)

    def _nothing_applied(self, uid: str) -> None:
        """None of our entries is on claim ``uid`` (removed, gone or re-created)."""
        with self._cond:
            self._sent.discard(uid)
            if uid not in self._pending:
                self._written.discard(uid)

    def _failed(self, claim: ClaimRef, why: str) -> None:
        self.failures += 1
        log.error(
            "writing AllocatedDeviceStatus of ResourceClaim %s/%s failed: %s",
            claim.namespace,
            claim.name,
            why,
            extra={"claim_uid": claim.uid},
        )
        self.events.status_error(why)
