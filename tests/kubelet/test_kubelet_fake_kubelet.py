"""The fake kubelet's own rules: what it watches, what it rejects, how it checks answers,
and its CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from dra_grpc_stubs import DRIVER

from drakit.plugin._proto.dra.v1 import api_pb2 as dra_v1
from drakit.plugin._proto.dra.v1 import api_pb2_grpc as dra_v1_grpc
from drakit.plugin.kubelet import PluginServer, RegistrationServicer, RegistrationState
from drakit.plugin.testing import (
    FakeKubelet,
    KubeletCallError,
    KubeletCheckError,
    fake_kubelet_main,
)

T = 10.0
REPO = Path(__file__).resolve().parents[2]
MakeServer = Callable[..., PluginServer]


class OddDra(dra_v1_grpc.DRAPluginServicer):
    """A DRA v1 servicer that breaks the kubelet's rules on demand."""

    mode = "unknown-uid"

    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        resp = dra_v1.NodePrepareResourcesResponse()
        if self.mode == "abort":
            context.abort(grpc.StatusCode.INTERNAL, "boom")
        if self.mode == "unknown-uid":
            for c in request.claims:
                resp.claims[c.uid].SetInParent()
            resp.claims["not-asked-for"].SetInParent()
        # mode "skip": answer nothing
        return resp


@pytest.fixture
def raw_plugin(dirs: tuple[Path, Path]) -> Iterator[Callable[..., tuple[Path, OddDra]]]:
    """Start hand-made registration + DRA servers (no PluginServer guarantees)."""
    servers: list[grpc.Server] = []

    def start(name: str = "odd.example.com", reg_name: str | None = None,
              plugin_type: str = "DRAPlugin",
              versions: tuple[str, ...] = ("v1.DRAPlugin",)) -> tuple[Path, OddDra]:
        registrar, plugins = dirs
        registrar.mkdir(parents=True, exist_ok=True)
        plugins.mkdir(parents=True, exist_ok=True)
        endpoint = plugins / f"{name}.sock"
        servicer = OddDra()
        dra = grpc.server(futures.ThreadPoolExecutor(4))
        dra_v1_grpc.add_DRAPluginServicer_to_server(servicer, dra)
        dra.add_insecure_port(f"unix:{endpoint}")
        dra.start()
        reg_path = registrar / (reg_name or f"{name}-reg.sock")
        reg = grpc.server(futures.ThreadPoolExecutor(2))
        info = RegistrationServicer(name, str(endpoint), versions, RegistrationState())
        info._info.type = plugin_type
        info.add_to_server(reg)
        reg.add_insecure_port(f"unix:{reg_path}")
        reg.start()
        servers.extend([dra, reg])
        return reg_path, servicer

    yield start
    for s in servers:
        s.stop(None)


def test_answers_breaking_kubelet_rules_raise(raw_plugin: Any, fake_kubelet: FakeKubelet) -> None:
    _, servicer = raw_plugin()
    fake_kubelet.wait_registered("odd.example.com", T)
    with pytest.raises(KubeletCheckError, match="unknown claim UID not-asked-for"):
        fake_kubelet.node_prepare_resources("odd.example.com", [("ns", "a", "u1")])
    servicer.mode = "skip"
    with pytest.raises(KubeletCheckError, match="skipped 2 ResourceClaims"):
        fake_kubelet.node_prepare_resources("odd.example.com",
                                            [("ns", "a", "u1"), ("ns", "b", "u2")])
    servicer.mode = "abort"
    with pytest.raises(KubeletCallError, match="boom") as err:
        fake_kubelet.node_prepare_resources("odd.example.com", [("ns", "a", "u1")])
    assert err.value.code == grpc.StatusCode.INTERNAL


def test_wrong_type_and_unknown_versions_rejected(raw_plugin: Any,
                                                  fake_kubelet: FakeKubelet) -> None:
    raw_plugin("csi.example.com", plugin_type="CSIPlugin")
    rejection = fake_kubelet.wait_rejected(T)
    assert "no handler registered for plugin type: CSIPlugin" in rejection.reason
    raw_plugin("old.example.com", versions=("v1alpha3.NodeService",))
    rejection = fake_kubelet.wait_rejected(T, min_count=2)
    assert rejection.driver_name == "old.example.com"
    assert "plugin validation failed" in rejection.reason
    assert fake_kubelet.registered_plugins() == []


def test_duplicate_endpoint_rejected(raw_plugin: Any, fake_kubelet: FakeKubelet,
                                     dirs: tuple[Path, Path]) -> None:
    raw_plugin("dup.example.com")
    fake_kubelet.wait_registered("dup.example.com", T)
    # A second registration socket announcing the same endpoint.
    reg = grpc.server(futures.ThreadPoolExecutor(2))
    RegistrationServicer("dup.example.com", str(dirs[1] / "dup.example.com.sock"),
                         ["v1.DRAPlugin"], RegistrationState()).add_to_server(reg)
    reg.add_insecure_port(f"unix:{dirs[0] / 'dup2-reg.sock'}")
    reg.start()
    try:
        assert "already registered" in fake_kubelet.wait_rejected(T).reason
    finally:
        reg.stop(None)


def test_dot_files_and_non_sockets_ignored(raw_plugin: Any, fake_kubelet: FakeKubelet,
                                           dirs: tuple[Path, Path]) -> None:
    raw_plugin("hidden.example.com", reg_name=".hidden-reg.sock")
    (dirs[0] / "notes.txt").write_text("not a socket")
    fake_kubelet.wait_idle(T)
    assert fake_kubelet.registered_plugins() == []
    assert fake_kubelet.rejections == []
    # ...while a socket in a subdirectory is found (recursive watch).
    sub = dirs[0] / "sub"
    sub.mkdir()
    raw_plugin("nested.example.com", reg_name="sub/nested-reg.sock")
    assert fake_kubelet.wait_registered("nested.example.com", T).registration_socket == str(
        sub / "nested-reg.sock")


def test_cli_registers_prepares_unprepares(make_server: MakeServer, dirs: tuple[Path, Path],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    make_server().start()
    rc = fake_kubelet_main([
        "--registrar-dir", str(dirs[0]), "--timeout", str(T),
        "--prepare", "ns/claim-a/uid-a", "--unprepare", "ns/claim-a/uid-a",
        "--watch-health", "0.3",
    ])
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rc == 0, events
    kinds = [e["event"] for e in events]
    assert kinds[:3] == ["registered", "prepared", "unprepared"]
    assert "health" in kinds
    assert events[0]["driver_name"] == DRIVER and events[0]["dra_version"] == "v1.DRAPlugin"
    assert events[1]["uid"] == "uid-a" and events[1]["error"] == ""
    assert events[1]["devices"][0]["cdi_device_ids"] == ["example.com/gpu=uid-a-dev"]
    assert signal.getsignal(signal.SIGTERM) is not None


def test_cli_times_out_without_plugin(dirs: tuple[Path, Path],
                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert fake_kubelet_main(["--registrar-dir", str(dirs[0]), "--timeout", "0.3"]) == 2
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["event"] == "error"


PLUGIN_PROCESS = """
import signal, sys, threading
sys.path.insert(0, sys.argv[3])
from dra_grpc_stubs import StubHealthSource, StubNodeService
from drakit.plugin.kubelet import PluginServer
server = PluginServer("gpu.example.com", StubNodeService(), StubHealthSource(), sys.argv[1],
                      sys.argv[2], watch_interval=0.05)
done = threading.Event()
signal.signal(signal.SIGTERM, lambda *a: done.set())
server.start()
print("ready", flush=True)
done.wait(60)
server.stop()
print("stopped", flush=True)
"""


def test_sigterm_cleans_sockets(dirs: tuple[Path, Path], fake_kubelet: FakeKubelet) -> None:
    registrar, plugins = dirs
    proc = subprocess.Popen(
        [sys.executable, "-c", PLUGIN_PROCESS, str(registrar), str(plugins),
         str(Path(__file__).parent)],
        stdout=subprocess.PIPE, text=True, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert proc.stdout is not None
        ready = threading.Event()
        threading.Thread(target=lambda: (proc.stdout.readline(), ready.set()),  # type: ignore[union-attr]
                         daemon=True).start()
        assert ready.wait(T * 3)
        plugin = fake_kubelet.wait_registered(DRIVER, T)
        assert Path(plugin.endpoint).exists()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=T * 3) == 0
        assert not Path(plugin.endpoint).exists()
        assert not Path(plugin.registration_socket).exists()
        fake_kubelet.wait_unregistered(DRIVER, T)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=T)
