"""Consumable capacity (KEP-5075, resource.k8s.io/v1 since 1.34): what one request takes from
a device that allows multiple allocations, rounded by the capacity's ``requestPolicy``
(``default``, ``validValues`` or ``validRange`` with ``min``, ``max``, ``step``), and whether
it still fits next to what other claims and this allocation already took
(CmpRequestOverCapacity in k8s.io/dynamic-resource-allocation ``structured``, with
DRAFractionalCapacityRange on as in 1.37)."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from drakit.plugin.slices import quantity as qty

Consumed = dict[str, qty.Quantity]


class CapacityError(ValueError):
    """A request the device's range arithmetic cannot represent, or a negative result."""


def _q(v: Any) -> qty.Quantity | None:
    return None if v is None else qty.parse(v)


def _milli_ok(q: qty.Quantity) -> bool:
    milli = q.milli()
    return milli == milli.to_integral_value()


def _use_milli(rng: Mapping[str, Any]) -> bool:
    for key in ("min", "max", "step"):
        v = _q(rng.get(key))
        if v is None:
            continue
        if not _milli_ok(v):
            return False
        if key == "step" and v.ceil_milli() < 1:
            return False
    return True


def _round_up_range(req: qty.Quantity, rng: Mapping[str, Any]) -> qty.Quantity:
    lo = qty.parse(rng["min"])
    if req.value < lo.value:
        return lo
    step = _q(rng.get("step"))
    if step is None:
        return req
    milli = _use_milli(rng)
    if milli and not _milli_ok(req):
        raise CapacityError(f"request {req} is not a representable milli value")
    if milli:
        r, s, m = req.ceil_milli(), step.ceil_milli(), lo.ceil_milli()
    else:
        r, s, m = req.ceil_int(), step.ceil_int(), lo.ceil_int()
    n = -((m - r) // s)  # ceil((r - m) / s) in integers
    return qty.Quantity(Decimal(f"{m + s * n}e{-3 if milli else 0}"), req.format)


def consumed_by(request: Mapping[str, Any] | None, cap: Mapping[str, Any],
                name: str) -> qty.Quantity:
    """What a request (``capacity.requests``) consumes of one device capacity ``cap``."""
    policy = cap.get("requestPolicy") or {}
    wanted = ((request or {}).get("requests") or {}).get(name)
    if wanted is None:
        default = _q(policy.get("default"))
        return default if default is not None else qty.parse(cap.get("value", "0"))
    req = qty.parse(wanted)
    if not policy:
        return req
    rng = policy.get("validRange")
    if rng and rng.get("min") is not None:
        return _round_up_range(req, rng)
    values = policy.get("validValues")
    if values:
        for v in (qty.parse(x) for x in values):
            if req.value <= v.value:
                return v
    return req


def _violates(v: qty.Quantity, policy: Mapping[str, Any]) -> bool:
    if not policy:
        return False
    default = _q(policy.get("default"))
    if default is not None and default.value == v.value:
        return False
    rng = policy.get("validRange")
    if rng:
        mx = _q(rng.get("max"))
        if mx is not None and v.value > mx.value:
            return True
        step = _q(rng.get("step"))
        if step is not None:
            lo = qty.parse(rng["min"])
            if _use_milli(rng):
                if not _milli_ok(v):
                    return True
                return (v.ceil_milli() - lo.ceil_milli()) % step.ceil_milli() != 0
            return (v.ceil_int() - lo.ceil_int()) % step.ceil_int() != 0
        return False
    values = policy.get("validValues")
    if values:
        return all(qty.parse(x).value != v.value for x in values)
    return False


def _policy_text(policy: Mapping[str, Any]) -> str:
    """A requestPolicy as a reason shows it: ``validRange min 1, max 3, step 1`` (the fields
    it has), ``validValues 1G, 2G``."""
    rng = policy.get("validRange")
    if rng:
        return "validRange " + ", ".join(f"{k} {rng[k]}" for k in ("min", "max", "step")
                                         if rng.get(k) is not None)
    return "validValues " + ", ".join(str(v) for v in policy.get("validValues") or [])


def _asked(use: qty.Quantity, request: Mapping[str, Any] | None, name: str,
           cap: Mapping[str, Any]) -> str:
    """What a request consumes of a capacity, written like the amount it comes from."""
    like = (((request or {}).get("requests") or {}).get(name)
            or (cap.get("requestPolicy") or {}).get("default") or cap.get("value", "0"))
    return qty.as_published(use, like)


def fits(request: Mapping[str, Any] | None, device: Mapping[str, Any],
         already: Consumed, allocating: Consumed) -> tuple[bool, str]:
    """(fits, why not). ``already``: consumed by allocated claims; ``allocating``: by this
    allocation so far."""
    caps = device.get("capacity") or {}
    for name in ((request or {}).get("requests") or {}):
        if name not in caps:
            return False, f"capacity {name} is not a capacity of the device"
    for name, cap in caps.items():
        use = consumed_by(request, cap, name)
        if use.value < 0:
            raise CapacityError(f"capacity {name!r}: capacity value is negative")
        policy = cap.get("requestPolicy") or {}
        published = cap.get("value", "0")  # amounts print as the slice and claim wrote them
        if _violates(use, policy):
            return False, (f"capacity {name}: {_asked(use, request, name, cap)} is not "
                           f"allowed by its requestPolicy ({_policy_text(policy)})")
        taken = already.get(name, qty.ZERO) + allocating.get(name, qty.ZERO)
        value = qty.parse(published)
        if (use + taken).value > value.value:
            return False, (f"capacity {name}: {_asked(use, request, name, cap)} requested, "
                           f"{qty.as_published(value - taken, published)} of "
                           f"{qty.as_published(value, published)} left")
    return True, ""


def consumption(request: Mapping[str, Any] | None, device: Mapping[str, Any]) -> Consumed:
    return {name: consumed_by(request, cap, name)
            for name, cap in (device.get("capacity") or {}).items()}
