"""Fixtures of the real-server tier: a real etcd + kube-apiserver 1.37 (session scope, from
drakit.plugin.testing.pytest_plugin via tests/conftest.py, so one server for every folder) with
deploy/'s RBAC, admission policy and DeviceClasses applied, and node agents that run as
deploy/'s ServiceAccount bound to a Pod on their node.

The server is shared by the whole session, so every test works on its own node name
(:func:`node_name`) and namespace; nothing depends on an empty cluster.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from real_helpers import FAST, install_deploy

from drakit.plugin.testing.harness import DriverHarness
from drakit.plugin.testing.pytest_plugin import short_tmp_path  # noqa: F401 - fixture
from drakit.plugin.testing.real.controlplane import RealAPIServer


@pytest.fixture(scope="session")
def real(real_apiserver: RealAPIServer) -> RealAPIServer:
    """The session's real API server with deploy/ installed."""
    install_deploy(real_apiserver)
    return real_apiserver


@pytest.fixture
def node_name() -> str:
    """A node name of this test's own (the server outlives the test)."""
    return f"node-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def real_harness_factory(
    real: RealAPIServer, short_tmp_path: Path,  # noqa: F811
) -> Iterator[Callable[..., DriverHarness]]:
    """make(node_name, as_node_agent=True, start=True, server=real, **DriverHarness kwargs):
    a harness on a real server; by default the agent uses a node-bound token of deploy/'s
    ServiceAccount."""
    made: list[DriverHarness] = []

    def make(node_name: str, as_node_agent: bool = True, start: bool = True,
             server: RealAPIServer = real, **kwargs: Any) -> DriverHarness:
        real = server
        if real.get_object("nodes", node_name) is None:
            real.create_node(node_name)
        token = real.node_agent_token(node_name) if as_node_agent else None
        if not kwargs.get("subprocess"):
            kwargs["settings"] = {**FAST, **kwargs.get("settings", {})}
        h = DriverHarness(short_tmp_path / f"h{len(made)}", node_name=node_name,
                          apiserver=real, api_token=token, **kwargs)
        made.append(h)
        return h.start() if start else h

    yield make
    for h in made:
        h.stop()
