"""The prepare / unprepare flow through the real agent: fake kubelet → unix-socket gRPC →
NodeLogic → embedded API server, CDI store, checkpoint."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from drakit.plugin.claims.checkpoint import Checkpoint
from drakit.plugin.testing.apiserver import AllocatedDevice
from drakit.plugin.testing.harness import DriverHarness


def uid(claim: dict[str, Any]) -> str:
    return str(claim["metadata"]["uid"])


@pytest.mark.both_apiservers
def test_registration_and_slices(harness: DriverHarness) -> None:
    reg = harness.kubelet.registered_plugins(harness.driver_name)[-1]
    assert reg.dra_version == "v1.DRAPlugin"
    assert reg.supported_versions[:2] == ("v1.DRAPlugin", "v1beta1.DRAPlugin")
    assert reg.endpoint == str(harness.data_dir / "dra.sock")
    slices = harness.slices()
    pools = {s["spec"]["pool"]["name"] for s in slices}
    assert pools == {harness.node_name}
    for s in slices:
        assert s["spec"]["pool"]["resourceSliceCount"] == len(slices)
        assert s["metadata"]["ownerReferences"][0]["kind"] == "Node"
    assert len(harness.devices()) == harness.app.inventory.device_count()


@pytest.mark.both_apiservers
@pytest.mark.both_apiservers
@pytest.mark.both_apiservers
@pytest.mark.parametrize(
    "kubelet_version,expected", [("1.34", "v1.DRAPlugin"), ("1.33", "v1beta1.DRAPlugin")]
)
def test_prepare_unprepare_each_version(
    harness_factory: Callable[..., DriverHarness],
    kubelet_version: str,
    expected: str,
    cdi_schema_errors: Callable[[Any], list[str]],
) -> None:
    h = harness_factory(kubelet_version=kubelet_version)
    assert h.kubelet.registered_plugins(h.driver_name)[-1].dra_version == expected
    claim = h.allocate("c1", [("node-1", "gpu-0")])
    result = h.prepare(claim)[uid(claim)]
    assert result.error == ""
    (dev,) = result.devices
    assert (dev.pool_name, dev.device_name, dev.request_names) == ("node-1", "gpu-0", ("req-0",))
    assert dev.cdi_device_ids == (f"drakit.example.com/device={uid(claim)}-gpu-0",)
    (spec_file,) = h.cdi_files()
    spec = json.loads(spec_file.read_text())
    assert cdi_schema_errors(spec) == []
    assert spec["devices"][0]["name"] == f"{uid(claim)}-gpu-0"
    assert uid(claim) in Checkpoint(h.checkpoint_path).claims()
    assert h.unprepare(claim) == {uid(claim): ""}
    assert h.cdi_files() == []
    assert Checkpoint(h.checkpoint_path).claims() == {}


@pytest.mark.both_apiservers
def test_repeat_prepare_is_idempotent_and_rewrites_missing_spec(harness: DriverHarness) -> None:
    claim = harness.allocate("c1", [("node-1", "gpu-0"), ("node-1", "gpu-1")])
    first = harness.prepare(claim)[uid(claim)]
    assert first.error == ""
    assert harness.prepare(claim)[uid(claim)] == first
    (spec_file,) = harness.cdi_files()
    content = spec_file.read_bytes()
    spec_file.unlink()  # e.g. /var/run/cdi is a tmpfs and the node rebooted
    assert harness.prepare(claim)[uid(claim)] == first
    assert spec_file.read_bytes() == content


def test_unknown_unprepare_is_success(harness: DriverHarness) -> None:
    assert harness.unprepare(("default", "nope", "0d2c6ce8-46a3-4a6c-9a55-1e1c6e7c2f00")) == {
        "0d2c6ce8-46a3-4a6c-9a55-1e1c6e7c2f00": ""
    }


@pytest.mark.both_apiservers
def test_uid_mismatch_is_claim_error(harness: DriverHarness) -> None:
    harness.allocate("c1", [("node-1", "gpu-0")])
    stale = ("default", "c1", "11111111-2222-3333-4444-555555555555")
    err = harness.prepare(stale)[stale[2]].error
    assert "replaced" in err and "default/c1" in err
    assert harness.cdi_files() == []


@pytest.mark.both_apiservers
def test_batch_of_three_with_one_failing(harness: DriverHarness) -> None:
    a = harness.allocate("a", [("node-1", "gpu-0")])
    b = harness.allocate("b", [("node-1", "no-such-device")])
    c = harness.allocate("c", [("node-1", "gpu-1")])
    results = harness.prepare(a, b, c)
    assert results[uid(a)].error == "" and results[uid(c)].error == ""
    assert "not in this node's inventory" in results[uid(b)].error
    assert "results[0]" in results[uid(b)].error
    assert len(harness.cdi_files()) == 2


@pytest.mark.parametrize("case", ["missing", "unallocated", "foreign-driver"])
def test_clear_per_claim_errors(harness: DriverHarness, case: str) -> None:
    if case == "missing":
        ref = ("default", "ghost", "9f0c1b5e-0000-4000-8000-000000000001")
        expect = "not found"
    elif case == "unallocated":
        c = harness.apiserver.create_claim("default", "un", [])
        ref, expect = ("default", "un", uid(c)), "not allocated"
    else:
        c = harness.apiserver.create_claim(
            "default", "fd", [AllocatedDevice(driver="other.example.com", pool="p", device="d")]
        )
        ref, expect = ("default", "fd", uid(c)), "no allocation results for driver"
    err = harness.prepare(ref)[ref[2]].error
    assert expect in err


def test_hostile_claim_names_never_touch_paths(harness: DriverHarness) -> None:
    bad = ("default", "c1", "../../etc/passwd")
    err = harness.prepare(bad)[bad[2]].error
    assert "claim.uid" in err
    assert harness.cdi_files() == []


@pytest.mark.both_apiservers
def test_status_written_and_removed(harness: DriverHarness) -> None:
    claim = harness.allocate("c1", [("node-1", "gpu-0")])
    assert harness.prepare(claim)[uid(claim)].error == ""
    harness.app.status.flush()
    (entry,) = harness.claim(claim)["status"]["devices"]  # type: ignore[index]
    assert (entry["driver"], entry["pool"], entry["device"]) == (
        "drakit.example.com",
        "node-1",
        "gpu-0",
    )
    assert entry["conditions"][0]["type"] == "Ready"
    harness.unprepare(claim)
    harness.app.status.flush()
    assert not harness.claim(claim)["status"].get("devices")  # type: ignore[index]


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
def test_older_api_servers(harness_factory: Callable[..., DriverHarness], version: str) -> None:
    h = harness_factory(served_versions=(version,))
    assert h.devices()
    claim = h.allocate("c1", [h.devices()[0]])
    assert h.prepare(claim)[uid(claim)].error == ""
    h.app.status.flush()
    assert [d["device"] for d in h.claim(claim)["status"]["devices"]] == [h.devices()[0][1]]
    assert h.unprepare(claim) == {uid(claim): ""}
    h.app.status.flush()
    assert not h.claim(claim)["status"].get("devices")


def test_demo_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """`make run` end to end: real /sys, agent as a child process, exit status 0."""
    from drakit.plugin.ops.demo import demo_main

    assert demo_main([]) == 0
    out = capsys.readouterr().out
    assert "CDI device ID:" in out and "OK: demo finished" in out


def test_kubelet_calls_are_counted_for_the_status_writer(
        harness: DriverHarness, monkeypatch: pytest.MonkeyPatch) -> None:
    """Prepare and unprepare count as kubelet calls in flight while they run (the status
    writer gives way to them), and the count is back to zero after each."""
    calls = harness.app.kubelet_calls
    assert harness.app.status.calls is calls and harness.app.node.calls is calls
    seen: list[int] = []
    source = harness.app.node.claim_source
    real_get = source.get_claim

    def get_claim(namespace: str, name: str,
                  deadline: float | None = None) -> dict[str, Any] | None:
        seen.append(calls.in_flight)
        return real_get(namespace, name, deadline)

    monkeypatch.setattr(source, "get_claim", get_claim)
    claim = harness.allocate("c1", [("node-1", "gpu-0")])
    assert harness.prepare(claim)[uid(claim)].error == ""
    assert seen == [1] and calls.in_flight == 0
    assert harness.unprepare(claim) == {uid(claim): ""}
    assert calls.in_flight == 0
    assert harness.app.status.flush(10)
