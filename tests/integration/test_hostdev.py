"""The hostdev discoverer inside the real agent: the embedded API server, the fake kubelet,
this machine's /sys and /dev, kernel uevents of real loop devices, podman on the CDI specs.

The three sharing modes go through the allocating test kit (the scheduler's rules); the
hot-plug test measures how long an attached loop device takes to be published.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from drakit.allocator import AllocationFailed
from drakit.discovery.testing import LoopDevice
from drakit.plugin.testing.harness import DriverHarness

DRIVER = "hostdev.drakit.dev"
NODE = "node-1"
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="loop devices need root")

RULES: list[dict[str, Any]] = [
    {"name": "kvm", "match": 'KERNEL=="kvm", SUBSYSTEM=="misc"', "sharing": "shared",
     "env": "KVM_DEVICE"},
    {"name": "fuse", "match": "/dev/fuse", "sharing": 2, "permissions": "rw"},
    {"name": "tun", "match": "/dev/net/tun", "fileMode": "0600", "uid": 0, "gid": 0},
    {"name": "loop", "match": 'SUBSYSTEM=="block", KERNEL=="loop[0-9]*", ATTR{size}!="0"',
     "env": "LOOP_DEVICE", "permissions": "r"},
]


def needs(*paths: str) -> None:
    for path in paths:
        if not os.path.exists(path):
            pytest.skip(f"{path} does not exist on this machine")


def class_of(rule: str) -> dict[str, Any]:
    return {"metadata": {"name": f"hostdev-{rule}"}, "spec": {"selectors": [{"cel": {
        "expression": f'device.driver == "{DRIVER}" && '
                      f'device.attributes["{DRIVER}"].rule == "{rule}"'}}]}}


def claim(name: str, rule: str, **exactly: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default"}, "spec": {"devices": {
        "requests": [{"name": "dev", "exactly": {"deviceClassName": f"hostdev-{rule}",
                                                 **exactly}}]}}}


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[DriverHarness]:
    needs("/dev/kvm", "/dev/fuse", "/dev/net/tun")
    with DriverHarness(tmp_path / "h", driver_name=DRIVER, discovery=["hostdev"],
                       plugin_options={"hostdev": {"rules": RULES}}) as h:
        for rule in ("kvm", "fuse", "tun", "loop"):
            h.apiserver.create_object("deviceclasses", class_of(rule))
        yield h


def spec_of(h: DriverHarness, claim_uid: str) -> dict[str, Any]:
    [path] = [p for p in h.cdi_files() if claim_uid in p.name]
    return dict(json.loads(path.read_text()))


def prepared(h: DriverHarness, c: dict[str, Any]) -> dict[str, Any]:
    uid = c["metadata"]["uid"]
    result = h.prepare(c)[uid]
    assert result.error == "", result.error
    return spec_of(h, uid)


def test_the_three_sharing_modes(harness: DriverHarness) -> None:
    h = harness
    assert {("node-1", n) for n in ("kvm", "fuse", "tun")} <= set(h.devices())
    # shared: any number of claims get /dev/kvm
    kvm = [h.allocate_as_scheduler(claim(f"kvm-{i}", "kvm")) for i in range(3)]
    for c in kvm:
        [result] = c["status"]["allocation"]["devices"]["results"]
        assert result["device"] == "kvm"
        [dev] = prepared(h, c)["devices"]
        [node] = dev["containerEdits"]["deviceNodes"]
        assert (node["path"], node["type"], node["major"], node["minor"]) == (
            "/dev/kvm", "c", 10, 232)
        assert "KVM_DEVICE=/dev/kvm" in dev["containerEdits"]["env"]
    # exclusive: /dev/net/tun goes to one claim at a time
    tun = h.allocate_as_scheduler(claim("tun-0", "tun"))
    with pytest.raises(AllocationFailed):
        h.allocate_as_scheduler(claim("tun-1", "tun"))
    [dev] = prepared(h, tun)["devices"]
    [node] = dev["containerEdits"]["deviceNodes"]
    assert (node["path"], node["fileMode"], node["uid"], node["gid"]) == (
        "/dev/net/tun", 0o600, 0, 0)
    # two slots: two claims of one slot each, a third does not fit
    fuse = [h.allocate_as_scheduler(claim(f"fuse-{i}", "fuse")) for i in range(2)]
    for c in fuse:
        [result] = c["status"]["allocation"]["devices"]["results"]
        assert result["consumedCapacity"] == {"slots": "1"}
        [dev] = prepared(h, c)["devices"]
        assert dev["containerEdits"]["deviceNodes"][0]["permissions"] == "rw"
    with pytest.raises(AllocationFailed):
        h.allocate_as_scheduler(claim("fuse-2", "fuse"))
    # nothing of the claims is left after unprepare
    for c in [*kvm, tun, *fuse]:
        assert h.unprepare(c) == {c["metadata"]["uid"]: ""}
    assert h.cdi_files() == []


def test_explain_says_why_a_hostdev_claim_does_not_fit(
        harness: DriverHarness, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from drakit.plugin.ops.cli import main

    h = harness
    h.allocate_as_scheduler(claim("tun-taken", "tun"))
    kubeconfig = h.apiserver.write_kubeconfig(tmp_path / "kc")

    def explain(c: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        h.apiserver.create_object("resourceclaims", c)
        name = c["metadata"]["name"]
        code = main(["explain", "--kubeconfig", str(kubeconfig), "--node", NODE,
                     f"default/{name}", "-o", "json"])
        return code, json.loads(capsys.readouterr().out)

    code, doc = explain(claim("tun-wanted", "tun"))
    assert code == 1 and doc["allocatable"] is False
    [req] = doc["requests"]
    [why] = [u for u in req["unmatched"] if u["device"].endswith("/tun")]
    assert why["reason"] == "allocated"
    code, doc = explain(claim("fuse-3", "fuse", capacity={"requests": {"slots": "3"}}))
    assert code == 1 and doc["allocatable"] is False
    [req] = doc["requests"]
    [why] = [u for u in req["unmatched"] if u["device"].endswith("/fuse")]
    assert "slots" in why["detail"], why
    code, doc = explain(claim("kvm-by-attr", "kvm", selectors=[{"cel": {"expression":
        f'device.attributes["{DRIVER}"].major == 10 && '
        f'device.attributes["{DRIVER}"].minor == 232'}}]))
    assert code == 0 and doc["allocatable"] is True


# -- loop devices: hot-plug and health -------------------------------------------------------


@pytest.fixture
def loop(tmp_path: Path) -> Iterator[LoopDevice]:
    if shutil.which("losetup") is None:
        pytest.skip("losetup is not installed")
    lo = LoopDevice(tmp_path / "backing.img")
    yield lo
    lo.detach()


def wait_published(h: DriverHarness, name: str, present: bool, timeout: float) -> float:
    """Seconds until device ``name`` is (or is no longer) in the published slices."""
    started = time.monotonic()
    h.wait_for(lambda: (("node-1", name) in h.devices()) == present, timeout,
               f"device {name} {'published' if present else 'gone'}", interval=0.005)
    return time.monotonic() - started


def attach_published(h: DriverHarness, loop: LoopDevice) -> tuple[str, str]:
    """Attach ``loop``; its (path, device name) once published."""
    path = loop.attach()
    name = "loop-" + os.path.basename(path)
    wait_published(h, name, True, 5.0)
    return path, name


@root_only
def test_a_loop_device_attached_is_published_within_a_second(
        harness: DriverHarness, loop: LoopDevice,
        record_property: Callable[[str, Any], None]) -> None:
    h = harness
    path = loop.attach()
    name = "loop-" + os.path.basename(path)
    took = wait_published(h, name, True, 1.0)
    record_property("hotplug_add_seconds", round(took, 3))
    [dev] = [d for s in h.slices() for d in s["spec"]["devices"] if d["name"] == name]
    assert dev["capacity"]["size"] == {"value": str(1 << 20)}
    loop.detach()   # size 0 again: the rule no longer matches
    took = wait_published(h, name, False, 1.0)
    record_property("hotplug_remove_seconds", round(took, 3))


@root_only
def test_a_prepared_loop_device_removed_is_unhealthy_until_it_returns(
        harness: DriverHarness, loop: LoopDevice) -> None:
    h = harness
    path, name = attach_published(h, loop)
    c = h.allocate("uses-loop", [("node-1", name)])
    [dev] = prepared(h, c)["devices"]
    [node] = dev["containerEdits"]["deviceNodes"]
    assert (node["path"], node["type"], node["major"], node["permissions"]) == (
        path, "b", 7, "r")
    assert f"LOOP_DEVICE={path}" in dev["containerEdits"]["env"]
    watch = h.kubelet.watch_health(DRIVER)
    try:
        def health() -> str | None:
            return next((r.health for r in watch.latest or [] if r.device_name == name), None)

        h.wait_for(lambda: health() == "Healthy", 15, f"{name} Healthy")
        loop.detach()
        h.wait_for(lambda: health() == "Unhealthy", 15, f"{name} Unhealthy after detach")
        again = loop.attach()
        if again != path:   # another test took that loop device meanwhile
            pytest.skip(f"the loop device came back as {again}, not {path}")
        h.wait_for(lambda: health() == "Healthy", 15, f"{name} Healthy when back")
    finally:
        watch.cancel()
    assert h.unprepare(c) == {c["metadata"]["uid"]: ""}


@root_only
def test_a_loop_device_gone_before_prepare_fails_that_claim_only(
        harness: DriverHarness, loop: LoopDevice) -> None:
    h = harness
    _path, name = attach_published(h, loop)
    gone = h.allocate("gone", [("node-1", name)])
    fine = h.allocate_as_scheduler(claim("fine", "kvm"))
    loop.detach()
    wait_published(h, name, False, 5.0)
    results = h.prepare(gone, fine)
    assert f"device node-1/{name} is not in this node's inventory" in \
        results[gone["metadata"]["uid"]].error
    assert results[fine["metadata"]["uid"]].error == ""


@root_only
def test_a_node_gone_before_discovery_sees_it_fails_the_claim_naming_the_node(
        tmp_path: Path) -> None:
    """No uevent for a node removed from a dev root of its own: the inventory still has
    the device when the prepare comes, and the prepare names the node that is gone."""
    dev = tmp_path / "dev"
    dev.mkdir()
    os.mknod(dev / "widget0", 0o600 | stat.S_IFCHR, os.makedev(240, 77))
    rules = [{"name": "widget", "match": "/dev/widget*"}]
    with DriverHarness(tmp_path / "h", driver_name=DRIVER, discovery=["hostdev"],
                       plugin_options={"hostdev": {"rules": rules}}, dev_root=dev) as h:
        assert h.devices() == [("node-1", "widget-widget0")]
        c = h.allocate("w", [("node-1", "widget-widget0")])
        (dev / "widget0").unlink()
        error = h.prepare(c)[c["metadata"]["uid"]].error
        assert "hostdev device widget-widget0: node /dev/widget0 is gone" in error
        assert h.cdi_files() == []


def test_the_readme_demo_of_hostdev(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """README.md's commands: its hostdev.yaml and `drakit demo --config` with it."""
    needs("/dev/kvm", "/dev/fuse", "/dev/net/tun")
    from drakit.plugin.ops.demo import demo_main

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    config = readme.split("cat > hostdev.yaml <<'EOF'\n", 1)[1].split("EOF\n", 1)[0]
    (tmp_path / "hostdev.yaml").write_text(config)
    command = readme.split("EOF\n.venv/bin/drakit demo ", 1)[1].split("\n", 1)[0]
    args = command.replace("hostdev.yaml", str(tmp_path / "hostdev.yaml")).split()
    assert demo_main(args) == 0
    out = capsys.readouterr().out
    for device in ("kvm", "fuse", "tun"):
        assert f"  - {device}: devNode=" in out
    # as the README says: sharing and the slots capacity are shown
    assert "subsystem=misc; allowMultipleAllocations\n" in out      # kvm: shared
    assert "subsystem=misc; capacity slots=3; allowMultipleAllocations\n" in out   # fuse
    assert '"type":"c","major":10' in out and "OK: demo finished" in out


@root_only
def test_a_macvtap_on_a_veth_pair_comes_and_goes_within_a_second(
        tmp_path: Path, record_property: Callable[[str, Any], None]) -> None:
    """A macvtap interface on a veth pair makes a char device /dev/tapN (subsystem
    macvtap): its add and remove uevents republish within a second."""
    tag = os.urandom(3).hex()
    veth, peer, tap = f"hdv{tag}a", f"hdv{tag}b", f"hdt{tag}"
    rules = [{"name": "tap", "match": 'SUBSYSTEM=="macvtap"', "permissions": "rw"}]
    with DriverHarness(tmp_path / "h", driver_name=DRIVER, discovery=["hostdev"],
                       plugin_options={"hostdev": {"rules": rules}}) as h:
        subprocess.run(["ip", "link", "add", veth, "type", "veth", "peer", "name", peer],
                       check=True, timeout=10)
        try:
            made = subprocess.run(["ip", "link", "add", "link", veth, "name", tap, "type",
                                   "macvtap"], capture_output=True, text=True, timeout=10)
            if made.returncode != 0:
                pytest.skip(f"no macvtap here: {made.stderr.strip()}")
            ifindex = Path(f"/sys/class/net/{tap}/ifindex").read_text().strip()
            name = f"tap-{tap}-tap"   # named by its interface, not by the ifindex in tapN
            record_property("macvtap_add_seconds", round(wait_published(h, name, True, 1.0), 3))
            [dev] = [d for s in h.slices() for d in s["spec"]["devices"] if d["name"] == name]
            assert dev["attributes"]["subsystem"] == {"string": "macvtap"}
            assert dev["attributes"]["devNode"] == {"string": f"/dev/tap{ifindex}"}
            subprocess.run(["ip", "link", "del", tap], check=True, timeout=10)
            record_property("macvtap_remove_seconds",
                            round(wait_published(h, name, False, 1.0), 3))
        finally:
            subprocess.run(["ip", "link", "del", tap], capture_output=True, timeout=10)
            subprocess.run(["ip", "link", "del", veth], capture_output=True, timeout=10)
