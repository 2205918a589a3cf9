"""Benchmark: cold publish of N devices to the embedded API server, then an unchanged resync.

Run: ``python tests/slices/bench_publish.py [--devices 10000] [--versions v1]``.
Prints one JSON line: seconds for the cold publish (validate + split + writes), the writes
it made, seconds and writes of an unchanged resync (goal: ≤ 3 s and 0 writes).
Exit status 1 when the unchanged resync writes anything.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from drakit.discovery.model import Device, Pool
from drakit.plugin.api.resourceapi import ResourceAPI
from drakit.plugin.slices.publisher import SlicePublisher
from drakit.plugin.testing.apiserver import EmbeddedAPIServer


def inventory(n: int) -> list[Pool]:
    devices = [Device(name=f"dev-{i}", attributes={
        "index": i, "model": "bench-accelerator", "driverVersion": {"version": "1.2.3"},
        "healthy": True}, capacity={"memory": "16Gi"}) for i in range(n)]
    return [Pool(name="bench-node", devices=devices)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--devices", type=int, default=10_000)
    parser.add_argument("--versions", default="v1", help="comma-separated served versions")
    args = parser.parse_args(argv)
    pools = inventory(args.devices)
    with EmbeddedAPIServer(served_versions=tuple(args.versions.split(","))) as server:
        server.create_node("bench-node")
        pub = SlicePublisher(ResourceAPI(server.api_client()), "bench.example.com",
                             "bench-node")
        t0 = time.perf_counter()
        cold = pub.publish(pools)
        t1 = time.perf_counter()
        warm = pub.publish(pools)
        t2 = time.perf_counter()
    assert cold is not None and warm is not None
    result = {"devices": args.devices, "cold_publish_seconds": round(t1 - t0, 3),
              "cold_writes": cold.writes, "unchanged_resync_seconds": round(t2 - t1, 3),
              "unchanged_resync_writes": warm.writes}
    print(json.dumps(result))
    return 0 if warm.writes == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
