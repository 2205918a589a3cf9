"""PluginServer + fake kubelet over real unix sockets: registration, prepare/unprepare,
rejection, socket loss, rolling-update instances, shutdown."""

from __future__ import annotations

import os
import socket
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from dra_grpc_stubs import DRIVER, StubNodeService
from grpc_health.v1 import health_pb2, health_pb2_grpc

from drakit.plugin._proto.dra.v1 import api_pb2 as dra_v1
from drakit.plugin._proto.dra.v1 import api_pb2_grpc as dra_v1_grpc
from drakit.plugin._proto.pluginregistration.v1 import api_pb2 as reg_pb2
from drakit.plugin._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from drakit.plugin.kubelet import PluginServer, SocketInUseError
from drakit.plugin.kubelet.sockets import MAX_SOCKET_PATH_BYTES
from drakit.plugin.testing import FakeKubelet, KubeletCheckError, choose_dra_version
from drakit.plugin.types import PrepareResult

T = 10.0  # bound of every wait
UID_A = "11111111-2222-3333-4444-555555555555"
UID_B = "66666666-7777-8888-9999-000000000000"

MakeServer = Callable[..., PluginServer]
MakeKubelet = Callable[..., FakeKubelet]


def get_info(path: Path) -> reg_pb2.PluginInfo:
    with grpc.insecure_channel(f"unix:{path}") as ch:
        return reg_grpc.RegistrationStub(ch).GetInfo(reg_pb2.InfoRequest(), timeout=T)


# --- registration -----------------------------------------------------------------------


def test_registration_handshake(make_server: MakeServer, fake_kubelet: FakeKubelet) -> None:
    server = make_server()
    server.start()
    plugin = fake_kubelet.wait_registered(DRIVER, T)
    assert plugin.endpoint == str(server.paths.dra)
    assert os.path.isabs(plugin.endpoint)
    assert plugin.dra_version == "v1.DRAPlugin"
    assert plugin.health_versions == ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
    assert server.registration_state.wait_registered(T)
    status = server.registration_state.status
    assert status.registered is True and status.error == "" and status.timestamp is not None
    assert server.ready


def test_get_info_with_and_without_health(make_server: MakeServer, tmp_path: Path) -> None:
    on = make_server()
    on.start()
    info = get_info(on.paths.registration)
    assert info.type == "DRAPlugin"
    assert info.name == DRIVER
    assert info.endpoint == str(on.paths.dra)
    assert list(info.supported_versions) == [
        "v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth",
    ]
    off = make_server("other.example.com", health_enabled=False)
    off.start()
    assert list(get_info(off.paths.registration).supported_versions) == [
        "v1.DRAPlugin", "v1beta1.DRAPlugin",
    ]


@pytest.mark.parametrize(("kubelet", "expected"), [("1.33", "v1beta1.DRAPlugin"),
                                                   ("1.34", "v1.DRAPlugin"),
                                                   ("1.37", "v1.DRAPlugin")])
def test_version_choice_per_kubelet(make_server: MakeServer, fake_kubelet_factory: MakeKubelet,
                                    kubelet: str, expected: str) -> None:
    kube = fake_kubelet_factory(kubelet_version=kubelet)
    make_server().start()
    assert kube.wait_registered(DRIVER, T).dra_version == expected


def test_choose_dra_version_rules() -> None:
    # 1.34+: the plugin's order decides; unknown entries are skipped.
    assert choose_dra_version("1.34", ["x.Foo", "v1beta1.DRAPlugin", "v1.DRAPlugin"]) \
        == "v1beta1.DRAPlugin"
    # 1.32/1.33 prefer v1beta1 wherever it is listed.
    assert choose_dra_version("1.33", ["v1.DRAPlugin", "v1beta1.DRAPlugin"]) == "v1beta1.DRAPlugin"
    for kubelet, versions in [("1.34", []), ("1.34", ["v1alpha3.NodeService"]),
                              ("1.33", ["v1.DRAPlugin"]), ("1.31", ["v1beta1.DRAPlugin"])]:
        with pytest.raises(ValueError):
            choose_dra_version(kubelet, versions)


def test_rejected_registration_not_ready_then_socket_recreated(
    make_server: MakeServer, fake_kubelet_factory: MakeKubelet
) -> None:
    kube = fake_kubelet_factory(reject_reason="plugin registration failed: test says no")
    server = make_server()
    server.start()
    rejection = kube.wait_rejected(T)
    assert rejection.driver_name == DRIVER
    state = server.registration_state
    status = state.wait_for_change(0, T)
    while status.registered is None:  # the reset at start may be seen first
        status = state.wait_for_change(status.generation, T)
    assert status.registered is False
    assert "test says no" in status.error
    assert not server.ready
    # The plugin re-creates its socket (with backoff); the kubelet then rejects again...
    kube.wait_rejected(T, min_count=2)
    # ...until it accepts.
    kube.set_reject_reason(None)
    kube.wait_registered(DRIVER, T)
    assert state.wait_registered(T)
    assert server.ready
    # The fake kubelet only tries again on a new socket file: two rejections, two re-creations.
    assert server.reregistrations >= 2


def test_registration_socket_deleted_is_recreated(
    make_server: MakeServer, fake_kubelet: FakeKubelet
) -> None:
    called = threading.Event()
    server = make_server(on_reregister=called.set)
    server.start()
    fake_kubelet.wait_registered(DRIVER, T)
    os.unlink(server.paths.registration)
    assert called.wait(T)
    assert stat.S_ISSOCK(os.lstat(server.paths.registration).st_mode)
    fake_kubelet.wait_registered(DRIVER, T, min_count=2)
    assert server.registration_state.wait_registered(T)
    assert fake_kubelet.node_prepare_resources(DRIVER, [("ns", "c", UID_A)])[UID_A].error == ""


def test_kubelet_restart_reregisters(make_server: MakeServer, fake_kubelet: FakeKubelet) -> None:
    called = threading.Event()
    make_server(on_reregister=called.set).start()
    fake_kubelet.wait_registered(DRIVER, T)
    fake_kubelet.simulate_restart()
    assert called.wait(T)
    fake_kubelet.wait_registered(DRIVER, T, min_count=2)
    assert len(fake_kubelet.registered_plugins(DRIVER)) == 1


# --- prepare / unprepare --------------------------------------------------------------------


@pytest.mark.parametrize(("kubelet", "share_expected"), [("1.34", "share-1"), ("1.33", None)])
def test_prepare_unprepare(make_server: MakeServer, fake_kubelet_factory: MakeKubelet,
                           node_service: StubNodeService, kubelet: str,
                           share_expected: str | None) -> None:
    kube = fake_kubelet_factory(kubelet_version=kubelet)
    make_server().start()
    kube.wait_registered(DRIVER, T)
    result = kube.node_prepare_resources(DRIVER, [("ns1", "shared-claim", UID_A)])
    assert set(result) == {UID_A}
    (dev,) = result[UID_A].devices
    assert result[UID_A].error == ""
    assert dev.request_names == ("gpu",)
    assert dev.pool_name == "pool-a"
    assert dev.device_name == "dev-shared-claim"
    assert dev.cdi_device_ids == (f"example.com/gpu={UID_A}-dev",)
    assert dev.share_id == share_expected
    (claims,) = node_service.prepare_calls
    assert [(c.namespace, c.name, c.uid) for c in claims] == [("ns1", "shared-claim", UID_A)]
    assert kube.node_unprepare_resources(DRIVER, [("ns1", "shared-claim", UID_A)]) == {UID_A: ""}
    assert [c.uid for c in node_service.unprepare_calls[0]] == [UID_A]


def test_share_id_absent_when_none(make_server: MakeServer, fake_kubelet: FakeKubelet) -> None:
    make_server().start()
    fake_kubelet.wait_registered(DRIVER, T)
    (dev,) = fake_kubelet.node_prepare_resources(DRIVER, [("ns", "plain", UID_A)])[UID_A].devices
    assert dev.share_id is None


def test_batch_with_one_failing_claim(make_server: MakeServer, fake_kubelet: FakeKubelet,
                                      node_service: StubNodeService) -> None:
    make_server().start()
    fake_kubelet.wait_registered(DRIVER, T)
    uids = ["uid-1", "uid-2", "uid-3"]
    node_service.fail_uids = {"uid-2"}
    result = fake_kubelet.node_prepare_resources(DRIVER, [("ns", f"c{i}", u) for i, u in
                                                          enumerate(uids)])
    assert set(result) == set(uids)
    assert result["uid-1"].error == "" and len(result["uid-1"].devices) == 1
    assert "simulated failure" in result["uid-2"].error and result["uid-2"].devices == ()
    assert result["uid-3"].error == "" and len(result["uid-3"].devices) == 1
    errors = fake_kubelet.node_unprepare_resources(DRIVER, [("ns", "c", u) for u in uids])
    assert errors["uid-1"] == "" and errors["uid-3"] == "" and "simulated" in errors["uid-2"]


def test_duplicate_claim_uids_answered_once(make_server: MakeServer, fake_kubelet: FakeKubelet,
                                            node_service: StubNodeService) -> None:
    make_server().start()
    fake_kubelet.wait_registered(DRIVER, T)
    claims = [("ns", "a", UID_A), ("ns", "a", UID_A), ("ns", "b", UID_B)]
    result = fake_kubelet.node_prepare_resources(DRIVER, claims)
    assert set(result) == {UID_A, UID_B}
    assert [c.uid for c in node_service.prepare_calls[0]] == [UID_A, UID_B]
    assert set(fake_kubelet.node_unprepare_resources(DRIVER, claims)) == {UID_A, UID_B}
    assert [c.uid for c in node_service.unprepare_calls[0]] == [UID_A, UID_B]


def test_exception_in_node_service_becomes_per_claim_errors(
    make_server: MakeServer, fake_kubelet: FakeKubelet, node_service: StubNodeService
) -> None:
    make_server().start()
    fake_kubelet.wait_registered(DRIVER, T)
    node_service.raise_exc = RuntimeError("disk on fire")
    claims = [("ns", "a", UID_A), ("ns", "b", UID_B)]
    result = fake_kubelet.node_prepare_resources(DRIVER, claims)
    assert set(result) == {UID_A, UID_B}
    for r in result.values():
        assert "RuntimeError: disk on fire" in r.error
    errors = fake_kubelet.node_unprepare_resources(DRIVER, claims)
    assert set(errors) == {UID_A, UID_B}
    assert all("disk on fire" in e for e in errors.values())


def test_missing_and_extra_results_from_node_service(
    make_server: MakeServer, fake_kubelet: FakeKubelet, node_service: StubNodeService
) -> None:
    make_server().start()
    fake_kubelet.wait_registered(DRIVER, T)
    node_service.answer_override = {UID_A: PrepareResult(), "stranger": PrepareResult()}
    # The fake kubelet would raise KubeletCheckError for an unknown UID or a missing entry.
    result = fake_kubelet.node_prepare_resources(DRIVER, [("ns", "a", UID_A), ("ns", "b", UID_B)])
    assert set(result) == {UID_A, UID_B}
    assert result[UID_A].error == ""
    assert "no result" in result[UID_B].error


def test_claim_with_empty_field_gets_error(make_server: MakeServer,
                                           fake_kubelet: FakeKubelet) -> None:
    make_server().start()
    fake_kubelet.wait_registered(DRIVER, T)
    result = fake_kubelet.node_prepare_resources(DRIVER, [("", "a", UID_A), ("ns", "b", UID_B)])
    assert "namespace" in result[UID_A].error
    assert result[UID_B].error == ""


def test_concurrent_prepares(make_server: MakeServer, fake_kubelet: FakeKubelet) -> None:
    make_server().start()
    fake_kubelet.wait_registered(DRIVER, T)
    results: dict[str, str] = {}
    lock = threading.Lock()

    def call(i: int) -> None:
        uid = f"uid-{i}"
        r = fake_kubelet.node_prepare_resources(DRIVER, [("ns", f"c{i}", uid)], timeout=T)
        with lock:
            results[uid] = r[uid].error

    threads = [threading.Thread(target=call, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(T)
    assert results == {f"uid-{i}": "" for i in range(20)}


def test_kubelet_health_checking_on_dra_socket(make_server: MakeServer) -> None:
    server = make_server()
    server.start()
    with grpc.insecure_channel(f"unix:{server.paths.dra}") as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        for name in ["", "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin",
                     "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin", "v1.DRAResourceHealth"]:
            resp = stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=T)
            assert resp.status == health_pb2.HealthCheckResponse.SERVING, name


# --- sockets: stale, rolling update, shutdown -----------------------------------------------------


def _dead_socket(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()


def test_stale_sockets_of_this_instance_removed(make_server: MakeServer,
                                                fake_kubelet: FakeKubelet) -> None:
    server = make_server()
    _dead_socket(server.paths.dra)
    _dead_socket(server.paths.registration)
    server.start()
    fake_kubelet.wait_registered(DRIVER, T)
    assert fake_kubelet.node_prepare_resources(DRIVER, [("ns", "a", UID_A)])[UID_A].error == ""


def test_stale_socket_replaced_during_the_kubelets_dial_is_registered_once(
        make_server: MakeServer, fake_kubelet_factory: Callable[..., FakeKubelet]) -> None:
    """The kubelet sees a stale registration socket and dials it (the dial retries); the
    plugin replaces the socket and serves. The registration that succeeds is of the new
    socket: later scans do not see a "re-created" socket and do not drop it (which closed
    the DRA channel under a call in flight: "Channel closed!")."""
    server = make_server()
    _dead_socket(server.paths.registration)
    kubelet = fake_kubelet_factory(poll_interval=0.01)
    scans = kubelet.scans
    deadline = time.monotonic() + T
    while kubelet.scans < scans + 2:  # the stale socket was seen and its dial started
        assert time.monotonic() < deadline
        time.sleep(0.005)
    server.start()
    kubelet.wait_registered(DRIVER, T)
    scans = kubelet.scans
    while kubelet.scans < scans + 20:
        assert time.monotonic() < deadline + T
        time.sleep(0.01)
    assert kubelet.registration_count(DRIVER) == 1
    assert kubelet.node_prepare_resources(DRIVER, [("ns", "a", UID_A)])[UID_A].error == ""


def test_live_socket_of_same_identity_not_taken_over(make_server: MakeServer) -> None:
    first = make_server()
    first.start()
    second = make_server()
    with pytest.raises(SocketInUseError):
        second.start()
    assert stat.S_ISSOCK(os.lstat(first.paths.dra).st_mode)
    assert get_info(first.paths.registration).name == DRIVER


def test_two_instances_side_by_side(make_server: MakeServer, fake_kubelet: FakeKubelet,
                                    node_service: StubNodeService) -> None:
    old_ns, new_ns = StubNodeService(), StubNodeService()
    old = make_server(pod_uid=UID_A, node_service=old_ns)
    new = make_server(pod_uid=UID_B, node_service=new_ns)
    old.start()
    fake_kubelet.wait_registered(DRIVER, T, min_count=1)
    new.start()
    fake_kubelet.wait_registered(DRIVER, T, min_count=2)
    assert old.paths.dra != new.paths.dra
    assert old.paths.registration != new.paths.registration
    endpoints = [p.endpoint for p in fake_kubelet.registered_plugins(DRIVER)]
    assert endpoints == [str(old.paths.dra), str(new.paths.dra)]
    # Calls go to the newest instance.
    fake_kubelet.node_prepare_resources(DRIVER, [("ns", "a", "uid-x")])
    assert len(new_ns.prepare_calls) == 1 and old_ns.prepare_calls == []
    # The old pod stops: only its own sockets go, the new instance keeps serving.
    old.stop()
    assert not old.paths.dra.exists() and not old.paths.registration.exists()
    assert new.paths.dra.exists() and new.paths.registration.exists()
    fake_kubelet.wait_idle(T)
    assert [p.endpoint for p in fake_kubelet.registered_plugins(DRIVER)] == [str(new.paths.dra)]
    assert fake_kubelet.node_unprepare_resources(DRIVER, [("ns", "a", "uid-x")]) == {"uid-x": ""}


def test_long_driver_name_uses_hashed_socket_names(make_server: MakeServer,
                                                   fake_kubelet: FakeKubelet) -> None:
    driver = ("a" * 40) + ".example.com"
    server = make_server(driver, pod_uid=UID_A)
    assert UID_A not in server.paths.registration.name
    for path in (server.paths.dra, server.paths.registration):
        assert len(os.fsencode(path)) <= MAX_SOCKET_PATH_BYTES
    server.start()
    assert fake_kubelet.wait_registered(driver, T).endpoint == str(server.paths.dra)
    assert fake_kubelet.node_prepare_resources(driver, [("ns", "a", UID_B)])[UID_B].error == ""


def test_sockets_removed_on_stop(make_server: MakeServer, fake_kubelet: FakeKubelet) -> None:
    server = make_server()
    server.start()
    fake_kubelet.wait_registered(DRIVER, T)
    assert (server.paths.dra.parent.stat().st_mode & 0o777) == 0o750
    server.stop()
    assert not server.paths.dra.exists()
    assert not server.paths.registration.exists()
    assert not server.ready
    fake_kubelet.wait_unregistered(DRIVER, T)
    with pytest.raises(KubeletCheckError, match="not registered"):
        fake_kubelet.node_prepare_resources(DRIVER, [("ns", "a", UID_A)])
    server.stop()  # idempotent


def test_restart_after_stop(make_server: MakeServer, fake_kubelet: FakeKubelet) -> None:
    server = make_server()
    server.start()
    fake_kubelet.wait_registered(DRIVER, T)
    server.stop()
    server.start()
    fake_kubelet.wait_registered(DRIVER, T, min_count=2)
    with grpc.insecure_channel(f"unix:{server.paths.dra}") as ch:
        resp = dra_v1_grpc.DRAPluginStub(ch).NodePrepareResources(
            dra_v1.NodePrepareResourcesRequest(
                claims=[dra_v1.Claim(namespace="ns", name="a", uid=UID_A)]), timeout=T)
    assert resp.claims[UID_A].error == ""
