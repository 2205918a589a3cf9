"""Fixtures of the deploy checks."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from deploy_helpers import REPO

_spec = importlib.util.spec_from_file_location("gen_kustomize_base",
                                               REPO / "scripts" / "gen_kustomize_base.py")
assert _spec and _spec.loader
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)


@pytest.fixture(scope="session")
def helm() -> str:
    """The helm binary scripts/build-k8s.sh built; skips without it (fails under CI=true)."""
    found = gen.find_helm()
    if found is None or not Path(found).exists():
        reason = "helm not built (scripts/build-k8s.sh helm)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the Helm chart tests: {reason}")
        pytest.skip(reason)
    return str(found)
