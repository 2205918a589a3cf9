"""The ``drakit`` command.

- ``drakit run …``: the node agent (until SIGTERM / SIGINT).
- ``drakit apiserver …``: the embedded API server in the foreground (tests, demos).
- ``drakit fake-kubelet …``: the fake kubelet (register plugins, call prepare/unprepare).
- ``drakit cdi list|validate …``: inspect CDI spec files.
- ``drakit cleanup --driver-name D --node-name N``: delete this driver's ResourceSlices of a
  node (uninstall).
- ``drakit demo``: the whole flow on this machine's real devices (what ``make run`` runs).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence

log = logging.getLogger("drakit")


def _run(argv: Sequence[str]) -> int:
    from plugin.config import add_run_arguments, settings_from_args
    from plugin.logs import setup_logging

    parser = argparse.ArgumentParser(prog="drakit run", description="Run the DRA node agent.")
    add_run_arguments(parser)
    ns = parser.parse_args(argv)
    try:
        settings = settings_from_args(ns)
    except ValueError as e:
        parser.error(str(e))
    setup_logging(settings.log_format, settings.verbosity, settings.driver_name)
    from plugin.app import App

    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("received %s; shutting down", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        app = App(settings)
        app.start()
    except Exception as e:
        log.exception("start-up failed: %s", e)
        return 1
    try:
        while not stop.wait(3600):
            pass
    finally:
        app.stop()
    log.info("stopped")
    return 0


def _cleanup(argv: Sequence[str]) -> int:
    from plugin.app import kube_api_client
    from plugin.resourceapi import ResourceAPI
    from plugin.slices.publisher import cleanup_slices

    parser = argparse.ArgumentParser(
        prog="drakit cleanup", description="Delete a driver's ResourceSlices of one node."
    )
    parser.add_argument("--driver-name", required=True)
    parser.add_argument("--node-name", required=True)
    parser.add_argument("--kubeconfig", default=None)
    ns = parser.parse_args(argv)
    deleted = cleanup_slices(
        ResourceAPI(kube_api_client(ns.kubeconfig)), ns.driver_name, ns.node_name
    )
    print(f"deleted {deleted} ResourceSlice(s) of driver {ns.driver_name} on node {ns.node_name}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    commands = {
        "run": "run the DRA node agent",
        "apiserver": "run the embedded API server (tests, demos)",
        "fake-kubelet": "run the fake kubelet",
        "cdi": "list or validate CDI spec files",
        "cleanup": "delete a driver's ResourceSlices of a node",
        "demo": "the whole flow on this machine's devices (make run)",
    }
    if not args or args[0] in ("-h", "--help") or args[0] not in commands:
        width = max(len(c) for c in commands)
        print("usage: drakit COMMAND [ARGS]\n\ncommands:")
        for c, h in commands.items():
            print(f"  {c:<{width}}  {h}")
        return 0 if args and args[0] in ("-h", "--help") else 2
    cmd, rest = args[0], args[1:]
    if cmd == "run":
        return _run(rest)
    if cmd == "apiserver":
        from plugin.testing.apiserver import apiserver_main

        return apiserver_main(rest)
    if cmd == "fake-kubelet":
        from plugin.testing.fake_kubelet import fake_kubelet_main

        return fake_kubelet_main(rest)
    if cmd == "cdi":
        from cdi.cli import cdi_main

        return cdi_main(rest)
    if cmd == "cleanup":
        return _cleanup(rest)
    from plugin.demo import demo_main

    return demo_main(rest)


if __name__ == "__main__":
    sys.exit(main())
