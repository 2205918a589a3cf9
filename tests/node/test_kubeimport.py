"""The lean ``kubernetes`` import of ``drakit run`` (plugin/kubeimport.py), in a fresh
interpreter each time (the test process has the whole package imported already)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
from drakit.plugin.kubeimport import lean_kubernetes
first = lean_kubernetes()
again = lean_kubernetes()
from kubernetes import client, config
import kubernetes
out = {
    "first": first, "again": again,
    "loaded": sorted(m for m in sys.modules if m.count(".") == 1 and m.startswith("kubernetes.")),
    "version": kubernetes.__version__,
    "api_client": client.ApiClient.__name__,
    "watch": kubernetes.watch.Watch.__name__,
    "loaded_after": sorted(m for m in sys.modules if m.startswith("kubernetes.watch")),
}
try:
    kubernetes.no_such_part
except AttributeError as e:
    out["missing"] = str(e)
print(json.dumps(out))
"""


def _probe() -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True,
                          text=True, check=True, timeout=60)
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_only_client_and_config_load_and_the_rest_stays_reachable() -> None:
    from importlib.metadata import version

    got = _probe()
    assert got["first"] is True and got["again"] is False
    loaded = got["loaded"]
    assert isinstance(loaded, list)
    assert "kubernetes.client" in loaded and "kubernetes.config" in loaded
    # what kubernetes/__init__.py would have imported eagerly, now not:
    assert "kubernetes.dynamic" not in loaded and "kubernetes.stream" not in loaded
    assert "kubernetes.watch" not in loaded
    assert "kubernetes.watch" in got["loaded_after"]  # type: ignore[operator]
    assert got["version"] == version("kubernetes")
    assert got["api_client"] == "ApiClient" and got["watch"] == "Watch"
    assert got["missing"] == "module 'kubernetes' has no attribute 'no_such_part'"
