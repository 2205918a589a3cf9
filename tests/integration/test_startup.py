"""Start-up and configuration failures are clear, early, and leave nothing behind; a failing
discovery plugin is retried and reported."""

from __future__ import annotations

import argparse
import socket
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import pytest

from drakit.discovery import Device, DiscoveryPlugin, Pool
from drakit.plugin.ops.config import add_run_arguments, read_config_file, settings_from_args
from drakit.plugin.testing.harness import DriverHarness


class Flaky(DiscoveryPlugin):
    """Fails until ``healthy`` is set."""

    name: ClassVar[str] = "flaky"
    healthy = False

    def discover(self) -> list[Pool]:
        if not Flaky.healthy:
            raise RuntimeError("sensor bus not ready")
        return [Pool(name=self.context.default_pool, devices=[Device(name="dev-0")])]


def test_failing_plugin_is_retried_and_not_ready_meanwhile(
    harness_factory: Callable[..., DriverHarness], tmp_path: Path
) -> None:
    from drakit.discovery import DiscoveryContext

    Flaky.healthy = False
    ctx = DiscoveryContext(driver_name="drakit.example.com", node_name="node-1")
    h = DriverHarness(tmp_path / "f", plugins=[Flaky(ctx)], settings={
        "health_resend_seconds": 2.0})
    try:
        h.apiserver.start()
        h.apiserver.create_node("node-1")
        h.kubelet.start()
        h._start_inprocess()
        ready, reasons = h.app.readiness()
        assert not ready
        assert any("discovery plugin flaky failing: RuntimeError: sensor bus not ready" in r
                   for r in reasons)
        errors = h.app.metrics.registry.get_sample_value(
            "drakit_discovery_errors_total", {"driver": "drakit.example.com"})
        assert errors is not None and errors >= 1  # counted, not only initialised at zero
        assert "drakit_discovery_errors_total" in h.app.metrics.render().decode()
        Flaky.healthy = True
        h.wait_for(lambda: ("node-1", "dev-0") in h.devices(), 15, "the retried discovery")
        assert not any("flaky" in r for r in h.app.readiness()[1])
    finally:
        h.stop()


def test_busy_http_endpoint_fails_before_any_socket(tmp_path: Path) -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    h = DriverHarness(tmp_path / "b", settings={"http_endpoint": f"127.0.0.1:{port}"})
    try:
        h.apiserver.start()
        with pytest.raises(OSError, match="--http-endpoint"):
            h._start_inprocess()
        assert not list(h.registrar_dir.glob("*.sock")) if h.registrar_dir.exists() else True
        assert not (h.data_dir / "dra.sock").exists()
    finally:
        busy.close()
        h.stop()


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_run_arguments(p)
    return p.parse_args(["--driver-name", "d.example.com", "--node-name", "n", *argv])


@pytest.mark.parametrize("content,match", [
    ("discovry: {}\n", "unknown key"),
    ("discovery: [1]\n", "must be a map"),
    ("discovery:\n  net: 3\n", "discovery.net: must be a map"),
    ("{{{", "--config"),
])
def test_config_file_errors_name_the_key(tmp_path: Path, content: str, match: str) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(content)
    with pytest.raises(ValueError, match=match):
        read_config_file(str(f))


@pytest.mark.parametrize("argv,match", [
    (("--resync-seconds", "0"), "--resync-seconds: must be greater than zero"),
    (("--http-endpoint", "notaport"), "--http-endpoint"),
    (("--http-endpoint", ":99999"), "--http-endpoint"),
    (("--discovery", ""), "--discovery"),
])
def test_bad_flags_are_named(argv: tuple[str, ...], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        settings_from_args(parse(*argv))


def test_ipv6_endpoint_parses() -> None:
    from drakit.plugin.ops.http import parse_endpoint

    assert parse_endpoint("[::1]:8080") == ("::1", 8080)
    assert parse_endpoint(":9") == ("0.0.0.0", 9)


@pytest.mark.parametrize("setting,match", [
    ("cdi_root", r"--cdi-root: CDI spec directory .*afile is not a directory"),
    ("plugins_dir", r"--kubelet-plugins-directory-path: cannot create directory .*afile/sub"),
])
def test_unusable_directories_are_named_by_their_flag(tmp_path: Path, setting: str,
                                                      match: str) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a directory\n")
    where = afile if setting == "cdi_root" else afile / "sub"
    h = DriverHarness(tmp_path / "h", settings={setting: where})
    try:
        h.apiserver.start()
        with pytest.raises(OSError, match=match):
            h._start_inprocess()
    finally:
        h.stop()
