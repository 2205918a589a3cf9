"""Filling device nodes from the host node (stat), and the errors when it is missing."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from drakit.cdi.errors import HostNodeError
from drakit.cdi.hostnodes import HostNodes
from drakit.cdi.spec import ContainerEdits, Device, DeviceNode, Spec

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")


def test_fill_from_dev_null() -> None:
    node = HostNodes().fill_node(DeviceNode(path="/dev/drakit0", host_path="/dev/null"))
    assert (node.type, node.major, node.minor) == ("c", 1, 3)
    assert node.file_mode == stat.S_IMODE(os.stat("/dev/null").st_mode)
    assert node.path == "/dev/drakit0" and node.host_path == "/dev/null"


def test_fill_uses_path_when_no_host_path() -> None:
    node = HostNodes().fill_node(DeviceNode(path="/dev/null", file_mode=0o600))
    assert (node.type, node.major, node.minor, node.file_mode) == ("c", 1, 3, 0o600)


def test_fully_specified_node_is_not_statted() -> None:
    node = DeviceNode(path="/dev/absent-drakit", type="c", major=10, minor=200)
    assert HostNodes().fill_node(node) is node
    fifo = DeviceNode(path="/dev/absent-fifo", type="p")
    assert HostNodes().fill_node(fifo) is fifo


def test_type_without_major_is_filled_and_checked() -> None:
    node = HostNodes().fill_node(DeviceNode(path="/dev/null", type="c"))
    assert (node.major, node.minor) == (1, 3)
    assert HostNodes().fill_node(DeviceNode(path="/dev/null", type="u")).type == "u"
    with pytest.raises(HostNodeError, match="declared type 'b'"):
        HostNodes().fill_node(DeviceNode(path="/dev/null", type="b"))


def test_missing_host_node_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(HostNodeError) as exc:
        HostNodes().fill_node(DeviceNode(path="/dev/x", host_path=str(missing)), "devices[1].x")
    assert "devices[1].x" in str(exc.value) and "does not exist" in str(exc.value)


def test_regular_file_is_not_a_device_node(tmp_path: Path) -> None:
    regular = tmp_path / "file"
    regular.write_text("")
    with pytest.raises(HostNodeError, match="not a device node"):
        HostNodes().fill_node(DeviceNode(path="/dev/x", host_path=str(regular)))


def test_fifo_becomes_type_p(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    node = HostNodes().fill_node(DeviceNode(path="/dev/f", host_path=str(fifo)))
    assert node.type == "p" and node.major is None


def test_host_root_prefix_with_symlink(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "card0").symlink_to("/dev/null")
    node = HostNodes(tmp_path).fill_node(DeviceNode(path="/dev/card0"))
    assert (node.type, node.major, node.minor) == ("c", 1, 3)
    assert node.path == "/dev/card0" and node.host_path is None  # spec keeps host paths
    with pytest.raises(HostNodeError, match=str(tmp_path)):
        HostNodes(tmp_path).fill_node(DeviceNode(path="/dev/null"))  # not under the root


@needs_root
def test_host_root_prefix_with_mknod(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    os.mknod(tmp_path / "dev" / "acc0", 0o640 | stat.S_IFCHR, os.makedev(240, 7))
    os.mknod(tmp_path / "dev" / "blk0", 0o600 | stat.S_IFBLK, os.makedev(7, 99))
    nodes = HostNodes(tmp_path)
    acc = nodes.fill_node(DeviceNode(path="/dev/acc0"))
    assert (acc.type, acc.major, acc.minor, acc.file_mode) == ("c", 240, 7, 0o640)
    blk = nodes.fill_node(DeviceNode(path="/dev/b", host_path="/dev/blk0"))
    assert (blk.type, blk.major, blk.minor) == ("b", 7, 99)


def test_fill_spec_covers_both_levels_and_names_the_field(tmp_path: Path) -> None:
    spec = Spec(
        kind="example.com/gpu",
        devices=[
            Device(name="a", container_edits=ContainerEdits(env=["A=1"])),
            Device(
                name="b",
                container_edits=ContainerEdits(device_nodes=[DeviceNode(path="/dev/null")]),
            ),
        ],
        container_edits=ContainerEdits(device_nodes=[DeviceNode(path="/dev/zero")]),
    )
    filled = HostNodes().fill_spec(spec)
    assert filled.devices[1].container_edits.device_nodes[0].major == 1  # type: ignore[index]
    assert filled.container_edits.device_nodes[0].minor == 5  # type: ignore[union-attr,index]
    assert spec.devices[1].container_edits.device_nodes[0].major is None  # type: ignore[index]
    spec.devices[1].container_edits.device_nodes = [
        DeviceNode(path="/dev/x", host_path=str(tmp_path / "gone"))
    ]
    with pytest.raises(HostNodeError, match=r"devices\[1\]\.containerEdits\.deviceNodes\[0\]"):
        HostNodes().fill_spec(spec)
