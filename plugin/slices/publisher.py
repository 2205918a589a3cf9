"""Publish a node's pools as ResourceSlices and keep them published.

:class:`SlicePublisher` is declarative: :meth:`~SlicePublisher.publish` hands over the
complete desired state (every pool of this driver on this node); the publisher validates it
(:mod:`plugin.slices.validate`), splits each pool (:mod:`plugin.slices.split`), lists what is
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
  removes the slices with the Node. The Node's UID is kept by :class:`~plugin.slices.owner.
  NodeOwner` and read again when one of our slices was deleted by someone else (seen by the
  watch, or missing from a listing) and at every sync while the Node answers 404 (slices are
  then written without an owner reference, never with a gone one). Re-creating slices that
  someone else deleted waits :class:`~plugin.slices.owner.RecreateBackoff` (``watch_delay``,
  doubling per round up to ``resync_period``).
* Errors: retryable API errors (429 honouring Retry-After, 5xx, connection errors) are
  retried per call with exponential backoff and jitter; a 409 (or an object gone between
  list and update) re-lists and plans again; both are bounded per call of :meth:`sync`.
  Whatever still fails is raised as :class:`PublishError` and retried by the background
  loop after a backoff that never goes below ``min_retry_delay`` (nothing hot-loops).
* Server-side rewrites: if the server answers a write with different content (fields
  dropped because a feature gate is off, defaults filled in), the answer is remembered as
  "what the desired content looks like on this server", so the next resync does not write
  again; a warning names the fields.
* Background (:meth:`start`/:meth:`stop`): a watch on this driver's slices on this node
  schedules a resync ``watch_delay`` seconds after someone else adds, edits or deletes one
  (the kubelet deletes a node's slices when it restarts), and a periodic resync
  (``resync_period``) catches everything else. :meth:`trigger` asks for a resync now.
  The watch may deliver the event of one of our own writes before the write's answer
  (with its resourceVersion) is back; such an event waits until the publisher's writes in
  flight have ended before it is judged, so our own writes never schedule a resync.
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

from discovery.model import Pool
from plugin.resourceapi import (
    Backoff,
    ErrorKind,
    ResourceAPI,
    call_with_retries,
    classify,
    describe,
)
from plugin.slices.compare import carry_time_added, content_key, differing_fields
from plugin.slices.convert import api_version
from plugin.slices.formats import is_label_value
from plugin.slices.owner import NodeOwner, RecreateBackoff
from plugin.slices.rules import DRAKIT_DEFAULT, RuleOptions
from plugin.slices.split import split_pool
from plugin.slices.validate import SliceValidationError, ValidationIssue, validate_pools

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


class SlicePublisher:
    """Publishes ``driver_name``'s pools for ``node_name`` (see the module docstring).

    Parameters: ``resource_api`` (a :class:`~plugin.resourceapi.ResourceAPI`); ``node_uid``
    (looked up with GET node when None); ``strict`` (refuse a publish with any validation
    issue instead of leaving the broken parts out); ``resync_period`` (seconds between
    background resyncs); ``watch_delay`` (seconds from a foreign change to the resync);
    ``watch_timeout`` (seconds per watch request); ``backoff`` (per API call);
    ``max_parallel_writes`` (slice writes in flight at once within one step of a pool
    sync; 1 writes one after the other); ``max_sync_attempts`` (list-and-plan rounds per
    sync after 409s); ``min_retry_delay``
    (floor of the background retry delay after a failed sync); ``rule_options``;
    ``on_validation_issue`` (called once for each issue that is new compared with the
    previous publish), ``on_write`` (called with ``"create"``/``"update"``/``"delete"`` and
    the pool name), ``on_error`` (called with the exception of a failed sync); ``sleep`` and
    ``rng`` (for tests; ``sleep`` defaults to an interruptible wait that :meth:`stop` cuts
    short).
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
        backoff: Backoff | None = None,
        max_parallel_writes: int = DEFAULT_PARALLEL_WRITES,
        max_sync_attempts: int = 3,
        min_retry_delay: float = 1.0,
        rule_options: RuleOptions = DRAKIT_DEFAULT,
        on_validation_issue: Callable[[ValidationIssue], None] | None = None,
        on_write: Callable[[str, str], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
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
        self._watch_timeout = watch_timeout
        self._backoff = backoff or Backoff()
        self._max_parallel_writes = max(1, max_parallel_writes)
        self._max_sync_attempts = max(1, max_sync_attempts)
        self._min_retry_delay = min_retry_delay
        self._rules = rule_options
        self._on_issue = on_validation_issue
        self._on_write = on_write
        self._on_error = on_error
        self._rng = rng or random.random
        self._stopping = threading.Event()
        self._sleep = sleep or self._interruptible_sleep
        self._label_value = node_label_value(node_name)
        self._generate_name = slice_name_prefix(node_name, driver_name)

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
        self._watch_rv = ""
        self._watch: Any = None
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
            return self._watch is not None

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
        validation issue raises :class:`~plugin.slices.validate.SliceValidationError` and
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
            if self._on_issue is not None:
                self._on_issue(issue)
        if not wait:
            self.trigger()
            return None
        return self.sync()

    def sync(self) -> SyncReport:
        """Compare the desired state with the server and write the difference now."""
        with self._sync_lock:
            with self._cond:
                desired = self._desired
            if desired is None:
                return SyncReport()
            counts = _Counts()
            try:
                for attempt in range(1, self._max_sync_attempts + 1):
                    try:
                        self._sync_once(desired, counts)
                        break
                    except _Replan as exc:
                        if attempt == self._max_sync_attempts:
                            raise PublishError([f"still conflicting after {attempt} "
                                                f"attempts: {exc}"]) from exc
                        log.info("ResourceSlices changed meanwhile (%s); listing again", exc)
            except Exception as exc:
                with self._cond:
                    self._stats.publish_errors += 1
                    self._stats.last_error = str(exc)
                if self._on_error is not None:
                    self._on_error(exc)
                if isinstance(exc, PublishError):
                    raise
                raise PublishError([describe(exc)]) from exc
            with self._cond:
                self._stats.last_publish_time = time.time()
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
            self._threads = [
                threading.Thread(target=self._resync_loop, name="drakit-slices-resync",
                                 daemon=True),
                threading.Thread(target=self._watch_loop, name="drakit-slices-watch",
                                 daemon=True),
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
            watch = self._watch
            self._cond.notify_all()
        if watch is not None:
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
        return call_with_retries(fn, self._backoff, sleep=self._sleep, rng=self._rng, what=what)

    def _interruptible_sleep(self, seconds: float) -> None:
        if self._stopping.wait(seconds):
            raise PublishError(["stopped while waiting to retry"])

    def _fetch_node_uid(self) -> str:
        return self._call(lambda: self.api.get_node_uid(self.node), f"GET node {self.node}")

    def _sync_once(self, desired: _Desired, counts: _Counts) -> None:
        lookups = self._owner.lookups
        owner = self._owner.reference()
        read_now = self._owner.lookups != lookups
        local = self._call(lambda: self.api.list_slices(self.driver, self.node),
                           "list ResourceSlices")
        remote = self._call(lambda: self.api.list_slices(
            self.driver, label_selector=f"{PUBLISHER_NODE_LABEL}={self._label_value}"),
            "list ResourceSlices")
        with self._cond:
            self._watch_rv = local.resource_version
            self._cond.notify_all()
        self._server_keys_prev, self._server_keys = self._server_keys, {}
        existing: dict[str, list[dict[str, Any]]] = {}
        seen: set[str] = set()
        for obj in local.items + [o for o in remote.items if not o["spec"].get("nodeName")]:
            name = obj["metadata"]["name"]
            if name in seen:
                continue
            seen.add(name)
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
        specs = desired.specs.get(pool)
        if specs is None:
            if pool in desired.protected:
                return
            self._run_writes([partial(self._delete, obj, pool, counts) for obj in existing])
            with self._cond:
                self._generations.pop(pool, None)
            return
        n = len(specs)
        by_key: dict[str, list[dict[str, Any]]] = {}
        for obj in sorted(existing, key=lambda o: o["metadata"]["name"]):
            by_key.setdefault(self._server_key(obj), []).append(obj)
        pairs: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
        if existing:
            for spec, key in zip(specs, desired.keys(pool), strict=True):
                candidates = by_key.get(key) or (by_key.get(self._echo[key])
                                                 if key in self._echo else None) or []
                pairs.append((spec, candidates.pop(0) if candidates else None))
        else:
            pairs = [(spec, None) for spec in specs]
        unmatched = sorted((o for objs in by_key.values() for o in objs),
                           key=lambda o: o["metadata"]["name"])
        gens = {int(o["spec"]["pool"].get("generation", 0)) for o in existing}
        in_sync = (all(m is not None for _, m in pairs) and not unmatched and len(gens) == 1
                   and all(o["spec"]["pool"].get("resourceSliceCount") == n for o in existing))
        if in_sync:
            with self._cond:
                self._generations[pool] = next(iter(gens))
            self._run_writes([partial(self._update, matched, matched["spec"], owner, pool, counts,
                                      content=False)
                              for _, matched in pairs
                              if matched is not None and not self._metadata_ok(matched, owner)])
            return
        with self._cond:
            remembered = self._generations.get(pool, 0)
        generation = max([*gens, remembered]) + 1
        spare = unmatched
        updates: list[tuple[dict[str, Any], dict[str, Any]]] = []
        creates: list[dict[str, Any]] = []
        for spec, current in pairs:
            full = {**spec, "pool": {**spec["pool"], "generation": generation}}
            if current is None:
                # spec.nodeName is immutable: reuse only a slice with the same one
                reusable = [o for o in spare if o["spec"].get("nodeName") == full.get("nodeName")]
                if reusable:
                    current = reusable[0]
                    spare.remove(current)
            if current is None:
                creates.append(full)
            else:
                updates.append((current, full))
        self._run_writes([partial(self._delete, surplus, pool, counts) for surplus in spare])
        self._run_writes([partial(self._update, current_obj, full, owner, pool, counts)
                          for current_obj, full in updates])
        self._run_writes([partial(self._create, full, owner, pool, counts) for full in creates])
        with self._cond:
            self._generations[pool] = generation
        log.info("published pool %s of %s on %s: generation %d, %d slice(s)", pool,
                 self.driver, self.node, generation, n)

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
        if self._on_write is not None:
            self._on_write(verb, pool)

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
        self._count("delete", pool, counts)

    # ------------------------------------------------------------------ background

    def _schedule(self, delay: float) -> None:
        with self._cond:
            at = time.monotonic() + delay
            if self._pending_at is None or at < self._pending_at:
                self._pending_at = at
            self._cond.notify_all()

    def _resync_loop(self) -> None:
        next_resync = time.monotonic() + self._resync_period
        failures = 0
        while True:
            with self._cond:
                while not self._stopping.is_set():
                    now = time.monotonic()
                    due = min(next_resync, self._pending_at if self._pending_at is not None
                              else next_resync)
                    if now >= due:
                        break
                    self._cond.wait(due - now)
                if self._stopping.is_set():
                    return
                self._pending_at = None
                has_state = self._desired is not None
            if not has_state:
                next_resync = time.monotonic() + self._resync_period
                continue
            try:
                self.sync()
                failures = 0
                next_resync = time.monotonic() + self._resync_period
            except Exception as exc:
                if self._stopping.is_set():
                    return
                failures += 1
                delay = min(self._resync_period,
                            max(self._min_retry_delay, self._backoff.delay(failures, self._rng)))
                log.warning("publishing ResourceSlices failed (%s); retrying in %.1fs", exc,
                            delay)
                next_resync = time.monotonic() + delay

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

    def _watch_loop(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            with self._cond:
                self._cond.wait_for(lambda: self._stopping.is_set() or bool(self._watch_rv),
                                    timeout=self._resync_period)
                if self._stopping.is_set():
                    return
                rv = self._watch_rv
            if not rv:
                continue
            try:
                watch = self.api.watch_slices(self.driver, self.node, rv, self._watch_timeout)
            except Exception as exc:
                failures += 1
                self._watch_failed(exc, failures)
                continue
            with self._cond:
                if self._stopping.is_set():
                    watch.close()
                    return
                self._watch = watch
            try:
                for event in watch:
                    failures = 0
                    if event.resource_version:
                        with self._cond:
                            self._watch_rv = event.resource_version
                    if event.type == "BOOKMARK" or self._is_own(event.type, event.object,
                                                                event.resource_version):
                        continue
                    name = event.object.get("metadata", {}).get("name")
                    delay = self._watch_delay
                    if event.type == "DELETED":
                        self._owner.invalidate(f"ResourceSlice {name} deleted by someone else")
                        delay = self._recreate.delay()
                    log.info("ResourceSlice %s %s by someone else; resync in %.1fs", name,
                             event.type.lower(), delay)
                    self._schedule(delay)
            except Exception as exc:
                if self._stopping.is_set():
                    return
                if classify(exc) is ErrorKind.EXPIRED:
                    with self._cond:
                        self._watch_rv = ""
                    self.trigger()
                else:
                    failures += 1
                    self._watch_failed(exc, failures)
            finally:
                watch.close()
                with self._cond:
                    self._watch = None

    def _watch_failed(self, exc: BaseException, failures: int) -> None:
        delay = min(self._resync_period,
                    max(self._min_retry_delay, self._backoff.delay(failures, self._rng)))
        log.warning("watching ResourceSlices failed (%s); again in %.1fs", describe(exc), delay)
        self._stopping.wait(delay)


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
