"""The kubelet-facing gRPC layer: registration, DRA node service, dra-health, sockets.

Public entry point: :class:`PluginServer`. Everything here speaks protobuf on one side and
the version-neutral :mod:`drakit.plugin.types` on the other.
"""

from drakit.plugin.kubelet.dra import DraNodeServicer
from drakit.plugin.kubelet.health import HealthStreamServicer, truncate_message
from drakit.plugin.kubelet.registration import (
    RegistrationServicer,
    RegistrationState,
    RegistrationStatus,
)
from drakit.plugin.kubelet.server import PluginServer
from drakit.plugin.kubelet.sockets import (
    SocketInUseError,
    SocketPathError,
    SocketPaths,
    dra_socket_path,
    registration_socket_path,
)

__all__ = [
    "DraNodeServicer",
    "HealthStreamServicer",
    "PluginServer",
    "RegistrationServicer",
    "RegistrationState",
    "RegistrationStatus",
    "SocketInUseError",
    "SocketPathError",
    "SocketPaths",
    "dra_socket_path",
    "registration_socket_path",
    "truncate_message",
]
