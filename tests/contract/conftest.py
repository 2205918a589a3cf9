"""Fixtures for the kubelet-contract tests: whole drivers (embedded API server + fake kubelet
+ the drakit agent, in-process or as a subprocess) in temporary directories."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from drakit.plugin.testing.harness import DriverHarness
from drakit.plugin.testing.real.controlplane import real_server_for

FAST = {
    "health_resend_seconds": 2.0,
    "resync_seconds": 2.0,
}


@pytest.fixture
def harness_factory(tmp_path: Path, harness_apiserver: Any,
                    request: pytest.FixtureRequest) -> Iterator[Callable[..., DriverHarness]]:
    """make(**DriverHarness kwargs) → a started harness; ``start=False`` leaves it stopped.
    All are stopped at teardown. On the real kube-apiserver for the ``real`` run of a test
    marked both_apiservers (tests/conftest.py)."""
    made: list[DriverHarness] = []

    def make(start: bool = True, **kwargs: Any) -> DriverHarness:
        if harness_apiserver is not None:
            kwargs["apiserver"] = real_server_for(request, harness_apiserver, kwargs)
        if not kwargs.get("subprocess"):
            kwargs["settings"] = {**FAST, **kwargs.get("settings", {})}
        h = DriverHarness(tmp_path / f"h{len(made)}", **kwargs)
        made.append(h)
        return h.start() if start else h

    yield make
    for h in made:
        h.stop()
