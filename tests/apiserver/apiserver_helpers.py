"""Shared test data for the embedded API server tests."""

from __future__ import annotations

from typing import Any

DRIVER = "gpu.example.com"
NODE = "node-a"


def make_slice(
    name: str = "node-a-gpu",
    *,
    devices: int = 1,
    node: str = NODE,
    driver: str = DRIVER,
    generation: int = 1,
    api_version: str = "resource.k8s.io/v1",
) -> dict[str, Any]:
    """A valid ResourceSlice body in v1 shape."""
    return {
        "apiVersion": api_version,
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": [
                {"name": f"gpu-{i}", "attributes": {"model": {"string": "x100"}},
                 "capacity": {"memory": {"value": "16Gi"}}}
                for i in range(devices)
            ],
        },
    }
