"""pytest fixtures for the fake kubelet.

Registered through the ``pytest11`` entry point ``drakit`` (pyproject.toml), so every pytest
run in an environment where drakit is installed has them: no import in a ``conftest.py``.
(``pytest -p no:drakit`` turns them off.)

- ``short_tmp_path``: ``tmp_path`` reached through a short symlink (``/tmp/drakit-XXXX/t``).
  A unix socket path may have at most 107 bytes and pytest's ``tmp_path`` alone can use 70
  of them; files still live in ``tmp_path``, only the link is outside (removed at teardown).
- ``fake_kubelet_registrar_dir``: the directory the fake kubelet watches by default,
  ``short_tmp_path / "plugins_registry"``; override it in a conftest to change it.
- ``fake_kubelet_factory(registrar_dir=None, kubelet_version="1.34", **kwargs)`` starts a
  :class:`~drakit.plugin.testing.kubelet.fake.FakeKubelet`; every one it made is stopped at
  teardown.
- ``fake_kubelet``: one started 1.34 fake kubelet on ``fake_kubelet_registrar_dir``.
- ``real_apiserver`` (session): a real etcd + kube-apiserver 1.37
  (:class:`~drakit.plugin.testing.real.controlplane.RealAPIServer`, every resource.k8s.io version,
  the DRA gates). ``real_apiserver_factory(runtime_config=None, feature_gates=None)``
  (session) starts one per distinct configuration (kept for the session, e.g. a v1beta1-only
  server). Both skip with the reason when the binaries are not found (``$DRAKIT_K8S_BIN`` or
  ``~/.cache/drakit/k8s-v1.37.2/bin``; ``DRAKIT_K8S_BUILD=1`` builds them first with
  scripts/build-k8s.sh) and fail instead under ``CI=true``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # loaded when a fixture is used: a pytest run pays nothing for the kit
    from drakit.plugin.testing.kubelet.fake import FakeKubelet
    from drakit.plugin.testing.real.controlplane import RealAPIServer

FakeKubeletFactory = Callable[..., "FakeKubelet"]
RealAPIServerFactory = Callable[..., "RealAPIServer"]


@pytest.fixture
def short_tmp_path(tmp_path: Path) -> Iterator[Path]:
    holder = Path(tempfile.mkdtemp(prefix="drakit-"))
    link = holder / "t"
    os.symlink(tmp_path, link)
    try:
        yield link
    finally:
        shutil.rmtree(holder, ignore_errors=True)  # removes the link, not its target


@pytest.fixture
def fake_kubelet_registrar_dir(short_tmp_path: Path) -> Path:
    return short_tmp_path / "plugins_registry"


@pytest.fixture
def fake_kubelet_factory(fake_kubelet_registrar_dir: Path) -> Iterator[FakeKubeletFactory]:
    from drakit.plugin.testing.kubelet.fake import FakeKubelet

    created: list[FakeKubelet] = []

    def make(
        registrar_dir: Path | str | None = None, kubelet_version: str = "1.34", **kwargs: Any
    ) -> FakeKubelet:
        directory = Path(registrar_dir) if registrar_dir else fake_kubelet_registrar_dir
        kubelet = FakeKubelet(directory, kubelet_version, **kwargs)
        created.append(kubelet)
        return kubelet.start()

    yield make
    for kubelet in created:
        kubelet.stop()


@pytest.fixture
def fake_kubelet(fake_kubelet_factory: FakeKubeletFactory) -> FakeKubelet:
    return fake_kubelet_factory()


def _real_bin_dir() -> Path:
    """The binaries' directory, or skip (fail under CI=true) with the reason."""
    from drakit.plugin.testing.real.binaries import build_k8s_binaries, find_k8s_bin_dir
    from drakit.plugin.testing.real.process import RealClusterError

    found = find_k8s_bin_dir()
    reason = ""
    if found is None and os.environ.get("DRAKIT_K8S_BUILD") == "1":
        try:
            build_k8s_binaries()
        except (RealClusterError, OSError) as e:
            reason = f": building them failed: {e}"
        found = find_k8s_bin_dir()
    if found is None:
        message = ("real kube-apiserver/etcd 1.37 not found ($DRAKIT_K8S_BIN or "
                   "~/.cache/drakit/k8s-v1.37.2/bin; build with scripts/build-k8s.sh)" + reason)
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and the real-server tier cannot run: {message}")
        pytest.skip(message)
    return found


@pytest.fixture(scope="session")
def real_apiserver_factory() -> Iterator[RealAPIServerFactory]:
    from drakit.plugin.testing.real.controlplane import RealAPIServer

    servers: dict[str, RealAPIServer] = {}

    def make(runtime_config: dict[str, bool] | None = None,
             feature_gates: dict[str, bool] | None = None) -> RealAPIServer:
        key = repr((sorted((runtime_config or {}).items()),
                    sorted((feature_gates or {}).items())))
        if key not in servers:
            bin_dir = _real_bin_dir()
            workdir = Path(tempfile.mkdtemp(prefix="drk-k8s-"))
            server = RealAPIServer(workdir, bin_dir, runtime_config=runtime_config,
                                   feature_gates=feature_gates)
            server.start()
            servers[key] = server
        return servers[key]

    try:
        yield make
    finally:
        for server in servers.values():
            server.stop()


@pytest.fixture(scope="session")
def real_apiserver(real_apiserver_factory: RealAPIServerFactory) -> RealAPIServer:
    return real_apiserver_factory()
