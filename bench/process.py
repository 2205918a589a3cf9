"""Process figures: start to registered with the fake kubelet, and RSS when idle after start.

Each repeat is a fresh ``drakit run`` with the default example inventory (11 devices). The
clock starts right before :meth:`DriverHarness.start` (which starts the API server and the
fake kubelet in a few milliseconds, then spawns the agent) and stops at the fake kubelet's
record of the successful registration (``RegisteredPlugin.registered_at``).
"""

from __future__ import annotations

import time

from bench.env import DRIVER, BenchConfig, agent, agent_pid, rss_mb
from bench.figures import Result

#: Seconds the agent is left alone before its idle RSS is read.
IDLE_SETTLE = 1.0


def run_start(cfg: BenchConfig) -> list[Result]:
    start = Result("start_to_registered")
    idle = Result("rss_idle")
    for _ in range(cfg.scale(5, 1)):
        t0 = time.time()
        with agent(cfg, "start-") as h:
            registered = h.kubelet.registered_plugins(DRIVER)[-1]
            start.samples.append(registered.registered_at - t0)
            time.sleep(IDLE_SETTLE)
            idle.samples.append(rss_mb(agent_pid(h)))
    start.notes.append("process spawn (python -m drakit.plugin.ops.cli run) until the fake kubelet "
                       "accepted the registration; fake kubelet scans every 5 ms")
    idle.notes.append(f"VmRSS {IDLE_SETTLE:.0f} s after registration, example discoverer "
                      "(11 devices), no claims")
    return [start, idle]
