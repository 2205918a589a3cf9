"""The chaos run as a test: ~3 minutes of faults on a real node (CHAOS_DURATION seconds,
seed CHAOS_SEED, else one from the clock, printed), 0 violations expected. Skips with the
reason where a real node cannot run (not root, binaries not built); under ``CI=true`` that
is a failure instead, as for the real-node tier."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from drakit.plugin.testing.real.node import node_unavailable_reason

from .driver import ChaosRun

pytestmark = [pytest.mark.slow, pytest.mark.root]


def test_chaos_short_run(tmp_path: Path) -> None:
    reason = node_unavailable_reason()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the chaos run cannot run under CI: {reason}")
        pytest.skip(reason)
    seed = int(os.environ.get("CHAOS_SEED") or time.time())
    duration = float(os.environ.get("CHAOS_DURATION") or 180)
    print(f"chaos seed: {seed}")
    report = ChaosRun(seed, duration, log_file=tmp_path / "chaos.log",
                      artifacts=tmp_path / "artifacts").run()
    assert not report, report.failure() + "\n" + report.summary()
    assert report.figures["pods started (Ready)"], report.summary()
    assert report.figures["faults run"], report.summary()
    # the independent views were read: containerd showed containers with drakit's devices
    assert not str(report.figures["containers checked from containerd (device env entries)"]
                   ).startswith("0"), report.summary()
