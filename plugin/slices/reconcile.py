"""One sync round: bring this publisher's slices from what is listed to what is desired.

:class:`Reconciler` plans with the pure :func:`~drakit.plugin.slices.plan.plan_sync` and has
:class:`~drakit.plugin.slices.writes.SliceWriter` execute each pool's plan; it remembers
each pool's generation (so a pool whose slices someone deleted comes back one generation
above the last one written, never lower) and the slices it published, so that one missing
from the next listing (deleted by someone else: the garbage collector does that when the
Node named as owner is gone) makes the owner's UID be read again
(:class:`~drakit.plugin.slices.owner.NodeOwner`). A pool that fails does not stop the
others; their failures are raised together as :class:`PublishError`.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Any

from drakit.plugin.api.retry import describe
from drakit.plugin.slices.compare import ServerKeys
from drakit.plugin.slices.owner import NodeOwner, metadata_ok
from drakit.plugin.slices.plan import DesiredState, PoolPlan, plan_sync
from drakit.plugin.slices.view import SliceView
from drakit.plugin.slices.writes import OwnWrites, Replan, SliceWriter

log = logging.getLogger(__name__)
Obj = dict[str, Any]


class PublishError(RuntimeError):
    """Publishing did not complete; ``errors`` names each pool / call that failed. The
    desired state is kept and the background loop (if started) retries later."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        super().__init__("ResourceSlice publishing failed: " + "; ".join(errors))


class Reconciler:
    """Syncs one publisher's pools; ``label_value`` is its node label, ``what`` names it in
    logs (``<driver> on <node>``). One round at a time (the publisher's sync lock)."""

    def __init__(self, writer: SliceWriter, owner: NodeOwner, own: OwnWrites, view: SliceView,
                 label_value: str, what: str) -> None:
        self._writer, self._owner, self._own, self._view = writer, owner, own, view
        self._label_value = label_value
        self._what = what
        self._keys = ServerKeys()
        self._lock = threading.Lock()
        self._generations: dict[str, int] = {}
        self._known: set[str] = set()      # our slices on the server after the last round

    @property
    def generations(self) -> dict[str, int]:
        """Pool → the generation of its slices (a copy)."""
        with self._lock:
            return dict(self._generations)

    def __call__(self, desired: DesiredState, listed: list[Obj], counts: Counter[str]) -> None:
        """Plan ``desired`` against ``listed`` (this publisher's slices) and write the
        difference; each write is counted in ``counts`` by verb. Raises
        :class:`~drakit.plugin.slices.writes.Replan` (list again), :class:`PublishError`,
        or the error of reading the owner Node."""
        lookups = self._owner.lookups
        owner = self._owner.reference()
        read_now = self._owner.lookups != lookups
        seen = {obj["metadata"]["name"] for obj in listed}
        with self._lock:
            gone = self._known - seen - self._own.deleted_names()
            self._known = seen
            generations = dict(self._generations)
        if gone and not read_now:
            self._owner.invalidate(f"ResourceSlice {min(gone)} deleted by someone else")
            owner = self._owner.reference()
        if self._writer.echo:
            self._writer.keep_echo({k for pool in desired.specs for k in desired.keys(pool)})
        self._keys.next_round()
        plans = plan_sync(desired, listed, key_of=self._keys, echo=self._writer.echo,
                          generations=generations,
                          metadata_ok=lambda o: metadata_ok(o, self._label_value, owner))
        failures: list[str] = []
        try:
            for plan in plans:
                try:
                    self._execute(plan, owner, counts)
                except (Replan, PublishError):
                    raise
                except Exception as exc:
                    failures.append(f"pool {plan.pool}: {describe(exc)}")
        finally:
            names = {obj["metadata"]["name"] for obj in self._view.slices()}
            with self._lock:
                self._known |= names
        if failures:
            raise PublishError(failures)

    def _execute(self, plan: PoolPlan, owner: Obj | None, counts: Counter[str]) -> None:
        """Write one pool's plan and note the pool's generation."""
        if plan.in_sync and plan.generation is not None:
            with self._lock:
                self._generations[plan.pool] = plan.generation
        self._writer.run(plan, owner, counts)
        if plan.in_sync:
            return
        with self._lock:
            if plan.generation is None:
                self._generations.pop(plan.pool, None)
            else:
                self._generations[plan.pool] = plan.generation
        if plan.generation is not None:
            log.info("published pool %s of %s: generation %d, %d slice(s)", plan.pool,
                     self._what, plan.generation, len(plan.updates) + len(plan.creates))
