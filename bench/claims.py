"""Claim figures: prepare / unprepare latency at the fake kubelet, prepare throughput, the
fsync floor beside them, and the agent's RSS with 1,000 devices and 1,000 claims prepared.

The workload functions take a :class:`ClaimBench` (a fake kubelet, a driver name and an API
server to create claims in), so the same code drives drakit and kubernetes-pydra.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import grpc

from bench.env import (
    NODE,
    BenchConfig,
    agent,
    agent_pid,
    cpu_seconds,
    example_options,
    fsync_floor_ms,
    rss_mb,
)
from bench.figures import Result
from bench.stats import percentile, timed_ms
from drakit.plugin._proto.pluginregistration.v1 import api_pb2 as reg_pb2
from drakit.plugin._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from drakit.plugin.api.resourceapi import ResourceAPI
from drakit.plugin.testing.apiserver import AllocatedDevice, EmbeddedAPIServer
from drakit.plugin.testing.kubelet.fake import FakeKubelet

ClaimRef = tuple[str, str, str]
CALL_TIMEOUT = 30.0
#: Concurrent callers of the throughput figure.
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


def _fan_out(fn: Callable[[ClaimRef], None], claims: Sequence[ClaimRef], callers: int,
             timeout: float) -> float:
    """Run ``fn(claim)`` for every claim on ``callers`` threads; return the wall seconds."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(callers, thread_name_prefix="bench-caller") as pool:
        futures = [pool.submit(fn, c) for c in claims]
        for f in futures:
            f.result(timeout=timeout)
    return time.perf_counter() - t0


@dataclass
class Throughput:
    """One throughput round: claims per second, and CPU milliseconds per prepared claim of
    the agent (``pid``) and of this process (fake kubelet client + embedded API server),
    counted until the claims' AllocatedDeviceStatus applies landed."""

    rate: float
    agent_cpu_ms: float | None = None
    bench_cpu_ms: float | None = None


def throughput(bench: ClaimBench, claims: Sequence[ClaimRef], callers: int = CALLERS,
               pid: int | None = None, expect_status: bool = True) -> Throughput:
    """Prepare all ``claims`` (one claim per call) from ``callers`` concurrent callers.
    Unprepares them afterwards (not timed). With ``pid``, CPU is counted until every claim
    got its status write (``expect_status``) or at once."""
    status_before = bench.apiserver.write_counts()["resourceclaims/status"]
    c0 = cpu_seconds(pid) if pid else 0.0
    b0 = time.process_time()
    seconds = _fan_out(bench.prepare, claims, callers, 120.0)
    out = Throughput(len(claims) / seconds)
    if pid:
        deadline = time.monotonic() + 30
        while (expect_status
               and bench.apiserver.write_counts()["resourceclaims/status"] - status_before
               < len(claims) and time.monotonic() < deadline):
            time.sleep(0.01)
        out.agent_cpu_ms = (cpu_seconds(pid) - c0) / len(claims) * 1000
        out.bench_cpu_ms = (time.process_time() - b0) / len(claims) * 1000
    _fan_out(bench.unprepare, claims, callers, 120.0)
    return out


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
    """Latency, throughput, fsync floor and loaded RSS on one agent with 1,000 devices.

    The fsync floor is probed right before and after each latency round, in the agent's CDI
    directory, so it reflects the disk as the round saw it (shared machines vary a lot).
    """
    n_devices = cfg.scale(1000, 64)
    rounds = cfg.scale(3, 1)
    calls = cfg.scale(300, 10)
    n_tp = cfg.scale(256, 32)
    probes = cfg.scale(10, 2)
    with agent(cfg, "claims-", plugin_options=example_options(n_devices)) as h:
        h.wait_for(lambda: len(h.devices()) >= n_devices, 30, f"{n_devices} devices published")
        devices = h.devices()
        pid = agent_pid(h)
        bench = ClaimBench(h.kubelet, h.apiserver, h.driver_name)
        # Warm-up: connections, lazy imports and caches on both sides.
        latency_ms(bench, bench.claims("warm", [devices[0]] * cfg.scale(30, 3)))
        floor = Result("fsync_floor")
        cpu = Result("claim_cpu")
        lat = []
        for r in range(rounds):
            claims = bench.claims(f"lat{r}", [devices[0]] * calls)
            floor.samples.extend(fsync_floor_ms(h.cdi_dir, probes))
            c0 = cpu_seconds(pid)
            lat.append(latency_ms(bench, claims))
            cpu.samples.append((cpu_seconds(pid) - c0) / calls * 1000)
            floor.samples.extend(fsync_floor_ms(h.cdi_dir, probes))
        results = latency_results("", lat)
        grpc_floor = Result("grpc_floor", samples=[
            percentile(grpc_round_trips_ms(h.kubelet, h.driver_name, calls), 50)
            for _ in range(rounds)])
        get_floor = Result("claim_get_floor", samples=[
            percentile(claim_get_ms(h.apiserver, claims[0], calls), 50) for _ in range(rounds)])
        grpc_floor.notes.append(
            "Registration.GetInfo on the agent's registration socket (same gRPC server "
            "process, no work behind it): what any call costs before the plugin does anything")
        get_floor.notes.append(
            "drakit.plugin.api.resourceapi.ResourceAPI.get_claim from the bench process against "
            "the embedded API server: the one API read every prepare makes")
        results += [floor, grpc_floor, get_floor, cpu]
        _floor_notes(results[0], floor, grpc_floor, get_floor)
        cpu.notes.append("agent process CPU (user + system) per prepare + unprepare pair in "
                         "the latency rounds, incl. its background AllocatedDeviceStatus "
                         "writes; noise-robust, unlike wall-clock figures")

        tp = Result("prepare_throughput")
        agent_cpu, bench_cpu = [], []
        for r in range(rounds):
            got = throughput(bench, bench.claims(f"tp{r}", devices[:n_tp]), pid=pid)
            tp.samples.append(got.rate)
            agent_cpu.append(got.agent_cpu_ms or 0.0)
            bench_cpu.append(got.bench_cpu_ms or 0.0)
        tp.extra.update(claims=n_tp, callers=CALLERS,
                        agent_cpu_ms_per_claim=[round(x, 2) for x in agent_cpu],
                        bench_cpu_ms_per_claim=[round(x, 2) for x in bench_cpu])
        total = percentile(agent_cpu, 50) + percentile(bench_cpu, 50)
        tp.notes.append(
            f"CPU per prepared claim: agent {percentile(agent_cpu, 50):.1f} ms + bench process "
            f"(fake kubelet, embedded API server) {percentile(bench_cpu, 50):.1f} ms = "
            f"{total:.1f} ms; {os.cpu_count()} CPUs allow at most "
            f"{(os.cpu_count() or 1) * 1000 / total:.0f} claims/s")
        results.append(tp)

        results.append(_loaded_rss(cfg, h, bench, devices[:n_devices]))
    return results


def grpc_round_trips_ms(kubelet: FakeKubelet, driver: str, n: int) -> list[float]:
    """Milliseconds of ``n`` Registration.GetInfo calls on the registration socket of
    ``driver``'s newest instance at ``kubelet`` (after 20 warm-up calls, on a channel of
    their own): the gRPC cost of a call without any plugin work, whatever implements it."""
    sock = kubelet.registered_plugins(driver)[-1].registration_socket
    with grpc.insecure_channel(f"unix:{sock}") as channel:
        stub = reg_grpc.RegistrationStub(channel)
        return timed_ms(lambda: stub.GetInfo(reg_pb2.InfoRequest(), timeout=CALL_TIMEOUT), n)


def claim_get_ms(apiserver: EmbeddedAPIServer, claim: ClaimRef, n: int) -> list[float]:
    """Milliseconds of ``n`` ResourceClaim GETs through :class:`ResourceAPI` (after 20
    warm-up calls), the read every prepare makes."""
    api = ResourceAPI(apiserver.api_client())
    return timed_ms(lambda: api.get_claim(claim[0], claim[1]), n)


def _floor_notes(p50: Result, floor: Result, grpc_floor: Result | None = None,
                 get_floor: Result | None = None) -> None:
    f = floor.summary
    p = p50.summary
    if f is None or p is None:
        return
    # The bench's example plugin declares a prepare that changes nothing on the node
    # (prepare_changes_node = False): no PrepareStarted write (plugin/claims/prepare.py)
    prep_floor = 2 * f.median
    floor.notes.append(
        f"a prepare makes 2 atomic writes (CDI spec, its directory not fsynced: "
        f"plugin/claims/claimdevices.py; checkpoint PrepareCompleted: 3 fsyncs; a plugin whose "
        f"prepare changes the node adds PrepareStarted) <= {prep_floor:.2f} ms at the median "
        f"floor ({2 * f.p90:.2f} ms at p90); an unprepare 1 atomic write + 1 unlink (not "
        f"made durable: plugin/claims/unprepare.py)")
    share = prep_floor / p.median if p.median else 0.0
    verdict = "dominates" if share >= 0.5 else "is a minor part of"
    p50.notes.append(f"fsync {verdict} prepare latency: {prep_floor:.2f} ms of the "
                     f"{p.median:.2f} ms p50 ({share:.0%}) is the physical floor of 2 durable "
                     f"writes on this disk")
    g = grpc_floor.summary if grpc_floor else None
    c = get_floor.summary if get_floor else None
    if g is not None and c is not None:
        total = prep_floor + g.median + c.median
        p50.notes.append(
            f"floor of a prepare before any Python bookkeeping: gRPC round trip "
            f"{g.median:.2f} + claim GET {c.median:.2f} + 2 durable writes {prep_floor:.2f} = "
            f"{total:.2f} ms; the remaining {max(0.0, p.median - total):.2f} ms is agent CPU "
            f"(checkpoint, CDI spec, plugin hook, gRPC handler) and waiting for its GIL "
            f"(the background AllocatedDeviceStatus apply)")


def _loaded_rss(cfg: BenchConfig, h: object, bench: ClaimBench,
                devices: Sequence[tuple[str, str]]) -> Result:
    from drakit.plugin.testing.harness import DriverHarness

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
