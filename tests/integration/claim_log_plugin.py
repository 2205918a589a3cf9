"""A discovery plugin with buggy hooks (loaded as ``claim_log_plugin:BuggyHooks`` by
tests/integration/test_claim_log_lines.py): prepare of ``dev-1`` raises KeyError, unprepare of
``dev-2`` raises RuntimeError; the other devices prepare as the example plugin does."""

from __future__ import annotations

from typing import ClassVar

from drakit.discovery.builtin.example import ExampleDiscovery
from drakit.discovery.plugin import DeviceRequest, PreparedDevice, UnprepareRequest


class BuggyHooks(ExampleDiscovery):
    name: ClassVar[str] = "buggy"

    def prepare(self, request: DeviceRequest) -> PreparedDevice:
        if request.device.name == "dev-1":
            return {"a": 1}["nope"]  # type: ignore[return-value]  # the vendor's bug
        return super().prepare(request)

    def unprepare(self, request: UnprepareRequest) -> None:
        if request.device == "dev-2":
            raise RuntimeError("card did not reset")
