"""A watch on this node's own Node object, so its ResourceSlices follow a re-registered Node.

The slices name their Node as owner by UID (:mod:`drakit.plugin.slices.owner`). When the
Node is deleted and registered again by the kubelet it has a new ``metadata.uid``; the
garbage collector deletes every slice naming the old one. Without this watch the publisher
learns the new UID only when one of its slices is deleted by someone else and its
re-creation backoff has passed (17.7 s measured on a real node). The watch
(``GET /api/v1/nodes?fieldSelector=metadata.name=<node>&watch=true``, one object) tells it at
once: an ``ADDED`` or ``MODIFIED`` event with a UID other than the owner's gives the owner
the new UID and asks the publisher for a resync, which rewrites the slices' owner reference
(one update per slice, no LIST). A ``DELETED`` event has the owner read again at the next
publish (404: the slices are written without an owner reference, never with a gone one).

Cost: one watch request per ``watch_timeout`` (the server ends a watch after its
``timeoutSeconds``; it is resumed from the last resourceVersion, so no event repeats); no
request per resync. A broken watch reconnects after the same delays as the slice watches
(:meth:`drakit.plugin.slices.watch.Timing.broken_watch_delay`); an expired one (410) starts
again without a resourceVersion (the Node's current state first, as an ``ADDED`` event).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable

from drakit.plugin.api.resourceapi import ResourceAPI, SliceWatch
from drakit.plugin.api.retry import ErrorKind, classify
from drakit.plugin.background import Supervisor
from drakit.plugin.slices.owner import NodeOwner
from drakit.plugin.slices.watch import Timing

log = logging.getLogger(__name__)


class NodeWatch:
    """Watches Node ``owner.node`` for ``owner``; ``changed()`` is called (from the watch's
    thread) when the published slices must follow (:meth:`NodeOwner.adopt`). ``stopping``:
    set when the publisher stops; ``seed`` seeds its reconnect delays."""

    def __init__(self, api: ResourceAPI, owner: NodeOwner, changed: Callable[[], None],
                 timing: Timing, stopping: threading.Event, *, seed: str,
                 supervisor: Supervisor | None = None) -> None:
        self.api, self.owner, self._changed, self._t = api, owner, changed, timing
        self._stopping = stopping
        # a generator of its own (``seed``: e.g. driver and node), so that it takes nothing
        # from the publisher's schedule
        self._rng = random.Random(f"{seed}/node-watch").random
        self._supervisor = supervisor or Supervisor()
        self._lock = threading.Lock()
        self._open: SliceWatch | None = None
        self.watches = 0
        """Watch requests that opened a stream."""
        self.uid_changes = 0
        """Times the watch had the slices follow the Node (a new UID, or the Node back)."""

    def thread(self) -> threading.Thread:
        """The thread to start."""
        return threading.Thread(target=self._supervisor.thread("node-watch", self._loop),
                                name="drakit-node-watch", daemon=True)

    def stop(self) -> None:
        """Close the open watch (the thread ends once ``stopping`` is set)."""
        with self._lock:
            watch, self._open = self._open, None
        if watch is not None:
            watch.close()

    def _loop(self) -> None:
        rv: str | None = None
        failures = 0
        while not self._stopping.is_set():
            timeout = int(self._t.watch_timeout * (1 + self._rng()))
            try:
                watch = self.api.watch_node(self.owner.node, rv, timeout)
                with self._lock:
                    self._open = watch
                    self.watches += 1
                if self._stopping.is_set():
                    watch.close()
                    return
                opened, events = time.monotonic(), 0
                for event in watch:
                    events += 1
                    failures = 0
                    if event.resource_version:
                        rv = event.resource_version
                    self._on_event(event.type, event.object)
                if time.monotonic() - opened >= 1.0:
                    failures = 0
                elif events == 0 and not self._stopping.is_set():
                    # a server that closes every watch at once must not be asked in a loop
                    raise ConnectionError("the Node watch ended at once")
            except Exception as exc:
                if self._stopping.is_set():
                    return
                if classify(exc) is ErrorKind.EXPIRED:
                    rv = None  # start again from the Node's current state
                    continue
                failures += 1
                delay = self._t.broken_watch_delay(exc, failures, self._rng)
                self._supervisor.report("node-watch", exc, retry_in=delay, trace=False)
                self._stopping.wait(delay)
            finally:
                with self._lock:
                    self._open = None

    def _on_event(self, kind: str, obj: dict[str, object]) -> None:
        meta = obj.get("metadata")
        uid = meta.get("uid") if isinstance(meta, dict) else None
        if kind in ("ADDED", "MODIFIED") and isinstance(uid, str) and uid:
            if self.owner.adopt(uid):
                self.uid_changes += 1
                self._changed()
        elif kind == "DELETED":
            self.owner.invalidate(f"Node {self.owner.node} deleted")
