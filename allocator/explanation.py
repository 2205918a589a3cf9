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

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from drakit.allocator import objects
from drakit.allocator.capacity import CapacityError, fits
from drakit.allocator.celenv import Environment
from drakit.allocator.engine import (
    AllocationError,
    Allocator,
    Candidate,
    Evaluations,
    Outcome,
    RequestData,
    blocking_taint,
    describe_taint,
    namespaced_name,
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
        return DeviceReason(dev, "taint", describe_taint(taint))
    return None


@dataclass(frozen=True)
class Context:
    """What every explanation of one run shares: the DeviceClasses by name (v1), the CEL
    environment, and the selector outcomes already computed (per device object, so the
    slices must be converted once and kept)."""

    classes: Mapping[str, Mapping[str, Any]]
    env: Environment | None = None
    evaluations: Evaluations = field(default_factory=Evaluations)

    @classmethod
    def of(cls, classes: Iterable[Mapping[str, Any]], env: Environment | None = None
           ) -> Context:
        return cls({k["metadata"]["name"]: k for k in map(objects.class_v1, classes)}, env)

    def allocator(self, slices: Sequence[dict[str, Any]], node: Mapping[str, Any],
                  state: AllocatedState) -> Allocator:
        return Allocator(slices, self.classes, node, state, self.env, self.evaluations)


def node_object(node: Mapping[str, Any] | str) -> Mapping[str, Any]:
    """A Node object, or a minimal one for a node name."""
    return node if isinstance(node, Mapping) else {"metadata": {"name": node}}


def short(rx: RequestExplanation) -> bool:
    """Too few devices match the (sub)request, each judged alone."""
    return not rx.matched if rx.mode == "All" else len(rx.matched) < rx.count


def progress(e: Explanation) -> tuple[int, int, int, int]:
    """How close the claim is to fitting, each request judged alone: (requests with enough
    matching devices, requests, devices matched toward the counts, devices wanted). A
    ``firstAvailable`` request counts once, by its subrequest closest to its count."""
    tops: dict[str, tuple[bool, int, int]] = {}
    for rx in e.requests:
        top = rx.request.split("/", 1)[0]
        want = len(rx.matched) if rx.mode == "All" else rx.count
        this = (not short(rx), min(len(rx.matched), want), want)
        best = tops.get(top)
        if best is None or (this[0], this[1] - this[2]) > (best[0], best[1] - best[2]):
            tops[top] = this
    done = list(tops.values())
    return (sum(ok for ok, _, _ in done), len(done), sum(m for _, m, _ in done),
            sum(w for _, _, w in done))


def explain(claim: Mapping[str, Any], slices: Iterable[Mapping[str, Any]],
            classes: Iterable[Mapping[str, Any]], node: Mapping[str, Any] | str,
            other_claims: Iterable[Mapping[str, Any]] = (),
            env: Environment | None = None) -> Explanation:
    """Explain ``claim`` (any supported version) on ``node`` (a Node object, or its name when
    only slices with ``nodeName`` / ``allNodes`` matter), given the cluster's ResourceSlices,
    DeviceClasses and the other claims (their allocations hold devices)."""
    c = objects.claim_v1(claim)
    state = from_claims(other_claims, skip_uid=(c.get("metadata") or {}).get("uid", ""))
    return explain_v1(Context.of(classes, env), c, [objects.slice_v1(s) for s in slices],
                      node_object(node), state)


def explain_v1(ctx: Context, c: Mapping[str, Any], slices: Sequence[dict[str, Any]],
               node_obj: Mapping[str, Any], state: AllocatedState,
               outcome: Outcome | None = None) -> Explanation:
    """:func:`explain` of a v1 claim over v1 slices, with what other claims hold;
    ``outcome``: the claim's allocation on this node when already computed."""
    node_name = (node_obj.get("metadata") or {}).get("name", "")
    alloc = ctx.allocator(slices, node_obj, state)
    out = Explanation(claim=namespaced_name(c), node=node_name, allocatable=False)
    for p in alloc.pools:
        out.pools.append({"pool": p.id, "state": "incomplete" if p.incomplete else
                          ("invalid: " + p.invalid if p.invalid else "complete")})
    if outcome is None:
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
    candidates = alloc.candidates()
    for rd in rds:
        rx = RequestExplanation(rd.full_name, rd.spec.get("deviceClassName", ""),
                                rd.spec.get("allocationMode") or "ExactCount",
                                int(rd.spec.get("count") or 1))
        for cand in candidates:
            reason = _device_reason(alloc, cand, rd, state)
            if reason is None:
                rx.matched.append("/".join(cand.id))
            else:
                rx.unmatched.append(reason)
        if rx.mode == "All":
            rx.count = len(rx.matched)
        out.requests.append(rx)
    if not out.allocatable and not out.error:
        fine = {rx.request.split("/", 1)[0] for rx in out.requests if not short(rx)}
        reasons = [f"request {rx.request} needs {rx.count if rx.mode != 'All' else 'all'} "
                   f"device(s), {len(rx.matched)} match" for rx in out.requests
                   if short(rx) and rx.request.split("/", 1)[0] not in fine]
        out.reasons = reasons or _combination_reasons(ctx, c, slices, node_obj, state,
                                                      out.requests)
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


_TOGETHER: Final = "enough devices match each request, but"


def _combination_reasons(ctx: Context, claim: Mapping[str, Any],
                         slices: Sequence[dict[str, Any]], node: Mapping[str, Any],
                         state: AllocatedState, requests: Sequence[RequestExplanation]
                         ) -> list[str]:
    """What stops devices that each fit alone: the constraints without which the claim
    would be allocated, requests that together want more distinct devices than match them,
    or the shared counter the scheduler's first choice overdraws."""
    devices = claim["spec"]["devices"]
    constraints = devices.get("constraints") or []

    def without(drop: set[int]) -> dict[str, Any]:
        kept = [k for i, k in enumerate(constraints) if i not in drop]
        return {**claim, "spec": {**claim["spec"], "devices": {**devices,
                                                                "constraints": kept}}}

    def allocates(c: Mapping[str, Any]) -> bool:
        return ctx.allocator(slices, node, state).allocate([c]).results is not None

    if constraints:
        blocking = [k for i, k in enumerate(constraints) if allocates(without({i}))]
        if not blocking and allocates(without(set(range(len(constraints))))):
            blocking = constraints
        if blocking:
            return [f"{_TOGETHER} no choice of them satisfies "
                    + "; ".join(_describe_constraint(k) for k in blocking)]
    groups = [(rx.request.split("/", 1)[0], rx) for rx in requests]
    return [f"{_TOGETHER} {_shared_reason(ctx, [claim], slices, node, state, groups)}"]


def _shared_reason(ctx: Context, claims: Sequence[Mapping[str, Any]],
                   slices: Sequence[dict[str, Any]], node: Mapping[str, Any],
                   state: AllocatedState, requests: Sequence[tuple[str, RequestExplanation]]
                   ) -> str:
    """What the devices of ``claims``, fitting each request alone, share beyond what there
    is: too few distinct devices for the requests together (``requests``: (request name as
    shown, its explanation), subrequests under their request's name), or a shared counter
    that the first choice with counters not counted overdraws."""
    alloc = ctx.allocator(slices, node, state)
    shared = {"/".join(c.id) for c in alloc.candidates()
              if c.device.get("allowMultipleAllocations")}
    few = _too_few_distinct(requests, shared)
    if few:
        return few
    alloc.count_counters = False
    outcome = alloc.allocate(claims)
    if outcome.results is not None:
        overdrawn = alloc.counters_overdrawn(
            {"devices": {"results": [r for res in outcome.results
                                     for r in res["devices"]["results"]]}})
        if overdrawn:
            picked, why = overdrawn
            return (f"their shared counters cannot hold them together: {', '.join(picked)} "
                    f"(the first choice when counters are not counted) need {why}")
    return ("no choice of them fits together (the capacity they consume or the devices "
            "other requests take)")


def _describe_constraint(k: Mapping[str, Any]) -> str:
    kind = "matchAttribute" if k.get("matchAttribute") else "distinctAttribute"
    attr = k.get("matchAttribute") or k.get("distinctAttribute")
    on = f" over requests {', '.join(k['requests'])}" if k.get("requests") else ""
    return f"{kind} {attr}{on}"


def _too_few_distinct(requests: Sequence[tuple[str, RequestExplanation]],
                      shared: set[str]) -> str:
    """Hall's condition over the requests that want a number of devices (a
    ``firstAvailable`` request: the fewest of its subrequests, matched by any of them; the
    devices that allow several allocations left out): the smallest set of requests that
    needs more devices than the distinct devices matching any of them; "" when none does."""
    tops: dict[str, tuple[int, set[str]]] = {}
    for top, r in requests:
        if r.mode != "ExactCount":
            continue
        count, matched = tops.get(top, (r.count, set()))
        tops[top] = (min(count, r.count), matched | (set(r.matched) - shared))
    groups = list(tops.items())
    sizes = range(2, len(groups) + 1) if len(groups) <= 10 else [len(groups)]
    for size in sizes:
        for group in itertools.combinations(groups, size):
            need = sum(count for _, (count, _) in group)
            union = set().union(*(m for _, (_, m) in group))
            if need > len(union):
                return (f"requests {', '.join(name for name, _ in group)} need at least "
                        f"{need} devices together and only {len(union)} distinct devices "
                        "match them (a device is allocated to one request)")
    return ""


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
    mine = [objects.claim_v1(c) for c in claims]
    return explain_pod_v1(Context.of(classes, env), pod, mine,
                          [objects.slice_v1(s) for s in slices], node_object(node),
                          pod_state(mine, other_claims))


def pod_state(mine: Sequence[Mapping[str, Any]], other_claims: Iterable[Mapping[str, Any]]
              ) -> AllocatedState:
    """What the pod's pending claims find held: the other claims' devices (not the pod's own
    claims as read from the server) and those of the pod's claims already allocated."""
    uids = {(c.get("metadata") or {}).get("uid") for c in mine} - {None, ""}
    held = [c for c in other_claims if (c.get("metadata") or {}).get("uid") not in uids]
    return from_claims(held + [c for c in mine if (c.get("status") or {}).get("allocation")])


def explain_pod_v1(ctx: Context, pod: str, mine: Sequence[Mapping[str, Any]],
                   slices: Sequence[dict[str, Any]], node_obj: Mapping[str, Any],
                   state: AllocatedState) -> PodExplanation:
    """:func:`explain_pod` of v1 claims over v1 slices; ``state``: :func:`pod_state`."""
    pending: list[Mapping[str, Any]] = []
    alone: list[Explanation] = []
    out = PodExplanation(pod, (node_obj.get("metadata") or {}).get("name", ""), True)
    for c in mine:
        if (c.get("status") or {}).get("allocation"):
            out.claims.append(Explanation(namespaced_name(c), out.node, True,
                                          reasons=["already allocated"],
                                          allocation=c["status"]["allocation"]))
        else:
            pending.append(c)
            alone.append(explain_v1(ctx, c, slices, node_obj, state))
            out.claims.append(alone[-1])
    if len(alone) == 1:  # the joint answer is the claim's own
        out.allocatable, out.error = alone[0].allocatable, alone[0].error
    elif pending:
        outcome = ctx.allocator(slices, node_obj, state).allocate(pending)
        out.allocatable = outcome.results is not None
        out.error = outcome.error
    if not out.allocatable and not out.error:
        bad = [e.claim for e in out.claims if not e.allocatable]
        out.reasons = ([f"claim {c} cannot be allocated" for c in bad] if bad else
                       [together(ctx, pending, alone, slices, node_obj, state)])
    return out


def together(ctx: Context, pending: Sequence[Mapping[str, Any]],
             alone: Sequence[Explanation], slices: Sequence[dict[str, Any]],
             node_obj: Mapping[str, Any], state: AllocatedState) -> str:
    """Why claims that each can be allocated alone cannot be together."""
    groups = [(f"{e.claim} {rx.request.split('/', 1)[0]}", rx) for e in alone
              for rx in e.requests]
    return ("each claim can be allocated alone, but not all of them together: "
            + _shared_reason(ctx, pending, slices, node_obj, state, groups))
