"""Rolling update: two instances of the agent (different pod UIDs) on one node, sharing the
registrar, plugins and CDI directories and the checkpoint."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from contract_helpers import DRIVER, check_invariants, uid_of

from drakit.plugin.kubelet.protocol import DRA_MODULES, DRA_V1
from drakit.plugin.ops.app import App
from drakit.plugin.ops.config import Settings
from drakit.plugin.testing.harness import DriverHarness

GENERATED = {"example": {"generate": {"count": 40}}}


def start_app(h: DriverHarness, pod_uid: str) -> App:
    """Another instance of the agent on the harness's node and directories."""
    app = App(Settings(
        driver_name=h.driver_name, node_name=h.node_name, registrar_dir=h.registrar_dir,
        plugins_dir=h.plugins_dir, cdi_root=h.cdi_dir, discovery=h.discovery,
        plugin_options=h.plugin_options, resync_seconds=2.0, health_resend_seconds=2.0,
        pod_uid=pod_uid,
    ), api_client=h.apiserver.api_client())
    app.start()
    return app


@pytest.fixture
def two(harness_factory: Callable[..., DriverHarness]) -> Iterator[tuple[DriverHarness, App]]:
    h = harness_factory(settings={"pod_uid": "pod-a"}, plugin_options=GENERATED)
    before = h.kubelet.registration_count(DRIVER)
    b = start_app(h, "pod-b")
    try:
        h.kubelet.wait_registered(DRIVER, timeout=20, min_count=before + 1)
        yield h, b
    finally:
        b.stop()


def socket_files(app: App) -> list[Path]:
    return [Path(app.server.paths.dra_socket), Path(app.server.paths.registration_socket)]


def direct_prepare(app: App, claim: dict[str, Any]) -> str:
    """NodePrepareResources straight to one instance's DRA socket; returns the error."""
    pb2, grpc_mod = DRA_MODULES[DRA_V1]
    meta = claim["metadata"]
    with grpc.insecure_channel(f"unix:{app.server.paths.dra_socket}") as ch:
        resp = grpc_mod.DRAPluginStub(ch).NodePrepareResources(
            pb2.NodePrepareResourcesRequest(claims=[pb2.Claim(
                namespace=meta["namespace"], name=meta["name"], uid=meta["uid"])]),
            timeout=45)
    return str(resp.claims[meta["uid"]].error)


def test_side_by_side_prepare_on_one_unprepare_on_other(
    two: tuple[DriverHarness, App],
) -> None:
    h, b = two
    a = h.app
    a_files, b_files = socket_files(a), socket_files(b)
    assert len({*a_files, *b_files}) == 4
    assert all(p.name.count("pod-a") for p in a_files)
    assert all(p.exists() for p in a_files + b_files)

    claim = h.allocate("rolled", [h.devices()[0]])
    assert direct_prepare(a, claim) == ""
    (spec,) = h.cdi_files()
    # The kubelet now talks to the newest instance (b): it unprepares what a prepared.
    assert h.kubelet.registered_plugins(DRIVER)[-1].endpoint == str(b_files[0])
    assert h.unprepare(claim) == {uid_of(claim): ""}
    assert not spec.exists()
    assert h.app.checkpoint.claims() == {}

    b.stop()
    assert not any(p.exists() for p in b_files)
    assert all(p.exists() for p in a_files)  # never another instance's sockets
    h.kubelet.wait_registered(DRIVER, timeout=10)
    h.wait_for(lambda: h.kubelet.registered_plugins(DRIVER)[-1].endpoint == str(a_files[0]),
               10, "the kubelet to fall back to instance a")
    again = h.allocate("after-b", [h.devices()[1]])
    assert h.prepare(again)[uid_of(again)].error == ""


def test_concurrent_prepares_on_both_instances(two: tuple[DriverHarness, App]) -> None:
    h, b = two
    a = h.app
    devices = h.devices()
    assert len(devices) == 40
    # 20 claims on their own devices, plus 10 pairs: each pair wants the same device,
    # one claim through each instance.
    jobs: list[tuple[App, dict[str, Any]]] = []
    for i in range(20):
        jobs.append((a if i % 2 else b, h.allocate(f"own-{i}", [devices[i]])))
    pairs: list[tuple[str, str]] = []
    for i in range(20, 30):
        x = h.allocate(f"pair-{i}-x", [devices[i]])
        y = h.allocate(f"pair-{i}-y", [devices[i]])
        jobs += [(a, x), (b, y)]
        pairs.append((uid_of(x), uid_of(y)))
    errors: dict[str, str] = {}
    start = threading.Barrier(len(jobs), timeout=30)

    def run(app: App, claim: dict[str, Any]) -> None:
        start.wait()
        errors[uid_of(claim)] = direct_prepare(app, claim)

    threads = [threading.Thread(target=run, args=job) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(errors) == len(jobs)
    own = [uid_of(c) for _, c in jobs[:20]]
    assert {u: errors[u] for u in own} == {u: "" for u in own}
    for ux, uy in pairs:
        ok = [u for u in (ux, uy) if errors[u] == ""]
        assert len(ok) == 1, (errors[ux], errors[uy])
        loser = uy if ok == [ux] else ux
        assert "still prepared for claim" in errors[loser]
    prepared = {u for u, e in errors.items() if e == ""}
    assert set(a.checkpoint.claims()) == prepared
    assert set(b.checkpoint.claims()) == prepared
    assert not check_invariants(h.checkpoint_path, h.cdi_dir, prepared)
    assert len(h.cdi_files()) == 30
