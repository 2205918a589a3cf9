"""Test kit shipped with drakit: a fake kubelet and an embedded Kubernetes API server.

Both work over the real wire (unix-socket gRPC, HTTP + JSON), so vendors can test their own
drivers with them; :class:`RealAPIServer` starts a real etcd + kube-apiserver 1.37 instead
(:mod:`drakit.plugin.testing.realcluster`). pytest fixtures:
:mod:`drakit.plugin.testing.pytest_plugin`.
"""

from drakit.plugin.testing.apiserver import (
    AllocatedDevice,
    ApiError,
    EmbeddedAPIServer,
    FaultPlan,
    RequestRecord,
    apiserver_main,
)
from drakit.plugin.testing.fake_kubelet import (
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
from drakit.plugin.testing.harness import DriverHarness
from drakit.plugin.testing.realcluster import (
    RealAPIServer,
    RealClusterError,
    find_k8s_bin_dir,
    start_real_apiserver,
)

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
    "RealAPIServer",
    "RealClusterError",
    "RegisteredPlugin",
    "Rejection",
    "RequestRecord",
    "apiserver_main",
    "choose_dra_version",
    "fake_kubelet_main",
    "find_k8s_bin_dir",
    "start_real_apiserver",
]
