"""drakit against the Go reference driver (``bench/go``), side by side in one run.

Four arms, each a fresh agent per round behind its own fake kubelet and embedded API server
(all in this process, as in the claims group): ``drakit`` (``drakit run``, example
discoverer with 1,000 generated devices, on the runtime venv of :mod:`bench.runtime`),
``go_status`` (the Go driver on ``k8s.io/dynamic-resource-allocation`` v0.37.2 applying
AllocatedDeviceStatus in prepare and unprepare), ``go`` (the same without status) and
``drakit_nostatus`` (``drakit run --no-device-status``), the like-for-like partner of ``go``:
it shows in the same run what drakit's background status applies cost its own calls while
the embedded API server processes them on the same 2 cores. The arms run side by side
within a round and take turns, in an order rotated every round.

Per round and arm: RSS idle (1,000 devices published, no claim, 1 s after the publish);
300 sequential prepare → unprepare pairs (1 claim x 1 device) after 30 warm-up pairs, in
:data:`LATENCY_BLOCKS` blocks of :data:`PAIRS_PER_BLOCK`: each block runs every arm once
(order rotated per block), so the arms' latencies are measured seconds apart and a slow
minute of the 2 shared cores hits all of them: prepare p50 / p99, unprepare p50 / p99 at the
fake kubelet and the agent's CPU per pair (counted per block until its status writes
stopped); :data:`THROUGHPUT_BURSTS` throughput bursts (256 claims, 16 callers), interleaved
across the arms like the latency blocks, the median burst per arm; RSS with 1,000 claims
prepared.
Cold publish: per round a fresh drakit and a fresh Go agent with 10,000 devices, from spawn
until every device is in a ResourceSlice.

Each ``vsgo_*`` figure's samples are the per-round ratios drakit / Go-with-status (its goal
on their median); ``extra`` keeps every arm's per-round values and the ratios to Go without
status; :func:`side_by_side` prints both pairings, with status and without.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.claims import (
    CALLERS,
    ClaimBench,
    ClaimRef,
    _fan_out,
    grpc_round_trips_ms,
    latency_ms,
    throughput,
)
from bench.env import (
    BenchConfig,
    agent,
    agent_pid,
    cpu_seconds,
    example_options,
    fsync_floor_ms,
    rss_mb,
)
from bench.figures import SPECS, Result, fmt, markdown_table
from bench.godriver import ensure_go_driver, go_agent
from bench.runtime import runtime_python
from bench.stats import percentile, summarize

ARMS = ("drakit", "go_status", "go", "drakit_nostatus")
ARM_TITLES = {"drakit": "drakit", "go_status": "Go + status", "go": "Go (no status)",
              "drakit_nostatus": "drakit (no status)"}
#: The latency medians, which get the per-round notes on floors and status costs.
P50_FIGURES = ("vsgo_prepare_p50", "vsgo_unprepare_p50")
#: Latency blocks per round and arm, and the prepare → unprepare pairs in each block.
LATENCY_BLOCKS = 6
PAIRS_PER_BLOCK = 50
#: Throughput bursts per round and arm (interleaved across the arms; the median counts).
THROUGHPUT_BURSTS = 3
#: GetInfo calls per gRPC floor probe (one probe per arm before and one after its latency
#: blocks).
GRPC_PROBES = 100

#: figure → unit of the arms' values (the figure itself is a ratio)
FIGURES: dict[str, str] = {
    "vsgo_prepare_p50": "ms",
    "vsgo_prepare_p99": "ms",
    "vsgo_unprepare_p50": "ms",
    "vsgo_unprepare_p99": "ms",
    "vsgo_claim_cpu": "ms",
    "vsgo_rss_idle": "MB",
    "vsgo_rss_loaded": "MB",
    "vsgo_throughput": "claims/s",
}
PUBLISH_FIGURE = "vsgo_publish_cold_10k"
#: How the vsgo figures' titles start in the main table.
TITLE_PREFIX = "drakit/Go+status, "


@dataclass
class Arm:
    """What a round needs of a running agent, whichever implementation."""

    bench: ClaimBench
    pid: int
    devices: list[tuple[str, str]]
    writes_status: bool
    cdi_dir: Path


@dataclass
class Samples:
    """Per figure, per arm: one value per round."""

    values: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    def add(self, figure: str, arm: str, value: float) -> None:
        self.values.setdefault(figure, {}).setdefault(arm, []).append(value)


def _status_writes(bench: ClaimBench) -> int:
    return bench.apiserver.write_counts()["resourceclaims/status"]


def _settle_status(bench: ClaimBench, quiet: float = 0.3, timeout: float = 5.0) -> None:
    """Wait until no status write landed for ``quiet`` seconds (at most ``timeout``)."""
    deadline = time.monotonic() + timeout
    last, since = _status_writes(bench), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = _status_writes(bench)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return


def _wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.02)


@contextlib.contextmanager
def _arm(cfg: BenchConfig, name: str, binary: Path | None, n: int) -> Iterator[Arm]:
    if name in ("drakit", "drakit_nostatus"):
        status = name == "drakit"
        with agent(cfg, "vsgo-", plugin_options=example_options(n),
                   extra_args=() if status else ("--no-device-status",)) as h:
            _wait(lambda: len(h.devices()) >= n, 60, f"{n} drakit devices published")
            yield Arm(ClaimBench(h.kubelet, h.apiserver, h.driver_name), agent_pid(h),
                      h.devices(), writes_status=status, cdi_dir=h.cdi_dir)
        return
    assert binary is not None
    with go_agent(cfg, binary, devices=n, write_status=name == "go_status") as g:
        _wait(lambda: len(g.devices()) >= n, 60, f"{n} Go devices published")
        yield Arm(g.bench, g.pid, g.devices(), writes_status=name == "go_status",
                  cdi_dir=g.cdi_dir)


def _idle_and_warm(cfg: BenchConfig, arm: Arm, name: str, r: int, out: Samples) -> None:
    out.add("vsgo_rss_idle", name, percentile([rss_mb(arm.pid) for _ in range(3)], 50))
    latency_ms(arm.bench, arm.bench.claims(f"warm{r}", [arm.devices[0]] * cfg.scale(30, 3)))
    _settle_status(arm.bench)


@dataclass
class _Latency:
    """One arm's latency samples of a round, gathered over its blocks."""

    prep: list[float] = field(default_factory=list)
    unprep: list[float] = field(default_factory=list)
    cpu: float = 0.0


def _latency_block(arm: Arm, claims: Sequence[ClaimRef], acc: _Latency) -> None:
    """Sequential prepare → unprepare pairs; the agent's CPU is counted until its status
    writes stopped."""
    c0 = cpu_seconds(arm.pid)
    prep, unprep = latency_ms(arm.bench, claims)
    _settle_status(arm.bench)
    acc.cpu += cpu_seconds(arm.pid) - c0
    acc.prep += prep
    acc.unprep += unprep


def _throughput(cfg: BenchConfig, arms: dict[str, Arm], order: list[str], r: int,
                out: Samples) -> None:
    """:data:`THROUGHPUT_BURSTS` bursts per arm, interleaved (each turn runs every arm once,
    in an order rotated per turn); the round's figure is each arm's median burst."""
    n_tp = cfg.scale(256, 32)
    rates: dict[str, list[float]] = {name: [] for name in order}
    for t in range(cfg.scale(THROUGHPUT_BURSTS, 1)):
        for name in _rotated(order, t):
            arm = arms[name]
            tp = throughput(arm.bench, arm.bench.claims(f"tp{r}.{t}", arm.devices[:n_tp]),
                            pid=arm.pid, expect_status=arm.writes_status)
            rates[name].append(tp.rate)
            _settle_status(arm.bench)
    for name in order:
        out.add("vsgo_throughput", name, percentile(rates[name], 50))


def _loaded(arm: Arm, name: str, r: int, out: Samples) -> None:
    """RSS with one claim prepared per device."""
    bench = arm.bench
    loaded = bench.claims(f"mem{r}", arm.devices)
    before = _status_writes(bench)
    _fan_out(bench.prepare, loaded, CALLERS, 300.0)
    if arm.writes_status:
        _wait(lambda: _status_writes(bench) - before >= len(loaded), 120,
              "AllocatedDeviceStatus of every loaded claim")
    time.sleep(0.5)
    out.add("vsgo_rss_loaded", name, percentile([rss_mb(arm.pid) for _ in range(5)], 50))


def _round(cfg: BenchConfig, arms: dict[str, Arm], r: int, out: Samples) -> None:
    """One round with every arm running: idle RSS and warm-up; then the latency pairs in
    interleaved blocks (each block runs every arm once, in an order rotated per block);
    then the throughput bursts, interleaved the same way; then per arm the loaded RSS."""
    order = list(arms)
    time.sleep(1.0)
    for name in order:
        _idle_and_warm(cfg, arms[name], name, r, out)
    blocks, per_block = cfg.scale(LATENCY_BLOCKS, 2), cfg.scale(PAIRS_PER_BLOCK, 5)
    acc = {name: _Latency() for name in order}
    floor: dict[str, list[float]] = {name: [] for name in order}
    grpc_floor: dict[str, list[float]] = {name: [] for name in order}

    def probe_floors() -> None:
        for name in order:
            floor[name] += fsync_floor_ms(arms[name].cdi_dir, cfg.scale(10, 2))
            bench = arms[name].bench
            grpc_floor[name] += grpc_round_trips_ms(bench.kubelet, bench.driver,
                                                    cfg.scale(GRPC_PROBES, 5))

    probe_floors()
    for b in range(blocks):
        for name in _rotated(order, b):
            arm = arms[name]
            _latency_block(arm, arm.bench.claims(f"lat{r}.{b}", [arm.devices[0]] * per_block),
                           acc[name])
    probe_floors()
    for name in order:
        a = acc[name]
        out.add("fsync_floor", name, percentile(floor[name], 50))
        out.add("grpc_floor", name, percentile(grpc_floor[name], 50))
        out.add("vsgo_claim_cpu", name, a.cpu / len(a.prep) * 1000)
        out.add("vsgo_prepare_p50", name, percentile(a.prep, 50))
        out.add("vsgo_prepare_p99", name, percentile(a.prep, 99))
        out.add("vsgo_unprepare_p50", name, percentile(a.unprep, 50))
        out.add("vsgo_unprepare_p99", name, percentile(a.unprep, 99))
    _throughput(cfg, arms, order, r, out)
    for name in order:
        _loaded(arms[name], name, r, out)


def _rotated(names: Sequence[str], k: int) -> list[str]:
    """``names`` rotated left by ``k`` (modulo their number): who goes first takes turns."""
    k %= len(names)
    return [*names[k:], *names[:k]]


def _order(r: int) -> list[str]:
    return _rotated(ARMS, r)


def _results(samples: Samples, figures: Sequence[str], rounds: int) -> list[Result]:
    out = []
    for name in figures:
        per_arm = samples.values.get(name, {})
        d, gs, g, dn = (per_arm.get(a, []) for a in ARMS)
        r = Result(name, samples=_ratios(d, gs))
        r.extra.update({a: [round(x, 4) for x in per_arm.get(a, [])] for a in ARMS})
        r.extra["ratio_vs_go"] = [round(x, 4) for x in _ratios(d, g)]
        r.extra["nostatus_ratio_vs_go"] = [round(x, 4) for x in _ratios(dn, g)]
        r.extra["rounds"] = rounds
        out.append(r)
    return out


def _ratios(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """Per-round ratios a / b (rounds where b is 0 left out)."""
    return [x / y for x, y in zip(a, b, strict=False) if y > 0]


#: What ``drakit run`` imports from other projects; their resident memory is the floor of
#: the agent's RSS before anything of drakit is loaded.
LIBRARIES = ("grpc", "grpc_health.v1.health", "kubernetes.client", "kubernetes.config",
             "pydantic", "prometheus_client", "yaml")


def library_rss_floor_mb(libraries: Sequence[str] = LIBRARIES) -> float:
    """VmRSS (MiB) of the agent's interpreter (:mod:`bench.runtime`) with only
    ``libraries`` imported."""
    code = f"import {', '.join(libraries)}, sys; print('ready', flush=True); sys.stdin.read()"
    proc = subprocess.Popen([runtime_python()[0], "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the library import probe did not start")
        time.sleep(0.5)
        return rss_mb(proc.pid)
    finally:
        proc.kill()
        proc.wait(10)


def _grpc_floor_notes(results: list[Result], samples: Samples) -> None:
    """The gRPC floor of each arm (``grpc_floor_ms`` in the prepare p50's extra) and, on the
    p50 figures, what the ratio is without the part of it no plugin code can remove: the
    difference of the two servers' GetInfo round trips, per round."""
    floors = samples.values.get("grpc_floor", {})
    d, gs = floors.get("drakit", []), floors.get("go_status", [])
    if not d or not gs:
        return
    results[0].extra["grpc_floor_ms"] = {a: [round(x, 3) for x in v] for a, v in floors.items()}
    extra_ms = [a - b for a, b in zip(d, gs, strict=False)]
    for r in results:
        if r.name not in P50_FIGURES:
            continue
        arms = zip(r.extra.get("drakit", []), r.extra.get("go_status", []), extra_ms,
                   strict=False)
        without = [(a - x) / b for a, b, x in arms if b > 0]
        if not without:
            continue
        r.extra["ratio_without_grpc_difference"] = [round(x, 4) for x in without]
        r.notes.append(
            f"gRPC floor in these rounds: Registration.GetInfo (no plugin work behind it) "
            f"takes {percentile(d, 50):.2f} ms on drakit's server (grpcio) and "
            f"{percentile(gs, 50):.2f} ms on the Go driver's (grpc-go), from the same Python "
            f"client; with that difference taken out of each round, the ratio is "
            f"{percentile(without, 50):.2f} ({min(without):.2f}-{max(without):.2f})")


def _status_cost_notes(results: list[Result]) -> None:
    """On the latency p50 figures: what writing AllocatedDeviceStatus adds to each side's own
    p50, per round (drakit - drakit --no-device-status; Go + status - Go), in ``extra``
    (``status_cost_ms``) and as a note."""
    for r in results:
        if r.name not in P50_FIGURES:
            continue
        e = r.extra
        pairs = {"drakit": (e.get("drakit", []), e.get("drakit_nostatus", [])),
                 "go": (e.get("go_status", []), e.get("go", []))}
        cost = {a: [round(x - y, 4) for x, y in zip(w, wo, strict=False)]
                for a, (w, wo) in pairs.items()}
        bare = e.get("nostatus_ratio_vs_go") or []
        if not cost["drakit"] or not cost["go"] or not bare:
            continue
        e["status_cost_ms"] = cost
        r.notes.append(
            f"what writing AllocatedDeviceStatus adds to each side's own p50 in these rounds: "
            f"drakit {percentile(cost['drakit'], 50):+.2f} ms (applied in the background, "
            f"while this process's embedded API server works on them on the same 2 cores), "
            f"Go {percentile(cost['go'], 50):+.2f} ms (the apply inside the call); without "
            f"status on either side the ratio is {percentile(bare, 50):.2f}")


def run_vsgo(cfg: BenchConfig) -> list[Result]:
    binary, reason = ensure_go_driver()
    if binary is None:
        return [Result(n, skipped=reason) for n in FIGURES]
    n = cfg.scale(1000, 64)
    rounds = cfg.scale(3, 1)
    samples = Samples()
    for r in range(rounds):
        with contextlib.ExitStack() as stack:
            arms = {name: stack.enter_context(_arm(cfg, name, binary, n))
                    for name in _order(r)}
            _round(cfg, arms, r, samples)
    results = _results(samples, list(FIGURES), rounds)
    floors = samples.values.get("fsync_floor", {})
    results[0].extra["fsync_floor_ms"] = {a: [round(x, 3) for x in v] for a, v in floors.items()}
    every = [x for v in floors.values() for x in v]
    if every:
        f = percentile(every, 50)
        results[0].notes.append(
            f"floor in these rounds: atomic_write of 1 KiB (write, fsync, rename, dir fsync) "
            f"{f:.2f} ms median, probed in each arm's CDI dir around its latency round; the Go "
            f"driver makes 3 per prepare ({3 * f:.2f} ms), drakit 2 with the example plugin, "
            f"whose prepare declares prepare_changes_node = False, the CDI spec's without "
            f"the directory fsync (< {2 * f:.2f} ms)")
    _grpc_floor_notes(results, samples)
    _status_cost_notes(results)
    rss = next(r for r in results if r.name == "vsgo_rss_idle")
    go_idle = rss.extra.get("go_status") or []
    floor_mb = library_rss_floor_mb()
    without_kubernetes = library_rss_floor_mb(
        [m for m in LIBRARIES if not m.startswith("kubernetes")])
    rss.extra["library_floor_mb"] = round(floor_mb, 1)
    rss.extra["library_floor_without_kubernetes_mb"] = round(without_kubernetes, 1)
    if go_idle:
        go_mb = percentile(go_idle, 50)
        rss.notes.append(
            f"floor in this run: the interpreter with only drakit's libraries imported "
            f"({', '.join(LIBRARIES)}) is at {floor_mb:.1f} MB = {floor_mb / go_mb:.2f}x the Go "
            f"driver's idle {go_mb:.1f} MB, before any of drakit's own code or state; "
            f"{floor_mb - without_kubernetes:.1f} MB of it is the kubernetes client "
            f"(its models load lazily, but `import kubernetes` loads every subpackage: "
            f"stream, dynamic, informer, leaderelection, utils, and with them requests, "
            f"oauthlib, websocket-client and dateutil)")
    results[0].notes.append(
        f"per-round ratios drakit / Go driver with status ({rounds} rounds, arms in rotated "
        f"order, a fresh agent per arm and round, {n} devices); the Go driver applies "
        "AllocatedDeviceStatus inside the call, drakit in the background")
    return results


def run_vsgo_publish(cfg: BenchConfig) -> list[Result]:
    binary, reason = ensure_go_driver()
    if binary is None:
        return [Result(PUBLISH_FIGURE, skipped=reason)]
    n = cfg.scale(10_000, 500)
    samples = Samples()
    for r in range(cfg.scale(3, 1)):
        for name in (("drakit", "go") if r % 2 == 0 else ("go", "drakit")):
            t0 = time.monotonic()
            # _arm waits until every device is in a ResourceSlice
            with _arm(cfg, name, binary, n):
                samples.add(PUBLISH_FIGURE, name, time.monotonic() - t0)
    # the status switch does not change publishing: the Go arm stands for both
    per_arm = samples.values[PUBLISH_FIGURE]
    per_arm["go_status"] = list(per_arm["go"])
    res = _results(samples, [PUBLISH_FIGURE], cfg.scale(3, 1))[0]
    res.notes.append(f"spawn until all {n} devices are in ResourceSlices (incl. start-up), "
                     "drakit / Go (helper's ResourceSlice controller, 128 devices per slice)")
    return [res]


def side_by_side(results: dict[str, Result]) -> str:
    """The Markdown table drakit | Go + status | ratio (median, range) | goal | verdict |
    Go without status | ratio, then (when measured) the table of both without status:
    drakit --no-device-status | Go without status | ratio; "" when no vsgo figure was
    measured."""
    rows = [("figure", "drakit", "Go + status", "drakit / Go+status", "goal", "verdict",
             "Go (no status)", "drakit / Go")]
    bare = [("figure", "drakit (no status)", "Go (no status)", "drakit / Go, both without")]
    units = {**FIGURES, PUBLISH_FIGURE: "s"}
    for name in [*FIGURES, PUBLISH_FIGURE]:
        r = results.get(name)
        if r is None:
            continue
        spec = SPECS[name]
        title = spec.title.removeprefix(TITLE_PREFIX)
        if r.summary is None:
            rows.append((title, "-", "-", "-", spec.goal.text("x"), f"skipped: {r.skipped}",
                         "-", "-"))
            continue
        unit = units[name]
        rows.append((title, _cell(r.extra.get("drakit"), unit),
                     _cell(r.extra.get("go_status"), unit),
                     _cell(r.samples, "x"), spec.goal.text("x"), r.verdict,
                     _cell(r.extra.get("go"), unit), _cell(r.extra.get("ratio_vs_go"), "x")))
        if r.extra.get("drakit_nostatus"):
            bare.append((title, _cell(r.extra.get("drakit_nostatus"), unit),
                         _cell(r.extra.get("go"), unit),
                         _cell(r.extra.get("nostatus_ratio_vs_go"), "x")))
    if len(rows) == 1:
        return ""
    text = markdown_table(rows)
    if len(bare) > 1:
        text += ("\n\nwithout AllocatedDeviceStatus on either side (drakit run "
                 "--no-device-status, the Go driver without -write-status):\n\n"
                 + markdown_table(bare))
    return text


def _cell(values: Sequence[float] | None, unit: str) -> str:
    if not values:
        return "-"
    s = summarize(list(values))
    spread = f" ({fmt(s.min)}-{fmt(s.max)})" if s.n > 1 else ""
    return f"{fmt(s.median)}{spread} {unit}".strip()
