"""Names of the kubelet plugin protocol: registration strings and the stub modules per version.

Strings from k8s.io/kubelet pkg/apis/dra/v1/types.go (``DRAPluginService``) and
pkg/apis/dra-health: the ``supported_versions``
entries are ``<proto short package>.<Service>``, which for the DRA node service is *not* the
gRPC service name (``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin``).
"""

from __future__ import annotations

from types import ModuleType
from typing import Final

from drakit.plugin._proto.dra.v1 import api_pb2 as dra_v1_pb2
from drakit.plugin._proto.dra.v1 import api_pb2_grpc as dra_v1_grpc
from drakit.plugin._proto.dra.v1beta1 import api_pb2 as dra_v1beta1_pb2
from drakit.plugin._proto.dra.v1beta1 import api_pb2_grpc as dra_v1beta1_grpc
from drakit.plugin._proto.dra_health.v1 import api_pb2 as health_v1_pb2
from drakit.plugin._proto.dra_health.v1 import api_pb2_grpc as health_v1_grpc
from drakit.plugin._proto.dra_health.v1alpha1 import api_pb2 as health_v1alpha1_pb2
from drakit.plugin._proto.dra_health.v1alpha1 import api_pb2_grpc as health_v1alpha1_grpc

#: ``PluginInfo.type`` of a DRA driver.
DRA_PLUGIN_TYPE: Final = "DRAPlugin"

DRA_V1: Final = "v1.DRAPlugin"
DRA_V1BETA1: Final = "v1beta1.DRAPlugin"
HEALTH_V1: Final = "v1.DRAResourceHealth"
HEALTH_V1ALPHA1: Final = "v1alpha1.DRAResourceHealth"

#: DRA node-service versions drakit serves, in the order advertised (kubelet 1.34+ takes the
#: first entry it supports, so v1 comes first).
DRA_SERVICES: Final = (DRA_V1, DRA_V1BETA1)
#: Health-service versions drakit serves, in the order advertised (after the DRA ones).
HEALTH_SERVICES: Final = (HEALTH_V1, HEALTH_V1ALPHA1)

#: Registration string → (messages module, gRPC module) for the DRA node service.
DRA_MODULES: Final[dict[str, tuple[ModuleType, ModuleType]]] = {
    DRA_V1: (dra_v1_pb2, dra_v1_grpc),
    DRA_V1BETA1: (dra_v1beta1_pb2, dra_v1beta1_grpc),
}
#: Registration string → (messages module, gRPC module) for dra-health.
HEALTH_MODULES: Final[dict[str, tuple[ModuleType, ModuleType]]] = {
    HEALTH_V1: (health_v1_pb2, health_v1_grpc),
    HEALTH_V1ALPHA1: (health_v1alpha1_pb2, health_v1alpha1_grpc),
}


def supported_versions(health_enabled: bool) -> list[str]:
    """``PluginInfo.supported_versions``: the DRA services, then the health services if on."""
    return [*DRA_SERVICES, *(HEALTH_SERVICES if health_enabled else ())]


def grpc_service_name(registration_string: str) -> str:
    """The full gRPC service name behind a registration string (for health checking)."""
    modules = DRA_MODULES.get(registration_string) or HEALTH_MODULES.get(registration_string)
    if modules is None:
        raise KeyError(registration_string)
    pb2 = modules[0]
    service = next(iter(pb2.DESCRIPTOR.services_by_name.values()))
    return str(service.full_name)
