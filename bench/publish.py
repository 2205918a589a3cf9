"""Publish figures: cold publish of 10,000 devices (example discoverer ``generate``) until
all slices exist, and the API writes of resyncs with nothing changed.

Cold publish: the clock starts right before the agent is spawned (empty API server) and
stops when the ResourceSlices of this node hold every device. Resync: the agent runs with a
1 s resync period; the API server's request log is cleared, then the bench waits
:data:`RESYNC_WINDOW` resync periods (each verification runs 0.5-1.5 periods after the
previous one, against the agent's local view: no LIST) and counts the writes made and the
ResourceSlice requests of any kind.
"""

from __future__ import annotations

import time

from bench.env import BenchConfig, agent, example_options, wait_until
from bench.figures import Result
from bench.stats import percentile
from drakit.plugin.testing.harness import DriverHarness

RESYNC_SECONDS = 1.0
#: Resync periods waited per sample: at least two verifications happen in it.
RESYNC_WINDOW = 3.5


def _device_count(h: DriverHarness) -> int:
    return sum(len(s["spec"].get("devices", [])) for s in h.slices(copy=False))


def run_publish(cfg: BenchConfig) -> list[Result]:
    n = cfg.scale(10_000, 500)
    cold = Result("publish_cold_10k")
    writes = Result("resync_writes")
    after: list[float] = []
    for rep in range(cfg.scale(3, 1)):
        t0 = time.monotonic()
        wall0 = time.time()
        with agent(cfg, "publish-", plugin_options=example_options(n),
                   extra_args=["--resync-seconds", str(RESYNC_SECONDS)]) as h:
            done = wait_until(lambda h=h: _device_count(h) >= n, 60,
                              f"{n} devices in ResourceSlices", interval=0.02)
            cold.samples.append(done - t0)
            registered = h.kubelet.registered_plugins(h.driver_name)[-1].registered_at
            after.append(done - t0 - (registered - wall0))
            if rep == 0:
                cold.extra["slices"] = len(h.slices())
            for _ in range(cfg.scale(2, 1)):
                h.apiserver.clear_requests()
                time.sleep(RESYNC_WINDOW * RESYNC_SECONDS)
                counts = h.apiserver.write_counts()
                writes.samples.append(float(sum(counts.values())))
                writes.extra.setdefault("by_resource", []).append(dict(counts))
                writes.extra.setdefault("slice_requests", []).append(
                    len(h.apiserver.requests(resource="resourceslices")))
    cold.extra["seconds_after_registration"] = [round(x, 3) for x in after]
    cold.notes.append("process spawn until every device is in a ResourceSlice (includes "
                      f"start-up; after the registration: median {percentile(after, 50):.2f} s)")
    if cfg.quick:
        cold.notes.append(f"quick mode: {n} devices, not 10,000")
    writes.notes.append(f"writes of any kind counted over {RESYNC_WINDOW} resync periods of "
                        f"{n} devices (resync period {RESYNC_SECONDS:.0f} s; slice_requests: "
                        "ResourceSlice requests of any kind in that time)")
    return [cold, writes]
