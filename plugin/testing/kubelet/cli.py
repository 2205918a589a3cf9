"""``drakit fake-kubelet``: a :class:`~drakit.plugin.testing.kubelet.fake.FakeKubelet` from the
command line. It registers a plugin and optionally prepares, unprepares and watches health,
printing one JSON object a line on stdout (``registered``, ``prepared``, ``unprepared``,
``health``, ``error``).
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict
from types import FrameType
from typing import Any

from drakit.plugin.testing.kubelet.calls import KubeletCallError, KubeletCheckError
from drakit.plugin.testing.kubelet.fake import FakeKubelet

__all__ = ["fake_kubelet_main"]


def _parse_claim(text: str) -> tuple[str, str, str]:
    parts = text.split("/")
    if len(parts) != 3 or not all(parts):
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAMESPACE/NAME/UID")
    return parts[0], parts[1], parts[2]


def _emit(event: str, **data: Any) -> None:
    print(json.dumps({"event": event, **data}, default=str), flush=True)


def fake_kubelet_main(argv: Sequence[str] | None = None) -> int:
    """``drakit fake-kubelet``: register a plugin and optionally call it; JSON lines on stdout.

    Exit codes: 0 success, 1 a claim failed or the answer broke a kubelet check, 2 no
    registration within ``--timeout``.
    """
    parser = argparse.ArgumentParser(
        prog="drakit fake-kubelet",
        description="Act as a kubelet toward a DRA plugin: register it, then prepare/unprepare.",
        allow_abbrev=False,
    )
    parser.add_argument("--registrar-dir", required=True,
                        help="kubelet plugin registrar directory to watch")
    parser.add_argument("--kubelet-version", default="1.34", help="e.g. 1.33, 1.34, 1.37")
    parser.add_argument("--driver", help="driver name to wait for (default: the first one)")
    parser.add_argument("--timeout", type=float, default=30.0,
                        help="seconds to wait for the registration")
    parser.add_argument("--prepare", type=_parse_claim, action="append", default=[],
                        metavar="NS/NAME/UID", help="claim to prepare (repeatable)")
    parser.add_argument("--unprepare", type=_parse_claim, action="append", default=[],
                        metavar="NS/NAME/UID", help="claim to unprepare (repeatable)")
    parser.add_argument("--watch-health", type=float, default=0.0, metavar="SECONDS",
                        help="print health messages for this long")
    parser.add_argument("--serve", action="store_true",
                        help="keep registering plugins until SIGINT/SIGTERM")
    parser.add_argument("--reject", metavar="REASON", help="refuse registrations with REASON")
    args = parser.parse_args(argv)

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, on_signal)
    try:
        return _run_cli(args, stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run_cli(args: argparse.Namespace, stop: threading.Event) -> int:

    with FakeKubelet(args.registrar_dir, args.kubelet_version,
                     reject_reason=args.reject) as kubelet:
        driver = args.driver
        deadline = time.monotonic() + args.timeout
        while driver is None and time.monotonic() < deadline and not stop.is_set():
            plugins = kubelet.registered_plugins()
            if plugins:
                driver = plugins[0].driver_name
            else:
                stop.wait(0.1)
        try:
            if driver is None:
                raise TimeoutError(f"no plugin registered within {args.timeout}s")
            plugin = kubelet.wait_registered(driver, max(0.0, deadline - time.monotonic()))
        except TimeoutError as exc:
            _emit("error", message=str(exc), rejections=[asdict(r) for r in kubelet.rejections])
            return 2
        _emit("registered", **asdict(plugin))
        rc = 0
        try:
            if args.prepare:
                results = kubelet.node_prepare_resources(driver, args.prepare)
                for uid, result in results.items():
                    _emit("prepared", uid=uid, **asdict(result))
                    rc = rc or (1 if result.error else 0)
            if args.unprepare:
                errors = kubelet.node_unprepare_resources(driver, args.unprepare)
                for uid, error in errors.items():
                    _emit("unprepared", uid=uid, error=error)
                    rc = rc or (1 if error else 0)
        except (KubeletCallError, KubeletCheckError) as exc:
            _emit("error", message=str(exc))
            return 1
        if args.watch_health > 0:
            watch = kubelet.watch_health(driver)
            end = time.monotonic() + args.watch_health
            while not stop.is_set() and (left := end - time.monotonic()) > 0:
                try:
                    reports = watch.next(timeout=min(left, 1.0))
                except TimeoutError:
                    continue
                _emit("health", devices=[asdict(r) for r in reports])
            watch.cancel()
        if args.serve:
            seen = set(kubelet.registered_plugins())
            while not stop.wait(0.2):
                for p in kubelet.registered_plugins():
                    if p not in seen:
                        seen.add(p)
                        _emit("registered", **asdict(p))
        return rc
