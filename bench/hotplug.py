"""Hot-plug figure: a veth pair created with ``ip link add`` until a ResourceSlice holding
the new interface is published, with the agent's ``net`` discoverer on the real /sys
(udev kernel events). Needs root and ``ip``; skipped with the reason otherwise. Every veth
made here is deleted in ``finally``."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import time

from bench.env import BenchConfig, agent, wait_until
from bench.figures import Result
from drakit.plugin.testing.harness import DriverHarness


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def skip_reason() -> str | None:
    """Why hot-plug cannot be measured here, or None."""
    if os.geteuid() != 0:
        return "needs root (creates a veth pair)"
    if shutil.which("ip") is None:
        return "the 'ip' command (iproute2) is not installed"
    if not os.path.isdir("/sys/class/net"):
        return "/sys/class/net is missing"
    return None


def _published(h: DriverHarness, name: str) -> bool:
    return any(d == name for _pool, d in h.devices())


def run_hotplug(cfg: BenchConfig) -> list[Result]:
    result = Result("hotplug")
    reason = skip_reason()
    if reason:
        result.skipped = reason
        return [result]
    made: list[str] = []
    try:
        with agent(cfg, "hotplug-", discovery=("net",)) as h:
            for _ in range(cfg.scale(5, 1)):
                name = f"drkb{secrets.token_hex(3)}"
                t0 = time.monotonic()
                made.append(name)
                _ip("link", "add", name, "type", "veth", "peer", "name", f"{name}p")
                seen = wait_until(lambda n=name: _published(h, n), 10,
                                  f"interface {name} in a ResourceSlice", interval=0.002)
                result.samples.append((seen - t0) * 1000)
                _ip("link", "del", name)
                made.remove(name)
                wait_until(lambda n=name: not _published(h, n), 10,
                           f"interface {name} gone from the ResourceSlices", interval=0.01)
    finally:
        for name in made:
            subprocess.run(["ip", "link", "del", name], capture_output=True, timeout=10)
    result.notes.append("clock starts before 'ip link add' (its run time included)")
    return [result]
