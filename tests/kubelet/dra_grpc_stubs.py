"""Small in-test NodeService / HealthSource stand-ins for the gRPC-layer tests.

The real node logic lives elsewhere; these only record calls and answer predictably.
"""

from __future__ import annotations

import threading

from drakit.discovery.plugin import ClaimRef
from drakit.plugin.types import DeviceHealthEntry, PreparedDeviceRef, PrepareResult

#: The driver name the gRPC-layer tests use.
DRIVER = "gpu.example.com"


class StubNodeService:
    """Prepares every claim to one device ``dev-<claim name>`` in pool ``pool-a``.

    ``fail_uids``: claims answered with an error. ``raise_exc``: raised from both methods.
    Claims whose name starts with ``shared`` get ``share_id="share-1"``.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.prepare_calls: list[list[ClaimRef]] = []
        self.unprepare_calls: list[list[ClaimRef]] = []
        self.fail_uids: set[str] = set()
        self.raise_exc: Exception | None = None
        self.answer_override: dict[str, PrepareResult] | None = None

    def prepare_claims(self, claims: list[ClaimRef],
                       deadline: float | None = None) -> dict[str, PrepareResult]:
        with self.lock:
            self.prepare_calls.append(list(claims))
        if self.raise_exc is not None:
            raise self.raise_exc
        if self.answer_override is not None:
            return self.answer_override
        out: dict[str, PrepareResult] = {}
        for c in claims:
            if c.uid in self.fail_uids:
                out[c.uid] = PrepareResult(error=f"claim {c.namespace}/{c.name}: simulated failure")
                continue
            out[c.uid] = PrepareResult(
                devices=[
                    PreparedDeviceRef(
                        request_names=("gpu",),
                        pool_name="pool-a",
                        device_name=f"dev-{c.name}",
                        cdi_device_ids=(f"example.com/gpu={c.uid}-dev",),
                        share_id="share-1" if c.name.startswith("shared") else None,
                    )
                ]
            )
        return out

    def unprepare_claims(self, claims: list[ClaimRef],
                         deadline: float | None = None) -> dict[str, str]:
        with self.lock:
            self.unprepare_calls.append(list(claims))
        if self.raise_exc is not None:
            raise self.raise_exc
        return {
            c.uid: (f"claim {c.name}: simulated failure" if c.uid in self.fail_uids else "")
            for c in claims
        }


class StubHealthSource:
    """A settable device list with a change counter."""

    def __init__(self, entries: list[DeviceHealthEntry] | None = None) -> None:
        self._cond = threading.Condition()
        self._entries = list(entries or [])
        self.version = 0

    def set(self, entries: list[DeviceHealthEntry]) -> None:
        with self._cond:
            self._entries = list(entries)
            self.version += 1
            self._cond.notify_all()

    def health_snapshot(self) -> list[DeviceHealthEntry]:
        with self._cond:
            return list(self._entries)

    def wait_for_health_change(self, version: int, timeout: float) -> int:
        with self._cond:
            self._cond.wait_for(lambda: self.version != version, timeout)
            return self.version
