"""The dra-health stream over real sockets, and the message / state mapping."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest
from dra_grpc_stubs import DRIVER, StubHealthSource

from drakit.plugin._proto.dra_health.v1alpha1 import api_pb2 as h1a1
from drakit.plugin._proto.dra_health.v1alpha1 import api_pb2_grpc as h1a1_grpc
from drakit.plugin.kubelet import PluginServer
from drakit.plugin.kubelet.health import HealthStreamServicer, health_status_name, truncate_message
from drakit.plugin.testing import FakeKubelet, KubeletCheckError
from drakit.plugin.types import DeviceHealthEntry

T = 10.0
MakeServer = Callable[..., PluginServer]


def test_truncate_message() -> None:
    assert truncate_message("ok") == "ok"
    exact = "x" * 1024
    assert truncate_message(exact) == exact
    cut = truncate_message("x" * 2000)
    assert len(cut.encode()) == 1024 and cut.endswith("...")
    multi = truncate_message("é" * 600)  # 1200 bytes, 2 per character
    raw = multi.encode("utf-8")
    assert len(raw) <= 1024 and multi.endswith("...")
    assert raw.decode("utf-8") == multi  # no broken character
    assert multi[:-3] == "é" * len(multi[:-3])


@pytest.mark.parametrize(("state", "name"), [("Healthy", "HEALTHY"), ("unhealthy", "UNHEALTHY"),
                                             ("Unknown", "UNKNOWN"), ("weird", "UNKNOWN")])
def test_health_status_mapping(state: str, name: str) -> None:
    assert health_status_name(state) == name


def test_resend_interval_must_beat_timeout(health_source: StubHealthSource) -> None:
    with pytest.raises(ValueError, match="shorter"):
        HealthStreamServicer(health_source, resend_interval=30, health_check_timeout_seconds=30)


def test_stream_full_list_change_and_periodic_resend(
    make_server: MakeServer, fake_kubelet: FakeKubelet, health_source: StubHealthSource
) -> None:
    server = make_server(health_resend_interval=0.2, health_check_timeout_seconds=7)
    server.start()
    fake_kubelet.wait_registered(DRIVER, T)
    watch = fake_kubelet.watch_health(DRIVER)
    assert watch.version == "v1.DRAResourceHealth"
    first = watch.next(T)
    assert [(r.pool_name, r.device_name, r.health) for r in first] == [
        ("pool-a", "dev-0", "Healthy"), ("pool-a", "dev-1", "Healthy")]
    assert all(r.health_check_timeout_seconds == 7 and r.last_updated_time > 0 for r in first)

    health_source.set([
        DeviceHealthEntry("pool-a", "dev-0", "Healthy"),
        DeviceHealthEntry("pool-a", "dev-1", "Unhealthy", message="link down " + "x" * 2000),
    ])
    for _ in range(50):  # re-sends of the old list may arrive first
        msg = watch.next(T)
        if msg[1].health == "Unhealthy":
            break
    else:
        pytest.fail("change never arrived")
    assert msg[0].health == "Healthy"
    assert msg[1].message.startswith("link down") and len(msg[1].message.encode()) <= 1024

    version = health_source.version
    # Nothing changes any more: at most one more message is due to the change, so the
    # second one is the periodic re-send of the full list.
    watch.next(T)
    again = watch.next(T)
    assert health_source.version == version
    assert [(r.device_name, r.health) for r in again] == [("dev-0", "Healthy"),
                                                          ("dev-1", "Unhealthy")]
    watch.cancel()
    assert watch.done.is_set() and watch.error is None


def test_v1alpha1_stream(make_server: MakeServer, fake_kubelet: FakeKubelet) -> None:
    make_server().start()
    fake_kubelet.wait_registered(DRIVER, T)
    watch = fake_kubelet.watch_health(DRIVER, version="v1alpha1.DRAResourceHealth")
    assert [r.device_name for r in watch.next(T)] == ["dev-0", "dev-1"]
    watch.cancel()


def test_client_cancel_ends_server_stream(make_server: MakeServer,
                                          fake_kubelet: FakeKubelet) -> None:
    server = make_server()
    server.start()
    fake_kubelet.wait_registered(DRIVER, T)
    watch = fake_kubelet.watch_health(DRIVER)
    watch.next(T)
    assert server.health_streams_open == 1
    watch.cancel()
    for servicer in server._health_servicers:
        assert servicer.wait_idle(T)
    assert server.health_streams_open == 0


def test_server_stop_ends_stream_cleanly(make_server: MakeServer,
                                         fake_kubelet: FakeKubelet) -> None:
    server = make_server()
    server.start()
    fake_kubelet.wait_registered(DRIVER, T)
    watch = fake_kubelet.watch_health(DRIVER)
    watch.next(T)
    server.stop(grace=T)
    assert watch.done.wait(T)
    assert watch.error is None  # a clean end of stream, not an error status


def test_health_disabled(make_server: MakeServer, fake_kubelet: FakeKubelet) -> None:
    server = make_server(health_enabled=False)
    server.start()
    plugin = fake_kubelet.wait_registered(DRIVER, T)
    assert plugin.health_versions == ()
    with pytest.raises(KubeletCheckError, match="no health service"):
        fake_kubelet.watch_health(DRIVER)
    with grpc.insecure_channel(f"unix:{server.paths.dra}") as ch:
        stream = h1a1_grpc.DRAResourceHealthStub(ch).NodeWatchResources(
            h1a1.NodeWatchResourcesRequest(), timeout=T)
        with pytest.raises(grpc.RpcError) as err:
            next(stream)
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


class FlakySource(StubHealthSource):
    def __init__(self) -> None:
        super().__init__([DeviceHealthEntry("p", "d", "Healthy")])
        self.failures = 1

    def health_snapshot(self) -> list[DeviceHealthEntry]:
        if self.failures:
            self.failures -= 1
            raise OSError("sysfs went away")
        return super().health_snapshot()


def test_failing_source_does_not_end_stream(make_server: MakeServer,
                                            fake_kubelet: FakeKubelet) -> None:
    make_server(health_source=FlakySource(), health_resend_interval=0.2).start()
    fake_kubelet.wait_registered(DRIVER, T)
    watch = fake_kubelet.watch_health(DRIVER)
    assert [r.device_name for r in watch.next(T)] == ["d"]
    watch.cancel()
