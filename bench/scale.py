"""``python -m bench.scale`` (``make bench-scale``): the ResourceSlice publisher at cluster
scale, against a real etcd + kube-apiserver 1.37 (:mod:`drakit.plugin.testing.real.controlplane`).

Simulated nodes are real :class:`~drakit.plugin.slices.publisher.SlicePublisher` objects with their
default settings (resync 30 s, watch timeout 300 s, idle bound 150 s, recovery spread
20 s), many in this one process: each has its own node name (a Node object exists for its
owner reference), its own ``ResourceAPI`` / ``ApiClient`` (own connections: one for the
watch, one for everything else, as a real agent), its own threads and its own jitter
generator. They share one bearer token (the admin's): the API server's cost of
authorising a node-bound token is not what is measured here.

Every request a publisher makes goes through :class:`CountingAPI` (time, verb, whether it
reached the server); the API server's own ``apiserver_request_total`` (by verb, for
resourceslices and nodes) is scraped before and after each phase as a cross-check, and the
CPU time of kube-apiserver and etcd is read from ``/proc/<pid>/stat``.

Phases (all bounded in time):

1. cold start: every publisher started at once; until every pool is published.
2. steady state: ``--steady`` seconds (default 300) after a settling pause; requests per node
   per second by verb, writes, busiest second against the mean, CPU per node.
3. API server restart: SIGTERM to kube-apiserver (it drains: how long until each watch
   notices), a new one on the same port and etcd; until every node verified its slices
   against the new server; requests per node, rewrites, busiest second.
4. after the restart: ``--after`` seconds of steady state again (and the 5-minute window
   that holds the restart).
5. mass deletion: every ResourceSlice deleted in one DELETE collection call; until every
   node has republished; requests per node, busiest second.

Figures go to stdout as a table and to ``--out`` (JSON). Exit status 1 when a phase did not
complete in its bound.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from unittest import mock

from kubernetes.client import ApiClient, ApiException, Configuration
from prometheus_client.parser import text_string_to_metric_families

from drakit.discovery.model import Device, Pool
from drakit.plugin.api.resourceapi import ResourceAPI, SliceWatch, WatchEvent
from drakit.plugin.slices.publisher import SlicePublisher
from drakit.plugin.testing.real import controlplane
from drakit.plugin.testing.real.binaries import find_k8s_bin_dir
from drakit.plugin.testing.real.controlplane import RealAPIServer

log = logging.getLogger("bench.scale")
T = TypeVar("T")
DRIVER = "scale.drakit.example.com"
CLK_TCK = os.sysconf("SC_CLK_TCK")
WINDOW = 300.0
"""The issue's window for "busiest second against the mean" (seconds)."""


# ---------------------------------------------------------------------------------------------
# counting every request of every publisher

@dataclass
class Recorder:
    """Every request: (time.monotonic(), node index, verb, reached) where ``reached`` is
    False for a connection that failed (refused, reset before an answer). Watch ends:
    (time.monotonic(), node index)."""

    requests: list[tuple[float, int, str, bool]] = field(default_factory=list)
    watch_ends: list[tuple[float, int]] = field(default_factory=list)
    #: (start, seconds, node, verb, outcome) of each request, for --dump
    log: list[tuple[float, float, int, str, str]] = field(default_factory=list)

    def since(self, t0: float, t1: float = math.inf) -> list[tuple[float, int, str, bool]]:
        return [r for r in self.requests if t0 <= r[0] < t1]


class _TimedWatch:
    """A SliceWatch that records when its stream ended."""

    def __init__(self, inner: SliceWatch, rec: Recorder, node: int) -> None:
        self._inner, self._rec, self._node = inner, rec, node

    def __iter__(self) -> Iterator[WatchEvent]:
        try:
            yield from self._inner
        finally:
            self._rec.watch_ends.append((time.monotonic(), self._node))

    def close(self) -> None:
        self._inner.close()


class CountingAPI(ResourceAPI):
    """ResourceAPI recording each call of the publisher in a :class:`Recorder`."""

    def __init__(self, api_client: ApiClient, rec: Recorder, node: int) -> None:
        super().__init__(api_client)
        self._rec, self._node = rec, node

    def _count(self, verb: str, fn: Callable[[], T]) -> T:
        t = time.monotonic()
        try:
            out = fn()
        except ApiException as exc:
            self._done(t, verb, f"HTTP {exc.status}" if exc.status else "no answer")
            raise
        except Exception as exc:
            self._done(t, verb, f"no answer ({type(exc).__name__})")
            raise
        self._done(t, verb, "ok")
        return out

    def _done(self, t: float, verb: str, outcome: str) -> None:
        self._rec.requests.append((t, self._node, verb, not outcome.startswith("no answer")))
        self._rec.log.append((t, time.monotonic() - t, self._node, verb, outcome))

    def list_slices(self, driver: str, node: str | None = None, *,
                    label_selector: str | None = None) -> Any:
        return self._count("list", lambda: super(CountingAPI, self).list_slices(
            driver, node, label_selector=label_selector))

    def create_slice(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self._count("create", lambda: super(CountingAPI, self).create_slice(obj))

    def update_slice(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self._count("update", lambda: super(CountingAPI, self).update_slice(obj))

    def delete_slice(self, name: str, *, uid: str | None = None,
                     resource_version: str | None = None) -> None:
        self._count("delete", lambda: super(CountingAPI, self).delete_slice(
            name, uid=uid, resource_version=resource_version))

    def get_node_uid(self, name: str) -> str:
        return self._count("get node", lambda: super(CountingAPI, self).get_node_uid(name))

    def watch_slices(self, driver: str, node: str | None, resource_version: str | None,
                     timeout_seconds: int = 300, *,
                     label_selector: str | None = None) -> Any:
        w = self._count("watch", lambda: super(CountingAPI, self).watch_slices(
            driver, node, resource_version, timeout_seconds, label_selector=label_selector))
        return _TimedWatch(w, self._rec, self._node)


# ---------------------------------------------------------------------------------------------
# the control plane

class ScaleControlPlane(RealAPIServer):
    """A RealAPIServer whose kube-apiserver can be restarted on the same port (and etcd),
    without the audit log (it would dominate the API server's CPU at this request rate)."""

    def restart_apiserver(self, drain_timeout: float = 90.0) -> tuple[float, float, float]:
        """SIGTERM kube-apiserver, wait for it to exit, start a new one on the same port.
        Returns time.monotonic() of the SIGTERM, of the old server's exit (the new one is
        started right then) and of the new server's first ready /readyz (polled every
        0.2 s; it serves requests a little before that)."""
        proc = self._apiserver
        assert proc is not None
        term = time.monotonic()
        proc.stop(timeout=drain_timeout)
        exited = time.monotonic()
        port = self.port
        with mock.patch.object(controlplane, "_free_port", lambda: port):
            self._start_apiserver(time.monotonic() + self.start_timeout)
        return term, exited, time.monotonic()

    def pids(self) -> dict[str, int]:
        out = {}
        for name, proc in (("kube-apiserver", self._apiserver), ("etcd", self._etcd)):
            if proc is not None:
                out[name] = proc.popen.pid
        return out

    def metrics(self) -> Counter[tuple[str, str]]:
        """apiserver_request_total summed by (resource, verb), for resourceslices and nodes."""
        req = urllib.request.Request(self.url + "/metrics")
        req.add_header("Authorization", f"Bearer {self.admin_token}")
        with urllib.request.urlopen(req, timeout=30, context=self.rest.ssl_context) as r:
            text = r.read().decode()
        out: Counter[tuple[str, str]] = Counter()
        for family in text_string_to_metric_families(text):
            if family.name != "apiserver_request":
                continue
            for s in family.samples:
                if s.name != "apiserver_request_total":
                    continue
                res = s.labels.get("resource", "")
                if res in ("resourceslices", "nodes"):
                    out[(res, s.labels.get("verb", ""))] += int(s.value)
        return out


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (seconds) from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


# ---------------------------------------------------------------------------------------------
# the fleet

def node_name(i: int) -> str:
    return f"sim-{i:05d}"


def node_pool(i: int, devices: int) -> Pool:
    attributes: dict[str, Any] = {"model": "sim-h100", "driverVersion": "1.2.3"}
    capacity: dict[str, Any] = {"memory": "80Gi"}
    devs = []
    for d in range(devices):
        attrs: Any = {**attributes, "index": d}
        devs.append(Device(name=f"gpu-{d}", attributes=attrs, capacity=capacity))
    return Pool(name=node_name(i), devices=devs)


class Fleet:
    """``n`` publishers on their own node names, counting into one :class:`Recorder`."""

    def __init__(self, cp: ScaleControlPlane, n: int, devices: int) -> None:
        self.rec = Recorder()
        self.n = n
        self.devices = devices
        self.pubs: list[SlicePublisher] = []
        self.index: dict[int, int] = {}
        for i in range(n):
            conf = Configuration(host=cp.url)
            conf.ssl_ca_cert = str(cp.ca_file)
            conf.api_key = {"authorization": f"Bearer {cp.admin_token}"}
            api = CountingAPI(ApiClient(conf), self.rec, i)
            self.pubs.append(SlicePublisher(api, DRIVER, node_name(i)))
            self.index[id(self.pubs[-1])] = i

    def start(self) -> None:
        for i, pub in enumerate(self.pubs):
            pub.publish([node_pool(i, self.devices)], wait=False)
            pub.start()

    def stop(self) -> None:
        for pub in self.pubs:
            pub.stop(timeout=2)

    def writes(self) -> int:
        return sum(p.stats.slice_writes for p in self.pubs)

    def wait(self, pred: Callable[[SlicePublisher], bool], timeout: float
             ) -> tuple[float | None, list[float]]:
        """Poll (in process, no request) until ``pred`` has held for every publisher;
        (time.monotonic() when the last one got there or None after ``timeout``, the
        time.monotonic() each publisher first got there, inf for those that did not)."""
        deadline = time.monotonic() + timeout
        first = [math.inf] * len(self.pubs)
        while True:
            now = time.monotonic()
            for i, p in enumerate(self.pubs):
                if first[i] == math.inf and pred(p):
                    first[i] = now
            if all(t < math.inf for t in first):
                return now, first
            if now > deadline:
                return None, first
            time.sleep(0.05)


# ---------------------------------------------------------------------------------------------
# figures

def per_second(times: Sequence[float], t0: float, t1: float) -> list[int]:
    """Requests in each whole second of [t0, t1)."""
    bins = [0] * max(1, math.ceil(t1 - t0))
    for t in times:
        if t0 <= t < t1:
            bins[min(len(bins) - 1, int(t - t0))] += 1
    return bins


def burst(bins: Sequence[int]) -> dict[str, float]:
    """Busiest second, mean per second and their ratio."""
    mean = sum(bins) / len(bins) if bins else 0.0
    peak = max(bins) if bins else 0
    return {"busiest_second": peak, "mean_per_second": round(mean, 3),
            "ratio": round(peak / mean, 2) if mean else 0.0}


def poisson_max(mean: float, seconds: int, q: float = 0.5) -> int:
    """The median of the busiest of ``seconds`` independent Poisson(``mean``) seconds: what
    randomly spread (not lockstep) requests give at this rate."""
    if mean <= 0:
        return 0
    k, term = 0, math.exp(-mean)
    cdf = term
    while cdf ** seconds < q:
        k += 1
        term *= mean / k
        cdf += term
    return k


def by_verb(reqs: Sequence[tuple[float, int, str, bool]], nodes: int, seconds: float | None
            ) -> dict[str, float]:
    """Requests per node (per node per second when ``seconds``) by verb; failed connections
    under ``<verb> (no answer)``."""
    c: Counter[str] = Counter()
    for _t, _n, verb, reached in reqs:
        c[verb if reached else f"{verb} (no answer)"] += 1
    div = nodes * (seconds or 1.0)
    return {v: round(k / div, 6 if seconds else 3) for v, k in sorted(c.items())}


def metric_delta(after: Counter[tuple[str, str]], before: Counter[tuple[str, str]],
                 nodes: int, seconds: float | None) -> dict[str, float]:
    div = nodes * (seconds or 1.0)
    return {f"{res} {verb}": round((after[(res, verb)] - before[(res, verb)]) / div,
                                   6 if seconds else 3)
            for res, verb in sorted(set(after) | set(before))
            if after[(res, verb)] - before[(res, verb)] > 0}


def worst_window(times: Sequence[float], t0: float, t1: float, window: float = WINDOW
                 ) -> dict[str, float]:
    """The largest busiest-second / mean ratio over every ``window``-second window (1 s
    steps) inside [t0, t1)."""
    bins = per_second(times, t0, t1)
    w = int(window)
    if len(bins) < w:
        return {**burst(bins), "window_seconds": len(bins)}
    best: dict[str, float] = {"ratio": -1.0}
    total = sum(bins[:w])
    for start in range(0, len(bins) - w + 1):
        if start:
            total += bins[start + w - 1] - bins[start - 1]
        mean = total / w
        peak = max(bins[start:start + w])
        ratio = peak / mean if mean else 0.0
        if ratio > best["ratio"]:
            best = {"busiest_second": peak, "mean_per_second": round(mean, 3),
                    "ratio": round(ratio, 2), "window_start": start}
    return {**best, "window_seconds": w}


# ---------------------------------------------------------------------------------------------
# the run

@dataclass
class Options:
    nodes: int
    devices: int
    steady: float
    after: float
    settle: float
    workdir: Path
    dump: Path | None = None


def run(opts: Options) -> dict[str, Any]:
    """All phases; returns the figures (see the module docstring)."""
    result: dict[str, Any] = {"nodes": opts.nodes, "devices_per_node": opts.devices,
                              "incomplete": []}
    threading.stack_size(512 * 1024)
    bin_dir = find_k8s_bin_dir()
    if bin_dir is None:
        raise SystemExit("kube-apiserver and etcd not found: run scripts/build-k8s.sh")
    cp = ScaleControlPlane(opts.workdir / "cp", bin_dir, extra_args=[
        "--audit-log-path=", "--max-requests-inflight=800",
        "--max-mutating-requests-inflight=400"])
    cp.start()
    fleet: Fleet | None = None
    try:
        t = time.monotonic()
        for i in range(opts.nodes):
            cp.create_node(node_name(i))
        log.info("%d nodes created in %.1fs", opts.nodes, time.monotonic() - t)
        fleet = Fleet(cp, opts.nodes, opts.devices)
        rec = fleet.rec

        # 1. cold start
        m0 = cp.metrics()
        t0 = time.monotonic()
        fleet.start()
        started = time.monotonic()
        done, _ = fleet.wait(lambda p: p.stats.published_once and p.watching, 600)
        if done is None:
            result["incomplete"].append("cold start")
            done = time.monotonic()
        cold = rec.since(t0, done + 1)
        result["cold_start"] = {
            "seconds_until_all_published_and_watching": round(done - t0, 2),
            "seconds_to_start_all_publishers": round(started - t0, 2),
            "requests_per_node": by_verb(cold, opts.nodes, None),
            "server_requests_per_node": metric_delta(cp.metrics(), m0, opts.nodes, None),
            **burst(per_second([r[0] for r in cold], t0, done + 1)),
        }
        log.info("cold start: %s", result["cold_start"])
        time.sleep(opts.settle)

        # 2. steady state
        def steady(seconds: float) -> dict[str, Any]:
            m1, w1 = cp.metrics(), fleet.writes()
            cpu1 = {k: cpu_seconds(v) for k, v in cp.pids().items()}
            own1 = time.process_time()
            s0 = time.monotonic()
            time.sleep(seconds)
            s1 = time.monotonic()
            cpu2 = {k: cpu_seconds(v) for k, v in cp.pids().items()}
            own2 = time.process_time()
            reqs = rec.since(s0, s1)
            bins = per_second([r[0] for r in reqs], s0, s1)
            mean = sum(bins) / len(bins)
            return {
                "seconds": round(s1 - s0, 1),
                "requests_per_node_per_second": round(len(reqs) / opts.nodes / (s1 - s0), 6),
                "by_verb_per_node_per_second": by_verb(reqs, opts.nodes, s1 - s0),
                "server_by_verb_per_node_per_second": metric_delta(cp.metrics(), m1,
                                                                   opts.nodes, s1 - s0),
                "writes": fleet.writes() - w1,
                **burst(bins),
                "busiest_second_if_poisson": poisson_max(mean, len(bins)),
                "cpu_millicores_per_node": {
                    k: round((cpu2[k] - cpu1[k]) / (s1 - s0) / opts.nodes * 1000, 4)
                    for k in cpu2},
                "bench_process_millicores_per_node": round(
                    (own2 - own1) / (s1 - s0) / opts.nodes * 1000, 4),
                "t0": s0,
            }

        result["steady"] = steady(opts.steady)
        log.info("steady: %s", result["steady"])

        # 3. API server restart
        w0 = fleet.writes()
        before_term = time.monotonic()
        term, exited, ready = cp.restart_apiserver()
        log.info("API server restarted: SIGTERM, new one ready %.1fs later", ready - term)
        # verified against the new server: after the old one exited
        exited_wall = time.time() - (time.monotonic() - exited)
        m_ready = Counter[tuple[str, str]]()          # the new server counts from zero
        verified, firsts = fleet.wait(
            lambda p: (p.stats.last_verified_time or 0) > exited_wall and p.watching, 300)
        if verified is None:
            result["incomplete"].append("restart recovery")
            verified = time.monotonic()
        per_node_verified = [t - exited for t in firsts]   # as polled every 0.05 s
        ends = {}
        for t, node in rec.watch_ends:
            if t >= term and node not in ends:
                ends[node] = t - term
        recovery = rec.since(exited, verified + 1)
        down = rec.since(term, exited)
        result["restart"] = {
            "drain_seconds": round(exited - term, 1),
            "new_server_ready_after_start_seconds": round(ready - exited, 1),
            "watch_noticed_after_sigterm_seconds": {
                "median": round(statistics.median(ends.values()), 1) if ends else None,
                "max": round(max(ends.values()), 1) if ends else None,
                "nodes": len(ends)},
            "seconds_until_every_node_verified": round(verified - exited, 1),
            "verified_after_start_p50_p100": [
                round(statistics.median(per_node_verified), 1),
                round(max(per_node_verified), 1)],
            "requests_per_node_until_verified": by_verb(recovery, opts.nodes, None),
            "requests_per_node_reaching_server": round(
                sum(1 for r in recovery if r[3]) / opts.nodes, 2),
            "server_requests_per_node": metric_delta(cp.metrics(), m_ready, opts.nodes, None),
            "attempts_while_down_per_node": round(len(down) / opts.nodes, 2),
            "rewrites": fleet.writes() - w0,
            **burst(per_second([r[0] for r in recovery], exited, verified + 1)),
        }
        log.info("restart: %s", result["restart"])

        # 4. after the restart; the 5-minute window holding it
        result["after_restart"] = steady(opts.after)
        end = time.monotonic()
        all_times = [r[0] for r in rec.requests]
        result["window_with_restart"] = worst_window(
            all_times, max(result["steady"]["t0"], before_term - WINDOW + 60), end)
        result["window_steady"] = worst_window(
            all_times, result["steady"]["t0"], before_term)

        # 5. mass deletion
        w0 = fleet.writes()
        creates = [p.stats.creates for p in fleet.pubs]
        d0 = time.monotonic()
        cp.request("DELETE", "/apis/resource.k8s.io/v1/resourceslices")
        restored = _wait_creates(fleet, creates, 300)
        if restored is None:
            result["incomplete"].append("mass-delete recovery")
            restored = time.monotonic()
        rs = rec.since(d0, restored + 1)
        result["mass_delete"] = {
            "seconds_until_every_node_republished": round(restored - d0, 1),
            "requests_per_node": by_verb(rs, opts.nodes, None),
            "writes_per_node": round((fleet.writes() - w0) / opts.nodes, 3),
            **burst(per_second([r[0] for r in rs], d0, restored + 1)),
        }
        log.info("mass delete: %s", result["mass_delete"])
        for phase in ("steady", "after_restart"):
            result[phase].pop("t0", None)
        result["projection_5000"] = project(result, 5000)
        if opts.dump is not None:
            marks = {"sigterm": term, "exited": exited, "ready": ready, "verified": verified,
                     "mass_delete": d0}
            opts.dump.write_text(json.dumps({"marks": marks, "requests": rec.log,
                                             "watch_ends": rec.watch_ends}) + "\n")
        return result
    finally:
        if fleet is not None:
            fleet.stop()
        cp.stop()


def _wait_creates(fleet: Fleet, before: list[int], timeout: float) -> float | None:
    done, _ = fleet.wait(lambda p: p.stats.creates > before[fleet.index[id(p)]], timeout)
    return done


def project(result: dict[str, Any], nodes: int) -> dict[str, Any]:
    """Linear projection of the measured per-node figures to ``nodes`` (see README for the
    reasoning: every request is indexed by spec.nodeName, so its cost does not grow with the
    cluster; watch renewals and bookmarks are per node)."""
    st = result["steady"]
    rate = st["requests_per_node_per_second"] * nodes
    spread = 20.0
    restart_reqs = result["restart"]["requests_per_node_reaching_server"] * nodes
    return {
        "steady_requests_per_second": round(rate, 2),
        "steady_busiest_second_if_poisson": poisson_max(rate, int(WINDOW)),
        "steady_ratio_if_poisson": round(poisson_max(rate, int(WINDOW)) / rate, 2) if rate
        else 0.0,
        "apiserver_cores_steady": round(
            st["cpu_millicores_per_node"].get("kube-apiserver", 0) * nodes / 1000, 3),
        "restart_requests_total": round(restart_reqs),
        "restart_requests_per_second_over_spread": round(restart_reqs / spread, 1),
    }


def table(result: dict[str, Any]) -> str:
    lines = [f"nodes {result['nodes']}, {result['devices_per_node']} devices each"]
    for phase in ("cold_start", "steady", "restart", "after_restart", "window_steady",
                  "window_with_restart", "mass_delete", "projection_5000"):
        if phase in result:
            lines.append(f"\n[{phase}]")
            for k, v in result[phase].items():
                lines.append(f"  {k}: {v}")
    if result.get("incomplete"):
        lines.append(f"\nINCOMPLETE: {', '.join(result['incomplete'])}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--devices", type=int, default=8,
                        help="devices per node (one slice each; default 8)")
    parser.add_argument("--steady", type=float, default=WINDOW,
                        help="seconds of steady state measured (default 300)")
    parser.add_argument("--after", type=float, default=240.0,
                        help="seconds measured after the API server restart (default 240)")
    parser.add_argument("--settle", type=float, default=30.0,
                        help="seconds between the cold start and the steady state")
    parser.add_argument("--quick", action="store_true",
                        help="20 nodes, short phases: proves the bench works")
    parser.add_argument("--out", default=str(Path(__file__).with_name("scale-results.json")))
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--dump", default=None,
                        help="write every request (start, seconds, node, verb, outcome) as JSON")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if not args.verbose:
        logging.getLogger("plugin").setLevel(logging.ERROR)
    if args.quick:
        args.nodes, args.steady, args.after, args.settle = 20, 20.0, 20.0, 3.0
    with tempfile.TemporaryDirectory(prefix="drakit-scale-", dir=args.workdir) as tmp:
        opts = Options(args.nodes, args.devices, args.steady, args.after, args.settle,
                       Path(tmp), Path(args.dump) if args.dump else None)
        with contextlib.suppress(ValueError):
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        result = run(opts)
    result["quick"] = args.quick
    print(table(result))
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.out}", file=sys.stderr)
    return 1 if result["incomplete"] else 0


if __name__ == "__main__":
    sys.exit(main())
