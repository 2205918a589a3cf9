"""drakit.allocator against the real kube-scheduler 1.37: a seeded corpus of 200
claims over generated pools (tests/real/diff_corpus.py). For each claim, drakit's verdict
(allocatable / cannot allocate / scheduler error) equals the scheduler's; where both
allocate, drakit picks the very devices the scheduler wrote (and the same consumed
capacity), and its AllocationResult, written to a copy of the claim, is accepted by the real
API server; where the scheduler fails on a selector's CEL error, drakit names the same
selector, device and error. Then ``drakit explain`` on the real server explains a pod left
pending on purpose."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from diff_corpus import CLASSES, D, World, expression_worlds, worlds
from real_helpers import skip_or_fail

from drakit.allocator.explanation import explain
from drakit.plugin.ops.cli import main
from drakit.plugin.testing.real.controlplane import RealAPIServer, RealClusterError

pytestmark = pytest.mark.slow

SEED = 29
N = 200  # generated claims; plus one claim per selector expression (allocationMode All)
DEADLINE = 240.0  # seconds for the scheduler to decide every pod


@pytest.fixture(scope="module")
def scheduler(real: RealAPIServer) -> Any:
    try:
        real.start_scheduler()
    except RealClusterError as e:
        real.stop_scheduler()
        if "not found" in str(e):
            skip_or_fail(str(e))
        raise
    for name, expr in CLASSES.items():
        if real.get_object("deviceclasses", name) is None:
            real.create_object("deviceclasses", {"metadata": {"name": name}, "spec": {
                "selectors": [{"cel": {"expression": expr}}]}})
    try:
        yield real
    finally:
        real.stop_scheduler()


def _pod(w: World, namespace: str) -> dict[str, Any]:
    return {"metadata": {"name": w.claim["metadata"]["name"], "namespace": namespace},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": w.node},
                     "automountServiceAccountToken": False,
                     "resourceClaims": [{"name": "devices",
                                         "resourceClaimName": w.claim["metadata"]["name"]}],
                     "containers": [{"name": "app", "image": "drakit.invalid/app",
                                     "resources": {"claims": [{"name": "devices"}]}}]}}


def _scheduler_verdict(server: RealAPIServer, namespace: str, name: str
                       ) -> tuple[str, str, dict[str, Any] | None] | None:
    pod = server.get_object("pods", name, namespace) or {}
    claim = server.get_object("resourceclaims", name, namespace) or {}
    alloc = (claim.get("status") or {}).get("allocation")
    if pod.get("spec", {}).get("nodeName") and alloc:
        return ("allocated", "", alloc)
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason"):
            kind = "error" if c["reason"] == "SchedulerError" else "unschedulable"
            return (kind, c.get("message", ""), None)
    return None


def _wait_for_verdict(server: RealAPIServer, namespace: str, name: str, timeout: float = 60
                      ) -> tuple[str, str, dict[str, Any] | None] | None:
    """The scheduler's verdict on the pod once it has one (None after ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        verdict = _scheduler_verdict(server, namespace, name)
        if verdict is not None:
            return verdict
        time.sleep(0.3)
    return None


def _devices(alloc: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(r["request"], r["pool"], r["device"], json.dumps(r.get("consumedCapacity"),
                                                              sort_keys=True),
             bool(r.get("shareID"))) for r in alloc["devices"]["results"]]


def test_corpus_matches_kube_scheduler(scheduler: RealAPIServer) -> None:
    server = scheduler
    run = uuid.uuid4().hex[:6]
    namespace, shadow = f"diff-{run}", f"diff-{run}-drakit"
    admin = {"resource.kubernetes.io/admin-access": "true"}  # adminAccess requests allowed
    server.ensure_namespace(namespace, admin)
    server.ensure_namespace(shadow, admin)
    corpus = worlds(SEED, N, f"diff-{run}", namespace) + \
        expression_worlds(SEED, f"diff-{run}-x", namespace)
    classes = [c for n in CLASSES if (c := server.get_object("deviceclasses", n))]
    expected: dict[str, Any] = {}
    for w in corpus:
        server.create_node(w.node)
        for s in w.slices:
            server.create_object("resourceslices", s)
        others = []
        if w.holder is not None:  # a claim drakit allocates, holding a device
            e = explain(w.holder, w.slices, classes, w.node)
            assert e.allocatable, e
            held = server.create_object("resourceclaims", {
                **w.holder, "status": {"allocation": e.allocation}}, namespace)
            others.append(held)
        expected[w.claim["metadata"]["name"]] = explain(w.claim, w.slices, classes, w.node,
                                                        others)
        server.create_object("resourceclaims", w.claim, namespace)
    for w in corpus:  # all claims exist before the first pod: the scheduler sees them all
        server.create_object("pods", _pod(w, namespace))
    seen: dict[str, tuple[str, str, dict[str, Any] | None]] = {}
    deadline = time.monotonic() + DEADLINE
    while len(seen) < len(corpus) and time.monotonic() < deadline:
        for w in corpus:
            name = w.claim["metadata"]["name"]
            if name not in seen:
                v = _scheduler_verdict(server, namespace, name)
                if v is not None:
                    seen[name] = v
        time.sleep(0.5)
    assert len(seen) == len(corpus), f"the scheduler decided {len(seen)} of {len(corpus)} pods"

    differences = []
    kinds: dict[str, int] = {}
    for w in corpus:
        name = w.claim["metadata"]["name"]
        kind, message, alloc = seen[name]
        mine = expected[name]
        kinds[kind] = kinds.get(kind, 0) + 1
        my_kind = "error" if mine.error else ("allocated" if mine.allocatable
                                              else "unschedulable")
        where = f"{name} on {w.node}: {json.dumps(w.claim['spec'])}"
        if my_kind != kind:
            differences.append(f"{where}: scheduler {kind} ({message[:300]}), drakit "
                               f"{my_kind} ({mine.error or mine.reasons})")
            continue
        if kind == "allocated":
            assert alloc is not None and mine.allocation is not None
            if _devices(alloc) != _devices(mine.allocation):
                differences.append(f"{where}: scheduler {_devices(alloc)}, drakit "
                                   f"{_devices(mine.allocation)}")
            # drakit's AllocationResult is one the real API server accepts
            server.create_object("resourceclaims", {
                "metadata": {"name": name, "namespace": shadow}, "spec": w.claim["spec"],
                "status": {"allocation": mine.allocation}}, shadow)
        elif kind == "error":
            detail = mine.error.split(": CEL runtime error: ")[-1].split(". consider")[0]
            head = mine.error.split(" CEL ")[0]
            if head not in message or detail not in message:
                differences.append(f"{where}: scheduler error {message[:400]!r}, drakit "
                                   f"{mine.error!r}")
    assert not differences, f"{len(differences)} difference(s) (verdicts {kinds}):\n" + \
        "\n".join(differences[:20])
    # the corpus covers every verdict
    assert kinds.get("allocated", 0) >= 40 and kinds.get("unschedulable", 0) >= 20 and \
        kinds.get("error", 0) >= 10, kinds


def test_explain_a_pending_pod(scheduler: RealAPIServer, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    server = scheduler
    run = uuid.uuid4().hex[:6]
    namespace, node = f"pending-{run}", f"pending-{run}"
    server.ensure_namespace(namespace)
    server.create_node(node)
    server.create_object("resourceslices", {"metadata": {"name": node}, "spec": {
        "driver": D, "nodeName": node,
        "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
        "devices": [{"name": "gpu-0", "attributes": {"kind": {"string": "gpu"}}}]}})
    server.create_object("resourceclaimtemplates", {
        "metadata": {"name": "two", "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [{"name": "g", "exactly": {
            "deviceClassName": "diff-gpu", "count": 2}}]}}}})
    server.create_object("resourceclaims", {
        "metadata": {"name": "two", "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "g", "exactly": {
            "deviceClassName": "diff-gpu", "count": 2}}]}}})
    w = World(node, [], {"metadata": {"name": "two"}})
    server.create_object("pods", _pod(w, namespace))
    verdict = _wait_for_verdict(server, namespace, "two")
    assert verdict is not None and verdict[0] == "unschedulable", verdict
    assert "cannot allocate all claims" in verdict[1]
    kc = str(server.write_kubeconfig(tmp_path / "kc"))
    for source in (["--template", f"{namespace}/two", "--node", node],
                   [f"{namespace}/two", "--node", node], ["--pod", f"{namespace}/two"]):
        code = main(["explain", "--kubeconfig", kc, *source])
        out = capsys.readouterr().out
        assert code == 1, out
        assert "request g needs 2 device(s), 1 match" in out
        assert f"match    {D}/{node}/gpu-0" in out


def _gpus(node: str, driver: str, n: int) -> dict[str, Any]:
    return {"metadata": {"name": node}, "spec": {
        "driver": driver, "nodeName": node,
        "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
        "devices": [{"name": f"gpu-{i}", "attributes": {"kind": {"string": "gpu"}}}
                    for i in range(n)]}}


def _run_explain(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)


def test_cluster_wide_explain_matches_the_scheduler(scheduler: RealAPIServer,
                                                    tmp_path: Path) -> None:
    """A pod that fits nowhere, on nodes that each fail one filter (its nodeSelector, a
    NoSchedule taint, cordoned, too few devices): ``drakit explain --pod`` without ``--node``
    prints the very "0/N nodes are available" line the real scheduler wrote on the pod (all
    the session's nodes counted), lists every node, the closest first; ``kubectl drakit
    explain`` (the real kubectl finding the plugin on PATH) prints the same."""
    server = scheduler
    run = uuid.uuid4().hex[:6]
    namespace, label, driver = f"wide-{run}", f"explain-{run}", f"wide-{run}.drakit.test"
    server.ensure_namespace(namespace)
    server.create_object("deviceclasses", {"metadata": {"name": driver}, "spec": {
        "selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}})
    plan = {"off": ("no", 2), "taint": ("yes", 2), "cordon": ("yes", 2), "one": ("yes", 1),
            "two": ("yes", 2)}
    made = []
    for kind, (value, devices) in plan.items():
        for i in range(2 if kind in ("one", "two") else 1):
            name = f"wide-{run}-{kind}-{i}"
            node = server.create_node(name, {label: value})
            if kind == "taint":
                node["spec"]["taints"] = [{"key": label, "effect": "NoSchedule"}]
            if kind == "cordon":
                node["spec"]["unschedulable"] = True
            if kind in ("taint", "cordon"):
                server.update_object("nodes", node)
            server.create_object("resourceslices", _gpus(name, driver, devices))
            made.append(name)
    try:
        server.create_object("resourceclaims", {
            "metadata": {"name": "three", "namespace": namespace},
            "spec": {"devices": {"requests": [{"name": "g", "exactly": {
                "deviceClassName": driver, "count": 3}}]}}})
        server.create_object("pods", {
            "metadata": {"name": "three", "namespace": namespace},
            "spec": {"nodeSelector": {label: "yes"}, "automountServiceAccountToken": False,
                     "resourceClaims": [{"name": "devices", "resourceClaimName": "three"}],
                     "containers": [{"name": "app", "image": "drakit.invalid/app",
                                     "resources": {"claims": [{"name": "devices"}]}}]}})
        verdict = _wait_for_verdict(server, namespace, "three")
        assert verdict is not None and verdict[0] == "unschedulable", verdict
        kc = str(server.write_kubeconfig(tmp_path / "kc"))
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
        argv = ["explain", "--kubeconfig", kc, "--pod", f"{namespace}/three"]
        mine = _run_explain(["drakit", *argv, "-o", "json"], env)
        assert mine.returncode == 1, mine.stderr
        doc = json.loads(mine.stdout)
        total = len(server.list_objects("nodes"))
        assert len(doc["nodes"]) == total
        assert doc["summary"].startswith(f"0/{total} nodes are available: ")
        # the scheduler's message: the same line, then its preemption sentence
        assert verdict[1].split(" preemption:")[0] == doc["summary"], (verdict[1], doc)
        ours = {v["node"]: v for v in doc["nodes"] if v["node"] in made}
        assert ours[f"wide-{run}-off-0"]["reason"] == \
            "node(s) didn't match Pod's node affinity/selector"
        assert ours[f"wide-{run}-taint-0"]["reason"] == "node(s) had untolerated taint(s)"
        assert ours[f"wide-{run}-cordon-0"]["reason"] == "node(s) were unschedulable"
        # only these four reach DynamicResources: first, closest (more matching devices)
        assert [v["node"] for v in doc["nodes"][:4]] == [
            f"wide-{run}-two-0", f"wide-{run}-two-1", f"wide-{run}-one-0", f"wide-{run}-one-1"]
        assert ours[f"wide-{run}-two-0"]["detail"] == \
            f"claim {namespace}/three: request g needs 3 device(s), 2 match"
        text = _run_explain(["drakit", *argv], env)
        assert text.returncode == 1 and doc["summary"] in text.stdout
        kubectl = server.bin_dir / "kubectl"
        if not kubectl.is_file():
            skip_or_fail(f"kubectl not built in {server.bin_dir}: the plugin is not tried")
        listed = _run_explain([str(kubectl), "plugin", "list"], env)
        assert f"{Path(sys.executable).parent}/kubectl-drakit" in listed.stdout, listed
        plugin = _run_explain([str(kubectl), "drakit", *argv], env)
        assert plugin.returncode == 1, plugin.stderr
        assert plugin.stdout == text.stdout
    finally:
        for name in made:
            server.delete_object("resourceslices", name)
            server.delete_object("nodes", name)
        server.delete_object("pods", "three", namespace)
