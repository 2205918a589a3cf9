"""The allocating test kit and ``drakit explain`` on the embedded API server with the example
driver's published slices (whole GPUs, MIG-like partitions on shared counters, a GPU with
consumable capacity)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from drakit.allocator import AllocationFailed
from drakit.plugin.ops.cli import main
from drakit.plugin.testing.harness import DriverHarness

DRIVER = "drakit.example.com"
PARTITION = f'device.attributes["{DRIVER}"].?partition.orValue(false)'


def _claim(name: str, *requests: dict[str, Any], **devices: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": list(requests), **devices}}}


def _req(name: str, *selectors: str, **exactly: Any) -> dict[str, Any]:
    return {"name": name, "exactly": {
        "deviceClassName": DRIVER, **exactly,
        **({"selectors": [{"cel": {"expression": e}} for e in selectors]} if selectors else {})}}


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DriverHarness]:
    with DriverHarness(tmp_path_factory.mktemp("kit")) as h:
        h.wait_for(h.pools_complete, 60, "slices published")
        h.apiserver.create_object("deviceclasses", {
            "metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}})
        yield h


def test_allocate_as_scheduler_then_prepare(harness: DriverHarness) -> None:
    claim = harness.allocate_as_scheduler(_claim("kit-mig", _req(
        "mig", f'device.attributes["{DRIVER}"].?profile.orValue("") == "2g-20gb"', count=2)))
    results = claim["status"]["allocation"]["devices"]["results"]
    assert [r["device"] for r in results] == ["mig-gpu-0-2g-20gb-0", "mig-gpu-0-2g-20gb-1"]
    prepared = harness.prepare(claim)[claim["metadata"]["uid"]]
    assert not prepared.error
    assert harness.unprepare(claim)[claim["metadata"]["uid"]] == ""


def test_allocate_as_scheduler_counts_counters_of_allocated_claims(
        harness: DriverHarness) -> None:
    # the 2g partitions above use 40Gi of the 40Gi counter: a 4g partition no longer fits
    with pytest.raises(AllocationFailed) as e:
        harness.allocate_as_scheduler(_claim("kit-4g", _req(
            "big", f'device.attributes["{DRIVER}"].?profile.orValue("") == "4g-40gb"')))
    [req] = e.value.explanation.requests
    why = {u.device.rsplit("/", 1)[1]: u for u in req.unmatched}
    assert why["mig-gpu-0-4g-40gb-0"].reason == "counter"
    assert "counter memory of counter set mig-gpu-0-counters" in \
        why["mig-gpu-0-4g-40gb-0"].detail
    assert why["mig-gpu-0-2g-20gb-0"].reason == "allocated"


def test_allocate_as_scheduler_consumable_capacity(harness: DriverHarness) -> None:
    claim = harness.allocate_as_scheduler(_claim("kit-share", _req(
        "s", f'device.attributes["{DRIVER}"].?shared.orValue(false)',
        capacity={"requests": {"memory": "3500Mi"}})))
    [r] = claim["status"]["allocation"]["devices"]["results"]
    assert r["device"] == "shared-gpu-0"
    assert r["consumedCapacity"] == {"memory": "4Gi", "compute": "10"}


def _explain(harness: DriverHarness, tmp_path: Path, capsys: pytest.CaptureFixture[str],
             *args: str) -> tuple[int, str]:
    kc = harness.apiserver.write_kubeconfig(tmp_path / "kc")
    code = main(["explain", "--kubeconfig", str(kc), "--node", harness.node_name, *args])
    return code, capsys.readouterr().out


def test_explain_claim_by_name(harness: DriverHarness, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    harness.apiserver.create_object("resourceclaims", _claim(
        "pending", _req("whole", f'!{PARTITION}', 'device.capacity["drakit.example.com"]'
                        '.memory.isGreaterThan(quantity("64Gi"))', count=3)))
    code, out = _explain(harness, tmp_path, capsys, "default/pending", "-o", "json")
    assert code == 1
    doc = json.loads(out)
    assert doc["allocatable"] is False
    assert doc["reasons"] == ["request whole needs 3 device(s), 2 match"]
    [req] = doc["requests"]
    assert [d.rsplit("/", 1)[1] for d in req["matched"]] == ["gpu-0", "gpu-1"]
    why = {u["device"].rsplit("/", 1)[1]: u for u in req["unmatched"]}
    assert why["mig-gpu-0"]["reason"] == "selector"
    assert "request selector #1 is false" in why["mig-gpu-0"]["detail"]
    code, out = _explain(harness, tmp_path, capsys, "default/pending")
    assert code == 1 and "NOT ALLOCATABLE" in out and "request selector #0 is false" in out


def test_explain_file_template_and_cel_error(harness: DriverHarness, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    tmpl = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "t", "namespace": "default"},
            "spec": {"spec": {"devices": {"requests": [_req("g", count=1)]}}}}
    f = tmp_path / "t.yaml"
    f.write_text(yaml.safe_dump(tmpl))
    code, out = _explain(harness, tmp_path, capsys, "-f", str(f))
    assert code == 0 and "ALLOCATABLE" in out and "would allocate: g=" in out
    bad = _claim("bad", _req("g", f'device.attributes["{DRIVER}"].profile == "x"'))
    f.write_text(json.dumps(bad))
    code, out = _explain(harness, tmp_path, capsys, "-f", str(f), "-o", "json")
    doc = json.loads(out)
    assert code == 1
    assert "CEL runtime error: no such key: profile" in doc["error"]
    kinds = {u["reason"] for u in doc["requests"][0]["unmatched"]}
    assert "cel-error" in kinds


def test_explain_usage_errors(harness: DriverHarness, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    kc = str(harness.apiserver.write_kubeconfig(tmp_path / "kc"))
    assert main(["explain", "--kubeconfig", kc, "--node", "node-1"]) == 2
    assert "exactly one of" in capsys.readouterr().err
    assert main(["explain", "--kubeconfig", kc, "--node", "node-1", "default/nosuch"]) == 2
    assert "not found" in capsys.readouterr().err


def test_explain_from_files_without_a_server(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from tests.allocator.alloc_helpers import claim, dclass, device, request, rslice

    files = {"claim.json": claim(request(count=2)),
             "slices.yaml": [rslice([device("gpu-0"), device(
                 "gpu-1", taints=[{"key": "k", "value": "v", "effect": "NoExecute"}])])],
             "classes.yaml": {"kind": "List", "items": [dclass()]}}
    for name, obj in files.items():
        (tmp_path / name).write_text(json.dumps(obj) if name.endswith("json")
                                     else yaml.safe_dump(obj))
    args = ["explain", "--node", "node-1", "-f", str(tmp_path / "claim.json"),
            "--slices-file", str(tmp_path / "slices.yaml"),
            "--classes-file", str(tmp_path / "classes.yaml"), "--no-cluster-claims"]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "gpu-1: taint: taint k=v:NoExecute is not tolerated" in out
    assert main([*args, "-o", "json"]) == 1
    assert json.loads(capsys.readouterr().out)["requests"][0]["matched"] == [
        "gpu.example.com/pool-a/gpu-0"]
    (tmp_path / "claim.json").write_text("{not json")
    assert main(args) == 2
    assert "not YAML or JSON" in capsys.readouterr().err


def test_explain_pod_allocates_its_claims_together(harness: DriverHarness, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    whole = f'!has(device.attributes["{DRIVER}"].partition) && ' \
            f'!has(device.attributes["{DRIVER}"].shared)'
    for name in ("pair-a", "pair-b"):
        harness.apiserver.create_object("resourceclaims", _claim(name, _req(
            "g", whole, count=2)))
    harness.apiserver.create_object("pods", {
        "metadata": {"name": "pair", "namespace": "default"},
        "spec": {"nodeSelector": {"kubernetes.io/hostname": harness.node_name},
                 "resourceClaims": [{"name": "a", "resourceClaimName": "pair-a"},
                                    {"name": "b", "resourceClaimName": "pair-b"}],
                 "containers": [{"name": "c", "image": "x"}]}})
    kc = str(harness.apiserver.write_kubeconfig(tmp_path / "kc"))
    node = ["--node", harness.node_name]
    assert main(["explain", "--kubeconfig", kc, "--pod", "default/pair", *node, "-o",
                 "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["node"] == harness.node_name
    assert [c["allocatable"] for c in doc["claims"]] == [True, True]
    together = ("each claim can be allocated alone, but not all of them together: requests "
                "default/pair-a g, default/pair-b g need at least 4 devices together and only "
                "2 distinct devices match them (a device is allocated to one request)")
    assert doc["reasons"] == [together]
    assert main(["explain", "--kubeconfig", kc, "--pod", "default/pair", *node]) == 1
    assert "pod default/pair on node node-1: NOT ALLOCATABLE" in capsys.readouterr().out
    # without --node: every node (here one), and the full answer of the only one left
    assert main(["explain", "--kubeconfig", kc, "--pod", "default/pair", "-o", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"] == "0/1 nodes are available: 1 cannot allocate all claims."
    [verdict] = doc["nodes"]
    assert verdict["detail"] == together
    assert (verdict["satisfied"], verdict["requests"]) == (2, 2)
    assert doc["only_node"]["reasons"] == [together]
    assert doc["only_node"]["node"] == harness.node_name
