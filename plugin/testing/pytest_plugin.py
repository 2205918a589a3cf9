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
  :class:`~plugin.testing.fake_kubelet.FakeKubelet`; every one it made is stopped at teardown.
- ``fake_kubelet``: one started 1.34 fake kubelet on ``fake_kubelet_registrar_dir``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from plugin.testing.fake_kubelet import FakeKubelet

FakeKubeletFactory = Callable[..., FakeKubelet]


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
