"""Allocation for one node as kube-scheduler's DRA plugin does it (the "incubating" allocator
of k8s.io/dynamic-resource-allocation ``structured``, which Kubernetes 1.37 uses with its
default feature gates: prioritized list, partitionable devices, device taints, binding
conditions, consumable capacity, admin access).

A depth-first search in the scheduler's order: claims, requests (for ``firstAvailable`` the
subrequests in order), devices by pool (driver, pool name), slice name, position. A device is
taken when it is not in use, its DeviceClass's and the request's selectors are true, it fits
the request's capacity, its counters are available, no untolerated NoSchedule/NoExecute taint
is on it, and the claim's constraints still hold; otherwise the search backtracks. A selector
that fails (compile or runtime error) stops the whole allocation with that error, as the
scheduler's does (the pod fails with SchedulerError).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from drakit.allocator import celenv
from drakit.allocator.capacity import CapacityError, Consumed, consumption, fits
from drakit.allocator.celenv import DeviceValue, Environment, default_environment
from drakit.allocator.nodes import node_matches
from drakit.allocator.pools import Pool, gather
from drakit.allocator.state import AllocatedState
from drakit.plugin.slices import quantity as qty

#: resource.k8s.io/v1 AllocationResultsMaxSize
ALLOCATION_RESULTS_MAX_SIZE: Final = 32

DeviceID = tuple[str, str, str]


class AllocationError(Exception):
    """What the scheduler reports as an error (not "cannot allocate"): a selector that does
    not compile or fails on a device, a missing DeviceClass, a request for all devices of a
    pool being updated, a constraint broken by a request for all devices."""


@dataclass
class Candidate:
    pool: Pool
    slice: dict[str, Any]
    device: dict[str, Any]

    @property
    def id(self) -> DeviceID:
        return (self.pool.driver, self.pool.name, self.device["name"])


@dataclass
class RequestData:
    claim: int
    name: str  # request, or subrequest
    parent: str  # "" or the request of a subrequest
    spec: Mapping[str, Any]  # exactly / the subrequest
    cls: Mapping[str, Any] | None
    admin: bool
    num: int = 0
    all_devices: list[Candidate] = field(default_factory=list)

    @property
    def full_name(self) -> str:
        return f"{self.parent}/{self.name}" if self.parent else self.name

    @property
    def mode_all(self) -> bool:
        return self.spec.get("allocationMode") == "All"


def namespaced_name(c: Mapping[str, Any]) -> str:
    """``NAMESPACE/NAME`` of an object (a claim, a pod)."""
    m = c.get("metadata") or {}
    return f"{m.get('namespace', '')}/{m.get('name', '')}"


def tolerates(tol: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """core/v1 toleration semantics on a DeviceTaint (resourceclaim.ToleratesTaint)."""
    if tol.get("effect") and tol.get("effect") != taint.get("effect"):
        return False
    if tol.get("key") and tol.get("key") != taint.get("key"):
        return False
    op = tol.get("operator") or "Equal"
    if op == "Equal":
        return (tol.get("value") or "") == (taint.get("value") or "")
    return op == "Exists"


def blocking_taint(device: Mapping[str, Any], spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The first NoSchedule or NoExecute taint of ``device["taints"]`` that no toleration of
    ``spec["tolerations"]`` tolerates (a device and a request, or a node's and a pod's spec)."""
    for taint in device.get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(
                tolerates(t, taint) for t in spec.get("tolerations") or []):
            return taint
    return None


def add_consumption(into: dict[str, dict[str, qty.Quantity]], device: Mapping[str, Any]
                    ) -> None:
    """Add the device's ``consumesCounters`` to ``into`` (counter set → counter → amount)."""
    for use in device.get("consumesCounters") or []:
        cs = into.setdefault(use.get("counterSet", ""), {})
        for name, v in (use.get("counters") or {}).items():
            cs[name] = cs.get(name, qty.ZERO) + qty.parse((v or {}).get("value", "0"))


def describe_taint(taint: Mapping[str, Any]) -> str:
    """``taint KEY[=VALUE]:EFFECT is not tolerated`` (a device's or a node's taint)."""
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"taint {taint.get('key')}{value}:{taint.get('effect')} is not tolerated"


def lookup_attribute(device: Mapping[str, Any], driver: str, name: str) -> Any:
    attrs = device.get("attributes") or {}
    if name in attrs:
        return attrs[name]
    domain, _, ident = name.partition("/")
    if ident and domain == driver and ident in attrs:
        return attrs[ident]
    return None


def _scalar(attr: Mapping[str, Any]) -> tuple[str, Any] | None:
    for k in ("string", "int", "bool", "version"):
        if k in attr:
            return (k, attr[k])
    return None


class _Constraint:
    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.requests = set(spec.get("requests") or [])
        self.match = spec.get("matchAttribute")
        self.distinct = spec.get("distinctAttribute")
        self.attribute: str = self.match or self.distinct or ""
        self.values: list[tuple[str, Any] | None] = []

    def applies(self, rd: RequestData) -> bool:
        if not self.requests:
            return True
        if rd.parent:
            return rd.parent in self.requests or rd.full_name in self.requests
        return rd.name in self.requests

    def add(self, rd: RequestData, c: Candidate) -> bool:
        if not self.applies(rd):
            return True
        attr = lookup_attribute(c.device, c.pool.driver, self.attribute)
        if attr is None:
            return False
        value = _scalar(attr)
        if self.match:
            if self.values and (value is None or self.values[0] != value):
                return False
        else:
            if value is None or value in self.values:
                return False
        self.values.append(value)
        return True

    def remove(self, rd: RequestData) -> None:
        if self.applies(rd):
            self.values.pop()

    def describe(self) -> str:
        kind = "matchAttribute" if self.match else "distinctAttribute"
        on = f" over requests {sorted(self.requests)}" if self.requests else ""
        return f"{kind} {self.attribute}{on}"


@dataclass(frozen=True)
class SelectorFailure:
    """A selector that is false or fails on a device: of DeviceClass ``cls`` ("" for the
    request's own), its index, the expression; ``kind`` "false", "compile" or "runtime"."""

    cls: str
    index: int
    expression: str
    kind: str
    error: str

    def where(self) -> str:
        return (f"class {self.cls} selector #{self.index}" if self.cls
                else f"request selector #{self.index}")

    def scheduler_error(self, claim: str, device: str) -> str:
        who = f"class {self.cls}" if self.cls else f"claim {claim}"
        if self.kind == "compile":
            return f"{who}: selector #{self.index}: CEL compile error: {self.error}"
        return f"{who}: selector #{self.index} on device {device}: CEL runtime error: {self.error}"


@dataclass
class Evaluations:
    """Each device's ``device`` value, each selector's outcome on it, and each request's
    verdict on it (the first selector that is false or fails), by object: shared by the
    allocators of one run over the same slice, claim and class objects (a device is
    evaluated once however many nodes or claims see it). The entries keep their objects, so
    an ``id`` is never reused while its entry lives."""

    values: dict[int, tuple[Mapping[str, Any], DeviceValue]] = field(default_factory=dict)
    outcomes: dict[tuple[str, int], celenv.Outcome] = field(default_factory=dict)
    # (request spec, DeviceClass, device) → their objects and the first failing selector
    verdicts: dict[tuple[int, int, int], tuple[Any, Any, Any, SelectorFailure | None]] = \
        field(default_factory=dict)


@dataclass
class Outcome:
    """``results[i]``: the AllocationResult of claim i; None when the claims cannot be
    allocated on this node (``error`` set when the scheduler would report an error;
    ``invalid_pools``: "pool: why", which the scheduler reports as "invalid resource pools
    were encountered" when nothing could be allocated)."""

    results: list[dict[str, Any]] | None
    error: str = ""
    invalid_pools: list[str] = field(default_factory=list)


class Allocator:
    def __init__(self, slices: Sequence[dict[str, Any]], classes: Mapping[str, Mapping[str, Any]],
                 node: Mapping[str, Any], state: AllocatedState | None = None,
                 env: Environment | None = None, evaluations: Evaluations | None = None
                 ) -> None:
        self.node = node
        self.node_name = (node.get("metadata") or {}).get("name", "")
        self.classes = classes
        self.state = state or AllocatedState()
        self.env = env or default_environment()
        self.pools = gather(slices, node)
        self._eval = evaluations if evaluations is not None else Evaluations()
        self.count_counters = True  # False: shared counters are not checked (explain)
        self._available: dict[str, dict[str, dict[str, qty.Quantity]]] = {}

    # -- selection --------------------------------------------------------------------------

    def device_value(self, c: Candidate) -> DeviceValue:
        hit = self._eval.values.get(id(c.device))
        if hit is None:
            hit = self._eval.values[id(c.device)] = (
                c.device, self.env.device_value(c.pool.driver, c.device))
        return hit[1]

    def selector_failure(self, c: Candidate, rd: RequestData) -> SelectorFailure | None:
        """None when every selector of the class and then of the request is true (the
        scheduler's order), else the first one that is false or fails."""
        key = (id(rd.spec), id(rd.cls), id(c.device))
        hit = self._eval.verdicts.get(key)
        if hit is None:
            hit = self._eval.verdicts[key] = (rd.spec, rd.cls, c.device,
                                              self._selector_failure(c, rd))
        return hit[3]

    def _selector_failure(self, c: Candidate, rd: RequestData) -> SelectorFailure | None:
        sources: list[tuple[str, Sequence[Any]]] = []
        if rd.cls is not None:
            sources.append((rd.cls["metadata"]["name"],
                            (rd.cls.get("spec") or {}).get("selectors") or []))
        sources.append(("", rd.spec.get("selectors") or []))
        for cls, selectors in sources:
            for i, sel in enumerate(selectors):
                expr = (sel.get("cel") or {}).get("expression")
                if expr is None:
                    return SelectorFailure(cls, i, "", "compile",
                                           "CEL expression empty (unsupported selector type?)")
                compiled = self.env.compile(expr)
                if compiled.program is None:
                    return SelectorFailure(cls, i, expr, "compile", compiled.error)
                key = (expr, id(c.device))
                out = self._eval.outcomes.get(key)
                if out is None:
                    try:
                        value = self.device_value(c)
                    except ValueError as e:  # a version or quantity the device cannot have
                        return SelectorFailure(cls, i, expr, "runtime", str(e))
                    out = self._eval.outcomes[key] = self.env.evaluate(compiled, value)
                if out.error:
                    return SelectorFailure(cls, i, expr, "runtime", out.error)
                if not out.value:
                    return SelectorFailure(cls, i, expr, "false", "")
        return None

    def node_ok(self, c: Candidate) -> bool:
        if not (c.slice.get("spec") or {}).get("perDeviceNodeSelection"):
            return True
        d = c.device
        return node_matches(self.node, d.get("nodeName") or "", bool(d.get("allNodes")),
                            d.get("nodeSelector"))

    def candidates(self) -> list[Candidate]:
        return [Candidate(p, s, d) for p in self.pools if not (p.incomplete or p.invalid)
                for s in p.slices for d in (s.get("spec") or {}).get("devices") or []]

    # -- counters ---------------------------------------------------------------------------

    def available_counters(self, pool: Pool) -> dict[str, dict[str, qty.Quantity]]:
        have = self._available.get(pool.id)
        if have is None:
            have = {n: dict(cs) for n, cs in pool.counter_sets.items()}
            for s in pool.slices + pool.other_slices:
                for d in (s.get("spec") or {}).get("devices") or []:
                    if not self.state.allocated((pool.driver, pool.name, d["name"])):
                        continue
                    for use in d.get("consumesCounters") or []:
                        cs = have.get(use.get("counterSet", ""), {})
                        for name, v in (use.get("counters") or {}).items():
                            if name in cs:
                                cs[name] = cs[name] - qty.parse((v or {}).get("value", "0"))
            self._available[pool.id] = have
        return have

    def request_data(self, claims: Sequence[Mapping[str, Any]]
                     ) -> dict[tuple[int, int, int], RequestData]:
        out: dict[tuple[int, int, int], RequestData] = {}
        for ci, claim in enumerate(claims):
            for ri, req in enumerate(claim["spec"]["devices"]["requests"]):
                subs = req.get("firstAvailable")
                entries = [(si, s, req["name"]) for si, s in enumerate(subs)] if subs \
                    else [(0, req["exactly"], "")]
                for si, spec, parent in entries:
                    name = spec.get("name", "") if parent else req["name"]
                    cname = spec.get("deviceClassName") or ""
                    where = f"claim {namespaced_name(claim)}, request {name}"
                    if not cname:
                        raise AllocationError(f"{where}: missing device class name")
                    cls = self.classes.get(cname)
                    if cls is None:
                        raise AllocationError(f"{where}: could not retrieve device class "
                                              f"{cname}: deviceclass.resource.k8s.io "
                                              f"\"{cname}\" not found")
                    rd = RequestData(ci, name, parent, spec, cls,
                                     admin=bool(spec.get("adminAccess")) and not parent)
                    mode = spec.get("allocationMode") or "ExactCount"
                    if mode == "ExactCount":
                        rd.num = int(spec.get("count") or 1)
                    elif mode == "All":
                        for p in self.pools:
                            if p.incomplete:
                                raise AllocationError(f"{where}: asks for all devices, but "
                                                      f"resource pool {p.id} is currently "
                                                      "being updated")
                            if p.invalid:
                                raise AllocationError(f"{where}: asks for all devices, but "
                                                      f"resource pool {p.id} is currently "
                                                      "invalid")
                        for c in self.candidates():
                            if self.selectable(c, rd) and fits(
                                    spec.get("capacity"), c.device, {}, {})[0]:
                                rd.all_devices.append(c)
                        rd.num = len(rd.all_devices)
                    else:
                        raise AllocationError(f"{where}: unsupported count mode {mode}")
                    out[(ci, ri, si)] = rd
        return out

    def selectable(self, c: Candidate, rd: RequestData) -> bool:
        f = self.selector_failure(c, rd)
        if f is not None:
            if f.kind != "false":
                raise AllocationError(f.scheduler_error(self._claim, "/".join(c.id)))
            return False
        return self.node_ok(c)

    _claim = ""

    # -- the search -------------------------------------------------------------------------

    def allocate(self, claims: Sequence[Mapping[str, Any]]) -> Outcome:
        try:
            return self._allocate(claims)
        except (AllocationError, CapacityError) as e:
            return Outcome(None, str(e))
        except ValueError as e:  # a malformed quantity or count in a claim or slice
            return Outcome(None, f"claim {self._claim}: {e}")

    def _allocate(self, claims: Sequence[Mapping[str, Any]]) -> Outcome:
        self._claims = claims
        self._claim = namespaced_name(claims[0]) if claims else ""
        self._rd = self.request_data(claims)
        self._constraints = [[_Constraint(c) for c in claim["spec"]["devices"].get(
            "constraints") or []] for claim in claims]
        self._results: list[list[dict[str, Any]]] = [[] for _ in claims]
        self._selected: dict[tuple[int, int], int] = {}
        self._in_use: dict[DeviceID, set[int]] = {}
        self._allocating_cap: dict[DeviceID, list[Consumed]] = {}
        self._consumed: dict[str, dict[str, dict[str, qty.Quantity]]] = {}
        self._cands = self.candidates()
        invalid = [f"{p.id}: {p.invalid}" for p in self.pools if p.invalid]
        if not self._one(0, 0, 0, 0, False, 0):
            # invalid pools make the node unschedulable with this message
            # (ErrFailedAllocationOnNode), not a scheduler error
            return Outcome(None, "", invalid)
        return Outcome([self._result(i, c) for i, c in enumerate(claims)], "", invalid)

    def _one(self, ci: int, ri: int, si: int, di: int, in_sub: bool, start: int) -> bool:
        if ci >= len(self._claims):
            return True
        requests = self._claims[ci]["spec"]["devices"]["requests"]
        if ri >= len(requests):
            return self._one(ci + 1, 0, 0, 0, False, 0)
        rd = self._rd[(ci, ri, si)]
        if not in_sub and rd.parent:
            k = 0
            while (ci, ri, k) in self._rd:
                if self._one(ci, ri, k, 0, True, 0):
                    self._selected[(ci, ri)] = k
                    return True
                k += 1
            return False
        if rd.mode_all and not rd.all_devices:
            return False
        if di >= rd.num:
            return self._one(ci, ri + 1, 0, 0, False, 0)
        if rd.num - di > ALLOCATION_RESULTS_MAX_SIZE - len(self._results[ci]):
            return False
        if rd.mode_all:
            c = rd.all_devices[di]
            undo = self._take(rd, c, must=True)
            if undo is None:
                return False
            if self._one(ci, ri, si, di + 1, in_sub, 0):
                return True
            undo()
            return False
        for idx in range(start, len(self._cands)):
            c = self._cands[idx]
            if rd.admin:
                if ci in self._in_use.get(c.id, ()):
                    continue
            elif self._used(c.id):
                continue
            if not self.selectable(c, rd):
                continue
            ok, _ = fits(rd.spec.get("capacity"), c.device, self._agg(c.id),
                         self._allocating(c.id))
            if not ok:
                continue
            undo = self._take(rd, c, must=False)
            if undo is None:
                continue
            if self._one(ci, ri, si, di + 1, in_sub, idx + 1):
                return True
            undo()
        return False

    def _used(self, dev: DeviceID) -> bool:
        return dev in self.state.devices or bool(self._in_use.get(dev))

    def _agg(self, dev: DeviceID) -> Consumed:
        return self.state.capacity.get(dev, {})

    def _allocating(self, dev: DeviceID) -> Consumed:
        out: Consumed = {}
        for used in self._allocating_cap.get(dev, []):
            for k, v in used.items():
                out[k] = out.get(k, qty.ZERO) + v
        return out

    def _capacity_in_use(self, dev: DeviceID) -> bool:
        return dev in self.state.capacity or dev in self.state.shared or \
            bool(self._allocating_cap.get(dev))

    def counters_fit(self, c: Candidate, extra: Mapping[str, Mapping[str, qty.Quantity]]
                     ) -> tuple[bool, str]:
        """Would the device's counter consumption fit next to ``extra`` (consumed by this
        allocation)? (fits, counter that does not)."""
        avail = self.available_counters(c.pool)
        want: dict[str, dict[str, qty.Quantity]] = {
            n: dict(cs) for n, cs in extra.items()}
        add_consumption(want, c.device)
        for set_name, counters in avail.items():
            for name, have in counters.items():
                used = want.get(set_name, {}).get(name, qty.ZERO)
                if have.value < used.value:
                    like = c.pool.counter_texts.get(set_name, {}).get(name)
                    return False, (f"counter {name} of counter set {set_name}: "
                                   f"{qty.as_published(used, like)} needed, "
                                   f"{qty.as_published(have, like)} available")
        return True, ""

    def counters_overdrawn(self, result: Mapping[str, Any]) -> tuple[list[str], str] | None:
        """For an AllocationResult found with counters not counted: the devices of the first
        pool whose shared counters they overdraw together, and the counter that does not
        fit ("counter NAME of counter set SET: NEEDED needed, AVAILABLE available")."""
        by_id = {c.id: c for c in self.candidates()}
        picked: dict[str, list[Candidate]] = {}
        for r in (result.get("devices") or {}).get("results") or []:
            c = by_id.get((r.get("driver", ""), r.get("pool", ""), r.get("device", "")))
            if c is not None and c.device.get("consumesCounters"):
                picked.setdefault(c.pool.id, []).append(c)
        for devices in picked.values():
            used: dict[str, dict[str, qty.Quantity]] = {}
            for c in devices:
                ok, why = self.counters_fit(c, used)
                if not ok:
                    return ["/".join(d.id) for d in devices], why
                add_consumption(used, c.device)
        return None

    def _take(self, rd: RequestData, c: Candidate, must: bool) -> Any:
        ci = rd.claim
        multi = bool(c.device.get("allowMultipleAllocations"))
        if not multi and rd.admin and ci in self._in_use.get(c.id, ()):
            return None
        if not rd.admin and self._used(c.id):
            return None
        undo: list[Any] = []

        def rollback() -> None:
            for u in reversed(undo):
                u()

        skip_counters = multi and self._capacity_in_use(c.id)
        if self.count_counters and not skip_counters and c.device.get("consumesCounters"):
            pool_used = self._consumed.setdefault(c.pool.id, {})
            ok, _ = self.counters_fit(c, pool_used)
            if not ok:
                return None
            before = {n: dict(cs) for n, cs in pool_used.items()}
            add_consumption(pool_used, c.device)
            undo.append(lambda: self._consumed.__setitem__(c.pool.id, before))
        if blocking_taint(c.device, rd.spec) is not None:
            rollback()
            return None
        for k in self._constraints[ci]:
            if not k.add(rd, c):
                rollback()
                if must:
                    raise AllocationError(
                        f"claim {namespaced_name(self._claims[ci])}, request {rd.name}: cannot add "
                        f"device {'/'.join(c.id)} because a claim constraint would not be "
                        "satisfied")
                return None
            undo.append(lambda k=k: k.remove(rd))
        if not multi:
            self._in_use.setdefault(c.id, set()).add(ci)
            undo.append(lambda: self._in_use[c.id].discard(ci))
        consumed: Consumed = {}
        share = ""
        ok, _ = fits(rd.spec.get("capacity"), c.device, self._agg(c.id), self._allocating(c.id))
        if not ok:
            rollback()
            return None
        if multi:
            consumed = consumption(rd.spec.get("capacity"), c.device)
            share = str(uuid.uuid4())
            lst = self._allocating_cap.setdefault(c.id, [])
            lst.append(consumed)
            undo.append(lambda: lst.pop())
        result: dict[str, Any] = {"request": rd.full_name, "driver": c.pool.driver,
                                  "pool": c.pool.name, "device": c.device["name"]}
        if rd.admin:
            result["adminAccess"] = True
        if rd.spec.get("tolerations"):
            result["tolerations"] = list(rd.spec["tolerations"])
        if share:
            result["shareID"] = share
        if consumed:
            result["consumedCapacity"] = {k: str(v) for k, v in consumed.items()}
        if c.device.get("bindingConditions"):
            result["bindingConditions"] = list(c.device["bindingConditions"])
            result["bindingFailureConditions"] = list(c.device.get("bindingFailureConditions")
                                                      or [])
        results = self._results[ci]
        results.append({"_candidate": c, **result})
        undo.append(lambda: results.pop())
        return rollback

    # -- the AllocationResult ---------------------------------------------------------------

    def _result(self, ci: int, claim: Mapping[str, Any]) -> dict[str, Any]:
        devices = self._results[ci]
        out_results = [{k: v for k, v in r.items() if k != "_candidate"} for r in devices]
        config: list[dict[str, Any]] = []
        requests = claim["spec"]["devices"]["requests"]
        chosen: dict[int, RequestData] = {}
        for ri in range(len(requests)):
            chosen[ri] = self._rd[(ci, ri, self._selected.get((ci, ri), 0))]
        seen_class: dict[str, tuple[int, int]] = {}
        for ri in range(len(requests)):
            rd = chosen[ri]
            if rd.cls is None:
                continue
            cname = rd.cls["metadata"]["name"]
            if cname in seen_class:
                a, b = seen_class[cname]
                for i in range(a, b):
                    config[i]["requests"].append(rd.full_name)
                continue
            a = len(config)
            for cfg in (rd.cls.get("spec") or {}).get("config") or []:
                config.append({"source": "FromClass", "requests": [rd.full_name],
                               **{k: v for k, v in cfg.items()}})
            seen_class[cname] = (a, len(config))
        for cfg in claim["spec"]["devices"].get("config") or []:
            names = cfg.get("requests") or []
            body = {k: v for k, v in cfg.items() if k != "requests"}
            if not names or any(chosen[ri].full_name in names or requests[ri]["name"] in names
                                for ri in range(len(requests))):
                config.append({"source": "FromClaim", **({"requests": names} if names else {}),
                               **body})
        all_names = {ri: (requests[ri]["name"], chosen[ri].full_name) for ri in chosen}
        for cfg in config:
            names = cfg.get("requests")
            if names and all(a in names or b in names for a, b in all_names.values()):
                del cfg["requests"]
        out: dict[str, Any] = {"devices": {"results": out_results}}
        if config:
            out["devices"]["config"] = config
        selector = self._node_selector(devices)
        if selector is not None:
            out["nodeSelector"] = selector
        return out

    def _node_selector(self, devices: list[dict[str, Any]]) -> dict[str, Any] | None:
        fields: list[dict[str, Any]] = []
        exprs: list[dict[str, Any]] = []
        for r in devices:
            c: Candidate = r["_candidate"]
            spec = c.slice.get("spec") or {}
            if spec.get("perDeviceNodeSelection"):
                name, sel = c.device.get("nodeName"), c.device.get("nodeSelector")
            else:
                name, sel = spec.get("nodeName"), spec.get("nodeSelector")
            if name or c.device.get("bindsToNode"):
                return {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [self.node_name]}]}]}
            terms = (sel or {}).get("nodeSelectorTerms") or []
            if len(terms) > 1:
                raise AllocationError(f"unsupported ResourceSlice.NodeSelector with "
                                      f"{len(terms)} terms")
            if terms:
                for req in terms[0].get("matchFields") or []:
                    if req not in fields:
                        fields.append(req)
                for req in terms[0].get("matchExpressions") or []:
                    if req not in exprs:
                        exprs.append(req)
        if not fields and not exprs:
            return None
        term: dict[str, Any] = {}
        if exprs:
            term["matchExpressions"] = exprs
        if fields:
            term["matchFields"] = fields
        return {"nodeSelectorTerms": [term]}
