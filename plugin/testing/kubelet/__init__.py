"""The fake kubelet (:class:`FakeKubelet`), by job: :mod:`~.fake` (the kubelet: lifecycle,
restarts, queries), :mod:`~.plugins` (the table of registered plugin instances),
:mod:`~.registration` (the registrar-directory watcher: dial, GetInfo, validation,
NotifyRegistrationStatus), :mod:`~.calls` (NodePrepareResources / NodeUnprepareResources and
the kubelet's checks of their answers), :mod:`~.health` (the device health stream),
:mod:`~.model` (what it reports, the version choice, the deadlines) and :mod:`~.cli`
(``drakit fake-kubelet``)."""

from drakit.plugin.testing.kubelet.calls import KubeletCallError, KubeletCheckError
from drakit.plugin.testing.kubelet.cli import fake_kubelet_main
from drakit.plugin.testing.kubelet.fake import FakeKubelet
from drakit.plugin.testing.kubelet.health import HealthWatch
from drakit.plugin.testing.kubelet.model import (
    CALL_TIMEOUT,
    DIAL_TIMEOUT,
    GET_INFO_TIMEOUT,
    NOTIFY_TIMEOUT,
    ClaimLike,
    ClaimPrepareResult,
    DeviceHealthReport,
    PreparedDeviceResult,
    RegisteredPlugin,
    Rejection,
    choose_dra_version,
    parse_kubelet_version,
)

__all__ = [
    "CALL_TIMEOUT",
    "DIAL_TIMEOUT",
    "GET_INFO_TIMEOUT",
    "NOTIFY_TIMEOUT",
    "ClaimLike",
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
    "parse_kubelet_version",
]
