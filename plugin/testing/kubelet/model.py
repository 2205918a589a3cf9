"""The fake kubelet's wire-facing types and rules (:mod:`drakit.plugin.testing.kubelet.fake`):
the deadlines it uses, the results it returns (registered plugins, rejections, prepare
answers, health reports) and the node-API version choice of a kubelet of a given version
(the kubelet's DRA plugin validation, Kubernetes 1.34: v1.DRAPlugin first, KEP-4381).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from drakit.discovery.plugin import ClaimRef
from drakit.plugin.kubelet.protocol import DRA_V1, DRA_V1BETA1

#: Per-call deadline of NodePrepareResources / NodeUnprepareResources (kubelet default).
CALL_TIMEOUT = 45.0
#: Deadline of GetInfo during registration.
GET_INFO_TIMEOUT = 1.0
#: Deadline of NotifyRegistrationStatus.
NOTIFY_TIMEOUT = 5.0
#: Blocking dial timeout for the registration socket.
DIAL_TIMEOUT = 10.0

ClaimLike = ClaimRef | tuple[str, str, str]


@dataclass(frozen=True)
class RegisteredPlugin:
    """One registered plugin instance as the fake kubelet knows it.

    ``dra_version`` is the chosen registration string (``v1.DRAPlugin`` /
    ``v1beta1.DRAPlugin``); ``health_versions`` the advertised health strings in order.
    """

    driver_name: str
    endpoint: str
    registration_socket: str
    dra_version: str
    health_versions: tuple[str, ...]
    supported_versions: tuple[str, ...]
    registered_at: float


@dataclass(frozen=True)
class Rejection:
    """A registration the fake kubelet refused, with the reason it sent to the plugin."""

    registration_socket: str
    driver_name: str
    reason: str
    at: float


@dataclass(frozen=True)
class PreparedDeviceResult:
    """One ``Device`` of a prepare answer; ``share_id`` is None when absent (always for v1beta1)."""

    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None = None


@dataclass(frozen=True)
class ClaimPrepareResult:
    """The answer for one claim: devices, or a non-empty ``error``."""

    devices: tuple[PreparedDeviceResult, ...] = ()
    error: str = ""

    @property
    def cdi_device_ids(self) -> list[str]:
        return [i for d in self.devices for i in d.cdi_device_ids]


@dataclass(frozen=True)
class DeviceHealthReport:
    """One device of a health message; ``health`` is ``Healthy`` / ``Unhealthy`` / ``Unknown``."""

    pool_name: str
    device_name: str
    health: str
    last_updated_time: int
    health_check_timeout_seconds: int
    message: str


def parse_kubelet_version(version: str) -> tuple[int, int]:
    """``"1.34"`` / ``"v1.33.2"`` → (1, 34). Raises ValueError."""
    parts = version.strip().lstrip("v").split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        raise ValueError(f"kubelet version {version!r}: expected MAJOR.MINOR") from None


def choose_dra_version(kubelet_version: str, supported_versions: Sequence[str]) -> str:
    """The node-API registration string a kubelet of ``kubelet_version`` would use.

    Raises ValueError with a kubelet-like reason when it would not (or, for the v1alpha4
    fallback of 1.32/1.33, could not in this fake) register the plugin.
    """
    major, minor = parse_kubelet_version(kubelet_version)
    if not supported_versions:
        raise ValueError("empty list of supported versions")
    if (major, minor) >= (1, 34):
        for entry in supported_versions:
            if entry in (DRA_V1, DRA_V1BETA1):
                return entry
        raise ValueError(
            f"none of the versions {list(supported_versions)} are supported by the kubelet,"
            f" which supports {[DRA_V1, DRA_V1BETA1]}"
        )
    if (major, minor) in ((1, 32), (1, 33)):
        if DRA_V1BETA1 in supported_versions:
            return DRA_V1BETA1
        raise ValueError(
            f"kubelet {major}.{minor} would use the v1alpha4 API (v1alpha3.Node) for"
            f" {list(supported_versions)}; the fake kubelet does not implement it"
        )
    raise ValueError(f"kubelet {kubelet_version} has no DRA v1/v1beta1 support")


def claim_tuple(claim: ClaimLike) -> tuple[str, str, str]:
    if isinstance(claim, ClaimRef):
        return claim.namespace, claim.name, claim.uid
    namespace, name, uid = claim
    return namespace, name, uid
