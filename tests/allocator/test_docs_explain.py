"""The vendor test in docs/explain.md runs as written."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parents[2] / "docs" / "explain.md"


def test_vendor_example_runs(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert len(blocks) == 1
    namespace: dict[str, Any] = {}
    exec(compile(blocks[0], str(DOC), "exec"), namespace)
    namespace["test_classes_and_partitions"](tmp_path / "kit")


def test_cluster_example_is_what_explain_prints() -> None:
    """The cluster-wide answer shown in docs/explain.md is the one drakit computes for the
    cluster it describes (six nodes, a taint, a nodeSelector, a device held by another
    claim)."""
    from drakit.allocator.cluster import explain_cluster

    block = re.search(r"\$ kubectl drakit explain --pod team-a/train\n(.*?)```", DOC.read_text(),
                      re.DOTALL)
    assert block is not None
    driver = "gpu.example.com"

    def node(name: str, labels: dict[str, str], **spec: Any) -> dict[str, Any]:
        return {"metadata": {"name": name, "labels": labels}, "spec": spec}

    def gpus(name: str, *models: str) -> dict[str, Any]:
        return {"metadata": {"name": f"{name}-gpus"}, "spec": {
            "driver": driver, "nodeName": name,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}", "attributes": {"model": {"string": m}}}
                        for i, m in enumerate(models)]}}

    gpu = {"accelerator": "gpu"}
    nodes = [node("gpu-1", gpu), node("gpu-2", gpu), node("gpu-3", gpu),
             node("gpu-4", gpu, taints=[{"key": "maintenance", "effect": "NoSchedule"}]),
             node("cpu-1", {}), node("cpu-2", {})]
    slices = [gpus("gpu-1", "h100", "a100"), gpus("gpu-2", "a100", "a100"),
              gpus("gpu-3", "h100", "h100"), gpus("gpu-4", "h100", "h100")]
    held = {"metadata": {"name": "infer", "namespace": "team-a", "uid": "u1"},
            "status": {"allocation": {"devices": {"results": [
                {"request": "g", "driver": driver, "pool": "gpu-3", "device": "gpu-1"}]}}}}
    cls = {"metadata": {"name": driver}, "spec": {"selectors": [
        {"cel": {"expression": f'device.driver == "{driver}"'}}]}}
    claim = {"metadata": {"name": "train-gpus", "namespace": "team-a", "uid": "u2"},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                 "deviceClassName": driver, "count": 2, "selectors": [{"cel": {
                     "expression": f'device.attributes["{driver}"].model == "h100"'}}]}}]}}}
    pod = {"metadata": {"name": "train", "namespace": "team-a"},
           "spec": {"nodeSelector": gpu}}
    e = explain_cluster(pod, [claim], slices, [cls], nodes, [held])
    assert str(e) == block.group(1).rstrip("\n")
