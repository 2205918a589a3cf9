"""Explain figures, in-process with a fresh CEL environment (as each CLI run has), without the
API reads.

``explain_1000``: ``drakit explain``'s work for one claim against 1,000 devices: 10 slices of
100 devices each (attributes, capacity; every fifth device a partition on a shared counter),
a DeviceClass selector and a request selector that only the last devices pass, so every
device is evaluated and all but a few get a reason.

``explain_cluster_1000``: ``drakit explain --pod`` without ``--node``: a pod judged on 1,000
nodes of 10 devices each (:func:`cluster_workload`)."""

from __future__ import annotations

import time
from typing import Any

from bench.env import BenchConfig
from bench.figures import Result

DRIVER = "gpu.example.com"


def workload(devices: int) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    per_slice = 100
    slices = []
    n_slices = max(1, devices // per_slice)
    counters = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": "counters"},
                "spec": {"driver": DRIVER, "nodeName": "node-1",
                         "pool": {"name": "node-1", "generation": 1,
                                  "resourceSliceCount": n_slices + 1},
                         "sharedCounters": [{"name": "mem", "counters": {
                             "memory": {"value": "4Ti"}}}]}}
    slices.append(counters)
    for s in range(n_slices):
        devs = []
        for i in range(per_slice):
            n = s * per_slice + i
            d: dict[str, Any] = {
                "name": f"gpu-{n}",
                "attributes": {"model": {"string": "h100" if n >= devices - 4 else "a100"},
                               "index": {"int": n}, "driverVersion": {"version": "1.2.3"}},
                "capacity": {"memory": {"value": "80Gi"}}}
            if n % 5 == 0:
                d["consumesCounters"] = [{"counterSet": "mem",
                                          "counters": {"memory": {"value": "10Gi"}}}]
            devs.append(d)
        slices.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                       "metadata": {"name": f"node-1-{s}"},
                       "spec": {"driver": DRIVER, "nodeName": "node-1",
                                "pool": {"name": "node-1", "generation": 1,
                                         "resourceSliceCount": n_slices + 1},
                                "devices": devs}})
    cls = {"metadata": {"name": DRIVER}, "spec": {"selectors": [{"cel": {"expression":
           f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].driverVersion'
           '.isGreaterThan(semver("1.0.0"))'}}]}}
    claim = {"metadata": {"name": "c", "namespace": "default", "uid": "u"},
             "spec": {"devices": {"requests": [{"name": "g", "exactly": {
                 "deviceClassName": DRIVER, "count": 2, "selectors": [{"cel": {"expression":
                     f'device.attributes["{DRIVER}"].model == "h100" && '
                     f'device.capacity["{DRIVER}"].memory.compareTo(quantity("64Gi")) >= 0'
                 }}]}}]}}}
    return claim, slices, [cls]


def run_explain(cfg: BenchConfig) -> list[Result]:
    from drakit.allocator.celenv import Environment
    from drakit.allocator.explanation import explain

    devices = cfg.scale(1000, 100)
    claim, slices, classes = workload(devices)
    result = Result("explain_1000")
    for _ in range(cfg.scale(5, 1)):
        t0 = time.perf_counter()
        out = explain(claim, slices, classes, "node-1", env=Environment())
        result.samples.append(time.perf_counter() - t0)
        if not out.allocatable or len(out.requests[0].unmatched) != devices - 4:
            raise RuntimeError(f"unexpected explanation: allocatable={out.allocatable}, "
                               f"{len(out.requests[0].unmatched)} unmatched")
    result.extra["devices"] = devices
    if cfg.quick:
        result.notes.append(f"quick mode: {devices} devices, not 1,000")
    return [result]


def cluster_workload(nodes: int, per_node: int = 10) -> dict[str, Any]:
    """``drakit explain --pod`` without ``--node``: ``nodes`` Nodes with ``per_node`` devices
    each (one slice per node); a pod whose claim wants 2 ``h100`` devices with 64Gi or more
    and whose nodeSelector wants ``pool=gpu``. Every tenth node lacks the label, every tenth
    (from the fifth) has an untolerated NoSchedule taint; the others have one matching
    device, and the last two nodes have two, so the pod fits on exactly those and every node
    that passes the filters is allocated and explained in full."""
    node_objs, slices = [], []
    for n in range(nodes):
        name = f"node-{n}"
        node: dict[str, Any] = {"metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, **({} if n % 10 == 0 else {"pool": "gpu"})}},
            "spec": {}}
        if n % 10 == 5:
            node["spec"]["taints"] = [{"key": "maintenance", "effect": "NoSchedule"}]
        node_objs.append(node)
        good = 2 if n >= nodes - 2 else 1
        devs = [{"name": f"gpu-{i}",
                 "attributes": {"model": {"string": "h100" if i < good else "a100"},
                                "index": {"int": i}, "driverVersion": {"version": "1.2.3"}},
                 "capacity": {"memory": {"value": "80Gi"}}} for i in range(per_node)]
        slices.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                       "metadata": {"name": f"{name}-gpus"},
                       "spec": {"driver": DRIVER, "nodeName": name,
                                "pool": {"name": name, "generation": 1,
                                         "resourceSliceCount": 1},
                                "devices": devs}})
    claim, _, classes = workload(0)
    pod = {"metadata": {"name": "train", "namespace": "default"},
           "spec": {"nodeSelector": {"pool": "gpu"},
                    "resourceClaims": [{"name": "gpus", "resourceClaimName": "c"}]}}
    return {"pod": pod, "claims": [claim], "slices": slices, "classes": classes,
            "nodes": node_objs}


def run_explain_cluster(cfg: BenchConfig) -> list[Result]:
    from drakit.allocator.celenv import Environment
    from drakit.allocator.cluster import explain_cluster

    nodes = cfg.scale(1000, 50)
    w = cluster_workload(nodes)
    result = Result("explain_cluster_1000")
    for _ in range(cfg.scale(3, 1)):
        t0 = time.perf_counter()
        out = explain_cluster(w["pod"], w["claims"], w["slices"], w["classes"], w["nodes"],
                              env=Environment())
        result.samples.append(time.perf_counter() - t0)
        fit = [v.node for v in out.nodes if v.fits]
        if fit != [f"node-{nodes - 2}", f"node-{nodes - 1}"] or len(out.nodes) != nodes:
            raise RuntimeError(f"unexpected explanation: fits on {fit}, {len(out.nodes)} "
                               "nodes judged")
    result.extra["nodes"] = nodes
    result.extra["devices"] = nodes * 10
    if cfg.quick:
        result.notes.append(f"quick mode: {nodes} nodes, not 1,000")
    return [result]
