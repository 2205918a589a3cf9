"""The real consumer: podman 4.3 + runc loads specs written by SpecStore.

Each test writes into its own temp spec directory; drakit.cdi.testing.PodmanCDI shows podman only
that directory (private mount namespace). Skips with a reason without root/podman/runc.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from cdi_helpers import env_device

from drakit.cdi.errors import CDIVersionError
from drakit.cdi.spec import ContainerEdits, Device, DeviceNode
from drakit.cdi.store import SpecStore
from drakit.cdi.testing import PodmanCDI

pytestmark = [pytest.mark.podman, pytest.mark.root]

UID = "3f2a9c1e-0b7d-4c52-9a8e-1d2c3b4a5f60"
UID2 = "c0ffee00-0000-4000-8000-000000000002"
VENDOR, CLASS = "drakit.example.com", "acc"
PODMAN_MAX = "0.5.0"  # podman 4.3.1 vendors CDI v0.5.2
STAT = "stat -c '%n %t:%T %F %a'"


def _store(cdi_dir: Path, max_version: str | None = PODMAN_MAX) -> SpecStore:
    return SpecStore(cdi_dir, VENDOR, CLASS, max_version=max_version)


def test_container_sees_device_nodes_and_env(
    podman_cdi: PodmanCDI, tmp_path: Path, assert_schema_valid: Callable[[Path], None]
) -> None:
    host_dev = tmp_path / "hostdev"
    host_dev.mkdir()
    os.mknod(host_dev / "acc1", 0o600 | stat.S_IFCHR, os.makedev(1, 7))  # numbers of /dev/full
    os.chmod(host_dev / "acc1", 0o660)  # not subject to the umask
    cdi_dir = tmp_path / "cdi"
    store = _store(cdi_dir)
    ids = store.write(
        UID,
        [
            Device(
                name=f"{UID}-acc0",
                container_edits=ContainerEdits(
                    env=["DRAKIT_ACC0=ready"],
                    device_nodes=[DeviceNode(path="/dev/drakit0", host_path="/dev/null")],
                ),
            ),
            Device(
                name=f"{UID}-acc1",
                container_edits=ContainerEdits(
                    env=["DRAKIT_ACC1=ready"],
                    device_nodes=[
                        DeviceNode(path="/dev/drakit1", host_path=str(host_dev / "acc1"))
                    ],
                ),
            ),
        ],
        spec_edits=ContainerEdits(env=["DRAKIT_CLAIM=" + UID]),
    )
    assert_schema_valid(store.path_for(UID))
    assert json.loads(store.path_for(UID).read_text())["cdiVersion"] == "0.5.0"
    result = podman_cdi.run(cdi_dir, ids, f"env; {STAT} /dev/drakit0 /dev/drakit1").check()
    env = result.env
    assert env["DRAKIT_ACC0"] == "ready" and env["DRAKIT_ACC1"] == "ready"
    assert env["DRAKIT_CLAIM"] == UID
    assert "/dev/drakit0 1:3 character special file 666" in result.stdout
    assert "/dev/drakit1 1:7 character special file 660" in result.stdout


def test_only_requested_devices_and_their_files_edits(
    podman_cdi: PodmanCDI, tmp_path: Path
) -> None:
    store = _store(tmp_path)
    a = store.write(UID, [env_device("a", "DEV_A=1")], spec_edits=ContainerEdits(env=["FILE1=1"]))
    store.write(UID2, [env_device("b", "DEV_B=1")], spec_edits=ContainerEdits(env=["FILE2=1"]))
    env = podman_cdi.run(tmp_path, a, "env").check().env
    assert env.get("DEV_A") == "1" and env.get("FILE1") == "1"
    assert "DEV_B" not in env and "FILE2" not in env


def test_capped_spec_loads_but_newer_version_is_rejected(
    podman_cdi: PodmanCDI, tmp_path: Path
) -> None:
    """Why the cap matters: the same devices, once with content needing 0.6.0, fail in podman."""
    capped_dir, uncapped_dir = tmp_path / "capped", tmp_path / "uncapped"
    device = env_device("acc0", "DRAKIT_OK=1")
    ids = _store(capped_dir).write(UID, [device])
    assert podman_cdi.run(capped_dir, ids, "env").check().env["DRAKIT_OK"] == "1"

    with pytest.raises(CDIVersionError, match=r"0\.6\.0"):
        _store(capped_dir).write(UID2, [device], annotations={"drakit.example.com/claim": UID})

    uncapped = _store(uncapped_dir, max_version=None)
    ids = uncapped.write(UID, [device], annotations={"drakit.example.com/claim": UID})
    assert json.loads(uncapped.path_for(UID).read_text())["cdiVersion"] == "0.6.0"
    result = podman_cdi.run(uncapped_dir, ids, "env", log_level="debug")
    assert result.returncode != 0
    assert "unresolvable CDI devices" in result.stderr
    assert 'unknown field \\"annotations\\"' in result.stderr  # podman's CDI v0.5.2 parser


def test_declaring_a_newer_version_alone_is_rejected(podman_cdi: PodmanCDI, tmp_path: Path) -> None:
    store = _store(tmp_path)
    ids = store.write(UID, [env_device("acc0")])
    assert podman_cdi.run(tmp_path, ids, "true").returncode == 0
    path = store.path_for(UID)
    path.write_text(path.read_text().replace('"0.3.0"', '"0.6.0"'))
    result = podman_cdi.run(tmp_path, ids, "true")
    assert result.returncode != 0 and "unresolvable CDI devices" in result.stderr


def test_removed_spec_is_no_longer_resolvable(podman_cdi: PodmanCDI, tmp_path: Path) -> None:
    store = _store(tmp_path)
    ids = store.write(UID, [env_device("acc0")])
    assert podman_cdi.run(tmp_path, ids, "true").returncode == 0
    assert store.write(UID, []) == []  # last device gone: file removed, not emptied
    result = podman_cdi.run(tmp_path, ids, "true")
    assert result.returncode != 0 and "unresolvable CDI devices" in result.stderr
