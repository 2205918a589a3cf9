"""The test kit shipped with drakit, by job:

- :mod:`drakit.plugin.testing.apiserver`: the embedded Kubernetes API server
  (:class:`EmbeddedAPIServer`: store, validation, HTTP, watch, apply, fixtures, CLI);
- :mod:`drakit.plugin.testing.kubelet`: the fake kubelet (:class:`FakeKubelet`:
  registration, calls, health, CLI);
- :mod:`drakit.plugin.testing.real`: a real etcd + kube-apiserver 1.37
  (:class:`RealAPIServer`) and a real kubelet node (:class:`RealNode`);
- :mod:`drakit.plugin.testing.harness` (:class:`DriverHarness`: a driver, an API server and
  a fake kubelet in one), :mod:`drakit.plugin.testing.faultproxy` (:class:`FaultProxy`) and
  :mod:`drakit.plugin.testing.pytest_plugin` (the fixtures).

The names below are loaded on first use (PEP 562), so importing this package (as the pytest
plugin does) costs nothing until a name is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from drakit.plugin.testing.apiserver.claims import AllocatedDevice
    from drakit.plugin.testing.apiserver.cli import apiserver_main
    from drakit.plugin.testing.apiserver.errors import ApiError
    from drakit.plugin.testing.apiserver.faults import FaultPlan
    from drakit.plugin.testing.apiserver.requestlog import RequestRecord
    from drakit.plugin.testing.apiserver.server import EmbeddedAPIServer
    from drakit.plugin.testing.faultproxy import Fault, FaultProxy
    from drakit.plugin.testing.harness import DriverHarness
    from drakit.plugin.testing.kubelet import (
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
    from drakit.plugin.testing.real.binaries import find_k8s_bin_dir
    from drakit.plugin.testing.real.controlplane import RealAPIServer, start_real_apiserver
    from drakit.plugin.testing.real.node import RealNode
    from drakit.plugin.testing.real.process import RealClusterError

#: public name → the module that defines it
_PUBLIC: dict[str, str] = {
    "AllocatedDevice": "apiserver.claims",
    "ApiError": "apiserver.errors",
    "EmbeddedAPIServer": "apiserver.server",
    "FaultPlan": "apiserver.faults",
    "RequestRecord": "apiserver.requestlog",
    "apiserver_main": "apiserver.cli",
    "ClaimPrepareResult": "kubelet.model",
    "DeviceHealthReport": "kubelet.model",
    "PreparedDeviceResult": "kubelet.model",
    "RegisteredPlugin": "kubelet.model",
    "Rejection": "kubelet.model",
    "choose_dra_version": "kubelet.model",
    "FakeKubelet": "kubelet.fake",
    "HealthWatch": "kubelet.health",
    "KubeletCallError": "kubelet.calls",
    "KubeletCheckError": "kubelet.calls",
    "fake_kubelet_main": "kubelet.cli",
    "DriverHarness": "harness",
    "Fault": "faultproxy",
    "FaultProxy": "faultproxy",
    "RealAPIServer": "real.controlplane",
    "start_real_apiserver": "real.controlplane",
    "RealClusterError": "real.process",
    "find_k8s_bin_dir": "real.binaries",
    "RealNode": "real.node",
}

__all__ = [
    "AllocatedDevice",
    "ApiError",
    "ClaimPrepareResult",
    "DeviceHealthReport",
    "DriverHarness",
    "EmbeddedAPIServer",
    "FakeKubelet",
    "Fault",
    "FaultPlan",
    "FaultProxy",
    "HealthWatch",
    "KubeletCallError",
    "KubeletCheckError",
    "PreparedDeviceResult",
    "RealAPIServer",
    "RealClusterError",
    "RealNode",
    "RegisteredPlugin",
    "Rejection",
    "RequestRecord",
    "apiserver_main",
    "choose_dra_version",
    "fake_kubelet_main",
    "find_k8s_bin_dir",
    "start_real_apiserver",
]


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
