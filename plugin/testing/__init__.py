"""Test kit shipped with drakit: a fake kubelet and an embedded Kubernetes API server.

Both work over the real wire (unix-socket gRPC, HTTP + JSON), so vendors can test their own
drivers with them. pytest fixtures: :mod:`plugin.testing.pytest_plugin`.
"""

from plugin.testing.apiserver import (
    AllocatedDevice,
    ApiError,
    EmbeddedAPIServer,
    FaultPlan,
    RequestRecord,
    apiserver_main,
)
from plugin.testing.fake_kubelet import (
    ClaimPrepareResult,
    DeviceHealthReport,
    FakeKubelet,
    HealthWatch,
    KubeletCallError,
    KubeletCheckError,
    PreparedDeviceResult,
    RegisteredPlugin,
    Rejection,
    choose_dra_version,
    fake_kubelet_main,
)
from plugin.testing.harness import DriverHarness

__all__ = [
    "AllocatedDevice",
    "ApiError",
    "ClaimPrepareResult",
    "DeviceHealthReport",
    "DriverHarness",
    "EmbeddedAPIServer",
    "FakeKubelet",
    "FaultPlan",
    "HealthWatch",
    "KubeletCallError",
    "KubeletCheckError",
    "PreparedDeviceResult",
    "RegisteredPlugin",
    "Rejection",
    "RequestRecord",
    "apiserver_main",
    "choose_dra_version",
    "fake_kubelet_main",
]
