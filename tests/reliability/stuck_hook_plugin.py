"""A discovery plugin whose prepare hook never returns (loaded as
``stuck_hook_plugin:StuckDiscovery`` by tests/reliability/test_rel_stuck_hook.py)."""

from __future__ import annotations

import threading
from typing import ClassVar

from drakit.discovery.builtin.example import ExampleDiscovery
from drakit.discovery.plugin import DeviceRequest, PreparedDevice


class StuckDiscovery(ExampleDiscovery):
    """The example discoverer, except that prepare blocks forever (a hung vendor call)."""

    name: ClassVar[str] = "stuck"

    def prepare(self, request: DeviceRequest) -> PreparedDevice:
        threading.Event().wait()
        raise AssertionError("unreachable")
