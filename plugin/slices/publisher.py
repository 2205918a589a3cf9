"""Publish a node's pools as ResourceSlices and keep them published.

:class:`SlicePublisher` is declarative: :meth:`~SlicePublisher.publish` hands over the
complete desired state (every pool of this driver on this node); the publisher validates it
(:mod:`drakit.plugin.slices.validate`), splits each pool (:mod:`drakit.plugin.slices.split`),
lists what is published, and writes only the difference. The semantics follow the Go
``k8s.io/dynamic-resource-allocation/resourceslice`` controller (resourceslicecontroller.go):

* Listing: this driver's slices on this node by field selectors ``spec.driver`` and
  ``spec.nodeName``; pools that are not node-local (nodeSelector, allNodes,
  perDeviceNodeSelection) by ``spec.driver`` plus the label
  :data:`PUBLISHER_NODE_LABEL` ``=<node>`` that every slice drakit writes carries.
* Generation: an unchanged pool is not written at all. When a pool's content changes, every
  slice of the pool is rewritten with ``generation`` one above the highest generation seen
  (on the server, or remembered from earlier writes, so a restart or an external deletion
  never makes it go back), as the ResourceSlice API asks ("whenever a driver changes
  something about one or more of the resources in a pool, it must change the generation
  in all ResourceSlices which are part of that pool"). Every slice carries the pool's
  ``resourceSliceCount``.
* Writes (:mod:`~drakit.plugin.slices.writes`): surplus slices are deleted first, then
  existing slices are updated in place, then missing ones are created with
  ``generateName`` ``<node>-<driver>-``, one after the other. Slices of pools that no
  longer exist are deleted; slices of a pool that was skipped because its own fields are
  invalid are left alone. Planning (:func:`~drakit.plugin.slices.plan.plan_sync`) is pure.
* Ownership: an owner reference to the Node (``controller: true``) so the garbage collector
  removes the slices with the Node. The Node's UID is kept by :class:`~drakit.plugin.slices.owner.
  NodeOwner` and read again when one of our slices was deleted by someone else (seen by the
  watch, or missing from a listing) and at every sync while the Node answers 404 (slices are
  then written without an owner reference, never with a gone one). Re-creating slices that
  someone else deleted waits :class:`~drakit.plugin.slices.owner.RecreateBackoff` (``watch_delay``,
  doubling per round up to ``resync_period``).
* Errors: every call goes through :class:`~drakit.plugin.slices.calls.ApiCalls` (drakit's
  one retry policy, :mod:`drakit.plugin.api.retry`: 429 honouring Retry-After, 5xx and
  connection errors retried with exponential backoff and jitter); a Retry-After also holds
  back every later call of the publisher until it has passed (including the next sync's
  LIST, which a resync asked for meanwhile would otherwise send at once); a 409 (or an
  object gone between list and update) re-lists and plans again; both are bounded per call
  of :meth:`sync`. Whatever still fails is raised as :class:`PublishError` (and reported as
  ``events.publish_error``) and retried by the background loop after a backoff that never
  goes below ``min_retry_delay`` and that nothing asked for meanwhile (a :meth:`trigger`
  included) shortens (:mod:`~drakit.plugin.slices.schedule`).
* Server-side rewrites: if the server answers a write with different content (fields
  dropped because a feature gate is off, defaults filled in), the answer is remembered as
  "what the desired content looks like on this server", so the next resync does not write
  again; a warning names the fields.
* Background (:meth:`start`/:meth:`stop`): one LIST (this node's slices by the indexed
  field selectors ``spec.driver`` + ``spec.nodeName``; the slices without ``nodeName`` by
  ``spec.nodeName=`` plus the label, only at the first sync and while this publisher has
  such slices) fills a local :class:`~drakit.plugin.slices.view.SliceView`, which the
  watch (:mod:`~drakit.plugin.slices.watch`) and the answers of the publisher's own writes
  keep current. The periodic verification (``resync_period``, jittered) compares the
  desired state with the view and sends no request when they agree. A LIST happens again
  only when the watch cannot continue (410 Gone), or a write meets a conflict. Someone
  else's change (the kubelet deletes a node's slices when it restarts) schedules a resync
  ``watch_delay`` plus a random part of ``recovery_spread`` seconds later (deletions:
  :class:`~drakit.plugin.slices.owner.RecreateBackoff`). :meth:`trigger` asks for a resync
  now. The watch event of one of our own writes that arrives before the write's answer
  waits for the writes in flight (:class:`~drakit.plugin.slices.writes.OwnWrites`), so our
  own writes never schedule a resync.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from drakit.discovery.model import Pool
from drakit.plugin.api.resourceapi import ResourceAPI, WatchEvent
from drakit.plugin.api.retry import Backoff, describe
from drakit.plugin.background import Supervisor
from drakit.plugin.events import Events
from drakit.plugin.slices.calls import ApiCalls
from drakit.plugin.slices.nodewatch import NodeWatch
from drakit.plugin.slices.owner import (
    PUBLISHER_NODE_LABEL,
    NodeOwner,
    RecreateBackoff,
    node_label_value,
    slice_name_prefix,
)
from drakit.plugin.slices.plan import DesiredState, desired_state
from drakit.plugin.slices.reconcile import PublishError, Reconciler
from drakit.plugin.slices.rules import DRAKIT_DEFAULT, RuleOptions, for_server
from drakit.plugin.slices.schedule import ResyncSchedule
from drakit.plugin.slices.validate import ValidationIssue
from drakit.plugin.slices.view import SliceView
from drakit.plugin.slices.watch import Scope, SliceWatcher, Timing
from drakit.plugin.slices.writes import OwnWrites, Replan, SliceWriter

__all__ = ["PUBLISHER_NODE_LABEL", "PublishError", "PublisherStats", "SlicePublisher",
           "SyncReport", "node_label_value", "slice_name_prefix"]

log = logging.getLogger(__name__)


@dataclass
class PublisherStats:
    """What the publisher has done, for metrics and readiness.

    ``last_publish_time``: ``time.time()`` of the last successful sync (None before).
    ``devices_published`` / ``slices_published``: in the desired state last synced.
    ``slice_writes``: creates + updates + deletes since start (also split by kind).
    ``publish_errors``: syncs that failed. ``validation_drops``: issues (devices,
    attributes, counter sets, pools left out) in the current desired state.
    ``published_once``: a sync has succeeded (readiness). ``generations``: pool → generation.
    ``lists``: LIST requests (pages count once); ``watches``: watch requests that opened a
    stream; ``watch_restarts``: watches that broke or failed to open, by ``expired`` (410)
    and ``error``; ``last_verified_time``: ``time.time()`` of the last sync that compared the
    desired state with a current view (right after a LIST, or while the watch is open).
    """

    last_publish_time: float | None = None
    devices_published: int = 0
    slices_published: int = 0
    slice_writes: int = 0
    creates: int = 0
    updates: int = 0
    deletes: int = 0
    publish_errors: int = 0
    validation_drops: int = 0
    published_once: bool = False
    last_error: str | None = None
    generations: dict[str, int] = field(default_factory=dict)
    lists: int = 0
    watches: int = 0
    watch_restarts: dict[str, int] = field(default_factory=dict)
    last_verified_time: float | None = None


@dataclass(frozen=True)
class SyncReport:
    """The writes one sync made."""

    creates: int = 0
    updates: int = 0
    deletes: int = 0

    @property
    def writes(self) -> int:
        return self.creates + self.updates + self.deletes


class SlicePublisher:
    """Publishes ``driver_name``'s pools for ``node_name`` (see the module docstring).

    Parameters: ``resource_api`` (a :class:`~drakit.plugin.api.resourceapi.ResourceAPI`);
    ``node_uid`` (looked up with GET node when None); ``strict`` (refuse a publish with any
    validation issue instead of leaving the broken parts out); ``resync_period`` (mean
    seconds between background verifications against the local view, which send no request
    when nothing differs); ``watch_delay`` (least seconds from a foreign change to the
    resync); ``watch_timeout`` (least ``timeoutSeconds`` per watch request; each asks for a
    random value up to twice that); ``watch_idle_timeout`` (seconds without event or
    bookmark after which a watch is replaced); ``recovery_spread`` (seconds over which
    reconnects and re-lists after a broken watch, and resyncs after foreign changes, are
    spread); ``backoff`` (per API call); ``max_sync_attempts`` (list-and-plan rounds per
    sync after 409s); ``min_retry_delay`` (floor of the background retry delay after a
    failed sync); ``rule_options``;
    ``events`` (:class:`~drakit.plugin.events.Events`: ``slice_validation_issue`` once for
    each issue that is new compared with the previous publish, ``slice_write`` for each
    write, ``publish_error`` for each failed sync); ``sleep`` and ``rng`` (for tests;
    ``sleep`` defaults to an interruptible wait that :meth:`stop` cuts short; ``rng`` to a
    generator of this publisher's own, seeded from driver and node name, so that two agents
    never share a schedule).
    """

    def __init__(
        self,
        resource_api: ResourceAPI,
        driver_name: str,
        node_name: str,
        node_uid: str | None = None,
        strict: bool = False,
        *,
        resync_period: float = 30.0,
        watch_delay: float = 1.0,
        watch_timeout: int = 300,
        watch_idle_timeout: float = 150.0,
        recovery_spread: float = 20.0,
        backoff: Backoff | None = None,
        max_sync_attempts: int = 3,
        min_retry_delay: float = 1.0,
        rule_options: RuleOptions = DRAKIT_DEFAULT,
        events: Events | None = None,
        sleep: Callable[[float], Any] | None = None,
        rng: Callable[[], float] | None = None,
        supervisor: Supervisor | None = None,
    ) -> None:
        if not driver_name or not node_name:
            raise ValueError("driver_name and node_name are required")
        self.api = resource_api
        self.driver = driver_name
        self.node = node_name
        self.strict = strict
        self._t = Timing(resync_period, watch_delay, max(1, watch_timeout), watch_idle_timeout,
                         max(0.0, recovery_spread), min_retry_delay, backoff or Backoff())
        self._max_sync_attempts = max(1, max_sync_attempts)
        self._rules = rule_options
        self._events = events or Events()
        self._supervisor = supervisor or Supervisor(self._events)
        self._rng = rng or random.Random(f"drakit/{driver_name}/{node_name}").random
        self._stopping = threading.Event()
        self._calls = ApiCalls(self._t.backoff, sleep=sleep or self._interruptible_sleep,
                               rng=self._rng)
        self._owner = NodeOwner(node_name, self._fetch_node_uid, uid=node_uid)
        self._recreate = RecreateBackoff(watch_delay, resync_period, 2 * resync_period)
        self._label_value = node_label_value(node_name)
        self._local = Scope("local", node_name)
        self._remote = Scope("remote", "", f"{PUBLISHER_NODE_LABEL}={self._label_value}")
        self._view = SliceView()
        self._own = own = OwnWrites()
        self._schedule = ResyncSchedule(resync_period, self._rng)
        self._watcher = SliceWatcher(resource_api, driver_name, [self._local, self._remote],
                                     self._view, own, self._t, seed=self._rng,
                                     wanted=self._wanted, on_foreign=self._on_foreign,
                                     schedule=self._schedule.ask, stopping=self._stopping,
                                     supervisor=self._supervisor)
        self._writer = SliceWriter(resource_api, self._calls, self._view, own, self._events,
                                   label_value=self._label_value,
                                   generate_name=slice_name_prefix(node_name, driver_name))
        self._node_watch = NodeWatch(resource_api, self._owner, self._on_node_change,
                                     self._t, self._stopping,
                                     seed=f"drakit/{driver_name}/{node_name}",
                                     supervisor=self._supervisor)
        self._reconcile = Reconciler(self._writer, self._owner, own, self._view,
                                     self._label_value, f"{driver_name} on {node_name}")
        self._sync_lock = threading.Lock()      # one sync at a time
        self._lock = threading.Lock()           # guards the fields below
        self._desired: DesiredState | None = None
        self._layout_pending: list[Pool] | None = None  # pools split without the release
        self._stats = PublisherStats()
        self._remote_listed = False
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------------ public API

    @property
    def stats(self) -> PublisherStats:
        """A copy of the current :class:`PublisherStats`."""
        totals = self._writer.totals
        with self._lock:
            return replace(self._stats, generations=self._reconcile.generations,
                           creates=totals["create"], updates=totals["update"],
                           deletes=totals["delete"], slice_writes=totals.total(),
                           watches=self._watcher.watches,
                           watch_restarts=dict(self._watcher.restarts))

    @property
    def watching(self) -> bool:
        """True while the background watch has a stream open."""
        return self._watcher.is_open(self._local)

    @property
    def node_watching(self) -> bool:
        """True once the watch on this node's Node object has opened a stream."""
        return self._node_watch.watches > 0

    @property
    def next_syncs(self) -> tuple[float, float | None]:
        """``time.monotonic()`` of the next periodic verification and of the next resync
        asked for (after a change, a trigger or a failure; None when none is), for
        metrics and tests; neither is before the end of a failed sync's backoff."""
        return self._schedule.next_syncs()

    @property
    def issues(self) -> list[ValidationIssue]:
        """Validation issues of the current desired state."""
        with self._lock:
            return list(self._desired.issues) if self._desired else []

    def publish(self, pools: Iterable[Pool], *, wait: bool = True) -> SyncReport | None:
        """Hand over the complete desired state and publish it.

        ``wait=True`` syncs in the calling thread and returns what was written; it raises
        :class:`PublishError` if the API calls still fail after the bounded retries (the
        state is kept; a started publisher retries in the background). ``wait=False`` only
        stores the state and triggers the background loop. In strict mode a state with any
        validation issue raises :class:`~drakit.plugin.slices.validate.SliceValidationError`
        and nothing is written or stored.
        """
        pools = list(pools)
        desired = self._desired_state(pools)
        with self._lock:
            old = {str(i) for i in self._desired.issues} if self._desired else set()
            self._desired = desired
            self._stats.validation_drops = len(desired.issues)
        for issue in desired.issues:
            if str(issue) not in old:
                log.warning("ResourceSlice validation: %s", issue)
                self._events.slice_validation_issue(issue)
        if not wait:
            self.trigger()
            return None
        return self.sync()

    def _desired_state(self, pools: list[Pool]) -> DesiredState:
        """Validate and split ``pools`` by the rules of the server's release. The release
        matters only to counter sets (their slice layout up to 1.34, :func:`~drakit.plugin.
        slices.rules.for_server`), so ``GET /version`` is asked (once) only for a node that
        has them; while it cannot be read, the 1.35+ layout is used and the pools are kept
        to be split again by the next sync that reads it."""
        rules_now = self._rules
        unknown = False
        if any(p.counter_sets for p in pools):
            version = self.api.server_version()
            unknown = version == "unknown"
            rules_now = for_server(self._rules, version)
        desired = desired_state(pools, self.driver, self.node, rules_now, strict=self.strict)
        with self._lock:
            self._layout_pending = pools if unknown else None
        return desired

    def _split_again_if_known(self) -> None:
        """Redo the desired state of a publish that could not read the server's release."""
        with self._lock:
            pools = self._layout_pending
        if pools is None or self.api.server_version() == "unknown":
            return
        desired = self._desired_state(pools)
        with self._lock:
            self._desired = desired

    def sync(self) -> SyncReport:
        """List this publisher's slices (both scopes), compare them with the desired state
        and write the difference now."""
        return self._sync(full=True)

    def trigger(self) -> None:
        """Ask the background loop to resync now (after hot-plug, re-registration…); after
        a failed sync not before its backoff has passed."""
        self._schedule.ask(0.0)

    def start(self) -> None:
        """Start the background resync loop and the watch (idempotent)."""
        with self._lock:
            if self._threads:
                return
            self._stopping.clear()
            self._own.stop(False)
            self._schedule.start(now=self._desired is not None)
            self._threads = [threading.Thread(
                target=self._supervisor.thread("publish", self._resync_loop), daemon=True,
                name="drakit-slices-resync"),
                             *self._watcher.threads(), self._node_watch.thread()]
            threads = list(self._threads)
        for t in threads:
            t.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the background threads (published slices stay: the kubelet removes them
        when it decides to; ``drakit cleanup`` removes them on uninstall)."""
        with self._lock:
            self._stopping.set()
            threads, self._threads = self._threads, []
        self._own.stop()
        self._schedule.wake()
        self._watcher.stop()
        self._node_watch.stop()
        for t in threads:
            t.join(timeout)

    # ------------------------------------------------------------------ sync

    def _sync(self, *, full: bool = False, relist: bool = True) -> SyncReport:
        """One sync: ``full`` lists both scopes; else ``relist`` lists the scopes the
        publisher needs (:meth:`_scopes`), and without it the local view is compared, with
        no request unless something differs. A conflict lists again."""
        with self._sync_lock:
            self._split_again_if_known()
            with self._lock:
                desired = self._desired
            if desired is None:
                return SyncReport()
            counts: Counter[str] = Counter()  # writes by verb
            verified = False
            try:
                for attempt in range(1, self._max_sync_attempts + 1):
                    try:
                        if full or relist or attempt > 1:
                            listed = self._list(desired, full=full)
                            verified = True
                        else:
                            listed = self._view.slices()
                            verified = all(self._watcher.verified(sc)
                                           for sc in self._scopes(desired))
                        self._reconcile(desired, listed, counts)
                        break
                    except Replan as exc:
                        if attempt == self._max_sync_attempts:
                            raise PublishError([f"still conflicting after {attempt} "
                                                f"attempts: {exc}"]) from exc
                        log.info("ResourceSlices changed meanwhile (%s); listing again", exc)
            except Exception as exc:
                self._failed(exc)
                if isinstance(exc, PublishError):
                    raise
                raise PublishError([describe(exc)]) from exc
            with self._lock:
                self._stats.last_publish_time = time.time()
                if verified:
                    self._stats.last_verified_time = self._stats.last_publish_time
                self._stats.devices_published = desired.devices
                self._stats.slices_published = desired.slice_count
                self._stats.published_once = True
                self._stats.last_error = None
            return SyncReport(counts["create"], counts["update"], counts["delete"])

    def _failed(self, exc: BaseException) -> None:
        with self._lock:
            self._stats.publish_errors += 1
            self._stats.last_error = str(exc)
        # a write whose answer was lost may have been applied: the view is no longer known
        # to be current, the next sync lists again
        self._watcher.forget()
        self._events.publish_error(exc)

    def _scopes(self, desired: DesiredState) -> list[Scope]:
        """The scopes to list and watch: this node's slices always; the slices without
        ``nodeName`` until the first LIST of them, and then only while the desired state or
        the view has some (so the hot path never lists what this driver does not
        publish)."""
        with self._lock:
            remote = not self._remote_listed
        remote = (remote or any(not s.get("nodeName") for specs in desired.specs.values()
                                for s in specs)
                  or bool(self._view.slices(self._remote.holds)))
        return [self._local, self._remote] if remote else [self._local]

    def _wanted(self, scope: Scope) -> bool:
        """The watch of ``scope`` is needed now."""
        with self._lock:
            desired = self._desired
        return scope is self._local or desired is None or scope in self._scopes(desired)

    def _list(self, desired: DesiredState, *, full: bool = False) -> list[dict[str, Any]]:
        """LIST the scopes (both when ``full``), refresh the view from the answers and note
        their resourceVersions for the watch; returns the view's slices."""
        for scope in [self._local, self._remote] if full else self._scopes(desired):
            listed = self._calls(lambda sc=scope: self.api.list_slices(  # type: ignore[misc]
                self.driver, sc.node, label_selector=sc.label_selector), "list ResourceSlices")
            self._view.replace(scope.holds, [o for o in listed.items if scope.holds(o)])
            with self._lock:
                self._stats.lists += 1
                if scope is self._remote:
                    self._remote_listed = True
            self._watcher.listed(scope, listed.resource_version)
        return self._view.slices()

    # ------------------------------------------------------------------ background

    def _resync_loop(self) -> None:
        failures = 0
        while self._schedule.wait_due(self._stopping):
            with self._lock:
                desired = self._desired
            if desired is None:
                self._schedule.succeeded()
                continue
            relist = not all(self._watcher.current(sc) for sc in self._scopes(desired))
            try:
                self._sync(relist=relist)
                failures = 0
                self._schedule.succeeded()
                self._supervisor.succeeded("publish")
            except Exception as exc:
                if self._stopping.is_set():
                    return
                failures += 1
                delay = self._t.recovery_delay(failures, self._rng)
                if not self._supervisor.report("publish", exc, retry_in=delay, trace=False):
                    return
                self._schedule.failed(delay)

    def _on_foreign(self, scope: Scope, event: WatchEvent, rng: Callable[[], float]) -> None:
        """Someone else changed one of our slices: resync after ``watch_delay`` (after a
        deletion, the :class:`RecreateBackoff`) plus a random part of ``recovery_spread``."""
        name = event.object.get("metadata", {}).get("name")
        delay = self._t.watch_delay
        if event.type == "DELETED":
            # deleted by someone else: the garbage collector does that when the Node our
            # slices name as owner is gone, so read its UID again and back off re-creating
            self._owner.invalidate(f"ResourceSlice {name} deleted by someone else")
            delay = self._recreate.delay()
        delay += rng() * self._t.recovery_spread
        log.info("ResourceSlice %s %s by someone else; resync in %.1fs", name,
                 event.type.lower(), delay)
        self._schedule.ask(delay)

    def _on_node_change(self) -> None:
        """The Node has a new UID (registered again): rewrite the slices' owner now."""
        self.trigger()

    def _interruptible_sleep(self, seconds: float) -> None:
        if self._stopping.wait(seconds):
            raise PublishError(["stopped while waiting to retry"])

    def _fetch_node_uid(self) -> str:
        return self._calls(lambda: self.api.get_node_uid(self.node), f"GET node {self.node}")
