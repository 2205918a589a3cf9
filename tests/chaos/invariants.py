"""The chaos run's invariants, each read from a view drakit does not control.

Views: the API server (pods, ResourceClaims with their allocation and ``status.devices``,
events), containerd (``ctr tasks ls`` for what runs; ``ctr containers info`` for the OCI
spec the container got: its env and device nodes, the CDI edits applied) and the files on
disk (the CDI specs in the node's CDI dir; drakit's checkpoint, read without its lock).

(a) no running container lacks a device of its claims: for every running container of a
    workload pod, each device allocated to the pod's claims (this driver's results) has its
    ``DRAKIT_DEVICE_<NAME>`` env entry and its device node in the container's OCI spec; and
    no container reported ``CHAOS-MISSING`` (its own check at start).
(b) no exclusive device is prepared for two claims at once (checkpoint records; CDI specs),
    no counter set over-consumed by what is prepared (mig-gpu-0's memory and compute), no
    consumable device over-consumed (shared-gpu-0's memory).
(c) after quiescing: no CDI spec, checkpoint record or AllocatedDeviceStatus entry of
    drakit for a claim no running pod uses; every claim a running pod uses is prepared
    (``PrepareCompleted`` record and CDI spec) with an AllocatedDeviceStatus entry for each
    of its devices.
(d) after quiescing: every pod is Running and Ready (its container printed ``CHAOS-OK``), or
    Failed with a Warning event that names why; none pending or stuck terminating.
(e) drakit never needs a person (the fleet's record: no crash loop, ready after the run).

Each check returns :class:`Violation` records naming the object.
"""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drakit.plugin.claims.checkpoint import Checkpoint, CheckpointState
from drakit.plugin.slices import quantity
from drakit.plugin.testing.apiserver.errors import ApiError
from drakit.plugin.testing.real.node import RealNode
from drakit.plugin.testing.real.process import RealClusterError

from .workload import (
    COUNTER_SET,
    COUNTERS,
    MISSING_MARK,
    NAMESPACE,
    OK_MARK,
    PROFILE_COUNTERS,
    SHARED_DEVICE,
    SHARED_MEMORY,
    device_env,
    device_node,
    pod_claim_names,
    pod_ready,
    profile_of,
)

DRIVER_ENV = "DRAKIT_DEVICE_"


@dataclass(frozen=True)
class Violation:
    """Invariant ``invariant`` (a-e) broken, seen at ``at`` (run clock): ``what``, naming the
    object."""

    invariant: str
    at: float
    what: str

    def line(self) -> str:
        return f"({self.invariant}) t={self.at:.1f}s {self.what}"


# ---------------------------------------------------------------------------- views


@dataclass
class ContainerView:
    """A running container as containerd has it."""

    id: str
    namespace: str
    pod: str
    pod_uid: str
    container: str
    env: list[str]
    device_paths: set[str]


class ContainerdView:
    """Running workload containers from ``ctr`` (their specs cached: they never change)."""

    def __init__(self, node: RealNode) -> None:
        self.node = node
        self._info: dict[str, dict[str, Any]] = {}

    def _container_info(self, cid: str) -> dict[str, Any]:
        if cid not in self._info:
            self._info[cid] = json.loads(self.node.ctr("containers", "info", cid, timeout=20))
        return self._info[cid]

    @staticmethod
    def _spec(info: dict[str, Any]) -> dict[str, Any]:
        spec = info.get("Spec") or {}
        if "process" in spec or "linux" in spec:
            return dict(spec)
        value = spec.get("value")
        if isinstance(value, str):
            return dict(json.loads(base64.b64decode(value)))
        return {}

    def running(self) -> list[ContainerView]:
        """Running task ids → views of the workload's app containers (sandboxes left out).
        Raises RealClusterError / TimeoutExpired when containerd does not answer."""
        out = []
        lines = self.node.ctr("tasks", "ls", timeout=20).splitlines()[1:]
        running = [ln.split()[0] for ln in lines if ln.split() and ln.split()[-1] == "RUNNING"]
        for cid in running:
            try:
                info = self._container_info(cid)
            except (RealClusterError, ValueError, subprocess.TimeoutExpired):
                continue   # gone meanwhile
            labels = info.get("Labels") or {}
            if (labels.get("io.cri-containerd.kind") != "container"
                    or labels.get("io.kubernetes.pod.namespace") != NAMESPACE):
                continue
            spec = self._spec(info)
            out.append(ContainerView(
                cid, NAMESPACE, labels.get("io.kubernetes.pod.name", ""),
                labels.get("io.kubernetes.pod.uid", ""),
                labels.get("io.kubernetes.container.name", ""),
                list((spec.get("process") or {}).get("env") or []),
                {d.get("path", "") for d in (spec.get("linux") or {}).get("devices") or []}))
        return out


def results_of(claim: dict[str, Any], driver: str) -> list[dict[str, Any]]:
    """This driver's allocation results of ``claim``."""
    alloc = (claim.get("status") or {}).get("allocation") or {}
    return [r for r in (alloc.get("devices") or {}).get("results") or []
            if r.get("driver") == driver]


def status_entries(claim: dict[str, Any], driver: str) -> list[dict[str, Any]]:
    return [d for d in (claim.get("status") or {}).get("devices") or []
            if d.get("driver") == driver]


def cdi_devices(cdi_dir: Path) -> dict[str, set[tuple[str, str]]]:
    """Claim UID → the (pool, device) its CDI spec gives containers (``DRAKIT_DEVICE_``
    env entries), for every spec file in ``cdi_dir`` (``<vendor>-<class>_<claimUID>.json``)."""
    out: dict[str, set[tuple[str, str]]] = {}
    for path in sorted(cdi_dir.glob("*.json")):
        uid = path.name.rsplit("_", 1)[-1].removesuffix(".json")
        try:
            spec = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        devices: set[tuple[str, str]] = set()
        edits = [spec.get("containerEdits") or {},
                 *[d.get("containerEdits") or {} for d in spec.get("devices") or []]]
        for e in edits:
            for entry in e.get("env") or []:
                if entry.startswith(DRIVER_ENV) and "=" in entry:
                    pool, _, device = entry.split("=", 1)[1].partition("/")
                    devices.add((pool, device))
        out[uid] = devices
    return out


def read_checkpoint(path: Path) -> CheckpointState:
    """drakit's checkpoint as on disk (no lock taken: the files are written atomically)."""
    if not path.exists():
        return CheckpointState()
    return Checkpoint(path).state()


# ---------------------------------------------------------------------------- (a)


def check_containers(containers: Iterable[ContainerView], pods: dict[str, dict[str, Any]],
                     claims: dict[str, dict[str, Any]], driver: str,
                     at: float) -> list[Violation]:
    """(a) from containerd's specs: every device of the pod's claims in the container."""
    out = []
    for c in containers:
        pod = pods.get(c.pod)
        if pod is None or pod["metadata"]["uid"] != c.pod_uid or \
                pod["metadata"].get("deletionTimestamp"):
            continue
        for name in pod_claim_names(pod):
            claim = claims.get(name)
            if claim is None:
                out.append(Violation("a", at, f"pod {NAMESPACE}/{c.pod} container {c.id[:12]} "
                                              f"runs, its ResourceClaim {name} does not exist"))
                continue
            results = results_of(claim, driver)
            if not results:
                out.append(Violation("a", at, f"pod {NAMESPACE}/{c.pod} container {c.id[:12]} "
                                              f"runs, ResourceClaim {name} is not allocated"))
            for r in results:
                env = device_env(r["pool"], r["device"])
                node = device_node(r["device"])
                if env not in c.env or node not in c.device_paths:
                    out.append(Violation(
                        "a", at, f"pod {NAMESPACE}/{c.pod} container {c.id[:12]} lacks device "
                                 f"{r['pool']}/{r['device']} of ResourceClaim {name} "
                                 f"(uid {claim['metadata']['uid']}): env {env in c.env}, "
                                 f"node {node} {node in c.device_paths}"))
    return out


def container_reports(pods: Iterable[dict[str, Any]], at: float) -> list[Violation]:
    """(a) from the containers' own checks: a ``CHAOS-MISSING`` termination message."""
    out = []
    for pod in pods:
        for s in (pod.get("status") or {}).get("containerStatuses") or []:
            for state in (s.get("state") or {}, s.get("lastState") or {}):
                message = (state.get("terminated") or {}).get("message") or ""
                if MISSING_MARK in message:
                    out.append(Violation("a", at, f"pod {NAMESPACE}/{pod['metadata']['name']} "
                                                  f"(uid {pod['metadata']['uid']}) container "
                                                  f"found a device missing: "
                                                  f"{message.strip()[:300]}"))
    return out


# ---------------------------------------------------------------------------- (b)


def check_exclusive(state: CheckpointState, specs: dict[str, set[tuple[str, str]]],
                    at: float) -> list[Violation]:
    """(b) no exclusive device prepared for two claims; counters and capacity not
    over-consumed."""
    out = []
    holders: dict[tuple[str, str], set[str]] = {}
    counters = dict.fromkeys(COUNTERS, 0)
    shared = 0
    for uid, rec in sorted(state.claims.items()):
        for d in rec.devices:
            if d.admin_access:
                continue
            if d.share_id is None:
                holders.setdefault((d.pool, d.device), set()).add(uid)
            else:
                shared += quantity.parse(d.consumed_capacity.get("memory", "0")).ceil_int() \
                    if d.device == SHARED_DEVICE else 0
            profile = profile_of(d.device)
            if profile is not None:
                for k, v in PROFILE_COUNTERS[profile].items():
                    counters[k] += v
    for (pool, device), uids in sorted(holders.items()):
        if len(uids) > 1:
            out.append(Violation("b", at, f"device {pool}/{device} prepared for claims "
                                          f"{sorted(uids)} (checkpoint)"))
    for k, used in counters.items():
        if used > COUNTERS[k]:
            out.append(Violation("b", at, f"counter set {COUNTER_SET} counter {k}: prepared "
                                          f"partitions consume {used} of {COUNTERS[k]}"))
    if shared > SHARED_MEMORY:
        out.append(Violation("b", at, f"device {SHARED_DEVICE}: prepared shares consume "
                                      f"{shared} bytes of memory of {SHARED_MEMORY}"))
    by_device: dict[tuple[str, str], set[str]] = {}
    for uid, devices in specs.items():
        for pd in devices:
            if pd[1] != SHARED_DEVICE:
                by_device.setdefault(pd, set()).add(uid)
    for (pool, device), uids in sorted(by_device.items()):
        if len(uids) > 1:
            out.append(Violation("b", at, f"device {pool}/{device} in the CDI specs of claims "
                                          f"{sorted(uids)}"))
    return out


# ---------------------------------------------------------------------------- (c), (d)


def running_pods(pods: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if (p.get("status") or {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")]


def check_quiet(pods: list[dict[str, Any]], claims: dict[str, dict[str, Any]],
                state: CheckpointState, specs: dict[str, set[tuple[str, str]]], driver: str,
                at: float) -> list[Violation]:
    """(c) drakit holds exactly what the running pods use, with its status applied."""
    out = []
    by_uid = {c["metadata"]["uid"]: c for c in claims.values()}
    used: dict[str, str] = {}       # claim uid → a pod using it
    for pod in running_pods(pods):
        for name in pod_claim_names(pod):
            claim = claims.get(name)
            if claim is not None:
                used[claim["metadata"]["uid"]] = pod["metadata"]["name"]

    def describe(uid: str) -> str:
        c = by_uid.get(uid)
        return f"ResourceClaim {NAMESPACE}/{c['metadata']['name']} (uid {uid})" if c else \
            f"claim uid {uid} (no such ResourceClaim)"

    for uid in sorted(set(specs) - set(used)):
        out.append(Violation("c", at, f"CDI spec left for {describe(uid)}, no running pod "
                                      f"uses it"))
    for uid in sorted(set(state.claims) - set(used)):
        out.append(Violation("c", at, f"checkpoint record ({state.claims[uid].phase}) left "
                                      f"for {describe(uid)}, no running pod uses it"))
    for uid, c in sorted(by_uid.items()):
        if uid not in used and status_entries(c, driver):
            out.append(Violation("c", at, f"AllocatedDeviceStatus left on {describe(uid)}, "
                                          f"no running pod uses it: "
                                          f"{status_entries(c, driver)}"))
    for uid, user in sorted(used.items()):
        claim = by_uid[uid]
        rec = state.claims.get(uid)
        if rec is None or rec.phase != "PrepareCompleted":
            out.append(Violation("c", at, f"{describe(uid)} used by running pod {user} is not "
                                          f"prepared (record {rec.phase if rec else None})"))
        if uid not in specs:
            out.append(Violation("c", at, f"{describe(uid)} used by running pod {user} has no "
                                          f"CDI spec"))
        have = {(s.get("pool"), s.get("device"), s.get("shareID"))
                for s in status_entries(claim, driver)}
        for r in results_of(claim, driver):
            if (r["pool"], r["device"], r.get("shareID")) not in have:
                out.append(Violation("c", at, f"{describe(uid)} used by running pod {user}: no "
                                              f"AllocatedDeviceStatus for {r['pool']}/"
                                              f"{r['device']}"))
    return out


def pod_events(node: RealNode, pod: dict[str, Any]) -> list[dict[str, Any]]:
    try:
        answer = node.cp.request(
            "GET", f"/api/v1/namespaces/{NAMESPACE}/events",
            query={"fieldSelector": f"involvedObject.uid={pod['metadata']['uid']}"})
    except (ApiError, OSError):
        return []
    return list(answer.get("items") or [])


def check_pods(node: RealNode, pods: list[dict[str, Any]], at: float) -> list[Violation]:
    """(d) every pod Running and Ready with its container's ``CHAOS-OK``, or Failed with a
    Warning event."""
    out = []
    for pod in pods:
        name = pod["metadata"]["name"]
        phase = (pod.get("status") or {}).get("phase")
        if pod["metadata"].get("deletionTimestamp"):
            out.append(Violation("d", at, f"pod {NAMESPACE}/{name} stuck terminating since "
                                          f"{pod['metadata']['deletionTimestamp']}: "
                                          f"{_pod_story(node, pod)}"))
        elif phase == "Running" and pod_ready(pod):
            try:
                log = node.container_log(NAMESPACE, name, "c")
            except (RealClusterError, OSError):
                log = ""
            if OK_MARK not in log:
                out.append(Violation("d", at, f"pod {NAMESPACE}/{name} Ready but its container "
                                              f"never printed {OK_MARK}: {log[-300:]!r}"))
        elif phase == "Failed":
            warnings = [e for e in pod_events(node, pod) if e.get("type") == "Warning"]
            if not warnings:
                out.append(Violation("d", at, f"pod {NAMESPACE}/{name} Failed with no Warning "
                                              f"event: {_pod_story(node, pod)}"))
        else:
            out.append(Violation("d", at, f"pod {NAMESPACE}/{name} {phase}, not Ready: "
                                          f"{_pod_story(node, pod)}"))
    return out


def _pod_story(node: RealNode, pod: dict[str, Any]) -> str:
    status = pod.get("status") or {}
    conds = {c.get("type"): f"{c.get('status')}:{c.get('reason', '')}"
             for c in status.get("conditions") or []}
    waiting = [((s.get("state") or {}).get("waiting") or {}).get("reason")
               for s in status.get("containerStatuses") or []]
    events = [f"{e.get('reason')}: {str(e.get('message'))[:200]} (x{e.get('count', 1)})"
              for e in pod_events(node, pod)][-5:]
    return (f"node {pod['spec'].get('nodeName')}, conditions {conds}, waiting {waiting}, "
            f"events {events}")
