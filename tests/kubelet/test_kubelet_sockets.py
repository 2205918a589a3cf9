"""Socket naming (the Go helper's kubeletplugin, draplugin.go), validation, and stale-socket
handling."""

from __future__ import annotations

import base64
import hashlib
import os
import socket
from pathlib import Path

import pytest

from drakit.plugin.kubelet.sockets import (
    MAX_SOCKET_PATH_BYTES,
    SocketInUseError,
    SocketPathError,
    dra_socket_path,
    prepare_socket_path,
    registration_socket_path,
    validate_driver_name,
    validate_pod_uid,
)

REG = "/var/lib/kubelet/plugins_registry"
PLUGINS = "/var/lib/kubelet/plugins"
UID = "ad4af911-5bcd-47c5-a554-f35cea869472"


def h(data: str, n: int) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data.encode()).digest()[:n]).decode().rstrip("=")


def test_default_names() -> None:
    assert dra_socket_path(PLUGINS, "gpu.example.com") == Path(
        "/var/lib/kubelet/plugins/gpu.example.com/dra.sock")
    assert registration_socket_path(REG, "gpu.example.com") == Path(
        "/var/lib/kubelet/plugins_registry/gpu.example.com-reg.sock")


def test_pod_uid_names() -> None:
    assert dra_socket_path(PLUGINS, "gpu.example.com", UID) == Path(
        f"/var/lib/kubelet/plugins/gpu.example.com/dra-{UID}.sock")
    assert registration_socket_path(REG, "gpu.example.com", UID) == Path(
        f"{REG}/gpu.example.com-{UID}-reg.sock")


def test_hashed_uid_for_long_driver_name() -> None:
    driver = "gpu.dra-example-driver.sigs.k8s.io"  # full form would be 114 bytes
    path = registration_socket_path(REG, driver, UID)
    assert path.name == f"{driver}-{h(UID, 8)}-reg.sock"
    assert len(h(UID, 8)) == 11
    assert len(os.fsencode(path)) <= MAX_SOCKET_PATH_BYTES <= 108


def test_shortest_form_for_very_long_names() -> None:
    driver = "a" * 63
    path = registration_socket_path(REG, driver, UID)
    assert path.name == f"dra-{h(driver + chr(0) + UID, 16)}-reg.sock"
    assert driver not in path.name and UID not in path.name
    assert len(os.fsencode(path)) <= MAX_SOCKET_PATH_BYTES


def test_boundary_107_bytes_kept_108_falls_back() -> None:
    driver = "d.example.com"
    name = f"{driver}-{UID}-reg.sock"
    fit_dir = "/" + "r" * (MAX_SOCKET_PATH_BYTES - len(name) - 2)
    assert len(f"{fit_dir}/{name}") == 107
    assert registration_socket_path(fit_dir, driver, UID).name == name
    over_dir = fit_dir + "r"
    assert registration_socket_path(over_dir, driver, UID).name == f"{driver}-{h(UID, 8)}-reg.sock"


def test_dra_socket_hashed_fallback_and_error() -> None:
    driver = "a" * 63
    path = dra_socket_path("/" + "p" * 20, driver, UID)
    assert path.name == f"dra-{h(UID, 8)}"
    assert len(os.fsencode(path)) <= MAX_SOCKET_PATH_BYTES
    with pytest.raises(SocketPathError, match="at most 107 bytes"):
        dra_socket_path("/" + "p" * 40, driver, UID)
    with pytest.raises(SocketPathError, match="registration socket path"):
        registration_socket_path("/" + "r" * 80, "x" * 40)


def test_longest_driver_name_and_pod_uid_fit_the_default_plugins_dir() -> None:
    """k8s.io/dynamic-resource-allocation v0.38: the automatic rolling-update DRA socket name
    fits the AF_UNIX limit with the longest valid driver name (63 bytes) and a pod UID
    under /var/lib/kubelet/plugins; with a ".sock" suffix it would be 109 bytes."""
    driver = "d" * 59 + ".com"
    assert len(driver) == 63 and validate_driver_name(driver) == driver
    path = dra_socket_path(PLUGINS, driver, UID)
    assert path == Path(f"{PLUGINS}/{driver}/dra-{h(UID, 8)}")
    assert len(os.fsencode(path)) == 104 <= MAX_SOCKET_PATH_BYTES
    reg = registration_socket_path(REG, driver, UID)
    assert len(os.fsencode(reg)) <= MAX_SOCKET_PATH_BYTES


def test_names_are_deterministic_and_distinct() -> None:
    long_dir = "/" + "r" * 60
    a = registration_socket_path(long_dir, "driver.one", UID)
    assert a == registration_socket_path(long_dir, "driver.one", UID)
    assert a != registration_socket_path(long_dir, "driver.two", UID)
    other_uid = "ffffffff-ffff-ffff-ffff-ffffffffffff"
    assert a != registration_socket_path(long_dir, "driver.one", other_uid)


@pytest.mark.parametrize(
    "bad", ["", "../etc", "a/b", "-gpu", "gpu-", "gpu_x.com", "a" * 64, "a..b"]
)
def test_bad_driver_names_rejected(bad: str) -> None:
    with pytest.raises(SocketPathError, match="driver name"):
        validate_driver_name(bad)
    with pytest.raises(SocketPathError):
        registration_socket_path(REG, bad)


def test_upper_case_driver_name_accepted() -> None:
    assert validate_driver_name("GPU.Example.COM") == "GPU.Example.COM"


@pytest.mark.parametrize("bad", ["", "..", "../x", "a/b", "-abc", "x" * 129, "a b", "a\x00b"])
def test_bad_pod_uids_rejected(bad: str) -> None:
    with pytest.raises(SocketPathError, match="pod UID"):
        validate_pod_uid(bad)
    with pytest.raises(SocketPathError):
        dra_socket_path(PLUGINS, "gpu.example.com", bad)


def test_stale_socket_removed(tmp_path: Path) -> None:
    path = tmp_path / "d" / "dra.sock"
    path.parent.mkdir()
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()  # bound but nobody listens: a leftover of a dead process
    prepare_socket_path(path)
    assert not path.exists()


def test_live_socket_not_removed(tmp_path: Path) -> None:
    path = tmp_path / "live.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.listen(1)
    try:
        with pytest.raises(SocketInUseError):
            prepare_socket_path(path)
        assert path.exists()
    finally:
        s.close()


def test_non_socket_not_removed(tmp_path: Path) -> None:
    path = tmp_path / "dra.sock"
    path.write_text("not a socket")
    with pytest.raises(FileExistsError):
        prepare_socket_path(path)
    assert path.read_text() == "not a socket"


def test_missing_dir_created_with_restricted_mode(tmp_path: Path) -> None:
    path = tmp_path / "plugins" / "gpu.example.com" / "dra.sock"
    prepare_socket_path(path)
    assert (path.parent.stat().st_mode & 0o777) == 0o750
