"""Plan the writes that bring a node's ResourceSlices from what exists to what is desired.

Everything here is pure (no API call, no lock): :func:`desired_state` turns the pools into
the slice specs to publish (:mod:`~drakit.plugin.slices.validate` +
:mod:`~drakit.plugin.slices.split`); :func:`plan_sync` compares them with the listed slices
(from a LIST or the publisher's local view) and returns one :class:`PoolPlan` per pool, made
by :func:`plan_pool`; :class:`~drakit.plugin.slices.writes.SliceWriter` executes them.
The rules are those of the Go ``resourceslice`` controller (k8s.io/dynamic-resource-allocation)
and the ResourceSlice API (``spec.pool.generation``: "whenever a driver changes something
about one or more of the resources in a pool, it must change the generation in all
ResourceSlices which are part of that pool"):

* A pool is in sync when every desired spec has an existing slice with the same content
  (:func:`~drakit.plugin.slices.compare.content_key`, which leaves out the generation and count, or
  the content the server stored for it last time: ``echo``), no existing slice is left
  over, all carry one generation and the pool's ``resourceSliceCount``. Then only slices
  whose metadata (node label, owner reference) is off are re-sent, with their own spec.
* Otherwise every slice of the pool gets ``generation`` one above the highest seen (on the
  server, or ``remembered`` from earlier writes) and the pool's count: matched slices and,
  for unmatched specs, left-over slices with the same ``spec.nodeName`` (immutable) are
  updated; the rest of the left-over slices are deleted, the rest of the specs created.
* A pool no longer desired loses every slice, unless it is ``protected`` (skipped because
  its own fields are invalid: its slices stay as they are).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from drakit.discovery.model import Pool
from drakit.plugin.slices.compare import content_key
from drakit.plugin.slices.rules import RuleOptions
from drakit.plugin.slices.split import split_pool
from drakit.plugin.slices.validate import SliceValidationError, ValidationIssue, validate_pools

Obj = dict[str, Any]


@dataclass
class DesiredState:
    """What one node's publisher wants on the server: ``specs`` (pool name → slice specs,
    v1 shape, generation not yet set), ``protected`` (pools skipped because their own
    fields are invalid: their slices are left alone), ``devices`` (in ``specs``) and the
    validation ``issues``."""

    specs: dict[str, list[Obj]]
    protected: set[str] = field(default_factory=set)
    devices: int = 0
    issues: list[ValidationIssue] = field(default_factory=list)
    _keys: dict[str, list[str]] = field(default_factory=dict, repr=False)

    def keys(self, pool: str) -> list[str]:
        """The content_key of each spec of ``pool``, computed when first needed (a cold
        publish, with nothing on the server to match, needs none)."""
        got = self._keys.get(pool)
        if got is None:
            got = self._keys[pool] = [content_key(s) for s in self.specs[pool]]
        return got

    @property
    def slice_count(self) -> int:
        return sum(len(s) for s in self.specs.values())


def desired_state(pools: Sequence[Pool], driver: str, node: str, rules: RuleOptions, *,
                  strict: bool = False) -> DesiredState:
    """Validate and split ``pools``. A pool whose own fields are invalid is left out and
    protected; invalid devices, attributes or counter sets are left out of their pool.
    ``strict``: raise :class:`~drakit.plugin.slices.validate.SliceValidationError` for any
    issue instead."""
    results = validate_pools(list(pools), driver, node, rules)
    issues = [i for r in results for i in r.issues]
    if strict and issues:
        raise SliceValidationError(issues)
    specs: dict[str, list[Obj]] = {}
    skipped: set[str] = set()
    devices = 0
    for pool, result in zip(pools, results, strict=True):
        if result.pool is None:
            skipped.add(pool.name)
            continue
        specs[result.pool.name] = split_pool(
            result.pool, driver, node, with_devices=rules.counter_sets_with_devices)
        devices += len(result.pool.devices)
    return DesiredState(specs, skipped - set(specs), devices, issues)


def plan_sync(desired: DesiredState, listed: Sequence[Obj], *,
              key_of: Callable[[Obj], str] = lambda o: content_key(o["spec"]),
              echo: Mapping[str, str] | None = None,
              generations: Mapping[str, int] | None = None,
              metadata_ok: Callable[[Obj], bool] = lambda _o: True) -> list[PoolPlan]:
    """One :class:`PoolPlan` per pool that is desired or has listed slices, sorted by pool
    name. ``listed``: this publisher's slices (whole objects, v1 shape); ``generations``:
    pool → the highest generation this publisher wrote; the other arguments as for
    :func:`plan_pool`."""
    existing: dict[str, list[Obj]] = {}
    for obj in listed:
        existing.setdefault(obj["spec"]["pool"]["name"], []).append(obj)
    remembered = generations or {}
    return [plan_pool(pool, desired.specs.get(pool), partial(desired.keys, pool),
                      existing.get(pool, []), protected=pool in desired.protected,
                      key_of=key_of, echo=echo, remembered=remembered.get(pool, 0),
                      metadata_ok=metadata_ok)
            for pool in sorted(set(desired.specs) | set(existing))]


@dataclass
class PoolPlan:
    """The writes for one pool, executed in this order: ``deletes`` (existing slices),
    ``metadata_only`` (existing slices re-sent with their own spec), ``updates``
    ((existing slice, new spec) pairs), ``creates`` (new specs). ``generation`` is the
    pool's generation once the writes are done (None: the pool is gone or left alone);
    ``in_sync``: the content is as desired already (no generation change)."""

    pool: str
    generation: int | None
    in_sync: bool
    deletes: list[Obj] = field(default_factory=list)
    metadata_only: list[Obj] = field(default_factory=list)
    updates: list[tuple[Obj, Obj]] = field(default_factory=list)
    creates: list[Obj] = field(default_factory=list)

    @property
    def writes(self) -> int:
        return (len(self.deletes) + len(self.metadata_only) + len(self.updates)
                + len(self.creates))


def _name(obj: Obj) -> str:
    return str(obj["metadata"]["name"])


def plan_pool(pool: str, specs: Sequence[Obj] | None, keys: Callable[[], Sequence[str]],
              existing: Sequence[Obj], *, protected: bool = False,
              key_of: Callable[[Obj], str], echo: Mapping[str, str] | None = None,
              remembered: int = 0,
              metadata_ok: Callable[[Obj], bool] = lambda _o: True) -> PoolPlan:
    """The plan for ``pool`` (see the module docstring).

    ``specs``: the desired slice specs (``spec`` dicts, v1 shape, generation not yet set),
    None when the pool is not desired; ``keys()``: their content keys (called only when
    there is something to match); ``existing``: the pool's slices (whole objects);
    ``key_of``: the content key of an existing slice's spec; ``echo``: desired key → the
    key of what the server stored for it; ``remembered``: the highest generation this
    publisher wrote for the pool; ``metadata_ok``: whether an existing slice's metadata is
    as it should be."""
    if specs is None:
        if protected:
            return PoolPlan(pool, None, True)
        return PoolPlan(pool, None, False, deletes=list(existing))
    echo = echo or {}
    n = len(specs)
    by_key: dict[str, list[Obj]] = {}
    for obj in sorted(existing, key=_name):
        by_key.setdefault(key_of(obj), []).append(obj)
    pairs: list[tuple[Obj, Obj | None]] = []
    if existing:
        for spec, key in zip(specs, keys(), strict=True):
            candidates = by_key.get(key) or (by_key.get(echo[key]) if key in echo else None) \
                or []
            pairs.append((spec, candidates.pop(0) if candidates else None))
    else:
        pairs = [(spec, None) for spec in specs]
    unmatched = sorted((o for objs in by_key.values() for o in objs), key=_name)
    gens = {int(o["spec"]["pool"].get("generation", 0)) for o in existing}
    if (all(m is not None for _, m in pairs) and not unmatched and len(gens) == 1
            and all(o["spec"]["pool"].get("resourceSliceCount") == n for o in existing)):
        return PoolPlan(pool, next(iter(gens)), True, metadata_only=[
            m for _, m in pairs if m is not None and not metadata_ok(m)])
    generation = max([*gens, remembered]) + 1
    plan = PoolPlan(pool, generation, False)
    spare = unmatched
    for spec, current in pairs:
        full = {**spec, "pool": {**spec["pool"], "generation": generation}}
        if current is None:
            # spec.nodeName is immutable: reuse only a slice with the same one
            reusable = [o for o in spare if o["spec"].get("nodeName") == full.get("nodeName")]
            if reusable:
                current = reusable[0]
                spare.remove(current)
        if current is None:
            plan.creates.append(full)
        else:
            plan.updates.append((current, full))
    plan.deletes = spare
    return plan
