"""Publish a node's pools as ResourceSlices and keep them published.

:class:`SlicePublisher` is declarative: :meth:`~SlicePublisher.publish` hands over the
complete desired state (every pool of this driver on this node); the publisher validates it
(:mod:`drakit.plugin.slices.validate`), splits each pool (:mod:`drakit.plugin.slices.split`), lists
what is
published, and writes only the difference. The semantics follow the Go
``k8s.io/dynamic-resource-allocation/resourceslice`` controller (existing-drivers.md §5.2):

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
* Writes: surplus slices are deleted first (with UID and resourceVersion preconditions;
  NotFound is fine), then existing slices are updated in place (PUT with their
  resourceVersion), then missing ones are created with ``generateName``
  ``<node>-<driver>-``. Within each of these three steps of a pool, up to
  ``max_parallel_writes`` requests are in flight at once (every slice of the step already
  carries the pool's new generation and ``resourceSliceCount``, so their order does not
  matter); a step ends when all its requests have ended, and the first failure (in slice
  order) is what the step raises. Slices of pools that no longer exist are deleted; slices
  of a pool that was skipped because its own fields are invalid are left alone.
* Ownership: an owner reference to the Node (``controller: true``) so the garbage collector
  removes the slices with the Node. The Node's UID is kept by :class:`~drakit.plugin.slices.owner.
  NodeOwner` and read again when one of our slices was deleted by someone else (seen by the
  watch, or missing from a listing) and at every sync while the Node answers 404 (slices are
  then written without an owner reference, never with a gone one). Re-creating slices that
  someone else deleted waits :class:`~drakit.plugin.slices.owner.RecreateBackoff` (``watch_delay``,
  doubling per round up to ``resync_period``).
* Errors: retryable API errors (429 honouring Retry-After, 5xx, connection errors) are
  retried per call with exponential backoff and jitter; a Retry-After also holds back
  every later call of the publisher until it has passed (including the next sync's LIST,
  which a resync asked for meanwhile would otherwise send at once); a 409 (or an object
  gone between list and update) re-lists and plans again; both are bounded per call of
  :meth:`sync`.
  Whatever still fails is raised as :class:`PublishError` and retried by the background
  loop after a backoff that never goes below ``min_retry_delay`` (nothing hot-loops).
* Server-side rewrites: if the server answers a write with different content (fields
  dropped because a feature gate is off, defaults filled in), the answer is remembered as
  "what the desired content looks like on this server", so the next resync does not write
  again; a warning names the fields.
* Background (:meth:`start`/:meth:`stop`), shaped like the Go controller's informer: one
  LIST (this node's slices by the indexed field selectors ``spec.driver`` +
  ``spec.nodeName``; the slices without ``nodeName`` by ``spec.nodeName=`` plus the label,
  only at the first sync and while this publisher has such slices) fills a local
  :class:`~drakit.plugin.slices.view.SliceView`, then a watch with ``allowWatchBookmarks`` from the
  LIST's resourceVersion keeps it current; the answers of the publisher's own writes update
  it too. The periodic verification (``resync_period``) compares the desired state with the
  view and sends no request when they agree. A LIST happens again only when the watch
  cannot continue (410 Gone), or a write meets a conflict. Someone else's change (the
  kubelet deletes a node's slices when it restarts) schedules a resync ``watch_delay`` plus
  a random part of ``recovery_spread`` seconds later. :meth:`trigger` asks for a resync now.
  The watch may deliver the event of one of our own writes before the write's answer
  (with its resourceVersion) is back; such an event waits until the publisher's writes in
  flight have ended before it is judged, so our own writes never schedule a resync.
* No lockstep: every periodic or recovery delay is random (each publisher has its own
  generator, seeded from driver and node): the verification every ``resync_period`` times
  [0.5, 1.5); a watch asks for ``timeoutSeconds`` in [``watch_timeout``,
  2·``watch_timeout``) as client-go's reflector does; after a broken watch (API server
  restart, connection loss) the reconnect, and after a 410 the re-list, wait a uniform
  part of ``recovery_spread`` (full jitter), so N agents that lost the server in the same
  second come back spread over that window. A server that answers and asks for a delay
  (429 with Retry-After, as a restarted API server does while its watch cache fills) gets
  that delay spread over [Retry-After, 2·Retry-After); another error answer the backoff
  with full jitter.
* Watch health: a watch that carries no event and no bookmark for ``watch_idle_timeout``
  seconds (the API server sends a bookmark about every minute) is closed and resumed from
  its last resourceVersion; the bounded ``timeoutSeconds`` moves a watch off a draining
  server at the latest then.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import random
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Final, TypeVar

from kubernetes.client import ApiException

from drakit.discovery.model import Pool
from drakit.plugin.events import Events
from drakit.plugin.resourceapi import (
    Backoff,
    ErrorKind,
    ResourceAPI,
    WatchEvent,
    call_with_retries,
    classify,
    describe,
    retry_after_seconds,
)
from drakit.plugin.slices.compare import carry_time_added, content_key, differing_fields
from drakit.plugin.slices.convert import api_version
from drakit.plugin.slices.formats import is_label_value
from drakit.plugin.slices.owner import NodeOwner, RecreateBackoff
from drakit.plugin.slices.plan import plan_pool
from drakit.plugin.slices.rules import DRAKIT_DEFAULT, RuleOptions
from drakit.plugin.slices.split import split_pool
from drakit.plugin.slices.validate import SliceValidationError, ValidationIssue, validate_pools
from drakit.plugin.slices.view import SliceView, newer_rv

PUBLISHER_NODE_LABEL: Final = "resource.drakit.io/node"
"""Label on every slice drakit writes: the node whose publisher owns it (the node name, or
a hash of it when the name is not a valid label value)."""

log = logging.getLogger(__name__)
T = TypeVar("T")


def node_label_value(node: str) -> str:
    """The :data:`PUBLISHER_NODE_LABEL` value for a node name."""
    if is_label_value(node):
        return node
    return "sha256-" + hashlib.sha256(node.encode()).hexdigest()[:40]


def slice_name_prefix(node: str, driver: str) -> str:
    """``generateName`` for new slices: ``<node>-<driver>-`` as a DNS label prefix (dots and
    other characters become ``-``; at most 58 characters so the server's 5-character
    suffix fits a 63-character name)."""
    s = re.sub(r"[^a-z0-9]+", "-", f"{node}-{driver}".lower()).strip("-")
    s = s[:57].rstrip("-") or "drakit"
    return s + "-"


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
    stream; ``last_verified_time``: ``time.time()`` of the last sync that compared the
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


class PublishError(RuntimeError):
    """Publishing did not complete; ``errors`` names each pool / call that failed. The
    desired state is kept and the background loop (if started) retries later."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        super().__init__("ResourceSlice publishing failed: " + "; ".join(errors))


class _Replan(Exception):
    """The server changed under us (409, or an object vanished): list again."""


@dataclass
class _Desired:
    specs: dict[str, list[dict[str, Any]]]
    protected: set[str]
    devices: int
    issues: list[ValidationIssue]
    _keys: dict[str, list[str]] = field(default_factory=dict)

    def keys(self, pool: str) -> list[str]:
        """The content_key of each spec of ``pool``, computed when first needed (a cold
        publish, with nothing on the server to match, needs none)."""
        got = self._keys.get(pool)
        if got is None:
            got = self._keys[pool] = [content_key(s) for s in self.specs[pool]]
        return got


@dataclass
class _Counts:
    creates: int = 0
    updates: int = 0
    deletes: int = 0


DEFAULT_PARALLEL_WRITES: Final = 4
"""Slice writes of one step of a pool sync that may be in flight at once."""
OWN_WRITE_WAIT: Final = 30.0
"""Longest time (seconds) a watch event waits for the publisher's writes in flight to end
before it is judged foreign (see :meth:`SlicePublisher._is_own`)."""


@dataclass(frozen=True)
class _Scope:
    """One LIST/WATCH selection of this publisher's slices: ``node`` is the
    ``spec.nodeName`` field selector value ("" selects the slices without one, which the
    API server's watch cache serves from its nodeName index as well)."""

    name: str
    node: str
    label_selector: str | None = None

    def holds(self, obj: dict[str, Any]) -> bool:
        return str((obj.get("spec") or {}).get("nodeName") or "") == self.node


def _jittered(seconds: float, rng: Callable[[], float]) -> float:
    """``seconds`` times a uniform factor in [0.5, 1.5)."""
    return seconds * (0.5 + rng())


class SlicePublisher:
    """Publishes ``driver_name``'s pools for ``node_name`` (see the module docstring).

    Parameters: ``resource_api`` (a :class:`~drakit.plugin.resourceapi.ResourceAPI`); ``node_uid``
    (looked up with GET node when None); ``strict`` (refuse a publish with any validation
    issue instead of leaving the broken parts out); ``resync_period`` (mean seconds between
    background verifications against the local view, which send no request when nothing
    differs); ``watch_delay`` (least seconds from a foreign change to the resync);
    ``watch_timeout`` (least ``timeoutSeconds`` per watch request; each asks for a random
    value up to twice that); ``watch_idle_timeout`` (seconds without event or bookmark after
    which a watch is replaced); ``recovery_spread`` (seconds over which reconnects and
    re-lists after a broken watch, and resyncs after foreign changes, are spread);
    ``backoff`` (per API call);
    ``max_parallel_writes`` (slice writes in flight at once within one step of a pool
    sync; 1 writes one after the other); ``max_sync_attempts`` (list-and-plan rounds per
    sync after 409s); ``min_retry_delay``
    (floor of the background retry delay after a failed sync); ``rule_options``;
    ``events`` (:class:`~drakit.plugin.events.Events`: ``slice_validation_issue`` once for
    each issue that is new compared with the previous publish, ``slice_write`` for each
    write, ``publish_error`` for each failed sync); ``sleep`` and
    ``rng`` (for tests; ``sleep`` defaults to an interruptible wait that :meth:`stop` cuts
    short; ``rng`` to a generator of this publisher's own, seeded from driver and node name,
    so that two agents never share a schedule).
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
        max_parallel_writes: int = DEFAULT_PARALLEL_WRITES,
        max_sync_attempts: int = 3,
        min_retry_delay: float = 1.0,
        rule_options: RuleOptions = DRAKIT_DEFAULT,
        events: Events | None = None,
        sleep: Callable[[float], Any] | None = None,
        rng: Callable[[], float] | None = None,
    ) -> None:
        if not driver_name or not node_name:
            raise ValueError("driver_name and node_name are required")
        self.api = resource_api
        self.driver = driver_name
        self.node = node_name
        self.strict = strict
        self._owner = NodeOwner(node_name, self._fetch_node_uid, uid=node_uid)
        self._recreate = RecreateBackoff(watch_delay, resync_period, 2 * resync_period)
        self._resync_period = resync_period
        self._watch_delay = watch_delay
        self._watch_timeout = max(1, watch_timeout)
        self._watch_idle_timeout = watch_idle_timeout
        self._recovery_spread = max(0.0, recovery_spread)
        self._backoff = backoff or Backoff()
        self._max_parallel_writes = max(1, max_parallel_writes)
        self._max_sync_attempts = max(1, max_sync_attempts)
        self._min_retry_delay = min_retry_delay
        self._rules = rule_options
        self._events = events or Events()
        self._rng = rng or random.Random(f"drakit/{driver_name}/{node_name}").random
        self._stopping = threading.Event()
        self._sleep = sleep or self._interruptible_sleep
        self._label_value = node_label_value(node_name)
        self._generate_name = slice_name_prefix(node_name, driver_name)
        self._local = _Scope("local", node_name)
        self._remote = _Scope("remote", "", f"{PUBLISHER_NODE_LABEL}={self._label_value}")
        # each watch thread draws from a generator of its own (seeded from ``rng``), so the
        # draws of each thread, and so the schedule, do not depend on thread timing
        self._watch_rngs = {scope.name: random.Random(self._rng()).random
                            for scope in (self._local, self._remote)}

        self._sync_lock = threading.Lock()      # one sync at a time
        self._cond = threading.Condition()      # guards the fields below
        self._desired: _Desired | None = None
        self._stats = PublisherStats()
        self._generations: dict[str, int] = {}
        self._echo: dict[str, str] = {}
        # (uid, resourceVersion) of a listed slice → content_key of its spec, for the
        # slices of the last sync: a resync with nothing changed keys no device again.
        self._server_keys: dict[tuple[str, str], str] = {}
        self._server_keys_prev: dict[tuple[str, str], str] = {}
        self._warned_echo: set[str] = set()
        self._own_rvs: deque[str] = deque(maxlen=4096)
        self._own_deleted: deque[str] = deque(maxlen=4096)
        self._known: set[str] = set()      # our slices on the server after the last sync
        self._writes_in_flight = 0
        self._pending_at: float | None = None
        # time.monotonic() before which no call is sent: the last Retry-After (see _call)
        self._throttled_until = 0.0
        self._verify_at = float("inf")
        # the local view, and per scope: whether it is current (listed, its watch not
        # expired), the resourceVersion to watch from, the open watch and when it last
        # carried something (time.monotonic())
        self._view = SliceView()
        self._current: dict[str, bool] = {}
        self._watch_rv: dict[str, str] = {}
        self._watches: dict[str, Any] = {}
        self._last_seen: dict[str, float] = {}
        self._remote_listed = False
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------------ public API

    @property
    def stats(self) -> PublisherStats:
        """A copy of the current :class:`PublisherStats`."""
        with self._cond:
            return replace(self._stats, generations=dict(self._generations))

    @property
    def watching(self) -> bool:
        """True while the background watch has a stream open."""
        with self._cond:
            return self._local.name in self._watches

    @property
    def next_syncs(self) -> tuple[float, float | None]:
        """``time.monotonic()`` of the next periodic verification and of the next resync
        asked for (after a change, a trigger or a failure; None when none is), for
        metrics and tests."""
        with self._cond:
            return self._verify_at, self._pending_at

    @property
    def issues(self) -> list[ValidationIssue]:
        """Validation issues of the current desired state."""
        with self._cond:
            return list(self._desired.issues) if self._desired else []

    def publish(self, pools: Iterable[Pool], *, wait: bool = True) -> SyncReport | None:
        """Hand over the complete desired state and publish it.

        ``wait=True`` syncs in the calling thread and returns what was written; it raises
        :class:`PublishError` if the API calls still fail after the bounded retries (the
        state is kept; a started publisher retries in the background). ``wait=False`` only
        stores the state and triggers the background loop. In strict mode a state with any
        validation issue raises :class:`~drakit.plugin.slices.validate.SliceValidationError` and
        nothing is written or stored.
        """
        desired = self._prepare(list(pools))
        with self._cond:
            old = {str(i) for i in self._desired.issues} if self._desired else set()
            self._desired = desired
            self._stats.validation_drops = len(desired.issues)
        for issue in desired.issues:
            if str(issue) in old:
                continue
            log.warning("ResourceSlice validation: %s", issue)
            self._events.slice_validation_issue(issue)
        if not wait:
            self.trigger()
            return None
        return self.sync()

    def sync(self) -> SyncReport:
        """List this publisher's slices (both scopes), compare them with the desired state
        and write the difference now."""
        return self._sync(full=True)

    def _sync(self, *, full: bool = False, relist: bool = True) -> SyncReport:
        """One sync: ``full`` lists both scopes; else ``relist`` lists the scopes the
        publisher needs (:meth:`_scopes`), and without it the local view is compared, with
        no request unless something differs. A conflict lists again."""
        with self._sync_lock:
            with self._cond:
                desired = self._desired
            if desired is None:
                return SyncReport()
            counts = _Counts()
            verified = False
            try:
                for attempt in range(1, self._max_sync_attempts + 1):
                    try:
                        if full or relist or attempt > 1:
                            existing = self._list(desired, full=full)
                            verified = True
                        else:
                            with self._cond:
                                existing = self._view.slices()
                                verified = all(self._current.get(sc.name) and
                                               sc.name in self._watches
                                               for sc in self._scopes(desired))
                        self._sync_once(desired, counts, existing)
                        break
                    except _Replan as exc:
                        if attempt == self._max_sync_attempts:
                            raise PublishError([f"still conflicting after {attempt} "
                                                f"attempts: {exc}"]) from exc
                        log.info("ResourceSlices changed meanwhile (%s); listing again", exc)
            except Exception as exc:
                with self._cond:
                    self._stats.publish_errors += 1
                    # a write whose answer was lost may have been applied: the view is no
                    # longer known to be current, the next sync lists again
                    self._current.clear()
                    self._stats.last_error = str(exc)
                self._events.publish_error(exc)
                if isinstance(exc, PublishError):
                    raise
                raise PublishError([describe(exc)]) from exc
            with self._cond:
                self._stats.last_publish_time = time.time()
                if verified:
                    self._stats.last_verified_time = self._stats.last_publish_time
                self._stats.devices_published = desired.devices
                self._stats.slices_published = sum(len(s) for s in desired.specs.values())
                self._stats.published_once = True
                self._stats.last_error = None
            return SyncReport(counts.creates, counts.updates, counts.deletes)

    def trigger(self) -> None:
        """Ask the background loop to resync now (after hot-plug, re-registration…)."""
        self._schedule(0.0)

    def start(self) -> None:
        """Start the background resync loop and the watch (idempotent)."""
        with self._cond:
            if self._threads:
                return
            self._stopping.clear()
            if self._desired is not None:
                self._pending_at = time.monotonic()
            self._verify_at = time.monotonic() + _jittered(self._resync_period, self._rng)
            self._threads = [
                threading.Thread(target=self._resync_loop, name="drakit-slices-resync",
                                 daemon=True),
                *(threading.Thread(target=self._watch_loop, args=(scope,),
                                   name=f"drakit-slices-watch-{scope.name}", daemon=True)
                  for scope in (self._local, self._remote)),
            ]
            threads = list(self._threads)
        for t in threads:
            t.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the background threads (published slices stay: the kubelet removes them
        when it decides to; ``drakit cleanup`` removes them on uninstall)."""
        with self._cond:
            self._stopping.set()
            threads, self._threads = self._threads, []
            watches = list(self._watches.values())
            self._cond.notify_all()
        for watch in watches:
            watch.close()
        for t in threads:
            t.join(timeout)

    def cleanup(self) -> int:
        """Delete every slice of this driver for this node; returns how many."""
        return cleanup_slices(self.api, self.driver, self.node, backoff=self._backoff,
                              sleep=self._sleep)

    # ------------------------------------------------------------------ desired state

    def _prepare(self, pools: list[Pool]) -> _Desired:
        results = validate_pools(pools, self.driver, self.node, self._rules)
        issues = [i for r in results for i in r.issues]
        if self.strict and issues:
            raise SliceValidationError(issues)
        specs: dict[str, list[dict[str, Any]]] = {}
        protected: set[str] = set()
        devices = 0
        for pool, result in zip(pools, results, strict=True):
            if result.pool is None:
                protected.add(pool.name)
                continue
            specs[result.pool.name] = split_pool(result.pool, self.driver, self.node)
            devices += len(result.pool.devices)
        return _Desired(specs, protected - set(specs), devices, issues)

    # ------------------------------------------------------------------ sync

    def _call(self, fn: Callable[[], T], what: str) -> T:
        """``fn`` with the retry policy; first waits out the Retry-After of the last 429/503
        any call of this publisher got, so a new call (the next sync's LIST, a parallel
        write) never reaches the server sooner than a retry of the throttled one would."""
        with self._cond:
            left = self._throttled_until - time.monotonic()
        if left > 0:
            log.info("%s waits %.2fs for the API server's Retry-After", what, left)
            self._sleep(left)

        def attempt() -> T:
            try:
                return fn()
            except Exception as exc:
                after = retry_after_seconds(exc)
                if after is not None:
                    until = time.monotonic() + min(after, self._backoff.max_retry_after)
                    with self._cond:
                        self._throttled_until = max(self._throttled_until, until)
                raise

        return call_with_retries(attempt, self._backoff, sleep=self._sleep, rng=self._rng,
                                 what=what)

    def _interruptible_sleep(self, seconds: float) -> None:
        if self._stopping.wait(seconds):
            raise PublishError(["stopped while waiting to retry"])

    def _fetch_node_uid(self) -> str:
        return self._call(lambda: self.api.get_node_uid(self.node), f"GET node {self.node}")

    def _scopes(self, desired: _Desired) -> list[_Scope]:
        """The scopes to list and watch: this node's slices always; the slices without
        ``nodeName`` until the first LIST of them, and then only while the desired state or
        the view has some (so the hot path never lists what this driver does not
        publish)."""
        with self._cond:
            remote = (not self._remote_listed
                      or any(not s.get("nodeName") for specs in desired.specs.values()
                             for s in specs)
                      or bool(self._view.slices(self._remote.holds)))
        return [self._local, self._remote] if remote else [self._local]

    def _list(self, desired: _Desired, *, full: bool = False) -> list[dict[str, Any]]:
        """LIST the scopes (both when ``full``), refresh the view from the answers and note
        their resourceVersions for the watch; returns the view's slices."""
        scopes = [self._local, self._remote] if full else self._scopes(desired)
        for scope in scopes:
            listed = self._call(lambda sc=scope: self.api.list_slices(  # type: ignore[misc]
                self.driver, sc.node, label_selector=sc.label_selector), "list ResourceSlices")
            with self._cond:
                self._stats.lists += 1
                items = [o for o in listed.items if scope.holds(o)]
                self._view.replace(scope.holds, items)
                self._watch_rv[scope.name] = newer_rv(self._watch_rv.get(scope.name, ""),
                                                      listed.resource_version)
                self._current[scope.name] = True
                if scope is self._remote:
                    self._remote_listed = True
                self._cond.notify_all()
        with self._cond:
            return self._view.slices()

    def _sync_once(self, desired: _Desired, counts: _Counts,
                   listed: list[dict[str, Any]]) -> None:
        lookups = self._owner.lookups
        owner = self._owner.reference()
        read_now = self._owner.lookups != lookups
        self._server_keys_prev, self._server_keys = self._server_keys, {}
        existing: dict[str, list[dict[str, Any]]] = {}
        seen: set[str] = set()
        for obj in listed:
            seen.add(obj["metadata"]["name"])
            existing.setdefault(obj["spec"]["pool"]["name"], []).append(obj)
        with self._cond:
            gone = self._known - seen - set(self._own_deleted)
            self._known = seen
        if gone and not read_now:
            # deleted by someone else (the garbage collector, when our owner is gone)
            self._owner.invalidate(f"ResourceSlice {min(gone)} deleted by someone else")
            owner = self._owner.reference()
        failures: list[str] = []
        if self._echo:
            keys = {k for pool in desired.specs for k in desired.keys(pool)}
            self._echo = {k: v for k, v in self._echo.items() if k in keys}
        for pool in sorted(set(desired.specs) | set(existing)):
            try:
                self._sync_pool(pool, desired, existing.get(pool, []), owner, counts)
            except _Replan:
                raise
            except Exception as exc:
                if isinstance(exc, PublishError):
                    raise
                failures.append(f"pool {pool!r}: {describe(exc)}")
        if failures:
            raise PublishError(failures)

    def _server_key(self, obj: dict[str, Any]) -> str:
        """content_key of a listed slice's spec; reused while its uid and resourceVersion
        are the same (the API server changes resourceVersion at every write)."""
        meta = obj.get("metadata") or {}
        uid, rv = meta.get("uid"), meta.get("resourceVersion")
        if not uid or not rv:
            return content_key(obj["spec"])
        ident = (str(uid), str(rv))
        key = self._server_keys_prev.get(ident) or self._server_keys.get(ident)
        if key is None:
            key = content_key(obj["spec"])
        self._server_keys[ident] = key
        return key

    def _metadata_ok(self, obj: dict[str, Any], owner: dict[str, Any] | None) -> bool:
        meta = obj.get("metadata") or {}
        if (meta.get("labels") or {}).get(PUBLISHER_NODE_LABEL) != self._label_value:
            return False
        if owner is None:
            return True
        return any(r.get("kind") == "Node" and r.get("name") == owner["name"]
                   and r.get("uid") == owner["uid"] and r.get("controller") is True
                   for r in meta.get("ownerReferences") or [])

    def _metadata(self, meta: dict[str, Any], owner: dict[str, Any] | None) -> dict[str, Any]:
        meta = copy.deepcopy(meta)
        meta["labels"] = {**(meta.get("labels") or {}), PUBLISHER_NODE_LABEL: self._label_value}
        if owner is not None:
            refs = [r for r in meta.get("ownerReferences") or [] if r.get("kind") != "Node"]
            meta["ownerReferences"] = [*refs, owner]
        for k in ("managedFields",):
            meta.pop(k, None)
        return meta

    def _sync_pool(self, pool: str, desired: _Desired, existing: list[dict[str, Any]],
                   owner: dict[str, Any] | None, counts: _Counts) -> None:
        """Plan (:func:`~drakit.plugin.slices.plan.plan_pool`) and execute one pool's writes."""
        with self._cond:
            remembered = self._generations.get(pool, 0)
        plan = plan_pool(pool, desired.specs.get(pool), partial(desired.keys, pool), existing,
                         protected=pool in desired.protected, key_of=self._server_key,
                         echo=self._echo, remembered=remembered,
                         metadata_ok=partial(self._metadata_ok, owner=owner))
        if plan.in_sync:
            if plan.generation is not None:
                with self._cond:
                    self._generations[pool] = plan.generation
            self._run_writes([partial(self._update, obj, obj["spec"], owner, pool, counts,
                                      content=False) for obj in plan.metadata_only])
            return
        self._run_writes([partial(self._delete, obj, pool, counts) for obj in plan.deletes])
        self._run_writes([partial(self._update, obj, full, owner, pool, counts)
                          for obj, full in plan.updates])
        self._run_writes([partial(self._create, full, owner, pool, counts)
                          for full in plan.creates])
        with self._cond:
            if plan.generation is None:
                self._generations.pop(pool, None)
            else:
                self._generations[pool] = plan.generation
        if plan.generation is not None:
            log.info("published pool %s of %s on %s: generation %d, %d slice(s)", pool,
                     self.driver, self.node, plan.generation,
                     len(plan.updates) + len(plan.creates))

    def _run_writes(self, writes: list[Callable[[], None]]) -> None:
        """Run ``writes`` with up to ``max_parallel_writes`` in flight (the calling thread
        is one of the workers). After a failure no further write is started; once the
        running ones have ended, the failure of the earliest write (in list order) is
        raised, as a sequential loop would have raised it."""
        workers = min(self._max_parallel_writes, len(writes))
        if workers <= 1:
            for write in writes:
                write()
            return
        lock = threading.Lock()
        pending = iter(enumerate(writes))
        failures: dict[int, BaseException] = {}

        def work() -> None:
            while True:
                with lock:
                    item = None if failures else next(pending, None)
                if item is None:
                    return
                index, write = item
                try:
                    write()
                except BaseException as exc:  # re-raised in the calling thread
                    with lock:
                        failures[index] = exc

        helpers = [threading.Thread(target=work, name=f"drakit-slices-write-{i}", daemon=True)
                   for i in range(1, workers)]
        for t in helpers:
            t.start()
        try:
            work()
        finally:
            for t in helpers:
                t.join()
        if failures:
            raise failures[min(failures)]

    @contextmanager
    def _in_flight(self) -> Iterator[None]:
        """Marks a write in flight (see :meth:`_is_own`) until its answer is remembered."""
        with self._cond:
            self._writes_in_flight += 1
        try:
            yield
        finally:
            with self._cond:
                self._writes_in_flight -= 1
                self._cond.notify_all()

    def _remember_write(self, sent: dict[str, Any], answer: dict[str, Any], *,
                        content: bool = True) -> None:
        """Note the answer's resourceVersion (our own write, for the watch) and, for a write
        of desired content, whether the server stored it differently (``_echo``)."""
        rv = str((answer.get("metadata") or {}).get("resourceVersion", ""))
        spec = answer.get("spec") or {}
        # The usual answer is what was sent: nothing to compare (the content keys, which
        # leave out the pool's generation and count, would be equal).
        changed = content and spec != sent
        key = content_key(sent) if changed else ""
        got = content_key(spec) if changed else ""
        with self._cond:
            self._view.stored(answer)
            if rv:
                self._own_rvs.append(rv)
                self._cond.notify_all()
            if got != key:
                self._echo[key] = got
            warn = got != key and key not in self._warned_echo
            if warn:
                self._warned_echo.add(key)
        if warn:
            log.warning("the API server changed ResourceSlice %s on write (fields %s); a "
                        "resource.k8s.io feature gate may be off on this cluster",
                        answer.get("metadata", {}).get("name"),
                        ", ".join(differing_fields(sent, answer.get("spec") or {})))

    def _count(self, verb: str, pool: str, counts: _Counts) -> None:
        with self._cond:
            setattr(counts, verb + "s", getattr(counts, verb + "s") + 1)
            setattr(self._stats, verb + "s", getattr(self._stats, verb + "s") + 1)
            self._stats.slice_writes += 1
        self._events.slice_write(verb, pool)

    def _write(self, fn: Callable[[], T], what: str, *, missing_ok: bool = False) -> T | None:
        try:
            return self._call(fn, what)
        except Exception as exc:
            kind = classify(exc)
            if kind is ErrorKind.NOT_FOUND and missing_ok:
                return None
            if kind in (ErrorKind.CONFLICT, ErrorKind.NOT_FOUND):
                raise _Replan(f"{what}: {describe(exc)}") from exc
            raise

    def _create(self, spec: dict[str, Any], owner: dict[str, Any] | None, pool: str,
                counts: _Counts) -> None:
        obj = {"apiVersion": api_version("v1"), "kind": "ResourceSlice",
               "metadata": self._metadata({"generateName": self._generate_name}, owner),
               "spec": spec}
        with self._in_flight():
            answer = self._write(lambda: self.api.create_slice(obj), "create ResourceSlice")
            assert answer is not None
            self._remember_write(spec, answer)
            with self._cond:
                self._known.add(str(answer.get("metadata", {}).get("name", "")))
        self._count("create", pool, counts)

    def _update(self, existing: dict[str, Any], spec: dict[str, Any],
                owner: dict[str, Any] | None, pool: str, counts: _Counts, *,
                content: bool = True) -> None:
        """PUT ``spec`` over ``existing``; ``content=False`` for a metadata-only update that
        re-sends the server's own spec."""
        spec = carry_time_added(spec, existing.get("spec") or {})
        obj = {"apiVersion": api_version("v1"), "kind": "ResourceSlice",
               "metadata": self._metadata(existing["metadata"], owner), "spec": spec}
        name = existing["metadata"]["name"]
        with self._in_flight():
            answer = self._write(lambda: self.api.update_slice(obj),
                                 f"update ResourceSlice {name}")
            assert answer is not None
            self._remember_write(spec, answer, content=content)
        self._count("update", pool, counts)

    def _delete(self, existing: dict[str, Any], pool: str, counts: _Counts) -> None:
        meta = existing["metadata"]
        name = meta["name"]
        with self._cond:
            self._own_deleted.append(name)
        self._write(lambda: self.api.delete_slice(name, uid=meta.get("uid"),
                                                  resource_version=meta.get("resourceVersion")),
                    f"delete ResourceSlice {name}", missing_ok=True)
        with self._cond:
            self._view.removed(name)
        self._count("delete", pool, counts)

    # ------------------------------------------------------------------ background

    def _schedule(self, delay: float) -> None:
        with self._cond:
            at = time.monotonic() + delay
            if self._pending_at is None or at < self._pending_at:
                self._pending_at = at
            self._cond.notify_all()

    def _recovery_delay(self, failures: int, rng: Callable[[], float]) -> float:
        """Full jitter: uniform up to the larger of ``recovery_spread`` and the backoff
        delay of attempt ``failures``, never below ``min_retry_delay``."""
        cap = max(self._recovery_spread, self._backoff.delay(failures, rng))
        return max(self._min_retry_delay, cap * rng())

    def _idle_watches(self, now: float) -> tuple[float, list[Any]]:
        """(the earliest time an open watch becomes idle, the watches idle now). Caller
        holds ``_cond``; an idle watch's clock restarts so it is closed once."""
        due, idle = float("inf"), []
        for name, watch in self._watches.items():
            at = self._last_seen.get(name, now) + self._watch_idle_timeout
            if at <= now:
                idle.append(watch)
                self._last_seen[name] = now
                log.info("the %s ResourceSlice watch carried nothing for %.0fs; replacing it",
                         name, self._watch_idle_timeout)
                at = now + self._watch_idle_timeout
            due = min(due, at)
        return due, idle

    def _resync_loop(self) -> None:
        failures = 0
        while True:
            idle: list[Any] = []
            with self._cond:
                while not self._stopping.is_set():
                    now = time.monotonic()
                    idle_due, idle = self._idle_watches(now)
                    due = min(self._verify_at, self._pending_at if self._pending_at is not None
                              else float("inf"))
                    if idle or now >= due:
                        break
                    self._cond.wait(min(due, idle_due) - now)
                if self._stopping.is_set():
                    return
                desired = self._desired
                run = now >= due
                if run:
                    self._pending_at = None
            for watch in idle:
                watch.close()
            if not run:
                continue
            if desired is None:
                with self._cond:
                    self._verify_at = now + _jittered(self._resync_period, self._rng)
                continue
            with self._cond:
                relist = not all(self._current.get(sc.name) for sc in self._scopes(desired))
            try:
                self._sync(relist=relist)
                failures = 0
                with self._cond:
                    self._verify_at = (time.monotonic()
                                       + _jittered(self._resync_period, self._rng))
            except Exception as exc:
                if self._stopping.is_set():
                    return
                failures += 1
                delay = self._recovery_delay(failures, self._rng)
                log.warning("publishing ResourceSlices failed (%s); retrying in %.1fs", exc,
                            delay)
                self._schedule(delay)

    def _is_own(self, event_type: str, obj: dict[str, Any], rv: str) -> bool:
        """True for the event of one of our own writes. A deletion is known by name before
        it is sent; a create or update only by the resourceVersion of its answer, which may
        arrive after the event: then the event waits (at most :data:`OWN_WRITE_WAIT`) until
        its resourceVersion is known or no write of ours is in flight."""
        with self._cond:
            if event_type == "DELETED":
                return (obj.get("metadata") or {}).get("name") in self._own_deleted
            self._cond.wait_for(lambda: rv in self._own_rvs or not self._writes_in_flight
                                or self._stopping.is_set(), timeout=OWN_WRITE_WAIT)
            return rv in self._own_rvs

    def _watchable(self, scope: _Scope) -> bool:
        """The scope has a resourceVersion to watch from and is wanted. Caller holds
        ``_cond``."""
        if not self._watch_rv.get(scope.name):
            return False
        return (scope is self._local or self._desired is None
                or scope in self._scopes(self._desired))

    def _watch_loop(self, scope: _Scope) -> None:
        """Watch ``scope`` from the resourceVersion of its LIST, resuming from the last
        event or bookmark after each ``timeoutSeconds``; a broken watch waits a random
        delay before it reconnects, an expired one (410) has the resync loop list again."""
        failures = 0
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._stopping.is_set() or self._watchable(scope),
                                    timeout=self._resync_period)
                if self._stopping.is_set():
                    return
                if not self._watchable(scope):
                    continue
                rv = self._watch_rv[scope.name]
            rng = self._watch_rngs[scope.name]
            timeout = int(self._watch_timeout * (1 + rng()))
            after_failure = failures > 0
            try:
                watch = self.api.watch_slices(self.driver, scope.node, rv, timeout,
                                              label_selector=scope.label_selector)
            except Exception as exc:
                if self._stopping.is_set():
                    return
                failures = self._watch_broken(scope, exc, failures, after_failure)
                continue
            opened = time.monotonic()
            with self._cond:
                if self._stopping.is_set():
                    watch.close()
                    return
                self._watches[scope.name] = watch
                self._last_seen[scope.name] = opened
                self._stats.watches += 1
                self._cond.notify_all()
            if after_failure:
                # back after a broken watch: once the events since rv are in, the view is
                # current again; verify it (no request unless something differs)
                self._schedule(self._watch_delay)
            failures = 0
            events = 0
            try:
                for event in watch:
                    events += 1
                    self._on_event(scope, event)
                if events == 0 and not self._stopping.is_set() \
                        and time.monotonic() - opened < min(1.0, self._watch_idle_timeout / 2):
                    raise ConnectionError("the watch ended at once")
            except Exception as exc:
                if self._stopping.is_set():
                    return
                failures = self._watch_broken(scope, exc, failures, after_failure)
            finally:
                watch.close()
                with self._cond:
                    if self._watches.get(scope.name) is watch:
                        del self._watches[scope.name]

    def _on_event(self, scope: _Scope, event: WatchEvent) -> None:
        with self._cond:
            self._last_seen[scope.name] = time.monotonic()
            if event.resource_version:
                self._watch_rv[scope.name] = newer_rv(self._watch_rv.get(scope.name, ""),
                                                      event.resource_version)
        if event.type == "BOOKMARK":
            return
        own = self._is_own(event.type, event.object, event.resource_version)
        with self._cond:
            if event.type == "DELETED":
                self._view.deleted(event.object)
            elif scope.holds(event.object):
                self._view.stored(event.object)
        if own:
            return
        delay = self._watch_delay
        if event.type == "DELETED":
            # deleted by someone else: the garbage collector does that when the Node our
            # slices name as owner is gone, so read its UID again and back off re-creating
            self._owner.invalidate(
                f"ResourceSlice {event.object.get('metadata', {}).get('name')} deleted by "
                "someone else")
            delay = self._recreate.delay()
        delay += self._watch_rngs[scope.name]() * self._recovery_spread
        log.info("ResourceSlice %s %s by someone else; resync in %.1fs",
                 event.object.get("metadata", {}).get("name"), event.type.lower(), delay)
        self._schedule(delay)

    def _watch_broken(self, scope: _Scope, exc: BaseException, failures: int,
                      after_failure: bool) -> int:
        """Handle a failed or broken watch; returns the new count of failures in a row."""
        if classify(exc) is ErrorKind.EXPIRED:
            # the resourceVersion is gone: the resync loop lists again, right away when this
            # watch already followed a random reconnect delay, else after one
            delay = (self._watch_delay if after_failure
                     else self._watch_rngs[scope.name]() * self._recovery_spread)
            with self._cond:
                self._current[scope.name] = False
                self._watch_rv[scope.name] = ""
            log.info("the %s ResourceSlice watch expired (%s); listing again in %.1fs",
                     scope.name, describe(exc), delay)
            self._schedule(delay)
            return 0
        failures += 1
        rng = self._watch_rngs[scope.name]
        after = retry_after_seconds(exc)
        if after is not None:
            # the server answered and paces us (429 while its watch cache initialises,
            # APF): its delay, spread over [after, 2·after)
            delay = min(after, self._backoff.max_retry_after) * (1 + rng())
        elif isinstance(exc, ApiException) and exc.status:
            # the server answered with an error: exponential backoff, full jitter
            delay = max(self._min_retry_delay, self._backoff.delay(failures, rng) * rng())
        else:
            # no answer (server restarting, connection lost): spread the reconnects
            delay = self._recovery_delay(failures, rng)
        log.warning("watching ResourceSlices failed (%s); again in %.1fs", describe(exc), delay)
        self._stopping.wait(delay)
        return failures


def cleanup_slices(api: ResourceAPI, driver: str, node: str, *, backoff: Backoff | None = None,
                   sleep: Callable[[float], Any] = time.sleep) -> int:
    """Delete every ResourceSlice of ``driver`` for ``node`` (node-local ones by field
    selectors, others by :data:`PUBLISHER_NODE_LABEL`); returns how many were deleted.
    For ``drakit cleanup`` (uninstall)."""
    bo = backoff or Backoff()

    def call(fn: Callable[[], T]) -> T:
        return call_with_retries(fn, bo, sleep=sleep, what="ResourceSlice cleanup")

    local = call(lambda: api.list_slices(driver, node))
    remote = call(lambda: api.list_slices(
        driver, label_selector=f"{PUBLISHER_NODE_LABEL}={node_label_value(node)}"))
    names = {o["metadata"]["name"] for o in local.items}
    names |= {o["metadata"]["name"] for o in remote.items if not o["spec"].get("nodeName")}
    deleted = 0
    for name in sorted(names):
        try:
            call(lambda n=name: api.delete_slice(n))  # type: ignore[misc]
            deleted += 1
        except Exception as exc:
            if classify(exc) is not ErrorKind.NOT_FOUND:
                raise
    return deleted
