"""The chaos run's checkers on made-up views: each invariant fires on a state that breaks
it and stays quiet on one that keeps it; the container's start-up check (busybox sh) passes
with every device there and names what is missing otherwise."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from realnode.node_helpers import DRIVER

from drakit.cdi.spec import ContainerEdits, Device
from drakit.cdi.store import SpecStore
from drakit.plugin.claims.checkpoint import CheckpointState, ClaimRecord, PreparedDeviceRecord

from .driver import HELD, held_device_waits, longest_quiet_stretch
from .invariants import (
    ContainerView,
    cdi_devices,
    check_containers,
    check_exclusive,
    check_quiet,
    container_reports,
)
from .workload import CHECK_SCRIPT, MISSING_MARK, OK_MARK, pod_manifest

POOL = "node-1"


def record(uid: str, *devices: tuple[str, str | None, str | None],
           phase: str = "PrepareCompleted") -> ClaimRecord:
    """A checkpoint record of claim ``uid`` with (device, shareID, consumed memory)."""
    return ClaimRecord(uid=uid, namespace="chaos", name=f"claim-{uid}", phase=phase,  # type: ignore[arg-type]
                       devices=[PreparedDeviceRecord(
                           request="r", pool=POOL, device=d, share_id=share,
                           consumed_capacity={"memory": mem} if mem else {})
                           for d, share, mem in devices])


def claim_obj(name: str, uid: str, *devices: tuple[str, str | None],
              status: bool = True) -> dict[str, Any]:
    results = [{"request": "r", "driver": DRIVER, "pool": POOL, "device": d,
                **({"shareID": s} if s else {})} for d, s in devices]
    st: dict[str, Any] = {"allocation": {"devices": {"results": results}}}
    if status:
        st["devices"] = [{"driver": DRIVER, "pool": POOL, "device": d,
                          **({"shareID": s} if s else {})} for d, s in devices]
    return {"metadata": {"name": name, "namespace": "chaos", "uid": uid}, "status": st}


def running_pod(name: str, uid: str, claims: list[str]) -> dict[str, Any]:
    pod = pod_manifest(name, "n", ["named"] * len(claims))
    pod["spec"]["resourceClaims"] = [{"name": f"c{i}", "resourceClaimName": c}
                                     for i, c in enumerate(claims)]
    pod["metadata"]["uid"] = uid
    pod["status"] = {"phase": "Running",
                     "conditions": [{"type": "Ready", "status": "True"}]}
    return pod


def test_exclusive_device_for_two_claims_and_overconsumption() -> None:
    fine = CheckpointState(claims={
        "u1": record("u1", ("gpu-0", None, None)),
        "u2": record("u2", ("shared-gpu-0", "s1", "4Gi"), ("mig-gpu-0-1g-10gb-0", None, None)),
        "u3": record("u3", ("shared-gpu-0", "s2", "4Gi"), ("mig-gpu-0-1g-10gb-1", None, None)),
    })
    assert check_exclusive(fine, {}, 0.0) == []

    twice = CheckpointState(claims={"u1": record("u1", ("gpu-0", None, None)),
                                    "u2": record("u2", ("gpu-0", None, None),
                                                 phase="PrepareStarted")})
    [v] = check_exclusive(twice, {}, 1.0)
    assert v.invariant == "b" and "gpu-0" in v.what and "u1" in v.what and "u2" in v.what

    # four 1g partitions fill the counter set; the whole device on top over-consumes it
    parts = {f"p{i}": record(f"p{i}", (f"mig-gpu-0-1g-10gb-{i}", None, None))
             for i in range(4)}
    assert check_exclusive(CheckpointState(claims=parts), {}, 0.0) == []
    parts["w"] = record("w", ("mig-gpu-0", None, None))
    found = check_exclusive(CheckpointState(claims=parts), {}, 0.0)
    assert {v.what.split(":")[0] for v in found} == {
        "counter set mig-gpu-0-counters counter memory",
        "counter set mig-gpu-0-counters counter compute"}

    shares = CheckpointState(claims={f"s{i}": record(f"s{i}", ("shared-gpu-0", f"x{i}", "16Gi"))
                                     for i in range(3)})
    [v] = check_exclusive(shares, {}, 0.0)
    assert "shared-gpu-0" in v.what and "consume" in v.what


def test_cdi_specs_of_two_claims_with_one_device(tmp_path: Path) -> None:
    store = SpecStore(tmp_path, DRIVER, "device")
    uids = ["11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222"]
    for uid, device in zip(uids, ("gpu-3", "gpu-4"), strict=True):
        store.write(uid, [Device(name=f"{uid}-{device}", container_edits=ContainerEdits(
            env=[f"DRAKIT_DEVICE_{device.upper().replace('-', '_')}={POOL}/{device}"]))])
    specs = cdi_devices(tmp_path)
    assert specs == {uids[0]: {(POOL, "gpu-3")}, uids[1]: {(POOL, "gpu-4")}}
    assert check_exclusive(CheckpointState(), specs, 0.0) == []
    store.write(uids[1], [Device(name=f"{uids[1]}-gpu-3", container_edits=ContainerEdits(
        env=[f"DRAKIT_DEVICE_GPU_3={POOL}/gpu-3"]))])
    [v] = check_exclusive(CheckpointState(), cdi_devices(tmp_path), 0.0)
    assert "gpu-3" in v.what and "CDI specs" in v.what


def test_running_container_lacking_a_device() -> None:
    pod = running_pod("p1", "pod-1", ["cl"])
    claims = {"cl": claim_obj("cl", "c-1", ("gpu-2", None), ("mig-gpu-0-1g-10gb-3", None))}
    whole = ContainerView("abc", "chaos", "p1", "pod-1", "c",
                          [f"DRAKIT_DEVICE_GPU_2={POOL}/gpu-2",
                           f"DRAKIT_DEVICE_MIG_GPU_0_1G_10GB_3={POOL}/mig-gpu-0-1g-10gb-3"],
                          {"/dev/chaos-gpu2", "/dev/chaos-mig0"})
    assert check_containers([whole], {"p1": pod}, claims, DRIVER, 0.0) == []
    lacking = ContainerView("abc", "chaos", "p1", "pod-1", "c", whole.env[:1],
                            {"/dev/chaos-gpu2"})
    [v] = check_containers([lacking], {"p1": pod}, claims, DRIVER, 0.0)
    assert v.invariant == "a" and "mig-gpu-0-1g-10gb-3" in v.what
    # a container of a pod being deleted, or of an older pod of the same name, is not judged
    deleting = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "now"}}
    assert check_containers([lacking], {"p1": deleting}, claims, DRIVER, 0.0) == []
    other = ContainerView("abc", "chaos", "p1", "pod-0", "c", [], set())
    assert check_containers([other], {"p1": pod}, claims, DRIVER, 0.0) == []
    unallocated = {"cl": {"metadata": {"name": "cl", "uid": "c-1"}, "status": {}}}
    [v] = check_containers([whole], {"p1": pod}, unallocated, DRIVER, 0.0)
    assert "not allocated" in v.what


def test_container_report_of_a_missing_device() -> None:
    pod = running_pod("p1", "pod-1", [])
    assert container_reports([pod], 0.0) == []
    pod["status"]["containerStatuses"] = [{"lastState": {"terminated": {
        "exitCode": 1, "message": f"{MISSING_MARK} gpu:0/1\n"}}}]
    [v] = container_reports([pod], 0.0)
    assert v.invariant == "a" and "gpu:0/1" in v.what


def test_quiet_node_holds_exactly_what_running_pods_use() -> None:
    used = claim_obj("used", "u-1", ("gpu-1", None))
    gone = claim_obj("gone", "u-2", ("gpu-2", None))
    pods = [running_pod("p1", "pod-1", ["used"])]
    claims = {"used": used, "gone": {**gone, "status": {
        "allocation": gone["status"]["allocation"]}}}
    state = CheckpointState(claims={"u-1": record("u-1", ("gpu-1", None, None))})
    specs = {"u-1": {(POOL, "gpu-1")}}
    assert check_quiet(pods, claims, state, specs, DRIVER, 0.0) == []

    # left behind: a spec, a record, a status entry of a claim no running pod uses
    left_state = CheckpointState(claims={**state.claims, "u-2": record("u-2", ("gpu-2", None,
                                                                              None))})
    found = check_quiet(pods, {"used": used, "gone": gone}, left_state,
                        {**specs, "u-2": {(POOL, "gpu-2")}}, DRIVER, 0.0)
    assert sorted(v.what.split(" ")[0] for v in found) == ["AllocatedDeviceStatus", "CDI",
                                                            "checkpoint"]
    assert all("u-2" in v.what and v.invariant == "c" for v in found)

    # lost: a claim a running pod uses, not prepared, no spec, no status
    bare = {"used": claim_obj("used", "u-1", ("gpu-1", None), status=False)}
    found = check_quiet(pods, bare, CheckpointState(), {}, DRIVER, 0.0)
    assert len(found) == 3 and all("u-1" in v.what for v in found)
    half = CheckpointState(claims={"u-1": record("u-1", ("gpu-1", None, None),
                                                 phase="PrepareStarted")})
    [v] = check_quiet(pods, claims, half, specs, DRIVER, 0.0)
    assert "PrepareStarted" in v.what


@pytest.mark.skipif(not os.access("/bin/busybox", os.X_OK), reason="needs /bin/busybox")
@pytest.mark.parametrize(("env", "nodes", "verdict"), [
    ({"DRAKIT_DEVICE_GPU_1": "p/gpu-1", "DRAKIT_DEVICE_SHARED_GPU_0": "p/shared-gpu-0"},
     ["chaos-gpu1", "chaos-shared0"], OK_MARK),
    ({"DRAKIT_DEVICE_GPU_1": "p/gpu-1", "DRAKIT_DEVICE_SHARED_GPU_0": "p/shared-gpu-0"},
     ["chaos-gpu1"], f"{MISSING_MARK} node:"),
    ({"DRAKIT_DEVICE_GPU_1": "p/gpu-1"}, ["chaos-gpu1"], f"{MISSING_MARK} share:0/1"),
    ({"DRAKIT_DEVICE_SHARED_GPU_0": "p/shared-gpu-0"}, ["chaos-shared0"],
     f"{MISSING_MARK} gpu:0/1"),
])
def test_container_start_check(tmp_path: Path, env: dict[str, str], nodes: list[str],
                               verdict: str) -> None:
    (tmp_path / "dev").mkdir()
    for n in nodes:
        (tmp_path / "dev" / n).symlink_to("/dev/null")
    script = CHECK_SCRIPT.replace("exec /bin/busybox sleep 1000000", "exit 0")
    busybox = shutil.which("busybox") or "/bin/busybox"
    r = subprocess.run([busybox, "sh", "-c", script], capture_output=True, text=True,
                       timeout=30, check=False,
                       env={"PATH": "/usr/bin:/bin", "CHAOS_DEV_ROOT": str(tmp_path),
                            "WANT_GPU": "1", "WANT_SLICE": "0", "WANT_SHARE": "1", **env})
    assert r.stdout.startswith(verdict), r.stdout + r.stderr
    assert r.returncode == (0 if verdict == OK_MARK else 1)


def test_longest_quiet_stretch() -> None:
    windows = [(0.0, 5.0, "reboot"), (12.0, 20.0, "apiserver-kill"),
               (26.0, 27.0, "kubelet-kill"), (70.0, 120.0, "drakit-pause")]
    # a pod scheduled at 3 s, Ready at 121 s: the longest quiet part is 27 -> 70 s
    assert longest_quiet_stretch(3.0, 121.0, windows) == (43.0, "kubelet-kill")
    assert longest_quiet_stretch(6.0, 10.0, windows) == (4.0, "reboot")
    assert longest_quiet_stretch(71.0, 119.0, windows) is None
    assert longest_quiet_stretch(115.0, 130.0, windows) == (10.0, "drakit-pause")
    assert longest_quiet_stretch(1.0, 4.0, [(0.0, float("inf"), "etcd-kill")]) is None


def test_held_device_waits() -> None:
    def refused(at: str, claim: str) -> str:
        return (f'2026-12-07T18:{at}+00:00 WARNING drakit.plugin.claims.node plugin/klog.py:84] '
                f'"prepare failed" err="ResourceClaim {claim}: status.allocation.devices.'
                f'results[0]: device drakit-node/gpu-0 is still prepared for claim 1c45; retry '
                f'after it is unprepared" claim="{claim}" claimUID="ee02" driver="d"')

    lines = [refused("21:00.500", "chaos/a"), refused("21:07.000", "chaos/b"),
             '2026-12-07T18:21:10.000+00:00 V2 x] "prepared claim with 1 device(s)" '
             'claim="chaos/c"', refused("23:54.500", "chaos/a"), "not a log line " + HELD]
    assert held_device_waits(lines) == {"chaos/a": 174.0, "chaos/b": 0.0}
