"""What other claims already hold (the scheduler's AllocatedState, Kubernetes 1.37): devices
allocated exclusively; devices shared through consumable capacity (a ``shareID``) with the
capacity they consumed, summed per device. Admin-access allocations hold nothing."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from drakit.plugin.slices import quantity as qty


@dataclass
class AllocatedState:
    devices: set[tuple[str, str, str]] = field(default_factory=set)
    shared: set[tuple[str, str, str]] = field(default_factory=set)
    capacity: dict[tuple[str, str, str], dict[str, qty.Quantity]] = field(default_factory=dict)
    holders: dict[tuple[str, str, str], list[str]] = field(default_factory=dict)

    def allocated(self, dev: tuple[str, str, str]) -> bool:
        """Counts against counters (IsDeviceAllocated)."""
        return dev in self.devices or dev in self.shared or dev in self.capacity


def from_claims(claims: Iterable[Mapping[str, Any]], skip_uid: str = "") -> AllocatedState:
    st = AllocatedState()
    for c in claims:
        meta = c.get("metadata") or {}
        if skip_uid and meta.get("uid") == skip_uid:
            continue
        alloc = (c.get("status") or {}).get("allocation") or {}
        who = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        for r in (alloc.get("devices") or {}).get("results") or []:
            dev = (r.get("driver", ""), r.get("pool", ""), r.get("device", ""))
            if r.get("shareID"):
                st.shared.add(dev)
                used = st.capacity.setdefault(dev, {})
                for name, v in (r.get("consumedCapacity") or {}).items():
                    used[name] = used.get(name, qty.ZERO) + qty.parse(v)
            elif not r.get("adminAccess"):
                st.devices.add(dev)
            else:
                continue
            st.holders.setdefault(dev, []).append(who)
    return st
