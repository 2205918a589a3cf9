"""Why a claim can or cannot be allocated on a node: per request (per subrequest of a
``firstAvailable`` list) the devices that match, and for every other device the first rule
that rules it out, in the scheduler's order of checks:

``allocated``  held by another claim (not for admin access);
``selector``   a DeviceClass or request selector is false;
``cel-error``  a selector fails to compile or to evaluate (the scheduler then stops with an
               error for the whole pod);
``node``       the device (perDeviceNodeSelection) is not for this node;
``capacity``   the request's capacity does not fit what is left or is not allowed by the
               capacity's requestPolicy;
``counter``    the device's shared counters are used up by allocated devices;
``taint``      a NoSchedule or NoExecute taint the request does not tolerate.

Each device is judged against the request alone; what only a combination rules out
(constraints, counters shared by the devices one allocation takes) is a claim-level reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from drakit.allocator import objects
from drakit.allocator.capacity import CapacityError, fits
from drakit.allocator.celenv import Environment
from drakit.allocator.engine import (
    AllocationError,
    Allocator,
    Candidate,
    RequestData,
    blocking_taint,
)
from drakit.allocator.state import AllocatedState, from_claims


@dataclass
class DeviceReason:
    device: str  # driver/pool/device
    reason: str  # allocated, selector, cel-error, node, capacity, counter, taint
    detail: str


@dataclass
class RequestExplanation:
    request: str  # request or request/subrequest
    device_class: str
    mode: str  # ExactCount or All
    count: int
    matched: list[str] = field(default_factory=list)
    unmatched: list[DeviceReason] = field(default_factory=list)


@dataclass
class Explanation:
    claim: str
    node: str
    allocatable: bool
    error: str = ""  # what the scheduler reports as an error (SchedulerError)
    reasons: list[str] = field(default_factory=list)  # claim-level
    requests: list[RequestExplanation] = field(default_factory=list)
    pools: list[dict[str, str]] = field(default_factory=list)
    allocation: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        """The text ``drakit explain`` prints: the verdict, the error, the claim-level
        reasons, pools not complete, per request the matching devices and each other
        device's reason, and the devices the scheduler would allocate."""
        lines = [f"claim {self.claim} on node {self.node}: "
                 + ("ALLOCATABLE" if self.allocatable else "NOT ALLOCATABLE")]
        if self.error:
            lines.append(f"  error (the scheduler fails the pod with it): {self.error}")
        lines += [f"  reason: {r}" for r in self.reasons]
        lines += [f"  pool {p['pool']}: {p['state']}" for p in self.pools
                  if p["state"] != "complete"]
        for r in self.requests:
            want = "all" if r.mode == "All" else str(r.count)
            lines.append(f"  request {r.request} (class {r.device_class}, {want} device(s)): "
                         f"{len(r.matched)} match")
            lines += [f"    match    {d}" for d in r.matched]
            lines += [f"    no       {u.device}: {u.reason}: {u.detail}" for u in r.unmatched]
        if self.allocation:
            picked = ", ".join(f"{d['request']}={d['driver']}/{d['pool']}/{d['device']}"
                               for d in self.allocation["devices"]["results"])
            lines.append(f"  the scheduler would allocate: {picked}")
        return "\n".join(lines)


def _device_reason(alloc: Allocator, c: Candidate, rd: RequestData,
                   state: AllocatedState) -> DeviceReason | None:
    dev = "/".join(c.id)
    if not rd.admin and c.id in state.devices:
        holders = ", ".join(state.holders.get(c.id, [])) or "another claim"
        return DeviceReason(dev, "allocated", f"allocated to {holders}")
    f = alloc.selector_failure(c, rd)
    if f is not None:
        if f.kind == "false":
            return DeviceReason(dev, "selector", f"{f.where()} is false: {f.expression}")
        return DeviceReason(dev, "cel-error", f"{f.where()}: {f.error}"
                            + (f" ({f.expression})" if f.expression else ""))
    if not alloc.node_ok(c):
        return DeviceReason(dev, "node", f"the device is not available on node {alloc.node_name}")
    try:
        ok, why = fits(rd.spec.get("capacity"), c.device, state.capacity.get(c.id, {}), {})
    except (CapacityError, ValueError) as e:
        return DeviceReason(dev, "capacity", str(e))
    if not ok:
        return DeviceReason(dev, "capacity", why)
    multi = bool(c.device.get("allowMultipleAllocations"))
    shared_in_use = multi and (c.id in state.capacity or c.id in state.shared)
    if c.device.get("consumesCounters") and not shared_in_use:
        ok, why = alloc.counters_fit(c, {})
        if not ok:
            return DeviceReason(dev, "counter", why)
    taint = blocking_taint(c.device, rd.spec)
    if taint is not None:
        return DeviceReason(dev, "taint", f"taint {taint.get('key')}"
                            + (f"={taint['value']}" if taint.get("value") else "")
                            + f":{taint.get('effect')} is not tolerated")
    return None


def explain(claim: Mapping[str, Any], slices: Iterable[Mapping[str, Any]],
            classes: Iterable[Mapping[str, Any]], node: Mapping[str, Any] | str,
            other_claims: Iterable[Mapping[str, Any]] = (),
            env: Environment | None = None) -> Explanation:
    """Explain ``claim`` (any supported version) on ``node`` (a Node object, or its name when
    only slices with ``nodeName`` / ``allNodes`` matter), given the cluster's ResourceSlices,
    DeviceClasses and the other claims (their allocations hold devices)."""
    node_obj: Mapping[str, Any] = node if isinstance(node, Mapping) else \
        {"metadata": {"name": node}}
    c = objects.claim_v1(claim)
    meta = c.get("metadata") or {}
    name = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    node_name = (node_obj.get("metadata") or {}).get("name", "")
    state = from_claims(other_claims, skip_uid=meta.get("uid", ""))
    class_map = {k["metadata"]["name"]: k for k in map(objects.class_v1, classes)}
    alloc = Allocator([objects.slice_v1(s) for s in slices], class_map, node_obj, state, env)
    out = Explanation(claim=name, node=node_name, allocatable=False)
    for p in alloc.pools:
        out.pools.append({"pool": p.id, "state": "incomplete" if p.incomplete else
                          ("invalid: " + p.invalid if p.invalid else "complete")})
    outcome = alloc.allocate([c])
    out.allocatable = outcome.results is not None
    out.error = outcome.error
    if outcome.results is not None:
        out.allocation = outcome.results[0]
    try:
        rds = _requests(alloc, c)
    except AllocationError as e:
        out.error = out.error or str(e)
        return out
    short: dict[str, list[str]] = {}  # per request: why each of its (sub)requests is short
    fine: set[str] = set()
    for rd in rds:
        rx = RequestExplanation(rd.full_name, rd.spec.get("deviceClassName", ""),
                                rd.spec.get("allocationMode") or "ExactCount",
                                int(rd.spec.get("count") or 1))
        for cand in alloc.candidates():
            reason = _device_reason(alloc, cand, rd, state)
            if reason is None:
                rx.matched.append("/".join(cand.id))
            else:
                rx.unmatched.append(reason)
        if rx.mode == "All":
            rx.count = len(rx.matched)
        out.requests.append(rx)
        top = rd.parent or rd.name
        if (rx.mode != "All" and len(rx.matched) < rx.count) or \
                (rx.mode == "All" and not rx.matched):
            short.setdefault(top, []).append(
                f"request {rx.request} needs {rx.count if rx.mode != 'All' else 'all'} "
                f"device(s), {len(rx.matched)} match")
        else:
            fine.add(top)  # a firstAvailable request is short only if all subrequests are
    if not out.allocatable and not out.error:
        reasons = [r for top, rs in short.items() if top not in fine for r in rs]
        out.reasons = reasons or _combination_reasons(alloc, c, class_map, slices, node_obj,
                                                      state, env)
        if outcome.invalid_pools:
            out.reasons.insert(0, "invalid resource pools were encountered: "
                               + "; ".join(outcome.invalid_pools))
        if not alloc.pools:
            out.reasons.insert(0, f"no ResourceSlice publishes devices for node {node_name}")
    return out


def _requests(alloc: Allocator, claim: Mapping[str, Any]) -> list[RequestData]:
    """The request data without the scheduler's errors (each device is judged alone)."""
    out: list[RequestData] = []
    for req in claim["spec"]["devices"]["requests"]:
        subs = req.get("firstAvailable")
        for spec in (subs or [req["exactly"]]):
            cname = spec.get("deviceClassName") or ""
            cls = alloc.classes.get(cname)
            if cls is None:
                raise AllocationError(f"request {req['name']}: device class {cname!r} not found")
            out.append(RequestData(0, spec.get("name", "") if subs else req["name"],
                                   req["name"] if subs else "", spec, cls,
                                   admin=bool(spec.get("adminAccess")) and not subs))
    return out


def _combination_reasons(alloc: Allocator, claim: Mapping[str, Any],
                         classes: Mapping[str, Any], slices: Iterable[Mapping[str, Any]],
                         node: Mapping[str, Any], state: AllocatedState,
                         env: Environment | None) -> list[str]:
    constraints = claim["spec"]["devices"].get("constraints") or []
    if constraints:
        relaxed = {**claim, "spec": {**claim["spec"], "devices": {
            **claim["spec"]["devices"], "constraints": []}}}
        again = Allocator([objects.slice_v1(s) for s in slices], dict(classes), node,
                          state, env)
        if again.allocate([relaxed]).results is not None:
            names = []
            for k in constraints:
                kind = "matchAttribute" if k.get("matchAttribute") else "distinctAttribute"
                attr = k.get("matchAttribute") or k.get("distinctAttribute")
                on = f" over requests {k['requests']}" if k.get("requests") else ""
                names.append(f"{kind} {attr}{on}")
            return ["enough devices match each request, but no choice of them satisfies "
                    "constraint(s) " + "; ".join(names)]
    return ["enough devices match each request, but no choice of them fits together (shared "
            "counters or capacity of the devices taken, or one device wanted by several "
            "requests)"]



@dataclass
class PodExplanation:
    """A pod's claims on one node: the scheduler allocates all the pod's unallocated claims
    together, so ``allocatable`` is that joint answer; ``claims``: each claim explained."""

    pod: str
    node: str
    allocatable: bool
    error: str = ""
    reasons: list[str] = field(default_factory=list)
    claims: list[Explanation] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        """The text ``drakit explain --pod`` prints for one node: the joint verdict, then
        each claim's explanation indented."""
        lines = [f"pod {self.pod} on node {self.node}: "
                 + ("ALLOCATABLE" if self.allocatable else "NOT ALLOCATABLE")]
        if self.error:
            lines.append(f"  error (the scheduler fails the pod with it): {self.error}")
        lines += [f"  reason: {r}" for r in self.reasons]
        return "\n".join(lines + ["  " + line for c in self.claims
                                   for line in str(c).splitlines()])


def explain_pod(pod: str, claims: Iterable[Mapping[str, Any]],
                slices: Iterable[Mapping[str, Any]], classes: Iterable[Mapping[str, Any]],
                node: Mapping[str, Any] | str, other_claims: Iterable[Mapping[str, Any]] = (),
                env: Environment | None = None) -> PodExplanation:
    """Explain the claims of ``pod`` (already allocated ones are shown as allocated and hold
    their devices for the others, as in the scheduler)."""
    node_obj: Mapping[str, Any] = node if isinstance(node, Mapping) else \
        {"metadata": {"name": node}}
    slices, classes = list(slices), list(classes)
    mine = [objects.claim_v1(c) for c in claims]
    uids = {(c.get("metadata") or {}).get("uid") for c in mine} - {None, ""}
    held = [c for c in other_claims if (c.get("metadata") or {}).get("uid") not in uids]
    held += [c for c in mine if (c.get("status") or {}).get("allocation")]
    pending = [c for c in mine if not (c.get("status") or {}).get("allocation")]
    out = PodExplanation(pod, (node_obj.get("metadata") or {}).get("name", ""), True)
    for c in mine:
        if (c.get("status") or {}).get("allocation"):
            meta = c.get("metadata") or {}
            out.claims.append(Explanation(f"{meta.get('namespace', '')}/{meta.get('name', '')}",
                                          out.node, True, reasons=["already allocated"],
                                          allocation=c["status"]["allocation"]))
        else:
            out.claims.append(explain(c, slices, classes, node_obj, held, env))
    if pending:
        class_map = {k["metadata"]["name"]: k for k in map(objects.class_v1, classes)}
        alloc = Allocator([objects.slice_v1(s) for s in slices], class_map, node_obj,
                          from_claims(held), env)
        outcome = alloc.allocate(pending)
        out.allocatable = outcome.results is not None
        out.error = outcome.error
        if not out.allocatable and not out.error:
            bad = [e.claim for e in out.claims if not e.allocatable]
            out.reasons = ([f"claim {c} cannot be allocated" for c in bad] if bad else
                           ["each claim can be allocated alone, but not all of them together"])
    return out
