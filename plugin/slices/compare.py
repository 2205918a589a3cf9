"""Content keys for ResourceSlice specs: equal keys mean "nothing to write".

The API server may spell a slice differently from how it was sent: quantities come back
canonical (``1024Mi`` → ``1Gi``), empty lists and maps are left out, and a taint without
``timeAdded`` gets one. :func:`content_key` removes those differences, and the pool's
``generation`` / ``resourceSliceCount`` (the publisher compares them separately).
"""

from __future__ import annotations

import json
from typing import Any

from drakit.plugin.slices.quantity import normalized


def _prune(value: Any) -> Any:
    """Drop None, empty lists and empty maps, recursively."""
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for k, v in value.items():
            if isinstance(v, (dict, list)):
                v = _prune(v)
                if not v:
                    continue
            elif v is None:
                continue
            out[k] = v
        return out
    if isinstance(value, list):
        return [_prune(v) if isinstance(v, (dict, list)) else v for v in value]
    return value


class _Quantities:
    """Normalized quantity texts, memoized for one content_key call."""

    def __init__(self) -> None:
        self._seen: dict[Any, str] = {}

    def __call__(self, text: Any) -> str:
        key = (type(text), text)
        got = self._seen.get(key)
        if got is None:
            got = self._seen[key] = normalized(text)
        return got


def _counters(counters: Any, norm: _Quantities) -> Any:
    if not isinstance(counters, dict):
        return counters
    return {k: ({**c, "value": norm(c["value"])} if isinstance(c, dict) and "value" in c
                else c) for k, c in counters.items()}


def _capacity(capacity: Any, norm: _Quantities) -> Any:
    if not isinstance(capacity, dict):
        return capacity
    out: dict[str, Any] = {}
    for k, cap in capacity.items():
        if not isinstance(cap, dict):
            out[k] = cap
            continue
        cap = dict(cap)
        if "value" in cap:
            cap["value"] = norm(cap["value"])
        policy = cap.get("requestPolicy")
        if isinstance(policy, dict):
            policy = dict(policy)
            if policy.get("default") is not None:
                policy["default"] = norm(policy["default"])
            if isinstance(policy.get("validValues"), list):
                policy["validValues"] = [norm(v) for v in policy["validValues"]]
            if isinstance(policy.get("validRange"), dict):
                policy["validRange"] = {k2: norm(v) if v is not None else None
                                        for k2, v in policy["validRange"].items()}
            cap["requestPolicy"] = policy
        out[k] = cap
    return out


def _device(device: Any, norm: _Quantities) -> Any:
    if not isinstance(device, dict):
        return device
    d = dict(device)
    if "capacity" in d:
        d["capacity"] = _capacity(d["capacity"], norm)
    if isinstance(d.get("consumesCounters"), list):
        d["consumesCounters"] = [
            {**c, "counters": _counters(c.get("counters"), norm)} if isinstance(c, dict) else c
            for c in d["consumesCounters"]]
    if isinstance(d.get("taints"), list):
        d["taints"] = [{k: v for k, v in t.items() if k != "timeAdded"}
                       if isinstance(t, dict) else t for t in d["taints"]]
    if isinstance(d.get("nodeAllocatableResources"), dict):
        d["nodeAllocatableResources"] = {
            r: {part: {k: norm(v) if k != "capacityKey" and v is not None else v
                       for k, v in fields.items()} if isinstance(fields, dict) else fields
                for part, fields in entry.items()} if isinstance(entry, dict) else entry
            for r, entry in d["nodeAllocatableResources"].items()}
    return d


def content_key(spec: dict[str, Any]) -> str:
    """A canonical JSON string of a slice spec without pool generation and count."""
    norm = _Quantities()
    s = dict(spec)
    pool = s.get("pool")
    if isinstance(pool, dict):
        s["pool"] = {"name": pool.get("name")}
    if isinstance(s.get("devices"), list):
        s["devices"] = [_device(d, norm) for d in s["devices"]]
    if isinstance(s.get("sharedCounters"), list):
        s["sharedCounters"] = [{**cs, "counters": _counters(cs.get("counters"), norm)}
                               if isinstance(cs, dict) else cs for cs in s["sharedCounters"]]
    return json.dumps(_prune(s), sort_keys=True, separators=(",", ":"))


def differing_fields(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Top-level spec fields, and device fields (``devices[].<field>``), whose content
    differs between two specs (for log messages about fields the server changed)."""
    pa, pb = json.loads(content_key(a)), json.loads(content_key(b))
    out = sorted(k for k in set(pa) | set(pb) if k != "devices" and pa.get(k) != pb.get(k))
    da = {d.get("name"): d for d in pa.get("devices", []) if isinstance(d, dict)}
    db = {d.get("name"): d for d in pb.get("devices", []) if isinstance(d, dict)}
    fields: set[str] = set()
    for name in set(da) | set(db):
        x, y = da.get(name, {}), db.get(name, {})
        fields.update(f"devices[].{k}" for k in set(x) | set(y) if x.get(k) != y.get(k))
    return out + sorted(fields)


def carry_time_added(desired: dict[str, Any], existing: dict[str, Any]) -> dict[str, Any]:
    """Copy the server's ``timeAdded`` of unchanged taints into ``desired`` (so an update
    does not restart the taint's clock); returns a new spec."""
    old = {d.get("name"): d for d in existing.get("devices") or [] if isinstance(d, dict)}
    out = dict(desired)
    devices = []
    for d in desired.get("devices") or []:
        prev = old.get(d.get("name"))
        if not d.get("taints") or not prev or not prev.get("taints"):
            devices.append(d)
            continue
        stamps = {(t.get("key"), t.get("value"), t.get("effect")): t.get("timeAdded")
                  for t in prev["taints"] if isinstance(t, dict)}
        taints = []
        for t in d["taints"]:
            stamp = stamps.get((t.get("key"), t.get("value"), t.get("effect")))
            taints.append({**t, "timeAdded": stamp} if stamp and not t.get("timeAdded") else t)
        devices.append({**d, "taints": taints})
    if "devices" in desired:
        out["devices"] = devices
    return out


class ServerKeys:
    """:func:`content_key` of listed slices, reused while a slice's ``metadata.uid`` and
    ``resourceVersion`` stay the same (the API server changes the resourceVersion at every
    write, so an equal pair means an equal spec). :meth:`next_round` starts a sync: the
    keys of slices not seen in the previous round are dropped. Not thread-safe (one sync at
    a time uses it)."""

    def __init__(self) -> None:
        self._prev: dict[tuple[str, str], str] = {}
        self._now: dict[tuple[str, str], str] = {}

    def next_round(self) -> None:
        self._prev, self._now = self._now, {}

    def __call__(self, obj: dict[str, Any]) -> str:
        meta = obj.get("metadata") or {}
        uid, rv = meta.get("uid"), meta.get("resourceVersion")
        if not uid or not rv:
            return content_key(obj["spec"])
        ident = (str(uid), str(rv))
        key = self._prev.get(ident) or self._now.get(ident)
        if key is None:
            key = content_key(obj["spec"])
        self._now[ident] = key
        return key
