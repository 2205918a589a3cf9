"""``drakit apiserver``: the embedded API server
(:class:`~drakit.plugin.testing.apiserver.server.EmbeddedAPIServer`) in the foreground, optionally
writing a kubeconfig for it.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

from drakit.plugin.testing.apiserver.server import EmbeddedAPIServer

__all__ = ["apiserver_main"]


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="drakit apiserver",
        description="Run drakit's embedded Kubernetes API server in the foreground.",
        allow_abbrev=False,
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=0, help="port (0: any free port)")
    parser.add_argument("--kubeconfig-out", metavar="FILE",
                        help="write a kubeconfig for this server to FILE")
    parser.add_argument("--served-versions", default="v1",
                        help="comma-separated resource.k8s.io versions to serve "
                             "(v1, v1beta2, v1beta1); the first is preferred")
    return parser.parse_args(argv)


def apiserver_main(argv: Sequence[str] | None = None, *, ready: threading.Event | None = None,
                   stop: threading.Event | None = None) -> int:
    """``drakit apiserver [--port N] [--kubeconfig-out FILE] [--served-versions v1,...]``.

    Runs until SIGTERM/SIGINT (or ``stop`` is set, for callers not on the main thread),
    printing where it listens. Returns the exit code (0; 2 for bad arguments)."""

    args = _parse_args(argv)
    versions = [v.strip() for v in args.served_versions.split(",") if v.strip()]
    try:
        server = EmbeddedAPIServer(args.host, args.port, versions)
    except ValueError as exc:
        print(f"drakit apiserver: {exc}", file=sys.stderr)
        return 2
    stop_event = stop or threading.Event()
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, lambda *_: stop_event.set())
    try:
        with server:
            print(f"drakit apiserver listening on {server.url} "
                  f"(resource.k8s.io {', '.join(server.served_versions)})", flush=True)
            if args.kubeconfig_out:
                path = server.write_kubeconfig(args.kubeconfig_out)
                print(f"kubeconfig written to {path}", flush=True)
            if ready is not None:
                ready.set()
            while not stop_event.wait(0.5):
                pass
        print("drakit apiserver stopped", flush=True)
        return 0
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
