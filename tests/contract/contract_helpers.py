"""Shared parts of the kubelet-contract tests: a controllable discovery plugin, the crash
invariants, and small helpers around the harness."""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from drakit.cdi.store import SpecStore
from drakit.discovery.model import Device, DeviceHealth, Pool
from drakit.discovery.plugin import (
    DeviceRequest,
    DiscoveryContext,
    DiscoveryPlugin,
    PreparedDevice,
    UnprepareRequest,
)
from drakit.plugin.claims.checkpoint import Checkpoint

DRIVER = "drakit.example.com"
NODE = "node-1"
POOL = "pool-c"


class ControlledPlugin(DiscoveryPlugin):
    """Devices from a list the test changes; health the test sets; ``gate(request)`` runs
    inside every prepare (block, wait on a barrier, raise); every hook call is counted."""

    name: ClassVar[str] = "contract"

    def __init__(self, names: Iterable[str], pool: str = POOL,
                 multi: Iterable[str] = ()) -> None:
        super().__init__(DiscoveryContext(driver_name=DRIVER, node_name=NODE))
        self.pool = pool
        self.names = list(names)
        self.multi = set(multi)
        self.unhealthy: dict[tuple[str, str], DeviceHealth] = {}
        self.gate: Callable[[DeviceRequest], None] | None = None
        self._lock = threading.Lock()
        self.prepared: list[tuple[str, str]] = []  # (claim uid, device)
        self.unprepared: list[tuple[str, str]] = []

    def discover(self) -> list[Pool]:
        return [Pool(name=self.pool, devices=[
            Device(name=n, allow_multiple_allocations=True if n in self.multi else None)
            for n in self.names
        ])]

    def prepare(self, request: DeviceRequest) -> PreparedDevice:
        with self._lock:
            self.prepared.append((request.claim.uid, request.device.name))
        if self.gate is not None:
            self.gate(request)
        return super().prepare(request)

    def unprepare(self, request: UnprepareRequest) -> None:
        with self._lock:
            self.unprepared.append((request.claim.uid, request.device))

    def health(self) -> dict[tuple[str, str], DeviceHealth]:
        return dict(self.unhealthy)


@dataclass
class Violations:
    """The crash-consistency invariants, each a list of offending claim UIDs or
    devices."""

    kubelet_prepared_missing: list[str] = field(default_factory=list)
    entry_without_cdi: list[str] = field(default_factory=list)
    cdi_without_entry: list[str] = field(default_factory=list)
    device_double_prepared: list[str] = field(default_factory=list)

    def counts(self) -> tuple[int, int, int, int]:
        return (len(self.kubelet_prepared_missing), len(self.entry_without_cdi),
                len(self.cdi_without_entry), len(self.device_double_prepared))

    def __bool__(self) -> bool:
        return any(self.counts())

    def add(self, other: Violations) -> None:
        self.kubelet_prepared_missing += other.kubelet_prepared_missing
        self.entry_without_cdi += other.entry_without_cdi
        self.cdi_without_entry += other.cdi_without_entry
        self.device_double_prepared += other.device_double_prepared


def check_invariants(checkpoint_path: Path, cdi_dir: Path, believed_prepared: Iterable[str],
                     driver: str = DRIVER) -> Violations:
    """Read the checkpoint and the CDI dir from disk and check: every claim the kubelet
    believes prepared is completed in the checkpoint with its CDI file; every checkpoint
    entry has its CDI file; no CDI file of this driver without an entry; no device recorded
    for two claims (adminAccess results excepted)."""
    state = Checkpoint(checkpoint_path).state()
    specs = set(SpecStore(cdi_dir, driver, "device").list_specs())
    v = Violations()
    for uid in sorted(set(believed_prepared)):
        rec = state.claims.get(uid)
        if rec is None or rec.phase != "PrepareCompleted" or uid not in specs:
            v.kubelet_prepared_missing.append(uid)
    v.entry_without_cdi = sorted(uid for uid in state.claims if uid not in specs)
    v.cdi_without_entry = sorted(uid for uid in specs if uid not in state.claims)
    holders: dict[tuple[str, str], list[str]] = {}
    for uid, rec in state.claims.items():
        for d in rec.devices:
            if not d.admin_access:
                holders.setdefault((d.pool, d.device), []).append(uid)
    v.device_double_prepared = sorted(
        f"{pool}/{dev}: {','.join(uids)}" for (pool, dev), uids in holders.items()
        if len(uids) > 1
    )
    return v


def lock_free(lock_path: Path | str) -> bool:
    """True when nobody holds the ``flock`` of ``lock_path`` (the checkpoint's file lock),
    probed on a descriptor of its own, which a holder in this process blocks too."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # closing drops the probe's lock
    return True


def uid_of(claim: dict[str, Any]) -> str:
    return str(claim["metadata"]["uid"])
