"""A discovery plugin whose prepare changes the node (declared) and waits while the file
named by ``$LATE_HOOK_GATE`` exists; every unprepare appends its device to
``$LATE_HOOK_LOG`` (loaded as ``late_hook_plugin:LateHookDiscovery`` by
tests/reliability/test_rel_hook_bounded.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import ClassVar

from drakit.discovery.builtin.example import ExampleDiscovery
from drakit.discovery.plugin import DeviceRequest, PreparedDevice, UnprepareRequest


class LateHookDiscovery(ExampleDiscovery):
    """The example discoverer, with a prepare that changes the node and can hang."""

    name: ClassVar[str] = "late"
    prepare_changes_node: ClassVar[bool] = True

    def prepare(self, request: DeviceRequest) -> PreparedDevice:
        gate = Path(os.environ["LATE_HOOK_GATE"])
        while gate.exists():
            time.sleep(0.05)
        return super().prepare(request)

    def unprepare(self, request: UnprepareRequest) -> None:
        with open(os.environ["LATE_HOOK_LOG"], "a") as f:
            f.write(f"{request.claim.uid} {request.pool}/{request.device}\n")
