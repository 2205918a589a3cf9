"""Fixtures for the gRPC-layer tests: a PluginServer factory on tmp_path plus the fake kubelet."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from dra_grpc_stubs import DRIVER, StubHealthSource, StubNodeService

from drakit.plugin.kubelet import PluginServer
from drakit.plugin.types import DeviceHealthEntry


@pytest.fixture
def node_service() -> StubNodeService:
    return StubNodeService()


@pytest.fixture
def health_source() -> StubHealthSource:
    return StubHealthSource(
        [
            DeviceHealthEntry("pool-a", "dev-0", "Healthy"),
            DeviceHealthEntry("pool-a", "dev-1", "Healthy"),
        ]
    )


@pytest.fixture
def dirs(short_tmp_path: Path) -> tuple[Path, Path]:
    """(registrar dir, plugins dir) in tmp_path, through a short link (socket path limit)."""
    return short_tmp_path / "reg", short_tmp_path / "plugins"


@pytest.fixture
def fake_kubelet_registrar_dir(dirs: tuple[Path, Path]) -> Path:
    return dirs[0]


@pytest.fixture
def make_server(
    dirs: tuple[Path, Path], node_service: StubNodeService, health_source: StubHealthSource
) -> Iterator[Callable[..., PluginServer]]:
    """Build (not start) PluginServers with fast test timings; all are stopped at teardown."""
    created: list[PluginServer] = []

    def make(driver: str = DRIVER, **kwargs: Any) -> PluginServer:
        registrar, plugins = dirs
        kwargs.setdefault("watch_interval", 0.05)
        kwargs.setdefault("rejection_backoff", (0.05, 0.2))
        kwargs.setdefault("stop_grace", 1.0)
        server = PluginServer(
            driver,
            kwargs.pop("node_service", node_service),
            kwargs.pop("health_source", health_source),
            kwargs.pop("registrar_dir", registrar),
            kwargs.pop("plugins_dir", plugins),
            **kwargs,
        )
        created.append(server)
        return server

    yield make
    for server in created:
        server.stop(grace=0.5)
