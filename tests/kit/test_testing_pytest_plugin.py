"""The pytest plugin (pytest11 entry point ``drakit``) is cheap: loading it imports none of the
kit's servers, no gRPC, no kubernetes client, no YAML, until a fixture is used. Checked in a
fresh interpreter that has pytest loaded already, by the modules it adds (how long that takes
depends on the machine: not a test's business)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROBE = """
import json, sys
import pytest
before = set(sys.modules)
import drakit.plugin.testing.pytest_plugin
print(json.dumps({"added": sorted(set(sys.modules) - before)}))
"""

HEAVY = ("grpc", "google.protobuf", "kubernetes", "yaml", "pydantic", "urllib3", "ssl",
         "drakit.plugin.testing.apiserver", "drakit.plugin.testing.kubelet",
         "drakit.plugin.testing.real", "drakit.plugin.testing.harness", "drakit.cdi",
         "drakit.discovery")


def _probe() -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    result: dict[str, object] = json.loads(out)
    return result


def test_loading_the_pytest_plugin_imports_nothing_heavy() -> None:
    result = _probe()
    added = result["added"]
    assert isinstance(added, list)
    heavy = [m for m in added if any(m == h or m.startswith(h + ".") for h in HEAVY)]
    assert heavy == []
    assert len(added) <= 15, added  # drakit, drakit.plugin, the kit package, ...


def test_the_entry_point_names_the_plugin_module() -> None:
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="pytest11") if e.name == "drakit"]
    assert ep.value == "drakit.plugin.testing.pytest_plugin"
