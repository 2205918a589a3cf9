"""Version-neutral types between the gRPC servers and the node logic.

The gRPC layer (drakit.plugin.kubelet) converts v1 / v1beta1 messages to and from these; the node
logic (drakit.plugin.claims.node) never sees a protobuf message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from drakit.discovery.plugin import ClaimRef


@dataclass(frozen=True)
class PreparedDeviceRef:
    """One device in a NodePrepareResources answer (gRPC ``Device``).

    ``request_names`` holds base request names (``main`` for ``main/sub``); ``share_id`` is
    sent only in v1 (field 5) and dropped for v1beta1.
    """

    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None = None


@dataclass
class PrepareResult:
    """The answer for one claim: its devices, or a non-empty ``error``.

    Neither of the last two fields is sent to the kubelet nor compared: ``cause`` is the
    exception behind ``error`` when a vendor hook (or drakit) raised one, whose traceback
    goes into the claim's one failure line; ``reused`` is True for a claim answered from
    its checkpoint record (prepared by an earlier call)."""

    devices: list[PreparedDeviceRef] = field(default_factory=list)
    error: str = ""
    cause: BaseException | None = field(default=None, compare=False, repr=False)
    reused: bool = field(default=False, compare=False, repr=False)


class NodeService(Protocol):
    """What the DRA gRPC servers call. Both methods answer exactly one entry per claim UID
    in the request and never raise for one bad claim."""

    def prepare_claims(self, claims: list[ClaimRef], *,
                       deadline: float | None = None) -> dict[str, PrepareResult]:
        """``deadline``: ``time.monotonic()`` seconds by which the answer must be ready
        (the call's gRPC deadline minus a margin to send it; None: a default)."""
        ...

    def unprepare_claims(self, claims: list[ClaimRef], *,
                         deadline: float | None = None) -> dict[str, str]:
        """Map claim UID → error string ("" on success)."""
        ...


@dataclass(frozen=True)
class DeviceHealthEntry:
    """One device in a health stream message. ``state`` is Healthy / Unhealthy / Unknown."""

    pool_name: str
    device_name: str
    state: str
    message: str = ""
    last_updated: int = 0


class HealthSource(Protocol):
    """The health state of this driver's devices, for the dra-health stream."""

    def health_snapshot(self) -> list[DeviceHealthEntry]:
        """The complete current device list of this driver with health."""
        ...

    def wait_for_health_change(self, version: int, timeout: float) -> int:
        """Block until the health version differs from ``version`` or ``timeout`` seconds
        pass; return the current version."""
        ...
