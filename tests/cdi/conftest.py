"""Fixtures for the cdi tests: the official CDI JSON schema and the podman runner."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from drakit.cdi.testing import (
    podman_cdi,  # noqa: F401  (session fixture re-exported for this dir)
    schema_validator,
)

#: The official CDI JSON schema, carried in the repository (provenance: its PROVENANCE.md)
SCHEMA_DIR = Path(__file__).resolve().parents[1] / "data" / "cdi-schema"


@pytest.fixture(scope="session")
def schema_dir() -> Path:
    """tests/data/cdi-schema: the CDI project's schema.json and defs.json."""
    return SCHEMA_DIR


@pytest.fixture(scope="session")
def schema_errors(schema_dir: Path) -> Callable[[Any], list[str]]:
    """A function: decoded spec → list of schema violations (empty when valid)."""
    return schema_validator(schema_dir)


@pytest.fixture
def assert_schema_valid(schema_errors: Callable[[Any], list[str]]) -> Callable[[Path], None]:
    """A function: spec file path → asserts the file passes the official schema."""

    def check(path: Path) -> None:
        data = json.loads(path.read_text())
        errors = schema_errors(data)
        assert not errors, f"{path} fails the CDI schema: {errors}"

    return check
