"""HotplugMonitor: real kernel uevents from veth pairs, debouncing, the rescan fallback."""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pytest

from drakit.discovery import DiscoveryContext, HotplugMonitor
from drakit.discovery.builtin.net import NetDiscovery

Ctx = Callable[..., DiscoveryContext]
WAIT = 10.0  # bound of every wait; the events themselves take milliseconds


@dataclass
class FakeDevice:
    action: str
    subsystem: str
    sys_name: str = "x"


class FakeMonitor:
    """A pyudev-monitor-shaped event source fed by the test through a pipe."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe()
        os.set_blocking(self.r, False)
        self.events: queue.SimpleQueue[FakeDevice] = queue.SimpleQueue()

    def fileno(self) -> int:
        return self.r

    def emit(self, *events: FakeDevice) -> None:
        for e in events:
            self.events.put(e)
        os.write(self.w, b"!")

    def poll(self, timeout: float) -> FakeDevice | None:
        try:
            return self.events.get_nowait()
        except queue.Empty:
            pass
        # Drain the wake-up bytes, then look again: an event put between the first look and
        # the drain would otherwise lose its wake-up and wait in the queue unseen.
        with contextlib.suppress(BlockingIOError):
            os.read(self.r, 4096)
        try:
            return self.events.get_nowait()
        except queue.Empty:
            return None

    def close(self) -> None:
        os.close(self.r)
        os.close(self.w)


class Calls:
    def __init__(self) -> None:
        self.q: queue.Queue[set[str]] = queue.Queue()

    def __call__(self, subsystems: set[str]) -> None:
        self.q.put(subsystems)

    def next(self, timeout: float = WAIT) -> set[str]:
        return self.q.get(timeout=timeout)


def test_debounced_events_make_one_callback() -> None:
    fake = FakeMonitor()
    calls = Calls()
    mon = HotplugMonitor(["net", "pci"], calls, debounce=0.05,
                         monitor_factory=lambda subsystems: fake)
    try:
        mon.start()
        assert mon.mode == "udev"
        fake.emit(FakeDevice("add", "net"), FakeDevice("remove", "net"),
                  FakeDevice("add", "pci"), FakeDevice("add", "block"),
                  FakeDevice("online", "net"))
        assert calls.next() == {"net", "pci"}
        fake.emit(FakeDevice("add", "block"))  # not watched: no callback
        fake.emit(FakeDevice("change", "pci"))
        assert calls.next() == {"pci"}
        assert calls.q.empty()
    finally:
        mon.stop()
        fake.close()
    assert mon.mode == "stopped"


def test_callback_errors_do_not_stop_the_monitor() -> None:
    fake = FakeMonitor()
    calls = Calls()
    first = threading.Event()

    def callback(subsystems: set[str]) -> None:
        if not first.is_set():
            first.set()
            raise RuntimeError("boom")
        calls(subsystems)

    with HotplugMonitor(["net"], callback, debounce=0.01,
                        monitor_factory=lambda s: fake) as mon:
        fake.emit(FakeDevice("add", "net"))
        assert first.wait(WAIT)
        fake.emit(FakeDevice("remove", "net"))
        assert calls.next() == {"net"}
        assert mon.mode == "udev"
    fake.close()


def test_fallback_to_rescans_when_no_netlink(caplog: pytest.LogCaptureFixture) -> None:
    def no_netlink(subsystems: Iterable[str]) -> Any:
        raise OSError(93, "Protocol not supported")

    calls = Calls()
    mon = HotplugMonitor(["net"], calls, rescan_interval=0.05, monitor_factory=no_netlink)
    with caplog.at_level("WARNING"):
        mon.start()
    try:
        assert mon.mode == "rescan"
        assert calls.next() == {"net"}
        assert calls.next() == {"net"}
    finally:
        mon.stop()
    assert mon.mode == "stopped"
    assert any("falling back to rescanning" in r.getMessage() for r in caplog.records)


def test_stop_is_prompt_with_long_interval() -> None:
    mon = HotplugMonitor(["net"], lambda s: None, rescan_interval=3600, use_udev=False)
    mon.start()
    thread = mon._thread
    mon.stop(timeout=WAIT)
    assert thread is not None and not thread.is_alive()
    mon.stop()  # twice is fine


def test_no_subsystems_means_no_thread() -> None:
    mon = HotplugMonitor([], lambda s: None)
    mon.start()
    assert mon.mode == "stopped" and mon._thread is None
    mon.stop()


def test_invalid_settings() -> None:
    with pytest.raises(ValueError):
        HotplugMonitor(["net"], lambda s: None, rescan_interval=0)


@pytest.mark.root
def test_real_veth_hotplug(veth: Any, make_ctx: Ctx) -> None:
    """A veth created here reaches the callback through the kernel's uevents, and net
    discovery then lists it; deleting it removes it again."""
    plugin = NetDiscovery(make_ctx())
    calls = Calls()
    mon = HotplugMonitor(NetDiscovery.subsystems, calls, debounce=0.05)
    mon.start()
    try:
        if mon.mode != "udev":
            pytest.skip("kernel uevent netlink socket unavailable here")
        a, b = veth.create()

        def names() -> set[str]:
            return {d.attributes["interfaceName"].string for d in plugin.discover()[0].devices}

        def wait_until(pred: Callable[[set[str]], bool]) -> set[str]:
            deadline = time.monotonic() + WAIT
            while True:  # each callback re-runs discovery, as the node agent does
                left = deadline - time.monotonic()
                assert left > 0, "the change did not show within the bound"
                assert "net" in calls.next(left), "no net event within the bound"
                found = names()
                if pred(found):
                    return found

        found = wait_until(lambda f: a in f and b in f)
        assert a in found and b in found
        veth.delete(a)  # deletes the pair
        found = wait_until(lambda f: a not in f and b not in f)
        assert a not in found and b not in found
    finally:
        mon.stop()
