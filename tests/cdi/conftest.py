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

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"
SCHEMA_DIR = SHARED / "reference" / "cdi-schema"


@pytest.fixture(scope="session")
def schema_dir() -> Path:
    """shared/reference/cdi-schema (beside the repo clone); skips when absent."""
    if not (SCHEMA_DIR / "schema.json").is_file():
        pytest.skip(f"CDI schema not found at {SCHEMA_DIR} (shared/ must sit beside the repo)")
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
