"""Fixtures for end-to-end tests: a whole driver (embedded API server + fake kubelet + the
drakit agent) in a temporary directory."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from drakit.cdi.testing import podman_cdi, schema_validator  # noqa: F401  (fixture re-exported)
from drakit.plugin.testing.harness import DriverHarness
from drakit.plugin.testing.real.controlplane import real_server_for

#: The official CDI JSON schema, carried in the repository (provenance: its PROVENANCE.md)
SCHEMA_DIR = Path(__file__).resolve().parents[1] / "data" / "cdi-schema"


@pytest.fixture
def harness_factory(tmp_path: Path, harness_apiserver: Any,
                    request: pytest.FixtureRequest) -> Iterator[Callable[..., DriverHarness]]:
    """make(**DriverHarness kwargs) → a started harness; on the real kube-apiserver for the
    ``real`` run of a test marked both_apiservers (tests/conftest.py)."""
    made: list[DriverHarness] = []

    def make(**kwargs: Any) -> DriverHarness:
        if harness_apiserver is not None:
            kwargs["apiserver"] = real_server_for(request, harness_apiserver, kwargs)
        h = DriverHarness(tmp_path / f"h{len(made)}", **kwargs)
        made.append(h)
        return h.start()

    yield make
    for h in made:
        h.stop()


@pytest.fixture
def harness(harness_factory: Callable[..., DriverHarness]) -> DriverHarness:
    """The example discoverer's devices, in-process agent, kubelet 1.34 (DRA v1)."""
    return harness_factory()


@pytest.fixture(scope="session")
def cdi_schema_errors() -> Callable[[Any], list[str]]:
    return schema_validator(SCHEMA_DIR)
