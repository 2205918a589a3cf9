"""Claim figures: prepare / unprepare latency at the fake kubelet, prepare throughput, the
fsync floor beside them, and the agent's RSS with 1,000 devices and 1,000 claims prepared.

The workload functions take a :class:`ClaimBench` (a fake kubelet, a driver name and an API
server to create claims in), so the same code drives drakit and kubernetes-pydra.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from bench.env import NODE, BenchConfig, agent, agent_pid, example_options, fsync_floor_ms, rss_mb
from bench.figures import Result
from bench.stats import percentile
from plugin.testing.apiserver import AllocatedDevice, EmbeddedAPIServer
from plugin.testing.fake_kubelet import FakeKubelet

ClaimRef = tuple[str, str, str]
CALL_TIMEOUT = 30.0
#: Concurrent callers of the throughput figure (issue 9).
CALLERS = 16


class BenchError(RuntimeError):
    """The system under test answered wrongly (an error for a claim, no CDI device ID)."""


@dataclass
class ClaimBench:
    """Drives NodePrepareResources / NodeUnprepareResources of ``driver`` through
    ``kubelet``; claims are created in ``apiserver`` allocated on ``node``."""

    kubelet: FakeKubelet
    apiserver: EmbeddedAPIServer
    driver: str
    node: str = NODE
    namespace: str = "bench"

    def claims(self, prefix: str, devices: Sequence[tuple[str, str]]) -> list[ClaimRef]:
        """One allocated claim per (pool, device); returns (namespace, name, uid)."""
        out = []
        for i, (pool, device) in enumerate(devices):
            name = f"{prefix}-{i}"
            uid = str(uuid.uuid4())
            self.apiserver.create_claim(
                self.namespace, name, [AllocatedDevice(self.driver, pool, device)], uid=uid,
                node_name=self.node)
            out.append((self.namespace, name, uid))
        return out

    def prepare(self, claim: ClaimRef) -> None:
        result = self.kubelet.node_prepare_resources(self.driver, [claim], CALL_TIMEOUT)
        got = result[claim[2]]
        if got.error or not got.cdi_device_ids:
            raise BenchError(f"prepare of {claim[1]} failed: {got.error or 'no CDI device IDs'}")

    def unprepare(self, claim: ClaimRef) -> None:
        error = self.kubelet.node_unprepare_resources(self.driver, [claim], CALL_TIMEOUT)
        if error[claim[2]]:
            raise BenchError(f"unprepare of {claim[1]} failed: {error[claim[2]]}")


def latency_ms(bench: ClaimBench, claims: Sequence[ClaimRef]) -> tuple[list[float], list[float]]:
    """Prepare then unprepare each claim in turn (one caller); milliseconds of each call."""
    prep: list[float] = []
    unprep: list[float] = []
    for claim in claims:
        t0 = time.perf_counter()
        bench.prepare(claim)
        t1 = time.perf_counter()
        bench.unprepare(claim)
        t2 = time.perf_counter()
        prep.append((t1 - t0) * 1000)
        unprep.append((t2 - t1) * 1000)
    return prep, unprep


def _fan_out(fn: object, claims: Sequence[ClaimRef], callers: int, timeout: float) -> float:
    """Run ``fn(claim)`` for every claim on ``callers`` threads; return the wall seconds."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(callers, thread_name_prefix="bench-caller") as pool:
        futures = [pool.submit(fn, c) for c in claims]  # type: ignore[arg-type]
        for f in futures:
            f.result(timeout=timeout)
    return time.perf_counter() - t0


def throughput(bench: ClaimBench, claims: Sequence[ClaimRef], callers: int = CALLERS) -> float:
    """Prepare all ``claims`` (one claim per call) from ``callers`` concurrent callers;
    returns claims per second. Unprepares them afterwards (not timed)."""
    seconds = _fan_out(bench.prepare, claims, callers, 120.0)
    _fan_out(bench.unprepare, claims, callers, 120.0)
    return len(claims) / seconds


def latency_results(prefix: str, rounds: list[tuple[list[float], list[float]]]) -> list[Result]:
    """p50 / p99 figures: one sample per round (the round's percentile)."""
    out = []
    for which, idx in (("prepare", 0), ("unprepare", 1)):
        for q in (50, 99):
            r = Result(f"{prefix}{which}_p{q}",
                       samples=[percentile(rnd[idx], q) for rnd in rounds])
            r.extra["calls_per_round"] = len(rounds[0][idx])
            out.append(r)
    return out


def run_claims(cfg: BenchConfig) -> list[Result]:
    """Latency, throughput, fsync floor and loaded RSS on one agent with 1,000 devices."""
    n_devices = cfg.scale(1000, 64)
    rounds = cfg.scale(3, 1)
    calls = cfg.scale(300, 10)
    n_tp = cfg.scale(256, 32)
    with agent(cfg, "claims-", plugin_options=example_options(n_devices)) as h:
        h.wait_for(lambda: len(h.devices()) >= n_devices, 30, f"{n_devices} devices published")
        devices = h.devices()
        bench = ClaimBench(h.kubelet, h.apiserver, h.driver_name)
        # Warm-up: connections, lazy imports and caches on both sides.
        latency_ms(bench, bench.claims("warm", [devices[0]] * cfg.scale(30, 3)))
        lat = [latency_ms(bench, bench.claims(f"lat{r}", [devices[0]] * calls))
               for r in range(rounds)]
        results = latency_results("", lat)

        floor = Result("fsync_floor", samples=fsync_floor_ms(h.cdi_dir, cfg.scale(50, 5)))
        prep_floor = 3 * floor.summary.median if floor.summary else 0.0
        floor.notes.append(
            f"a prepare makes 3 atomic writes (checkpoint PrepareStarted, CDI spec, checkpoint "
            f"PrepareCompleted) = {prep_floor:.2f} ms of fsync; an unprepare 1 atomic write + "
            f"1 directory fsync")
        results.append(floor)
        p50 = results[0].summary
        if p50 is not None and prep_floor >= 0.5 * p50.median:
            results[0].notes.append(
                f"fsync dominates: {prep_floor:.2f} ms of the {p50.median:.2f} ms p50 is the "
                f"physical floor of 3 durable writes on this disk")

        tp = Result("prepare_throughput")
        for r in range(rounds):
            tp.samples.append(throughput(bench, bench.claims(f"tp{r}", devices[:n_tp])))
        tp.extra["claims"] = n_tp
        tp.extra["callers"] = CALLERS
        results.append(tp)

        results.append(_loaded_rss(cfg, h, bench, devices[:n_devices]))
    return results


def _loaded_rss(cfg: BenchConfig, h: object, bench: ClaimBench,
                devices: Sequence[tuple[str, str]]) -> Result:
    from plugin.testing.harness import DriverHarness

    assert isinstance(h, DriverHarness)
    claims = bench.claims("mem", devices)
    _fan_out(bench.prepare, claims, CALLERS, 300.0)
    # Let the background status writer finish its applies before sampling.
    h.wait_for(lambda: h.apiserver.write_counts()["resourceclaims/status"] >= len(claims),
               120, "AllocatedDeviceStatus of every claim")
    time.sleep(0.5)
    pid = agent_pid(h)
    r = Result("rss_loaded")
    for _ in range(5):
        r.samples.append(rss_mb(pid))
        time.sleep(0.1)
    r.extra["devices"] = len(devices)
    r.extra["claims_prepared"] = len(claims)
    r.notes.append("samples: 5 reads of VmRSS 0.1 s apart, one agent")
    if cfg.quick:
        r.notes.append(f"quick mode: {len(devices)} devices / claims, not 1,000")
    return r
