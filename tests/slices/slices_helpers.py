"""Shared helpers for the ResourceSlice tests (imported by conftest and test modules)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

DRIVER = "gpu.example.com"
NODE = "node-a"


class SleepRecorder:
    """Stands in for time.sleep in retry paths: records delays, waits for nothing."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def wait_for(pred: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    """Poll ``pred`` until truthy; fail after ``timeout`` seconds (a bound, not a measure)."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
