"""Fixtures for the reliability and security tests: fuzz budget, case counter, harness.

Fuzz budget: every hypothesis test takes ``fuzz_settings(n)``, where ``n`` is its share of
the default run (the whole fuzz suite stays well under a minute). ``DRAKIT_FUZZ_EXAMPLES=N``
scales every budget so that the shares sum to about N examples (e.g. 12000 for the long
run). The number of cases that actually ran is printed in the terminal summary
(``drakit fuzz: ... cases``) and written to ``$DRAKIT_FUZZ_REPORT`` when that is set.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from reliability_helpers import CASES

from drakit.plugin.testing.harness import DriverHarness


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not CASES.counts:
        return
    total = sum(CASES.counts.values())
    parts = ", ".join(f"{k}={v}" for k, v in sorted(CASES.counts.items()))
    terminalreporter.write_line(
        f"drakit fuzz: {total} cases, {CASES.crashes} crashes ({parts})"
    )
    report = os.environ.get("DRAKIT_FUZZ_REPORT")
    if report:
        Path(report).write_text(json.dumps(
            {"total": total, "crashes": CASES.crashes, "by_test": CASES.counts}, indent=1))


@pytest.fixture(scope="module")
def agent() -> Iterator[DriverHarness]:
    """A real node agent (example discoverer, 11 devices) with the embedded API server and
    the fake kubelet, shared by the tests of one module (start-up takes seconds)."""
    root = Path(tempfile.mkdtemp(prefix="drk-rel-"))
    h = DriverHarness(root)
    h.start()
    # start() returns once the first slice exists; the pool may span several slices (one
    # holding only the counter sets), so wait for every device of the inventory
    want = sum(len(p.devices) for p in h.app.inventory.pools())
    h.wait_for(lambda: len(h.devices()) == want, 30, "all devices to be published")
    try:
        yield h
    finally:
        h.stop()
        import shutil

        shutil.rmtree(root, ignore_errors=True)
