"""Fixtures shared by several test folders."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from drakit.plugin.testing.pytest_plugin import (  # noqa: F401 - session fixtures, one per run
    real_apiserver,
    real_apiserver_factory,
)

APISERVER_KINDS = ("embedded", "real")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "both_apiservers: run on the embedded and on a real kube-apiserver")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests marked ``both_apiservers`` that use ``apiserver_kind`` (through their folder's
    harness fixtures) run once on the embedded API server and once on a real kube-apiserver
    1.37 (the real one skips where its binaries are absent; fails under CI=true)."""
    if ("apiserver_kind" in metafunc.fixturenames
            and metafunc.definition.get_closest_marker("both_apiservers")):
        metafunc.parametrize("apiserver_kind", APISERVER_KINDS)


@pytest.fixture
def apiserver_kind() -> str:
    """Which API server the harness fixtures use: "embedded" unless parametrized."""
    return "embedded"


@pytest.fixture
def harness_apiserver(apiserver_kind: str, request: pytest.FixtureRequest) -> Any:
    """None for the embedded server (each harness makes its own), else the session's real
    kube-apiserver, reset (no slices, no claims in default) for this test."""
    if apiserver_kind != "real":
        return None
    server = request.getfixturevalue("real_apiserver")
    server.reset()
    server.clear_requests()
    return server


EXAMPLE_VENDOR = Path(__file__).resolve().parents[1] / "examples" / "drakit-example-vendor"


@pytest.fixture(scope="session")
def acme_installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The external example package (examples/drakit-example-vendor) pip-installed into a
    temp target on sys.path (never the system env; a copy of the source is built so the
    checkout gets no build/ or egg-info). Skips when pip cannot install it here."""
    tmp = tmp_path_factory.mktemp("vendor")
    src = tmp / "src"
    shutil.copytree(EXAMPLE_VENDOR, src, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    target = tmp / "site"
    try:
        r = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
             "--no-index", "--disable-pip-version-check", "--quiet", "--target", str(target),
             str(src)],
            capture_output=True, text=True, timeout=180)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"pip cannot install the example package here: {e}")
    if r.returncode != 0:
        pytest.skip(f"pip cannot install the example package here: {r.stderr[-500:]}")
    sys.path.insert(0, str(target))
    importlib.invalidate_caches()
    try:
        yield target
    finally:
        sys.path.remove(str(target))
        for mod in [m for m in sys.modules if m == "drakit_acme" or m.startswith("drakit_acme.")]:
            del sys.modules[mod]
