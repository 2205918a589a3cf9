"""Device nodes in tests without root: ``DriverHarness(dev_root=...)`` / ``drakit run
--dev-root`` point the CDI host-node check (and the plugins' ``dev_root``) at a directory of
stand-ins made by :func:`drakit.discovery.testing.device_node_stand_in`."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from drakit.cdi.errors import HostNodeError
from drakit.cdi.hostnodes import HostNodes
from drakit.cdi.spec import DeviceNode
from drakit.discovery import (
    Device,
    DiscoveryContext,
    DiscoveryPlugin,
    Pool,
    device_node_stand_in,
)
from drakit.plugin.testing import DriverHarness

PLUGIN = '''
from drakit.discovery import Device, DiscoveryPlugin, Pool


class AcmeDiscovery(DiscoveryPlugin):
    name = "acme"

    def discover(self):
        assert str(self.context.dev_root).endswith("dev"), self.context.dev_root
        return [Pool(name=self.context.default_pool,
                     devices=[Device(name="fpga-0", device_nodes=["/dev/acme0"])])]
'''


class AcmeDiscovery(DiscoveryPlugin):
    name = "acme"

    def discover(self) -> list[Pool]:
        return [Pool(name=self.context.default_pool,
                     devices=[Device(name="fpga-0", device_nodes=["/dev/acme0"])])]


def spec_nodes(h: DriverHarness) -> list[dict[str, object]]:
    [spec] = h.cdi_files()
    doc = json.loads(spec.read_text())
    return [n for d in doc["devices"] for n in d["containerEdits"].get("deviceNodes", [])]


@pytest.mark.parametrize("subprocess", [False, True])
def test_a_stand_in_under_dev_root_is_a_device_node(tmp_path: Path, subprocess: bool) -> None:
    dev = tmp_path / "dev"
    device_node_stand_in(dev, "acme0")
    if subprocess:  # drakit run --dev-root, the plugin loaded by name
        (tmp_path / "acme_devroot.py").write_text(PLUGIN)
        h = DriverHarness(tmp_path / "h", driver_name="acme.example.com", dev_root=dev,
                          subprocess=True, discovery=["acme_devroot:AcmeDiscovery"],
                          env={"PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])})
    else:
        ctx = DiscoveryContext(driver_name="acme.example.com", node_name="node-1",
                               dev_root=dev)
        h = DriverHarness(tmp_path / "h", driver_name="acme.example.com", dev_root=dev,
                          plugins=[AcmeDiscovery(ctx)])
    with h:
        claim = h.allocate("c1", [h.devices()[0]])
        result = h.prepare(claim)[claim["metadata"]["uid"]]
        assert not result.error, result.error
        [node] = spec_nodes(h)
        null = os.stat("/dev/null").st_rdev
        assert node["path"] == "/dev/acme0" and node["type"] == "c"
        assert (node["major"], node["minor"]) == (os.major(null), os.minor(null))


def test_a_plain_file_is_refused_naming_the_path_once(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "acme0").write_text("")
    nodes = HostNodes(dev_root=tmp_path / "dev")
    with pytest.raises(HostNodeError) as e:
        nodes.fill_node(DeviceNode(path="/dev/acme0"), "devices[0].containerEdits.deviceNodes[0]")
    msg = str(e.value)
    assert msg.startswith("devices[0].containerEdits.deviceNodes[0]: host path /dev/acme0 "
                          f"(seen at {tmp_path}/dev/acme0) is a regular file, not a device "
                          "node or fifo"), msg
    assert msg.count("acme0") == 2 and "device_node_stand_in" in msg


def test_on_the_host_the_path_is_said_once(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_text("")
    with pytest.raises(HostNodeError) as e:
        HostNodes().fill_node(DeviceNode(path=str(plain)), "deviceNodes[0]")
    assert str(e.value).count(str(plain)) == 1, str(e.value)


def test_paths_outside_dev_use_the_host_root(tmp_path: Path) -> None:
    nodes = HostNodes("/", dev_root=tmp_path)
    assert nodes.local_path("/dev/acme0") == tmp_path / "acme0"
    assert nodes.local_path("/dev/../etc/x") == Path("/etc/x")
    assert nodes.local_path("/dev/dri/../../dev/zero") == tmp_path / "zero"
    assert nodes.local_path("/devx") == Path("/devx")


def test_the_stand_in_wants_a_real_device(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(ValueError, match="not a character or block device"):
        device_node_stand_in(tmp_path / "dev", "acme0", like=str(tmp_path / "f"))
    assert device_node_stand_in(tmp_path / "dev", "dri/card0").is_symlink()
