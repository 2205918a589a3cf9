"""An overloaded API server, a failing disk, signals and oversized input.

Every test runs the real node agent (in-process, or ``drakit run`` as a child process) with
the fake kubelet over real unix sockets and gRPC, and the embedded API server behind a
:class:`drakit.plugin.testing.faultproxy.FaultProxy` that injects the faults. Figures measured
(time to answer, threads, memory, convergence time) are printed (``-s`` shows them) and
written to ``$DRAKIT_HOSTILE_REPORT`` (JSON lines) when that is set.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import resource
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

import grpc
import pytest

from drakit.discovery.model import Device, Pool
from drakit.discovery.plugin import DeviceRequest, DiscoveryContext, DiscoveryPlugin, PreparedDevice
from drakit.plugin.testing.apiserver import EmbeddedAPIServer
from drakit.plugin.testing.faultproxy import Fault, FaultProxy
from drakit.plugin.testing.harness import DriverHarness

DRIVER = "drakit.example.com"
NODE = "node-1"
POOL = "pool-h"
CLAIM_GET = r"/resourceclaims/[^/]+$"
STATUS_PATCH = r"/resourceclaims/[^/]+/status$"


def report(item: str, **figures: Any) -> None:
    """Print a measured figure (and append it to $DRAKIT_HOSTILE_REPORT)."""
    line = json.dumps({"item": item, **figures})
    print(f"\nhostile figure: {line}")
    path = os.environ.get("DRAKIT_HOSTILE_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


def rss_mb() -> float:
    """Peak resident set size of this process so far (MiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class GatedPlugin(DiscoveryPlugin):
    """Devices d0..d39; ``gate(request)`` runs inside every prepare (sleep, raise)."""

    name: ClassVar[str] = "hostile"

    def __init__(self, count: int = 40) -> None:
        super().__init__(DiscoveryContext(driver_name=DRIVER, node_name=NODE))
        self.names = [f"d{i}" for i in range(count)]
        self.gate: Callable[[DeviceRequest], None] | None = None
        self.unprepared: list[tuple[str, str]] = []

    def discover(self) -> list[Pool]:
        return [Pool(name=POOL, devices=[Device(name=n) for n in self.names])]

    def prepare(self, request: DeviceRequest) -> PreparedDevice:
        if self.gate is not None:
            self.gate(request)
        return super().prepare(request)

    def unprepare(self, request: Any) -> None:
        self.unprepared.append((request.claim.uid, request.device))


class Bench:
    """Embedded API server → FaultProxy → node agent; the fake kubelet calls the agent."""

    def __init__(self, root: Path, **harness: Any) -> None:
        self.api = EmbeddedAPIServer().start()
        self.proxy = FaultProxy(self.api.url).start()
        proxy, api = self.proxy, self.api
        # the agent's API client goes through the proxy (the harness asks the server for it)
        self.api.api_client = lambda: proxy.api_client(api.token)  # type: ignore[method-assign]
        self.plugin = GatedPlugin()
        settings = {"orphan_check_seconds": 3600.0, **harness.pop("settings", {})}
        if harness.get("subprocess"):
            self.h = DriverHarness(root, apiserver=self.api, **harness)
        else:
            self.h = DriverHarness(root, apiserver=self.api, plugins=[self.plugin],
                                   settings=settings, **harness)

    def start(self) -> Bench:
        self.h.start()
        return self

    def stop(self) -> None:
        try:
            self.h.stop()
        finally:
            self.proxy.stop()
            self.api.stop()

    def claim(self, name: str, device: str, **kw: Any) -> dict[str, Any]:
        return self.h.allocate(name, [(POOL, device)], **kw)


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Bench]:
    b = Bench(tmp_path).start()
    try:
        yield b
    finally:
        b.stop()


def uid(claim: dict[str, Any]) -> str:
    return str(claim["metadata"]["uid"])


def status_devices(b: Bench, claim: dict[str, Any]) -> list[dict[str, Any]]:
    got = b.h.claim(claim) or {}
    return list((got.get("status") or {}).get("devices") or [])


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t = time.monotonic()
    out = fn()
    return out, time.monotonic() - t


# -- 1. throttling: 429 with a huge Retry-After -------------------------------------------

def test_throttled_claim_answers_within_the_deadline_and_frees_its_thread(bench: Bench) -> None:
    """Claim GETs answer 429 + Retry-After: 100000 (API Priority and Fairness). Each prepare
    answers before the kubelet's deadline with a per-claim error (no DEADLINE_EXCEEDED),
    20 such calls at once (more than the 16 DRA worker threads) do not starve a fresh call,
    and once the throttling ends the same claims prepare at once (nothing waits on the
    first attempts)."""
    b = bench
    claims = [b.claim(f"t{i}", f"d{i}") for i in range(20)]
    threads_before = threading.active_count()
    fault = b.proxy.add(Fault(method="GET", path=CLAIM_GET, status=429, retry_after=100000))
    res, took = timed(lambda: b.h.prepare(claims[0], timeout=6))
    assert "429" in res[uid(claims[0])].error, res
    assert took < 6
    with ThreadPoolExecutor(20) as pool:
        futs = [pool.submit(timed, lambda c=c: b.h.prepare(c, timeout=6)) for c in claims]
        answers = [f.result(timeout=30) for f in futs]
    slowest = max(t for _, t in answers)
    assert all("429" in r[uid(c)].error for (r, _), c in zip(answers, claims, strict=True))
    assert slowest < 6
    assert fault.hits >= 21
    b.proxy.clear()
    fresh = b.claim("fresh", "d30")
    res, fresh_took = timed(lambda: b.h.prepare(fresh, timeout=6))
    assert res[uid(fresh)].error == ""
    res, retry_took = timed(lambda: b.h.prepare(*claims, timeout=20))
    assert {u: r.error for u, r in res.items()} == {uid(c): "" for c in claims}
    time.sleep(0.5)
    threads_after = threading.active_count()
    # A second throttled round (new claims): pools are warm now, so nothing may grow (a
    # thread left sleeping per throttled claim would show here).
    more = [b.claim(f"u{i}", f"d{i + 20}") for i in range(10)]
    b.proxy.add(Fault(method="GET", path=CLAIM_GET, status=429, retry_after=100000))
    with ThreadPoolExecutor(10) as pool:
        futs = [pool.submit(b.h.prepare, c, timeout=6) for c in more]
        assert all("429" in f.result(timeout=30)[uid(c)].error
                   for f, c in zip(futs, more, strict=True))
    b.proxy.clear()
    assert all(not r.error for r in b.h.prepare(*more, timeout=20).values())
    time.sleep(0.5)
    threads_end = threading.active_count()
    assert threads_end - threads_after <= 2, (threads_after, threads_end)
    report("1-throttle", one_claim_answer_s=round(took, 2),
           twenty_concurrent_slowest_s=round(slowest, 2), fresh_claim_s=round(fresh_took, 2),
           retry_of_20_s=round(retry_took, 2), threads_before=threads_before,
           threads_after_round_1=threads_after, threads_after_round_2=threads_end,
           peak_rss_mb=round(rss_mb(), 1))


# -- 2. a slow API server ------------------------------------------------------------------

def test_slow_api_answers_by_the_deadline_and_the_retry_gets_a_fresh_answer(
        bench: Bench) -> None:
    """Every claim GET is delayed 30 s. A call with three claims and a 6 s deadline answers
    all three with an error in time; the kubelet's retry right after the server recovered
    prepares them (no stale error of the first call)."""
    b = bench
    claims = [b.claim(f"s{i}", f"d{i}") for i in range(3)]
    b.proxy.add(Fault(method="GET", path=CLAIM_GET, delay=30))
    res, took = timed(lambda: b.h.prepare(*claims, timeout=6))
    assert all(res[uid(c)].error for c in claims), res
    assert took < 6
    b.proxy.clear()
    res, retry_took = timed(lambda: b.h.prepare(*claims, timeout=10))
    assert {u: r.error for u, r in res.items()} == {uid(c): "" for c in claims}
    report("2-slow", three_claims_answer_s=round(took, 2), retry_s=round(retry_took, 2))


def test_claims_of_one_call_are_read_concurrently(bench: Bench) -> None:
    """Each claim GET takes 3 s: one call with three claims answers in about 3 s, not 9 s
    (a 7 s deadline fails sequential reads)."""
    b = bench
    claims = [b.claim(f"c{i}", f"d{i}") for i in range(3)]
    b.proxy.add(Fault(method="GET", path=CLAIM_GET, delay=3))
    res, took = timed(lambda: b.h.prepare(*claims, timeout=7))
    assert {u: r.error for u, r in res.items()} == {uid(c): "" for c in claims}
    report("2-concurrent-reads", three_claims_3s_each_answer_s=round(took, 2))


def test_a_call_that_outlived_its_caller_does_not_hand_on_its_result(bench: Bench) -> None:
    """The first call's vendor hook hangs past the call's 2 s deadline: the call answers
    in time that the hook still runs; the kubelet's retry arrives while it still runs: it
    waits for it, does not take its stale answer, and prepares the claim afresh once the
    hook is released."""
    b = bench
    claim = b.claim("late", "d5")
    release = threading.Event()
    calls = []

    def gate(request: DeviceRequest) -> None:
        calls.append(time.monotonic())
        if len(calls) == 1:
            release.wait(20)
            raise RuntimeError("device reset failed")  # the first run's result: an error

    b.plugin.gate = gate
    first = b.h.prepare(claim, timeout=2)[uid(claim)].error
    assert "still running" in first, first
    threading.Timer(1.0, release.set).start()
    res, took = timed(lambda: b.h.prepare(claim, timeout=15))
    assert res[uid(claim)].error == "", res
    assert len(calls) == 2
    report("2-stale-result", retry_answer_s=round(took, 2))


# -- 3. status after an outage ---------------------------------------------------------------

def test_status_is_reconciled_after_a_20s_outage(bench: Bench) -> None:
    """PATCH …/status answers 500 for 20 s: the status is applied once the server is back
    (nothing gives it up), the metric of claims behind shows it meanwhile, and the write
    is counted as an error once."""
    b = bench
    app = b.h.app
    claim = b.claim("st", "d1")
    b.proxy.add(Fault(method="PATCH", path=STATUS_PATCH, status=500))
    assert b.h.prepare(claim)[uid(claim)].error == ""
    time.sleep(20)
    assert status_devices(b, claim) == []
    assert app.status.behind == 1
    assert b"drakit_device_status_behind{driver=\"drakit.example.com\"} 1.0" in app.metrics.render()
    b.proxy.clear()
    healed = time.monotonic()
    b.h.wait_for(lambda: status_devices(b, claim) != [], 60, "status.devices to be applied")
    converged = time.monotonic() - healed
    assert app.status.flush(5) and app.status.behind == 0
    assert app.metrics.status_errors._value.get() == 1
    report("3-status-outage", outage_s=20, convergence_after_outage_s=round(converged, 2))


@pytest.mark.parametrize("answer", ["server", "422"])
def test_status_of_a_replaced_claim_is_left_alone_without_an_error(
        bench: Bench, answer: str, caplog: pytest.LogCaptureFixture) -> None:
    """A prepared claim deleted and re-created under the same name: the unprepare's status
    withdrawal carries the old UID. Whether the server refuses it with 409 (the embedded
    server) or 422 ``metadata.uid: … field is immutable`` (kube-apiserver's apply, injected
    here), the new claim is untouched and no error is logged or counted."""
    b = bench
    app = b.h.app
    old = b.claim("rc", "d2")
    assert b.h.prepare(old)[uid(old)].error == ""
    assert app.status.flush(10)
    b.api.delete_object("resourceclaims", "rc", "default")
    new = b.claim("rc", "d3")
    if answer == "422":
        msg = (f'ResourceClaim.resource.k8s.io "rc" is invalid: metadata.uid: Invalid value: '
               f'"{uid(old)}": field is immutable')
        body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                           "message": msg, "reason": "Invalid", "code": 422}).encode()
        b.proxy.add(Fault(method="PATCH", path=STATUS_PATCH, status=422, body=body, times=1))
    errors_before = app.metrics.status_errors._value.get()
    with caplog.at_level(logging.INFO):
        assert b.h.unprepare(old) == {uid(old): ""}
        assert app.status.flush(10)
    assert app.metrics.status_errors._value.get() == errors_before
    assert not [r for r in caplog.records
                if r.name == "drakit.plugin.claims.status" and r.levelno >= logging.WARNING]
    assert (b.h.claim(new) or {})["metadata"]["uid"] == uid(new)


# -- 4. unprepare when the CDI spec cannot be removed ---------------------------------------

def _chattr(flag: str, path: Path) -> bool:
    return subprocess.run(["chattr", flag, str(path)], capture_output=True).returncode == 0


def test_unprepare_fails_while_the_cdi_dir_is_immutable(bench: Bench) -> None:
    """chattr +i on the CDI dir: Unprepare reports an error naming the spec, keeps the
    checkpoint entry (the device stays busy for other claims); after chattr -i the
    kubelet's retry finishes the job."""
    b = bench
    claim = b.claim("imm", "d4")
    other = b.claim("imm2", "d4")
    assert b.h.prepare(claim)[uid(claim)].error == ""
    if not _chattr("+i", b.h.cdi_dir):
        pytest.skip("chattr +i is not possible here (needs root and an ext4/xfs/tmpfs dir)")
    try:
        res, took = timed(lambda: b.h.unprepare(claim))
        assert "removing its CDI spec failed" in res[uid(claim)], res
        assert uid(claim) in b.h.app.checkpoint.claims()
        assert any(uid(claim) in p.name for p in b.h.cdi_files())
        got = b.h.prepare(other)[uid(other)].error
        assert "still prepared for claim" in got, got
    finally:
        _chattr("-i", b.h.cdi_dir)
    assert b.h.unprepare(claim) == {uid(claim): ""}
    assert uid(claim) not in b.h.app.checkpoint.claims()
    assert not any(uid(claim) in p.name for p in b.h.cdi_files())
    report("4-immutable-cdi", unprepare_answer_s=round(took, 2))


@contextlib.contextmanager
def read_only(directory: Path) -> Iterator[None]:
    """``directory`` bind-mounted onto itself read-only (EROFS) for the ``with`` block;
    skips where bind mounts are not possible (needs CAP_SYS_ADMIN)."""
    path = str(directory.resolve())
    if subprocess.run(["mount", "--bind", path, path], capture_output=True).returncode:
        pytest.skip("bind mounts are not possible here (needs CAP_SYS_ADMIN)")
    try:
        if subprocess.run(["mount", "-o", "remount,bind,ro", path],
                          capture_output=True).returncode:
            pytest.skip("a read-only remount is not possible here")
        yield
    finally:
        subprocess.run(["umount", path], capture_output=True)


def test_a_failed_cdi_write_names_the_spec_file(bench: Bench) -> None:
    """The CDI dir re-mounted read-only while a claim is prepared: the claim's error names
    the spec file it could not write (not a bare OSError), and nothing is left recorded."""
    b = bench
    claim = b.claim("rofail", "d7")
    with read_only(b.h.cdi_dir):
        err = b.h.prepare(claim)[uid(claim)].error
    spec = err.split("writing CDI spec ", 1)[-1].split(":", 1)[0]
    assert spec.endswith(f"{uid(claim)}.json") and "/cdi/" in spec, err
    assert "Read-only file system" in err
    assert uid(claim) not in b.h.app.checkpoint.claims()
    assert b.h.prepare(claim)[uid(claim)].error == ""
    assert b.h.unprepare(claim) == {uid(claim): ""}


def test_unprepare_fails_while_the_cdi_dir_is_read_only(bench: Bench) -> None:
    """The CDI dir re-mounted read-only (a bind mount, EROFS): same as immutable."""
    b = bench
    claim = b.claim("ro", "d6")
    assert b.h.prepare(claim)[uid(claim)].error == ""
    with read_only(b.h.cdi_dir):
        res = b.h.unprepare(claim)
        assert "Read-only file system" in res[uid(claim)], res
        assert uid(claim) in b.h.app.checkpoint.claims()
    assert b.h.unprepare(claim) == {uid(claim): ""}
    assert not b.h.cdi_files()


# -- 5. the orphan sweep and pods on this node -------------------------------------------------

def _pod(b: Bench, name: str, claim_name: str, node: str = NODE,
         phase: str = "Running") -> dict[str, Any]:
    return b.api.create_object("pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}],
                 "resourceClaims": [{"name": "gpu", "resourceClaimName": claim_name}]},
        "status": {"phase": phase},
    })


def test_orphan_sweep_leaves_claims_that_a_pod_on_this_node_still_uses(bench: Bench) -> None:
    """Claims force-deleted (one gone, one re-created with a new UID) while a running pod
    on this node references them: the sweep leaves them (CDI spec, checkpoint, no hook).
    A pod on another node or a finished pod does not hold a claim; a failing pod list
    holds every claim; once the pod is gone the sweep unprepares."""
    b = bench
    app = b.h.app
    gone = b.claim("gone", "d7")
    replaced = b.claim("replaced", "d8")
    elsewhere = b.claim("elsewhere", "d9")
    for c in (gone, replaced, elsewhere):
        assert b.h.prepare(c)[uid(c)].error == ""
    assert app.status.flush(10)
    _pod(b, "p-gone", "gone")
    _pod(b, "p-replaced", "replaced")
    _pod(b, "p-other-node", "elsewhere", node="node-2")
    _pod(b, "p-done", "elsewhere", phase="Succeeded")
    for name in ("gone", "replaced", "elsewhere"):
        b.api.delete_object("resourceclaims", name, "default")
    b.claim("replaced", "d10")  # same name, new UID
    app.orphans.grace = 0.0
    assert app.orphans.sweep() == [uid(elsewhere)]
    assert {uid(gone), uid(replaced)} <= set(app.checkpoint.claims())
    assert {u for u, _ in b.plugin.unprepared} == {uid(elsewhere)}
    b.api.delete_object("pods", "p-gone", "default")
    b.proxy.add(Fault(method="GET", path=r"^/api/v1/pods$", status=500))
    assert app.orphans.sweep() == []  # the pods are unknown: nothing is torn down
    b.proxy.clear()
    assert app.orphans.sweep() == [uid(gone)]
    assert uid(replaced) in app.checkpoint.claims()


def test_orphan_flags() -> None:
    """--orphan-grace-seconds and --orphan-check-seconds reach the settings."""
    import argparse

    from drakit.plugin.ops.config import add_run_arguments, settings_from_args

    p = argparse.ArgumentParser()
    add_run_arguments(p)
    ns = p.parse_args(["--driver-name", DRIVER, "--node-name", NODE,
                       "--orphan-grace-seconds", "0", "--orphan-check-seconds", "7.5"])
    s = settings_from_args(ns)
    assert (s.orphan_grace_seconds, s.orphan_check_seconds) == (0.0, 7.5)


# -- 6. a stale prepare after unprepare --------------------------------------------------------

def test_stale_prepare_after_unprepare_is_refused_unless_the_claim_changed(
        bench: Bench) -> None:
    """Prepare fails in the vendor hook, Unprepare (""), then the same Prepare with the
    claim unchanged since (same resourceVersion, reservedFor still set): refused as stale.
    After the claim changed (a new pod reserved it) it prepares. The same after a
    completed prepare whose status this driver wrote and withdrew."""
    b = bench
    claim = b.claim("stale", "d11")

    def fail(request: DeviceRequest) -> None:
        raise RuntimeError("firmware not loaded")

    b.plugin.gate = fail
    assert "firmware not loaded" in b.h.prepare(claim)[uid(claim)].error
    assert b.h.unprepare(claim) == {uid(claim): ""}
    b.plugin.gate = None
    err = b.h.prepare(claim)[uid(claim)].error
    assert "stale prepare" in err and "not changed since" in err, err
    assert not b.h.cdi_files()
    cur = b.api.get_object("resourceclaims", "stale", "default")
    assert cur is not None
    cur["status"]["reservedFor"].append({"resource": "pods", "name": "p2", "uid": "u-p2"})
    b.api.update_object("resourceclaims", cur, subresource="status")
    assert b.h.prepare(claim)[uid(claim)].error == ""

    done = b.claim("stale2", "d12")
    assert b.h.prepare(done)[uid(done)].error == ""
    assert b.h.app.status.flush(10)
    assert b.h.unprepare(done) == {uid(done): ""}
    assert b.h.app.status.flush(10)
    err = b.h.prepare(done)[uid(done)].error
    assert "stale prepare" in err, err


# -- 7. SIGHUP ---------------------------------------------------------------------------------

def test_sighup_shuts_down_like_sigterm(tmp_path: Path) -> None:
    """``drakit run`` gets SIGHUP: it logs it, removes both sockets and exits 0."""
    b = Bench(tmp_path, subprocess=True, discovery=["example"]).start()
    try:
        proc = b.h.process
        assert proc is not None
        sockets = [p for p in (b.h.registrar_dir.iterdir()) if p.is_socket()]
        sockets += [p for p in b.h.data_dir.iterdir() if p.is_socket()]
        assert len(sockets) == 2, sockets
        proc.send_signal(signal.SIGHUP)
        code = proc.wait(20)
        b.h.process = None
        log = b.h.log_path.read_text()
        assert code == 0, log[-2000:]
        assert "received SIGHUP" in log
        assert [p for p in sockets if p.exists()] == []
    finally:
        b.stop()


# -- 8. smaller faults -----------------------------------------------------------------------

@pytest.mark.parametrize("chunked", [False, True])
def test_oversized_claim_answer_is_refused_without_reading_it(bench: Bench,
                                                              chunked: bool) -> None:
    """A 512 MiB claim GET answer (with Content-Length, or chunked without one) is refused
    with a clear error; the agent's memory does not grow by anything like it."""
    b = bench
    claim = b.claim("big", "d13")
    before = rss_mb()
    b.proxy.add(Fault(method="GET", path=CLAIM_GET, oversize=512 * 1024 * 1024,
                      chunked=chunked, times=1))
    res, took = timed(lambda: b.h.prepare(claim, timeout=20))
    err = res[uid(claim)].error
    assert "accepted; refused" in err, err
    grown = rss_mb() - before
    assert grown < 100, grown
    assert b.h.prepare(claim)[uid(claim)].error == ""  # the next answer is normal again
    report("8-oversize", chunked=chunked, answer_s=round(took, 2),
           peak_rss_growth_mb=round(grown, 1))


def test_truncated_answer_is_retried(bench: Bench) -> None:
    """A claim GET answer cut after 10 bytes (Content-Length announced in full) is a
    connection error: retried, and the prepare succeeds."""
    b = bench
    claim = b.claim("cut", "d14")
    fault = b.proxy.add(Fault(method="GET", path=CLAIM_GET, truncate=10, times=2))
    assert b.h.prepare(claim, timeout=10)[uid(claim)].error == ""
    assert fault.hits == 2


def test_undecodable_and_huge_requests_are_logged_in_aggregate(
        bench: Bench, caplog: pytest.LogCaptureFixture) -> None:
    """300 undecodable NodePrepareResources requests log at most a few lines and no
    traceback; a 10,000-claim request logs a handful of lines, not 10,000."""
    b = bench
    from drakit.plugin.kubelet.protocol import DRA_MODULES, DRA_V1

    sock = b.h.kubelet.registered_plugins(DRIVER)[0].endpoint
    channel = grpc.insecure_channel(f"unix:{sock}")
    raw = channel.unary_unary(f"/{DRA_MODULES[DRA_V1][0].DESCRIPTOR.package}.DRAPlugin/"
                              "NodePrepareResources",
                              request_serializer=lambda x: x, response_deserializer=lambda x: x)
    with caplog.at_level(logging.INFO):
        for i in range(300):
            with pytest.raises(grpc.RpcError):
                raw(b"\xff\xff\xff\xff" + bytes([i % 256]) * 7, timeout=5)
        decode_lines = [r for r in caplog.records if r.name == "grpc._common"]
        assert 1 <= len(decode_lines) <= 3, len(decode_lines)
        assert not any(r.exc_info or r.exc_text for r in decode_lines)
        caplog.clear()
        claims = [("default", f"n{i}", f"00000000-0000-4000-8000-{i:012d}") for i in range(10000)]
        res = b.h.kubelet.node_prepare_resources(DRIVER, claims, timeout=60)
        assert all("too many claims" in r.error for r in res.values())
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) <= 10, len(warnings)
    channel.close()
    report("8-log-volume", undecodable_requests=300, lines=len(decode_lines),
           huge_request_claims=10000, warning_lines=len(warnings))


def test_spec_replaced_by_a_symlink_is_written_again(bench: Bench, tmp_path: Path) -> None:
    """A prepared claim's CDI spec replaced by a symlink (to a file elsewhere) is treated
    as missing by the repeat prepare: written again as a regular file; the link's target
    is untouched."""
    b = bench
    claim = b.claim("link", "d15")
    assert b.h.prepare(claim)[uid(claim)].error == ""
    spec = next(p for p in b.h.cdi_files() if uid(claim) in p.name)
    target = tmp_path / "elsewhere.json"
    target.write_text(spec.read_text())
    spec.unlink()
    spec.symlink_to(target)
    assert b.h.prepare(claim)[uid(claim)].error == ""
    assert spec.exists() and not spec.is_symlink()
    assert target.read_text() == spec.read_text()  # same content; the target not written


def test_empty_container_edits_error_names_the_device(tmp_path: Path) -> None:
    """A CDI device with empty container edits is refused naming the device."""
    from drakit.cdi.errors import SpecValidationError
    from drakit.cdi.spec import ContainerEdits
    from drakit.cdi.spec import Device as CDIDevice
    from drakit.cdi.store import SpecStore

    store = SpecStore(tmp_path, DRIVER, "device")
    with pytest.raises(SpecValidationError) as e:
        store.write("00000000-0000-4000-8000-000000000001",
                    [CDIDevice(name="uid-gpu-7", container_edits=ContainerEdits())])
    assert "uid-gpu-7" in str(e.value) and "containerEdits" in str(e.value)
