"""Hot-plug: kernel uevents for the subsystems plugins watch, debounced into one callback.

:class:`HotplugMonitor` listens to the kernel's uevent netlink socket through pyudev
(``Monitor.from_netlink(context, source="kernel")``; there is no udevd on many nodes and in
containers, and kernel events need none), keeps ``add``/``remove``/``change``/``move``
(and ``bind``/``unbind``) events of the watched subsystems, and after a quiet window (default
100 ms; at most 10 windows after the first event) calls ``callback(subsystems)`` with the
set of subsystems that saw events. The callback runs on the monitor's thread; an exception
from it is logged and the monitor goes on.

When the netlink monitor cannot be created or fails later (no netlink in a container,
permission denied), the monitor falls back to periodic rescans: every ``rescan_interval``
seconds it calls ``callback`` with all watched subsystems, and says so in the log.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Literal

import pyudev

Callback = Callable[[set[str]], None]
Mode = Literal["stopped", "udev", "rescan"]

EVENT_ACTIONS = frozenset({"add", "remove", "change", "move", "bind", "unbind"})
"""uevent actions that can change what a plugin discovers."""

_log = logging.getLogger(__name__)


def _kernel_monitor(subsystems: Iterable[str]) -> Any:
    """A started pyudev kernel-source monitor filtered to ``subsystems`` (may raise)."""
    monitor = pyudev.Monitor.from_netlink(pyudev.Context(), source="kernel")
    for subsystem in subsystems:
        monitor.filter_by(subsystem)
    monitor.start()
    return monitor


class HotplugMonitor:
    """Watches ``subsystems`` for hot-plug and calls ``callback(affected subsystems)``.

    - ``debounce``: quiet window in seconds before the callback (events inside it merge);
    - ``rescan_interval``: seconds between rescans in fallback mode;
    - ``use_udev``: False forces the rescan fallback (e.g. ``--no-udev``);
    - ``monitor_factory``: builds the pyudev monitor (tests inject a failing one); it gets
      the subsystems and returns a started monitor with ``fileno()`` and ``poll(timeout)``.

    ``start()`` starts a daemon thread; ``stop()`` ends it promptly (it wakes the thread
    through a pipe) and waits at most ``timeout`` seconds. With no subsystems there is
    nothing to watch and ``start()`` does nothing. Use as a context manager to stop on exit.
    """

    def __init__(
        self,
        subsystems: Iterable[str],
        callback: Callback,
        *,
        debounce: float = 0.1,
        rescan_interval: float = 30.0,
        use_udev: bool = True,
        monitor_factory: Callable[[Iterable[str]], Any] | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        if debounce < 0 or rescan_interval <= 0:
            raise ValueError("debounce must be >= 0 and rescan_interval > 0 seconds")
        self.subsystems = frozenset(subsystems)
        self.callback = callback
        self.debounce = debounce
        self.rescan_interval = rescan_interval
        self.use_udev = use_udev
        self.monitor_factory = monitor_factory or _kernel_monitor
        self.log = logger or _log
        self._mode: Mode = "stopped"
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._wake_r, self._wake_w = -1, -1
        self._ready = threading.Event()

    @property
    def mode(self) -> Mode:
        """``udev`` (kernel events), ``rescan`` (periodic fallback) or ``stopped``."""
        return self._mode

    def start(self, timeout: float = 5.0) -> None:
        """Start watching; returns once the event source is set up (at most ``timeout`` s),
        so that events after this call are seen. Starting twice is an error."""
        if self._thread is not None:
            raise RuntimeError("HotplugMonitor already started")
        if not self.subsystems:
            self.log.info("hot-plug: no subsystems to watch")
            return
        self._stop.clear()
        self._ready.clear()
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="drakit-hotplug", daemon=True)
        self._thread.start()
        self._ready.wait(timeout)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and wait for it (at most ``timeout`` s). Safe to call twice."""
        thread = self._thread
        if thread is None:
            return
        self._stop.set()
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")
        thread.join(timeout)
        if thread.is_alive():
            self.log.warning("hot-plug: monitor thread did not stop within %.1f s", timeout)
            return
        self._thread = None
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._wake_r, self._wake_w = -1, -1
        self._mode = "stopped"

    def __enter__(self) -> HotplugMonitor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- thread ----------------------------------------------------------------------------

    def _fire(self, subsystems: set[str]) -> None:
        try:
            self.callback(set(subsystems))
        except Exception:
            self.log.exception("hot-plug: callback failed for %s", ", ".join(sorted(subsystems)))

    def _run(self) -> None:
        monitor = None
        if self.use_udev:
            try:
                monitor = self.monitor_factory(sorted(self.subsystems))
            except Exception as e:
                self.log.warning(
                    "hot-plug: cannot open the kernel uevent monitor (%s); falling back to "
                    "rescanning %s every %.0f s", e, ", ".join(sorted(self.subsystems)),
                    self.rescan_interval)
        else:
            self.log.info("hot-plug: udev disabled; rescanning %s every %.0f s",
                          ", ".join(sorted(self.subsystems)), self.rescan_interval)
        if monitor is not None:
            self._mode = "udev"
            self.log.info("hot-plug: watching kernel uevents for %s",
                          ", ".join(sorted(self.subsystems)))
            self._ready.set()
            try:
                if self._watch(monitor):
                    return
            except Exception as e:
                self.log.warning("hot-plug: kernel uevent monitor failed (%s); falling back "
                                 "to rescanning every %.0f s", e, self.rescan_interval)
        self._mode = "rescan"
        self._ready.set()
        self._rescan_loop()

    def _rescan_loop(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._wake_r, selectors.EVENT_READ)
        try:
            while not self._stop.is_set():
                sel.select(self.rescan_interval)
                if self._stop.is_set():
                    return
                self._fire(set(self.subsystems))
        finally:
            sel.close()

    def _watch(self, monitor: Any) -> bool:
        """Read events until stopped (returns True) or the source fails (raises)."""
        sel = selectors.DefaultSelector()
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        sel.register(monitor.fileno(), selectors.EVENT_READ, "udev")
        pending: set[str] = set()
        first = last = 0.0
        try:
            while not self._stop.is_set():
                timeout = None
                if pending:
                    now = time.monotonic()
                    due = min(last + self.debounce, first + 10 * max(self.debounce, 0.01))
                    timeout = max(due - now, 0.0)
                    if timeout == 0.0:
                        self._fire(pending)
                        pending = set()
                        continue
                for key, _ in sel.select(timeout):
                    if key.data == "wake":
                        return True
                    while True:
                        device = monitor.poll(0)
                        if device is None:
                            break
                        subsystem = device.subsystem
                        if subsystem in self.subsystems and device.action in EVENT_ACTIONS:
                            self.log.debug("hot-plug: %s %s %s", device.action, subsystem,
                                           device.sys_name)
                            now = time.monotonic()
                            if not pending:
                                first = now
                            last = now
                            pending.add(subsystem)
            return True
        finally:
            sel.close()
