"""The owner of a node's ResourceSlices: the Node object, by name *and* UID.

Every slice drakit writes carries an owner reference to its Node (``controller: true``) so
the garbage collector removes the slices with the Node. The garbage collector matches an
owner by UID: when the Node is deleted — or deleted and registered again by the kubelet,
which gives it a new ``metadata.uid`` — every slice that names the old UID is deleted within
milliseconds. A publisher that keeps the UID it read once re-creates the slices with the
same gone owner, and the collector deletes them again: the pool churns without end and the
scheduler sees the devices only for milliseconds at a time (observed with a real
kube-controller-manager: 425 pool generations in 7.5 minutes).

:class:`NodeOwner` keeps the UID but reads the Node again whenever there is a reason to
doubt it: after :meth:`NodeOwner.invalidate` (the publisher calls it when one of its own
slices was deleted by someone else) and at every use while the Node answered 404 (the slices
are then written without an owner reference, never with a gone one).

:class:`RecreateBackoff` spaces the re-creation of slices someone else deleted: the first
round waits the publisher's ``watch_delay``, each further round within the quiet period
twice as long, up to a cap (the resync period), so a controller that keeps deleting them
(whatever the reason) is not answered with a write every second.

The metadata helpers (:func:`slice_metadata`, :func:`metadata_ok`) put the owner reference
and the :data:`PUBLISHER_NODE_LABEL` on a slice and check them.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from drakit.plugin.api.retry import ErrorKind, classify
from drakit.plugin.slices.formats import is_label_value

log = logging.getLogger(__name__)

PUBLISHER_NODE_LABEL: Final = "resource.drakit.io/node"
"""Label on every slice drakit writes: the node whose publisher owns it (the node name, or
a hash of it when the name is not a valid label value)."""


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


def metadata_ok(obj: dict[str, Any], label_value: str, owner: dict[str, Any] | None) -> bool:
    """``obj`` carries the node label ``label_value`` and (unless ``owner`` is None) the
    owner reference ``owner`` as its controller."""
    meta = obj.get("metadata") or {}
    if (meta.get("labels") or {}).get(PUBLISHER_NODE_LABEL) != label_value:
        return False
    if owner is None:
        return True
    return any(r.get("kind") == "Node" and r.get("name") == owner["name"]
               and r.get("uid") == owner["uid"] and r.get("controller") is True
               for r in meta.get("ownerReferences") or [])


def slice_metadata(meta: dict[str, Any], label_value: str,
                   owner: dict[str, Any] | None) -> dict[str, Any]:
    """A copy of ``meta`` with the node label and (unless None) ``owner`` as the only Node
    owner reference; ``managedFields`` left out (the server keeps its own)."""
    meta = copy.deepcopy(meta)
    meta["labels"] = {**(meta.get("labels") or {}), PUBLISHER_NODE_LABEL: label_value}
    if owner is not None:
        refs = [r for r in meta.get("ownerReferences") or [] if r.get("kind") != "Node"]
        meta["ownerReferences"] = [*refs, owner]
    meta.pop("managedFields", None)
    return meta


class NodeOwner:
    """The owner reference for the slices of Node ``node_name``.

    ``fetch_uid`` returns the Node's ``metadata.uid`` (``GET /api/v1/nodes/<name>``, with the
    caller's retries); an error it raises that :func:`~drakit.plugin.api.resourceapi.classify` calls
    NOT_FOUND means the Node does not exist, every other error is raised to the caller of
    :meth:`reference`. ``uid``: a UID known in advance (used until invalidated).
    Thread-safe.
    """

    def __init__(self, node_name: str, fetch_uid: Callable[[], str], *,
                 uid: str | None = None) -> None:
        self.node = node_name
        self._fetch_uid = fetch_uid
        self._lock = threading.Lock()
        self._uid = uid
        self._stale = False
        self._absent_said = False
        self.lookups = 0
        """GET node calls made (for tests and metrics)."""

    @property
    def uid(self) -> str | None:
        """The UID last read (None: not read yet, or the Node was absent)."""
        with self._lock:
            return self._uid

    def invalidate(self, reason: str) -> None:
        """Read the Node again at the next :meth:`reference` (``reason`` is logged once)."""
        with self._lock:
            if self._uid is None or self._stale:
                return
            self._stale = True
        log.info("owner Node %s to be read again: %s", self.node, reason)

    def adopt(self, uid: str) -> bool:
        """The Node as a watch saw it has ``uid``; the owner takes it without a request.
        True when the published slices must change: the Node has another UID than the one
        they name (registered again), or it was absent when they were written (no owner
        reference). False for what they already name, and for the first UID before any
        publish read one (the first publish then needs no GET)."""
        with self._lock:
            old, absent = self._uid, self._absent_said
            if old == uid and not self._stale:
                return False
            self._uid, self._stale = uid, False
        if old is None and absent:
            log.info("Node %s exists now (uid %s): ResourceSlices get it as their owner",
                     self.node, uid)
            return True
        if old is not None and old != uid:
            log.warning("node %s has a new UID %s (was %s); ResourceSlices follow the new "
                        "owner", self.node, uid, old)
            return True
        return False

    def reference(self) -> dict[str, Any] | None:
        """The ``metadata.ownerReferences`` entry (``apiVersion v1, kind Node, name, uid,
        controller: true``), or None while the Node does not exist. Reads the Node when the
        UID is unknown, was invalidated, or the Node was absent last time."""
        with self._lock:
            uid, stale = self._uid, self._stale
        if uid is None or stale:
            try:
                self.lookups += 1
                fresh: str | None = self._fetch_uid()
            except Exception as exc:
                if classify(exc) is not ErrorKind.NOT_FOUND:
                    raise
                fresh = None
            with self._lock:
                self._uid, self._stale = fresh, False
            if fresh is None:
                # Normal in a demo or test without a Node object, and for a moment while the
                # kubelet registers a new node: said once, not at every publish.
                with self._lock:
                    first, self._absent_said = not self._absent_said, True
                log.log(logging.INFO if first else logging.DEBUG,
                        "no Node object %s (yet): ResourceSlices are published without an "
                        "owner reference until it exists", self.node)
            elif uid is None and self._absent_said:
                log.info("Node %s exists now (uid %s): ResourceSlices get it as their owner",
                         self.node, fresh)
            elif uid is not None and fresh != uid:
                log.warning("node %s has a new UID %s (was %s); ResourceSlices follow the new "
                            "owner", self.node, fresh, uid)
            uid = fresh
        if uid is None:
            return None
        return {"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": uid,
                "controller": True}


class RecreateBackoff:
    """The delay before slices deleted by someone else are written again.

    :meth:`delay` is called for each foreign deletion; the deletions before the resync that
    the first one scheduled belong to one round (one garbage-collector sweep deletes every
    slice of the pool). Round ``n`` (1-based) waits ``min(cap, base · 2^(n-1))`` seconds;
    after ``quiet`` seconds without a foreign deletion the count starts again at 1.
    ``clock``: monotonic seconds (for tests).
    """

    def __init__(self, base: float, cap: float, quiet: float, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._base = max(0.0, base)
        self._cap = max(self._base, cap)
        self._quiet = quiet
        self._clock = clock
        self._lock = threading.Lock()
        self._rounds = 0
        self._last: float | None = None
        self._round_until = float("-inf")

    @property
    def rounds(self) -> int:
        """Rounds counted since the last quiet period."""
        with self._lock:
            return self._rounds

    def delay(self) -> float:
        """Seconds from now until the resync that re-creates what was deleted."""
        now = self._clock()
        with self._lock:
            if self._last is not None and now - self._last > self._quiet:
                self._rounds = 0
            self._last = now
            if now < self._round_until:
                return self._round_until - now
            self._rounds += 1
            wait = min(self._cap, self._base * 2 ** (self._rounds - 1))
            self._round_until = now + wait
            return wait
