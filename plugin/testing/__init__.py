"""Test kit shipped with drakit: a fake kubelet and an embedded Kubernetes API server.

Both work over the real wire (unix-socket gRPC, HTTP + JSON), so vendors can test their own
drivers with them. pytest fixtures: :mod:`plugin.testing.pytest_plugin`.
"""

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

# --- embedded API server (plugin/testing/apiserver.py) -----------------------------------
# Its author adds the import of its public names here and extends __all__ below.

__all__ = [
    "ClaimPrepareResult",
    "DeviceHealthReport",
    "FakeKubelet",
    "HealthWatch",
    "KubeletCallError",
    "KubeletCheckError",
    "PreparedDeviceResult",
    "RegisteredPlugin",
    "Rejection",
    "choose_dra_version",
    "fake_kubelet_main",
]
