"""A vendor prepare hook that never returns does not keep ``drakit run`` from stopping: on
SIGTERM the agent stops everything else, waits the gRPC grace period for the stuck call, then
logs which calls are still running and exits with status 1 instead of hanging until SIGKILL."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from drakit.plugin.testing.harness import DriverHarness

HERE = Path(__file__).resolve().parent


def test_sigterm_with_a_stuck_prepare_hook_exits(tmp_path: Path) -> None:
    h = DriverHarness(tmp_path, subprocess=True, discovery=["stuck_hook_plugin:StuckDiscovery"],
                      plugin_options={"stuck": {"generate": {"count": 1, "prefix": "dev"}}},
                      env={"PYTHONPATH": str(HERE)})
    h.start()
    try:
        [(pool, device)] = h.devices()
        claim = h.allocate("stuck", [(pool, device)])
        caller = threading.Thread(target=_quietly, args=(lambda: h.prepare(claim, timeout=60),),
                                  daemon=True)  # its call never gets an answer
        caller.start()
        h.wait_for(lambda: _claim_read(h), 20, "the prepare call to read the claim")
        time.sleep(0.5)  # and to reach the hook
        proc = h.process
        assert proc is not None
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(40)
        took = time.monotonic() - started
        h.process = None
        log = h.log_path.read_text()
        assert code == 1, log[-3000:]
        assert "1 kubelet call(s) still running" in log, log[-3000:]
        # which hook: the claim, the plugin and the device
        assert (f"1 claim(s) whose prepare hooks still run; ResourceClaim default/stuck: the "
                f"prepare hook of plugin stuck for device {pool}/{device}") in log, log[-3000:]
        # the gRPC grace is 2 s (PluginServer.stop_grace); the rest of the stop is quick
        assert took < 8, f"took {took:.1f}s to exit"
        print(f"SIGTERM to exit with a stuck hook: {took:.2f}s")
        sockets = [p for p in h.registrar_dir.iterdir() if p.is_socket()]
        assert sockets == [], sockets
    finally:
        h.stop()


def _quietly(fn: Callable[[], object]) -> None:
    with contextlib.suppress(Exception):  # the call is cancelled when the agent stops
        fn()


def _claim_read(h: DriverHarness) -> bool:
    """The agent has read the claim: its prepare is past the API read, on to the hook."""
    return bool(h.apiserver.requests(verb="get", resource="resourceclaims"))
