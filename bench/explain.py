"""Explain figure: ``drakit explain``'s work for one claim against 1,000 devices, in-process
(drakit.allocator.explain with a fresh CEL environment, as each CLI run has): 10 slices of
100 devices each (attributes, capacity; every fifth device a partition on a shared counter),
a DeviceClass selector and a request selector that only the last devices pass, so every
device is evaluated and all but a few get a reason."""

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
