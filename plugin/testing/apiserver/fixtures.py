"""pytest fixtures for the embedded API server.

Use from a ``conftest.py``::

    from drakit.plugin.testing.apiserver.fixtures import (  # noqa: F401
        embedded_apiserver, embedded_apiserver_factory,
    )

- ``embedded_apiserver_factory(served_versions=("v1",), **kwargs)`` starts an
  :class:`~drakit.plugin.testing.apiserver.server.EmbeddedAPIServer` on a free port; every one it
  made is stopped at teardown.
- ``embedded_apiserver``: one started server serving resource.k8s.io/v1, with a kubeconfig
  written to ``tmp_path / "kubeconfig"``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from drakit.plugin.testing.apiserver.server import EmbeddedAPIServer

EmbeddedAPIServerFactory = Callable[..., EmbeddedAPIServer]


@pytest.fixture
def embedded_apiserver_factory() -> Iterator[EmbeddedAPIServerFactory]:
    created: list[EmbeddedAPIServer] = []

    def make(served_versions: Sequence[str] = ("v1",), **kwargs: Any) -> EmbeddedAPIServer:
        server = EmbeddedAPIServer(served_versions=served_versions, **kwargs)
        created.append(server)
        return server.start()

    yield make
    for server in created:
        server.stop()


@pytest.fixture
def embedded_apiserver(
    embedded_apiserver_factory: EmbeddedAPIServerFactory, tmp_path: Path
) -> EmbeddedAPIServer:
    server = embedded_apiserver_factory()
    server.write_kubeconfig(tmp_path / "kubeconfig")
    return server
