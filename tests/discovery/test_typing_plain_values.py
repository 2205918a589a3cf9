"""The plain values the docs accept (attributes, capacity, counters) pass ``mypy --strict``:
a small partitionable plugin written that way is type-checked in a subprocess, the way a
vendor's CI runs mypy (no project config), and also runs."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PLUGIN = '''
from drakit.discovery import (CounterSet, Device, DeviceCounterConsumption, DiscoveryPlugin,
                              Pool, version)


class AcmeDiscovery(DiscoveryPlugin):
    name = "acme"

    def discover(self) -> list[Pool]:
        card = CounterSet(name="card-0", counters={"memory": "16Gi", "slots": 4})
        slots = [
            Device(
                name=f"card-0-slot-{i}",
                attributes={"model": "a1", "slot": i, "spare": False, "firmware": version("2.4.1")},
                capacity={"memory": "4Gi", "lanes": 8},
                consumes_counters=[DeviceCounterConsumption(
                    counter_set="card-0", counters={"memory": "4Gi", "slots": 1},
                    compatibility_groups=["quarter"])],
            )
            for i in range(4)
        ]
        return [Pool(name=self.context.default_pool, devices=slots, counter_sets=[card])]
'''


def test_plain_values_pass_mypy_strict(tmp_path: Path) -> None:
    (tmp_path / "acme_typed.py").write_text(PLUGIN)
    env = {**os.environ, "MYPYPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--config-file", os.devnull,
         "--follow-imports", "silent", "--cache-dir", str(tmp_path / ".mypy_cache"),
         "acme_typed.py"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Success: no issues found in 1 source file" in proc.stdout


def test_the_same_plugin_runs() -> None:
    from drakit.discovery import DiscoveryContext

    module = types.ModuleType("acme_typed")
    exec(compile(PLUGIN, "acme_typed.py", "exec"), module.__dict__)
    plugin = module.AcmeDiscovery(DiscoveryContext(driver_name="acme.example.com",
                                                   node_name="node-1"))
    [pool] = plugin.discover()
    assert pool.counter_sets[0].counters["slots"].value == "4"
    dev = pool.devices[1]
    assert dev.attributes["slot"].int_ == 1 and dev.attributes["model"].string == "a1"
    assert dev.capacity["lanes"].value == "8"
    assert dev.consumes_counters is not None
    assert dev.consumes_counters[0].counters["memory"].value == "4Gi"
