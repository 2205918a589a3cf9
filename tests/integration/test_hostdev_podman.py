"""Containers use the host devices that hostdev claims gave them: podman + runc on the CDI
specs the agent wrote (busybox image; the KVM ioctl through a static binary built here)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from drakit.cdi.testing import PodmanCDI
from drakit.discovery.testing import LoopDevice
from drakit.plugin.testing.harness import DriverHarness

pytestmark = [pytest.mark.podman,
              pytest.mark.skipif(os.geteuid() != 0, reason="podman and losetup need root")]

DRIVER = "hostdev.drakit.dev"
DATA = Path(__file__).with_name("data")
RULES: list[dict[str, Any]] = [
    {"name": "kvm", "match": 'KERNEL=="kvm", SUBSYSTEM=="misc"', "sharing": "shared",
     "env": "KVM_DEVICE"},
    {"name": "fuse", "match": "/dev/fuse", "sharing": "shared", "env": "FUSE_DEVICE"},
    {"name": "tun", "match": "/dev/net/tun"},
    {"name": "loop", "match": 'SUBSYSTEM=="block", KERNEL=="loop[0-9]*", ATTR{size}!="0"',
     "permissions": "r", "containerPath": "/dev/disk0", "env": "DISK"},
]


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[DriverHarness]:
    for path in ("/dev/fuse", "/dev/net/tun"):
        if not os.path.exists(path):
            pytest.skip(f"{path} does not exist on this machine")
    with DriverHarness(tmp_path / "h", driver_name=DRIVER, discovery=["hostdev"],
                       plugin_options={"hostdev": {"rules": RULES}},
                       settings={"cdi_version_max": "0.5.0"}) as h:   # podman 4.3
        yield h


def prepare(h: DriverHarness, name: str, device: str) -> tuple[dict[str, Any], list[str]]:
    c = h.allocate(name, [("node-1", device)])
    result = h.prepare(c)[c["metadata"]["uid"]]
    assert result.error == "", result.error
    return c, result.cdi_device_ids


def test_three_containers_share_dev_fuse(harness: DriverHarness,
                                         podman_cdi: PodmanCDI) -> None:
    for i in range(3):
        _claim, ids = prepare(harness, f"fuse-{i}", "fuse")
        run = podman_cdi.run(harness.cdi_dir, ids,
                             'exec 3<>"$FUSE_DEVICE" && echo opened "$FUSE_DEVICE"').check()
        assert "opened /dev/fuse" in run.stdout
    assert len(harness.cdi_files()) == 3


def test_a_container_reads_a_loop_device_attached_during_the_test(
        harness: DriverHarness, podman_cdi: PodmanCDI, tmp_path: Path) -> None:
    pattern = b"drakit-hostdev-loop!"
    with LoopDevice(tmp_path / "disk.img", pattern) as loop:
        path, name = loop.path or "", "loop-" + loop.name
        harness.wait_for(lambda: ("node-1", name) in harness.devices(), 5, f"{name} published")
        c, ids = prepare(harness, "disk", name)
        run = podman_cdi.run(harness.cdi_dir, ids,
                             'head -c 20 "$DISK"; echo; stat -c "%t:%T" /dev/disk0').check()
        first, numbers = run.stdout.splitlines()[:2]
        assert first == pattern.decode()
        st = os.stat(path)
        assert numbers == f"{os.major(st.st_rdev):x}:{os.minor(st.st_rdev):x}"
        # read-only in the device cgroup: opening it for writing is refused
        denied = podman_cdi.run(harness.cdi_dir, ids, 'exec 3<>/dev/disk0')
        assert denied.returncode != 0
        assert harness.unprepare(c) == {c["metadata"]["uid"]: ""}


def test_kvm_answers_its_api_version_in_a_container(
        harness: DriverHarness, podman_cdi: PodmanCDI, tmp_path: Path) -> None:
    if not os.path.exists("/dev/kvm"):
        pytest.skip("/dev/kvm does not exist on this machine (no KVM: no hardware "
                    "virtualisation or the kvm module is not loaded)")
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed: the KVM ioctl needs a static binary "
                    "(busybox has no ioctl applet)")
    binary = tmp_path / "kvm_api_version"
    subprocess.run([gcc, "-static", "-O2", "-o", str(binary),
                    str(DATA / "kvm_api_version.c")], check=True, timeout=120)
    _claim, ids = prepare(harness, "vm", "kvm")
    run = podman_cdi.run(harness.cdi_dir, ids, '/kvm_api_version "$KVM_DEVICE"',
                         extra_args=["-v", f"{binary}:/kvm_api_version:ro"])
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "KVM_GET_API_VERSION=12"


def test_a_container_without_a_claim_sees_none_and_nothing_is_left(
        harness: DriverHarness, podman_cdi: PodmanCDI) -> None:
    c, ids = prepare(harness, "tun", "tun")
    run = podman_cdi.run(harness.cdi_dir, ids, "exec 3<>/dev/net/tun && echo opened").check()
    assert "opened" in run.stdout
    bare = podman_cdi.run(harness.cdi_dir, [], "ls /dev/kvm /dev/fuse /dev/net/tun")
    assert bare.returncode != 0
    for node in ("/dev/kvm", "/dev/fuse", "/dev/net/tun"):
        assert node in bare.stderr + bare.stdout   # each one reported missing
    assert harness.unprepare(c) == {c["metadata"]["uid"]: ""}
    assert harness.cdi_files() == []
    gone = podman_cdi.run(harness.cdi_dir, ids, "true")
    assert gone.returncode != 0   # the spec is gone: the device no longer resolves
