"""Fixtures for discovery tests: contexts, synthetic sysfs, real veth pairs (root)."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from drakit.discovery import DiscoveryContext, Pool, SysfsBuilder, is_dns_label, is_qualified_name

DRIVER = "drakit.example.com"
NODE = "node-1"


@pytest.fixture
def sysfs(tmp_path: Path) -> SysfsBuilder:
    return SysfsBuilder(tmp_path / "sys")


@pytest.fixture
def make_ctx() -> Callable[..., DiscoveryContext]:
    def make(sysfs_root: Path | str = "/sys", **options: Any) -> DiscoveryContext:
        return DiscoveryContext(driver_name=DRIVER, node_name=NODE, sysfs_root=Path(sysfs_root),
                                options=options)
    return make


def assert_api_valid(pools: list[Pool]) -> None:
    """Every device name is a DNS label; every attribute/capacity key a qualified name;
    names are unique in their pool."""
    for pool in pools:
        names = [d.name for d in pool.devices]
        assert len(names) == len(set(names)), f"duplicate names in pool {pool.name}"
        for d in pool.devices:
            assert is_dns_label(d.name), d.name
            assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", d.name) and len(d.name) <= 63
            for key in [*d.attributes, *d.capacity]:
                assert is_qualified_name(key), (d.name, key)
                assert re.fullmatch(
                    r"(([a-z0-9]([-a-z0-9]*[a-z0-9])?)(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                    r"[A-Za-z_][A-Za-z0-9_]{0,31}", key), key
            for attr in d.attributes.values():
                assert len(attr.members()) == 1
                if attr.string is not None:
                    assert len(attr.string.encode()) <= 64
        for cs in pool.counter_sets:
            assert is_dns_label(cs.name)
            assert all(is_dns_label(k) for k in cs.counters)


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)


def require_root_ip() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to create veth interfaces")
    if shutil.which("ip") is None:
        pytest.skip("needs iproute2 (ip) to create veth interfaces")


class Veth:
    """Creates veth pairs with unique names and always deletes them."""

    def __init__(self) -> None:
        self.created: list[str] = []

    def create(self) -> tuple[str, str]:
        base = "drk" + secrets.token_hex(4)  # 11 chars; +a/+b stays within IFNAMSIZ (15)
        a, b = base + "a", base + "b"
        r = _ip("link", "add", a, "type", "veth", "peer", "name", b)
        if r.returncode != 0:
            pytest.skip(f"cannot create a veth pair here: {r.stderr.strip()}")
        self.created.append(a)
        return a, b

    def delete(self, name: str) -> None:
        _ip("link", "del", name)
        if name in self.created:
            self.created.remove(name)

    def ip(self, *args: str) -> None:
        r = _ip(*args)
        assert r.returncode == 0, r.stderr

    def cleanup(self) -> None:
        for name in list(self.created):
            self.delete(name)


@pytest.fixture
def veth() -> Iterator[Veth]:
    require_root_ip()
    v = Veth()
    try:
        yield v
    finally:
        v.cleanup()


@pytest.fixture
def api_valid() -> Callable[[list[Pool]], None]:
    """The check that every produced device is publishable by name and key rules."""
    return assert_api_valid
